package budget

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// TestZeROModelStates: the ZeRO paper's per-GPU model states (Table 1,
// K = 12) for Ψ = 7.5B on N_d = 64: stage 0 16Ψ = 120e9 bytes; stage 1
// 4Ψ + 12Ψ/64 = 30e9 + 1.40625e9 = 31.40625e9; stage 2 2Ψ + 14Ψ/64 =
// 15e9 + 1.640625e9 = 16.640625e9; stage 3 16Ψ/64 = 1.875e9 (the
// table's 120 GB, 31.4 GB, 16.6 GB, 1.88 GB).
func TestZeROModelStates(t *testing.T) {
	want := []gpumem.Bytes{120e9, 31_406_250_000, 16_640_625_000, 1_875_000_000}
	for stage, w := range want {
		got, err := ZeROModelStates(7_500_000_000, Parallel{DataParallel: 64, Stage: stage})
		if err != nil || got != w {
			t.Errorf("stage %d: %d, %v; want %d", stage, got, err, w)
		}
	}
	if _, err := ZeROModelStates(0, Parallel{}); err == nil {
		t.Error("zero params accepted")
	}
}

// TestLargestModelZeROTable2 reproduces the "Max Theoretical Model Size"
// of the ZeRO paper's Table 2 (Rajbhandari et al. 2020, arXiv:1910.02054
// v3): 32 GB V100s (32e9 bytes; 128B × 16 / 64 = 32e9 exactly), mixed
// precision Adam (16Ψ bytes of model states), model states only, as the
// table counts them. Row "MP 1, 64 GPUs": Baseline 2B, P_os 7.6B,
// P_os+g 14.4B, P_os+g+p 128B; row "MP 16, 1024 GPUs" (N_d = 64):
// P_os+g+p 2T. The answer is a concrete GPT-3-style shape, so its count
// is at most the bound and within 3% below it.
func TestLargestModelZeROTable2(t *testing.T) {
	fleet := Fleet{Nodes: 8, GPUsPerNode: 8, Free: 32e9}
	big := Fleet{Nodes: 64, GPUsPerNode: 16, Free: 32e9}
	cases := []struct {
		name  string
		f     Fleet
		par   Parallel
		bound float64 // Ψ with 32e9 = states(Ψ)
	}{
		{"baseline 2B", fleet, Parallel{DataParallel: 64}, 32e9 / 16},
		{"P_os 7.6B", fleet, Parallel{DataParallel: 64, Stage: 1}, 32e9 / (4 + 12.0/64)},
		{"P_os+g 14.4B", fleet, Parallel{DataParallel: 64, Stage: 2}, 32e9 / (2 + 14.0/64)},
		{"P_os+g+p 128B", fleet, Parallel{DataParallel: 64, Stage: 3}, 128e9},
		{"MP16 P_os+g+p 2T", big, Parallel{DataParallel: 64, Stage: 3, TensorParallel: 16, GPUsPerNode: 16}, 2048e9},
	}
	for _, c := range cases {
		job := Job{Mode: Training, Precision: FP16Master, Optimizer: optimizer.Adam{}, Batch: 1, SeqLen: 1, Parallel: c.par}
		s, p, err := LargestModel(c.f, job, LargestOptions{Fixed: true, ModelStatesOnly: true})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		n := float64(s.Params())
		if n > c.bound || n < 0.97*c.bound {
			t.Errorf("%s: %d×%d = %.4g params, want ≤ %.4g and within 3%%", c.name, s.Layers, s.Hidden, n, c.bound)
		}
		if p.Need.Weights > c.f.Free {
			t.Errorf("%s: states %d over %d", c.name, p.Need.Weights, c.f.Free)
		}
		t.Logf("%s: %d×%d, %d params (%.2f%% of %.4g)", c.name, s.Layers, s.Hidden, s.Params(), 100*n/c.bound, c.bound)
	}
}

