package attention

import (
	"errors"

	"github.com/gpumem/gpumem"
)

// maxSearch bounds the searches: 2^40 tokens or sequences.
const maxSearch = 1 << 40

// LongestSeqLen returns the largest sequence length L such that
// Peak(k, s) with QueryLen = KeyLen = L is at most limit (self-attention
// of L tokens; the other fields of s are kept). It searches by doubling
// and integer bisection, which is exact because every kernel's peak is
// non-decreasing in L: the result fits and the result + 1 does not (or
// the result is 2^40). A length whose figures overflow counts as not
// fitting. It fails with gpumem.ErrDoesNotFit when a single token does
// not fit, and with the kernel's error for an invalid shape or kernel.
func LongestSeqLen(k Kernel, s Shape, limit gpumem.Bytes) (int, error) {
	return search(k, s, limit, "Shape.QueryLen", func(s Shape, n int) Shape {
		s.QueryLen, s.KeyLen = n, n
		return s
	})
}

// LargestBatch returns the largest Batch such that Peak(k, s) is at most
// limit, with the same guarantees as [LongestSeqLen].
func LargestBatch(k Kernel, s Shape, limit gpumem.Bytes) (int, error) {
	return search(k, s, limit, "Shape.Batch", func(s Shape, n int) Shape {
		s.Batch = n
		return s
	})
}

func search(k Kernel, s Shape, limit gpumem.Bytes, field string, set func(Shape, int) Shape) (int, error) {
	p, err := Peak(k, set(s, 1))
	if err != nil {
		return 0, err
	}
	if p > limit {
		return 0, gpumem.Errorf("limit", limit, gpumem.ErrDoesNotFit, "%s = 1 already needs %v", field, p)
	}
	fits := func(n int) bool {
		p, err := Peak(k, set(s, n))
		return err == nil && p <= limit
	}
	lo, hi := 1, 2 // lo fits; hi is the candidate above
	for fits(hi) {
		lo = hi
		if hi >= maxSearch {
			return lo, nil
		}
		hi *= 2
	}
	for hi-lo > 1 { // invariant: lo fits, hi does not
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// MaxHeadChunk returns the largest number of heads per chunk c such that
// Peak(HeadChunked{Heads: c, Inner: inner}, s) is at most limit. Chunk
// sizes that [HeadChunked] rejects for s (neither a multiple nor a
// divisor of the heads per KV head) are skipped. It scans c downwards
// from s.Heads, so the result is the largest that fits even where the
// peak is not monotone in c (a small last chunk): every larger valid
// chunk size does not fit. It fails with gpumem.ErrDoesNotFit when no
// chunk size fits, one head at a time included.
func MaxHeadChunk(inner Kernel, s Shape, limit gpumem.Bytes) (int, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if inner == nil {
		return 0, gpumem.Errorf("Kernel", nil, gpumem.ErrInvalid, "no kernel")
	}
	// A kernel that rejects the shape itself rejects every chunk of it.
	one := s
	one.Heads, one.KVHeads = 1, 1
	if _, err := Peak(inner, one); err != nil && !errors.Is(err, gpumem.ErrRange) {
		return 0, err
	}
	g := s.Heads / s.kvHeads()
	for c := s.Heads; c >= 1; c-- {
		if c < s.Heads && c%g != 0 && g%c != 0 {
			continue // HeadChunked rejects chunks that straddle KV groups
		}
		f, err := HeadChunked{Heads: c, Inner: inner}.figures(s)
		p := gpumem.Bytes(f.peak())
		if err != nil {
			if errors.Is(err, gpumem.ErrInvalid) || errors.Is(err, gpumem.ErrRange) {
				continue // a chunk size HeadChunked rejects, or too large to count
			}
			return 0, err
		}
		if p <= limit {
			return c, nil
		}
	}
	return 0, gpumem.Errorf("limit", limit, gpumem.ErrDoesNotFit, "no head chunk of %d heads fits", s.Heads)
}
