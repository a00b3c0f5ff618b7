package attention_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
)

// TestKVCachePublished compares per-token cache sizes with published
// figures. Each case names its source.
func TestKVCachePublished(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		source string
		kv     attention.KVCache
		want   gpumem.Bytes // per token, all layers
	}{
		{"OPT-13B fp16", "Kwon et al. 2023 (PagedAttention, SOSP'23) §3: 2 × 5120 × 40 × 2 B = 800 KB per token",
			attention.KVCache{Layers: 40, KVHeads: 40, HeadDim: 128, DType: gpumem.FP16}, 800 * gpumem.KiB},
		{"Llama-2-7B fp16", "config: 32 layers, 32 heads × 128; 0.5 MiB per token",
			attention.KVCache{Layers: 32, KVHeads: 32, HeadDim: 128, DType: gpumem.FP16}, 512 * gpumem.KiB},
		{"Llama-3-8B bf16 GQA", "config: 32 layers, 8 KV heads × 128; 128 KiB per token",
			attention.KVCache{Layers: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16}, 128 * gpumem.KiB},
		{"GPT-OSS-120B bf16", "vLLM Neuron docs, KV cache quantization: 36 layers, 8 KV heads × 64; 131k tokens ≈ 9.66 GB",
			attention.KVCache{Layers: 36, KVHeads: 8, HeadDim: 64, DType: gpumem.BF16}, 2 * 36 * 8 * 64 * 2},
		{"GPT-OSS-120B fp8", "same source: ≈ 4.83 GB, half of bf16",
			attention.KVCache{Layers: 36, KVHeads: 8, HeadDim: 64, DType: gpumem.FP8E4M3}, 36 * 8 * 64 * 2},
		{"DeepSeek-V3 MLA latent bf16", "DeepSeek-V2 paper Table 1 ((d_c + d_h^R)·l = 576·l elements); vLLM mla/common.py",
			attention.KVCache{Layers: 61, Layout: attention.Latent, LatentDim: 512 + 64, DType: gpumem.BF16}, 576 * 2 * 61},
		{"DeepSeek-V3 decompressed in HF", "modular_deepseek_v3.py: key 128×192, value 128×128 per token per layer",
			attention.KVCache{Layers: 61, KVHeads: 128, HeadDim: 192, ValueHeadDim: 128, DType: gpumem.BF16}, 128 * (192 + 128) * 2 * 61},
		{"Llama-3-8B q4_0 (llama.cpp)", "ggml Q4_0: 32 elements in 18 bytes; row 8×128 = 1024 → 576 B per K or V row",
			attention.KVCache{Layers: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.Q4_0}, 2 * 32 * 576},
		{"Llama-3-8B q8_0 (llama.cpp)", "ggml Q8_0: 32 elements in 34 bytes",
			attention.KVCache{Layers: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.Q8_0}, 2 * 32 * 1088},
		{"Llama-3-8B int8 (TensorRT-LLM)", "1 byte per element, per-tensor scales",
			attention.KVCache{Layers: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.INT8}, 64 * gpumem.KiB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.kv.Bytes(1, 1)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "KVCache.Bytes(1, 1) per token; source: %s", tc.source)
		})
	}
	// The GPT-OSS figure for a whole 131k-token (131072) sequence: 9.66 GB.
	oss := attention.KVCache{Layers: 36, KVHeads: 8, HeadDim: 64, DType: gpumem.BF16}
	b, err := oss.Bytes(1, 131072)
	require.NoError(t, err)
	assert.InDelta(t, 9.66, b.GB(), 0.005)
	// HF's decompressed DeepSeek-V3 cache is about 71× the latent (docs/reference.md#config-files).
	lat, _ := attention.KVCache{Layers: 1, Layout: attention.Latent, LatentDim: 576, DType: gpumem.BF16}.PerToken()
	hf, _ := attention.KVCache{Layers: 1, KVHeads: 128, HeadDim: 192, ValueHeadDim: 128, DType: gpumem.BF16}.PerToken()
	assert.InDelta(t, 71.1, float64(hf)/float64(lat), 0.05)
}

