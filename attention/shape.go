package attention

import (
	"math"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Shape is one attention call: batch × heads queries of QueryLen tokens
// attending to KeyLen keys, with head dimension HeadDim, computed in DType.
//
// The query is [Batch, Heads, QueryLen, HeadDim]; the key and the value
// are [Batch, KVHeads, KeyLen, HeadDim]. QueryLen ≠ KeyLen is
// cross-attention (a decoder attending to an encoder) or a prefill against
// a cache.
//
// The zero value is not valid; [Shape.Validate] says which field is wrong.
type Shape struct {
	// Batch is the number of sequences, at least 1.
	Batch int
	// Heads is the number of query heads, at least 1.
	Heads int
	// KVHeads is the number of key/value heads (grouped-query attention);
	// it must divide Heads. Zero means Heads (multi-head attention).
	KVHeads int
	// QueryLen is the number of query tokens per sequence, at least 1.
	QueryLen int
	// KeyLen is the number of key tokens per sequence, at least 1.
	KeyLen int
	// HeadDim is the dimension of one head, at least 1.
	HeadDim int
	// DType is the compute dtype of q, k, v and the output: a plain
	// floating-point type (FP32, FP16, BF16, FP8, ...), not a block format.
	DType gpumem.DType
	// Causal reports a causal (autoregressive) mask. It changes memory only
	// where a kernel builds the mask itself (SDPA's math path), picks tile
	// sizes by it (FlashAttention-3's backward), or restricts the keys
	// ([SlidingWindow]).
	Causal bool
	// Dropout is the attention dropout probability in [0, 1). Kernels that
	// materialize the probabilities keep a dropout mask for backward when it
	// is positive; fused kernels regenerate it from a seed.
	Dropout float64
	// NoGrad reports a forward under torch.no_grad or inference_mode (and
	// model.eval(), so dropout is off): nothing is saved, Saved and Backward
	// are zero, and intermediates die as soon as they are last used.
	NoGrad bool
}

// Validate reports the first invalid field as a *gpumem.FieldError
// wrapping gpumem.ErrInvalid (or gpumem.ErrUnsupported for a dtype no
// attention kernel computes in). It does not allocate when s is valid.
func (s Shape) Validate() error {
	switch {
	case s.Batch < 1:
		return gpumem.Errorf("Shape.Batch", s.Batch, gpumem.ErrInvalid, "must be at least 1")
	case s.Heads < 1:
		return gpumem.Errorf("Shape.Heads", s.Heads, gpumem.ErrInvalid, "must be at least 1")
	case s.KVHeads < 0:
		return gpumem.Errorf("Shape.KVHeads", s.KVHeads, gpumem.ErrInvalid, "must not be negative")
	case s.KVHeads > s.Heads:
		return gpumem.Errorf("Shape.KVHeads", s.KVHeads, gpumem.ErrInvalid, "more KV heads than query heads (%d)", s.Heads)
	case s.KVHeads > 0 && s.Heads%s.KVHeads != 0:
		return gpumem.Errorf("Shape.KVHeads", s.KVHeads, gpumem.ErrInvalid, "must divide Heads (%d)", s.Heads)
	case s.QueryLen < 1:
		return gpumem.Errorf("Shape.QueryLen", s.QueryLen, gpumem.ErrInvalid, "must be at least 1")
	case s.KeyLen < 1:
		return gpumem.Errorf("Shape.KeyLen", s.KeyLen, gpumem.ErrInvalid, "must be at least 1")
	case s.HeadDim < 1:
		return gpumem.Errorf("Shape.HeadDim", s.HeadDim, gpumem.ErrInvalid, "must be at least 1")
	case !s.DType.Valid():
		return gpumem.Errorf("Shape.DType", s.DType, gpumem.ErrInvalid, "not a storage format")
	case !s.DType.IsFloat() || s.DType.IsQuantized() || s.DType == gpumem.C64:
		return gpumem.Errorf("Shape.DType", s.DType, gpumem.ErrUnsupported, "attention computes in a plain floating-point type")
	case math.IsNaN(s.Dropout) || s.Dropout < 0 || s.Dropout >= 1:
		return gpumem.Errorf("Shape.Dropout", s.Dropout, gpumem.ErrInvalid, "must be in [0, 1)")
	}
	return nil
}

// kvHeads returns KVHeads with zero meaning Heads.
func (s Shape) kvHeads() int {
	if s.KVHeads == 0 {
		return s.Heads
	}
	return s.KVHeads
}

// dropout reports whether a dropout mask is drawn: a positive
// probability in a training (grad-recording) forward.
func (s Shape) dropout() bool { return s.Dropout > 0 && !s.NoGrad }

// elemSize returns the bytes of one element of s.DType (valid shapes only).
func (s Shape) elemSize() int64 {
	_, b := s.DType.Block()
	return b
}

// dims holds the element counts every kernel needs, computed once with
// overflow checks.
type dims struct {
	b, h, hk, sq, sk, d int64
	e                   int64 // bytes per element of the compute dtype
	q                   int64 // elements of q and of the output: b·h·sq·d
	kv                  int64 // elements of k (and of v): b·hk·sk·d
	kx                  int64 // elements of k expanded to all heads: b·h·sk·d
	n                   int64 // elements of the score matrix: b·h·sq·sk
}

// dimsOf validates s and returns its element counts. The only error
// besides Validate's is an element count beyond int64.
func dimsOf(s Shape) (dims, error) {
	if err := s.Validate(); err != nil {
		return dims{}, err
	}
	d := dims{
		b: int64(s.Batch), h: int64(s.Heads), hk: int64(s.kvHeads()),
		sq: int64(s.QueryLen), sk: int64(s.KeyLen), d: int64(s.HeadDim),
		e: s.elemSize(),
	}
	var ok1, ok2, ok3, ok4 bool
	d.q, ok1 = checked.MulAll(d.b, d.h, d.sq, d.d)
	d.kv, ok2 = checked.MulAll(d.b, d.hk, d.sk, d.d)
	d.kx, ok3 = checked.MulAll(d.b, d.h, d.sk, d.d)
	d.n, ok4 = checked.MulAll(d.b, d.h, d.sq, d.sk)
	// Every figure multiplies element counts by a few bytes and by tile
	// round-ups and adds a few dozen terms. Capping each tensor at 2^43
	// elements (8 TiB at one byte, far beyond any device) keeps all of that
	// arithmetic below 2^63 without checking every step. The score count
	// is capped separately: only the kernels that materialize it fail.
	if !ok1 || !ok2 || !ok3 || d.q > maxElems || d.kv > maxElems || d.kx > maxElems {
		return dims{}, errOverflow(s)
	}
	if !ok4 || d.n > maxElems {
		d.n = -1
	}
	return d, nil
}

// maxElems bounds the element count of any one tensor a figure counts.
const maxElems = 1 << 43

// scores returns the score-matrix element count, or an overflow error
// for a shape whose b·h·s_q·s_k exceeds maxElems.
func (d dims) scores(s Shape) (int64, error) {
	if d.n < 0 {
		return 0, errOverflow(s)
	}
	return d.n, nil
}

func errOverflow(s Shape) error {
	return gpumem.Errorf("Shape", s, gpumem.ErrRange, "byte counts overflow int64")
}

// Inputs returns the bytes of q, k and v as a kernel receives them:
// b·h·s_q·d + 2·b·h_kv·s_k·d elements of DType.
func Inputs(s Shape) (gpumem.Bytes, error) {
	d, err := dimsOf(s)
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes((d.q + 2*d.kv) * d.e), nil
}

// Output returns the bytes of the attention output o (and of its
// gradient dO): b·h·s_q·d elements of DType.
func Output(s Shape) (gpumem.Bytes, error) {
	d, err := dimsOf(s)
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes(d.q * d.e), nil
}

// Scores returns the bytes of one score (or probability) matrix of s in
// dtype dt: b·h·s_q·s_k elements. It is the unit of the quadratic terms:
// Scores(s, FP32) of Whisper-small's encoder (12 heads, 1500 frames) is
// 108,000,000 bytes, the "104 MB" allocation of the Whisper language attack
// (docs/scenarios.md) once the CUDA
// caching allocator rounds it up to a multiple of 2 MiB.
func Scores(s Shape, dt gpumem.DType) (gpumem.Bytes, error) {
	d, err := dimsOf(s)
	if err != nil {
		return 0, err
	}
	n, err := d.scores(s)
	if err != nil {
		return 0, err
	}
	b, err := dt.Size(n)
	if err != nil {
		return 0, gpumem.Errorf("dtype", dt, gpumem.ErrInvalid, "not a storage format")
	}
	return b, nil
}
