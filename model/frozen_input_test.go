package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestFrozenInputLlama: a frozen Llama differentiated to its input
// (model.FrozenInput), op by op: per block the norms' normalized copies
// (2·e·T·h), their outputs that q/k/v and gate/up read (2·e·T·h), o_proj's
// input under eager attention (e·T·H·d) and down_proj's input (e·T·I) are
// not saved; the first block saves as the others (its input, the
// inputs_embeds leaf, requires grad); the final norm's copy and the
// head's input (2·e·T·h) go too, and the ids (8·T): the job passes the
// embeddings instead.
func TestFrozenInputLlama(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "llama-2-7b")
	const b, seq = 2, 256
	T := int64(b * seq)
	h, I, L := s.Hidden, s.Intermediate, int64(s.Layers)
	for _, dt := range []gpumem.DType{gpumem.FP32, gpumem.BF16} {
		sz, err := dt.Size(1)
		require.NoError(t, err)
		e := int64(sz)
		w := model.Workload{Batch: b, SeqLen: seq, DType: dt, Train: true, Attention: model.Eager}
		base := total(t, s, w)
		w.FrozenBase = model.FrozenInput
		frozen := total(t, s, w)
		perBlock := 2*e*T*h + 2*e*T*h + e*T*s.Heads*s.HeadDim + e*T*I
		want := L*perBlock + 2*e*T*h + 8*T
		require.Equal(t, gpumem.Bytes(want), base.Total()-frozen.Total(), "%v", dt)
		// The backward of silu(gate)·up on a frozen down_proj holds the
		// input's gradient (e·T·h) and one T·I tensor more.
		require.Equal(t, base.Backward+gpumem.Bytes(e*T*h+e*T*I), frozen.Backward, "%v", dt)
		// Nothing changes outside training.
		w.Train = false
		inf := total(t, s, w)
		w.FrozenBase = model.FrozenBase{}
		require.Equal(t, total(t, s, w), inf)
	}
}

// TestFrozenInputLlamaAutocast: under bf16 autocast over fp32 weights
// the residual stream stays fp32 and each of q/k/v and gate/up saves its
// own bf16 cast of the norm's output when trained; frozen, none of the
// five casts (5·2·T·h) is saved, nor the norms' fp32 normalized copies
// (2·4·T·h), o_proj's and down_proj's bf16 inputs; the final norm's fp32
// copy, the head's input and the ids go too.
func TestFrozenInputLlamaAutocast(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "llama-2-7b")
	const b, seq, e = 2, 256, 2
	T := int64(b * seq)
	h, I, L := s.Hidden, s.Intermediate, int64(s.Layers)
	w := model.Workload{Batch: b, SeqLen: seq, DType: gpumem.BF16, Autocast: true, Train: true, Attention: model.Eager}
	base := total(t, s, w)
	w.FrozenBase = model.FrozenInput
	frozen := total(t, s, w)
	perBlock := 5*e*T*h + 2*4*T*h + e*T*s.Heads*s.HeadDim + e*T*I
	want := L*perBlock + 4*T*h + e*T*h + 8*T
	require.Equal(t, gpumem.Bytes(want), base.Total()-frozen.Total())
}

// TestFrozenInputBERT: a post-norm block's q/k/v read its input and its
// MLP the first LayerNorm's output, neither saved with frozen weights
// (2·e·T·h), nor the attention output its dense reads under eager
// attention (e·T·h) nor the GELU output (e·T·I); the LayerNorms keep
// their inputs and statistics. The MLM transform's dense saves no input
// and its decoder not the LayerNorm's output (2·e·T·h). The job passes
// inputs_embeds instead of ids (8·T): the embeddings add positions and
// normalize, so the leaf is a resident tensor of its own (e·T·h).
func TestFrozenInputBERT(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "bert-base")
	const b, seq = 2, 128
	T := int64(b * seq)
	h, I, L := s.Hidden, s.Intermediate, int64(s.Layers)
	w := model.Workload{Batch: b, SeqLen: seq, DType: gpumem.FP32, Train: true, Attention: model.Eager}
	base := total(t, s, w)
	w.FrozenBase = model.FrozenInput
	frozen := total(t, s, w)
	const e = 4
	want := L*(2*e*T*h+e*T*h+e*T*I) + 2*e*T*h + 8*T - e*T*h
	require.Equal(t, gpumem.Bytes(want), base.Total()-frozen.Total())
	require.Equal(t, base.Embedding+gpumem.Bytes(e*T*h), frozen.Embedding)
}

// TestFrozenInputViT: the patch convolution saves its input (the pixel
// leaf) frozen or not (derivatives.yaml's convolution has one formula for
// input, weight and bias): the embedding's bytes do not change while the
// blocks save less.
func TestFrozenInputViT(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "vit-base")
	w := model.Workload{Batch: 4, DType: gpumem.FP32, Train: true, Attention: model.SDPA}
	base := total(t, s, w)
	w.FrozenBase = model.FrozenInput
	frozen := total(t, s, w)
	require.Equal(t, base.Embedding, frozen.Embedding)
	require.Positive(t, frozen.Embedding)
	require.Less(t, frozen.Layers[0].Saved, base.Layers[0].Saved)
}

// TestFrozenInputEncoderDecoder: the cross-attention's frozen k/v
// projections save no encoder output, T5's frozen relative-attention-bias
// lookups no bucket indices (Shared), and the decoder's first block, whose
// token embeddings need no gradient, saves less than the others.
func TestFrozenInputEncoderDecoder(t *testing.T) {
	t.Parallel()
	s := mustLookup(t, "t5-base")
	const b, seq = 2, 64
	w := model.Workload{Batch: b, SeqLen: seq, DType: gpumem.FP32, Train: true, Attention: model.Eager}
	base := total(t, s, w)
	w.FrozenBase = model.FrozenInput
	frozen := total(t, s, w)
	var dec model.LayerActivations
	for _, l := range frozen.Layers {
		if l.Part == "decoder" {
			dec = l
		}
	}
	require.Equal(t, "cross", dec.Kind)
	require.Less(t, dec.KeptTotal, dec.Kept*gpumem.Bytes(dec.Count))
	encLen, _ := s.EncoderInput(seq)
	require.Equal(t, base.Shared-frozen.Shared, gpumem.Bytes(4*b*encLen*s.Hidden+8*encLen*encLen+8*seq*seq))
	require.Zero(t, frozen.Shared)
	require.Less(t, frozen.Total(), base.Total())
}
