package attention

import "github.com/gpumem/gpumem"

// MemEfficient is SDPA's memory-efficient backend, the xformers/CUTLASS
// kernel PyTorch vendors (_scaled_dot_product_efficient_attention;
// _efficient_attention_forward/_backward in
// aten/src/ATen/native/transformers/cuda/attention*.cu and
// mem_eff_attention/kernel_forward.h, kernel_backward.h), as Hugging
// Face's "sdpa" attention reaches it:
//   - KVHeads < Heads: transformers' sdpa_attention_forward expands K and V
//     with repeat_kv before the call (the kernel has no GQA), so the copies
//     replace k and v in Saved (for a single KV head repeat_kv returns a
//     stride-0 view and nothing is copied; gradients are still made for
//     every head and summed);
//   - forward allocates the output [b, s_q, h, d] in DType and, when a
//     gradient is needed, logsumexp [b, h, ceil(s_q/32)·32] fp32
//     (kAlignLSE = 32, "block size of backward"); kernels with head dims
//     above 128 (the 32×128 kMaxK=65536 instance) accumulate the output in
//     an fp32 buffer of the output's size when DType is not FP32
//     (kNeedsOutputAccumulatorBuffer); dropout draws from a philox seed and
//     offset (two 0-dim int64 tensors, returned and saved with or without
//     dropout), so no mask is kept;
//   - Mask4D: the [b, 1, s_q, s_k] additive mask in DType is passed as a
//     bias; preprocess_mask (attention.cpp) pads it to a multiple of 8 keys
//     when s_k is not one, and that per-call padded copy is saved for
//     backward; an aligned mask is the model's shared tensor, counted in
//     Forward only;
//   - backward allocates dq, dk, dv (of the expansions), delta fp32
//     [b, h, s_q] (modelled padded like logsumexp), and for fp16/bf16 a
//     gradQ accumulation workspace (kNeedsAccumGradQ), modelled as one fp32
//     tensor of q's shape with s_q padded to 64 — an approximation of
//     workspace_size(), not a measurement; then repeat_kv's backward sums
//     the expanded gradients into dk and dv.
//
// The output is saved for backward too, but it is the tensor the output
// projection keeps, so Saved excludes it (see [Kernel]).
type MemEfficient struct {
	// Mask4D passes transformers' materialized 4-D mask as the attention
	// bias (padding masks, or SDPA without is_causal).
	Mask4D bool
}

// Saved implements [Kernel].
func (k MemEfficient) Saved(s Shape) (gpumem.Bytes, error) { return savedOf(k.figures(s)) }

// Forward implements [Kernel].
func (k MemEfficient) Forward(s Shape) (gpumem.Bytes, error) { return forwardOf(k.figures(s)) }

// Backward implements [Kernel].
func (k MemEfficient) Backward(s Shape) (gpumem.Bytes, error) { return backwardOf(k.figures(s)) }

func (k MemEfficient) figures(s Shape) (figs, error) {
	d, err := dimsOf(s)
	if err != nil {
		return figs{}, err
	}
	e := d.e
	q, kv := d.q*e, d.kv*e
	expand := d.hk < d.h
	copyKV := expand && d.hk > 1 // repeat_kv of a single KV head is a view
	kvUsed := kv                 // one of k, v as kept
	if copyKV {
		kvUsed = d.kx * e
	}
	kvGrad := kv // one of dK, dV as the kernel's backward makes them
	if expand {
		kvGrad = d.kx * e
	}
	grad := !s.NoGrad
	f := figs{out: q, inputs: q + 2*kv, grads: q + 2*kv}

	var t tally
	var bias int64
	if k.Mask4D {
		t.alloc(d.b * d.sq * d.sk * e) // the model's 4-D mask
		if d.sk%8 != 0 {
			bias = d.b * d.sq * roundUp(d.sk, 8) * e
			t.alloc(bias) // pad_bias copy
		}
	}
	if copyKV {
		t.alloc(2 * kvUsed) // repeat_kv copies
	}
	t.alloc(q)     // output
	t.alloc(2 * 8) // philox seed and offset
	lse := int64(0)
	if grad {
		lse = d.b * d.h * roundUp(d.sq, 32) * 4
		t.alloc(lse)
	}
	if d.d > 128 && e != 4 {
		t.alloc(d.q * 4) // output_accum
		t.free(d.q * 4)
	}
	if t.bad {
		return figs{}, errOverflow(s)
	}
	f.fwd = t.peak
	if !grad {
		return f, nil
	}
	f.inQ = q
	if copyKV {
		f.own = 2 * kvUsed
	} else {
		f.inKV = 2 * kv
	}
	f.own += lse + bias + 2*8 // philox seed and offset: two 0-dim int64 tensors, returned even without dropout

	delta := d.b * d.h * roundUp(d.sq, 32) * 4
	var ws int64
	if e != 4 {
		ws = d.b * d.h * roundUp(d.sq, 64) * d.d * 4 // gradQ accumulation
	}
	var b tally
	b.alloc(q + 2*kvGrad) // grad_q, grad_k, grad_v
	b.alloc(delta + ws)
	if expand {
		b.free(delta + ws)
		if copyKV {
			b.free(2 * kvUsed) // the kernel node releases the saved expansions
		}
		b.alloc(2 * kv)    // repeat_kv backward: sum over the groups
		b.free(2 * kvGrad) // the expanded gradients die
	}
	if b.bad {
		return figs{}, errOverflow(s)
	}
	f.bwd = b.peak
	return f, nil
}
