package model

// Tensor inventories of decoder-only language models: Llama-style,
// mixture-of-experts, Phi, Falcon, GPT-2, GPT-NeoX and OPT.

import (
	"github.com/gpumem/gpumem"
)

// buildLlama is the LlamaForCausalLM layout and its relatives: embedding,
// per layer attention (or MLA) + gated MLP (or MoE) + RMSNorms, final
// norm, untied lm_head.
func (s Spec) buildLlama(b *builder) {
	H, V, D := s.Hidden, s.Vocab, s.HeadDim
	nk := s.norm()
	b.add("model.embed_tokens.weight", V, H)
	b.stack(s.Layers, s.layerKinds(), func(i int64) {
		p := "model.layers." + itoa(i) + "."
		if s.MLA.Enabled() {
			m := s.MLA
			qk := m.QKNopeHeadDim + m.QKRopeHeadDim
			if m.QLoRARank > 0 {
				b.linearP(p, "self_attn.q_a_proj", m.QLoRARank, H, s.Bias.QKV)
				b.addP(p, "self_attn.q_a_layernorm.weight", m.QLoRARank)
				b.linearP(p, "self_attn.q_b_proj", s.Heads*qk, m.QLoRARank, false)
			} else {
				b.linearP(p, "self_attn.q_proj", s.Heads*qk, H, false)
			}
			b.linearP(p, "self_attn.kv_a_proj_with_mqa", m.KVLoRARank+m.QKRopeHeadDim, H, s.Bias.QKV)
			b.addP(p, "self_attn.kv_a_layernorm.weight", m.KVLoRARank)
			b.linearP(p, "self_attn.kv_b_proj", s.Heads*(m.QKNopeHeadDim+m.VHeadDim), m.KVLoRARank, false)
			b.linearP(p, "self_attn.o_proj", H, s.Heads*m.VHeadDim, s.Bias.Out)
		} else {
			b.linearP(p, "self_attn.q_proj", s.Heads*D, H, s.Bias.QKV)
			b.linearP(p, "self_attn.k_proj", s.KVHeads*D, H, s.Bias.QKV)
			b.linearP(p, "self_attn.v_proj", s.KVHeads*D, H, s.Bias.QKV)
			b.linearP(p, "self_attn.o_proj", H, s.Heads*D, s.Bias.Out)
			if s.Family == "gpt_oss" {
				// GptOssAttention.sinks: one learned logit per query head.
				b.addP(p, "self_attn.sinks", s.Heads)
			}
			if s.QKNorm {
				b.addP(p, "self_attn.q_norm.weight", D)
				b.addP(p, "self_attn.k_norm.weight", D)
			}
		}
		switch {
		case s.isMoELayer(i):
			s.buildMoE(b, p)
		case s.Family == "llama4_text":
			s.gatedMLP(b, p+"feed_forward.", s.Intermediate)
		default:
			s.gatedMLP(b, p+"mlp.", s.Intermediate)
		}
		b.normP(p, "input_layernorm", H, nk)
		b.normP(p, "post_attention_layernorm", H, nk)
		if s.SandwichNorm {
			b.normP(p, "pre_feedforward_layernorm", H, nk)
			b.normP(p, "post_feedforward_layernorm", H, nk)
		}
	})
	b.norm("model.norm", H, nk)
	if s.Vision != nil && (s.Family == "qwen2_vl" || s.Family == "qwen2_5_vl") {
		s.Vision.buildQwen2VLVision(b)
	}
	s.classHead(b, H, func() {
		if !s.TiedEmbeddings {
			b.linear("lm_head", V, H, s.Bias.LMHead)
		}
	})
}

func (s Spec) gatedMLP(b *builder, p string, inter int64) {
	H := s.Hidden
	if s.Gated || !s.Generic {
		b.linearP(p, "gate_proj", inter, H, s.Bias.MLP)
	}
	b.linearP(p, "up_proj", inter, H, s.Bias.MLP)
	b.linearP(p, "down_proj", H, inter, s.Bias.MLP)
}

