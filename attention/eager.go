package attention

import "github.com/gpumem/gpumem"

// Eager is attention written out in tensor operations, as Hugging Face
// transformers' eager_attention_forward (models/llama/modeling_llama.py
// and the many models that copy it):
//
//	key_states = repeat_kv(key, n_rep); value_states = repeat_kv(value, n_rep)
//	attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
//	attn_weights = attn_weights + causal_mask                # if a mask is given
//	attn_weights = softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
//	attn_weights = dropout(attn_weights, p=dropout, training=...)
//	attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
//
// Each line is modelled as PyTorch executes it: every out-of-place op
// allocates a new tensor before the old one is released, and autograd
// saves q and key_states (first matmul), the softmax output (softmax
// backward uses its result), the dropout mask, and the final probabilities
// and value_states (second matmul). With b·h·s_q·s_k = N score elements
// of e bytes, Saved is q + k + v (or their expansions) + 4N (the fp32
// softmax output) + eN (its cast back to DType), or e·N + e·N + N with
// dropout in DType; the forward peak reaches about 2eN for the scores
// plus the softmax's fp32 tensors.
//
// The zero value is a softmax in DType with no mask, as openai/whisper's
// qkv_attention computes it in fp32 models and GPT-2 style code does.
type Eager struct {
	// SoftmaxFP32 computes the softmax in fp32 and casts the probabilities
	// back to DType (transformers' softmax(..., dtype=torch.float32)
	// .to(query.dtype); openai/whisper's softmax(qk.float()).to(q.dtype)).
	// Autograd keeps both the fp32 softmax output and the cast copy. No
	// effect when DType is FP32.
	SoftmaxFP32 bool
	// CastBeforeSoftmax makes the fp32 upcast a separate copy of the scores
	// (openai/whisper's qk.float()) even for FP16. Without it FP16 uses
	// ATen's fused half-to-float softmax (at::_softmax(x, dim,
	// half_to_float=true) in aten/src/ATen/native/SoftMax.cpp, taken for
	// CUDA fp16 inputs with dtype=float32), which needs no copy; BF16 is
	// always copied first (SoftMax.cpp converts with toType).
	CastBeforeSoftmax bool
	// ExpandKV materializes K and V for every query head before the
	// matmuls (transformers' repeat_kv: expand + reshape). The reshape
	// copies when 1 < KVHeads < Heads, and the copies replace k and v in
	// Saved; with a single KV head it is a stride-0 view (checked with the
	// CPU oracle). Either way the backward makes gradients for all heads
	// and sums them. Without it a grouped kernel broadcasts K and V without
	// copies.
	ExpandKV bool
	// Mask4D adds a materialized [Batch, 1, QueryLen, KeyLen] additive mask
	// in DType, as transformers builds once per forward for eager attention
	// (_prepare_4d_causal_attention_mask / create_causal_mask) and shares
	// across layers. It is counted in Forward only (it dies with the
	// model's forward), and the masked add makes one more score-sized
	// tensor. Without it and without Shape.Causal no mask is added.
	Mask4D bool
	// KeepWeights returns the probabilities to the caller
	// (output_attentions=True), who keeps them for every layer until the
	// model outputs are dropped; see [Retained].
	KeepWeights bool
	// CPUDropout draws the dropout mask as PyTorch's CPU path does: a
	// noise tensor in DType multiplied into the input, instead of the
	// 1-byte bool mask of the fused native_dropout that CUDA uses
	// (is_fused_kernel_acceptable in aten/src/ATen/native/Dropout.cpp). Use
	// it to compare with a CPU oracle.
	CPUDropout bool
}

// Saved implements [Kernel].
func (k Eager) Saved(s Shape) (gpumem.Bytes, error) { return savedOf(k.figures(s)) }

// Forward implements [Kernel].
func (k Eager) Forward(s Shape) (gpumem.Bytes, error) { return forwardOf(k.figures(s)) }

// Backward implements [Kernel].
func (k Eager) Backward(s Shape) (gpumem.Bytes, error) { return backwardOf(k.figures(s)) }

