package model

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFromGGUFFlags checks that the reader sets the gated-MLP flag and the
// norm kind from llama.cpp's tensor names, which it left unset: a llama
// block (ffn_gate, attn_norm without a bias) is a gated MLP with RMSNorm,
// a gpt2 block (attn_norm with a bias, no ffn_gate) a plain MLP with
// LayerNorm, and a file without blocks keeps what InferSpec found.
func TestFromGGUFFlags(t *testing.T) {
	t.Parallel()
	f32 := func(name string, ne ...uint64) ggufTensor {
		n := uint64(4)
		for _, d := range ne {
			n *= d
		}
		return ggufTensor{name, ne, 0, int64(n)}
	}
	llama := writeGGUF(t, []ggufKV{{"general.architecture", "llama"}}, []ggufTensor{
		f32("token_embd.weight", 8, 16), f32("blk.0.attn_norm.weight", 8),
		f32("blk.0.ffn_gate.weight", 8, 32), f32("blk.0.ffn_up.weight", 8, 32), f32("blk.0.ffn_down.weight", 32, 8),
	}, 32)
	s, err := FromGGUF(bytes.NewReader(llama), int64(len(llama)))
	require.NoError(t, err)
	assert.True(t, s.Gated)
	assert.Equal(t, RMSNorm, s.Norm)

	moe := writeGGUF(t, []ggufKV{{"general.architecture", "qwen3moe"}}, []ggufTensor{
		f32("blk.0.attn_norm.weight", 8), f32("blk.0.ffn_gate_exps.weight", 8, 32, 4),
	}, 32)
	s, err = FromGGUF(bytes.NewReader(moe), int64(len(moe)))
	require.NoError(t, err)
	assert.True(t, s.Gated)
	assert.Equal(t, RMSNorm, s.Norm)

	gpt2 := writeGGUF(t, []ggufKV{{"general.architecture", "gpt2"}}, []ggufTensor{
		f32("blk.0.attn_norm.weight", 8), f32("blk.0.attn_norm.bias", 8),
		f32("blk.0.ffn_up.weight", 8, 32), f32("blk.0.ffn_down.weight", 32, 8),
	}, 32)
	s, err = FromGGUF(bytes.NewReader(gpt2), int64(len(gpt2)))
	require.NoError(t, err)
	assert.False(t, s.Gated)
	assert.Equal(t, LayerNorm, s.Norm)
}
