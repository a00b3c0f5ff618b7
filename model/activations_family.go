package model

// How families differ inside the block (softmax dtype, held weights, norms,
// activations), as transformers' modeling files implement them.

// heldWeightsFamilies are the model types whose decoder (or encoder) layer
// binds the attention weights its self-attention returns to a local,
// hidden_states, _ = self.self_attn(...) (Llama, Mistral, Qwen2, Gemma,
// Gemma2), hidden_states, self_attn_weights = ... (OPT, Whisper's encoder
// and decoder), attn_outputs, self_attn_weights = ... (Phi) or
// attn_output, self_attn_weights = self.attn(...) (GPT-2), in
// transformers v4.57.1 (commit 8cb5963c, modeling_<type>.py), and keeps
// it until the layer returns: with eager attention, whose
// eager_attention_forward returns the probabilities, they stay alive
// through the MLP. T5, BERT and ViT layers do not bind them (their
// attention modules return the weights only under output_attentions, or
// drop them: ViTAttention's self_attn_output, _ is local to the
// attention). In training the probabilities are saved anyway.
var heldWeightsFamilies = map[string]bool{
	"llama": true, "mistral": true, "qwen2": true, "gemma": true, "gemma2": true,
	"phi": true, "opt": true, "gpt2": true, "whisper": true,
}

// heldFourFamilies are the model types whose forward without a graph
// holds four B·S·h tensors through a layer's MLP and three through its
// attention, from the second layer on (transformers v4.57.1, commit
// 8cb5963c): the base model's forward keeps inputs_embeds for the whole
// stack (LlamaModel.forward: hidden_states = inputs_embeds; Gemma's
// normalized copy is the first layer's input only), its loop variable
// the layer's input, and the decoder layer its residual sum and
// post_attention_layernorm's output (the MLP's argument), or, in the
// attention, input_layernorm's output (PhiDecoderLayer: the shared norm
// output and the attention output beside the MLP, set with its layout).
// Measured on the CPU (testdata/measured/cpu, Llama generate rows: three
// B·S·h beyond one, to 9 KiB).
var heldFourFamilies = map[string]bool{
	"llama": true, "mistral": true, "qwen2": true, "gemma": true,
}

