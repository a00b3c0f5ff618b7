package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestFrozenByModel: Whisper's encoder position table (1500 × d_model,
// a fixed sinusoid that WhisperEncoder freezes itself) never trains,
// even when every other tensor does or a predicate asks for it; its
// decoder's learned positions and other families' tables do train.
func TestFrozenByModel(t *testing.T) {
	s := mustLookup(t, "whisper-small")
	all, err := model.Finetune{Model: s}.Params(), model.Finetune{Model: s}.Validate()
	require.NoError(t, err)
	trainable, err := model.Finetune{Model: s}.TrainableParams(), model.Finetune{Model: s}.Validate()
	require.NoError(t, err)
	require.Equal(t, all-1500*768, trainable)
	forced, err := model.Finetune{Model: s, Train: model.TrainParts("encoder")}.Trainable()
	require.NoError(t, err)
	for _, tn := range forced {
		require.NotEqual(t, "model.encoder.embed_positions.weight", tn.Name)
	}
	require.True(t, s.FrozenByModel("model.encoder.embed_positions.weight"))
	require.False(t, s.FrozenByModel("model.decoder.embed_positions.weight"))
	require.False(t, mustLookup(t, "opt-125m").FrozenByModel("model.encoder.embed_positions.weight"))
}

// TestBufferBytes: StarCoder's 8192² bool causal mask (64 MiB) and BERT's
// two int64 rows of 512 positions (4 KiB each); Llama's rotary inv_freq
// is left out (a few hundred bytes).
func TestBufferBytes(t *testing.T) {
	require.Equal(t, gpumem.Bytes(8192*8192), mustLookup(t, "starcoder").BufferBytes())
	require.Equal(t, gpumem.Bytes(2*8*512), mustLookup(t, "bert-base").BufferBytes())
	require.Zero(t, mustLookup(t, "llama-2-7b").BufferBytes())
}

// TestTiedHead: an LM head tied to the embeddings ties; a classification
// head on the same model does not.
func TestTiedHead(t *testing.T) {
	s := mustLookup(t, "bert-base")
	require.True(t, s.TiedHead())
	s.Head = model.HeadSeqCls
	require.False(t, s.TiedHead())
	require.False(t, mustLookup(t, "llama-2-7b").TiedHead())
	require.True(t, mustLookup(t, "gpt2").TiedHead())
}
