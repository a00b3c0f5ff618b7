package attention

import (
	"errors"

	"github.com/gpumem/gpumem"
)

// HeadChunked runs Inner on groups of Heads query heads, one after the
// other, on slices q[:, i:j] (and the matching K/V heads), and
// concatenates the outputs, as the 32k-token block attention's
// _compute_block_attention_chunked_gpu does (docs/scenarios.md): the quadratic intermediates
// of one group are live at a time, so the forward peak falls from
// O(heads·s²) to O(Heads·s²).
//
// Under Shape.NoGrad that is the whole story: the 32-head, 32k-token layer
// of the 32k-token block attention needs 128 GiB for its fp32 probabilities, chunks of 8 heads
// need 32 GiB. In training every group's saved tensors stay for backward,
// so Saved is Inner's (less where a group needs no K/V copy) and only the
// transient above it shrinks. The backward runs the groups in reverse;
// each slice's gradient goes through slice_backward, which allocates a
// zero tensor of the whole q (k, v) and becomes or is added into the
// whole-size gradient, so from the second group on the whole dq, dk, dv
// are live under that group's backward. For sequences shorter than a few
// head dims this can make chunking cost more than it saves; the CPU
// oracle (testdata/eager_oracle.py) reproduces the figures to the byte.
//
// A group takes Heads/(Heads/KVHeads) KV heads; Heads must be a multiple
// or a divisor of the group size Heads/KVHeads of the shape. The last
// group may be smaller.
type HeadChunked struct {
	// Heads is the number of query heads per chunk, at least 1.
	Heads int
	// Inner is the kernel that runs each chunk.
	Inner Kernel
}

// Saved implements [Kernel].
func (k HeadChunked) Saved(s Shape) (gpumem.Bytes, error) { return savedOf(k.figures(s)) }

// Forward implements [Kernel].
func (k HeadChunked) Forward(s Shape) (gpumem.Bytes, error) { return forwardOf(k.figures(s)) }

// Backward implements [Kernel].
func (k HeadChunked) Backward(s Shape) (gpumem.Bytes, error) { return backwardOf(k.figures(s)) }

func (k HeadChunked) figures(s Shape) (figs, error) {
	if err := s.Validate(); err != nil {
		return figs{}, err
	}
	if k.Inner == nil {
		return figs{}, gpumem.Errorf("HeadChunked.Inner", nil, gpumem.ErrInvalid, "no kernel")
	}
	if k.Heads < 1 {
		return figs{}, gpumem.Errorf("HeadChunked.Heads", k.Heads, gpumem.ErrInvalid, "must be at least 1")
	}
	h, hk := s.Heads, s.kvHeads()
	c := min(k.Heads, h)
	if c == h {
		return figuresOf(k.Inner, s)
	}
	g := h / hk // query heads per KV head
	var ckv int
	switch {
	case c%g == 0:
		ckv = c / g
	case g%c == 0:
		ckv = 1
	default:
		return figs{}, gpumem.Errorf("HeadChunked.Heads", k.Heads, gpumem.ErrInvalid,
			"must be a multiple or a divisor of the %d query heads per KV head", g)
	}
	n := (h + c - 1) / c
	cs := s
	cs.Heads, cs.KVHeads = c, ckv
	full, err := figuresOf(k.Inner, cs)
	if err != nil {
		return figs{}, err
	}
	ls := lastShape(s, cs, h-(n-1)*c, g)
	last := full
	if ls != cs {
		if last, err = figuresOf(k.Inner, ls); err != nil {
			return figs{}, err
		}
	}
	f := chunkFigs(int64(n), full, last, qPiece(ls), true, s)
	if !s.NoGrad {
		f.inQ = full.inQ*int64(n-1) + last.inQ
		if c < g {
			f.inKV = full.inKV * int64(hk) // chunks of one group share its K/V slice
		} else {
			f.inKV = full.inKV*int64(n-1) + last.inKV
		}
	}
	return f, nil
}

