package model

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// layout is the tensor naming and structure of a family of Hugging Face
// classes.
type layout uint8

const (
	layoutLlama layout = iota // llama, mistral, mixtral, qwen2(_moe), qwen3, gemma*, deepseek_v2/v3, generic
	layoutPhi3
	layoutPhi
	layoutFalcon
	layoutGPT2
	layoutBigCode
	layoutNeoX
	layoutOPT
	layoutBERT
	layoutT5
	layoutWhisper
	layoutVision       // vit
	layoutCLIPVision   // clip_vision_model
	layoutSiglipVision // siglip_vision_model
	layoutCLIPText     // clip_text_model
	layoutMultimodal   // llava, clip, gemma3
	layoutCogVideoX    // diffusers CogVideoXTransformer3DModel
	layoutUNet         // diffusers UNet2DConditionModel
	layoutVAE          // diffusers AutoencoderKL
	layoutFlux         // diffusers FluxTransformer2DModel
	layoutMamba        // transformers MambaForCausalLM
	layoutMamba2       // transformers Mamba2ForCausalLM
	layoutJamba        // transformers JambaForCausalLM
	layoutSD3          // diffusers SD3Transformer2DModel
	layoutBackbone     // resnet, convnext, swin (vision_cnn.go)
	layoutZamba        // transformers ZambaForCausalLM, Zamba2ForCausalLM
)

func layoutOf(s *Spec) layout {
	switch s.Family {
	case "phi3":
		return layoutPhi3
	case "phi":
		return layoutPhi
	case "falcon", "bloom":
		return layoutFalcon
	case "gpt2":
		return layoutGPT2
	case "gpt_bigcode":
		return layoutBigCode
	case "gpt_neox":
		return layoutNeoX
	case "opt":
		return layoutOPT
	case "bert", "roberta":
		return layoutBERT
	case "t5", "mt5":
		return layoutT5
	case "whisper":
		return layoutWhisper
	case "vit":
		return layoutVision
	case "clip_vision_model":
		return layoutCLIPVision
	case "siglip_vision_model":
		return layoutSiglipVision
	case "clip_text_model":
		return layoutCLIPText
	case "llava", "clip", "gemma3":
		return layoutMultimodal
	case "cogvideox":
		return layoutCogVideoX
	case FamilyUNet:
		return layoutUNet
	case FamilyVAE:
		return layoutVAE
	case FamilyFlux:
		return layoutFlux
	case "mamba":
		return layoutMamba
	case FamilyMamba2:
		return layoutMamba2
	case FamilyJamba:
		return layoutJamba
	case FamilySD3:
		return layoutSD3
	case FamilyZamba, FamilyZamba2:
		return layoutZamba
	case "resnet", "convnext", "swin", "efficientnet":
		return layoutBackbone
	}
	return layoutLlama
}

func (l layout) hasVocab() bool {
	switch l {
	case layoutVision, layoutCLIPVision, layoutSiglipVision, layoutMultimodal, layoutCogVideoX, layoutBackbone, layoutUNet, layoutVAE, layoutFlux, layoutSD3:
		return false
	}
	return true
}

// builder collects (or only counts) the tensors of a Spec. Counting mode
// keeps no names, which makes Params cheap for large MoE models. Folding
// mode (and counting, which implies it) builds one layer of each kind
// and one expert of each block, each tensor standing for mult of them,
// so that its cost follows the distinct layer shapes, not the layer
// count.
type builder struct {
	count   bool
	fold    bool
	limit   int64 // maximum tensors; 0 means no limit
	prefix  string
	dt      gpumem.DType
	out     []gpumem.Tensor
	runs    []Run // the output of folding mode
	mult    int64 // tensors each added one stands for (folding); 0 means 1
	layers  int64 // of mult, the layers of a stack (folding); 0 means 1
	n       int64 // elements so far
	tensors int64
	err     error
}

var errTooMany = errors.New("too many tensors")

func (b *builder) addT(dt gpumem.DType, name string, shape ...int64) {
	b.addTP(dt, "", name, shape...)
}

