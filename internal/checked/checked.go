// Package checked provides integer arithmetic that reports overflow instead of
// wrapping around. Every product or sum of user-supplied sizes in gpumem goes
// through it, so that a 10^12-token job or a corrupt file header yields an
// error rather than a negative byte count.
package checked

import "math/bits"

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
	var p uint64 = 1
	over := false
	for _, x := range xs {
		if x <= 0 {
			if x < 0 {
				return 0, false
			}
			return 0, true
		}
		hi, lo := bits.Mul64(p, uint64(x))
		over = over || hi != 0 || lo > 1<<63-1
		p = lo
	}
	if over {
		return 0, false
	}
	return int64(p), true
}

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
