package attention

import "github.com/gpumem/gpumem"

// Flash is FlashAttention (Dao et al. 2022; FlashAttention-2, Dao 2023;
// FlashAttention-3, Shah et al. 2024): tiled attention that never
// materializes the s_q×s_k matrix. It follows the allocations of
// Dao-AILab/flash-attention (snapshot 0251105, 2026-08):
//
// FlashAttention-2 (csrc/flash_attn/flash_api.cpp mha_fwd/mha_bwd and
// flash_attn/flash_attn_interface.py):
//   - the Python wrapper pads q, k, v to a head dim that is a multiple of
//     8 when it is not (those copies are what it saves);
//   - forward allocates out [b, s_q, h, d] in DType, softmax_lse
//     [b, h, s_q] fp32 and rng_state (2 int64); autograd saves q, k, v,
//     out, softmax_lse and rng_state;
//   - backward allocates dq, dk, dv like q, k, v, softmax_d
//     [b, h, round128(s_q)] fp32 and dq_accum [b, round128(s_q), h,
//     round(d, 32 if d ≤ 128 else 64)] fp32, and for KVHeads < Heads
//     dk_expanded and dv_expanded [b, s_k, h, d] in DType, summed into
//     dk and dv.
//
// FlashAttention-3 (hopper/flash_api.cpp, sm90 tile sizes):
//   - forward allocates out and softmax_lse [b, h, s_q] fp32; no dropout;
//   - backward allocates dq, dk, dv, softmax_d and softmax_lse_log2
//     [b, h, round(s_q, kBlockM)] fp32, dq_accum [b, h, round(s_q,
//     kBlockM)·d_r] fp32 with d_r the head dim rounded to 64, 96, 128,
//     192 or 256, a dq semaphore, and for KVHeads < Heads dk_accum and
//     dv_accum [b, h_kv, round(s_k, kBlockN)·d_r] fp32 with their
//     semaphores.
//
// The output o is the tensor the output projection saves (a view), so
// Saved excludes it except for the head-dim padding, which only the saved
// out_padded holds. Dropout draws its mask from the saved RNG state: no
// mask is stored. Not modelled: the split-KV forward's fp32 partial
// outputs (FlashAttention-2 picks num_splits > 1 only when
// batch·heads·ceil(s_q/64) underfills the GPU, as in decoding), the
// deterministic backward's per-split dq_accum, and varlen packing.
//
// FlashAttention accepts fp16 and bf16 (FlashAttention-3 also fp8 e4m3)
// and head dims up to 256; other shapes fail with gpumem.ErrUnsupported,
// as the library does.
type Flash struct {
	// Version is 2 (the default when zero) for FlashAttention-2 or 3 for
	// FlashAttention-3 (Hopper).
	Version int
}

// Saved implements [Kernel].
func (k Flash) Saved(s Shape) (gpumem.Bytes, error) { return savedOf(k.figures(s)) }

// Forward implements [Kernel].
func (k Flash) Forward(s Shape) (gpumem.Bytes, error) { return forwardOf(k.figures(s)) }

// Backward implements [Kernel].
func (k Flash) Backward(s Shape) (gpumem.Bytes, error) { return backwardOf(k.figures(s)) }

func (k Flash) figures(s Shape) (figs, error) {
	d, err := dimsOf(s)
	if err != nil {
		return figs{}, err
	}
	switch {
	case s.DType == gpumem.FP16 || s.DType == gpumem.BF16:
	case k.Version == 3 && (s.DType == gpumem.FP8E4M3):
	default:
		return figs{}, gpumem.Errorf("Shape.DType", s.DType, gpumem.ErrUnsupported, "FlashAttention computes in fp16 or bf16 (FlashAttention-3 also fp8_e4m3)")
	}
	switch k.Version {
	case 0, 2:
	case 3:
		if s.dropout() {
			return figs{}, gpumem.Errorf("Shape.Dropout", s.Dropout, gpumem.ErrUnsupported, "FlashAttention-3 has no dropout")
		}
		if s.HeadDim%8 != 0 {
			return figs{}, gpumem.Errorf("Shape.HeadDim", s.HeadDim, gpumem.ErrUnsupported, "FlashAttention-3 needs a multiple of 8")
		}
	default:
		return figs{}, gpumem.Errorf("Flash.Version", k.Version, gpumem.ErrInvalid, "2 or 3")
	}
	if s.HeadDim > 256 {
		return figs{}, gpumem.Errorf("Shape.HeadDim", s.HeadDim, gpumem.ErrUnsupported, "FlashAttention supports head dims up to 256")
	}
	if k.Version == 3 {
		return flash3(s, d), nil
	}
	return flash2(s, d), nil
}