func TestKVCacheBytes(t *testing.T) {
	t.Parallel()
	llama3 := attention.KVCache{Layers: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16}
	per := 4 * gpumem.KiB // one layer, one token
	paged := llama3
	paged.BlockTokens = 16
	// Gemma-3 style: five layers of window 1024, then one full layer.
	var wins []int
	for i := 0; i < 12; i++ {
		if i%6 == 5 {
			wins = append(wins, 0)
		} else {
			wins = append(wins, 1024)
		}
	}
	gemma := attention.KVCache{Layers: 12, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16, Windows: wins}
	gemmaPaged := gemma
	gemmaPaged.BlockTokens = 16
	tests := []struct {
		name          string
		kv            attention.KVCache
		batch, tokens int
		want          gpumem.Bytes
	}{
		{"empty", llama3, 4, 0, 0},
		{"no batch", llama3, 0, 100, 0},
		{"contiguous", llama3, 3, 1000, 3 * 1000 * 32 * per},
		{"paged rounds up", paged, 3, 1000, 3 * 1008 * 32 * per},
		{"paged exact", paged, 1, 32, 32 * 32 * per},
		{"paged one token", paged, 1, 1, 16 * 32 * per},
		{"windows below the window", gemma, 1, 1000, 12 * 1000 * per},
		{"windows capped", gemma, 2, 5000, 2 * (10*1024 + 2*5000) * per},
		// 5000 tokens: the window is positions 3976..4999, blocks 248..312
		// (65 blocks = 1040 slots); the full layers round 5000 up to 5008.
		{"paged windows", gemmaPaged, 1, 5000, (10*1040 + 2*5008) * per},
		// 4096 tokens: window 3072..4095 is exactly blocks 192..255.
		{"paged windows aligned", gemmaPaged, 1, 4096, (10*1024 + 2*4096) * per},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.kv.Bytes(tc.batch, tc.tokens)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestKVCacheMaxTokens(t *testing.T) {
	t.Parallel()
	var wins []int
	for i := 0; i < 12; i++ {
		wins = append(wins, []int{1000, 0}[i%2])
	}
	caches := []attention.KVCache{
		{Layers: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16},
		{Layers: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16, BlockTokens: 16},
		{Layers: 12, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16, BlockTokens: 16, Windows: wins},
		{Layers: 61, Layout: attention.Latent, LatentDim: 576, DType: gpumem.FP8E4M3, BlockTokens: 64},
	}
	for _, kv := range caches {
		for _, limit := range []gpumem.Bytes{64 * gpumem.MiB, gpumem.GiB, 40 * gpumem.GiB} {
			n, err := kv.MaxTokens(4, limit)
			require.NoError(t, err)
			// The cache never exceeds the limit while growing to n tokens,
			// and exceeds it at some length up to n + 1.
			worst := func(n int) gpumem.Bytes {
				var m gpumem.Bytes
				for t2 := max(1, n-64); t2 <= n; t2++ {
					b, err := kv.Bytes(4, t2)
					require.NoError(t, err)
					m = max(m, b)
				}
				return m
			}
			assert.LessOrEqual(t, worst(n), limit, "%+v MaxTokens = %d", kv, n)
			assert.Greater(t, worst(n+1), limit, "%+v MaxTokens + 1", kv)
		}
	}
	_, err := caches[0].MaxTokens(4, 100)
	require.ErrorIs(t, err, gpumem.ErrDoesNotFit)
	_, err = caches[0].MaxTokens(0, gpumem.GiB)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	onlyWindows := attention.KVCache{Layers: 2, KVHeads: 1, HeadDim: 8, DType: gpumem.FP16, Windows: []int{64, 64}}
	n, err := onlyWindows.MaxTokens(1, gpumem.GiB)
	require.NoError(t, err)
	assert.Equal(t, 1<<40, n, "a cache of window layers stops growing")
}

func TestKVCacheValidate(t *testing.T) {
	t.Parallel()
	ok := attention.KVCache{Layers: 2, KVHeads: 2, HeadDim: 64, DType: gpumem.BF16}
	tests := []struct {
		name  string
		edit  func(*attention.KVCache)
		field string
	}{
		{"layers", func(c *attention.KVCache) { c.Layers = 0 }, "KVCache.Layers"},
		{"kv heads", func(c *attention.KVCache) { c.KVHeads = 0 }, "KVCache.KVHeads"},
		{"head dim", func(c *attention.KVCache) { c.HeadDim = -1 }, "KVCache.HeadDim"},
		{"value head dim", func(c *attention.KVCache) { c.ValueHeadDim = -1 }, "KVCache.ValueHeadDim"},
		{"latent dim", func(c *attention.KVCache) { c.Layout = attention.Latent }, "KVCache.LatentDim"},
		{"layout", func(c *attention.KVCache) { c.Layout = 7 }, "KVCache.Layout"},
		{"dtype", func(c *attention.KVCache) { c.DType = gpumem.Invalid }, "KVCache.DType"},
		{"dtype bool", func(c *attention.KVCache) { c.DType = gpumem.BOOL }, "KVCache.DType"},
		{"block row", func(c *attention.KVCache) { c.HeadDim = 20; c.KVHeads = 1; c.DType = gpumem.Q4_0 }, "KVCache.DType"},
		{"block tokens", func(c *attention.KVCache) { c.BlockTokens = -16 }, "KVCache.BlockTokens"},
		{"windows length", func(c *attention.KVCache) { c.Windows = []int{1} }, "KVCache.Windows"},
		{"window negative", func(c *attention.KVCache) { c.Windows = []int{1, -1} }, "KVCache.Windows"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.edit(&c)
			_, err := c.Bytes(1, 1)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			require.ErrorIs(t, err, gpumem.ErrInvalid)
		})
	}
	_, err := ok.Bytes(-1, 1)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	_, err = ok.Bytes(1, -1)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	_, err = ok.Bytes(1<<40, 1<<40)
	require.ErrorIs(t, err, gpumem.ErrRange)
}
