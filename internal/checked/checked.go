// Package checked provides integer arithmetic that reports overflow instead of
// wrapping around. Every product or sum of user-supplied sizes in gpumem goes
// through it, so that a 10^12-token job or a corrupt file header yields an
// error rather than a negative byte count.
package checked

import (
	"math"
	"math/bits"
)

// Mul returns a*b and whether the product is exact. Both operands must be
// non-negative; a negative operand reports false.
func Mul(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}

// Add returns a+b and whether the sum is exact. Both operands must be
// non-negative; a negative operand reports false.
func Add(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	s := a + b
	if s < 0 {
		return 0, false
	}
	return s, true
}

// MulAll returns the product of xs (1 for none) and whether it is exact.
// A zero factor makes the product zero even when the other factors would
// overflow together, as the element count of a tensor with a zero dimension.
func MulAll(xs ...int64) (int64, bool) {
	// Fast path: a product of factors below 2^l1, 2^l2, ... is below
	// 2^(l1+l2+...), so with at most 63 bits in all the wrapping product
	// is exact; only larger operands take the exact check.
	var q int64 = 1
	n := 0
	for _, x := range xs {
		if x <= 0 {
			if x < 0 {
				return 0, false
			}
			return 0, true
		}
		n += bits.Len64(uint64(x))
		q *= x
	}
	if n <= 63 {
		return q, true
	}
	var p uint64 = 1
	// over collects, without a branch per factor, a high word or a sign
	// bit of any partial product.
	var over uint64
	for _, x := range xs {
		if x <= 0 {
			if x < 0 {
				return 0, false
			}
			return 0, true
		}
		hi, lo := bits.Mul64(p, uint64(x))
		over |= hi | lo>>63
		p = lo
	}
	if over != 0 {
		return 0, false
	}
	return int64(p), true
}

// CeilDiv returns ceil(a/b) and whether it is defined: a must be
// non-negative and b positive.
func CeilDiv(a, b int64) (int64, bool) {
	if a < 0 || b <= 0 {
		return 0, false
	}
	return a/b + boolInt(a%b != 0), true
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// SatSum returns the sum of xs computed exactly, then clamped to
// [math.MinInt64, math.MaxInt64]: a sum that overflows saturates instead
// of wrapping, and the result does not depend on the order of xs (two
// huge terms and a negative one that brings the sum back in range give
// the exact sum). Operands may be negative. It does not allocate.
func SatSum(xs ...int64) int64 {
	// Fast path: up to 16 terms in [0, 2^59) cannot overflow.
	var sum, or int64
	for _, x := range xs {
		sum += x
		or |= x
	}
	if uint64(or) < 1<<59 && len(xs) <= 16 {
		return sum
	}
	return satSum(xs)
}

// satSum is SatSum for any terms.
func satSum(xs []int64) int64 {
	// hi:lo is a 128-bit two's-complement accumulator; hi cannot
	// overflow for fewer than 2^63 terms.
	var hi int64
	var lo uint64
	for _, x := range xs {
		var carry uint64
		lo, carry = bits.Add64(lo, uint64(x), 0)
		hi += int64(carry) + x>>63 // x>>63 sign-extends x into the high word
	}
	switch {
	case hi == 0 && lo <= math.MaxInt64, hi == -1 && lo > math.MaxInt64:
		return int64(lo)
	case hi >= 0:
		return math.MaxInt64
	}
	return math.MinInt64
}

// SatAdd returns a+b clamped to [math.MinInt64, math.MaxInt64].
func SatAdd(a, b int64) int64 {
	s := a + b
	if (a^b) >= 0 && (s^a) < 0 { // same signs, and the sum's differs
		if a < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return s
}

// SatSub returns a−b clamped to [math.MinInt64, math.MaxInt64].
func SatSub(a, b int64) int64 {
	d := a - b
	if (a^b) < 0 && (d^a) < 0 { // opposite signs, and the difference's differs from a's
		if a < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return d
}

// Scale returns a×f rounded toward zero and whether it is representable:
// false when f is NaN or infinite, or the product is NaN or lies outside
// [−2^63, 2^63). The product is computed in float64, so it is exact only
// to 53 bits; math.MaxInt64 itself rounds to 2^63 and reports false.
func Scale(a int64, f float64) (int64, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	p := float64(a) * f
	if !(p >= -0x1p63 && p < 0x1p63) { // also false for NaN
		return 0, false
	}
	return int64(p), true
}
