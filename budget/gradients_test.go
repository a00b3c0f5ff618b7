package budget

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// llama-3.2-1b: 1,235,814,400 parameters in 146 tensors (16 blocks of 9,
// the tied embedding, the final norm).
const (
	l32Params  = 1_235_814_400
	l32Tensors = 146
)

// llama-2-7b: 6,738,415,616 parameters in 291 tensors; its largest are
// the untied embedding and lm_head, 32000 × 4096 = 131,072,000 elements.
const (
	l27Params  = 6_738_415_616
	l27Tensors = 291
	l27Head    = 32000 * 4096
)

// inBwdJob is llama-2-7b in pure bf16 (torchtune's dtype: bf16), batch 1
// × 512 tokens: short enough that the logits (32000 × 512) do not
// dominate the backward pass.
func inBwdJob(t testing.TB) Job {
	m := lookupModel(t, "llama-2-7b", nil)
	total, trainable := m.Params()
	require.Equal(t, int64(l27Params), total)
	require.Equal(t, total, trainable)
	require.Equal(t, int64(l27Tensors), m.trainableTensors)
	j := trainJob(m)
	j.Batch, j.SeqLen = 1, 512
	return j
}

// TestOptimizerInBackward checks torchtune's optimizer_in_bwd: the
// state of every per-parameter optimizer, and on top of the backward
// pass one gradient and one parameter's step temporaries, never the full
// gradient set and no step phase. With llama-2-7b the peak is the
// lm_head's step right after the loss backward, every block's
// activations still saved.
func TestOptimizerInBackward(t *testing.T) {
	t.Parallel()
	// AdamW in pure bf16: exp_avg and exp_avg_sq in bf16, 2 + 2 bytes
	// per parameter, and a 4-byte fp32 step per tensor (on the CPU):
	// 4 × 6,738,415,616 + 4 × 291 = 26,953,663,628 B.
	const state = 4*l27Params + 4*l27Tensors
	// lm_head's bf16 gradient, 2 × 131,072,000 = 262,144,000 B (a
	// multiple of 512).
	const grad = 2 * l27Head
	for _, c := range []struct {
		impl optimizer.Impl
		step gpumem.Bytes // one tensor's step temporaries
	}{
		// foreach over a one-tensor list: _foreach_sqrt(exp_avg_sqs),
		// one bf16 moment of lm_head, 262,144,000 B.
		{optimizer.Foreach, 2 * l27Head},
		// for-loop: the sqrt and the quotient of denom, two moments.
		{optimizer.ForLoop, 4 * l27Head},
		// fused: none.
		{optimizer.Fused, 0},
	} {
		t.Run(c.impl.String(), func(t *testing.T) {
			j := inBwdJob(t)
			j.Optimizer = optimizer.AdamW{Impl: c.impl}
			j.OptimizerInBackward = true
			b, err := Estimate(j)
			require.NoError(t, err)
			require.Equal(t, Backward, b.Phase)
			assert.Equal(t, gpumem.Bytes(grad), b.Gradients)
			assert.Equal(t, state+c.step, b.Optimizer)
			assert.Zero(t, b.Phases[Step], "no separate step phase")

			// The same pass with no parameter gradient peaks at the loss
			// backward, every block's activations saved beside the
			// logits and their gradient; the step of lm_head replaces
			// the logits' part. Its frozen weights save less
			// (model.FrozenInput): the activations are swapped too.
			in := j
			in.Optimizer, in.Gradients, in.OptimizerInBackward = nil, InputGradients, false
			x, err := Estimate(in)
			require.NoError(t, err)
			require.Equal(t, Backward, x.Phase)
			assert.Less(t, x.Activations, b.Activations)
			assert.Equal(t, x.Allocated()-x.Activations-x.Logits-x.Attention+b.Activations+state+grad+c.step, b.Allocated())

			// The usual job holds every gradient, 2 × 6,738,415,616 B
			// before rounding, at the end of backward and in the step,
			// where optimizer_in_bwd holds one: 9.4 GiB less here, the
			// saved activations (2.9 GiB) coming on top of lm_head's
			// step instead.
			j.OptimizerInBackward = false
			a, err := Estimate(j)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, a.Gradients, gpumem.Bytes(2*l27Params))
			assert.Greater(t, a.Allocated()-b.Allocated(), 9*gpumem.GiB)
		})
	}
}

