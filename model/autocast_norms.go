package model

// autocastNorms documents what a pre-norm block saves under autocast
// over fp32 weights (Workload.Autocast), where the residual stream stays
// fp32 and only the linears run in 16 bits.
//
// torch.autocast casts the inputs of the ops on its lower-precision list
// (linear, matmul, addmm, bmm, scaled_dot_product_attention) and of those
// on its fp32 list, and leaves every other op to type promotion
// (aten/src/ATen/autocast_mode.cpp, v2.6.0; the CUDA and CPU lists agree
// on these ops). So in LlamaModel.forward (modeling_llama.py,
// transformers v4.57.1):
//
//   - the embedding (on no list) returns fp32 rows of the fp32 weight,
//     and every residual add (fp32 + a 16-bit projection output)
//     promotes to fp32: each block's input is fp32;
//   - LlamaRMSNorm's hidden_states.to(torch.float32) is then the input
//     itself and .to(input_dtype) a no-op: pow and the multiply save the
//     fp32 input (4·T·h) and rsqrt (4·T), and weight * x saves the fp32
//     normalized tensor (4·T·h) where a 16-bit pass saves its 16-bit
//     cast; its fp32 output is saved by nothing. nn.LayerNorm
//     (layer_norm: on CUDA's fp32 list, on no CPU list, fp32 on an fp32
//     input either way) saves its fp32 input and statistics;
//   - each linear that reads the norm's output casts it to 16 bits for
//     itself (cached_cast caches only leaf tensors that require grad, the
//     weights, not activations) and saves its own cast: q_proj, k_proj
//     and v_proj three casts (GPT-2's fused c_attn, Phi-3's qkv_proj one),
//     gate_proj and up_proj two (one for a plain MLP or Phi-3's
//     gate_up_proj), the LM head one; Phi's parallel block reads one
//     LayerNorm's output four times (q, k, v and fc1);
//   - the projections' outputs, the MLP's activations, o_proj's and
//     down_proj's inputs are 16-bit as in a 16-bit pass.
//
// Measured on the CPU (saved_tensors_hooks over a Llama forward under
// torch.autocast("cpu", torch.bfloat16), torch 2.6.0): per block the
// fp32 input, rsqrt and fp32 normalized tensor of both norms, three bf16
// casts of the first norm's output and two of the second's; the
// bf16-mixed Llama-family rows of testdata/measured/cpu held 22·T·h bytes
// (20 over two blocks, 2 for the final norm) more than a 16-bit pass.
//
// autocastNormReaders returns the linears reading the attention's and the
// MLP's norm output of a pre-norm block of s (see above); zero where
// this is not modelled (post-norm blocks but BERT's, parallel ones but
// Phi's, and encoder–decoder blocks).
func autocastNormReaders(s *Spec, bl *actBlock) (qkv, mlp int64) {
	if bl.post {
		// BertLayer (modeling_bert.py, v4.57.1) is post-norm: each
		// block's input is the previous LayerNorm's fp32 output (the
		// embeddings' for the first), which query, key and value cast
		// for themselves, and BertIntermediate.dense casts the
		// attention's LayerNorm output; both LayerNorms take the fp32
		// residual sum and save it (autocastPostSaved).
		if layoutOf(s) == layoutBERT {
			return 3, 1
		}
		return 0, 0
	}
	if bl.parallel {
		// PhiDecoderLayer: one input_layernorm read by q_proj, k_proj,
		// v_proj and the MLP's fc1 (modeling_phi.py, v4.57.1).
		if layoutOf(s) == layoutPhi && bl.pnorms <= 1 {
			return 3, 1
		}
		return 0, 0
	}
	qkv, mlp = 3, 1
	if bl.act.gated() {
		mlp = 2
	}
	switch layoutOf(s) {
	case layoutGPT2, layoutBigCode:
		qkv = 1
	case layoutPhi3:
		qkv, mlp = 1, 1
	case layoutLlama, layoutOPT:
	case layoutVision:
		// ViTLayer (modeling_vit.py, v4.57.1): query, key and value
		// each read layernorm_before's fp32 output, intermediate.dense
		// layernorm_after's. The stream is fp32 from the embeddings:
		// ViTEmbeddings torch.cat's the fp32 cls_token with the 16-bit
		// patch convolution (cat is on autocast's promote list) and adds
		// the fp32 position_embeddings.
	case layoutCLIPVision, layoutSiglipVision:
		// CLIPEncoderLayer and SiglipEncoderLayer (modeling_clip.py,
		// modeling_siglip.py, v4.57.1): q_proj, k_proj and v_proj read
		// layer_norm1's output, fc1 layer_norm2's. The stream is fp32
		// from the embeddings, as ViT's: CLIPVisionEmbeddings torch.cat's
		// the fp32 class_embedding with the 16-bit patch convolution and
		// adds the fp32 position_embedding; SiglipVisionEmbeddings adds
		// the fp32 position_embedding to the 16-bit patches (the add
		// promotes).
	default:
		return 0, 0
	}
	return qkv, mlp
}

// autocastPostSaved returns what a post-norm BERT block saves under
// autocast over fp32 weights (the figure of the bl.post case of
// actCalc.block): the residual stream stays fp32 as in a pre-norm block
// (autocastNorms), so the attention's and the output's LayerNorms save
// their fp32 input and statistics, and the linears that read a
// LayerNorm's fp32 output each save their own 16-bit cast (query, key
// and value: qkvIn; BertIntermediate.dense: mlpIn). Measured on the CPU
// (saved_tensors_hooks, BertForMaskedLM under torch.autocast("cpu",
// torch.bfloat16), torch 2.6.0: testdata/measured/cpu/saved, bert-small
// bf16-mixed b4 s256, SDPA and eager, equal to the model to the byte in
// TestCPUSaved): per block three bf16 [T, h] casts of its input,
// two fp32 [T, h] LayerNorm inputs and one bf16 cast of the first
// LayerNorm's output; the estimate that saved one 16-bit block input
// and 16-bit LayerNorm inputs was 1,048,576 bytes short a block there
// (4·e·T·h).
func (c *actCalc) autocastPostSaved(bl *actBlock, Th, eTh int64) int64 {
	an := c.normSaved(bl.norm, Th, bl.h, 4)
	return c.a(c.m(bl.qkvIn, eTh), an, c.m(bl.mlpIn, eTh), an)
}