// actFamily returns the block description of a decoder-only or encoder
// Spec's layers (MLP fields filled from Intermediate; MoE set by the
// caller).
func actFamily(s *Spec) actBlock {
	bl := actBlock{h: s.Hidden, H: s.Heads, KV: s.KVHeads, d: s.HeadDim, dv: s.HeadDim, I: s.Intermediate,
		norm: actLN, act: actGELU, attnDrop: true, residDrop: 2, heldWeights: heldWeightsFamilies[s.Family]}
	switch layoutOf(s) {
	case layoutLlama, layoutPhi3, layoutJamba:
		bl.norm, bl.act, bl.upcast, bl.residDrop = actRMS, actGated, true, 0
		switch s.Family {
		case "gemma", "gemma2", "gemma3_text":
			bl.norm = actGemmaRMS
			bl.softcap = s.Family == "gemma2"
		}
		if !s.Gated {
			bl.act = actGELU
		}
		bl.qkNorm, bl.sandwich = s.QKNorm, s.SandwichNorm
		if heldFourFamilies[s.Family] {
			bl.heldHidden, bl.heldAttn = 4, 3
		}
		if s.Family == "gpt_oss" {
			// softmax(combined_logits, dtype=combined_logits.dtype): no
			// fp32 upcast.
			bl.upcast, bl.sinks = false, true
		}
		if s.Family == "phi3" {
			bl.residDrop = 2 // resid_attn_dropout, resid_mlp_dropout
		}
		if s.MLA.Enabled() {
			m := s.MLA
			bl.mla = &m
			bl.d, bl.dv = m.QKNopeHeadDim+m.QKRopeHeadDim, m.VHeadDim
		}
	case layoutPhi:
		bl.parallel, bl.pnorms, bl.act, bl.upcast, bl.residDrop = true, 1, actGELUNew, true, 1
		if s.Family == "phi" {
			// PhiModel.forward and PhiDecoderLayer.forward
			// (modeling_phi.py at v4.57.1) hold, through the MLP,
			// inputs_embeds, the layer's input (its residual), the
			// shared input_layernorm output and attn_outputs; through
			// the attention the first three (heldFourFamilies' count).
			bl.heldHidden, bl.heldAttn = 4, 3
		}
	case layoutFalcon:
		bl.parallel, bl.pnorms, bl.residDrop = true, actMax(1, s.ParallelNorms), 1
		if s.Family == "bloom" {
			// BloomBlock is sequential (attention, then MLP, each with
			// its LayerNorm and dropout_add of hidden_dropout); its GELU
			// is bloom_gelu_forward, which saves its input.
			bl.parallel, bl.pnorms, bl.residDrop = false, 0, 2
			// BloomAttention: F.softmax(..., dtype=torch.float32).to(input_dtype).
			bl.upcast = true
		}
	case layoutNeoX:
		bl.parallel, bl.pnorms = true, 2
	case layoutGPT2:
		bl.act, bl.scalar = actGELUNew, true
		bl.floatMask, bl.castBack = true, true
		bl.fusedQKV = true
		if s.Family == "gpt2" {
			// modeling_gpt2.py at v4.57.1 (commit 8cb5963c), without a
			// graph: GPT2Model.forward holds inputs_embeds and
			// position_embeds for the whole stack, its loop variable
			// the block's input, and GPT2Block.forward its attn_output,
			// the residual sum and ln_2's output (the MLP's argument)
			// through the MLP: six B·S·h tensors (position_embeds is
			// B·S·h in generate(), whose position_ids have the batch's
			// rows, 1·S·h otherwise); in the attention, the two
			// embeddings, the input and ln_1's output.
			bl.heldHidden, bl.heldAttn = 6, 4
		}
		switch s.Activation {
		case "gelu", "gelu_pytorch_tanh":
			bl.act = actGELU
		case "relu":
			bl.act = actReLU
		case "quick_gelu":
			bl.act = actQuickGELU
		}
	case layoutBigCode:
		bl.upcast = true // attention_softmax_in_fp32
	case layoutOPT:
		// OPT's eager core at transformers v4.57.1 (commit 8cb5963c,
		// modeling_opt.py eager_attention_forward): the query is scaled
		// by its projection's caller (q_proj(x) * scaling, a Scalar mul
		// that saves nothing), scores = matmul(q, kᵀ) * 1.0 + the float
		// causal mask, softmax(dtype=torch.float32).to(query.dtype) in
		// every dtype (upcast), dropout, matmul with v. The torch.max
		// clamp of the masked scores that OPTAttention applied up to
		// v4.45, which saved them (b·H·s² elements more a layer), is
		// gone: the eager fp32 CPU rows measured 4·b·H·s² bytes under
		// an estimate that kept it (opt-small b1 s256: 2,097,116 bytes,
		// b4 s256: 8,388,572), and match it to within 36 bytes without.
		bl.act, bl.upcast = actReLU, true
		// Dropout with Workload.Dropout is OPT's config.dropout (0.1) on
		// the two residual branches; its attention_dropout and
		// activation_dropout default to 0.0 (OPTConfig.__init__,
		// configuration_opt.py) and no facebook/opt-* config sets them,
		// so nn.functional.dropout on the probabilities returns its
		// input and saves no mask or dropped copy.
		bl.attnDrop = false
		bl.post = s.NoFinalNorm && s.Family == "opt" && s.EmbedDim != 0 // opt-350m: do_layer_norm_before=false
	case layoutBERT:
		bl.post = true
		bl.floatMask = true
	case layoutVision, layoutSiglipVision:
		bl.upcast = true // eager_attention_forward of modeling_vit.py / modeling_siglip.py
		if s.Family == "vit" {
			// modeling_vit.py at v4.57.1 (commit 8cb5963c), without a
			// graph, in the MLP of the second and later layers: ViTModel.
			// forward holds embedding_output for the whole encoder,
			// ViTEncoder's loop variable the layer's input, and
			// ViTLayer.forward its hidden_states_norm, attention_output,
			// the residual sum and layernorm_after's output (the
			// intermediate's argument): six B·S·h tensors. Measured on
			// the CPU (testdata/measured/cpu, ViT prefill rows): the
			// peak is the pixel values, these six and the MLP's two. In
			// the attention: embedding_output, the layer's input and
			// hidden_states_norm.
			bl.heldHidden, bl.heldAttn = 6, 3
		}
		if layoutOf(s) == layoutSiglipVision {
			// modeling_siglip.py at v4.57.1, without a graph, in the MLP
			// of the second and later layers: SiglipVisionTransformer.
			// forward holds the embeddings' output for the whole encoder,
			// SiglipEncoder's loop variable the layer's input, and
			// SiglipEncoderLayer.forward its residual (the attention's
			// sum) and layer_norm2's output (the MLP's argument): four
			// B·S·h tensors. In the attention: the embeddings' output,
			// the layer's input and layer_norm1's output.
			bl.heldHidden, bl.heldAttn = 4, 3
		}
	case layoutCLIPVision, layoutCLIPText:
		bl.act, bl.upcast = actQuickGELU, true
		if layoutOf(s) == layoutCLIPVision {
			// modeling_clip.py at v4.57.1: as SigLIP's, with
			// pre_layrnorm's output the tensor CLIPVisionTransformer
			// holds for the whole encoder. Measured on the CPU
			// (testdata/measured/cpu, CLIP prefill rows): the peak is the
			// pixel values, these four and quick_gelu's three B·S·I
			// tensors (the fc1 output, sigmoid(1.702x) and the product).
			bl.heldHidden, bl.heldAttn = 4, 3
		}
	}
	return bl
}