// TestOptimizerInBackwardTied: a tied embedding is one parameter used
// twice, so autograd sums the head's and the embedding's contributions
// before its AccumulateGrad node runs, at the end of backward; the
// head's contribution is held from the head's backward on, beside each
// block's gradient.
func TestOptimizerInBackwardTied(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	total, _ := m.Params()
	require.Equal(t, int64(l32Params), total)
	j := trainJob(m)
	j.Batch, j.SeqLen, j.Checkpointing = 1, 256, model.FullCheckpointing
	j.Optimizer = optimizer.AdamW{Impl: optimizer.Fused}
	j.OptimizerInBackward = true
	b, err := Estimate(j)
	require.NoError(t, err)
	require.Equal(t, Backward, b.Phase)
	// 4 × 1,235,814,400 + 4 × 146 = 4,943,258,184 B of state; fused, no
	// step temporaries.
	assert.Equal(t, gpumem.Bytes(4*l32Params+4*l32Tensors), b.Optimizer)
	// The held embedding gradient, 2 × 128256 × 2048 = 525,336,576 B,
	// and one block's largest, the MLP's 8192 × 2048 in bf16,
	// 33,554,432 B.
	assert.Equal(t, gpumem.Bytes(2*128256*2048+2*8192*2048), b.Gradients)
}

// TestOptimizerInBackwardSharedState: bitsandbytes keeps its
// quantization maps per optimizer, and optimizer_in_bwd makes one
// optimizer per parameter, so the maps are kept once per tensor.
func TestOptimizerInBackwardSharedState(t *testing.T) {
	t.Parallel()
	j := inBwdJob(t)
	opt := optimizer.AdamW8bit{Paged: true}
	j.Optimizer = opt
	j.OptimizerInBackward = true
	b, err := Estimate(j)
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(2*l27Head), b.Gradients, "the peak is lm_head's step")
	var want, paged gpumem.Bytes
	runs, _ := j.Model.stepped(gpumem.BF16)
	for _, r := range runs {
		s, err := opt.State(r.Tensor)
		require.NoError(t, err)
		sh, err := opt.SharedBytes([]gpumem.Tensor{r.Tensor})
		require.NoError(t, err)
		require.Positive(t, sh)
		want += (s + sh) * gpumem.Bytes(r.Count)
		m, err := opt.ManagedState(r.Tensor)
		require.NoError(t, err)
		paged += m * gpumem.Bytes(r.Count)
	}
	step, err := opt.Transient([]gpumem.Tensor{{Name: "lm_head.weight", Shape: []int64{32000, 4096}, DType: gpumem.BF16}})
	require.NoError(t, err)
	// The paged state1 and state2 are out of the allocator's levels.
	require.Positive(t, paged)
	assert.Equal(t, paged, b.Paged)
	assert.Equal(t, want+step-paged, b.Optimizer)
}

// TestGradientsKnob: NoStep keeps the gradients without state or step;
// InputGradients equals the frozen model the whisper-attack example
// builds by hand, and saves less than NoStep.
func TestGradientsKnob(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	a, err := Estimate(trainJob(m))
	require.NoError(t, err)

	j := trainJob(m)
	j.Optimizer, j.Gradients = nil, NoStep
	ns, err := Estimate(j)
	require.NoError(t, err)
	assert.Zero(t, ns.Phases[Step])
	assert.NotEqual(t, Step, ns.Phase)
	assert.Zero(t, ns.Optimizer)
	// Backward alone: the same moments less the AdamW state,
	// 4,943,258,184 B.
	assert.Equal(t, a.Phases[Backward]-(4*l32Params+4*l32Tensors), ns.Phases[Backward])
	assert.Equal(t, a.Phases[Forward]-(4*l32Params+4*l32Tensors), ns.Phases[Forward])

	j.Gradients = InputGradients
	in, err := Estimate(j)
	require.NoError(t, err)
	frozen := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.Train = func(gpumem.Tensor) bool { return false } })
	byHand := trainJob(frozen)
	byHand.Optimizer = nil
	want, err := Estimate(byHand)
	require.NoError(t, err)
	assert.Equal(t, want, in)
	assert.Zero(t, in.Gradients)
	assert.Zero(t, in.Optimizer)
	// The weights and what backward to the input needs: the gradients
	// of the usual job, 2 × 1,235,814,400 B plus rounding, are gone, and
	// the frozen weights' ops save no input (model.FrozenInput): at the
	// loss backward, where both peak before any parameter gradient
	// exists, the activations alone differ.
	assert.Less(t, in.Activations, ns.Activations)
	assert.Equal(t, ns.Phases[Backward]-in.Phases[Backward], ns.Gradients+ns.Activations-in.Activations)
}

