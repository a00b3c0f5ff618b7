package budget

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestEstimateLoss: a Llama-3-8B full fine-tune (bf16, AdamW, flash,
// batch 2 × 4096, no checkpointing) whose loop keeps the logits peaks at
// the full loss's backward, logits plus their fp32 gradients (10 bytes
// per logit); under the Trainer, which drops the output before backward,
// the same moment holds the fp32 gradients alone (8 bytes per logit);
// each other loss lowers the peak by about that share.
func TestEstimateLoss(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3-8b", nil)
	j := trainJob(m)
	j.Attention, j.Batch, j.SeqLen = model.Flash, 2, 4096
	const TV = 8192 * 128256
	trainer, err := Estimate(j)
	require.NoError(t, err)
	require.Equal(t, Backward, trainer.Phase)
	require.Equal(t, gpumem.Bytes(8*TV), trainer.Logits)
	j.KeepLogits = true
	full, err := Estimate(j)
	require.NoError(t, err)
	require.Equal(t, Backward, full.Phase)
	require.Equal(t, gpumem.Bytes(10*TV), full.Logits)
	assert.Equal(t, trainer.Allocated()+2*TV, full.Allocated())
	j.KeepLogits = false

	// Chunked (8): the peak is the loss forward, the bf16 logits and one
	// chunk's fp32 upcast (TV/2) on 7 more 4-byte total weights: 8·TV −
	// TV/2 − 28 bytes lower.
	j.Loss = model.Loss{Kind: model.ChunkedLoss, Chunks: 8}
	ch, err := Estimate(j)
	require.NoError(t, err)
	assert.Equal(t, Forward, ch.Phase)
	assert.Equal(t, gpumem.Bytes(2*TV+TV/2), ch.Logits)
	assert.Equal(t, full.Allocated()-gpumem.Bytes(8*TV-TV/2-28), ch.Allocated())

	for _, l := range []model.Loss{{Kind: model.FusedLinearLoss}, {Kind: model.CutCrossEntropyLoss}} {
		j.Loss = l
		b, err := Estimate(j)
		require.NoError(t, err, "%v", l)
		saved := full.Allocated() - b.Allocated()
		assert.Greater(t, saved, full.Logits*3/4, "%v saves %v", l, saved)
		assert.Less(t, saved, full.Logits+4*TV, "%v saves %v", l, saved)
		assert.Less(t, b.Logits, full.Logits/2, "%v", l)
	}
	// Liger keeps the head's bf16 weight gradient (V·h·2) from forward:
	// a LoRA job, whose head is frozen, does not.
	j.Loss = model.Loss{Kind: model.FusedLinearLoss}
	a, err := activations(&j, gpumem.BF16)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(2*128256*4096), a.headGrad)
	j.Model = lookupModel(t, "llama-3-8b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 16} })
	a, err = activations(&j, gpumem.BF16)
	require.NoError(t, err)
	assert.Zero(t, a.headGrad)
}

// TestEstimateLossAllocs: Estimate stays allocation-free with a loss set.
func TestEstimateLossAllocs(t *testing.T) {
	j := trainJob(lookupModel(t, "llama-3-8b", nil))
	for _, l := range []model.Loss{{Kind: model.ChunkedLoss, Chunks: 8}, {Kind: model.FusedLinearLoss}, {Kind: model.CutCrossEntropyLoss}} {
		j.Loss = l
		assert.Zero(t, testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }), "%v", l)
	}
	j = Job{Model: j.Model, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 512, LogitsToKeep: 1}
	assert.Zero(t, testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }))
}

// TestHeadGrad: the dtype of the head weight's gradient the fused losses
// allocate: the weights' dtype when the head (or the embedding tied to
// it) is trained, none for a frozen head or the full loss.
func TestHeadGrad(t *testing.T) {
	t.Parallel()
	lora := func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 8} }
	for _, tc := range []struct {
		model string
		ft    func(*model.Finetune)
		prec  Precision
		loss  model.Loss
		want  gpumem.DType
	}{
		{"llama-3-8b", nil, BF16, model.Loss{Kind: model.FusedLinearLoss}, gpumem.BF16},
		{"llama-3-8b", nil, BF16Mixed, model.Loss{Kind: model.FusedLinearLoss}, gpumem.FP32},
		{"llama-3-8b", nil, BF16, model.Loss{}, gpumem.Invalid},
		{"llama-3-8b", lora, BF16, model.Loss{Kind: model.CutCrossEntropyLoss}, gpumem.Invalid},
		{"llama-3.2-1b", nil, BF16, model.Loss{Kind: model.CutCrossEntropyLoss}, gpumem.BF16}, // tied to the embedding
		{"llama-3.2-1b", lora, BF16, model.Loss{Kind: model.CutCrossEntropyLoss}, gpumem.Invalid},
	} {
		j := trainJob(lookupModel(t, tc.model, tc.ft))
		j.Precision, j.Loss = tc.prec, tc.loss
		assert.Equal(t, tc.want, j.headGrad(), "%s %v %v", tc.model, tc.prec, tc.loss)
	}
}

// TestEstimateLossPipeline: under pipeline parallelism the loss lives on
// the last stage; the first stage's estimate ignores it.
func TestEstimateLossPipeline(t *testing.T) {
	t.Parallel()
	j := trainJob(lookupModel(t, "llama-3-8b", nil))
	j.GradAccum, j.Parallel = 8, Parallel{PipelineParallel: 4}
	full, err := Estimate(j)
	require.NoError(t, err)
	j.Loss = model.Loss{Kind: model.FusedLinearLoss}
	li, err := Estimate(j)
	require.NoError(t, err)
	require.LessOrEqual(t, li.Allocated(), full.Allocated())
}