// chunkFigs composes n ≥ 2 sequential chunks of a kernel (n−1 like full,
// the last like last) whose outputs are concatenated into the output of
// s. The chunks slice q; sliceKV reports whether they slice k and v too
// (heads) or share them (query blocks). It sets everything but the input
// references (inQ, inKV), which depend on how the chunks slice q, k, v.
// piece is the bytes of a chunk's own q (and its output).
type piece struct{ q int64 }

func chunkFigs(n int64, full, last figs, lastPiece piece, sliceKV bool, s Shape) figs {
	d, _ := dimsOf(s) // s was validated by the caller
	in := (d.q + 2*d.kv) * d.e
	f := figs{out: d.q * d.e, inputs: in, grads: in}
	f.retained = full.retained*(n-1) + last.retained

	// Forward: chunk i runs on top of the saved tensors and outputs of the
	// chunks before it (own+out each, growing), then torch.cat copies all
	// outputs. Chunks 0..n−2 are alike, so the largest full chunk peak is
	// the last of them.
	keep := func(c figs) int64 {
		if s.NoGrad {
			return c.out
		}
		return c.own + c.out
	}
	peak := (n-1)*keep(full) + last.fwd
	if p := (n-2)*keep(full) + full.fwd; p > peak {
		peak = p
	}
	if p := (n-1)*keep(full) + keep(last) + f.out; p > peak {
		peak = p
	}
	f.fwd = peak
	if s.NoGrad {
		return f
	}
	f.own = full.own*(n-1) + last.own

	// Backward: the last chunk's node runs first, then the others, each on
	// top of what the earlier ones left. A chunk releases its saved tensors
	// and leaves gradient pieces. A sliced input (q[:, i:j]) sends its piece
	// through slice_backward, which allocates a zero tensor of the whole
	// input and copies the piece in; the first of those becomes the
	// input's gradient buffer and later ones are added into it in place.
	// An input shared by every chunk (k and v of query blocks) gets whole
	// gradients from each chunk, accumulated the same way. So after the
	// first chunk the whole dq, dk, dv exist (F = f.grads) and the largest
	// later peak is the second chunk's, F − last.own + full.bwd, or its
	// slice step. Checked against the CPU oracle (testdata/eager_oracle.py).
	dq, dkv := d.q*d.e, 2*d.kv*d.e // whole gradients
	lq := lastPiece.q
	bp := last.bwd
	acc := last.grads - last.own // pieces of the first chunk
	if p := acc + dq; p > bp {
		bp = p // its q piece goes through slice_backward
	}
	acc += dq - lq
	if sliceKV {
		if p := acc + dkv; p > bp {
			bp = p
		}
		acc += dkv - (last.grads - lq)
	}
	// acc = F − last.own now.
	if n >= 2 {
		if p := acc + full.bwd; p > bp {
			bp = p
		}
		tmp := dq // one whole-size slice_backward tensor at a time
		if sliceKV {
			tmp = max(dq, dkv/2)
		}
		if p := acc + full.grads - full.own + tmp; p > bp {
			bp = p
		}
	}
	f.bwd = bp
	return f
}

// QueryChunked runs Inner on blocks of Rows query rows, one after the
// other, against all keys, and concatenates the outputs: the quadratic
// intermediates of one block (Rows·s_k per head) are live at a time. Every
// block reads the whole K and V, which are kept once; with Shape.Causal a
// block is modelled with all keys (a key-truncating implementation uses
// less). As for [HeadChunked], in training the blocks' saved tensors
// accumulate, a kernel that copies K and V per call keeps one copy per
// block, and the whole-size gradients are live from the second block's
// backward on; the saving is in the forward transient and, under
// Shape.NoGrad, in the whole peak. With three or more blocks the model's
// backward can exceed the CPU oracle's by one dV, which the autograd
// engine merges into the shared gradient early.
type QueryChunked struct {
	// Rows is the number of query rows per block, at least 1.
	Rows int
	// Inner is the kernel that runs each block.
	Inner Kernel
}

