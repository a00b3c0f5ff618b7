package budget

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOffloadActivationsTorchtune checks torchtune's activation
// offloading with full checkpointing on its README's job (Llama 3.2 3B,
// batch 2 × 4096 tokens, bf16): only the 28 block inputs move, each
// 2 × 4096 × 3072 bf16 = 50,331,648 B (48 MiB), into a pinned buffer
// rounded to 64 MiB = 67,108,864 B; the GPU keeps the forward stash of
// 5 inputs instead of 28.
func TestOffloadActivationsTorchtune(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-3b", nil)
	j := trainJob(m)
	j.Batch, j.SeqLen, j.Attention, j.Checkpointing = 2, 4096, model.Flash, model.FullCheckpointing
	on := j
	on.OffloadActivations = true
	a, err := Estimate(j)
	require.NoError(t, err)
	b, err := Estimate(on)
	require.NoError(t, err)
	const input = 2 * 4096 * 3072 * 2
	assert.Zero(t, a.Host)
	assert.Equal(t, gpumem.Bytes(28*67_108_864), b.Host)
	// Forward: 28 inputs saved without offloading, the 5 of the stash
	// with it.
	assert.Equal(t, gpumem.Bytes((28-5)*input), a.Phases[Forward]-b.Phases[Forward])
	assert.Less(t, b.Allocated(), a.Allocated())
	assert.Equal(t, b.Host, b.HostNode, "one GPU per node")
}

// TestOffloadActivationsSaveOnCPU: without checkpointing, torchtune's
// offloading moves every saved tensor of the blocks, as the
// model.OffloadActivations policy (save_on_cpu) does, and both report
// what moved as host memory.
func TestOffloadActivationsSaveOnCPU(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := trainJob(m)
	j.Checkpointing = model.OffloadActivations
	policy, err := Estimate(j)
	require.NoError(t, err)
	w := workload(&j, gpumem.BF16)
	acts, err := m.Spec().Activations(w)
	require.NoError(t, err)
	require.Positive(t, acts.Offloaded)
	assert.Equal(t, acts.Offloaded, policy.Host)

	j.Checkpointing, j.OffloadActivations = model.NoCheckpointing, true
	tt, err := Estimate(j)
	require.NoError(t, err)
	assert.Equal(t, policy, tt)
}

func TestOffloadActivationsInvalid(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	for _, c := range []struct {
		name string
		edit func(*Job)
		kind error
	}{
		{"inference", func(j *Job) { j.Mode, j.Optimizer = Prefill, nil }, gpumem.ErrInvalid},
		{"selective", func(j *Job) { j.Checkpointing = model.SelectiveCheckpointing }, gpumem.ErrInvalid},
		{"every-k", func(j *Job) { j.Checkpointing, j.CheckpointEvery = model.EveryKCheckpointing, 2 }, gpumem.ErrInvalid},
		{"pipeline", func(j *Job) { j.Parallel = Parallel{PipelineParallel: 2} }, gpumem.ErrUnsupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := trainJob(m)
			j.OffloadActivations = true
			c.edit(&j)
			_, err := Estimate(j)
			var fe *gpumem.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, "Job.OffloadActivations", fe.Field)
			assert.ErrorIs(t, err, c.kind)
		})
	}
}

func TestPow2Ceil(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]int64{1: 1, 2: 2, 3: 4, 1024: 1024, 1025: 2048, 50_331_648: 67_108_864, 1<<62 + 1: 1<<62 + 1} {
		assert.Equal(t, want, pow2Ceil(n), "%d", n)
	}
}
