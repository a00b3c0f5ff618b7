package budget

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestPEFTLoRA: Job.PEFTLoRA estimates a LoRA job's activations on a
// frozen base (model.FrozenBase): fewer bytes than a trained base's, the
// difference being exactly what the activation model drops for the
// adapted projections; it changes nothing for a model without adapters,
// or with a trained base tensor besides them, or for a pass without a
// graph.
func TestPEFTLoRA(t *testing.T) {
	lora := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 8} })
	j := trainJob(lora)
	base, err := Estimate(j)
	require.NoError(t, err)
	j.PEFTLoRA = true
	peft, err := Estimate(j)
	require.NoError(t, err)
	require.Less(t, peft.Activations, base.Activations)
	s := lora.Spec()
	w := workload(&j, gpumem.BF16)
	on, err := s.Activations(w)
	require.NoError(t, err)
	w.FrozenBase = model.FrozenBase{}
	off, err := s.Activations(w)
	require.NoError(t, err)
	require.Equal(t, off.Total()-on.Total(), base.Activations-peft.Activations)
	require.Equal(t, model.FrozenBase{Rank: 8, Adapted: model.ProjQ | model.ProjV}, lora.frozen)

	// A trained head besides the adapters: the base is not frozen.
	head := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) {
		f.LoRA = model.LoRA{Rank: 8}
		f.Train = model.TrainParts("head")
	})
	require.Zero(t, head.frozen)
	// No adapters at all.
	full := trainJob(lookupModel(t, "llama-3.2-1b", nil))
	a, err := Estimate(full)
	require.NoError(t, err)
	full.PEFTLoRA = true
	b, err := Estimate(full)
	require.NoError(t, err)
	require.Equal(t, a, b)
}
