package budget

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// humanBytes2 is Ollama's format.HumanBytes2 for sizes of a GiB or more
// and of a MiB or more: one decimal.
func humanGiB(b gpumem.Bytes) float64 { return float64(int64(float64(b)/(1<<30)*10+0.5)) / 10 }

// TestOllamaLlama3 is Llama-3-8B Q4_K_M on one GPU, computed by hand from
// estimateGPULayers and GraphSize (ollama/ollama 4372d0bf).
func TestOllamaLlama3(t *testing.T) {
	m := llama3Q4KMModel(t)
	// num_ctx 8192 (the model's context_length), num_batch 512.
	r, err := OllamaLayers(m, []gpumem.Bytes{24 << 30}, OllamaOptions{NumCtx: 8192})
	require.NoError(t, err)
	assert.Equal(t, "llama", r.Arch)
	assert.Equal(t, 33, r.Slots)
	assert.Equal(t, 33, r.Layers)
	assert.True(t, r.Full)
	// KV: 8192 × (128 + 128) × 8 × 2 bytes × 32 = 1 GiB.
	assert.Equal(t, gpumem.Bytes(1<<30), r.KV)
	// Full graph: max(4·512·(1 + 4·4096 + 8192·33), 4·512·(4096 +
	// 128256)) = 2048 · 286,721 = 587,204,608 (560.0 MiB).
	assert.Equal(t, gpumem.Bytes(587_204_608), r.GraphFull)
	// Partial: 4·512·4096 + max(4·512·(1 + 4096 + 8192) + 4096²·9/16 +
	// 4·8192·(512·32 + 128·8), 4·512·(4096 + 128256) + 4096·128256·105/128)
	// = 8,388,608 + max(25,167,872 + 9,437,184 + 570,425,344,
	// 271,056,896 + 430,940,160) = 710,385,664.
	assert.Equal(t, gpumem.Bytes(710_385_664), r.GraphPartial)
	assert.Equal(t, r.GraphFull, r.Graph)
	// Allocations: 457 MiB, blk.0 and its cache as the buffer, every
	// block and its cache, the output layer and the full graph.
	blk0 := int64(138_936_320) // a use_more_bits layer (i < 4)
	want := int64(457<<20) + blk0 + (1<<30)/32 + int64(r.Repeating) + (1 << 30) + int64(r.Output) + 587_204_608
	assert.Equal(t, gpumem.Bytes(want), r.VRAM)
	assert.Equal(t, []int{33}, r.TensorSplit)
	// output Q6_K 430,940,160 and output_norm 16,384.
	assert.Equal(t, gpumem.Bytes(430_956_544), r.Output)
	// 4,912,898,048 of tensors less token_embd and the output layer.
	assert.Equal(t, gpumem.Bytes(4_912_898_048-295_501_824-430_956_544), r.Repeating)
}

// TestOllamaPartial: on a GPU too small for every layer, the blocks
// that fit are offloaded, each beside the larger graph estimate, and
// one more would not fit.
func TestOllamaPartial(t *testing.T) {
	m := llama3Q4KMModel(t)
	free := gpumem.Bytes(4 << 30)
	r, err := OllamaLayers(m, []gpumem.Bytes{free}, OllamaOptions{NumCtx: 8192})
	require.NoError(t, err)
	require.Greater(t, r.Layers, 0)
	assert.Less(t, r.Layers, 33)
	assert.False(t, r.Full)
	assert.Equal(t, r.GraphPartial, r.Graph)
	// What is allocated fits; one more (Q4_K or Q6_K) layer does not.
	layer := int64(122_716_160) + (1<<30)/32
	assert.LessOrEqual(t, int64(r.VRAM), int64(free))
	assert.Greater(t, int64(r.VRAM)-int64(r.Graph)+int64(max(r.GraphPartial, r.GraphFull))+layer, int64(free))
	// num_gpu caps it.
	r2, err := OllamaLayers(m, []gpumem.Bytes{free}, OllamaOptions{NumCtx: 8192, NumGPU: 3})
	require.NoError(t, err)
	assert.Equal(t, 3, r2.Layers)
}