// TestLargestModelFleet: with the whole estimate, the answer fits and a
// model 5% larger does not.
func TestLargestModelFleet(t *testing.T) {
	f := Fleet{Nodes: 1, GPUsPerNode: 8, Free: 80e9}
	job := Job{Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{}, Batch: 1, SeqLen: 2048, Attention: model.Flash}
	s, p, err := LargestModel(f, job, LargestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d×%d, %d params, %s", s.Layers, s.Hidden, s.Params(), p.Job.Parallel.Describe())
	if p.Job.Model.Spec().Params() != s.Params() {
		t.Errorf("plan model %d, spec %d", p.Job.Model.Spec().Params(), s.Params())
	}
	bigger, err := model.GPTBySize(s.Params() * 105 / 100)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := ModelOf(bigger)
	job.Model = m
	if _, err := AllocateFleet(f, job, nil); !errors.Is(err, gpumem.ErrDoesNotFit) {
		t.Errorf("%d params: %v, want does not fit", bigger.Params(), err)
	}
}

func TestLargestModelErrors(t *testing.T) {
	job := Job{Mode: Training, Precision: FP16Master, Optimizer: optimizer.Adam{}, Batch: 1, SeqLen: 1}
	if _, _, err := LargestModel(Fleet{Nodes: 1, GPUsPerNode: 1, Free: 32e9}, job, LargestOptions{ModelStatesOnly: true}); err == nil {
		t.Error("ModelStatesOnly without Fixed accepted")
	}
	job.Parallel = Parallel{DataParallel: 8, Stage: 3}
	bf := job
	bf.Precision = BF16
	if _, _, err := LargestModel(Fleet{Nodes: 1, GPUsPerNode: 8, Free: 32e9}, bf, LargestOptions{Fixed: true, ModelStatesOnly: true}); err == nil || !strings.Contains(err.Error(), "Job.Precision") {
		t.Errorf("pure bf16 model states: %v", err)
	}
	sgd := job
	sgd.Optimizer = optimizer.SGD{}
	if _, _, err := LargestModel(Fleet{Nodes: 1, GPUsPerNode: 8, Free: 32e9}, sgd, LargestOptions{Fixed: true, ModelStatesOnly: true}); err == nil || !strings.Contains(err.Error(), "Job.Optimizer") {
		t.Errorf("SGD model states: %v", err)
	}
	job.Parallel = Parallel{DataParallel: 16}
	if _, _, err := LargestModel(Fleet{Nodes: 1, GPUsPerNode: 8, Free: 32e9}, job, LargestOptions{Fixed: true}); err == nil {
		t.Error("16-GPU layout on 8 GPUs accepted")
	}
	job.Parallel = Parallel{}
	if _, _, err := LargestModel(Fleet{Nodes: 1, GPUsPerNode: 1, Free: 1e8}, job, LargestOptions{}); !errors.Is(err, gpumem.ErrDoesNotFit) {
		t.Errorf("100 MB: %v, want does not fit", err)
	}
}

// TestZeROModelStatesMatchEstimate: the estimator's own model states
// (Weights + Gradients + Optimizer + Master at the optimizer step) of a
// fp16-master Adam job are the ZeRO paper's formula plus the step's
// transient, where DeepSpeed adds no buffers: stage 0 (16Ψ, plus 4Ψ of
// fp32 step temporaries) and stage 1 (4Ψ + 12Ψ/64, plus 4Ψ/64) on 64
// GPUs, Ψ = 1,315,723,264 (gpt:1.3b): measured 26,314,466,448 =
// 21,051,572,224 + 5,262,893,056 + 1,168 and 5,591,824,384 =
// 5,509,591,168 + 82,232,704 + 512 (the last terms, under 4 KiB, are
// the estimator's per-tensor rounding; not traced further); at stage 1
// the tied embedding's 2·V·h·2 bytes at the end of backward outgrow the
// sharded step's 4Ψ/64. Stages 2 and 3 add
// DeepSpeed's reduce bucket and gathered parameters on top, so there the
// estimate is larger.
func TestZeROModelStatesMatchEstimate(t *testing.T) {
	spec, err := model.GPTBySize(1.3e9)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ModelOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	for stage := 0; stage <= 3; stage++ {
		par := Parallel{DataParallel: 64, Stage: stage, GPUsPerNode: 8}
		j := Job{Model: m, Mode: Training, Precision: FP16Master, Optimizer: optimizer.Adam{}, Batch: 1, SeqLen: 16, Parallel: par}
		b, err := Estimate(j)
		if err != nil {
			t.Fatal(err)
		}
		got := b.Weights + b.Gradients + b.Optimizer + b.Master
		want, err := ZeROModelStates(spec.Params(), par)
		if err != nil {
			t.Fatal(err)
		}
		shard := int64(1)
		if stage == 1 {
			shard = 64
		}
		step := gpumem.Bytes(4 * spec.Params() / shard)
		if stage == 1 {
			// The end of backward outgrows the sharded step: the tied
			// embedding's head and embedding gradients and their sum,
			// beside every fp16 gradient (Model.tiedGrad).
			step = max(step, gpumem.Bytes(2*2*spec.Vocab*spec.Hidden))
		}
		switch {
		case stage <= 1 && (got < want+step || got > want+step+4096):
			t.Errorf("stage %d: estimate %d, paper %d + step %d", stage, got, want, step)
		case stage > 1 && got < want:
			t.Errorf("stage %d: estimate %d below the paper's %d", stage, got, want)
		}
		t.Logf("stage %d: estimate %d, paper %d", stage, got, want)
	}
}
