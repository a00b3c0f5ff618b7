package budget_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// TestEstimateBackbones: a vision backbone's training job estimates
// through the same path as a transformer's, allocation-free, with the
// activations the model package derives (ResNet-50, fp32, batch 32: the
// saved maps alone are 2.56 GiB) and a recompute cost under full
// checkpointing.
func TestEstimateBackbones(t *testing.T) {
	sgd, ok := optimizer.Lookup("sgd")
	require.True(t, ok)
	for _, name := range []string{"resnet50", "resnet18", "convnext_tiny", "swin_t"} {
		s, ok := model.Lookup(name)
		require.True(t, ok, name)
		m, err := budget.NewModel(model.Finetune{Model: s})
		require.NoError(t, err, name)
		j := budget.Job{Model: m, Mode: budget.Training, Batch: 32, SeqLen: 1, Precision: budget.FP32, Optimizer: sgd}
		b, err := budget.Estimate(j)
		require.NoError(t, err, name)
		a, err := s.Activations(model.Workload{Batch: 32, Train: true, DType: gpumem.FP32})
		require.NoError(t, err, name)
		require.GreaterOrEqual(t, b.Activations+b.Attention+b.Transient, a.LayersTotal(), name)
		if n := testing.AllocsPerRun(20, func() { _, _ = budget.Estimate(j) }); n != 0 {
			t.Errorf("%s: Estimate allocates %v times, want 0", name, n)
		}
		w := model.Workload{Batch: 32, Train: true, DType: gpumem.FP32, Checkpointing: model.FullCheckpointing}
		full, err := s.Activations(w)
		require.NoError(t, err, name)
		require.InDelta(t, 1.0, full.Recompute, 0.1, name)
		require.Less(t, full.LayersTotal(), a.LayersTotal()/2, name)
	}
}

// TestBackbonePipelineRefused: pipeline stages assume a stack of identical
// blocks; a backbone's stages differ, so a pipeline layout is refused,
// naming the field.
func TestBackbonePipelineRefused(t *testing.T) {
	s, _ := model.Lookup("resnet50")
	m, err := budget.NewModel(model.Finetune{Model: s})
	require.NoError(t, err)
	sgd, _ := optimizer.Lookup("sgd")
	j := budget.Job{Model: m, Mode: budget.Training, Batch: 32, SeqLen: 1, Precision: budget.FP32, Optimizer: sgd,
		GradAccum: 4, Parallel: budget.Parallel{PipelineParallel: 2}}
	_, err = budget.Estimate(j)
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Job.Parallel.PipelineParallel", fe.Field)
}
