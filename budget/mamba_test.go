package budget

import (
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMambaGeneration checks that a Mamba model's generation holds its
// MambaCache states, not a KV cache growing with the sequence.
func TestMambaGeneration(t *testing.T) {
	t.Parallel()
	s, ok := model.Lookup("mamba-130m")
	require.True(t, ok)
	m, err := ModelOf(s)
	require.NoError(t, err)
	state, err := s.MambaState(8, gpumem.BF16)
	require.NoError(t, err)
	for _, seq := range []int{16, 4096} {
		b, err := Estimate(Job{Model: m, Mode: Generation, Precision: BF16, Batch: 8, SeqLen: seq, Generate: 64})
		require.NoError(t, err)
		assert.Equal(t, state, b.KVCache, "seq %d", seq)
	}
}