// TestEstimateLogitsToKeep: a Prefill job keeping the last position
// holds B·V logits, as a Generation job's prompt pass does.
func TestEstimateLogitsToKeep(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3-8b", nil)
	j := Job{Model: m, Mode: Prefill, Precision: BF16, Attention: model.Flash, Batch: 8, SeqLen: 8192}
	all, err := Estimate(j)
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(2*8*8192*128256), all.Logits)
	j.LogitsToKeep = 1
	one, err := Estimate(j)
	require.NoError(t, err)
	// The peak moves to the blocks' transient once the logits are small.
	assert.Less(t, one.Allocated(), all.Allocated())
	assert.Zero(t, one.Logits)
	a, err := activations(&j, gpumem.BF16)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(2*8*128256), a.logits)
}

// TestLossErrors: each bad loss or logits_to_keep names the Job field.
func TestLossErrors(t *testing.T) {
	t.Parallel()
	llama := lookupModel(t, "llama-3-8b", nil)
	bert := lookupModel(t, "bert-base-uncased", nil)
	for _, tc := range []struct {
		name  string
		edit  func(*Job)
		field string
		kind  error
	}{
		{"chunks 0", func(j *Job) { j.Loss = model.Loss{Kind: model.ChunkedLoss} }, "Job.Loss.Chunks", gpumem.ErrInvalid},
		{"chunks -4", func(j *Job) { j.Loss = model.Loss{Kind: model.ChunkedLoss, Chunks: -4} }, "Job.Loss.Chunks", gpumem.ErrInvalid},
		{"chunks on cce", func(j *Job) { j.Loss = model.Loss{Kind: model.CutCrossEntropyLoss, Chunks: 2} }, "Job.Loss.Chunks", gpumem.ErrInvalid},
		{"kind", func(j *Job) { j.Loss = model.Loss{Kind: 7} }, "Job.Loss", gpumem.ErrInvalid},
		{"prefill", func(j *Job) {
			j.Mode, j.Optimizer, j.Loss = Prefill, nil, model.Loss{Kind: model.FusedLinearLoss}
		}, "Job.Loss", gpumem.ErrInvalid},
		{"bert", func(j *Job) { j.Model, j.Loss = bert, model.Loss{Kind: model.FusedLinearLoss} }, "Job.Loss", gpumem.ErrUnsupported},
		{"tensor parallel", func(j *Job) {
			j.Parallel, j.Loss = Parallel{TensorParallel: 2}, model.Loss{Kind: model.FusedLinearLoss}
		}, "Job.Loss", gpumem.ErrUnsupported},
		{"keep negative", func(j *Job) { j.Mode, j.Optimizer, j.LogitsToKeep = Prefill, nil, -1 }, "Job.LogitsToKeep", gpumem.ErrInvalid},
		{"keep training", func(j *Job) { j.LogitsToKeep = 1 }, "Job.LogitsToKeep", gpumem.ErrInvalid},
		{"keep generation", func(j *Job) { j.Mode, j.Optimizer, j.Generate, j.LogitsToKeep = Generation, nil, 4, 1 }, "Job.LogitsToKeep", gpumem.ErrInvalid},
		{"keep bert", func(j *Job) { j.Model, j.Mode, j.Optimizer, j.LogitsToKeep = bert, Prefill, nil, 1 }, "Job.LogitsToKeep", gpumem.ErrUnsupported},
	} {
		j := trainJob(llama)
		tc.edit(&j)
		_, err := Estimate(j)
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe, tc.name)
		assert.Equal(t, tc.field, fe.Field, "%s: %v", tc.name, err)
		assert.True(t, errors.Is(err, tc.kind), "%s: %v", tc.name, err)
	}
}

// TestAllocateLoss: a fused loss is a rung of the ladder, tried before
// checkpointing (it recomputes nothing), skipped for a model without a
// causal LM head; an invalid one is refused naming its index.
func TestAllocateLoss(t *testing.T) {
	t.Parallel()
	j := trainJob(lookupModel(t, "llama-3-8b", nil))
	j.Attention, j.Batch, j.SeqLen = model.Flash, 4, 4096
	lim := &Limits{MinBatch: 4, MaxBatch: 4, Losses: []model.Loss{{Kind: model.FusedLinearLoss}}}
	dev := gpumem.Bytes(170 << 30) // the job as given needs 179.82 GiB, with liger 155.42
	p, err := Allocate(dev, j, lim)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(p.Ladder), 2)
	assert.Equal(t, "loss → liger", p.Ladder[1].Change)
	assert.Equal(t, CostNone, p.Ladder[1].Cost.Kind)
	assert.Equal(t, model.FusedLinearLoss, p.Job.Loss.Kind)
	assert.Contains(t, p.String(), ", liger loss")
	bert := trainJob(lookupModel(t, "bert-base-uncased", nil))
	bert.SeqLen = 512
	p, err = Allocate(dev, bert, lim)
	require.NoError(t, err)
	assert.Equal(t, model.FullLoss, p.Job.Loss.Kind)
	_, err = Allocate(dev, j, &Limits{Losses: []model.Loss{{}, {Kind: model.ChunkedLoss}}})
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "Limits.Losses[1]", fe.Field)
}
