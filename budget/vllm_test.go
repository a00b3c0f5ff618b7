package budget

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

func vllmLlama3(t *testing.T) Model {
	t.Helper()
	s, ok := model.Lookup("llama-3-8b")
	require.True(t, ok)
	m, err := ModelOf(s)
	require.NoError(t, err)
	return m
}

func vllmJob(m Model, capacity gpumem.Bytes, o VLLMOptions) Job {
	return Job{Model: m, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 8192,
		Runtime: VLLM, VLLM: o, Device: gpumem.Device{Capacity: capacity}}
}

// TestVLLMLlama3 computes Llama-3-8B in bf16 on an 80 GiB GPU by hand.
func TestVLLMLlama3(t *testing.T) {
	m := vllmLlama3(t)
	r, err := VLLMBuffers(vllmJob(m, 80*gpumem.GiB, VLLMOptions{}))
	require.NoError(t, err)
	// 0.9 × 85,899,345,920.
	assert.Equal(t, gpumem.Bytes(77_309_411_328), r.Requested)
	// 8,030,261,248 parameters × 2 bytes.
	assert.Equal(t, gpumem.Bytes(16_060_522_496), r.Weights)
	// The sampler's 256 × 128,256 × 8 = 262,668,288 beats the forward
	// pass's 2,048 × (3 × 4,096 + 3 × 14,336) × 2 = 226,492,416.
	assert.Equal(t, gpumem.Bytes(262_668_288), r.Activations)
	// 77,309,411,328 − 16,060,522,496 − 262,668,288.
	assert.Equal(t, gpumem.Bytes(60_986_220_544), r.KVMemory)
	// 16 tokens × 8 KV heads × 128 × 2 (K, V) × 2 bytes × 32 layers.
	assert.Equal(t, gpumem.Bytes(2_097_152), r.PageBytes)
	// 60,986,220,544 / 2,097,152 = 29,080.6.
	assert.Equal(t, int64(29_080), r.Blocks)
	assert.Equal(t, int64(465_280), r.Tokens)
	assert.InDelta(t, 465_280.0/8192, r.Concurrency, 1e-9)
	assert.Empty(t, r.Refused)

	b, err := Estimate(vllmJob(m, 80*gpumem.GiB, VLLMOptions{}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(29_080*2_097_152), b.KVCache)
	assert.Equal(t, r.Weights, b.Weights)
}

// TestVLLMTensorParallel: TP 2 halves the weights and the KV heads.
func TestVLLMTensorParallel(t *testing.T) {
	m := vllmLlama3(t)
	r, err := VLLMBuffers(vllmJob(m, 80*gpumem.GiB, VLLMOptions{TensorParallel: 2, KVCacheDType: gpumem.FP8E4M3}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(8_030_261_248), r.Weights)
	// 16 × 4 heads × 128 × 2 × 1 byte × 32 layers.
	assert.Equal(t, gpumem.Bytes(524_288), r.PageBytes)
	// The forward pass: 2,048 × (3 × 4,096 + 3 × 7,168) × 2 = 138,412,032;
	// the sampler's 262,668,288 is larger.
	assert.Equal(t, gpumem.Bytes(262_668_288), r.Activations)
	assert.Equal(t, gpumem.Bytes(77_309_411_328-8_030_261_248-262_668_288), r.KVMemory)
}

// TestVLLMRefuses: on a 24 GiB card at 0.9, 21.6 GiB less 15 GiB of
// weights leaves about 5.7 GiB, 46,432 tokens, short of 131,072.
func TestVLLMRefuses(t *testing.T) {
	m := vllmLlama3(t)
	r, err := VLLMBuffers(vllmJob(m, 24*gpumem.GiB, VLLMOptions{MaxModelLen: 131072}))
	require.NoError(t, err)
	// 0.9 × 25,769,803,776 = 23,192,823,398 (truncated); less
	// 16,060,522,496 and 262,668,288: 6,869,632,614; / 2,097,152 = 3,275
	// blocks, 52,400 tokens.
	assert.Equal(t, gpumem.Bytes(6_869_632_614), r.KVMemory)
	assert.Equal(t, int64(52_400), r.Tokens)
	assert.Contains(t, r.Refused, "max seq len (131072), (16.00 GiB KV cache is needed")
	assert.Contains(t, r.Refused, "available KV cache memory (6.40 GiB)")
	assert.Contains(t, r.Refused, "estimated maximum model length is 52400")
	assert.Contains(t, r.Refused, "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`")
	// (16,060,522,496 + 262,668,288 + 8,192 blocks × 2,097,152) /
	// 25,769,803,776 = 33,503,059,968 / 25,769,803,776.
	assert.InDelta(t, 33_503_059_968.0/25_769_803_776, r.MinUtilization, 1e-12)

	r, err = VLLMBuffers(vllmJob(m, 16*gpumem.GiB, VLLMOptions{}))
	require.NoError(t, err)
	assert.Zero(t, r.KVMemory)
	assert.Contains(t, r.Refused, "No available memory for the cache blocks")
}

func TestVLLMInvalid(t *testing.T) {
	m := vllmLlama3(t)
	for _, c := range []struct {
		field string
		j     func(*Job)
	}{
		{"Job.VLLM.GPUMemoryUtilization", func(j *Job) { j.VLLM.GPUMemoryUtilization = 1.5 }},
		{"Job.VLLM.GPUMemoryUtilization", func(j *Job) { j.VLLM.GPUMemoryUtilization = -0.1 }},
		{"Job.VLLM.MaxModelLen", func(j *Job) { j.VLLM.MaxModelLen = -1 }},
		{"Job.VLLM.MaxNumBatchedTokens", func(j *Job) { j.VLLM.MaxNumBatchedTokens = -1 }},
		{"Job.VLLM.MaxNumSeqs", func(j *Job) { j.VLLM.MaxNumSeqs = -1 }},
		{"Job.VLLM.BlockSize", func(j *Job) { j.VLLM.BlockSize = -1 }},
		{"Job.VLLM.TensorParallel", func(j *Job) { j.VLLM.TensorParallel = -2 }},
		{"Job.VLLM.KVCacheDType", func(j *Job) { j.VLLM.KVCacheDType = gpumem.Q4_0 }},
		{"Job.Device.Capacity", func(j *Job) { j.Device.Capacity = 0 }},
		{"Job.Mode", func(j *Job) { j.Mode = Training }},
		{"Job.VLLM", func(j *Job) { j.Runtime = PyTorch }},
	} {
		j := vllmJob(m, 80*gpumem.GiB, VLLMOptions{MaxNumSeqs: 8})
		c.j(&j)
		_, err := Estimate(j)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", c.field, err)
		assert.Equal(t, c.field, fe.Field, "%v", err)
	}
	rt, err := ParseRuntime("vllm")
	require.NoError(t, err)
	assert.Equal(t, VLLM, rt)
	assert.Equal(t, "vllm", VLLM.String())
}

// TestVLLMEstimateAllocs: a vLLM job's Estimate allocates nothing.
func TestVLLMEstimateAllocs(t *testing.T) {
	j := vllmJob(vllmLlama3(t), 80*gpumem.GiB, VLLMOptions{MaxModelLen: 32768})
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Estimate(j); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// TestVLLMV0ProfilePeak computes V0's profile-run peak of Llama-3-8B by
// hand: at 8,192 tokens the driver's sampler (the sort of 256 × 128,256
// logits) is the peak, at 20,000 the gated MLP.
func TestVLLMV0ProfilePeak(t *testing.T) {
	m := vllmLlama3(t)
	r, err := VLLMBuffers(vllmJob(m, 80*gpumem.GiB, VLLMOptions{V0: true, MaxNumBatchedTokens: 8192}))
	require.NoError(t, err)
	// 256 × 128,256 = 32,833,536 logits × (2 bf16 + 4 fp32 copy + 4 + 8
	// sorted values and indices + 8 reverse indices + 4 + 8 cub's
	// alternates) + 8,192 × 4,096 × 2 hidden states = 1,314,783,232
	// (vLLM logged 1.26 GiB); the forward pass's 8,192 × (3 × 4,096 + 3 ×
	// 14,336) × 2 = 905,969,664 is less.
	assert.Equal(t, gpumem.Bytes(1_314_783_232), r.Activations)
	r, err = VLLMBuffers(vllmJob(m, 80*gpumem.GiB, VLLMOptions{V0: true, MaxNumBatchedTokens: 20000}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(20000*(3*4096+3*14336)*2), r.Activations)
	// V1's sampler at 8,192 tokens: the forward pass.
	r, err = VLLMBuffers(vllmJob(m, 80*gpumem.GiB, VLLMOptions{MaxNumBatchedTokens: 8192}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(905_969_664), r.Activations)
}