// buildMoE adds a sparse MoE block with checkpoint names per family:
// mixtral block_sparse_moe.{gate, experts.E.w1/w2/w3}; qwen2_moe
// mlp.{gate, experts.E.*, shared_expert.*, shared_expert_gate};
// deepseek mlp.{gate, experts.E.*, shared_experts.*} (v3's gate also
// stores e_score_correction_bias, an fp32 buffer in the checkpoint).
func (s Spec) buildMoE(b *builder, p string) {
	H, E, I := s.Hidden, s.MoE.Experts, s.MoE.Intermediate
	switch s.Family {
	case "gpt_oss":
		// GptOssTopKRouter (weight, bias) and GptOssExperts: the experts
		// are four stacked parameters with the expert index leading,
		// gate_up_proj (E, H, 2I) + bias (E, 2I), down_proj (E, I, H) +
		// bias (E, H) (transformers v4.55.0 modeling_gpt_oss.py). The
		// published checkpoint stores the two projections in MXFP4
		// (*_blocks, *_scales); this is the dequantized (bf16) inventory.
		b.addP(p, "mlp.router.weight", E, H)
		b.addP(p, "mlp.router.bias", E)
		b.addP(p, "mlp.experts.gate_up_proj", E, H, 2*I)
		b.addP(p, "mlp.experts.gate_up_proj_bias", E, 2*I)
		b.addP(p, "mlp.experts.down_proj", E, I, H)
		b.addP(p, "mlp.experts.down_proj_bias", E, H)
	case "llama4_text":
		// Llama4TextMoe (transformers v4.51.0 modeling_llama4.py):
		// Llama4TextExperts stacks the experts, gate_up_proj (E, H, 2I)
		// and down_proj (E, I, H) without bias; the router is a
		// bias-free linear; shared_expert is a Llama4TextMLP.
		b.addP(p, "feed_forward.experts.gate_up_proj", E, H, 2*I)
		b.addP(p, "feed_forward.experts.down_proj", E, I, H)
		b.addP(p, "feed_forward.router.weight", E, H)
		s.gatedMLP(b, p+"feed_forward.shared_expert.", s.MoE.SharedIntermediate)
	case "mixtral":
		b.addP(p, "block_sparse_moe.gate.weight", E, H)
		b.repeat(E, func(e int64) {
			q := p + "block_sparse_moe.experts." + itoa(e) + "."
			b.addP(q, "w1.weight", I, H)
			b.addP(q, "w2.weight", H, I)
			b.addP(q, "w3.weight", I, H)
		})
	case "qwen2_moe", "qwen3_moe":
		b.addP(p, "mlp.gate.weight", E, H)
		b.repeat(E, func(e int64) { s.gatedMLP(b, p+"mlp.experts."+itoa(e)+".", I) })
		if s.MoE.Shared > 0 {
			s.gatedMLP(b, p+"mlp.shared_expert.", s.MoE.SharedIntermediate)
			b.addP(p, "mlp.shared_expert_gate.weight", 1, H)
		}
	default:
		b.addP(p, "mlp.gate.weight", E, H)
		if s.Family == "deepseek_v3" {
			b.addTP(gpumem.FP32, p, "mlp.gate.e_score_correction_bias", E)
		}
		b.repeat(E, func(e int64) { s.gatedMLP(b, p+"mlp.experts."+itoa(e)+".", I) })
		if s.MoE.Shared > 0 {
			s.gatedMLP(b, p+"mlp.shared_experts.", s.MoE.SharedIntermediate)
		}
	}
}

// buildPhi3 is Phi3ForCausalLM: fused qkv_proj and gate_up_proj.
func (s Spec) buildPhi3(b *builder) {
	H, V, D, I := s.Hidden, s.Vocab, s.HeadDim, s.Intermediate
	b.add("model.embed_tokens.weight", V, H)
	b.stack(s.Layers, nil, func(i int64) {
		p := "model.layers." + itoa(i) + "."
		b.addP(p, "self_attn.o_proj.weight", H, s.Heads*D)
		b.addP(p, "self_attn.qkv_proj.weight", (s.Heads+2*s.KVHeads)*D, H)
		b.addP(p, "mlp.gate_up_proj.weight", 2*I, H)
		b.addP(p, "mlp.down_proj.weight", H, I)
		b.addP(p, "input_layernorm.weight", H)
		b.addP(p, "post_attention_layernorm.weight", H)
	})
	b.add("model.norm.weight", H)
	if !s.TiedEmbeddings {
		b.add("lm_head.weight", V, H)
	}
}