// Saved implements [Kernel].
func (k QueryChunked) Saved(s Shape) (gpumem.Bytes, error) { return savedOf(k.figures(s)) }

// Forward implements [Kernel].
func (k QueryChunked) Forward(s Shape) (gpumem.Bytes, error) { return forwardOf(k.figures(s)) }

// Backward implements [Kernel].
func (k QueryChunked) Backward(s Shape) (gpumem.Bytes, error) { return backwardOf(k.figures(s)) }

func (k QueryChunked) figures(s Shape) (figs, error) {
	if err := s.Validate(); err != nil {
		return figs{}, err
	}
	if k.Inner == nil {
		return figs{}, gpumem.Errorf("QueryChunked.Inner", nil, gpumem.ErrInvalid, "no kernel")
	}
	if k.Rows < 1 {
		return figs{}, gpumem.Errorf("QueryChunked.Rows", k.Rows, gpumem.ErrInvalid, "must be at least 1")
	}
	r := min(k.Rows, s.QueryLen)
	if r == s.QueryLen {
		return figuresOf(k.Inner, s)
	}
	n := (s.QueryLen + r - 1) / r
	cs := s
	cs.QueryLen = r
	full, err := figuresOf(k.Inner, cs)
	if err != nil {
		return figs{}, err
	}
	last := full
	if lr := s.QueryLen - (n-1)*r; lr != r {
		ls := s
		ls.QueryLen = lr
		if last, err = figuresOf(k.Inner, ls); err != nil {
			return figs{}, err
		}
	}
	ls := cs
	ls.QueryLen = s.QueryLen - (n-1)*r
	f := chunkFigs(int64(n), full, last, qPiece(ls), false, s)
	if !s.NoGrad {
		f.inQ = full.inQ*int64(n-1) + last.inQ
		f.inKV = full.inKV // one K and V, shared by every block
	}
	return f, nil
}

// qPiece returns the bytes of the q of a chunk shape.
func qPiece(s Shape) piece {
	return piece{q: int64(s.Batch) * int64(s.Heads) * int64(s.QueryLen) * int64(s.HeadDim) * s.elemSize()}
}

// lastShape returns the shape of the last head chunk of r heads.
func lastShape(s, cs Shape, r, g int) Shape {
	if r == cs.Heads {
		return cs
	}
	ls := s
	ls.Heads, ls.KVHeads = r, max(1, r/g)
	return ls
}

// SlidingWindow is local attention computed in blocks: every query
// attends to at most Window keys before it (Shape.Causal) or Window keys
// on each side, and the queries are processed in blocks of Window rows
// that each see the keys of their own block and of the neighbouring
// block(s): 2·Window keys when causal, 3·Window otherwise, capped at
// KeyLen. All blocks run at once through Inner as a batch of
// Batch·ceil(QueryLen/Window) sequences, after the queries are copied into
// whole blocks and the overlapping key and value blocks are gathered into
// copies; the output is cut back to QueryLen rows and made contiguous.
// This is the scheme of Longformer's sliding-chunks attention (Beltagy et
// al. 2020, §3; transformers' LongformerSelfAttention
// ._sliding_chunks_query_key_matmul), which differs in its chunk
// bookkeeping. Memory is then linear in the sequence length: about
// b·h·s·2w (causal) or b·h·s·3w score elements instead of b·h·s².
//
// When one block covers the queries, or blocking would need more memory
// than the plain kernel (sequences of a few windows), the figures are
// Inner's on the queries and the last QueryLen + Window keys
// (QueryLen + 2·Window without a causal mask), with k and v counted whole.
//
// This is the memory of a blocked implementation. Kernels that take the
// window as a mask on the full matrix ([Eager] with Mistral's sliding
// window mask) keep their full s² cost, and FlashAttention's window_size
// changes only the work, not the memory; model those with the kernel
// itself.
type SlidingWindow struct {
	// Window is the number of keys each query sees on a side, at least 1.
	Window int
	// Inner is the kernel that runs the blocks.
	Inner Kernel
}

