package budget

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestLlamaCppVersionPlacement: the -ngl rule of each era on a 32-layer
// model, as llama.cpp printed it: "offloading 22 repeating layers",
// "offloaded 22/33" (December 2023, the output layer on the CPU); "offloaded
// 0/35" slots before the per-layer cache (October 2023); 21 repeating
// layers and the output layer today.
func TestLlamaCppVersionPlacement(t *testing.T) {
	m := llama3Q4KMModel(t)
	run := func(v LlamaCppVersion, ngl int) LlamaCppReport {
		t.Helper()
		r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 4096, GPULayers: ngl, Version: v}))
		require.NoError(t, err)
		return r
	}
	perLayer := gpumem.Bytes(4096 * 2 * 1024 * 2) // K and V of 1024 columns, f16

	cur := run(0, 22)
	assert.Equal(t, 33, cur.Slots)
	assert.True(t, cur.OutputOnGPU)
	assert.Equal(t, 21*perLayer, cur.KV)

	dec23 := run(20231213, 22)
	assert.Equal(t, 33, dec23.Slots)
	assert.Equal(t, 22, dec23.Layers)
	assert.False(t, dec23.OutputOnGPU)
	assert.Equal(t, 22*perLayer, dec23.KV)
	assert.Equal(t, 10*perLayer, dec23.HostKV)
	// The output layer's weights move to the host.
	assert.Greater(t, dec23.HostWeights, cur.HostWeights)

	// At ngl = n_layer + 1 both rules put everything on the GPU.
	a, b := run(0, 33), run(20250522, 33)
	assert.Equal(t, a.GPUWeights, b.GPUWeights)
	assert.Equal(t, a.KV, b.KV)
	assert.True(t, b.OutputOnGPU)

	// October 2023: n_layer + 3 slots; the cache is one slot of V and one
	// of K after the output layer.
	oct := run(20231013, 33)
	assert.Equal(t, 35, oct.Slots)
	assert.True(t, oct.OutputOnGPU)
	assert.Zero(t, oct.KV)
	assert.Equal(t, 32*perLayer, oct.HostKV)
	oct = run(20231013, 34)
	assert.Equal(t, 16*perLayer, oct.KV, "the V cache")
	oct = run(20231013, 0)
	assert.Equal(t, 35, oct.Layers)
	assert.Equal(t, 32*perLayer, oct.KV)
	assert.Zero(t, oct.HostKV)
	assert.Equal(t, a.GPUWeights, oct.GPUWeights)
}

func TestParseLlamaCppVersion(t *testing.T) {
	for s, want := range map[string]LlamaCppVersion{
		"": 0, "current": 0, "2025-05-22": 20250522, "2025-05": 20250501, "2023-10-13": 20231013,
		"2026-03": 20260301, "2025-12-24": 20251224, "2025-12-16": 20251216,
	} {
		v, err := ParseLlamaCppVersion("--llamacpp-version", s)
		require.NoError(t, err, s)
		assert.Equal(t, want, v, s)
	}
	for _, s := range []string{"b5466", "2025-12", "2023-12", "2025-04", "2026-01", "2026-02", "2026-01-24", "2026-02-01", "2025-12-20", "2022-06-01", "2025-13-01", "2025-02-30", "yesterday"} {
		_, err := ParseLlamaCppVersion("--llamacpp-version", s)
		require.Error(t, err, s)
		assert.True(t, errors.Is(err, gpumem.ErrInvalid), s)
		assert.Contains(t, err.Error(), "--llamacpp-version", s)
	}
	assert.Equal(t, "2025-05-22", LlamaCppVersion(20250522).String())

	// A Version set in Go is checked too.
	m := llama3Q4KMModel(t)
	for _, v := range []LlamaCppVersion{-1, 20221231, 20251220, 20251399} {
		_, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Version: v}))
		require.Error(t, err, "%d", v)
		assert.Contains(t, err.Error(), "Job.LlamaCpp.Version")
	}
}

// TestLlamaCppVersionMLACache: DeepSeek-V3's cache before and after
// llama.cpp's MLA cache (PR #12801, 2025-04-15) and its K-only form (PR
// #19067, 2026). Before it, each of the
// 128 heads keeps K of 192 (qk_nope 128 + qk_rope 64) and V of 128: 40960
// f16 values, 80 KiB per token and layer, 160 MiB per layer at 2048 cells
// (as a January 2025 build printed); since, the latent (512 + 64 as K, 512
// as V): 1088 values.
func TestLlamaCppVersionMLACache(t *testing.T) {
	s, ok := model.Lookup("deepseek-v3")
	require.True(t, ok)
	m, err := NewModel(model.Finetune{Model: s})
	require.NoError(t, err)
	run := func(v LlamaCppVersion, ngl int) LlamaCppReport {
		t.Helper()
		r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 2048, GPULayers: ngl, Version: v}))
		require.NoError(t, err)
		return r
	}
	old := run(20250414, 1)
	assert.Equal(t, gpumem.Bytes(160<<20), old.KV, "one layer on the GPU")
	assert.Equal(t, gpumem.Bytes(60*160<<20), old.HostKV)
	mla := run(LlamaCppMLAFrom, 1)
	assert.Equal(t, gpumem.Bytes(2048*1088*2), mla.KV)
	assert.Equal(t, 60*mla.KV, mla.HostKV)
	// Since PR #19067 (2026) the latent is in K alone: 576 values.
	cur := run(0, 0)
	assert.Equal(t, gpumem.Bytes(61*2048*576*2), cur.KV)
	assert.Equal(t, cur.KV, run(LlamaCppMLAKOnlyFrom, 0).KV)
	assert.Equal(t, 61*mla.KV, run(20260123, 0).KV)
	// A model without MLA is the same in every build.
	l := llama3Q4KMModel(t)
	a, err := LlamaCppBuffers(llamaCppJob(l, LlamaCppOptions{Context: 2048, Version: 20250101}))
	require.NoError(t, err)
	b, err := LlamaCppBuffers(llamaCppJob(l, LlamaCppOptions{Context: 2048}))
	require.NoError(t, err)
	assert.Equal(t, a.KV, b.KV)
}
