package model

// # Losses that never hold the full logits
//
// The Hugging Face way (FullLoss) projects every position to vocabulary
// logits, upcasts them to fp32 and log-softmaxes them (ForCausalLMLoss):
// for a 128k vocabulary the logits and the loss's fp32 tensors are the
// largest activations of a training step. Recipes avoid that three ways,
// each modelled here from its framework's source:
//
//   - ChunkedLoss, torchtune's CEWithChunkedOutputLoss
//     (torchtune/modules/loss/ce_chunked_output_loss.py and
//     TransformerDecoder.chunked_output, torchtune commit bd2a0fc, Apr
//     2026): the model still projects every position, as a list of
//     num_output_chunks bf16 chunks (tensor_split of the final norm's
//     output along the sequence), and the loss upcasts one chunk at a
//     time. Run eagerly (the recipes' default, compile: False) each
//     chunk's F.cross_entropy saves its fp32 log-softmax, so the saved
//     bytes are those of the full loss; what chunking removes is the
//     fp32 copy of all the logits in forward (one chunk's at a time) and
//     the loss gradient's 8 bytes per logit in backward (one chunk's at a
//     time). The recipes delete the output list after the loss ("free
//     outputs otherwise it peaks backward memory",
//     recipes/full_finetune_single_device.py), so the bf16 logits are
//     gone before backward.
//   - FusedLinearLoss, Liger-Kernel's LigerFusedLinearCrossEntropyLoss
//     (src/liger_kernel/ops/fused_linear_cross_entropy.py at v0.8.2-7,
//     ead96b6, with LigerForCausalLMLoss of transformers/model/
//     loss_utils.py): the head and the loss run together over chunks of
//     tokens, chunk_size = next_power_of_2(ceil(BT / ceil(V/H))); each
//     chunk's logits (compute dtype) become their own gradient in place,
//     and the gradients of the head's input (grad_input, zeros_like the
//     hidden states) and weight (grad_weight, zeros_like the weight) are
//     accumulated in forward and kept for backward, which only scales
//     them. No logits survive a chunk. A 16-bit grad_weight accumulates
//     through torch.mm in the compute dtype and .float(), a V·H
//     transient of 6 bytes per element, which Liger PR #1239 measured
//     (3072 MiB for V = 131,072, H = 4096).
//   - CutCrossEntropyLoss, Apple's cut-cross-entropy (ml-cross-entropy,
//     cut_cross_entropy/cce.py, cce_lse_forward.py, cce_backward.py,
//     commit d42911f, Jun 2025; impl "cce", filter_eps "auto", the
//     transformers patch's shift=True): the logits are never
//     materialized; forward saves the hidden states, an fp32 log-sum-exp
//     per valid position, the int64 valid indices and an fp32 average
//     logit per vocabulary entry (for the backward's filtering order);
//     backward allocates the gradients of the hidden states and of the
//     weight (zeros_like each) and recomputes logit blocks in SRAM.
//
// Logits of selected positions only (Workload.LogitsToKeep) is
// transformers' logits_to_keep: LlamaForCausalLM.forward projects
// hidden_states[:, -k:, :] only, which inference passes without labels
// can ask for (generate() asks for 1).

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// LossKind is how the LM head and the cross-entropy loss of a training
// step are computed. The zero value is [FullLoss].
type LossKind uint8

const (
	// FullLoss is Hugging Face's: full logits, an fp32 upcast, an fp32
	// log-softmax saved for backward.
	FullLoss LossKind = iota
	// ChunkedLoss is torchtune's CEWithChunkedOutputLoss over
	// [Loss.Chunks] chunks of the sequence.
	ChunkedLoss
	// FusedLinearLoss is Liger-Kernel's fused linear cross entropy.
	FusedLinearLoss
	// CutCrossEntropyLoss is Apple's cut cross-entropy.
	CutCrossEntropyLoss

	numLossKinds
)

// DefaultLossChunks is torchtune's default num_output_chunks.
const DefaultLossChunks = 8

// Loss is the loss of a training step: its kind and, for [ChunkedLoss],
// the chunk count. The zero value is the full loss.
type Loss struct {
	Kind LossKind
	// Chunks is num_output_chunks of ChunkedLoss (torchtune's default is
	// [DefaultLossChunks]); it must be at least 1 there and 0 for the
	// other kinds.
	Chunks int64
}

