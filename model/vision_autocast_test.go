package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestViTAutocastResidualStream: under bf16 autocast over fp32 weights
// ViTLayer's residual stream is fp32 (ViTEmbeddings' cat with the fp32
// cls_token promotes), so each LayerNorm saves its fp32 input (2·T·h
// more than a bf16 pass each) and query, key and value each save their
// own bf16 cast of layernorm_before's fp32 output (2·2·T·h more): 8·T·h
// per block over a pure bf16 pass. The final LayerNorm saves its fp32
// input too.
func TestViTAutocastResidualStream(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "vit-base")
	const b = 2
	T := int64(b * (s.Image.Patches() + 1))
	h := s.Hidden
	w := model.Workload{Batch: b, DType: gpumem.BF16, Train: true, Attention: model.SDPA}
	pure := total(t, s, w)
	w.Autocast = true
	mixed := total(t, s, w)
	require.Equal(t, len(pure.Layers), len(mixed.Layers))
	for i := range pure.Layers {
		require.Equal(t, pure.Layers[i].Saved+gpumem.Bytes(8*T*h), mixed.Layers[i].Saved, "block %d", i)
	}
	require.Equal(t, pure.FinalNorm+gpumem.Bytes(2*T*h), mixed.FinalNorm)
}
