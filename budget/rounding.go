package budget

import (
	"math"

	"github.com/gpumem/gpumem"
)

// The caching allocator's sizes (c10/cuda/CUDACachingAllocator.cpp,
// PyTorch 2.x; docs/reference.md#caching-allocator-rounding).
const (
	smallSize   = 1 << 20  // kSmallSize: requests up to 1 MiB use the small pool
	smallBuffer = 2 << 20  // kSmallBuffer: the small pool's segments
	minLarge    = 10 << 20 // kMinLargeAlloc: requests below it share 20 MiB segments
	largeBuffer = 20 << 20 // kLargeBuffer
	roundLarge  = 2 << 20  // kRoundLarge: larger segments are whole multiples of 2 MiB
)

// RoundAllocation returns what PyTorch's CUDA caching allocator counts in
// memory_allocated for a tensor of b bytes: b rounded up to a multiple of
// 512 bytes (CUDACachingAllocator.cpp, round_size, kMinBlockSize). It is
// the rounding [Estimate] applies per tensor. Zero and negative sizes
// give zero (an empty tensor allocates nothing); the result saturates at
// math.MaxInt64.
func RoundAllocation(b gpumem.Bytes) gpumem.Bytes {
	if b <= 0 {
		return 0
	}
	return gpumem.Bytes(roundUp(int64(b), allocRound))
}

// AllocationRequest returns the segment PyTorch's CUDA caching allocator
// asks cudaMalloc for when no cached block serves a tensor of b bytes,
// the size its "Tried to allocate" message prints
// (CUDACachingAllocator.cpp, get_allocation_size of round_size): 2 MiB
// for requests up to 1 MiB, 20 MiB below 10 MiB, and above that the
// rounded request rounded up to a multiple of 2 MiB. Zero and negative
// sizes give zero; the result saturates at math.MaxInt64.
func AllocationRequest(b gpumem.Bytes) gpumem.Bytes {
	r := RoundAllocation(b)
	switch {
	case r == 0:
		return 0
	case r <= smallSize:
		return smallBuffer
	case r < minLarge:
		return largeBuffer
	}
	return gpumem.Bytes(roundUp(int64(r), roundLarge))
}

// roundUp rounds n > 0 up to a multiple of unit, saturating at
// math.MaxInt64.
func roundUp(n, unit int64) int64 {
	if n > math.MaxInt64-unit+1 {
		return math.MaxInt64
	}
	return (n + unit - 1) / unit * unit
}
