package model

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMamba(t *testing.T) {
	t.Parallel()
	s, ok := Lookup("mamba-130m")
	require.True(t, ok)
	// 242 tensors, as the 130m checkpoint's audit states: 10 per block,
	// the embedding and norm_f (lm_head tied).
	assert.Equal(t, 242, len(s.Tensors()))
	shapes := map[string][]int64{}
	for _, tn := range s.Tensors() {
		shapes[tn.Name] = tn.Shape
	}
	assert.Equal(t, []int64{3072, 768}, shapes["backbone.layers.0.mixer.in_proj.weight"])
	assert.Equal(t, []int64{1536, 1, 4}, shapes["backbone.layers.23.mixer.conv1d.weight"])
	assert.Equal(t, []int64{48 + 32, 1536}, shapes["backbone.layers.5.mixer.x_proj.weight"])
	assert.Equal(t, []int64{1536, 16}, shapes["backbone.layers.5.mixer.A_log"])
	// The generation state: 24 layers × batch × 1536 × (4 + 16) values.
	b, err := s.MambaState(8, gpumem.BF16)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(24*8*1536*20*2), b)
	// time_step_rank "auto" is ceil(hidden / 16).
	a, err := FromHFConfig(strings.NewReader(`{"model_type": "mamba", "hidden_size": 1000, "num_hidden_layers": 2}`))
	require.NoError(t, err)
	assert.Equal(t, int64(63), a.SSM.DTRank)
	assert.Equal(t, int64(2000), a.Intermediate)
	_, err = FromHFConfig(strings.NewReader(`{"model_type": "mamba", "time_step_rank": "half"}`))
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config.time_step_rank", fe.Field)
	_, err = s.Activations(Workload{Batch: 1, SeqLen: 16, DType: gpumem.BF16})
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)
	_, err = s.MambaState(0, gpumem.BF16)
	assert.Error(t, err)
}