func (k Eager) figures(s Shape) (figs, error) {
	d, err := dimsOf(s)
	if err != nil {
		return figs{}, err
	}
	n, err := d.scores(s)
	if err != nil {
		return figs{}, err
	}
	e := d.e
	es := e // bytes per element of the softmax output
	if k.SoftmaxFP32 && e != 4 {
		es = 4
	}
	// A separate upcast copy precedes the softmax unless the fused fp16
	// half_to_float path applies.
	upcastCopy := es != e && (s.DType != gpumem.FP16 || k.CastBeforeSoftmax)
	expand := k.ExpandKV && d.hk < d.h
	// repeat_kv's reshape of the expanded view copies, except for a single
	// KV head (MQA, or a head chunk inside one group), where merging the
	// size-1 head dim with the repeats gives a stride-0 view.
	copyKV := expand && d.hk > 1
	masked := k.Mask4D || s.Causal
	drop := s.dropout()
	maskElem := int64(1) // bool mask of CUDA's native_dropout
	if k.CPUDropout {
		maskElem = e
	}
	grad := !s.NoGrad
	kvBytes := d.kv * e // one of k, v as given
	kvUsed := kvBytes   // one of k, v as kept for backward
	if copyKV {
		kvUsed = d.kx * e
	}
	kvGrad := kvBytes // one of dK, dV as the matmuls' backward makes them
	if expand {
		kvGrad = d.kx * e
	}
	q, o := d.q*e, d.q*e

	f := figs{out: o, inputs: q + 2*kvBytes, grads: q + 2*kvBytes}
	var t tally
	if k.Mask4D {
		t.alloc(d.b * d.sq * d.sk * e) // the 4-D mask, alive through the forward
	}
	if copyKV {
		t.alloc(2 * kvUsed) // repeat_kv copies of k and v
	}
	t.alloc(n * e) // q @ k^T
	t.alloc(n * e) // * scaling: a new tensor
	t.free(n * e)  // the raw product dies
	if masked {
		t.alloc(n * e) // + mask (torch.where for a boolean causal buffer)
		t.free(n * e)
	}
	if upcastCopy {
		t.alloc(n * es) // scores.to(float32)
	}
	t.alloc(n * es) // softmax output
	if upcastCopy {
		t.free(n * es)
	}
	t.free(n * e) // the scores die (attn_weights is reassigned)
	probs := n * es
	softmaxOutIsProbs := true
	if es != e {
		t.alloc(n * e) // .to(query.dtype)
		if !grad {
			t.free(n * es) // the fp32 output is not saved
		}
		probs = n * e
		softmaxOutIsProbs = false
	}
	if drop {
		t.alloc(n*e + n*maskElem) // dropout output and mask
		if !softmaxOutIsProbs {
			t.free(probs) // the cast copy is not saved: dropout keeps only its mask
		}
		probs = n * e
		softmaxOutIsProbs = false
	}
	t.alloc(o) // attn @ v, [b, h, s_q, d]
	t.alloc(o) // .transpose(1, 2).contiguous(): the output o
	t.free(o)
	f.fwd = t.peak
	if k.KeepWeights {
		f.retained = probs
	}
	if t.bad {
		return figs{}, errOverflow(s)
	}
	if !grad {
		return f, nil
	}

	// Saved: q (first matmul), k or its expansion (first matmul), v or its
	// expansion (second matmul), the softmax output, the probabilities the
	// second matmul consumes when they differ from it, and the dropout mask.
	f.inQ = q
	if copyKV {
		f.own = 2 * kvUsed
	} else {
		f.inKV = 2 * kvBytes
	}
	f.own += n * es
	if !softmaxOutIsProbs {
		f.own += probs
	}
	if drop {
		f.own += n * maskElem
	}

	// Backward, in the autograd engine's order (latest node first). Saved
	// tensors are released as their node finishes.
	var b tally
	// dO arrives in the [b, s_q, h, d] layout of o. torch.matmul folds the
	// batch and head dims of its [b, h, s_q, d] view with reshape, which
	// copies it unless b = 1 or s_q = 1 (UnsafeViewBackward0 → clone); the
	// copy lives until the second matmul's backward ends.
	var dOCopy int64
	if d.b > 1 && d.sq > 1 {
		dOCopy = o
	}
	b.alloc(dOCopy)
	b.alloc(kvGrad) // dV (of the expansion when expanded) = P^T @ dO
	b.alloc(n * e)  // dP = dO @ v^T
	b.free(dOCopy)
	if !softmaxOutIsProbs {
		b.free(probs) // the second matmul's probabilities are released
	}
	if copyKV {
		b.free(kvUsed) // so is value_states, saved by it alone
	}
	if drop {
		b.alloc(n * e) // dropout backward: dP * mask * scale
		b.free(n * e)
		b.free(n * maskElem)
	}
	if es != e {
		b.alloc(n * es) // .to backward: gradient back in fp32
		b.free(n * e)
	}
	// Softmax backward returns dS in the dtype of the softmax input: fp32
	// after a separate upcast (then cast back by the upcast's backward), or
	// DType directly on the fused half-to-float path.
	sbe := es
	if es != e && !upcastCopy {
		sbe = e
	}
	b.alloc(n * sbe)
	b.free(n * es) // its incoming gradient
	b.free(n * es) // the saved softmax output
	if upcastCopy {
		b.alloc(n * e) // the upcast's backward casts dS back to DType
		b.free(n * es)
	}
	b.alloc(n * e) // * scaling backward
	b.free(n * e)
	b.alloc(q)      // dQ = dS @ K
	b.alloc(kvGrad) // dK (of the expansion) = dS^T @ Q
	b.free(n * e)   // dS dies
	if copyKV {
		b.free(kvUsed) // key_states is released
	}
	if expand {
		b.alloc(2 * kvBytes) // repeat_kv backward: sum over the groups
		b.free(2 * kvGrad)   // the expanded gradients die
	}
	if b.bad {
		return figs{}, errOverflow(s)
	}
	f.bwd = b.peak
	return f, nil
}
