package budget

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestKVCacheEncoderDecoder checks the two caches of an encoder–decoder's
// generation (transformers' EncoderDecoderCache): per decoder layer, K
// and V of the decoded tokens and of the encoder's output.
func TestKVCacheEncoderDecoder(t *testing.T) {
	t.Parallel()
	gen := func(name string, batch, seq, generate int) gpumem.Bytes {
		s, ok := model.Lookup(name)
		require.True(t, ok, name)
		b, err := Estimate(Job{Model: mustModel(t, s), Mode: Generation, Precision: BF16, Attention: model.SDPA,
			Batch: batch, SeqLen: seq, Generate: generate})
		require.NoError(t, err, name)
		return b.KVCache
	}
	// t5-base: 12 decoder layers of 12 heads × 64 (d_kv). The encoder
	// reads the 512-token prompt; the decoder starts from one token and
	// generates 128: 129 self-attention positions, 512 cross-attention.
	perToken := gpumem.Bytes(12 * 2 * 12 * 64 * 2) // layers × (K, V) × heads × head dim × bf16
	require.Equal(t, 4*(129+512)*perToken, gen("t5-base", 4, 512, 128))
	// whisper-small: 12 decoder layers of 12 heads × 64. The encoder's
	// 1500 positions (30 s of audio) are cached whatever the prompt; the
	// decoder's 4-token prompt and 100 new tokens are 104 positions.
	require.Equal(t, 2*(104+1500)*perToken, gen("whisper-small", 2, 4, 100))
	// A decoder-only model keeps one cache of prompt and new tokens.
	gpt2 := gpumem.Bytes(12 * 2 * 12 * 64 * 2)
	require.Equal(t, 3*(100+28)*gpt2, gen("gpt2", 3, 100, 28))
}

// TestKVCacheEncoderDecoderAllocs checks that the encoder–decoder
// generation path keeps Estimate allocation-free.
func TestKVCacheEncoderDecoderAllocs(t *testing.T) {
	s, ok := model.Lookup("whisper-small")
	require.True(t, ok)
	j := Job{Model: mustModel(t, s), Mode: Generation, Precision: BF16, Attention: model.SDPA, Batch: 2, SeqLen: 4, Generate: 100}
	_, err := Estimate(j)
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = Estimate(j) }))
}