// addTP adds the tensor prefix+name; the name is only built when
// collecting, so that counting allocates little.
func (b *builder) addTP(dt gpumem.DType, prefix, name string, shape ...int64) {
	if b.err != nil {
		return
	}
	e, ok := checked.MulAll(shape...)
	if !ok {
		b.err = fmt.Errorf("tensor %s%s%s of shape %v overflows int64 elements", b.prefix, prefix, name, slices.Clone(shape))
		return
	}
	m := max(b.mult, 1)
	if e, ok = checked.Mul(e, m); !ok {
		b.err = fmt.Errorf("parameter count overflows int64 at tensor %s%s%s", b.prefix, prefix, name)
		return
	}
	if b.n, ok = checked.Add(b.n, e); !ok {
		b.err = fmt.Errorf("parameter count overflows int64 at tensor %s%s%s", b.prefix, prefix, name)
		return
	}
	if b.tensors, ok = checked.Add(b.tensors, m); !ok || (b.limit > 0 && b.tensors > b.limit) {
		b.err = fmt.Errorf("%w: more than %d", errTooMany, b.limit)
		return
	}
	switch {
	case b.count:
	case b.fold:
		b.runs = append(b.runs, Run{Tensor: gpumem.Tensor{Name: b.prefix + prefix + name, Shape: slices.Clone(shape), DType: dt},
			Count: m, Layers: max(b.layers, 1)})
	default:
		b.out = append(b.out, gpumem.Tensor{Name: b.prefix + prefix + name, Shape: slices.Clone(shape), DType: dt})
	}
}

func (b *builder) add(name string, shape ...int64) { b.addTP(b.dt, "", name, shape...) }

func (b *builder) addP(prefix, name string, shape ...int64) { b.addTP(b.dt, prefix, name, shape...) }

// linear adds an nn.Linear(in, out): weight [out, in] and optionally
// bias [out].
func (b *builder) linear(name string, out, in int64, bias bool) { b.linearP("", name, out, in, bias) }

// linearP is linear for the module prefix+name; names are built only
// when collecting.
func (b *builder) linearP(prefix, name string, out, in int64, bias bool) {
	if b.count {
		b.addTP(b.dt, "", "", out, in)
		if bias {
			b.addTP(b.dt, "", "", out)
		}
		return
	}
	b.addP(prefix, name+".weight", out, in)
	if bias {
		b.addP(prefix, name+".bias", out)
	}
}

// norm adds a norm over dim: weight, and bias for LayerNorm.
func (b *builder) norm(name string, dim int64, kind Norm) { b.normP("", name, dim, kind) }

// normP is norm for the module prefix+name.
func (b *builder) normP(prefix, name string, dim int64, kind Norm) {
	if b.count {
		b.addTP(b.dt, "", "", dim)
		if kind == LayerNorm {
			b.addTP(b.dt, "", "", dim)
		}
		return
	}
	b.addP(prefix, name+".weight", dim)
	if kind == LayerNorm {
		b.addP(prefix, name+".bias", dim)
	}
}

// repeat adds fn(i) for i in [0, n). Counting and folding run fn once,
// each tensor standing for n, since the repeated blocks (experts) are
// identical but for the index in their names.
func (b *builder) repeat(n int64, fn func(i int64)) {
	if !(b.count || b.fold) || n <= 1 {
		for i := int64(0); i < n && b.err == nil; i++ {
			fn(i)
		}
		return
	}
	saved := b.mult
	m, ok := checked.Mul(max(saved, 1), n)
	if !ok {
		b.err = errors.New("parameter count overflows int64 in repeated blocks")
		return
	}
	b.mult = m
	fn(0)
	b.mult = saved
}

