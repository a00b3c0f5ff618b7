package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestOPTAttention checks OPT's eager attention core against the op
// sequence of OPTAttention in transformers from v4.20 to its move to
// eager_attention_forward (modeling_opt.py, read as of v4.45): bmm(q, kᵀ), + causal mask, torch.max(·, finfo.min) (saves its
// input), softmax upcast to fp32 and cast back only for fp16 scores, bmm
// with v; and OPTForCausalLM's own CrossEntropyLoss on the logits as they
// are (no fp32 upcast before v4.46).
//
// Config: batch 2, seq 8, hidden 64, 4 heads of 16, vocab 100.
// P = b·H·s² = 2·4·8·8 = 512 probabilities per layer.
//
//	fp16: fp32 softmax 4·P + cast copy 2·P + clamp input 2·P = 8·512 = 4096
//	bf16: softmax 2·P (no upcast) + clamp input 2·P           = 4·512 = 2048
//	fp32: softmax 4·P + clamp input 4·P                        = 8·512 = 4096
//	SDPA: fp32 log-sum-exp 4·b·H·ceil32(s) = 4·2·4·32          = 1024
//
// Head (fp16, T = 16 tokens): head input 2·16·64 = 2048, log-softmax in
// fp16 2·16·100 = 3200, the 0-dim total weight 4: 5252; loss gradient
// 2·2·16·100 = 6400; no fp32 logits.
func TestOPTAttention(t *testing.T) {
	s := model.Spec{Family: "opt", DType: gpumem.FP16, Layers: 2, Hidden: 64, Heads: 4, KVHeads: 4, HeadDim: 16,
		Intermediate: 256, Vocab: 100, Positions: 10, MaxPositions: 8, Norm: model.LayerNorm, TiedEmbeddings: true}
	require.NoError(t, s.Validate())
	w := model.Workload{Batch: 2, SeqLen: 8, Train: true}
	core := func(d gpumem.DType, k model.Attention) (attn, saved gpumem.Bytes) {
		w := w
		w.DType, w.Attention = d, k
		a, err := s.Activations(w)
		require.NoError(t, err)
		require.Len(t, a.Layers, 1)
		return a.Layers[0].Attention, a.Layers[0].Saved
	}
	fp16, savedEager := core(gpumem.FP16, model.Eager)
	require.Equal(t, gpumem.Bytes(4096), fp16)
	bf16, _ := core(gpumem.BF16, model.Eager)
	require.Equal(t, gpumem.Bytes(2048), bf16)
	fp32, _ := core(gpumem.FP32, model.Eager)
	require.Equal(t, gpumem.Bytes(4096), fp32)
	lse, savedSDPA := core(gpumem.FP16, model.SDPA)
	require.Equal(t, gpumem.Bytes(1024), lse)
	// q, k, v and the output are the same for both kernels.
	require.Equal(t, gpumem.Bytes(4096-1024), savedEager-savedSDPA)

	// Under full checkpointing with eager attention the reentrant
	// checkpoint saves the [b, 1, s, s] fp16 mask: 2·2·8·8 = 256.
	ck := w
	ck.DType, ck.Checkpointing = gpumem.FP16, model.FullCheckpointing
	a, err := s.Activations(ck)
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(256), a.Shared)
	ck.Attention = model.SDPA
	a, err = s.Activations(ck)
	require.NoError(t, err)
	require.Zero(t, a.Shared)

	w.DType = gpumem.FP16
	a, err = s.Activations(w)
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(5252), a.Head)
	require.Equal(t, gpumem.Bytes(6400), a.LossGrad)
	require.Zero(t, a.LogitsFP32)
	require.Equal(t, gpumem.Bytes(2*16*100), a.Logits)
}

// TestOPTDropout: with dropout on, OPT saves the two residual branches'
// 1-byte masks (config.dropout 0.1) and nothing more in the attention
// core: attention_dropout is 0.0 (OPTConfig's default, unset in every
// facebook/opt config), so the probabilities keep their size. Batch 2,
// seq 8, hidden 64: T·h = 1024 bytes of mask per branch.
func TestOPTDropout(t *testing.T) {
	s := model.Spec{Family: "opt", DType: gpumem.FP16, Layers: 2, Hidden: 64, Heads: 4, KVHeads: 4, HeadDim: 16,
		Intermediate: 256, Vocab: 100, Positions: 10, MaxPositions: 8, Norm: model.LayerNorm, TiedEmbeddings: true}
	w := model.Workload{Batch: 2, SeqLen: 8, Train: true, DType: gpumem.FP16}
	off, err := s.Activations(w)
	require.NoError(t, err)
	w.Dropout = true
	on, err := s.Activations(w)
	require.NoError(t, err)
	require.Equal(t, off.Layers[0].Attention, on.Layers[0].Attention)
	require.Equal(t, off.Layers[0].Saved+2*2*8*64, on.Layers[0].Saved)
}
