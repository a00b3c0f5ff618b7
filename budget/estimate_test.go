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

func lookupModel(t testing.TB, name string, f func(*model.Finetune)) Model {
	t.Helper()
	s, ok := model.Lookup(name)
	if !ok {
		t.Fatalf("model.Lookup(%q) failed", name)
	}
	ft := model.Finetune{Model: s}
	if f != nil {
		f(&ft)
	}
	m, err := NewModel(ft)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func trainJob(m Model) Job {
	return Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Attention: model.SDPA, Batch: 2, SeqLen: 1024}
}

// TestEstimateClosedForm checks the persistent terms against the ZeRO
// paper's mixed-precision Adam accounting (Rajbhandari et al. 2020, §3.1):
// 2Ψ weights + 2Ψ gradients + 12Ψ master and states, with PyTorch's
// 4-byte step per tensor and the allocator's 512-byte rounding.
func TestEstimateClosedForm(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-2-7b", nil)
	j := trainJob(m)
	j.Precision = BF16Master
	j.Optimizer = optimizer.AdamW{Impl: optimizer.Fused}
	b, err := Estimate(j)
	require.NoError(t, err)
	psi, _ := m.Params()
	require.Equal(t, int64(6_738_415_616), psi)
	// Rounding adds less than 512 bytes per tensor.
	slack := gpumem.Bytes(512 * m.tensors)
	assert.InDelta(t, float64(2*psi), float64(b.Weights), float64(slack))
	assert.InDelta(t, float64(4*psi), float64(b.Master), float64(slack))
	assert.InDelta(t, float64(8*psi+4*m.tensors), float64(b.Optimizer), float64(slack))
	assert.Equal(t, componentSum(b), b.Device())
}

func TestEstimateMonotone(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	for _, mode := range []Mode{Training, Prefill, Generation} {
		prev := gpumem.Bytes(0)
		for _, batch := range []int{1, 2, 3, 8, 16} {
			for _, seq := range []int{16, 512, 1000, 2048} {
				j := trainJob(m)
				j.Mode, j.Batch, j.SeqLen = mode, batch, seq
				if mode == Generation {
					j.Generate = 16
				}
				b, err := Estimate(j)
				require.NoError(t, err)
				_ = prev
				bigger := j
				bigger.SeqLen++
				b2, err := Estimate(bigger)
				require.NoError(t, err)
				assert.GreaterOrEqual(t, b2.Allocated(), b.Allocated(), "%v batch %d seq %d→%d", mode, batch, seq, seq+1)
				bigger = j
				bigger.Batch++
				b3, err := Estimate(bigger)
				require.NoError(t, err)
				assert.GreaterOrEqual(t, b3.Allocated(), b.Allocated(), "%v batch %d→%d seq %d", mode, batch, batch+1, seq)
			}
		}
	}
}

func TestEstimateCheckpointingAndKernels(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := trainJob(m)
	j.SeqLen = 4096
	j.Attention = model.Eager
	eager, err := Estimate(j)
	require.NoError(t, err)
	j.Attention = model.Flash
	flash, err := Estimate(j)
	require.NoError(t, err)
	assert.Less(t, flash.Allocated(), eager.Allocated(), "flash below eager at 4096 tokens")
	j.Checkpointing = model.FullCheckpointing
	full, err := Estimate(j)
	require.NoError(t, err)
	assert.LessOrEqual(t, full.Allocated(), flash.Allocated(), "checkpointing never increases the peak")
}

