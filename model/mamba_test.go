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
	_, err = s.Activations(Workload{Batch: 1, SeqLen: 16, DType: gpumem.BF16, Train: true, Checkpointing: SelectiveCheckpointing})
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)
	_, err = s.MambaState(0, gpumem.BF16)
	assert.Error(t, err)
}

// TestMambaActivationsByHand checks one block's saved bytes against the
// derivation in model/mamba.go for h = 64, I = 128, N = 16, R = 4,
// batch 2 × 8 tokens (T = 16) in bf16:
//
//	MambaRMSNorm   4·16·64 + 4·16 + 2·16·64          6,208
//	in_proj input  2·16·64                           2,048
//	xz             2·16·256                          8,192
//	x_dbl          2·16·(4 + 32)                     1,152
//	B, C           2·2·16·16                         1,024
//	out            2·16·128                          4,096
//	scan x         4·2·128·1 chunk·32               32,768
//	A              4·128·16                          8,192
//	                                                63,680
func TestMambaActivationsByHand(t *testing.T) {
	t.Parallel()
	s, err := FromHFConfig(strings.NewReader(`{"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2,
		"vocab_size": 100, "time_step_rank": 4}`))
	require.NoError(t, err)
	a, err := s.Activations(Workload{Batch: 2, SeqLen: 8, DType: gpumem.BF16, Train: true})
	require.NoError(t, err)
	require.Len(t, a.Layers, 1)
	assert.Equal(t, gpumem.Bytes(63_680), a.Layers[0].Saved)
	assert.Equal(t, gpumem.Bytes(2*63_680), a.LayersTotal())
	// The head: the logits of 16 tokens × 100 in bf16, the fp32
	// log-softmax, norm_f like a block's norm.
	assert.Equal(t, gpumem.Bytes(2*16*100), a.Logits)
	assert.Equal(t, gpumem.Bytes(6_208), a.FinalNorm)
	ck, err := s.Activations(Workload{Batch: 2, SeqLen: 8, DType: gpumem.BF16, Train: true, Checkpointing: FullCheckpointing})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(4*16*64), ck.Layers[0].Kept, "the fp32 residual input")
}
