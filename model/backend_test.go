package model_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestBackendCPUDropout: the CPU's dropout saves its noise in the input's
// dtype where CUDA saves a 1-byte mask, at every dropout site of BERT's
// step (the embeddings' output, two per layer on batch·seq·hidden, the
// eager attention probabilities): (e − 1) bytes an element more.
func TestBackendCPUDropout(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "bert-base")
	const b, seq = 2, 128
	T := int64(b * seq)
	elems := T*s.Hidden + int64(s.Layers)*(2*T*s.Hidden+b*s.Heads*seq*seq)
	for _, dt := range []gpumem.DType{gpumem.FP32, gpumem.BF16} {
		w := model.Workload{Batch: b, SeqLen: seq, DType: dt, Train: true, Attention: model.Eager, Dropout: true}
		cuda := total(t, s, w)
		w.Backend = model.CPU
		cpu := total(t, s, w)
		sz, err := dt.Size(1)
		require.NoError(t, err)
		e := int64(sz)
		require.Equal(t, gpumem.Bytes((e-1)*elems), cpu.Total()-cuda.Total(), "%v", dt)
		// Without dropout the backends agree.
		w.Dropout = false
		w.Backend = model.CUDA
		a := total(t, s, w)
		w.Backend = model.CPU
		require.Equal(t, a, total(t, s, w), "%v without dropout", dt)
	}
}

// TestBackendCPUSDPAMath: a grouped-query model's SDPA runs the CPU's math
// kernel only when transformers calls it without a mask (enable_gqa), and
// then saves the fp32 probabilities (4·B·H·S² a layer) where the fused
// kernels save a log-sum-exp; with a mask the CPU runs its flash kernel,
// as CUDA's estimate has it.
func TestBackendCPUSDPAMath(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "llama-3-8b")
	require.Less(t, s.KVHeads, s.Heads, "a grouped-query model")
	const b, seq = 1, 256
	w := model.Workload{Batch: b, SeqLen: seq, DType: gpumem.FP32, Train: true, Attention: model.SDPA}
	cuda := total(t, s, w)
	w.Backend = model.CPU
	require.Equal(t, cuda, total(t, s, w), "with a mask the CPU runs its flash kernel")
	w.NoAttentionMask = true
	cpu := total(t, s, w)
	for i, l := range cpu.Layers {
		require.Equal(t, gpumem.Bytes(4*b*s.Heads*seq*seq), l.Attention, "layer kind %d: the math kernel's fp32 probabilities", i)
		require.Greater(t, l.Saved, cuda.Layers[i].Saved)
	}
	// CUDA's estimate does not read NoAttentionMask.
	w.Backend = model.CUDA
	require.Equal(t, cuda, total(t, s, w))
}

func TestBackendParse(t *testing.T) {
	t.Parallel()
	for _, k := range []model.Backend{model.CUDA, model.CPU} {
		got, err := model.ParseBackend(k.String())
		require.NoError(t, err)
		require.Equal(t, k, got)
	}
	_, err := model.ParseBackend("tpu")
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "backend", fe.Field)
	require.Equal(t, "Backend(9)", model.Backend(9).String())
	_, err = mustLookup(t, "gpt2").Activations(model.Workload{Batch: 1, SeqLen: 8, Backend: 9})
	require.ErrorContains(t, err, "Workload.Backend")
}
