package budget

import (
	"math"
	"testing"

	"github.com/gpumem/gpumem"
)

func TestAllocationRounding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, alloc, request gpumem.Bytes
	}{
		{-1, 0, 0},
		{0, 0, 0},
		{1, 512, 2 * gpumem.MiB},
		{512, 512, 2 * gpumem.MiB},
		{513, 1024, 2 * gpumem.MiB},
		{gpumem.MiB, gpumem.MiB, 2 * gpumem.MiB},
		{gpumem.MiB + 1, gpumem.MiB + 512, 20 * gpumem.MiB},
		{10*gpumem.MiB - 512, 10*gpumem.MiB - 512, 20 * gpumem.MiB},
		{10 * gpumem.MiB, 10 * gpumem.MiB, 10 * gpumem.MiB},
		// The Whisper attack's fp32 scores: 1500·1500·12·4 bytes, which
		// "Tried to allocate" prints as 104 MiB (docs/scenarios.md).
		{108_000_000, 108_000_256, 104 * gpumem.MiB},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
	}
	for _, tc := range tests {
		if got := RoundAllocation(tc.in); got != tc.alloc {
			t.Errorf("RoundAllocation(%d) = %d, want %d", int64(tc.in), int64(got), int64(tc.alloc))
		}
		if got := AllocationRequest(tc.in); got != tc.request {
			t.Errorf("AllocationRequest(%d) = %d, want %d", int64(tc.in), int64(got), int64(tc.request))
		}
	}
	// Estimate's per-tensor rounding is the exported one.
	for _, n := range []int64{1, 511, 512, 513, 1 << 30} {
		if got := roundAlloc(n); got != int64(RoundAllocation(gpumem.Bytes(n))) {
			t.Errorf("roundAlloc(%d) = %d, RoundAllocation %d", n, got, int64(RoundAllocation(gpumem.Bytes(n))))
		}
	}
}