func TestEstimateLoRA(t *testing.T) {
	t.Parallel()
	full := lookupModel(t, "llama-2-7b", nil)
	lora := lookupModel(t, "llama-2-7b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 16} })
	qlora := lookupModel(t, "llama-2-7b", func(f *model.Finetune) {
		f.LoRA = model.LoRA{Rank: 16}
		f.Quant = gpumem.NF4
		f.Blockwise = gpumem.Blockwise{Nested: true}
	})
	var peaks []gpumem.Bytes
	for _, m := range []Model{full, lora, qlora} {
		b, err := Estimate(trainJob(m))
		require.NoError(t, err)
		peaks = append(peaks, b.Allocated())
		_, trainable := m.Params()
		if m.tensors == full.tensors {
			continue
		}
		assert.Less(t, trainable, int64(100_000_000), "LoRA trains only the adapters")
	}
	assert.Less(t, peaks[1], peaks[0])
	assert.Less(t, peaks[2], peaks[1])
}

func TestEstimateGradAccumKeepsGradients(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := trainJob(m)
	j.Batch, j.SeqLen = 16, 2048
	one, err := Estimate(j)
	require.NoError(t, err)
	j.GradAccum = 4
	acc, err := Estimate(j)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, acc.Allocated(), one.Allocated())
	assert.Positive(t, acc.Gradients)
}

func TestEstimateInvalid(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "gpt2", nil)
	tests := []struct {
		name  string
		edit  func(*Job)
		field string
	}{
		{"zero model", func(j *Job) { j.Model = Model{} }, "Job.Model"},
		{"mode", func(j *Job) { j.Mode = 0 }, "Job.Mode"},
		{"precision", func(j *Job) { j.Precision = 99 }, "Job.Precision"},
		{"batch", func(j *Job) { j.Batch = 0 }, "Job.Batch"},
		{"seq", func(j *Job) { j.SeqLen = -4 }, "Job.SeqLen"},
		{"optimizer", func(j *Job) { j.Optimizer = nil }, "Job.Optimizer"},
		{"accum", func(j *Job) { j.GradAccum = -1 }, "Job.GradAccum"},
		{"generate", func(j *Job) { j.Mode = Generation }, "Job.Generate"},
		{"huge", func(j *Job) { j.Batch, j.SeqLen = 1<<30, 1<<20 }, "Job.Batch"},
		{"buffer", func(j *Job) { j.Buffers = []Buffer{{Name: "cache", Entries: -1}} }, "Job.Buffers[0].Entries"},
		{"attention", func(j *Job) { j.Attention = 9 }, "Job.Attention"},
	}
	for _, tc := range tests {
		j := trainJob(m)
		tc.edit(&j)
		_, err := Estimate(j)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%s: Estimate error = %v, want a *FieldError", tc.name, err)
		assert.Equal(t, tc.field, fe.Field, tc.name)
		assert.True(t, errors.Is(err, gpumem.ErrInvalid) || errors.Is(err, gpumem.ErrRange), tc.name)
	}
}

func TestEstimateCopiesAndBuffers(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "gpt2", nil)
	j := trainJob(m)
	base, err := Estimate(j)
	require.NoError(t, err)
	j.Copies = []Copy{{Name: "reference", Model: m}}
	j.Buffers = []Buffer{{Name: "cached_Z", Entries: 2000, EntryBytes: 4 * 768, Elastic: true}}
	b, err := Estimate(j)
	require.NoError(t, err)
	w, err := m.weights(gpumem.BF16, false)
	require.NoError(t, err)
	assert.Equal(t, w, b.ExtraModels, "a frozen copy holds weights only")
	// The job's buffer beside GPT-2's own registered causal masks
	// (model.Spec.BufferBytes: 12 layers of 1,024² bytes and a scalar).
	assert.Equal(t, gpumem.Bytes(12*(1024*1024+512)), base.Buffers)
	assert.Equal(t, base.Buffers+2000*4*768, b.Buffers)
	assert.Equal(t, base.Allocated()+w+2000*4*768, b.Allocated())
}

// TestDefaultFragmentation checks the provisional default against the
// recorded (allocated, reserved) pairs: it must not be below what they
// show after loading.
func TestDefaultFragmentation(t *testing.T) {
	rows := loadPublished(t)
	for _, id := range []string{"tt-llama2-7b-lora-init", "tt-llama32-3b-lora-init"} {
		a, r := rows[id+"-alloc"], rows[id+"-reserved"]
		require.NotZero(t, a.Value, id)
		frac := float64(r.Value)/float64(a.Value) - 1
		assert.GreaterOrEqual(t, DefaultFragmentation, frac, id)
	}
}

