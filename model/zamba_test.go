package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestZambaLayout checks the layer types the configs give: ZambaConfig's
// "mamba", "mamba", "hybrid" and then a hybrid every attn_layer_period
// layers from attn_layer_offset (Zamba-7B-v1: 13 hybrids in 76 layers),
// and Zamba2Config's default list (9 hybrids in 54 layers); the KV cache
// has one entry per hybrid layer and the Mamba state one per layer.
func TestZambaLayout(t *testing.T) {
	t.Parallel()
	z, err := FromHFConfig(strings.NewReader(`{"model_type": "zamba"}`))
	require.NoError(t, err)
	var hybrids []int
	for i, tp := range z.LayerTypes {
		if tp == "hybrid" {
			hybrids = append(hybrids, i)
		}
	}
	assert.Equal(t, []int{2, 7, 13, 19, 25, 31, 37, 43, 49, 55, 61, 67, 73}, hybrids)
	assert.Equal(t, int64(13), z.AttentionLayers())
	// 76 layers × (I·d_conv + I·N) with I = 2·3712, d_conv 4, N 16, in
	// bf16, one sequence.
	st, err := z.MambaState(1, gpumem.BF16)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(76*(7424*4+7424*16)*2), st)
	z2, err := FromHFConfig(strings.NewReader(`{"model_type": "zamba2"}`))
	require.NoError(t, err)
	assert.Equal(t, int64(9), z2.AttentionLayers())
	assert.Equal(t, int64(160), z2.HeadDim)
}

// TestZambaConfigErrors checks that a bad Zamba config names its key.
func TestZambaConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ cfg, key string }{
		{`{"model_type": "zamba", "n_mamba_heads": 3}`, "n_mamba_heads"},
		{`{"model_type": "zamba", "mamba_dt_rank": "big"}`, "mamba_dt_rank"},
		{`{"model_type": "zamba", "hidden_size": 0}`, "hidden_size"},
		{`{"model_type": "zamba2", "num_hidden_layers": 3, "layers_block_type": ["mamba", "hybrid"]}`, "layers_block_type"},
		{`{"model_type": "zamba2", "num_hidden_layers": 2, "layers_block_type": ["mamba", "attention"]}`, "layers_block_type[1]"},
		{`{"model_type": "zamba2", "n_mamba_heads": 8, "mamba_ngroups": 3}`, "mamba_ngroups"},
		{`{"model_type": "zamba2", "num_mem_blocks": 0}`, "num_mem_blocks"},
	} {
		_, err := FromHFConfig(strings.NewReader(tc.cfg))
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", tc.cfg, err)
		assert.Equal(t, "config."+tc.key, fe.Field, tc.cfg)
	}
}