func flash2(s Shape, d dims) figs {
	e := d.e
	q, kv := d.q*e, d.kv*e
	f := figs{out: q, inputs: q + 2*kv, grads: q + 2*kv}
	// Head dim padded to a multiple of 8 by the Python wrapper.
	dp := roundUp(d.d, 8)
	qp, kvp := q/d.d*dp, kv/d.d*dp // exact: q and kv are multiples of d
	pad := dp != d.d
	lse := d.b * d.h * d.sq * 4
	const rng = 2 * 8

	var t tally
	if pad {
		t.alloc(qp + 2*kvp)
	}
	t.alloc(qp)        // out (out_padded when padded)
	t.alloc(lse + rng) // softmax_lse and rng_state
	f.fwd = t.peak
	if s.NoGrad {
		return f
	}
	if pad {
		f.own = qp + 2*kvp + (qp - q) // padded q, k, v and the padding of out
	} else {
		f.inQ, f.inKV = q, 2*kv
	}
	f.own += lse + rng

	var b tally
	if pad {
		b.alloc(qp) // dout padded
	}
	b.alloc(qp + 2*kvp) // dq, dk, dv
	dr := roundUp(d.d, 32)
	if d.d > 128 {
		dr = roundUp(d.d, 64)
	}
	sqr := roundUp(d.sq, 128)
	b.alloc(d.b * d.h * sqr * 4)      // softmax_d
	b.alloc(d.b * sqr * d.h * dr * 4) // dq_accum
	if d.hk < d.h {
		b.alloc(2 * d.b * d.sk * d.h * dp * e) // dk_expanded, dv_expanded
	}
	f.bwd = b.peak
	return f
}

func flash3(s Shape, d dims) figs {
	e := d.e
	oe := e
	if e == 1 {
		oe = 2 // fp8 inputs produce a bf16 output
	}
	q, kv := d.q*e, d.kv*e
	f := figs{out: d.q * oe, inputs: q + 2*kv, grads: q + 2*kv}
	lse := d.b * d.h * d.sq * 4
	var t tally
	t.alloc(d.q*oe + lse)
	f.fwd = t.peak
	if s.NoGrad {
		return f
	}
	f.inQ, f.inKV = q, 2*kv
	f.own = lse

	var dr int64
	switch {
	case d.d <= 64:
		dr = 64
	case d.d <= 96:
		dr = 96
	case d.d <= 128:
		dr = 128
	case d.d <= 192:
		dr = 192
	default:
		dr = 256
	}
	var bm, bn int64
	switch {
	case dr <= 64:
		bm = 128
	case dr <= 96:
		bm = 64
	case dr <= 128:
		bm = 80
		if s.Causal {
			bm = 64
		}
	default:
		bm = 64
	}
	switch {
	case dr <= 128:
		bn = 128
	case dr <= 192:
		bn = 96
	default:
		bn = 80
	}
	sqr := roundUp(d.sq, bm)
	var b tally
	b.alloc(q + 2*kv)                             // dq, dk, dv
	b.alloc(2 * d.b * d.h * sqr * 4)              // softmax_d, softmax_lse_log2
	b.alloc(d.b * d.h * sqr * dr * 4)             // dq_accum
	b.alloc((d.sq + bm - 1) / bm * d.b * d.h * 4) // dq_semaphore
	if d.hk < d.h {
		skr := roundUp(d.sk, bn)
		b.alloc(2 * d.b * d.hk * skr * dr * 4)               // dk_accum, dv_accum
		b.alloc(2 * ((d.sk + bn - 1) / bn) * d.b * d.hk * 4) // their semaphores
	}
	f.bwd = b.peak
	return f
}