func FuzzEstimate(f *testing.F) {
	s, _ := model.Lookup("gpt2")
	m, err := ModelOf(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(1), uint8(6), 4, 512, 0, 0, uint8(0), uint8(0))
	f.Add(uint8(3), uint8(1), 1, 1, 10, 2, uint8(2), uint8(1))
	f.Fuzz(func(t *testing.T, mode, prec uint8, batch, seq, gen, accum int, attn, ckpt uint8) {
		j := Job{Model: m, Mode: Mode(mode), Precision: Precision(prec), Optimizer: optimizer.AdamW{}, Batch: batch,
			SeqLen: seq, Generate: gen, GradAccum: accum, Attention: model.Attention(attn), Checkpointing: model.Checkpointing(ckpt)}
		fuzzEstimate(t, j)
	})
}

func BenchmarkEstimate(b *testing.B) {
	m := lookupModel(b, "llama-2-70b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{}, Attention: model.Flash,
		Batch: 1, SeqLen: 4096, Checkpointing: model.FullCheckpointing}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Estimate(j); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEstimateMuonByName checks that grouping keeps the names optimizers
// decide by: Muon keeps its AdamW state (two moments) for the embedding
// and the head and one momentum buffer for the 2-D layer weights, so its
// state equals optimizer.Total over the whole inventory.
func TestEstimateMuonByName(t *testing.T) {
	t.Parallel()
	s, ok := model.Lookup("llama-3.2-1b")
	require.True(t, ok)
	m, err := ModelOf(s)
	require.NoError(t, err)
	j := trainJob(m)
	j.Precision = FP32
	j.Optimizer = optimizer.Muon{}
	b, err := Estimate(j)
	require.NoError(t, err)
	ts := s.Tensors()
	for i := range ts {
		ts[i].DType = gpumem.FP32
	}
	want, err := optimizer.Total(optimizer.Muon{}, ts)
	require.NoError(t, err)
	got, _, _ := (&accumulator{}).optimizer(&j, nil, gpumem.FP32)
	assert.Equal(t, want, got)
	assert.GreaterOrEqual(t, b.Optimizer, want)
}

// TestEstimateOptimizerMatchesInventory checks the grouped optimizer
// figures against the optimizer package run on the model's own
// inventory, for foreach AdamW (whose step temporaries are a sum).
func TestEstimateOptimizerMatchesInventory(t *testing.T) {
	t.Parallel()
	s, ok := model.Lookup("qwen2.5-0.5b")
	require.True(t, ok)
	m, err := ModelOf(s)
	require.NoError(t, err)
	j := trainJob(m)
	j.Optimizer = optimizer.AdamW{}
	ts := s.Tensors()
	for i := range ts {
		ts[i].DType = gpumem.BF16
	}
	wantState, err := optimizer.Total(j.Optimizer, ts)
	require.NoError(t, err)
	wantStep, err := j.Optimizer.Transient(ts)
	require.NoError(t, err)
	state, step, _ := (&accumulator{}).optimizer(&j, nil, gpumem.BF16)
	assert.Equal(t, wantState, state)
	assert.Equal(t, wantStep, step)
}

// fuzzEstimate estimates j for a fuzz target: an error must name a field
// (ok false), and a breakdown must have consistent totals.
func fuzzEstimate(t *testing.T, j Job) (Breakdown, bool) {
	t.Helper()
	b, err := Estimate(j)
	if err != nil {
		var fe *gpumem.FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("Estimate error %v names no field", err)
		}
		return b, false
	}
	if b.Allocated() <= 0 || b.Device() < b.Allocated() || b.Required() > b.Device() || b.Host < 0 {
		t.Fatalf("Estimate = %+v: inconsistent totals", b)
	}
	return b, true
}
