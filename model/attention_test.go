package model_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestParseAttention: the names users type parse to the kernels, every
// kernel's String parses back to itself, and anything else is an
// ErrInvalid naming the attention field and the value.
func TestParseAttention(t *testing.T) {
	for in, want := range map[string]model.Attention{
		"eager": model.Eager, "sdpa": model.SDPA, "": model.SDPA, "flash": model.Flash, "flash_attention_2": model.Flash,
	} {
		got, err := model.ParseAttention(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, k := range []model.Attention{model.Eager, model.SDPA, model.Flash} {
		got, err := model.ParseAttention(k.String())
		require.NoError(t, err, k.String())
		assert.Equal(t, k, got)
	}
	for _, in := range []string{"ring", "Eager", "flash_attention_3", " sdpa"} {
		_, err := model.ParseAttention(in)
		require.ErrorIs(t, err, gpumem.ErrInvalid, in)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), in)
		assert.Equal(t, "attention", fe.Field, in)
		assert.Contains(t, err.Error(), in)
	}
}
