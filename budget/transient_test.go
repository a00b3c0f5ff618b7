package budget_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// TestBlockTransientComponent: a convolutional backbone's largest block
// transient (the backward's gradients of the block's largest map and of
// its input) is the "transient" component, never "attention"; Swin's,
// whose blocks run windowed attention, is "attention" as a transformer's
// is. Either way the component counts toward the allocated peak.
func TestBlockTransientComponent(t *testing.T) {
	sgd, ok := optimizer.Lookup("sgd")
	require.True(t, ok)
	for _, c := range []struct {
		name string
		conv bool
	}{{"resnet50", true}, {"resnet18", true}, {"convnext_tiny", true}, {"efficientnet_b0", true}, {"swin_t", false}} {
		s, ok := model.Lookup(c.name)
		require.True(t, ok, c.name)
		m, err := budget.NewModel(model.Finetune{Model: s})
		require.NoError(t, err, c.name)
		j := budget.Job{Model: m, Mode: budget.Training, Batch: 8, SeqLen: 1, Precision: budget.FP32, Optimizer: sgd, Attention: model.Eager}
		b, err := budget.Estimate(j)
		require.NoError(t, err, c.name)
		a, err := s.Activations(model.Workload{Batch: 8, SeqLen: int64(j.SeqLen), Train: true, DType: gpumem.FP32, Attention: model.Eager})
		require.NoError(t, err, c.name)
		require.Positive(t, a.Backward, c.name)
		if c.conv {
			assert.Zero(t, b.Attention, c.name)
			assert.Positive(t, b.Transient, c.name)
		} else {
			assert.Zero(t, b.Transient, c.name)
			assert.Positive(t, b.Attention, c.name)
		}
		comps := map[string]gpumem.Bytes{}
		var sum gpumem.Bytes
		for _, x := range b.Components() {
			comps[x.Name] = x.Bytes
			if x.Name != "fragmentation" && x.Name != "context" && x.Name != "paged_optimizer" {
				sum += x.Bytes
			}
		}
		assert.Equal(t, b.Transient, comps["transient"], c.name)
		assert.Equal(t, b.Allocated(), sum, "%s: the transient counts toward the allocated peak", c.name)
	}
}