// String returns "full", "chunked:N", "liger" or "cce", as [ParseLoss]
// reads them.
func (l Loss) String() string {
	switch l.Kind {
	case FullLoss:
		return "full"
	case ChunkedLoss:
		return "chunked:" + strconv.FormatInt(l.Chunks, 10)
	case FusedLinearLoss:
		return "liger"
	case CutCrossEntropyLoss:
		return "cce"
	}
	return "Loss(" + strconv.Itoa(int(l.Kind)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (l Loss) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// ParseLoss reads a loss name: "full" (or ""), "chunked" (8 chunks),
// "chunked:N", "liger" (or "fused-linear", "flce"), "cce" (or
// "cut-cross-entropy"). Errors name the field "loss".
func ParseLoss(s string) (Loss, error) {
	switch s {
	case "", "full", "hf":
		return Loss{}, nil
	case "chunked":
		return Loss{Kind: ChunkedLoss, Chunks: DefaultLossChunks}, nil
	case "liger", "fused-linear", "flce":
		return Loss{Kind: FusedLinearLoss}, nil
	case "cce", "cut-cross-entropy":
		return Loss{Kind: CutCrossEntropyLoss}, nil
	}
	if n, ok := strings.CutPrefix(s, "chunked:"); ok {
		c, err := strconv.ParseInt(n, 10, 64)
		if err != nil || c < 1 || c > maxLossChunks {
			return Loss{}, gpumem.Errorf("loss", s, gpumem.ErrInvalid, "the chunk count of chunked:N must be an integer in [1, %d]", maxLossChunks)
		}
		return Loss{Kind: ChunkedLoss, Chunks: c}, nil
	}
	return Loss{}, gpumem.Errorf("loss", s, gpumem.ErrInvalid, "want full, chunked, chunked:N, liger or cce")
}

// Valid reports whether l is a known kind with a chunk count that fits
// it (in [1, 2^20] for ChunkedLoss, zero otherwise); [Loss.Check] says
// why not, and whether a model takes it.
func (l Loss) Valid() bool {
	if l.Kind == ChunkedLoss {
		return l.Chunks >= 1 && l.Chunks <= maxLossChunks
	}
	return l.Kind < numLossKinds && l.Chunks == 0
}

// maxLossChunks bounds Loss.Chunks.
const maxLossChunks = 1 << 20

// Check validates l for a step of s, naming path ("Workload.Loss",
// "Job.Loss") in its errors: a known kind, a chunk count in [1, 2^20]
// for ChunkedLoss and none for the others, and, for any kind but the
// full loss, a training step (train) of a causal language model (the
// losses replace a causal LM head; BERT, T5, Whisper, CLIP and vision
// encoders have none).
func (l Loss) Check(path string, s Spec, train bool) error {
	if l.Kind >= numLossKinds {
		return gpumem.Errorf(path, l.Kind, gpumem.ErrInvalid, "unknown loss kind; want full, chunked, liger or cce")
	}
	if l.Kind == ChunkedLoss {
		if l.Chunks < 1 || l.Chunks > maxLossChunks {
			return gpumem.Errorf(path+".Chunks", l.Chunks, gpumem.ErrInvalid, "the chunked loss needs a chunk count in [1, %d] (torchtune's default is %d)", maxLossChunks, DefaultLossChunks)
		}
	} else if l.Chunks != 0 {
		return gpumem.Errorf(path+".Chunks", l.Chunks, gpumem.ErrInvalid, "a chunk count applies to the chunked loss only, not %s", l.Kind.name())
	}
	if l.Kind == FullLoss {
		return nil
	}
	if !train {
		return gpumem.Errorf(path, l, gpumem.ErrInvalid, "the %s loss is computed in training only", l.Kind.name())
	}
	if !s.causalHead() {
		return gpumem.Errorf(path, l, gpumem.ErrUnsupported, "the %s loss replaces a causal language model's head; %s has none", l.Kind.name(), s.headName())
	}
	return nil
}

func (k LossKind) name() string {
	switch k {
	case FullLoss:
		return "full"
	case ChunkedLoss:
		return "chunked"
	case FusedLinearLoss:
		return "fused linear (liger)"
	case CutCrossEntropyLoss:
		return "cut cross-entropy"
	}
	return "LossKind(" + strconv.Itoa(int(k)) + ")"
}

// headName names s's family, and its task head when one is set ("llama
// with a seq-cls head").
func (s Spec) headName() string {
	if s.Head != HeadDefault && s.Head != HeadCausalLM {
		return s.Family + " with a " + s.Head.String() + " head"
	}
	return s.Family
}

// causalHead reports whether s ends in a causal language model's head
// over its vocabulary (a decoder-only LM, or LLaVA's or Gemma 3's
// language model).
func (s Spec) causalHead() bool {
	if s.Head != HeadDefault && s.Head != HeadCausalLM {
		return false // a task head (classification, QA) has no vocabulary logits
	}
	switch layoutOf(&s) {
	case layoutLlama, layoutPhi3, layoutPhi, layoutFalcon, layoutGPT2, layoutBigCode, layoutNeoX, layoutOPT:
		return s.Vocab > 0
	case layoutMultimodal:
		return s.Family != "clip" && s.Text != nil && s.Text.causalHead()
	}
	return false
}

// CheckLogitsToKeep validates a logits_to_keep of k positions for a
// step of s, naming path in its errors: k in [0, 2^40], zero in
// training (the loss needs every position's logits), and only for a
// causal language model.
func (s Spec) CheckLogitsToKeep(path string, k int64, train bool) error {
	switch {
	case k == 0:
		return nil
	case k < 0 || k > actMaxTokens:
		return gpumem.Errorf(path, k, gpumem.ErrInvalid, "must be in [0, 2^40] (0: every position)")
	case train:
		return gpumem.Errorf(path, k, gpumem.ErrInvalid, "a training step needs the logits of every position; logits_to_keep is for passes without labels")
	case !s.causalHead():
		return gpumem.Errorf(path, k, gpumem.ErrUnsupported, "logits_to_keep slices a causal language model's head; %s has none", s.headName())
	}
	return nil
}

// lossHead sets the head, logits and loss figures of a training step
// under a loss other than FullLoss, for T tokens of w.Batch sequences
// with vocabulary V (no tensor parallelism: Check refuses it upstream).
// inputCounted says that the head's input is counted in FinalNorm.
func (c *actCalc) lossHead(a *Activations, s Spec, w Workload, e, T, V int64, inputCounted bool) {
	h := s.Hidden
	eTh := c.m(e, T, h)
	in := eTh // the final norm's output, the head's input
	if inputCounted {
		in = 0
	}
	g := int64(0) // bytes per element of the head weight's gradient
	switch w.HeadGrad {
	case gpumem.FP32, gpumem.TF32:
		g = 4
	case gpumem.BF16, gpumem.FP16:
		g = 2
	}
	seq := T / w.Batch
	switch w.Loss.Kind {
	case ChunkedLoss:
		// chunked_output: every chunk projected at once (bf16 list,
		// e·T·V), freed by the recipe before backward. Each chunk's
		// cross_entropy upcasts (4·Tc·V, a transient) and saves its fp32
		// log-softmax and a 0-dim fp32 total weight.
		n := w.Loss.Chunks
		sc, _ := checked.CeilDiv(seq, n) // tensor_split: the first chunks are the longest
		Tc := c.m(w.Batch, sc)
		a.Logits = gpumem.Bytes(c.a(int64(a.Logits), c.m(e, T, V)))
		a.LogitsReleased = true
		soft := int64(0)
		if s.Family == "gemma2" {
			soft = c.m(e, T, V) // final_logit_softcapping: tanh saves its result
		}
		if w.Compile&CompileLoss != 0 {
			// compile_loss compiles compute_cross_entropy (compile.go):
			// each chunk's call saves its bf16 logits (so the list the
			// recipe deletes stays alive through the loss) and the
			// rows' max and log-sum-exp (8·Tc); no fp32 copy is made,
			// and its backward writes the chunk's gradient in e.
			a.LogitsReleased, a.LogitsSaved = false, true
			a.Head = gpumem.Bytes(c.a(int64(a.Head), in, soft, c.m(8, T), c.m(4, n)))
			a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), c.m(e, Tc, V)))
			break
		}
		a.Head = gpumem.Bytes(c.a(int64(a.Head), in, soft, c.m(4, T, V), c.m(4, n)))
		a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(4, Tc, V)))
		a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), c.m(8, Tc, V)))
	case FusedLinearLoss:
		// Saved: grad_input (e·T·h) and grad_weight (g·V·h), both
		// allocated at the start of forward. Transient in forward: the
		// head's input, the padded and shifted labels
		// (8·B·(s+1) + 8·T), loss_1d (4·T), the target mask (T bytes),
		// one chunk's logits (e·Tc·V) and the larger of its grad_input
		// product (e·Tc·h) and the weight-gradient product: torch.mm in
		// the compute dtype then .float() (e·V·h + 4·V·h) for a 16-bit
		// grad_weight; the fp32 product alone (4·V·h) in fp32; nothing
		// under AMP (fp32 grad_weight, 16-bit logits: addmm with
		// out_dtype into grad_weight, PyTorch ≥ 2.8, sm80+).
		inc, _ := checked.CeilDiv(V, h)
		rows, _ := checked.CeilDiv(T, inc)
		Tc := min(nextPow2(rows), T)
		wt := int64(0)
		switch {
		case g == 0 || (g == 4 && e == 2):
		case g == 4:
			wt = c.m(4, V, h)
		default:
			wt = c.m(e+4, V, h)
		}
		a.Head = gpumem.Bytes(c.a(int64(a.Head), eTh))
		a.HeadWeightGrad = gpumem.Bytes(c.a(int64(a.HeadWeightGrad), c.m(g, V, h)))
		chunk := c.a(c.m(e, Tc, V), actMax(c.m(e, Tc, h), wt))
		a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), in, c.m(8, w.Batch, seq+1), c.m(8+4+1, T), chunk))
	case CutCrossEntropyLoss:
		// shift=True: n = B·(s−1) positions have a label. Saved: the
		// hidden states e, lse (4·n), valids (int64 after valids.sum(1),
		// 8·n), logit_avg (4·V). Forward transient: building valids,
		// the bool mask (n), nonzero's int64 (n, 2) indices (16·n) and
		// their int32 copy (8·n). Backward: de (e·T·h), dc (zeros_like
		// the weight as the kernel reads it, 16-bit under autocast, then
		// .to the weight's dtype), argsort of logit_avg (int64 then
		// int32, 12·V) and the int32 locks of de and dc.
		n := c.m(w.Batch, seq-1)
		a.Head = gpumem.Bytes(c.a(int64(a.Head), in, c.m(4+8, n), c.m(4, V)))
		a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(1+16+8, n)))
		dc := int64(0)
		if g > 0 {
			dc = c.m(g, V, h)
			if g != e {
				dc = c.m(g+e, V, h)
			}
		}
		locks := func(rows int64) int64 {
			r, _ := checked.CeilDiv(rows, 128)
			d, _ := checked.CeilDiv(h, 64)
			return c.m(4, r, d)
		}
		lk := locks(n)
		if g > 0 {
			lk = c.a(lk, locks(V))
		}
		a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), eTh, dc, c.m(12, V), lk))
	}
	// Token ids saved by the embedding, and the labels.
	a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), c.m(16, T)))
}

