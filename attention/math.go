package attention

import "github.com/gpumem/gpumem"

// Math is PyTorch's SDPA math backend, the composite fallback of
// torch.nn.functional.scaled_dot_product_attention
// (_scaled_dot_product_attention_math in
// aten/src/ATen/native/transformers/attention.cpp, the version with
// enable_gqa, _safe_softmax and allowFP16BF16ReductionMathSDP):
//
//	query_acc, key_acc, value_acc = q, k, v upcast to fp32 if fp16/bf16   # unless reduced precision is allowed
//	query = query_acc * sqrt(scale)
//	mask = float(tril(ones(L, S, bool)))                                  # if is_causal
//	key_expanded, value_expanded = repeat_interleave(key_acc, value_acc)  # enable_gqa, KVHeads < Heads
//	attn = matmul(query, key_expanded.transpose(-2, -1) * sqrt(scale)); attn.add_(mask)
//	attn = _safe_softmax(attn, -1)                                        # softmax, then where(all-masked rows, 0, ·)
//	attn = dropout(attn, p)                                               # CUDA: native_dropout, bool mask
//	return matmul(attn, value_expanded).to(origin_dtype), attn.to(origin_dtype)
//
// Everything between the upcast and the final cast is in the accumulation
// dtype, so for fp16/bf16 inputs the score-sized tensors take 4 bytes per
// element: Saved holds the scaled query, the scaled (expanded) keys, the
// (expanded) values, the softmax result and, with dropout, the mask and
// the dropped probabilities; the forward peak meets _safe_softmax holding
// its input, its softmax and its where result at once (3 score tensors in
// the accumulation dtype plus a 1-byte comparison). The second return
// value, the probabilities cast back to DType, is allocated even though
// scaled_dot_product_attention discards it. The q and k given are not
// kept; v is kept only when no copy replaces it.
//
// Two readings are assumptions, not checked against a build: autograd
// saves only _safe_softmax's result (as for softmax, its backward needs
// the output), and CUDA runs _safe_softmax as the composite above (XPU has
// a fused kernel, which would not need the comparison and where tensors).
// No CPU oracle covers Math: torch 1.13 predates this function.
//
// Older releases (before the upcast and _safe_softmax were added) compute
// in DType with a plain softmax; ReducedPrecision covers the first
// difference, and the model's extra where tensor makes it an upper bound
// for them.
type Math struct {
	// ReducedPrecision keeps fp16/bf16 inputs in their dtype instead of
	// upcasting to fp32, as torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
	// does (and PyTorch releases that predate the upcast).
	ReducedPrecision bool
}

// Saved implements [Kernel].
func (k Math) Saved(s Shape) (gpumem.Bytes, error) { return savedOf(k.figures(s)) }

// Forward implements [Kernel].
func (k Math) Forward(s Shape) (gpumem.Bytes, error) { return forwardOf(k.figures(s)) }

// Backward implements [Kernel].
func (k Math) Backward(s Shape) (gpumem.Bytes, error) { return backwardOf(k.figures(s)) }

func (k Math) figures(s Shape) (figs, error) {
	d, err := dimsOf(s)
	if err != nil {
		return figs{}, err
	}
	n, err := d.scores(s)
	if err != nil {
		return figs{}, err
	}
	e := d.e
	a := e // accumulation dtype bytes
	if !k.ReducedPrecision && (s.DType == gpumem.FP16 || s.DType == gpumem.BF16) {
		a = 4
	}
	upcast := a != e
	gqa := d.hk < d.h
	ke := d.kv // elements of key_expanded / value_expanded
	if gqa {
		ke = d.kx
	}
	drop := s.dropout()
	grad := !s.NoGrad
	q, kv := d.q*e, d.kv*e
	f := figs{out: q, inputs: q + 2*kv, grads: q + 2*kv}

	var t tally
	if upcast {
		t.alloc(d.q*a + 2*d.kv*a) // query_acc, key_acc, value_acc (locals until return)
	}
	t.alloc(d.q * a) // query = query_acc * sqrt(scale)
	ls := d.sq * d.sk
	if s.Causal {
		t.alloc(2 * ls) // ones(L, S, bool) and its tril
		t.free(ls)
		t.alloc(ls)     // logical_not
		t.alloc(ls * a) // where(..., -inf, 0): the float mask
		t.free(2 * ls)
	}
	if gqa {
		t.alloc(2 * ke * a) // repeat_interleave of key and value
	}
	t.alloc(ke * a) // key_expanded^T * sqrt(scale)
	t.alloc(n * a)  // attn = matmul(...)
	if !grad {
		t.free(ke * a) // the scaled keys were a temporary
	}
	t.alloc(n * a)            // _safe_softmax: softmax
	t.alloc(n + d.b*d.h*d.sq) // eq(-inf) and all(dim=-1)
	t.alloc(n * a)            // where(masked_rows, 0, softmax)
	t.free(n*a + n + d.b*d.h*d.sq)
	t.free(n * a) // the pre-softmax attn dies (reassigned)
	if drop {
		t.alloc(n*a + n) // dropout output and bool mask
	}
	t.alloc(d.q * a) // matmul(attn, value_expanded)
	if upcast {
		t.alloc(q)     // .to(origin_dtype): the output
		t.alloc(n * e) // attn.to(origin_dtype), returned and discarded
	}
	f.fwd = t.peak
	if t.bad {
		return figs{}, errOverflow(s)
	}
	if !grad {
		return f, nil
	}

	// Saved: query, the scaled keys, the softmax result, dropout mask and
	// output, and value_expanded (a copy, or v itself).
	f.own = d.q*a + ke*a + n*a
	if drop {
		f.own += n + n*a
	}
	vOwn := gqa || upcast
	if vOwn {
		f.own += ke * a
	} else {
		f.inKV = kv // v itself; k is replaced by its scaled copy
	}

	var b tally
	if upcast {
		b.alloc(d.q * a) // dO to fp32 (.to backward)
	}
	b.alloc(n * a)  // dP = dO @ value_expanded^T
	b.alloc(ke * a) // d value_expanded = P^T @ dO
	if upcast {
		b.free(d.q * a)
	}
	if drop {
		b.free(n * a) // the dropped probabilities are released
	}
	if vOwn {
		b.free(ke * a) // value_expanded is released
	}
	if drop {
		b.alloc(n * a) // dropout backward
		b.free(n * a)
		b.free(n) // the mask is released
	}
	b.alloc(n * a)       // _safe_softmax backward
	b.free(n * a)        // its incoming gradient
	b.free(n * a)        // the saved softmax result
	b.alloc(d.q * a)     // d query = dS @ kscaled
	b.alloc(ke * a)      // d kscaled = dS^T @ query
	b.free(n * a)        // dS dies
	b.free(d.q*a + ke*a) // query and the scaled keys are released
	b.alloc(ke * a)      // * sqrt(scale) backward for the keys
	b.free(ke * a)
	b.alloc(d.q * a) // * sqrt(scale) backward for the query
	b.free(d.q * a)
	if gqa {
		b.alloc(2 * d.kv * a) // repeat_interleave backward: sum over groups
		b.free(2 * ke * a)
	}
	if upcast {
		b.alloc(q + 2*kv) // .to(fp32) backward: dq, dk, dv in DType
		b.free(d.q*a + 2*d.kv*a)
	}
	if b.bad {
		return figs{}, errOverflow(s)
	}
	f.bwd = b.peak
	return f, nil
}
