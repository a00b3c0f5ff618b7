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
	m, err := ModelOf(s)
	require.NoError(t, err)
	return m
}

func llamaCppJob(m Model, o LlamaCppOptions) Job {
	return Job{Model: m, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 512, Runtime: LlamaCpp, LlamaCpp: o}
}

// TestLlamaCppLlama3 is the worked case: Llama-3-8B Q4_K_M at 8,192
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
	// Compute, replayed through ggml-alloc (llamacpp_graph.go). A 2024
	// build without flash attention: the f32 mask 8192·512·4 = 16 MiB and
	// KQ 8192·512·32·4 = 512 MiB placed above four n_embd × 512 f32
	// tensors (32 MiB) and the positions (2 KiB): 560 MiB (the worked case
	// quotes 572, −2.1%).
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, Version: 20240601}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(560*mib+2048), r.Compute)
	// With flash attention the output stage is the peak: the logits
	// 128256·512·4 = 262,668,288 above the f16 mask (8 MiB) and the final
	// norm (8 MiB): 279,445,504 (266.5 MiB; the worked case quotes 266).
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, FlashAttention: true, Version: 20240601}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(279_445_504), r.Compute)
	// A current build: its index inputs add v_idxs (512·1024·8 = 4 MiB)
	// and a few KiB without flash attention; with it, the mask sits where
	// the first layer's input copy was and is free by the output stage:
	// the final norm and the logits, 271,056,896.
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, FlashAttention: true}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(8*mib+262_668_288), r.Compute)
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192}))
	require.NoError(t, err)
	assert.InDelta(t, float64(564*mib), float64(r.Compute), 0.01*mib)
	current := r.Compute

	// q8_0 cache: 34 bytes per 32 elements: 8192·32·2048·34/32 = 544 MiB.
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, CacheK: gpumem.Q8_0, CacheV: gpumem.Q8_0}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(544*mib), r.KV)

	// Estimate carries the buffers.
	b, err := Estimate(llamaCppJob(m, LlamaCppOptions{Context: 8192}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(4_617_396_224), b.Weights)
	assert.Equal(t, gpumem.Bytes(1024*mib), b.KVCache)
	assert.Equal(t, current, b.Workspace)
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

// TestLlamaCppLayerSplit: --split-mode layer over two GPUs. Even shares
// put the split point at 0.5: slot k of the 33 offloaded goes to GPU 0
// while k/33 < 0.5, so layers 0–16 there, 17–31 and the output layer on
// GPU 1; --tensor-split 3,1 moves the point to 0.75 (layers 0–24).
func TestLlamaCppLayerSplit(t *testing.T) {
	m := llama3Q4KMModel(t)
	one, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192}))
	require.NoError(t, err)
	r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, GPUs: 2}))
	require.NoError(t, err)
	require.Equal(t, 2, r.GPUs)
	d0, d1 := r.Devices[0], r.Devices[1]
	assert.Equal(t, 17, d0.Layers)
	assert.Equal(t, 15, d1.Layers)
	assert.False(t, d0.Output)
	assert.True(t, d1.Output)
	// 8192 cells × 2048 × 2 bytes = 32 MiB a layer.
	assert.Equal(t, gpumem.Bytes(17*32*mib), d0.KV)
	assert.Equal(t, gpumem.Bytes(15*32*mib), d1.KV)
	// The weights are those of one GPU, shared out.
	assert.Equal(t, one.GPUWeights, d0.Weights+d1.Weights)
	assert.Equal(t, one.HostWeights, r.HostWeights)
	// Layers 0–3 and 7, 10, 13, 16 have Q6_K attn_v and ffn_down
	// (use_more_bits): 8 × 138,936,320 + 9 × 122,716,160.
	assert.Equal(t, gpumem.Bytes(8*138_936_320+9*122_716_160), d0.Weights)
	// GPU 0 runs layers only; GPU 1 the output too: its buffer is the
	// larger of the layers' and the logits' stage, as on one GPU.
	assert.Equal(t, one.Compute, d1.Compute)
	assert.LessOrEqual(t, d0.Compute, d1.Compute)
	assert.Equal(t, 1, r.Busiest)

	ts := LlamaCppOptions{Context: 8192, GPUs: 2}
	ts.TensorSplit[0], ts.TensorSplit[1] = 3, 1
	r, err = LlamaCppBuffers(llamaCppJob(m, ts))
	require.NoError(t, err)
	assert.Equal(t, 25, r.Devices[0].Layers)
	assert.Equal(t, 7, r.Devices[1].Layers)
	assert.Equal(t, 0, r.Busiest)

	// Estimate reports the most loaded GPU.
	b, err := Estimate(llamaCppJob(m, ts))
	require.NoError(t, err)
	assert.Equal(t, r.Devices[0].Weights, b.Weights)
	assert.Equal(t, r.Devices[0].KV, b.KVCache)
	assert.Equal(t, r.Devices[0].Compute, b.Workspace)

	// Partial offload: -ngl 17 is the output layer and layers 16–31,
	// dealt over the two GPUs from slot 16 on.
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, GPUs: 2, GPULayers: 17}))
	require.NoError(t, err)
	assert.Equal(t, 9, r.Devices[0].Layers) // k/17 < 0.5: k = 0..8
	assert.Equal(t, 7, r.Devices[1].Layers)
	assert.Equal(t, gpumem.Bytes(16*32*mib), r.HostKV)
}

