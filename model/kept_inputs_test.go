package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestKeptInputs: the inputs bitsandbytes < 0.43.2 keeps per token, by
// storage, for Llama-2-7B, and the settings it refuses.
func TestKeptInputs(t *testing.T) {
	s, ok := Lookup("llama-2-7b")
	require.True(t, ok)
	f := Finetune{Model: s, Quant: gpumem.NF4, Unfused: true, KeepsInputs: true, LoRA: LoRA{Rank: 8}}
	_, _, err := f.Runs()
	require.NoError(t, err)
	// Per block: the attention input 4096, the output projection's input
	// 32·128, the MLP input 4096 and down_proj's input 11008: 23,296;
	// 32 blocks: 745,472.
	require.Equal(t, int64(745_472), f.KeptInputs())
	f.QuantizeHead = true // Llama-2's head is untied: its input too
	require.Equal(t, int64(745_472+4096), f.KeptInputs())
	f.KeepsInputs = false
	require.Zero(t, f.KeptInputs())

	falcon, err := FromHFConfig(strings.NewReader(`{"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
		"num_attention_heads": 71, "vocab_size": 65024, "multi_query": true, "parallel_attn": true, "bias": false}`))
	require.NoError(t, err)
	for _, c := range []struct {
		f     Finetune
		field string
	}{
		{Finetune{Model: s, Quant: gpumem.NF4, KeepsInputs: true, LoRA: LoRA{Rank: 8}}, "Finetune.KeepsInputs"},
		{Finetune{Model: falcon, Quant: gpumem.NF4, Unfused: true, KeepsInputs: true, LoRA: LoRA{Rank: 8}}, "Finetune.KeepsInputs"},
		{Finetune{Model: s, QuantFrom: gpumem.FP16}, "Finetune.QuantFrom"},
		{Finetune{Model: s, Quant: gpumem.INT8, QuantFrom: gpumem.FP16}, "Finetune.QuantFrom"},
		{Finetune{Model: s, Quant: gpumem.NF4, QuantFrom: gpumem.INT8, LoRA: LoRA{Rank: 8}}, "Finetune.QuantFrom"},
	} {
		_, _, err := c.f.Runs()
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		require.Equal(t, c.field, fe.Field)
	}
}
