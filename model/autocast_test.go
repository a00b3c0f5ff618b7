package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestAutocastCrossEntropy: BERT's masked-LM loss (a plain
// CrossEntropyLoss) under torch.autocast computes an fp32 log-softmax of
// its 16-bit logits (log_softmax is fp32_set_opt_dtype on CUDA): 4 bytes
// per logit saved instead of 2, a loss gradient of 8 bytes per logit
// instead of 4, and for bf16 the fp32 copy that log_softmax(x,
// dtype=float32) converts first (4 per logit, a transient); fp16 logits
// are read directly, and their gradient comes back in fp16 (4 + 2 bytes
// per logit at the loss backward). Pure 16-bit training keeps everything
// in 16 bits.
// bert-base, batch 2 × 128: T·V = 256 · 30,522.
func TestAutocastCrossEntropy(t *testing.T) {
	s := mustLookup(t, "bert-base")
	TV := gpumem.Bytes(256 * s.Vocab)
	run := func(dt gpumem.DType, amp bool) model.Activations {
		a, err := s.Activations(model.Workload{Batch: 2, SeqLen: 128, DType: dt, Train: true, Autocast: amp})
		require.NoError(t, err)
		return a
	}
	pure, amp, half := run(gpumem.BF16, false), run(gpumem.BF16, true), run(gpumem.FP16, true)
	require.Zero(t, pure.LogitsFP32)
	require.Equal(t, 4*TV, pure.LossGrad)
	require.Equal(t, pure.Head+2*TV, amp.Head)
	require.Equal(t, 8*TV, amp.LossGrad)
	require.Equal(t, 4*TV, amp.LogitsFP32)
	require.Equal(t, amp.Head, half.Head)
	require.Zero(t, half.LogitsFP32)
	require.Equal(t, 6*TV, half.LossGrad)
	// A causal LM upcasts in its own loss either way.
	l := mustLookup(t, "llama-2-7b")
	for _, on := range []bool{false, true} {
		a, err := l.Activations(model.Workload{Batch: 1, SeqLen: 64, DType: gpumem.BF16, Train: true, Autocast: on})
		require.NoError(t, err)
		require.Equal(t, gpumem.Bytes(4*64*l.Vocab), a.LogitsFP32)
	}
}

// TestEvalLabels: a pass without gradients given labels (evaluation)
// makes the loss's transients beside the logits: for a causal LM in bf16
// the fp32 upcast and the fp32 log-softmax (8 bytes per logit), in fp32
// the log-softmax alone (the upcast is the logits themselves); BERT's
// CrossEntropyLoss a bf16 log-softmax (2). Without labels, none.
func TestEvalLabels(t *testing.T) {
	for _, c := range []struct {
		name string
		dt   gpumem.DType
		per  int64
	}{{"llama-2-7b", gpumem.BF16, 8}, {"llama-2-7b", gpumem.FP32, 4}, {"bert-base", gpumem.BF16, 2}} {
		s := mustLookup(t, c.name)
		w := model.Workload{Batch: 2, SeqLen: 64, DType: c.dt, Labels: true}
		a, err := s.Activations(w)
		require.NoError(t, err)
		require.Equal(t, gpumem.Bytes(c.per*128*s.Vocab), a.LogitsFP32, "%s %v", c.name, c.dt)
		require.Zero(t, a.LayersTotal())
		w.Labels = false
		a, err = s.Activations(w)
		require.NoError(t, err)
		require.Zero(t, a.LogitsFP32)
	}
}
