package budget

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestVLLMCUDAGraphs: the graphs' estimate comes off the cache, and the
// equivalent utilizations are u ∓ estimate / total, as a published
// vLLM log prints them: 119.63 GiB total ("Free memory on device
// (112.26/119.63 GiB)"), --gpu-memory-utilization 0.92, "Estimated CUDA
// graph memory: 1.94 GiB total", "is equivalent to
// --gpu-memory-utilization=0.9038 without CUDA graph memory profiling
// ... increase --gpu-memory-utilization to 0.9362" (a 51.35 GiB model on
// one GPU, vLLM 2026-08; the log is quoted in a public issue thread
// found by searching for "CUDA graph pool memory").
func TestVLLMCUDAGraphs(t *testing.T) {
	m := vllmLlama3(t)
	total := gpumem.Bytes(11963 * gpumem.GiB / 100)
	g := gpumem.Bytes(194 * gpumem.GiB / 100)
	base, err := VLLMBuffers(vllmJob(m, total, VLLMOptions{GPUMemoryUtilization: 0.92}))
	require.NoError(t, err)
	r, err := VLLMBuffers(vllmJob(m, total, VLLMOptions{GPUMemoryUtilization: 0.92, CUDAGraphMemory: g}))
	require.NoError(t, err)
	assert.Equal(t, g, r.CUDAGraphs)
	assert.Equal(t, base.KVMemory-g, r.KVMemory)
	round4 := func(x float64) float64 { return math.Round(x*1e4) / 1e4 }
	assert.Equal(t, 0.9038, round4(r.EquivalentUtilization))
	assert.Equal(t, 0.9362, round4(r.CompensatingUtilization))
	b, err := Estimate(vllmJob(m, total, VLLMOptions{GPUMemoryUtilization: 0.92, CUDAGraphMemory: g}))
	require.NoError(t, err)
	assert.Equal(t, g, b.Buffers)

	// --enforce-eager: no graphs, and giving their memory is refused.
	_, err = VLLMBuffers(vllmJob(m, total, VLLMOptions{CUDAGraphMemory: g, EnforceEager: true}))
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "Job.VLLM.CUDAGraphMemory", fe.Field)
}

// TestVLLMInverse: the least utilization that serves a concurrency, and
// the longest max_model_len at a utilization, each the edge: a step
// beyond does not.
func TestVLLMInverse(t *testing.T) {
	m := vllmLlama3(t)
	j := vllmJob(m, 80*gpumem.GiB, VLLMOptions{MaxModelLen: 8192})
	u, r, err := VLLMUtilizationFor(j, 20)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, r.Concurrency, 20.0)
	assert.InDelta(t, u, r.Requested.MiB()/(80*1024), 1e-4)
	j.VLLM.GPUMemoryUtilization = u - 1e-4
	below, err := VLLMBuffers(j)
	require.NoError(t, err)
	assert.Less(t, below.Concurrency, 20.0)
	// 20 × 8192 tokens at 128 KiB each is 20 GiB of cache on top of the
	// 15 GiB of weights and the profile run: about 0.44 of 80 GiB.
	assert.InDelta(t, 0.44, u, 0.01)

	j.VLLM.GPUMemoryUtilization = 0.9
	mml, r, err := VLLMMaxModelLenFor(j, 4)
	require.NoError(t, err)
	assert.Equal(t, mml, r.MaxModelLen)
	assert.GreaterOrEqual(t, r.Concurrency, 4.0)
	assert.LessOrEqual(t, mml, 8192, "capped at the model's max_position_embeddings")
	mml, r, err = VLLMMaxModelLenFor(j, 100)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, r.Concurrency, 100.0)
	j.VLLM.MaxModelLen = mml + 1
	above, err := VLLMBuffers(j)
	require.NoError(t, err)
	assert.Less(t, mml, 8192)
	assert.Less(t, above.Concurrency, 100.0)

	// Too much: errors that say so.
	_, _, err = VLLMUtilizationFor(vllmJob(m, 80*gpumem.GiB, VLLMOptions{MaxModelLen: 8192}), 1000)
	assert.ErrorIs(t, err, gpumem.ErrDoesNotFit)
	_, _, err = VLLMUtilizationFor(j, -1)
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "concurrency", fe.Field)
}

// TestTensorParallelHeads: a tensor-parallel size that does not divide
// the heads is refused by vLLM and SGLang, naming the field.
func TestTensorParallelHeads(t *testing.T) {
	m := vllmLlama3(t)
	_, err := VLLMBuffers(vllmJob(m, 80*gpumem.GiB, VLLMOptions{TensorParallel: 3}))
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "Job.VLLM.TensorParallel", fe.Field)
	assert.Contains(t, err.Error(), "attention heads (32)")
	j := Job{Model: m, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 1024, Runtime: SGLang,
		SGLang: SGLangOptions{TensorParallel: 6}, Device: gpumem.Device{Capacity: 80 * gpumem.GiB}}
	_, err = Estimate(j)
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "Job.SGLang.TensorParallel", fe.Field)
	_, err = VLLMBuffers(vllmJob(m, 80*gpumem.GiB, VLLMOptions{TensorParallel: 4}))
	assert.NoError(t, err)
}