func TestGradientsInvalid(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	lora := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 8} })
	frozen := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.Train = func(gpumem.Tensor) bool { return false } })
	for _, c := range []struct {
		name  string
		edit  func(*Job)
		field string
		kind  error
	}{
		{"unknown", func(j *Job) { j.Gradients = 9 }, "Job.Gradients", gpumem.ErrInvalid},
		{"no-step with optimizer", func(j *Job) { j.Gradients = NoStep }, "Job.Optimizer", gpumem.ErrInvalid},
		{"input with optimizer", func(j *Job) { j.Gradients = InputGradients }, "Job.Optimizer", gpumem.ErrInvalid},
		{"no-step of a frozen model", func(j *Job) { j.Model, j.Optimizer, j.Gradients = frozen, nil, NoStep }, "Job.Gradients", gpumem.ErrInvalid},
		{"inference gradients", func(j *Job) { j.Mode, j.Optimizer, j.Gradients = Prefill, nil, InputGradients }, "Job.Gradients", gpumem.ErrInvalid},
		{"inference in-bwd", func(j *Job) { j.Mode, j.Optimizer, j.OptimizerInBackward = Prefill, nil, true }, "Job.OptimizerInBackward", gpumem.ErrInvalid},
		{"in-bwd accumulation", func(j *Job) { j.OptimizerInBackward, j.GradAccum = true, 4 }, "Job.OptimizerInBackward", gpumem.ErrInvalid},
		{"in-bwd no step", func(j *Job) { j.OptimizerInBackward, j.Optimizer, j.Gradients = true, nil, NoStep }, "Job.OptimizerInBackward", gpumem.ErrInvalid},
		{"in-bwd frozen", func(j *Job) { j.OptimizerInBackward, j.Model, j.Optimizer = true, frozen, nil }, "Job.OptimizerInBackward", gpumem.ErrInvalid},
		{"in-bwd offload", func(j *Job) { j.OptimizerInBackward, j.Offload = true, OffloadOptimizer }, "Job.OptimizerInBackward", gpumem.ErrInvalid},
		{"in-bwd ddp", func(j *Job) { j.OptimizerInBackward, j.Parallel = true, Parallel{DataParallel: 2} }, "Job.OptimizerInBackward", gpumem.ErrUnsupported},
		{"optimizer missing", func(j *Job) { j.Model, j.Optimizer = lora, nil }, "Job.Optimizer", gpumem.ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := trainJob(m)
			c.edit(&j)
			_, err := Estimate(j)
			require.Error(t, err)
			var fe *gpumem.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, c.field, fe.Field, "%v", err)
			assert.ErrorIs(t, err, c.kind)
		})
	}
}

// TestOptimizerInBackwardAllocs: the per-parameter figures come from the
// prepared inventory, so Estimate stays allocation-free.
func TestOptimizerInBackwardAllocs(t *testing.T) {
	j := inBwdJob(t)
	for _, o := range []optimizer.Optimizer{optimizer.AdamW{}, optimizer.AdamW8bit{Paged: true},
		optimizer.SGD{Momentum: 0.9, Nesterov: true, Impl: optimizer.ForLoop}} {
		j.Optimizer, j.OptimizerInBackward = o, true
		if n := testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }); n != 0 {
			t.Errorf("%s in backward: %v allocations per Estimate", o, n)
		}
	}
	j.Optimizer, j.Gradients, j.OptimizerInBackward = nil, InputGradients, false
	j.Checkpointing, j.OffloadActivations = model.FullCheckpointing, true
	if _, err := Estimate(j); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }); n != 0 {
		t.Errorf("input gradients, offloaded activations: %v allocations per Estimate", n)
	}
}

// FuzzEstimateGradients: any combination of the gradient, step and
// offloading knobs gives a consistent breakdown or an error naming a
// field, never a panic.
func FuzzEstimateGradients(f *testing.F) {
	s, _ := model.Lookup("gpt2")
	m, err := ModelOf(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), true, false, uint8(0), uint8(0), 2, 512, 1, uint8(0))
	f.Add(uint8(2), false, true, uint8(1), uint8(3), 1, 64, 4, uint8(1))
	opts := []optimizer.Optimizer{nil, optimizer.AdamW{}, optimizer.AdamW{Impl: optimizer.ForLoop}, optimizer.AdamW8bit{},
		optimizer.SGD{Momentum: 0.9, Nesterov: true, Impl: optimizer.ForLoop}, optimizer.Adafactor{}}
	f.Fuzz(func(t *testing.T, grads uint8, inBwd, offload bool, ckpt, opt uint8, batch, seq, accum int, mode uint8) {
		j := Job{Model: m, Mode: Mode(mode % 4), Precision: BF16, Gradients: Gradients(grads), OptimizerInBackward: inBwd,
			OffloadActivations: offload, Checkpointing: model.Checkpointing(ckpt), Optimizer: opts[int(opt)%len(opts)],
			Batch: batch, SeqLen: seq, GradAccum: accum}
		b, ok := fuzzEstimate(t, j)
		if !ok {
			return
		}
		if inBwd && b.Phases[Step] != 0 {
			t.Fatalf("a step in backward has a step phase: %+v", b)
		}
	})
}