// TestOllamaPublished70B checks the cache and graph estimates against
// Ollama's own log line for a Llama-3.x-70B (80 blocks, width 8192, 64
// heads, 8 KV heads, vocabulary 128,256) at num_ctx 64000 with flash
// attention on four GPUs of 22.0 GiB free (github.com/ollama/ollama
// issue 9181, 2025-02-18: memory.required.kv="19.5 GiB",
// memory.graph.full="8.2 GiB" memory.graph.partial="8.2 GiB", split
// 11,11,11,11). That release's GraphSize for llama is the one of
// v0.12.11 (llm/ggml.go at f9c7ead1).
func TestOllamaPublished70B(t *testing.T) {
	s, ok := model.Lookup("llama-3.1-70b")
	require.True(t, ok)
	s.DType = gpumem.Q8_0
	m, err := ModelOf(s)
	require.NoError(t, err)
	free := []gpumem.Bytes{22 << 30, 22 << 30, 22 << 30, 22 << 30}
	r, err := OllamaLayers(m, free, OllamaOptions{NumCtx: 64000, FlashAttention: true})
	require.NoError(t, err)
	assert.Equal(t, 64000, r.Context)
	assert.Equal(t, 19.5, humanGiB(r.KV))
	assert.Equal(t, 8.2, humanGiB(r.GraphPartial))
	assert.Equal(t, r.GraphPartial, r.GraphFull, "more than one GPU: the partial estimate for both")
	assert.Equal(t, 4, r.GPUs)
	assert.False(t, r.Full)
	// The log's placement too, with the weights in Q8_0 (the log's
	// memory.weights.nonrepeating="1.0 GiB" is a Q8_0 output layer):
	// layers.offload=44 layers.split=11,11,11,11
	// memory.required.allocations="[21.8 GiB 21.8 GiB 21.8 GiB 21.8 GiB]".
	assert.Equal(t, 44, r.Layers)
	assert.Equal(t, []int{11, 11, 11, 11}, r.TensorSplit)
	assert.Equal(t, 1.0, humanGiB(r.Output))
	for _, a := range r.GPUSizes {
		assert.Equal(t, 21.8, humanGiB(a))
	}
}

// TestOllamaFewestGPUs: a model that fits on one of two GPUs uses one
// (pickBestFullFitByLibrary), the larger.
func TestOllamaFewestGPUs(t *testing.T) {
	m := llama3Q4KMModel(t)
	r, err := OllamaLayers(m, []gpumem.Bytes{8 << 30, 24 << 30}, OllamaOptions{NumCtx: 2048})
	require.NoError(t, err)
	assert.Equal(t, 1, r.GPUs)
	assert.True(t, r.Full)
	// Too large for either alone: both, the layers dealt between them.
	r, err = OllamaLayers(m, []gpumem.Bytes{5 << 30, 5 << 30}, OllamaOptions{NumCtx: 8192})
	require.NoError(t, err)
	assert.Equal(t, 2, r.GPUs)
	assert.True(t, r.Full)
	assert.Equal(t, 33, r.TensorSplit[0]+r.TensorSplit[1])
	assert.Positive(t, r.TensorSplit[0])
	assert.Positive(t, r.TensorSplit[1])
}

// TestOllamaMaxContext: the context returned offloads every layer, one
// token more does not.
func TestOllamaMaxContext(t *testing.T) {
	m := llama3Q4KMModel(t)
	free := []gpumem.Bytes{6 << 30}
	ctx, r, err := OllamaMaxContext(m, free, OllamaOptions{})
	require.NoError(t, err)
	assert.True(t, r.Full)
	assert.Equal(t, ctx, r.Context)
	assert.Less(t, ctx, 8192)
	next, err := OllamaLayers(m, free, OllamaOptions{NumCtx: ctx + 1})
	require.NoError(t, err)
	assert.False(t, next.Full)
	// On a large GPU, the model's context_length.
	ctx, _, err = OllamaMaxContext(m, []gpumem.Bytes{80 << 30}, OllamaOptions{})
	require.NoError(t, err)
	assert.Equal(t, 8192, ctx)
	// Too small for every layer at any context.
	_, _, err = OllamaMaxContext(m, []gpumem.Bytes{2 << 30}, OllamaOptions{})
	assert.ErrorIs(t, err, gpumem.ErrDoesNotFit)
}

