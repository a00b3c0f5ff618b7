package budget

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestVLLMCaptureSizes: vLLM's default capture list. With max_num_seqs 256
// and max_num_batched_tokens 8192 it captures 51 PIECEWISE and 35 FULL
// graphs, the counts its progress bars print (vllm-project/vllm PR #46389's
// log: "(mixed prefill-decode, PIECEWISE): 51/51", "(decode, FULL): 35").
func TestVLLMCaptureSizes(t *testing.T) {
	g, err := VLLMCaptureSizes(256, 8192, 0)
	require.NoError(t, err)
	assert.Equal(t, 51, g.Piecewise)
	assert.Equal(t, 35, g.Full)
	assert.Equal(t, []int{1, 2, 4, 8, 16}, g.Sizes[:5])
	assert.Equal(t, 248, g.Sizes[33])
	assert.Equal(t, 256, g.Sizes[34])
	assert.Equal(t, 512, g.Sizes[len(g.Sizes)-1])

	// max_num_seqs 16: sizes up to 32, FULL up to 16.
	g, err = VLLMCaptureSizes(16, 8192, 0)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 4, 8, 16, 24, 32}, g.Sizes)
	assert.Equal(t, 5, g.Full)

	// Four speculative tokens: decode batches of 5 tokens a sequence;
	// max_num_seqs 16 gives sizes up to 160 and FULL graphs from 5 to 80.
	g, err = VLLMCaptureSizes(16, 8192, 4)
	require.NoError(t, err)
	assert.Equal(t, 160, g.Sizes[len(g.Sizes)-1])
	assert.Equal(t, 10, g.Full) // 8, 16, …, 80

	// max_num_batched_tokens caps the list.
	g, err = VLLMCaptureSizes(256, 100, 0)
	require.NoError(t, err)
	assert.Equal(t, 96, g.Sizes[len(g.Sizes)-1])
	assert.Equal(t, g.Piecewise, g.Full)

	for _, c := range []struct {
		seqs, tokens, spec int
		field              string
	}{{-1, 0, 0, "Job.VLLM.MaxNumSeqs"}, {0, -1, 0, "Job.VLLM.MaxNumBatchedTokens"}, {0, 0, -1, "num_speculative_tokens"}} {
		_, err := VLLMCaptureSizes(c.seqs, c.tokens, c.spec)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%+v", c)
		assert.Equal(t, c.field, fe.Field)
	}
}

// TestVLLMGraphEstimate: profile_cudagraph_memory's sum. The larger first
// capture counts once (the modes share the pool); each further graph costs
// its mode's second sample, at least 1 MiB.
func TestVLLMGraphEstimate(t *testing.T) {
	g, err := VLLMCaptureSizes(256, 8192, 0)
	require.NoError(t, err)
	est, err := g.Estimate(VLLMGraphSamples{PiecewiseFirst: 300 << 20, PiecewiseNext: 4 << 20, FullFirst: 200 << 20, FullNext: 0})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(300<<20+50*(4<<20)+34*(1<<20)), est)

	// No FULL graphs: only the PIECEWISE samples count.
	g.Full = 0
	est, err = g.Estimate(VLLMGraphSamples{PiecewiseFirst: 100 << 20, PiecewiseNext: 2 << 20, FullFirst: 1 << 30})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(100<<20+50*(2<<20)), est)

	_, err = g.Estimate(VLLMGraphSamples{PiecewiseNext: -1})
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "VLLMGraphSamples.PiecewiseNext", fe.Field)
	_, err = g.Estimate(VLLMGraphSamples{PiecewiseNext: 1 << 62})
	require.Error(t, err)
}