// nextPow2 returns the least power of two at least n (1 for n ≤ 1), as
// triton.next_power_of_2.
func nextPow2(n int64) int64 {
	p := int64(1)
	for p < n && p < 1<<62 {
		p <<= 1
	}
	return p
}

// checkLoss validates the loss fields of w for s.
func (w *Workload) checkLoss(s *Spec) error {
	if w.Loss == (Loss{}) && w.HeadGrad == gpumem.Invalid && w.LogitsToKeep == 0 {
		return nil
	}
	if err := w.Loss.Check("Workload.Loss", *s, w.Train); err != nil {
		return err
	}
	if w.Loss.Kind != FullLoss && w.TensorParallel > 1 {
		return gpumem.Errorf("Workload.Loss", w.Loss, gpumem.ErrUnsupported, "the %s loss is modelled without tensor parallelism (TensorParallel %d)", w.Loss.Kind.name(), w.TensorParallel)
	}
	switch w.HeadGrad {
	case gpumem.Invalid, gpumem.FP32, gpumem.TF32, gpumem.BF16, gpumem.FP16:
	default:
		return gpumem.Errorf("Workload.HeadGrad", w.HeadGrad, gpumem.ErrInvalid, "want fp32, bf16 or fp16, or Invalid for a frozen head")
	}
	return s.CheckLogitsToKeep("Workload.LogitsToKeep", w.LogitsToKeep, w.Train)
}
