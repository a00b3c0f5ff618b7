package budget

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

func sglangJob(t *testing.T, s model.Spec, dev gpumem.Device, o SGLangOptions) Job {
	t.Helper()
	m, err := ModelOf(s)
	require.NoError(t, err)
	return Job{Model: m, Mode: Generation, Precision: BF16, Batch: 1, SeqLen: 512, Generate: 512, Runtime: SGLang, SGLang: o, Device: dev}
}

// TestSGLangLlama3 is profile_max_num_token by hand: Llama-3.1-8B in
// bf16 on an H100 (81,106 MiB) at the default 0.88.
func TestSGLangLlama3(t *testing.T) {
	s, ok := model.Lookup("llama-3.1-8b")
	require.True(t, ok)
	dev, ok := gpumem.LookupDevice("h100")
	require.True(t, ok)
	r, err := SGLangBuffers(sglangJob(t, s, dev, SGLangOptions{}))
	require.NoError(t, err)
	assert.Equal(t, 0.88, r.MemFractionStatic)
	// The baseline: 81,106 MiB less the 426 MiB CUDA context.
	baseline := int64(81106-426) << 20
	assert.Equal(t, gpumem.Bytes(baseline), r.Baseline)
	// bf16 weights: 8,030,261,248 × 2.
	assert.Equal(t, gpumem.Bytes(16_060_522_496), r.Weights)
	// cell: 8 KV heads × 128 × 32 layers × 2 × 2 bytes = 131,072.
	assert.Equal(t, gpumem.Bytes(131_072), r.CellBytes)
	reserved := int64(float64(baseline) * (1 - 0.88))
	assert.Equal(t, (baseline-16_060_522_496-reserved)/131_072, r.Tokens)
	assert.Equal(t, gpumem.Bytes(r.Tokens*65_536), r.KSize)
	assert.Equal(t, r.KSize, r.VSize)
	assert.Equal(t, 131072, r.ContextLength)
	assert.InDelta(t, float64(r.Tokens)/131072, r.Concurrency, 1e-12)
	assert.Empty(t, r.Refused)

	// A larger fraction holds more; a cap and a page size round it.
	r2, err := SGLangBuffers(sglangJob(t, s, dev, SGLangOptions{MemFractionStatic: 0.9}))
	require.NoError(t, err)
	assert.Greater(t, r2.Tokens, r.Tokens)
	r3, err := SGLangBuffers(sglangJob(t, s, dev, SGLangOptions{MaxTotalTokens: 100_000, PageSize: 64}))
	require.NoError(t, err)
	assert.Equal(t, int64(100_000/64*64), r3.Tokens)

	// Estimate carries the pool.
	b, err := Estimate(sglangJob(t, s, dev, SGLangOptions{}))
	require.NoError(t, err)
	assert.Equal(t, r.Weights, b.Weights)
	assert.Equal(t, r.KSize+r.VSize, b.KVCache)

	// The fraction below which one full-length request does not fit.
	r4, err := SGLangBuffers(sglangJob(t, s, dev, SGLangOptions{MemFractionStatic: r.MinFraction - 0.01}))
	require.NoError(t, err)
	assert.Less(t, r4.Tokens, int64(131072))
	r5, err := SGLangBuffers(sglangJob(t, s, dev, SGLangOptions{MemFractionStatic: r.MinFraction + 0.01}))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, r5.Tokens, int64(131072))
}

// TestSGLangPublishedPools checks the pool's cell arithmetic (KV heads
// split by tensor parallelism, layers, head size, bytes) against the
// "KV Cache is allocated" lines SGLang printed in two published runs:
// the tokens are the log's (through MaxTotalTokens on a large device),
// K size follows.
//   - Qwen3-235B-A22B-FP8 on 4 × H100 with --tp 4 --mem-fraction-static
//     0.93: "#tokens: 367404, K size: 8.23 GB, V size: 8.23 GB"
//     (github.com/vllm-project/vllm issue 21348, 2025-07-22);
//   - a Qwen3-30B-A3B FP8 (128 experts of 384 columns per rank at TP 2)
//     with a bf16 cache: "dtype: torch.bfloat16, #tokens: 1106304, K
//     size: 25.32 GB, V size: 25.32 GB" (github.com/sgl-project/sglang
//     pull request 27537, 2026-06-08).
func TestSGLangPublishedPools(t *testing.T) {
	q235, err := model.FromHFConfig(strings.NewReader(`{"model_type":"qwen3_moe","architectures":["Qwen3MoeForCausalLM"],
		"hidden_size":4096,"intermediate_size":12288,"moe_intermediate_size":1536,"num_hidden_layers":94,
		"num_attention_heads":64,"num_key_value_heads":4,"head_dim":128,"vocab_size":151936,
		"max_position_embeddings":40960,"num_experts":128,"num_experts_per_tok":8,"torch_dtype":"bfloat16"}`))
	require.NoError(t, err)
	q30, ok := model.Lookup("qwen3-30b-a3b")
	require.True(t, ok)
	big := gpumem.Device{Name: "large", Capacity: 4 << 40}
	for _, c := range []struct {
		name   string
		s      model.Spec
		tp     int
		tokens int
		kGB    float64
	}{
		{"Qwen3-235B-A22B TP 4", q235, 4, 367404, 8.23},
		{"Qwen3-30B-A3B TP 2", q30, 2, 1106304, 25.32},
	} {
		r, err := SGLangBuffers(sglangJob(t, c.s, big, SGLangOptions{TensorParallel: c.tp, MaxTotalTokens: c.tokens}))
		require.NoError(t, err, c.name)
		assert.Equal(t, int64(c.tokens), r.Tokens, c.name)
		assert.Equal(t, c.kGB, math.Round(float64(r.KSize)/(1<<30)*100)/100, c.name)
		assert.Equal(t, r.KSize, r.VSize, c.name)
	}
}

