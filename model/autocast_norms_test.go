package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestAutocastResidualStream: a Llama block under bf16 autocast over fp32
// weights saves each RMSNorm's normalized tensor in fp32 (4·T·h where a
// bf16 pass saves its 2·T·h cast) and one bf16 cast of each norm's output
// per linear that reads it (q, k, v: three; gate, up: two) where a bf16
// pass saves one: 2 + 2·2 + 2 + 2 = 10 bytes per token and hidden unit a
// block, and the final norm's 2 more. GPT-2's fused c_attn reads ln_1's
// output once: its LayerNorms save their fp32 input (2 more each), 4 a
// block, the final norm 2. BERT's post-norm block (autocastPostSaved)
// saves three bf16 casts of its fp32 input where a bf16 pass saves the
// input once (4 more), and its two LayerNorms' fp32 inputs (2 more each):
// 8 a block; its head transform reads the last block's output as before.
func TestAutocastResidualStream(t *testing.T) {
	t.Parallel()
	const b, seq = 2, 128
	T := int64(b * seq)
	for _, c := range []struct {
		name           string
		block, outside int64 // bytes per token and hidden unit
	}{
		{"llama-2-7b", 10, 2},
		{"gpt2", 4, 2},
		{"bert-base", 8, 0},
	} {
		s := mustLookup(t, c.name)
		w := model.Workload{Batch: b, SeqLen: seq, DType: gpumem.BF16, Train: true, Attention: model.SDPA}
		pure := total(t, s, w)
		w.Autocast = true
		amp := total(t, s, w)
		want := (int64(s.Layers)*c.block + c.outside) * T * s.Hidden
		require.Equal(t, gpumem.Bytes(want), amp.LayersTotal()+amp.FinalNorm-pure.LayersTotal()-pure.FinalNorm, c.name)
	}
}
