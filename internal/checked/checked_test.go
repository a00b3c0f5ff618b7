package checked

import (
	"math"
	"math/big"
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

// clamp128 is the reference for the saturating functions: the exact
// value from math/big, clamped to int64.
func clamp128(v *big.Int) int64 {
	switch {
	case v.Cmp(big.NewInt(math.MaxInt64)) > 0:
		return math.MaxInt64
	case v.Cmp(big.NewInt(math.MinInt64)) < 0:
		return math.MinInt64
	}
	return v.Int64()
}

func TestSatSum(t *testing.T) {
	t.Parallel()
	const hi, lo = math.MaxInt64, math.MinInt64
	tests := []struct {
		xs   []int64
		want int64
	}{
		{nil, 0},
		{[]int64{1, 2, 3}, 6},
		{[]int64{hi, 1}, hi},
		{[]int64{hi, hi, hi}, hi},
		{[]int64{lo, -1}, lo},
		{[]int64{lo, lo, lo}, lo},
		{[]int64{hi, hi, lo}, hi - 1}, // exact before clamping
		{[]int64{hi, 1, -1}, hi},
		{[]int64{lo, hi}, -1},
		{[]int64{hi, hi, lo, lo}, -2},
	}
	for _, tc := range tests {
		if got := SatSum(tc.xs...); got != tc.want {
			t.Errorf("SatSum(%v) = %d, want %d", tc.xs, got, tc.want)
		}
	}
	// Many terms just below the fast path's 2^59 bound.
	for n := 1; n <= 20; n++ {
		xs := make([]int64, n)
		want := new(big.Int)
		for i := range xs {
			xs[i] = 1<<59 - 1
			want.Add(want, big.NewInt(xs[i]))
		}
		if got := SatSum(xs...); got != clamp128(want) {
			t.Errorf("SatSum(%d × (2^59−1)) = %d, want %d", n, got, clamp128(want))
		}
	}
	// Against math/big on extreme operands.
	vals := []int64{lo, lo + 1, -1 << 62, -1, 0, 1, 1 << 62, hi - 1, hi}
	for _, a := range vals {
		for _, b := range vals {
			for _, c := range vals {
				want := clamp128(new(big.Int).Add(new(big.Int).Add(big.NewInt(a), big.NewInt(b)), big.NewInt(c)))
				if got := SatSum(a, b, c); got != want {
					t.Fatalf("SatSum(%d, %d, %d) = %d, want %d", a, b, c, got, want)
				}
			}
			if got, want := SatAdd(a, b), clamp128(new(big.Int).Add(big.NewInt(a), big.NewInt(b))); got != want {
				t.Fatalf("SatAdd(%d, %d) = %d, want %d", a, b, got, want)
			}
			if got, want := SatSub(a, b), clamp128(new(big.Int).Sub(big.NewInt(a), big.NewInt(b))); got != want {
				t.Fatalf("SatSub(%d, %d) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestSatSumAllocs(t *testing.T) { // not parallel: AllocsPerRun
	x := int64(7)
	if n := testing.AllocsPerRun(10, func() { x = SatSum(x, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13) % 1000 }); n != 0 {
		t.Errorf("SatSum allocates %v times", n)
	}
}

func TestScale(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a    int64
		f    float64
		want int64
		ok   bool
	}{
		{1000, 0.05, 50, true},
		{0, 10, 0, true},
		{1 << 40, 0.5, 1 << 39, true},
		{1 << 62, 1.5, 3 << 61, true},
		{1 << 62, 2, 0, false},  // 2^63
		{1 << 62, 10, 0, false}, // the fragmentation of a 2^62-byte peak at 10
		{math.MaxInt64, 1, 0, false},
		{-1 << 62, 2, -1 << 63, true},
		{-1 << 62, 3, 0, false},
		{100, math.NaN(), 0, false},
		{100, math.Inf(1), 0, false},
		{0, math.Inf(1), 0, false},
		{100, math.Inf(-1), 0, false},
		{7, -0.5, -3, true}, // toward zero
	}
	for _, tc := range tests {
		got, ok := Scale(tc.a, tc.f)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Scale(%d, %v) = %d, %v, want %d, %v", tc.a, tc.f, got, ok, tc.want, tc.ok)
		}
	}
}

// TestMulAllAgainstBig checks MulAll's fast path (at most 63 bits in
// all) and its exact check against math/big on products around 2^63:
// powers of two and their neighbours, and a deterministic spread of
// factors, two to five at a time.
func TestMulAllAgainstBig(t *testing.T) {
	t.Parallel()
	vals := []int64{0, 1, 2, 3, 5, 7, 1000, 4096, 65535, 1 << 20, 3037000499, 3037000500, 1<<31 - 1, 1 << 31, 1<<32 + 1,
		1<<40 - 3, 1 << 62, 1<<62 + 1, math.MaxInt64, -1, math.MinInt64}
	for k := 1; k < 63; k++ {
		vals = append(vals, 1<<k-1, 1<<k, 1<<k+1)
	}
	limit := new(big.Int).SetInt64(math.MaxInt64)
	check := func(xs ...int64) {
		want := big.NewInt(1)
		ok := true
		for _, x := range xs {
			if x < 0 {
				ok = false
				break
			}
			if x == 0 {
				want.SetInt64(0)
				break
			}
			want.Mul(want, big.NewInt(x))
		}
		if ok && want.Cmp(limit) > 0 {
			ok = false
		}
		got, gotOK := MulAll(xs...)
		if gotOK != ok || (ok && got != want.Int64()) || (!ok && got != 0) {
			t.Fatalf("MulAll(%v) = %d, %v; want %v, %v", xs, got, gotOK, want, ok)
		}
	}
	for _, a := range vals {
		for _, b := range vals {
			check(a, b)
			for i, c := range vals {
				if i%9 == 0 {
					check(a, b, c)
					check(c, a, 2, b)
					check(3, a, b, 5, c)
				}
			}
		}
	}
}
