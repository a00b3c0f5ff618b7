package model

import "github.com/gpumem/gpumem"

// FrozenInput is the [Workload.FrozenBase] of a frozen model
// differentiated to its input (every parameter requires_grad_(False), the
// inputs_embeds, log-mel or pixel leaf requires grad: an adversarial
// attack, an attribution). Every weight is frozen as under [FrozenBase]
// and no adapter trains, but every activation requires grad from the
// first block on, so the first block saves what the others do.
//
// What autograd saves then follows from tools/autograd/derivatives.yaml
// (torch v2.6.0) and the save guards gen_variable_type.py's guard_for
// generates (a tensor used by the formula of one input only is saved when
// that input requires grad):
//
//   - mm / addmm (a Linear, GPT-2's Conv1D): self is saved for mat2's
//     (the weight's) gradient only, mat2 for self's: a frozen linear saves
//     its weight, not its input;
//   - mul: self is saved for other's gradient, other for self's: RMSNorm's
//     weight * hidden saves the weight only, not the normalized hidden;
//     silu(gate) * up and gelu_new's 0.5·x * (1 + tanh) save both factors,
//     which both require grad;
//   - native_layer_norm: one formula for input, weight and bias, so the
//     input, mean and rstd are saved whatever requires grad (LayerNorm:
//     GPT-2, OPT, BERT, ViT, Whisper, Phi);
//   - pow, rsqrt, softmax, _softmax, gelu, silu, relu, tanh save their
//     input or result regardless of any weight;
//   - convolution: one formula for input, weight and bias
//     (convolution_backward_symint(grad, input, weight, ...,
//     grad_input_mask)), so a frozen convolution still saves its input:
//     Whisper's conv2 keeps conv1's GELU output, ViT's patch embedding
//     and Whisper's conv1 their pixel or log-mel leaf.
//
// So a block saves neither its projections' inputs (the norms' outputs,
// the attention output o_proj reads, the MLP product down_proj reads)
// nor an RMSNorm's normalized copy; a LayerNorm still saves its input and
// statistics. An op none of whose inputs requires grad records nothing:
// an encoder–decoder's decoder reads token embeddings that need none, so
// its first block saves less (frozenFirstCross). A language model's input
// is its token embeddings, passed instead of ids (frozenEmbeds). Measured
// on the CPU (testdata/measured/cpu, frozen rows: 96 of 120 within the
// target; every Llama, Mistral, Qwen2, Gemma and BERT row within
// 0.01%).
var FrozenInput = FrozenBase{Input: true}

// frozenMLPBackward returns what the MLP's backward holds beyond
// [actCalc.block]'s two T·I tensors when the down projection is frozen
// and not adapted. The gradient of the down projection's input (grad · W,
// a T·I tensor) then replaces nothing, where a trained projection's saved
// input is released once its node has run (autograd's
// release_variables) as that gradient is made, and the block's incoming
// gradient (e·T·h) sits beside it; the backward of a product of two
// tensors that require grad (silu(gate) · up, gelu_new's 0.5·x ·
// (1 + tanh)) makes both factors' gradients at once, one T·I tensor more
// than a plain GELU's one. A ReLU's down projection reads the ReLU's
// saved result, which stays saved either way: nothing changes there.
func (c *actCalc) frozenMLPBackward(bl *actBlock, sh actShape) int64 {
	if sh.fz.has(ProjDown) || bl.moe != nil || bl.act == actReLU {
		return 0
	}
	T := c.m(sh.b, sh.s)
	more := c.m(sh.e, T, bl.h)
	if bl.act.gated() || bl.act == actGELUNew {
		more = c.a(more, c.m(sh.e, T, bl.I))
	}
	return more
}

// inputOnly says that a block layout [FrozenBase]'s adapters leave to the
// trained base's figures follows [FrozenInput]: a post-norm block with
// LayerNorms (BERT), a parallel block (Phi, Falcon, NeoX) and a decoder
// block with cross-attention (T5, Whisper).
func (f FrozenBase) inputOnly(bl *actBlock) bool {
	return f.Input && !bl.sandwich && bl.mla == nil && (!bl.post || bl.norm == actLN)
}

