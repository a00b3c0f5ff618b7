package budget

import (
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

const mib = 1 << 20

// llama3Q4KMModel is Llama-3-8B as llama-quantize writes it in Q4_K_M
// (src/llama-quant.cpp llama_tensor_get_type, as model/gguf_llama3_test.go
// describes it): token_embd and every layer tensor Q4_K, but output Q6_K
// and attn_v and ffn_down Q6_K in the 16 layers where use_more_bits
// holds (i < 4, i >= 28, (i−4) % 3 == 2); the norms F32. 4,912,898,048
// bytes of tensor data.
func llama3Q4KMModel(t *testing.T) Model {
	t.Helper()
	s, ok := model.Lookup("llama-3-8b")
	require.True(t, ok)
	inv := []gpumem.Tensor{
		{Name: "token_embd.weight", Shape: []int64{128256, 4096}, DType: gpumem.Q4_K},
		{Name: "output_norm.weight", Shape: []int64{4096}, DType: gpumem.FP32},
		{Name: "output.weight", Shape: []int64{128256, 4096}, DType: gpumem.Q6_K},
	}
	for i := range 32 {
		more := gpumem.Q4_K
		if i < 4 || i >= 28 || (i-4)%3 == 2 {
			more = gpumem.Q6_K
		}
		p := "blk." + strconv.Itoa(i) + "."
		inv = append(inv,
			gpumem.Tensor{Name: p + "attn_norm.weight", Shape: []int64{4096}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "attn_q.weight", Shape: []int64{4096, 4096}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "attn_k.weight", Shape: []int64{1024, 4096}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "attn_v.weight", Shape: []int64{1024, 4096}, DType: more},
			gpumem.Tensor{Name: p + "attn_output.weight", Shape: []int64{4096, 4096}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "ffn_norm.weight", Shape: []int64{4096}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "ffn_gate.weight", Shape: []int64{14336, 4096}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "ffn_up.weight", Shape: []int64{14336, 4096}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "ffn_down.weight", Shape: []int64{4096, 14336}, DType: more})
	}
	s.Inventory = inv
	m, err := NewModel(model.Finetune{Model: s})
	require.NoError(t, err)
	return m
}

func llamaCppJob(m Model, o LlamaCppOptions) Job {
	return Job{Model: m, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 512, Runtime: LlamaCpp, LlamaCpp: o}
}

// TestLlamaCppLlama3 is the case: Llama-3-8B Q4_K_M at 8,192
// tokens, every layer offloaded, computed by hand.
func TestLlamaCppLlama3(t *testing.T) {
	m := llama3Q4KMModel(t)
	r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192}))
	require.NoError(t, err)
	// token_embd stays on the host: 128256·4096/256·144 = 295,501,824
	// bytes (llama.cpp prints "CPU buffer size = 281.81 MiB"); the GPU
	// holds the rest of the 4,912,898,048: 4,617,396,224 (4403.49 MiB).
	assert.Equal(t, gpumem.Bytes(295_501_824), r.HostWeights)
	assert.Equal(t, gpumem.Bytes(4_617_396_224), r.GPUWeights)
	assert.Equal(t, 33, r.Layers)
	assert.True(t, r.OutputOnGPU)
	// KV: 8192 cells × 32 layers × (1024 + 1024) × 2 bytes = 1024 MiB.
	assert.Equal(t, gpumem.Bytes(1024*mib), r.KV)
	assert.Zero(t, r.HostKV)
	// Compute without flash attention: the f32 mask 8192·512·4 = 16 MiB,
	// KQ 8192·512·32·4 = 512 MiB, residual, Q and KQV 3 × 4096·512·4 =
	// 24 MiB: 552 MiB (the issue quotes 572).
	assert.Equal(t, gpumem.Bytes(552*mib), r.Compute)

	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, FlashAttention: true}))
	require.NoError(t, err)
	// With flash attention: the f16 mask 8 MiB, the final norm 8 MiB and
	// the logits 128256·512·4 = 262,668,288: 279,445,504 (266.5 MiB; the
	// issue quotes 266).
	assert.Equal(t, gpumem.Bytes(279_445_504), r.Compute)

	// q8_0 cache: 34 bytes per 32 elements: 8192·32·2048·34/32 = 544 MiB.
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, CacheK: gpumem.Q8_0, CacheV: gpumem.Q8_0}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(544*mib), r.KV)

	// Estimate carries the buffers.
	b, err := Estimate(llamaCppJob(m, LlamaCppOptions{Context: 8192}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(4_617_396_224), b.Weights)
	assert.Equal(t, gpumem.Bytes(1024*mib), b.KVCache)
	assert.Equal(t, gpumem.Bytes(552*mib), b.Workspace)
	assert.Zero(t, b.Fragmentation)
	assert.Zero(t, b.Activations)
	assert.Equal(t, gpumem.Bytes(295_501_824), b.Host)
}

