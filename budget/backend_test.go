package budget

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem/model"
)

// TestBackendJob: Job.Backend reaches the activation model. A
// grouped-query training step without checkpointing (transformers passes
// no mask: use_cache is on) runs the CPU's SDPA math kernel and peaks
// higher than on CUDA; under full checkpointing (use_cache off, a mask)
// the CPU runs its flash kernel and, without dropout, the estimates
// agree to the byte.
func TestBackendJob(t *testing.T) {
	t.Parallel()
	j := trainJob(lookupModel(t, "llama-3-8b", nil))
	j.Precision, j.Batch, j.SeqLen = FP32, 1, 512
	cuda, err := Estimate(j)
	require.NoError(t, err)
	j.Backend = model.CPU
	cpu, err := Estimate(j)
	require.NoError(t, err)
	require.Greater(t, cpu.Phases[Forward], cuda.Phases[Forward])
	require.GreaterOrEqual(t, cpu.Phases[Backward], cuda.Phases[Backward])

	j.Checkpointing, j.Backend = model.FullCheckpointing, model.CUDA
	cuda, err = Estimate(j)
	require.NoError(t, err)
	j.Backend = model.CPU
	cpu, err = Estimate(j)
	require.NoError(t, err)
	require.Equal(t, cuda, cpu)
}

// TestBackendRefused: an unknown backend, and CPU jobs no CPU kernel runs
// as modelled, are refused naming Job.Backend.
func TestBackendRefused(t *testing.T) {
	t.Parallel()
	base := trainJob(lookupModel(t, "llama-3-8b", nil))
	for name, f := range map[string]func(*Job){
		"unknown": func(j *Job) { j.Backend = 7 },
		"flash":   func(j *Job) { j.Backend, j.Attention = model.CPU, model.Flash },
		"llamacpp": func(j *Job) {
			j.Backend, j.Runtime, j.Mode, j.Optimizer, j.Attention = model.CPU, LlamaCpp, Prefill, nil, model.Eager
		},
	} {
		j := base
		f(&j)
		_, err := Estimate(j)
		require.ErrorContains(t, err, "Job.Backend", name)
	}
}
