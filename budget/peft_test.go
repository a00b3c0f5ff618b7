package budget

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestPEFTLoRA: a LoRA job's activations are by default (Job.LoRACode
// FrozenBaseLoRA) those of a frozen base (model.FrozenBase): fewer bytes
// than a trained base's, which LitGPTLoRA keeps, the difference being
// exactly what the activation model drops for the adapted projections;
// the code changes nothing for a model without adapters, or with a
// trained base tensor besides them.
func TestPEFTLoRA(t *testing.T) {
	lora := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 8} })
	j := trainJob(lora)
	require.Equal(t, FrozenBaseLoRA, j.LoRACode)
	peft, err := Estimate(j)
	require.NoError(t, err)
	j.LoRACode = LitGPTLoRA
	base, err := Estimate(j)
	require.NoError(t, err)
	j.LoRACode = FrozenBaseLoRA
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
	hj := trainJob(head)
	a0, err := Estimate(hj)
	require.NoError(t, err)
	hj.LoRACode = LitGPTLoRA
	a1, err := Estimate(hj)
	require.NoError(t, err)
	require.Equal(t, a0, a1)
	// No adapters at all.
	full := trainJob(lookupModel(t, "llama-3.2-1b", nil))
	a, err := Estimate(full)
	require.NoError(t, err)
	full.LoRACode = LitGPTLoRA
	b, err := Estimate(full)
	require.NoError(t, err)
	require.Equal(t, a, b)
}

// TestLoRACode: ParseLoRACode reads the names the CLI and the request
// take, String writes the one it reads back, and a value out of range is
// an error naming Job.LoRACode.
func TestLoRACode(t *testing.T) {
	for s, want := range map[string]LoRACode{"": FrozenBaseLoRA, "peft": FrozenBaseLoRA,
		"torchtune": FrozenBaseLoRA, "transformers": FrozenBaseLoRA, "litgpt": LitGPTLoRA, "lit-gpt": LitGPTLoRA} {
		c, err := ParseLoRACode(s)
		require.NoError(t, err, s)
		require.Equal(t, want, c, s)
		back, err := ParseLoRACode(c.String())
		require.NoError(t, err)
		require.Equal(t, c, back)
	}
	_, err := ParseLoRACode("axolotl")
	require.ErrorContains(t, err, "lora_code")
	require.ErrorContains(t, err, "axolotl")
	j := trainJob(lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 8} }))
	j.LoRACode = LitGPTLoRA + 1
	_, err = Estimate(j)
	require.ErrorContains(t, err, "Job.LoRACode")
	require.Equal(t, "LoRACode(2)", j.LoRACode.String())
}

// TestLoRADropout: Job.LoRADropout above zero adds what the adapters'
// dropout saves on the frozen base (model.FrozenBase.Dropout), and
// nothing to a trained base's activations (LitGPTLoRA); a value outside
// [0, 1) is an error naming Job.LoRADropout.
func TestLoRADropout(t *testing.T) {
	lora := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 8} })
	j := trainJob(lora)
	plain, err := Estimate(j)
	require.NoError(t, err)
	j.LoRADropout = 0.05
	drop, err := Estimate(j)
	require.NoError(t, err)
	require.Greater(t, drop.Activations, plain.Activations)
	w := workload(&j, gpumem.BF16)
	require.True(t, w.FrozenBase.Dropout)
	j.LoRACode = LitGPTLoRA
	a, err := Estimate(j)
	require.NoError(t, err)
	j.LoRADropout = 0
	b, err := Estimate(j)
	require.NoError(t, err)
	require.Equal(t, b, a)
	for _, p := range []float64{-0.1, 1, math.NaN()} {
		j.LoRADropout = p
		_, err = Estimate(j)
		require.ErrorContains(t, err, "Job.LoRADropout", "%v", p)
	}
}
