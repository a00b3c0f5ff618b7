package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestFrozenBaseKeptInputs: with bitsandbytes before 0.43.2 every 4-bit
// linear of a frozen base keeps its input (model.FrozenBase.KeptInputs):
// per block the second norm's output read by gate and up (e·T·h), o_proj's
// input under eager attention (e·T·H·d) and down_proj's input (e·T·I) are
// saved again, while the norms' normalized copies and the first block's
// input norm stay dropped.
func TestFrozenBaseKeptInputs(t *testing.T) {
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
		w.FrozenBase = model.FrozenBase{Rank: r, Adapted: model.ProjQ | model.ProjV}
		frozen := total(t, s, w)
		w.FrozenBase.KeptInputs = true
		kept := total(t, s, w)
		want := L * (e*T*h + e*T*s.Heads*s.HeadDim + e*T*I)
		require.Equal(t, gpumem.Bytes(want), kept.Total()-frozen.Total(), "%v", dt)
	}
}

// TestFrozenBaseDropout: with the adapters' dropout
// (model.FrozenBase.Dropout) each adapted projection saves its mask (1
// byte per element on CUDA, the input's dtype on the CPU) and lora_A the
// dropped copy of its input: q and v read the hidden size, o_proj the
// heads' width, down_proj the intermediate size.
func TestFrozenBaseDropout(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "llama-2-7b")
	const b, seq, r = 2, 256, 8
	T := int64(b * seq)
	h, I, L := s.Hidden, s.Intermediate, int64(s.Layers)
	for _, backend := range []model.Backend{model.CUDA, model.CPU} {
		for _, dt := range []gpumem.DType{gpumem.FP32, gpumem.BF16} {
			sz, err := dt.Size(1)
			require.NoError(t, err)
			e := int64(sz)
			mask := int64(1)
			if backend == model.CPU {
				mask = e
			}
			w := model.Workload{Batch: b, SeqLen: seq, DType: dt, Train: true, Attention: model.Eager, Backend: backend}
			w.FrozenBase = model.FrozenBase{Rank: r, Adapted: model.ProjQ | model.ProjV | model.ProjO | model.ProjDown}
			plain := total(t, s, w)
			w.FrozenBase.Dropout = true
			drop := total(t, s, w)
			want := L * (mask + e) * T * (2*h + s.Heads*s.HeadDim + I)
			require.Equal(t, gpumem.Bytes(want), drop.Total()-plain.Total(), "%v %v", backend, dt)
		}
	}
}