// Saved implements [Kernel].
func (k SlidingWindow) Saved(s Shape) (gpumem.Bytes, error) { return savedOf(k.figures(s)) }

// Forward implements [Kernel].
func (k SlidingWindow) Forward(s Shape) (gpumem.Bytes, error) { return forwardOf(k.figures(s)) }

// Backward implements [Kernel].
func (k SlidingWindow) Backward(s Shape) (gpumem.Bytes, error) { return backwardOf(k.figures(s)) }

func (k SlidingWindow) figures(s Shape) (figs, error) {
	d, err := dimsOf(s)
	if err != nil {
		return figs{}, err
	}
	if k.Inner == nil {
		return figs{}, gpumem.Errorf("SlidingWindow.Inner", nil, gpumem.ErrInvalid, "no kernel")
	}
	if k.Window < 1 {
		return figs{}, gpumem.Errorf("SlidingWindow.Window", k.Window, gpumem.ErrInvalid, "must be at least 1")
	}
	// Lengths are capped at maxElems by dimsOf, so a window beyond the key
	// length can be clamped to it before any arithmetic.
	w := min(int64(k.Window), d.sk)
	span := 3 * w
	if s.Causal {
		span = 2 * w
	}
	// Unblocked, the queries still see only the last s_q + Window keys
	// (s_q + 2·Window without a causal mask): the queries sit at the end of
	// the keys, as in a prefill against a cache.
	ps := s
	ps.KeyLen = int(min(d.sk, d.sq+span-w))
	plain, perr := figuresOf(k.Inner, ps)
	if perr == nil && ps.KeyLen != s.KeyLen {
		plain = withInputsOf(plain, d) // k and v are still given whole
	}
	if w >= d.sq || span >= d.sk {
		return plain, perr // one block covers everything
	}
	if perr != nil && !errors.Is(perr, gpumem.ErrRange) {
		return figs{}, perr
	}
	nb := (d.sq + w - 1) / w
	bs := s
	bs.Batch, bs.QueryLen, bs.KeyLen = int(d.b*nb), int(w), int(span)
	in, err := figuresOf(k.Inner, bs)
	if err != nil {
		return figs{}, err
	}
	e := d.e
	q, kv := d.q*e, d.kv*e
	gathered := 2 * d.b * d.hk * nb * span * d.d * e // overlapping K and V blocks
	qb := d.b * d.h * nb * w * d.d * e               // q copied into whole blocks
	f := figs{out: q, inputs: q + 2*kv, grads: q + 2*kv, retained: in.retained}
	f.fwd = gathered + qb + in.fwd + q // and the output cut back to QueryLen rows
	if s.NoGrad {
		return f, nil
	}
	f.own = in.own
	if in.inKV > 0 {
		f.own += gathered // Inner keeps the gathered blocks
	}
	if in.inQ > 0 {
		f.own += qb
	}
	// Backward: Inner's, then the gathered blocks' gradients are
	// scatter-added into full-size dk and dv (and dq unpadded).
	f.bwd = in.bwd + 2*kv + q
	// Blocking only pays once the sequence is a few windows long; below
	// that an implementation runs the plain kernel, and so does the model.
	if perr == nil && f.peak() > plain.peak() {
		return plain, nil
	}
	return f, nil
}

// withInputsOf adjusts the figures of a kernel run on the last keys of k
// and v (a view) to the whole call: the kept references are views of the
// given k and v, whose storage is whole, and the gradients are whole.
func withInputsOf(f figs, d dims) figs {
	in := (d.q + 2*d.kv) * d.e
	extra := in - f.inputs
	f.inputs, f.grads = in, in
	if f.inKV > 0 {
		f.inKV = 2 * d.kv * d.e
	}
	f.bwd += extra // dk and dv are whole (zeros outside the window)
	return f
}