// frozenInputSavings adjusts [actCalc.frozenSavings]'s less (two norms'
// outputs and their copies, the attention output, the MLP product) to the
// layouts [FrozenBase.inputOnly] admits:
//
//   - a post-norm block's q/k/v read the block input and its MLP the
//     first LayerNorm's output, neither of them saved by anything else
//     when the weights are frozen (the residual adds save nothing);
//     native_layer_norm keeps its input and statistics: the same two
//     e·T·h tensors less as a pre-norm block's norm outputs;
//   - a parallel block with one norm (Phi) saves one norm output, read by
//     q/k/v and fc1 together: one e·T·h tensor and one normalized copy
//     less, not two;
//   - under autocast, a pre-norm block's fp32 residual stream
//     (autocastNorms): every linear that reads a norm's output saves its
//     own 16-bit cast of it, none of which a frozen weight saves, and
//     the RMSNorm's normalized copy is fp32;
//   - a cross-attention block's third norm output (read by the cross
//     q_proj only), its normalized copy and, where it is a tensor of its
//     own (eager, the math kernel), the cross core's output read by its
//     o_proj are not saved either; the encoder output its k/v projections
//     read is not saved (Activations.Shared).
func (c *actCalc) frozenInputSavings(bl *actBlock, sh actShape, less int64) int64 {
	T := c.m(sh.b, sh.s)
	eTh := c.m(sh.e, T, bl.h)
	switch {
	case autocastBlock(bl, sh):
		// The fp32 residual stream under autocast (autocastNorms): each
		// linear's own 16-bit cast of a norm's output goes, not one
		// e·T·h tensor, and the norms' normalized copies are fp32.
		less = c.a(less, c.m(bl.qkvIn-1, eTh), c.m(bl.mlpIn-1, eTh), c.m(2, c.normCopy(bl.norm, T, bl.h, 4)-c.normCopy(bl.norm, T, bl.h, sh.e)))
	case bl.parallel && bl.pnorms < 2:
		less -= c.a(eTh, c.normCopy(bl.norm, T, bl.h, sh.e))
	case bl.cross:
		less = c.a(less, eTh, c.normCopy(bl.norm, T, bl.h, sh.e))
		if sh.k == Eager || sh.math(bl) {
			less = c.a(less, c.m(sh.e, T, bl.H, bl.dv))
		}
	}
	return max(less, 0)
}

// frozenFirstCross returns what an encoder–decoder's first decoder block
// saves less than the others under [FrozenInput]: only the encoder's
// input requires grad, so the decoder's token embeddings, its first
// self-attention sub-layer and the cross-attention's query (frozen
// projections of tensors that need no gradient) record nothing: no node
// is made for an op none of whose inputs requires grad. Its first and
// cross norms save nothing, its self-attention core nothing, and the
// cross scores' matmul (eager) saves the query for the key's gradient
// but not the key, whose factor needs none; a fused kernel (SDPA) saves
// its q, k and v as one formula's inputs whatever requires grad.
func (c *actCalc) frozenFirstCross(bl *actBlock, sh actShape) int64 {
	T := c.m(sh.b, sh.s)
	norm := c.normSaved(bl.norm, T, bl.h, sh.e) - c.normCopy(bl.norm, T, bl.h, sh.e)
	self, _, _, _, _, _ := c.attention(bl, sh, sh.s, sh.s)
	less := c.a(norm, norm, self)
	if sh.k == Eager {
		less = c.a(less, c.m(sh.e, sh.b, bl.H, sh.sk, bl.d))
	}
	return less
}

// autocastBlock says that [actCalc.block] lays out bl as a pre-norm
// block with an fp32 residual stream under autocast (autocastNorms).
func autocastBlock(bl *actBlock, sh actShape) bool {
	return sh.autocast && sh.e != 4 && bl.qkvIn > 0 && (bl.norm == actRMS || bl.norm == actLN) && !bl.sandwich && bl.mla == nil && !bl.post && !bl.parallel
}

// frozenEmbeds lays out a language model's input under [FrozenInput]:
// what the job differentiates to is the token embeddings (inputs_embeds,
// a leaf that requires grad; ids are integers), passed instead of the
// ids (8·T bytes the lookup would save, dropped when ids is set). The
// leaf is resident for the whole step; it is the first block's input, and
// counted there, when the model hands it to the blocks as it is (Llama,
// Mistral, Qwen2, Phi: rotary positions), and a tensor of its own
// otherwise (e·T·h): GPT-2, GPT-BigCode, OPT and CLIP's text model add
// learned position embeddings, BERT's embeddings add them and normalize,
// Gemma scales by sqrt(hidden) (modeling_*.py, transformers v4.57.1).
func (c *actCalc) frozenEmbeds(a *Activations, s *Spec, e, T int64, ids bool) {
	if ids {
		a.TokenIDs -= min(a.TokenIDs, gpumem.Bytes(c.m(8, T)))
	}
	switch layoutOf(s) {
	case layoutGPT2, layoutBigCode, layoutOPT, layoutCLIPText, layoutBERT:
	default:
		switch s.Family {
		case "gemma", "gemma2", "gemma3_text":
		default:
			return
		}
	}
	a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), c.m(e, T, s.Hidden)))
}