// buildPhi is PhiForCausalLM (phi-1, phi-1.5, phi-2): parallel block
// with one LayerNorm, biases everywhere, lm_head with a bias.
func (s Spec) buildPhi(b *builder) {
	H, V, D, I := s.Hidden, s.Vocab, s.HeadDim, s.Intermediate
	b.add("model.embed_tokens.weight", V, H)
	b.stack(s.Layers, nil, func(i int64) {
		p := "model.layers." + itoa(i) + "."
		b.linearP(p, "self_attn.q_proj", s.Heads*D, H, true)
		b.linearP(p, "self_attn.k_proj", s.KVHeads*D, H, true)
		b.linearP(p, "self_attn.v_proj", s.KVHeads*D, H, true)
		b.linearP(p, "self_attn.dense", H, s.Heads*D, true)
		if s.QKNorm {
			b.normP(p, "self_attn.q_layernorm", D, LayerNorm)
			b.normP(p, "self_attn.k_layernorm", D, LayerNorm)
		}
		b.linearP(p, "mlp.fc1", I, H, true)
		b.linearP(p, "mlp.fc2", H, I, true)
		b.normP(p, "input_layernorm", H, LayerNorm)
	})
	b.norm("model.final_layernorm", H, LayerNorm)
	if !s.TiedEmbeddings {
		b.linear("lm_head", V, H, true)
	}
}

// buildFalcon is FalconForCausalLM: fused query_key_value of
// (heads + 2·kv_heads)·head_dim rows (covers multi_query and
// new_decoder_architecture), parallel attention norms; and
// BloomForCausalLM, its sequential relative with
// word_embeddings_layernorm (transformers v4.55.0 modeling_bloom.py).
func (s Spec) buildFalcon(b *builder) {
	H, V, D, I := s.Hidden, s.Vocab, s.HeadDim, s.Intermediate
	b.add("transformer.word_embeddings.weight", V, H)
	if s.Family == "bloom" {
		// BloomModel: LayerNorm after the embedding (modeling_bloom.py).
		b.norm("transformer.word_embeddings_layernorm", H, LayerNorm)
	}
	b.stack(s.Layers, nil, func(i int64) {
		p := "transformer.h." + itoa(i) + "."
		b.linearP(p, "self_attention.query_key_value", (s.Heads+2*s.KVHeads)*D, H, s.Bias.QKV)
		b.linearP(p, "self_attention.dense", H, s.Heads*D, s.Bias.Out)
		b.linearP(p, "mlp.dense_h_to_4h", I, H, s.Bias.MLP)
		b.linearP(p, "mlp.dense_4h_to_h", H, I, s.Bias.MLP)
		switch s.ParallelNorms {
		case 2:
			b.normP(p, "ln_attn", H, LayerNorm)
			b.normP(p, "ln_mlp", H, LayerNorm)
		case 1:
			b.normP(p, "input_layernorm", H, LayerNorm)
		default:
			b.normP(p, "input_layernorm", H, LayerNorm)
			b.normP(p, "post_attention_layernorm", H, LayerNorm)
		}
	})
	b.norm("transformer.ln_f", H, LayerNorm)
	if !s.TiedEmbeddings {
		b.add("lm_head.weight", V, H)
	}
}