func TestOllamaInvalid(t *testing.T) {
	m := llama3Q4KMModel(t)
	for _, c := range []struct {
		free  []gpumem.Bytes
		o     OllamaOptions
		field string
	}{
		{nil, OllamaOptions{}, "free"},
		{[]gpumem.Bytes{0}, OllamaOptions{}, "free[0]"},
		{[]gpumem.Bytes{1 << 30}, OllamaOptions{NumCtx: -1}, "Ollama.NumCtx"},
		{[]gpumem.Bytes{1 << 30}, OllamaOptions{NumBatch: -1}, "Ollama.NumBatch"},
		{[]gpumem.Bytes{1 << 30}, OllamaOptions{NumParallel: -2}, "Ollama.NumParallel"},
		{[]gpumem.Bytes{1 << 30}, OllamaOptions{NumGPU: -1}, "Ollama.NumGPU"},
		{[]gpumem.Bytes{1 << 30}, OllamaOptions{KVCacheType: gpumem.Q5_1}, "Ollama.KVCacheType"},
	} {
		_, err := OllamaLayers(m, c.free, c.o)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%+v", c)
		assert.Equal(t, c.field, fe.Field)
	}
	s, ok := model.Lookup("qwen3-8b")
	require.True(t, ok)
	q, err := ModelOf(s)
	require.NoError(t, err)
	_, err = OllamaLayers(q, []gpumem.Bytes{24 << 30}, OllamaOptions{})
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)
}

// BenchmarkOllamaMaxContext: the bisection over num_ctx for Llama-3-8B
// Q4_K_M on one GPU (each step is estimateGPULayers over 291 tensors).
func BenchmarkOllamaMaxContext(b *testing.B) {
	m := llama3Q4KMModel(&testing.T{})
	free := []gpumem.Bytes{12 << 30}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := OllamaMaxContext(m, free, OllamaOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOllamaKV: GraphSize's cache. gpt-oss-20b (24 layers, 8 KV heads of
// 64) at num_ctx 8192: the 12 full-attention layers hold 8192 cells, the
// 12 sliding-window ones 4096 + num_batch 512; 2048 bytes a cell in f16:
// 192 MiB + 108 MiB = 300 MiB (Ollama printed memory.required.kv="300.0
// MiB" for this job). Llama-3-8B is every layer at the context, as
// OllamaLayers' KV.
func TestOllamaKV(t *testing.T) {
	s, ok := model.Lookup("gpt-oss-20b")
	require.True(t, ok)
	g, err := NewModel(model.Finetune{Model: s})
	require.NoError(t, err)
	kv, err := OllamaKV(g, OllamaOptions{NumCtx: 8192})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(12*8192*2048+12*(4096+512)*2048), kv)
	assert.Equal(t, gpumem.Bytes(300<<20), kv)
	// Two parallel requests: the full layers' context doubles, the
	// sliding layers get 2 × 4096 + 512.
	kv2, err := OllamaKV(g, OllamaOptions{NumCtx: 8192, NumParallel: 2})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(12*16384*2048+12*(8192+512)*2048), kv2)
	// OllamaLayers still refuses the engine's architectures.
	_, err = OllamaLayers(g, []gpumem.Bytes{24 << 30}, OllamaOptions{})
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)

	m := llama3Q4KMModel(t)
	kv, err = OllamaKV(m, OllamaOptions{NumCtx: 8192})
	require.NoError(t, err)
	r, err := OllamaLayers(m, []gpumem.Bytes{24 << 30}, OllamaOptions{NumCtx: 8192})
	require.NoError(t, err)
	assert.Equal(t, r.KV, kv)
	_, err = OllamaKV(m, OllamaOptions{NumCtx: -1})
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "Ollama.NumCtx", fe.Field)
}
