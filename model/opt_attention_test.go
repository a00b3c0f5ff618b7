package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestOPTAttention checks OPT's eager attention core against
// eager_attention_forward of modeling_opt.py at transformers v4.57.1
// (commit 8cb5963c): matmul(q, kᵀ) * 1.0 + the float causal mask,
// softmax(dtype=torch.float32).to(query.dtype) in every dtype, dropout,
// matmul with v (the torch.max clamp of v4.20–v4.45, which saved the masked
// scores, is gone); and OPTForCausalLM's loss, ForCausalLMLoss
// (loss/loss_utils.py), which upcasts the logits to fp32.
//
// Config: batch 2, seq 8, hidden 64, 4 heads of 16, vocab 100.
// P = b·H·s² = 2·4·8·8 = 512 probabilities per layer.
//
//	fp16: fp32 softmax 4·P + cast copy 2·P = 6·512 = 3072
//	bf16: fp32 softmax 4·P + cast copy 2·P = 6·512 = 3072
//	fp32: softmax 4·P                      = 4·512 = 2048
//	SDPA: fp32 log-sum-exp 4·b·H·ceil32(s) = 4·2·4·32 = 1024
//
// Head (fp16, T = 16 tokens): head input 2·16·64 = 2048, fp32 log-softmax
// 4·16·100 = 6400, the 0-dim total weight 4: 8452; loss gradient
// 2·4·16·100 = 12800; the fp32 logits 4·16·100 = 6400.
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
	require.Equal(t, gpumem.Bytes(3072), fp16)
	bf16, _ := core(gpumem.BF16, model.Eager)
	require.Equal(t, gpumem.Bytes(3072), bf16)
	fp32, _ := core(gpumem.FP32, model.Eager)
	require.Equal(t, gpumem.Bytes(2048), fp32)
	lse, savedSDPA := core(gpumem.FP16, model.SDPA)
	require.Equal(t, gpumem.Bytes(1024), lse)
	// q, k, v and the output are the same for both kernels.
	require.Equal(t, gpumem.Bytes(3072-1024), savedEager-savedSDPA)

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
	require.Equal(t, gpumem.Bytes(8452), a.Head)
	require.Equal(t, gpumem.Bytes(12800), a.LossGrad)
	require.Equal(t, gpumem.Bytes(6400), a.LogitsFP32)
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