// TestLlamaCppPartialOffload: -ngl 16 on a 32-layer model puts the
// output layer and the last 15 layers on the GPU (i_gpu_start = 33 − 16
// = 17).
func TestLlamaCppPartialOffload(t *testing.T) {
	m := llama3Q4KMModel(t)
	r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 4096, GPULayers: 16}))
	require.NoError(t, err)
	assert.Equal(t, 16, r.Layers)
	assert.True(t, r.OutputOnGPU)
	// Layers 17..31, of which use_more_bits gives 8 (18, 21, 24, 27 and
	// 28..31) Q6_K attn_v and ffn_down. A Q4_K layer: q, o
	// 4096²·144/256 = 9,437,184 each, k, v 2,359,296 each, gate, up, down
	// 33,030,144 each, norms 2·16,384: 122,716,160. A Q6_K one adds
	// (210−144)/256 × (1024·4096 + 14336·4096) = 16,220,160: 138,936,320.
	// 8 × 138,936,320 + 7 × 122,716,160 = 1,970,503,680; output
	// 128256·4096·210/256 = 430,940,160 and its norm 16,384.
	assert.Equal(t, gpumem.Bytes(1_970_503_680+430_940_160+16_384), r.GPUWeights)
	// KV: 4096 × 15 layers × 2048 × 2 = 240 MiB on the GPU, 17 layers on
	// the host.
	assert.Equal(t, gpumem.Bytes(240*mib), r.KV)
	assert.Equal(t, gpumem.Bytes(272*mib), r.HostKV)
}

func TestLlamaCppInvalid(t *testing.T) {
	m := llama3Q4KMModel(t)
	for _, tc := range []struct {
		field string
		job   func(j *Job)
	}{
		{"Job.LlamaCpp.GPULayers", func(j *Job) { j.LlamaCpp.GPULayers = -1 }},
		{"Job.LlamaCpp.Context", func(j *Job) { j.LlamaCpp.Context = -1 }},
		{"Job.LlamaCpp.Parallel", func(j *Job) { j.LlamaCpp.Parallel = -2 }},
		{"Job.LlamaCpp.UBatch", func(j *Job) { j.LlamaCpp.UBatch = -512 }},
		{"Job.LlamaCpp.CacheK", func(j *Job) { j.LlamaCpp.CacheK = gpumem.Q4_K }},
		{"Job.LlamaCpp.CacheV", func(j *Job) { j.LlamaCpp.CacheV = gpumem.NF4 }},
		{"Job.Runtime", func(j *Job) { j.Runtime = 7 }},
		{"Job.Mode", func(j *Job) { j.Mode = Load }},
		{"Job.LlamaCpp", func(j *Job) { j.Runtime = PyTorch; j.LlamaCpp.FlashAttention = true }},
	} {
		j := llamaCppJob(m, LlamaCppOptions{Context: 4096})
		tc.job(&j)
		_, err := Estimate(j)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", tc.field, err)
		assert.Equal(t, tc.field, fe.Field)
	}
}

func TestParseRuntime(t *testing.T) {
	for s, want := range map[string]Runtime{"pytorch": PyTorch, "llama.cpp": LlamaCpp, "ollama": LlamaCpp, "vllm": VLLM, "sglang": SGLang} {
		got, err := ParseRuntime(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, want.String(), runtimeNames[want])
	}
	_, err := ParseRuntime("tensorrt-llm")
	assert.Error(t, err)
}

// TestLlamaCppEstimateAllocs: a llama.cpp job's Estimate allocates
// nothing either (the inventory is walked in place).
func TestLlamaCppEstimateAllocs(t *testing.T) {
	j := llamaCppJob(llama3Q4KMModel(t), LlamaCppOptions{Context: 8192, GPULayers: 20})
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Estimate(j); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// TestLlamaCppParallel: n_ctx 10,000 pads to 10,240; over 3 sequences
// each gets GGML_PAD(10240/3 = 3413, 256) = 3,584 cells: 10,752 in all.
func TestLlamaCppParallel(t *testing.T) {
	m := llama3Q4KMModel(t)
	r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 10000, Parallel: 3}))
	require.NoError(t, err)
	assert.Equal(t, 10752, r.Cells)
	// 10,752 × 32 layers × 2048 × 2 bytes.
	assert.Equal(t, gpumem.Bytes(10752*32*2048*2), r.KV)
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 10000}))
	require.NoError(t, err)
	assert.Equal(t, 10240, r.Cells)
}