// TestLlamaCppSplitPublished checks the layer assignment against a
// published llama.cpp log of a 48-layer model with 4 KV heads of 128
// (Qwen3-30B-A3B) on four GPUs (github.com/ggml-org/llama.cpp issue
// 13661, 2025-05): "CUDA2 KV buffer size = 703.50 MiB", "CUDA3 KV
// buffer size = 644.88 MiB" at n_ctx 30016 (58.625 MiB a layer: 12 and
// 11 layers) and four equal compute buffers (1958.63 MiB) under
// --split-mode row. Even shares give GPU 0 layers 0–12, GPU 1 13–24,
// GPU 2 25–36 and GPU 3 37–47 with the output layer.
func TestLlamaCppSplitPublished(t *testing.T) {
	s, ok := model.Lookup("qwen3-30b-a3b")
	require.True(t, ok)
	m, err := ModelOf(s)
	require.NoError(t, err)
	r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 30016, GPUs: 4, SplitMode: LlamaSplitRow}))
	require.NoError(t, err)
	perLayer := float64(30016*4*128*2*2) / mib
	assert.InDelta(t, 58.625, perLayer, 1e-9)
	assert.Equal(t, int(703.50/perLayer+0.5), r.Devices[2].Layers)
	assert.Equal(t, int(644.88/perLayer+0.5), r.Devices[3].Layers)
	assert.Equal(t, []int{13, 12, 12, 11}, []int{r.Devices[0].Layers, r.Devices[1].Layers, r.Devices[2].Layers, r.Devices[3].Layers})
	for i := 1; i < 4; i++ {
		assert.Equal(t, r.Devices[0].Compute, r.Devices[i].Compute, "row split: every GPU runs the whole graph")
	}
	// The matrices' rows are spread evenly: the GPUs' weights differ
	// only by the small tensors of the layers each holds.
	one, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 30016}))
	require.NoError(t, err)
	var sum gpumem.Bytes
	for i := range 4 {
		sum += r.Devices[i].Weights
		assert.InEpsilon(t, float64(one.GPUWeights)/4, float64(r.Devices[i].Weights), 0.01)
	}
	assert.InEpsilon(t, float64(one.GPUWeights), float64(sum), 1e-9)
}

func TestLlamaCppSplitNoneAndInvalid(t *testing.T) {
	m := llama3Q4KMModel(t)
	one, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192}))
	require.NoError(t, err)
	r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 8192, GPUs: 4, SplitMode: LlamaSplitNone, MainGPU: 2}))
	require.NoError(t, err)
	assert.Equal(t, 1, r.GPUs)
	assert.Equal(t, one.GPUWeights, r.Devices[0].Weights)

	for _, tc := range []struct {
		field string
		o     func(o *LlamaCppOptions)
	}{
		{"Job.LlamaCpp.GPUs", func(o *LlamaCppOptions) { o.GPUs = 17 }},
		{"Job.LlamaCpp.MainGPU", func(o *LlamaCppOptions) { o.GPUs, o.MainGPU = 2, 2 }},
		{"Job.LlamaCpp.SplitMode", func(o *LlamaCppOptions) { o.SplitMode = 9 }},
		{"Job.LlamaCpp.TensorSplit", func(o *LlamaCppOptions) { o.GPUs, o.TensorSplit[2] = 2, 1 }},
		{"Job.LlamaCpp.TensorSplit", func(o *LlamaCppOptions) { o.GPUs, o.TensorSplit[0] = 2, -1 }},
	} {
		o := LlamaCppOptions{Context: 8192}
		tc.o(&o)
		_, err := Estimate(llamaCppJob(m, o))
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", tc.field, err)
		assert.Equal(t, tc.field, fe.Field)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := Estimate(llamaCppJob(m, LlamaCppOptions{Context: 8192, GPUs: 3, SplitMode: LlamaSplitRow})); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// TestLlamaCppMmapSpan: with mmap llama.cpp maps, and reports as
// CPU_Mapped, the file span of the CPU tensors: at -ngl 16 token_embd
// (first in this file) to the end of layer 16, which takes in
// output_norm and output, offloaded but lying between them; --no-mmap
// reads the CPU tensors alone.
func TestLlamaCppMmapSpan(t *testing.T) {
	m := llama3Q4KMModel(t)
	r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 4096, GPULayers: 16}))
	require.NoError(t, err)
	assert.Equal(t, r.HostWeights+430_940_160+16_384, r.HostMapped)
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 4096, GPULayers: 16, NoMmap: true}))
	require.NoError(t, err)
	assert.Equal(t, r.HostWeights, r.HostMapped)
	// Every layer offloaded: token_embd alone, as llama.cpp's logs show.
	r, err = LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 4096}))
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(295_501_824), r.HostMapped)
}

// BenchmarkLlamaCppEstimateSplit: Estimate of a llama.cpp job over four
// GPUs with a row split (every tensor placed per GPU).
func BenchmarkLlamaCppEstimateSplit(b *testing.B) {
	j := llamaCppJob(llama3Q4KMModel(&testing.T{}), LlamaCppOptions{Context: 8192, GPUs: 4, SplitMode: LlamaSplitRow})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Estimate(j); err != nil {
			b.Fatal(err)
		}
	}
}