func TestSGLangRefusedAndInvalid(t *testing.T) {
	s, ok := model.Lookup("llama-3.1-70b")
	require.True(t, ok)
	dev, ok := gpumem.LookupDevice("rtx4090")
	require.True(t, ok)
	r, err := SGLangBuffers(sglangJob(t, s, dev, SGLangOptions{}))
	require.NoError(t, err)
	assert.Zero(t, r.Tokens)
	assert.Contains(t, r.Refused, "--mem-fraction-static")
	assert.Greater(t, r.MinFraction, 1.0)

	s8, _ := model.Lookup("llama-3.1-8b")
	for _, c := range []struct {
		o     SGLangOptions
		dev   gpumem.Device
		field string
	}{
		{SGLangOptions{MemFractionStatic: 1}, dev, "Job.SGLang.MemFractionStatic"},
		{SGLangOptions{MemFractionStatic: math.NaN()}, dev, "Job.SGLang.MemFractionStatic"},
		{SGLangOptions{TensorParallel: -1}, dev, "Job.SGLang.TensorParallel"},
		{SGLangOptions{PageSize: -1}, dev, "Job.SGLang.PageSize"},
		{SGLangOptions{MaxTotalTokens: -1}, dev, "Job.SGLang.MaxTotalTokens"},
		{SGLangOptions{KVCacheDType: gpumem.Q4_0}, dev, "Job.SGLang.KVCacheDType"},
		{SGLangOptions{}, gpumem.Device{}, "Job.Device.Capacity"},
	} {
		_, err := SGLangBuffers(sglangJob(t, s8, c.dev, c.o))
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%+v: %v", c.o, err)
		assert.Equal(t, c.field, fe.Field)
	}
	// SGLang options without the runtime.
	j := sglangJob(t, s8, dev, SGLangOptions{PageSize: 16})
	j.Runtime = PyTorch
	_, err = Estimate(j)
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "Job.SGLang", fe.Field)
}

// TestSGLangPoolTokens: the pool from measured free memory, as the
// runtime computes it from its own weights. A Qwen3-30B-A3B pool whose
// experts stay on the host (kvcache-ai/ktransformers#1971, an RTX 3090):
// 17.29 GB free after 2.91 GB of weights, mem_fraction_static 0.7, 98304
// bytes a token (48 layers × 4 KV heads × 128 × 2 × bf16): (17.29 −
// 20.20 × 0.3) GB // 98304 = 122,663 tokens; SGLang printed 122420. The
// log does not print total_gpu_memory (the free memory when distributed
// init ends); the free memory at the load's start, 17.29 + 2.91 GB, stands
// in for it.
func TestSGLangPoolTokens(t *testing.T) {
	gb := func(x float64) gpumem.Bytes { return gpumem.Bytes(x * (1 << 30)) }
	n, err := SGLangPoolTokens(gb(20.20), gb(17.29), 0.7, 98304, 0)
	require.NoError(t, err)
	want := (int64(gb(17.29)) - int64(float64(gb(20.20))*0.3)) / 98304
	assert.Equal(t, want, n)
	assert.InDelta(t, 122420, float64(n), 0.01*122420)
	n64, err := SGLangPoolTokens(gb(20.20), gb(17.29), 0.7, 98304, 64)
	require.NoError(t, err)
	assert.Equal(t, want/64*64, n64)
	// Nothing left: zero, not an error.
	n, err = SGLangPoolTokens(gb(20), gb(5), 0.7, 98304, 0)
	require.NoError(t, err)
	assert.Zero(t, n)

	// The runtime's own pool is the same arithmetic on its weights.
	m := llama3Q4KMModel(t)
	j := Job{Model: m, Mode: Generation, Precision: BF16, Batch: 1, SeqLen: 1, Generate: 1, Runtime: SGLang,
		SGLang: SGLangOptions{MemFractionStatic: 0.8}, Device: gpumem.Device{Capacity: 80 << 30}}
	r, err := SGLangBuffers(j)
	require.NoError(t, err)
	n, err = SGLangPoolTokens(r.Baseline, r.Baseline-r.Weights, r.MemFractionStatic, r.CellBytes, 0)
	require.NoError(t, err)
	assert.Equal(t, r.Tokens, n)

	for _, c := range []struct {
		total, avail gpumem.Bytes
		f            float64
		cell         gpumem.Bytes
		page         int
		field        string
	}{
		{0, 0, 0.5, 1, 0, "total"}, {10, 11, 0.5, 1, 0, "avail"}, {10, 5, 1, 1, 0, "mem_fraction_static"},
		{10, 5, 0.5, 0, 0, "cell"}, {10, 5, 0.5, 1, -1, "page_size"},
	} {
		_, err := SGLangPoolTokens(c.total, c.avail, c.f, c.cell, c.page)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%+v", c)
		assert.Equal(t, c.field, fe.Field)
	}
}