// buildGPT2 is GPT2LMHeadModel (Conv1D weights stored [in, out]) and
// GPTBigCodeForCausalLM (nn.Linear, c_attn of H + 2·kv·head_dim rows).
func (s Spec) buildGPT2(b *builder) {
	H, V, I := s.Hidden, s.Vocab, s.Intermediate
	b.add("transformer.wte.weight", V, H)
	b.add("transformer.wpe.weight", s.Positions, H)
	big := s.Family == "gpt_bigcode"
	b.stack(s.Layers, nil, func(i int64) {
		p := "transformer.h." + itoa(i) + "."
		b.normP(p, "ln_1", H, LayerNorm)
		if big {
			b.linearP(p, "attn.c_attn", s.Heads*s.HeadDim+2*s.KVHeads*s.HeadDim, H, true)
			b.linearP(p, "attn.c_proj", H, s.Heads*s.HeadDim, true)
		} else {
			b.addP(p, "attn.c_attn.weight", H, 3*H)
			b.addP(p, "attn.c_attn.bias", 3*H)
			b.addP(p, "attn.c_proj.weight", H, H)
			b.addP(p, "attn.c_proj.bias", H)
		}
		b.normP(p, "ln_2", H, LayerNorm)
		if big {
			b.linearP(p, "mlp.c_fc", I, H, true)
			b.linearP(p, "mlp.c_proj", H, I, true)
		} else {
			b.addP(p, "mlp.c_fc.weight", H, I)
			b.addP(p, "mlp.c_fc.bias", I)
			b.addP(p, "mlp.c_proj.weight", I, H)
			b.addP(p, "mlp.c_proj.bias", H)
		}
	})
	b.norm("transformer.ln_f", H, LayerNorm)
	s.classHead(b, H, func() {
		if !s.TiedEmbeddings {
			b.add("lm_head.weight", V, H)
		}
	})
}

// buildNeoX is GPTNeoXForCausalLM (pythia): fused query_key_value with
// bias, two LayerNorms per layer, untied embed_out.
func (s Spec) buildNeoX(b *builder) {
	H, V, I := s.Hidden, s.Vocab, s.Intermediate
	b.add("gpt_neox.embed_in.weight", V, H)
	b.stack(s.Layers, nil, func(i int64) {
		p := "gpt_neox.layers." + itoa(i) + "."
		b.normP(p, "input_layernorm", H, LayerNorm)
		b.normP(p, "post_attention_layernorm", H, LayerNorm)
		b.linearP(p, "attention.query_key_value", 3*s.Heads*s.HeadDim, H, s.Bias.QKV)
		b.linearP(p, "attention.dense", H, s.Heads*s.HeadDim, s.Bias.QKV)
		b.linearP(p, "mlp.dense_h_to_4h", I, H, true)
		b.linearP(p, "mlp.dense_4h_to_h", H, I, true)
	})
	b.norm("gpt_neox.final_layer_norm", H, LayerNorm)
	if !s.TiedEmbeddings {
		b.add("embed_out.weight", V, H)
	}
}

// buildOPT is OPTForCausalLM: learned positions with OPT's offset of 2
// rows (included in Positions), optional project_in/out when
// word_embed_proj_dim differs from hidden_size, tied lm_head.
func (s Spec) buildOPT(b *builder) {
	H, V, I := s.Hidden, s.Vocab, s.Intermediate
	E := s.EmbedDim
	if E == 0 {
		E = H
	}
	p0 := "model.decoder."
	b.addP(p0, "embed_tokens.weight", V, E)
	b.addP(p0, "embed_positions.weight", s.Positions, H)
	if !s.NoFinalNorm {
		b.normP(p0, "final_layer_norm", H, LayerNorm)
	}
	if E != H {
		b.addP(p0, "project_out.weight", E, H)
		b.addP(p0, "project_in.weight", H, E)
	}
	b.stack(s.Layers, nil, func(i int64) {
		p := p0 + "layers." + itoa(i) + "."
		b.linearP(p, "self_attn.k_proj", H, H, true)
		b.linearP(p, "self_attn.v_proj", H, H, true)
		b.linearP(p, "self_attn.q_proj", H, H, true)
		b.linearP(p, "self_attn.out_proj", H, H, true)
		b.normP(p, "self_attn_layer_norm", H, LayerNorm)
		b.linearP(p, "fc1", I, H, true)
		b.linearP(p, "fc2", H, I, true)
		b.normP(p, "final_layer_norm", H, LayerNorm)
	})
	s.classHead(b, E, func() {
		if !s.TiedEmbeddings {
			b.add("lm_head.weight", V, E)
		}
	})
}
