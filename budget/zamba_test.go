package budget

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestZambaCache checks a Zamba2 generation's cache (kvCache, what a
// Generation job holds) against
// Zamba2HybridDynamicCache (transformers modeling_zamba2.py at v4.57.1):
// keys and values for each hybrid layer (each invocation of a shared
// block), conv and ssm states for every layer. Zamba2Config()'s sizes:
// 54 layers of which 9 hybrid, 32 heads of 2·2560/32 = 160 (no GQA),
// Mamba width 5120 in 8 heads, state 64, one group, conv 4.
func TestZambaCache(t *testing.T) {
	t.Parallel()
	s, err := model.FromHFConfig(strings.NewReader(`{"model_type": "zamba2"}`))
	require.NoError(t, err)
	require.Equal(t, int64(9), s.AttentionLayers())
	m, err := ModelOf(s)
	require.NoError(t, err)
	const B, T = 2, 1000
	j := Job{Model: m, Mode: Generation, Precision: BF16, Batch: B, SeqLen: T - 24, Generate: 24}
	kv, err := kvCache(&j, gpumem.BF16, nil)
	require.NoError(t, err)
	keys := int64(9 * 2 * B * 32 * T * 160 * 2)
	states := int64(54 * B * ((5120+2*64)*4 + 5120*64) * 2)
	assert.Equal(t, gpumem.Bytes(keys+states), kv)
	// The job estimates, the cache among its components; a serving
	// runtime's recurrent state is not modelled and is refused.
	g, err := Estimate(j)
	require.NoError(t, err)
	assert.Equal(t, kv, g.KVCache)
	j.Runtime = VLLM
	_, err = Estimate(j)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Runtime")
	// Loading the weights needs no activations: 2,481,848,336 bf16
	// parameters (Zamba2Config(), testdata/oracle/ssm_params.json).
	b, err := Estimate(Job{Model: m, Mode: Load, Precision: BF16})
	require.NoError(t, err)
	assert.InDelta(t, float64(2*2_481_848_336), float64(b.Weights), float64(512*600))
}

// TestZambaEstimateAllocFree: a Zamba or Zamba2 training, prefill and
// generation estimate allocates nothing (Estimate's contract), with the
// fused and the sequential kernels.
func TestZambaEstimateAllocFree(t *testing.T) {
	for _, cfg := range []string{`{"model_type": "zamba"}`, `{"model_type": "zamba2"}`} {
		s, err := model.FromHFConfig(strings.NewReader(cfg))
		require.NoError(t, err)
		m, err := ModelOf(s)
		require.NoError(t, err)
		for _, j := range []Job{
			{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Batch: 1, SeqLen: 2048, Attention: model.Eager},
			{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Batch: 1, SeqLen: 512, Attention: model.Eager,
				SSMKernel: model.SequentialSSM},
			{Model: m, Mode: Prefill, Precision: BF16, Batch: 4, SeqLen: 4096, Attention: model.Eager},
			{Model: m, Mode: Generation, Precision: BF16, Batch: 4, SeqLen: 1024, Generate: 128, Attention: model.Eager},
		} {
			_, err := Estimate(j)
			require.NoError(t, err, cfg)
			assert.Zero(t, testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }), "%s %s", cfg, j.Mode)
		}
	}
}
