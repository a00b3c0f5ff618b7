package checked

import (
	"math"
	"testing"
)

func TestMul(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b int64
		want int64
		ok   bool
	}{
		{0, 0, 0, true},
		{3, 7, 21, true},
		{math.MaxInt64, 1, math.MaxInt64, true},
		{math.MaxInt64, 2, 0, false},
		{1 << 32, 1 << 31, 0, false},
		{1 << 31, 1 << 31, 1 << 62, true},
		{-1, 2, 0, false},
		{2, -1, 0, false},
		{3037000500, 3037000500, 0, false}, // just above sqrt(MaxInt64)
		{3037000499, 3037000499, 3037000499 * 3037000499, true},
	}
	for _, tc := range tests {
		got, ok := Mul(tc.a, tc.b)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Mul(%d, %d) = %d, %v, want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b int64
		want int64
		ok   bool
	}{
		{1, 2, 3, true},
		{math.MaxInt64, 0, math.MaxInt64, true},
		{math.MaxInt64, 1, 0, false},
		{-5, 1, 0, false},
	}
	for _, tc := range tests {
		got, ok := Add(tc.a, tc.b)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Add(%d, %d) = %d, %v, want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMulAll(t *testing.T) {
	t.Parallel()
	tests := []struct {
		xs   []int64
		want int64
		ok   bool
	}{
		{nil, 1, true},
		{[]int64{4096, 4096, 32}, 4096 * 4096 * 32, true},
		{[]int64{1 << 40, 1 << 40, 0}, 0, true},
		{[]int64{1 << 40, 1 << 40}, 0, false},
		{[]int64{3, -1}, 0, false},
	}
	for _, tc := range tests {
		got, ok := MulAll(tc.xs...)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("MulAll(%v) = %d, %v, want %d, %v", tc.xs, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCeilDiv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b int64
		want int64
		ok   bool
	}{
		{0, 7, 0, true},
		{7, 7, 1, true},
		{8, 7, 2, true},
		{math.MaxInt64, 2, math.MaxInt64/2 + 1, true},
		{1, 0, 0, false},
		{-1, 3, 0, false},
	}
	for _, tc := range tests {
		got, ok := CeilDiv(tc.a, tc.b)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("CeilDiv(%d, %d) = %d, %v, want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}