// stack adds the n layers of a stack, fn(i) for layer i. Counting and
// folding build one layer of each kind (class(i), nil: all alike) at
// its first index, each tensor standing for the layers of that kind;
// only class is evaluated per layer.
func (b *builder) stack(n int64, class func(i int64) int, fn func(i int64)) {
	if !(b.count || b.fold) || n <= 1 {
		for i := int64(0); i < n && b.err == nil; i++ {
			fn(i)
		}
		return
	}
	type kind struct{ first, count int64 }
	var kinds []kind // in order of first appearance
	if class == nil {
		kinds = []kind{{0, n}}
	} else {
		var index [4]int // class → kinds index + 1; classes are small
		for i := int64(0); i < n; i++ {
			c := class(i)
			if index[c] == 0 {
				kinds = append(kinds, kind{i, 0})
				index[c] = len(kinds)
			}
			kinds[index[c]-1].count++
		}
	}
	savedM, savedL := b.mult, b.layers
	for _, k := range kinds {
		m, ok := checked.Mul(max(savedM, 1), k.count)
		if !ok {
			b.err = errors.New("parameter count overflows int64 in repeated layers")
			break
		}
		b.mult, b.layers = m, k.count
		fn(k.first)
		if b.err != nil {
			break
		}
	}
	b.mult, b.layers = savedM, savedL
}

