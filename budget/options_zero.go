package budget

import "math"

// Zero tests of the runtime options, which Job.validate makes on every
// Estimate: the comparison with the zero struct that Go generates for
// LlamaCppOptions walks TensorSplit's sixteen floats in a call of its
// own; these tests answer the same, field by field, inline
// (TestOptionsIsZero checks them against ==, field by field).

// isZero reports *o == LlamaCppOptions{}. A float compares equal to zero
// when it is +0 or −0 (not NaN): its bits without the sign are zero.
func (o *LlamaCppOptions) isZero() bool {
	// Unrolled: the loop costs three times as many instructions.
	ts, b := &o.TensorSplit, math.Float64bits
	f := b(ts[0]) | b(ts[1]) | b(ts[2]) | b(ts[3]) | b(ts[4]) | b(ts[5]) | b(ts[6]) | b(ts[7]) |
		b(ts[8]) | b(ts[9]) | b(ts[10]) | b(ts[11]) | b(ts[12]) | b(ts[13]) | b(ts[14]) | b(ts[15])
	return f<<1 == 0 && o.GPULayers == 0 && o.Version == 0 && o.Context == 0 && o.Parallel == 0 &&
		o.UBatch == 0 && !o.FlashAttention && o.CacheK == 0 && o.CacheV == 0 && o.GPUs == 0 &&
		o.SplitMode == 0 && o.MainGPU == 0 && !o.NoMmap && !o.SWAFull
}

// isZero reports *o == VLLMOptions{}.
func (o *VLLMOptions) isZero() bool {
	return o.GPUMemoryUtilization == 0 && o.MaxModelLen == 0 && o.MaxNumBatchedTokens == 0 &&
		o.MaxNumSeqs == 0 && o.BlockSize == 0 && o.KVCacheDType == 0 && o.TensorParallel == 0 &&
		o.NonTorch == 0 && o.CUDAGraphMemory == 0 && !o.EnforceEager && !o.V0
}

// isZero's unrolled test reads sixteen TensorSplit entries.
var _ [LlamaMaxDevices - 16]struct{}
var _ [16 - LlamaMaxDevices]struct{}
