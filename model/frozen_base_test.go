package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestFrozenBaseLlama: LoRA on q_proj and v_proj of a frozen Llama, op by
// op (model.FrozenBase): per block the norms' normalized copies (2·e·T·h),
// the second norm's output that no adapter reads (e·T·h), o_proj's input
// under eager attention (e·T·H·d) and down_proj's input (e·T·I) are not
// saved; lora_A's two outputs (2·e·T·r) are; the first block's input norm
// saves nothing of its own (4·T·h + 4·T) and its scores' matmul not the
// query (e·b·H·s·d, k_proj having no adapter); the final norm's copy and
// the head's input (2·e·T·h) go too.
func TestFrozenBaseLlama(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "llama-2-7b")
	const b, seq, r = 2, 256, 8
	T := int64(b * seq)
	h, I, L := s.Hidden, s.Intermediate, int64(s.Layers)
	for _, dt := range []gpumem.DType{gpumem.FP32, gpumem.BF16} {
		sz, err := dt.Size(1)
		require.NoError(t, err)
		e := int64(sz)
		w := model.Workload{Batch: b, SeqLen: seq, DType: dt, Train: true, Attention: model.Eager}
		base := total(t, s, w)
		w.FrozenBase = model.FrozenBase{Rank: r, Adapted: model.ProjQ | model.ProjV}
		frozen := total(t, s, w)
		perBlock := 2*e*T*h + e*T*h + e*T*h + e*T*I - 2*e*T*r
		first := 4*T*h + 4*T + e*T*h
		want := L*perBlock + first + 2*e*T*h
		require.Equal(t, gpumem.Bytes(want), base.Total()-frozen.Total(), "%v", dt)
		// Nothing changes outside training.
		w.Train = false
		inf := total(t, s, w)
		w.FrozenBase = model.FrozenBase{}
		require.Equal(t, total(t, s, w), inf)
	}
}

// TestProjectionOf reads the projection a LoRA tensor adapts.
func TestProjectionOf(t *testing.T) {
	p, ok := model.ProjectionOf("model.layers.3.self_attn.v_proj.lora_B.weight")
	require.True(t, ok)
	require.Equal(t, model.ProjV, p)
	p, ok = model.ProjectionOf("model.layers.0.mlp.down_proj.lora_A.weight")
	require.True(t, ok)
	require.Equal(t, model.ProjDown, p)
	_, ok = model.ProjectionOf("transformer.h.0.attn.c_attn.lora_A.weight")
	require.False(t, ok)
	_, ok = model.ProjectionOf("model.layers.0.self_attn.q_proj.weight")
	require.False(t, ok)
}

// TestFrozenBaseRankChecked: a negative rank is refused, naming the field.
func TestFrozenBaseRankChecked(t *testing.T) {
	s := mustLookup(t, "llama-2-7b")
	_, err := s.Activations(model.Workload{Batch: 1, SeqLen: 8, DType: gpumem.BF16, Train: true, FrozenBase: model.FrozenBase{Rank: -1}})
	require.ErrorContains(t, err, "Workload.FrozenBase.Rank")
}