func (b *builder) sub(prefix string, s *Spec) {
	saved, dt := b.prefix, b.dt
	b.prefix += prefix
	s.build(b)
	b.prefix, b.dt = saved, dt
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

func (s Spec) norm() Norm {
	if s.Norm == 0 {
		return RMSNorm
	}
	return s.Norm
}

// build emits the tensors of s in the order of the Hugging Face class's
// named_parameters, as far as practical.
func (s Spec) build(b *builder) {
	b.dt = s.DType
	switch layoutOf(&s) {
	case layoutLlama:
		s.buildLlama(b)
	case layoutPhi3:
		s.buildPhi3(b)
	case layoutPhi:
		s.buildPhi(b)
	case layoutFalcon:
		s.buildFalcon(b)
	case layoutGPT2, layoutBigCode:
		s.buildGPT2(b)
	case layoutNeoX:
		s.buildNeoX(b)
	case layoutOPT:
		s.buildOPT(b)
	case layoutBERT:
		s.buildBERT(b)
	case layoutT5:
		s.buildT5(b)
	case layoutWhisper:
		s.buildWhisper(b)
	case layoutVision:
		s.buildViT(b)
	case layoutCLIPVision, layoutSiglipVision, layoutCLIPText:
		s.buildCLIPFamily(b)
	case layoutMultimodal:
		s.buildMultimodal(b)
	case layoutCogVideoX:
		s.buildCogVideoX(b)
	case layoutUNet:
		s.buildUNet(b)
	case layoutVAE:
		s.buildVAE(b)
	case layoutFlux:
		s.buildFlux(b)
	case layoutMamba:
		s.buildMamba(b)
	case layoutMamba2:
		s.buildMamba2(b)
	case layoutJamba:
		s.buildJamba(b)
	case layoutSD3:
		s.buildSD3(b)
	case layoutZamba:
		s.buildZamba(b)
	case layoutBackbone:
		s.buildBackbone(b)
	}
}

// IsMoELayer reports whether layer i (from 0) of s has routed experts
// rather than a dense feed-forward, following each family's rule (see
// isMoELayer). It is false for dense models and out-of-range i.
func (s Spec) IsMoELayer(i int64) bool {
	return i >= 0 && i < s.Layers && s.isMoELayer(i)
}

// isMoELayer reports whether layer i has routed experts. deepseek:
// i >= first_k_dense_replace and i % moe_layer_freq == 0
// (modeling_deepseek_v2/v3); qwen2_moe: (i+1) % decoder_sparse_step == 0
// (modeling_qwen2_moe); mixtral: every layer.
func (s Spec) isMoELayer(i int64) bool {
	k := s.layerKinds()
	return k != nil && k(i) == 1
}

// layerKinds returns the kind of each layer for [builder.stack]: 1 with
// routed experts, 0 dense (isMoELayer's rule); nil for a dense model,
// whose layers are all alike. The closure holds only the rule's numbers,
// so that a stack of many layers costs a few instructions a layer.
func (s Spec) layerKinds() func(i int64) int {
	if s.MoE.Experts == 0 {
		return nil
	}
	step, first := max(s.MoE.Step, 1), s.MoE.DenseFirst
	switch s.Family {
	case "qwen2_moe", "qwen3_moe", "llama4_text":
		return func(i int64) int {
			if (i+1)%step == 0 {
				return 1
			}
			return 0
		}
	}
	return func(i int64) int {
		if i >= first && i%step == 0 {
			return 1
		}
		return 0
	}
}

// firstLayer is the kind of layer i for [builder.stack] where the first
// layer of a stack differs (T5's relative attention bias).
func firstLayer(i int64) int {
	if i == 0 {
		return 0
	}
	return 1
}

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

// buildQwen2VLVision is Qwen2VisionTransformerPretrainedModel and
// Qwen2_5_VisionTransformerPretrainedModel (transformers v4.57.1
// modeling_qwen2_vl.py, modeling_qwen2_5_vl.py): a bias-free Conv3d
// patch embedding of (hidden, channels, temporal, patch, patch); blocks
// of norm1, biased fused qkv and proj, norm2 and a biased MLP (Qwen2-VL
// fc1/fc2 with LayerNorms, Qwen2.5-VL gate/up/down with RMSNorms); the
// patch merger: ln_q over the tower width, then mlp.0 (hidden·merge²
// square) and mlp.2 to the language model's width.
func (s Spec) buildQwen2VLVision(b *builder) {
	D, nk := s.Hidden, s.norm()
	b.add("visual.patch_embed.proj.weight", D, s.Image.Channels, max(s.Image.Temporal, 1), s.Image.Patch, s.Image.Patch)
	b.stack(s.Layers, nil, func(i int64) {
		p := "visual.blocks." + itoa(i) + "."
		b.normP(p, "norm1", D, nk)
		b.normP(p, "norm2", D, nk)
		b.linearP(p, "attn.qkv", 3*D, D, true)
		b.linearP(p, "attn.proj", D, D, true)
		if s.Gated {
			b.linearP(p, "mlp.gate_proj", s.Intermediate, D, true)
			b.linearP(p, "mlp.up_proj", s.Intermediate, D, true)
			b.linearP(p, "mlp.down_proj", D, s.Intermediate, true)
		} else {
			b.linearP(p, "mlp.fc1", s.Intermediate, D, true)
			b.linearP(p, "mlp.fc2", D, s.Intermediate, true)
		}
	})
	m := D * max(s.Image.Merge, 1) * max(s.Image.Merge, 1)
	b.norm("visual.merger.ln_q", D, nk)
	b.linear("visual.merger.mlp.0", m, m, true)
	b.linear("visual.merger.mlp.2", s.ProjectionDim, m, true)
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

// buildBERT is BertModel / RobertaModel (with the pooler when Pooler) and
// the task classes of modeling_bert.py / modeling_roberta.py: the base
// model (pooler only for BertForSequenceClassification) and the head:
// BertForMaskedLM cls.predictions (transform dense + LayerNorm, the
// decoder tied to the word embeddings, its bias), RobertaForMaskedLM
// lm_head (dense, layer_norm, bias), BertForSequenceClassification
// classifier, RobertaForSequenceClassification classifier.dense and
// classifier.out_proj, *ForTokenClassification classifier,
// *ForQuestionAnswering qa_outputs.
func (s Spec) buildBERT(b *builder) {
	H, I := s.Hidden, s.Intermediate
	p0 := s.Family + "."
	b.addP(p0, "embeddings.word_embeddings.weight", s.Vocab, H)
	b.addP(p0, "embeddings.position_embeddings.weight", s.Positions, H)
	if s.TypeVocab > 0 {
		b.addP(p0, "embeddings.token_type_embeddings.weight", s.TypeVocab, H)
	}
	b.normP(p0, "embeddings.LayerNorm", H, LayerNorm)
	b.stack(s.Layers, nil, func(i int64) {
		p := p0 + "encoder.layer." + itoa(i) + "."
		b.linearP(p, "attention.self.query", s.Heads*s.HeadDim, H, true)
		b.linearP(p, "attention.self.key", s.Heads*s.HeadDim, H, true)
		b.linearP(p, "attention.self.value", s.Heads*s.HeadDim, H, true)
		b.linearP(p, "attention.output.dense", H, s.Heads*s.HeadDim, true)
		b.normP(p, "attention.output.LayerNorm", H, LayerNorm)
		b.linearP(p, "intermediate.dense", I, H, true)
		b.linearP(p, "output.dense", H, I, true)
		b.normP(p, "output.LayerNorm", H, LayerNorm)
	})
	pooler := s.Pooler
	if s.Head != HeadDefault {
		pooler = s.Head == HeadSeqCls && s.Family == "bert"
	}
	if pooler {
		b.linearP(p0, "pooler.dense", H, H, true)
	}
	switch s.Head {
	case HeadMaskedLM:
		q := "cls.predictions."
		if s.Family == "roberta" {
			q = "lm_head."
			b.linear(q+"dense", H, H, true)
			b.norm(q+"layer_norm", H, LayerNorm)
		} else {
			b.linear(q+"transform.dense", H, H, true)
			b.norm(q+"transform.LayerNorm", H, LayerNorm)
		}
		b.add(q+"bias", s.Vocab)
		if !s.TiedEmbeddings {
			b.add(q+"decoder.weight", s.Vocab, H)
		}
	case HeadSeqCls:
		if s.Family == "roberta" {
			b.linear("classifier.dense", H, H, true)
			b.linear("classifier.out_proj", s.labels(), H, true)
		} else {
			b.linear("classifier", s.labels(), H, true)
		}
	case HeadTokenCls:
		b.linear("classifier", s.labels(), H, true)
	case HeadQA:
		b.linear("qa_outputs", 2, H, true)
	}
}

// buildT5 is T5ForConditionalGeneration / MT5ForConditionalGeneration
// (or T5EncoderModel when EncoderOnly):
// shared embedding (the encoder's and decoder's embed_tokens are the same
// parameter), relative attention bias in the first block of each stack
// only, RMS-style T5LayerNorm without bias, relu (wi, wo) or gated-gelu
// (wi_0, wi_1, wo) FFN, lm_head untied for t5 v1.1 and mt5.
func (s Spec) buildT5(b *builder) {
	d, inner, ff := s.Hidden, s.Heads*s.HeadDim, s.Intermediate
	b.add("shared.weight", s.Vocab, d)
	attn := func(p string, rel bool) {
		b.addP(p, "q.weight", inner, d)
		b.addP(p, "k.weight", inner, d)
		b.addP(p, "v.weight", inner, d)
		b.addP(p, "o.weight", d, inner)
		if rel {
			b.addP(p, "relative_attention_bias.weight", s.RelativeBuckets, s.Heads)
		}
	}
	ffn := func(p string) {
		if s.Gated {
			b.addP(p, "DenseReluDense.wi_0.weight", ff, d)
			b.addP(p, "DenseReluDense.wi_1.weight", ff, d)
		} else {
			b.addP(p, "DenseReluDense.wi.weight", ff, d)
		}
		b.addP(p, "DenseReluDense.wo.weight", d, ff)
		b.addP(p, "layer_norm.weight", d)
	}
	encLayers := s.Layers
	if !s.EncoderOnly {
		encLayers = s.Encoder.Layers
	}
	b.stack(encLayers, firstLayer, func(i int64) {
		p := "encoder.block." + itoa(i) + ".layer."
		attn(p+"0.SelfAttention.", i == 0)
		b.addP(p, "0.layer_norm.weight", d)
		ffn(p + "1.")
	})
	b.add("encoder.final_layer_norm.weight", d)
	if s.EncoderOnly {
		return
	}
	b.stack(s.Layers, firstLayer, func(i int64) {
		p := "decoder.block." + itoa(i) + ".layer."
		attn(p+"0.SelfAttention.", i == 0)
		b.addP(p, "0.layer_norm.weight", d)
		attn(p+"1.EncDecAttention.", false)
		b.addP(p, "1.layer_norm.weight", d)
		ffn(p + "2.")
	})
	b.add("decoder.final_layer_norm.weight", d)
	if !s.TiedEmbeddings {
		b.add("lm_head.weight", s.Vocab, d)
	}
}

// buildWhisper is WhisperForConditionalGeneration: conv stem (two
// Conv1d, kernel 3), sinusoidal-initialised but stored position tables,
// k_proj without bias, LayerNorms with bias, proj_out tied to the
// decoder's embed_tokens.
func (s Spec) buildWhisper(b *builder) {
	d := s.Hidden
	e := s.Encoder
	attn := func(p string) {
		b.linearP(p, "k_proj", d, d, false)
		b.linearP(p, "v_proj", d, d, true)
		b.linearP(p, "q_proj", d, d, true)
		b.linearP(p, "out_proj", d, d, true)
	}
	b.add("model.encoder.conv1.weight", d, s.MelBins, 3)
	b.add("model.encoder.conv1.bias", d)
	b.add("model.encoder.conv2.weight", d, d, 3)
	b.add("model.encoder.conv2.bias", d)
	b.add("model.encoder.embed_positions.weight", e.Positions, d)
	b.stack(e.Layers, nil, func(i int64) {
		p := "model.encoder.layers." + itoa(i) + "."
		attn(p + "self_attn.")
		b.normP(p, "self_attn_layer_norm", d, LayerNorm)
		b.linearP(p, "fc1", e.Intermediate, d, true)
		b.linearP(p, "fc2", d, e.Intermediate, true)
		b.normP(p, "final_layer_norm", d, LayerNorm)
	})
	b.norm("model.encoder.layer_norm", d, LayerNorm)
	b.add("model.decoder.embed_tokens.weight", s.Vocab, d)
	b.add("model.decoder.embed_positions.weight", s.Positions, d)
	b.stack(s.Layers, nil, func(i int64) {
		p := "model.decoder.layers." + itoa(i) + "."
		attn(p + "self_attn.")
		b.normP(p, "self_attn_layer_norm", d, LayerNorm)
		attn(p + "encoder_attn.")
		b.normP(p, "encoder_attn_layer_norm", d, LayerNorm)
		b.linearP(p, "fc1", s.Intermediate, d, true)
		b.linearP(p, "fc2", d, s.Intermediate, true)
		b.normP(p, "final_layer_norm", d, LayerNorm)
	})
	b.norm("model.decoder.layer_norm", d, LayerNorm)
	if !s.TiedEmbeddings {
		b.add("proj_out.weight", s.Vocab, d)
	}
}

// buildViT is ViTModel (with its pooler when Pooler): class token,
// (patches+1) learned positions, Conv2d patch projection with bias.
func (s Spec) buildViT(b *builder) {
	H, I, P, C := s.Hidden, s.Intermediate, s.Image.Patch, s.Image.Channels
	inner := s.Heads * s.HeadDim
	p0 := "vit."
	b.addP(p0, "embeddings.cls_token", 1, 1, H)
	b.addP(p0, "embeddings.position_embeddings", 1, s.Image.Patches()+1, H)
	b.addP(p0, "embeddings.patch_embeddings.projection.weight", H, C, P, P)
	b.addP(p0, "embeddings.patch_embeddings.projection.bias", H)
	b.stack(s.Layers, nil, func(i int64) {
		p := p0 + "encoder.layer." + itoa(i) + "."
		b.linearP(p, "attention.attention.query", inner, H, s.Bias.QKV)
		b.linearP(p, "attention.attention.key", inner, H, s.Bias.QKV)
		b.linearP(p, "attention.attention.value", inner, H, s.Bias.QKV)
		b.linearP(p, "attention.output.dense", H, inner, true)
		b.linearP(p, "intermediate.dense", I, H, true)
		b.linearP(p, "output.dense", H, I, true)
		b.normP(p, "layernorm_before", H, LayerNorm)
		b.normP(p, "layernorm_after", H, LayerNorm)
	})
	b.normP(p0, "layernorm", H, LayerNorm)
	if s.Pooler && s.Head != HeadImageCls {
		b.linearP(p0, "pooler.dense", H, H, true)
	}
	if s.Head == HeadImageCls {
		// ViTForImageClassification: ViTModel(add_pooling_layer=False)
		// and a classifier on the class token.
		b.linear("classifier", s.labels(), H, true)
	}
}

// buildCLIPFamily is CLIPVisionModel, SiglipVisionModel and
// CLIPTextModel: shared encoder layer layout (q/k/v/out_proj with bias,
// layer_norm1/2, mlp.fc1/fc2).
func (s Spec) buildCLIPFamily(b *builder) {
	H, I := s.Hidden, s.Intermediate
	inner := s.Heads * s.HeadDim
	l := layoutOf(&s)
	p0 := "vision_model."
	switch l {
	case layoutCLIPText:
		p0 = "text_model."
		b.addP(p0, "embeddings.token_embedding.weight", s.Vocab, H)
		b.addP(p0, "embeddings.position_embedding.weight", s.Positions, H)
	case layoutCLIPVision:
		P, C := s.Image.Patch, s.Image.Channels
		b.addP(p0, "embeddings.class_embedding", H)
		b.addP(p0, "embeddings.patch_embedding.weight", H, C, P, P)
		b.addP(p0, "embeddings.position_embedding.weight", s.Image.Patches()+1, H)
		b.normP(p0, "pre_layrnorm", H, LayerNorm)
	case layoutSiglipVision:
		P, C := s.Image.Patch, s.Image.Channels
		b.addP(p0, "embeddings.patch_embedding.weight", H, C, P, P)
		b.addP(p0, "embeddings.patch_embedding.bias", H)
		b.addP(p0, "embeddings.position_embedding.weight", s.Image.Patches(), H)
	}
	b.stack(s.Layers, nil, func(i int64) {
		p := p0 + "encoder.layers." + itoa(i) + "."
		b.linearP(p, "self_attn.k_proj", inner, H, true)
		b.linearP(p, "self_attn.v_proj", inner, H, true)
		b.linearP(p, "self_attn.q_proj", inner, H, true)
		b.linearP(p, "self_attn.out_proj", H, inner, true)
		b.normP(p, "layer_norm1", H, LayerNorm)
		b.linearP(p, "mlp.fc1", I, H, true)
		b.linearP(p, "mlp.fc2", H, I, true)
		b.normP(p, "layer_norm2", H, LayerNorm)
	})
	if l == layoutCLIPText {
		b.normP(p0, "final_layer_norm", H, LayerNorm)
		if s.ProjectionDim > 0 {
			b.add("text_projection.weight", s.ProjectionDim, H)
		}
		return
	}
	b.normP(p0, "post_layernorm", H, LayerNorm)
	if l == layoutSiglipVision && s.Pooler {
		// SiglipMultiheadAttentionPoolingHead: probe, nn.MultiheadAttention
		// (fused in_proj), LayerNorm, MLP.
		b.addP(p0, "head.probe", 1, 1, H)
		b.addP(p0, "head.attention.in_proj_weight", 3*H, H)
		b.addP(p0, "head.attention.in_proj_bias", 3*H)
		b.linearP(p0, "head.attention.out_proj", H, H, true)
		b.normP(p0, "head.layernorm", H, LayerNorm)
		b.linearP(p0, "head.mlp.fc1", I, H, true)
		b.linearP(p0, "head.mlp.fc2", H, I, true)
	}
}

// buildMultimodal is LlavaForConditionalGeneration (vision tower,
// multi-modal projector, language model, with the checkpoint names of
// the llava-hf conversions) and CLIPModel (text and vision towers,
// projections, logit_scale).
func (s Spec) buildMultimodal(b *builder) {
	if s.Family == "clip" {
		b.sub("", s.Text)
		b.sub("", s.Vision)
		b.add("visual_projection.weight", s.ProjectionDim, s.Vision.Hidden)
		b.add("text_projection.weight", s.ProjectionDim, s.Text.Hidden)
		b.add("logit_scale")
		return
	}
	if s.Family == "gemma3" {
		// Gemma3ForConditionalGeneration: SigLIP tower without head,
		// Gemma3MultiModalProjector (a bare [vision, text] weight and an
		// RMSNorm over the vision width), Gemma3 text model.
		b.sub("vision_tower.", s.Vision)
		b.add("multi_modal_projector.mm_input_projection_weight", s.Vision.Hidden, s.Text.Hidden)
		b.add("multi_modal_projector.mm_soft_emb_norm.weight", s.Vision.Hidden)
		b.sub("language_model.", s.Text)
		return
	}
	b.sub("vision_tower.", s.Vision)
	in, out := s.Vision.Hidden, s.Text.Hidden
	for j := int64(1); j <= s.ProjectorLayers; j++ {
		b.linear("multi_modal_projector.linear_"+itoa(j), out, in, true)
		in = out
	}
	b.sub("language_model.", s.Text)
}

// buildCogVideoX is diffusers' CogVideoXTransformer3DModel
// (models/transformers/cogvideox_transformer_3d.py): patch embedding
// (Conv2d, or a Linear over p·p·p_t patches in 1.5) and text projection,
// timestep MLP (and ofs MLP), blocks of CogVideoXLayerNormZero (a Linear
// from the time embedding to 6·dim and a LayerNorm) around attention
// with per-head LayerNorm on q and k and a GELU feed-forward of 4·dim,
// final LayerNorm, AdaLayerNorm (Linear to 2·dim, LayerNorm) and the
// output projection. The sin-cos position table is a buffer.
func (s Spec) buildCogVideoX(b *builder) {
	D, T, P, C := s.Hidden, s.DiT.TimeEmbed, s.Image.Patch, s.Image.Channels
	if s.DiT.PatchT > 0 {
		b.linear("patch_embed.proj", D, C*P*P*s.DiT.PatchT, !s.DiT.NoPatchBias)
	} else {
		b.add("patch_embed.proj.weight", D, C, P, P)
		if !s.DiT.NoPatchBias {
			b.add("patch_embed.proj.bias", D)
		}
	}
	b.linear("patch_embed.text_proj", D, s.DiT.TextEmbed, true)
	b.linear("time_embedding.linear_1", T, D, true)
	b.linear("time_embedding.linear_2", T, T, true)
	if o := s.DiT.OfsEmbed; o > 0 {
		b.linear("ofs_embedding.linear_1", o, o, true)
		b.linear("ofs_embedding.linear_2", o, o, true)
	}
	inner := s.Heads * s.HeadDim
	b.stack(s.Layers, nil, func(i int64) {
		p := "transformer_blocks." + itoa(i) + "."
		b.linearP(p, "norm1.linear", 6*D, T, true)
		b.normP(p, "norm1.norm", D, LayerNorm)
		b.normP(p, "attn1.norm_q", s.HeadDim, LayerNorm)
		b.normP(p, "attn1.norm_k", s.HeadDim, LayerNorm)
		b.linearP(p, "attn1.to_q", inner, D, s.Bias.QKV)
		b.linearP(p, "attn1.to_k", inner, D, s.Bias.QKV)
		b.linearP(p, "attn1.to_v", inner, D, s.Bias.QKV)
		b.linearP(p, "attn1.to_out.0", D, inner, true)
		b.linearP(p, "norm2.linear", 6*D, T, true)
		b.normP(p, "norm2.norm", D, LayerNorm)
		b.linearP(p, "ff.net.0.proj", s.Intermediate, D, true)
		b.linearP(p, "ff.net.2", D, s.Intermediate, true)
	})
	b.norm("norm_final", D, LayerNorm)
	b.linear("norm_out.linear", 2*D, T, true)
	b.norm("norm_out.norm", D, LayerNorm)
	out := P * P * s.DiT.OutChannels
	if s.DiT.PatchT > 0 {
		out *= s.DiT.PatchT
	}
	b.linear("proj_out", out, D, true)
}
