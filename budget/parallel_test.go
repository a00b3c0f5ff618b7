package budget

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/optimizer"
)

// TestModelStatesZeROTable1 reproduces every cell of Table 1 of the ZeRO
// paper (Rajbhandari et al., SC'20): per-device model states in GB
// (1e9 bytes) of mixed-precision Adam, 2Ψ + 2Ψ + KΨ with K = 12, for
// three model sizes, three stages and six data-parallel degrees. The
// paper prints three significant figures, rounding small values and
// truncating the large ones (4187.5 is printed 4187), so a cell matches
// when it is the exact value rounded or truncated to the printed digits.
func TestModelStatesZeROTable1(t *testing.T) {
	t.Parallel()
	sizes := []float64{7.5e9, 128e9, 1e12}
	table := map[int][9]string{ // DP → 7.5B P_os, P_os+g, P_os+g+p, 128B ..., 1T ...
		1:    {"120", "120", "120", "2048", "2048", "2048", "16000", "16000", "16000"},
		4:    {"52.5", "41.3", "30", "896", "704", "512", "7000", "5500", "4000"},
		16:   {"35.6", "21.6", "7.5", "608", "368", "128", "4750", "2875", "1000"},
		64:   {"31.4", "16.6", "1.88", "536", "284", "32", "4187", "2218", "250"},
		256:  {"30.4", "15.4", "0.47", "518", "263", "8", "4046", "2054", "62.5"},
		1024: {"30.1", "15.1", "0.12", "513", "257", "2", "4011", "2013", "15.6"},
	}
	for dp, row := range table {
		for i, printed := range row {
			psi := sizes[i/3]
			stage := i%3 + 1
			got, err := ModelStates(gpumem.Bytes(2*psi), gpumem.Bytes(2*psi), gpumem.Bytes(12*psi), stage, dp)
			if err != nil {
				t.Fatal(err)
			}
			if !matchesPrinted(float64(got)/1e9, printed) {
				t.Errorf("Ψ=%g, stage %d, Nd=%d: %.4f GB, the paper prints %s", psi, stage, dp, float64(got)/1e9, printed)
			}
		}
	}
	// Figure 1 and §5: 7.5B on 64 GPUs, 120 → 31.4 → 16.6 → 1.9 GB.
	for stage, want := range []float64{120, 31.4, 16.6, 1.9} {
		got, _ := ModelStates(15e9, 15e9, 90e9, stage, 64)
		if math.Abs(float64(got)/1e9-want) > 0.05 {
			t.Errorf("Figure 1, stage %d: %.3f GB, want %g", stage, float64(got)/1e9, want)
		}
	}
	if _, err := ModelStates(1, 1, 1, 4, 8); !errors.Is(err, gpumem.ErrInvalid) {
		t.Errorf("stage 4: %v", err)
	}
	if _, err := ModelStates(1, 1, 1, 1, 0); !errors.Is(err, gpumem.ErrInvalid) {
		t.Errorf("n 0: %v", err)
	}
}

// matchesPrinted reports whether v, rounded or truncated to the digits
// of printed, equals it.
func matchesPrinted(v float64, printed string) bool {
	digits := 0
	if i := strings.IndexByte(printed, '.'); i >= 0 {
		digits = len(printed) - i - 1
	}
	p, _ := strconv.ParseFloat(printed, 64)
	scale := math.Pow(10, float64(digits))
	return math.Abs(math.Round(v*scale)-p*scale) < 0.5 || math.Abs(math.Trunc(v*scale)-p*scale) < 0.5
}

// Estimate with a ZeRO layout divides exactly what each stage partitions.
func TestEstimateZeROStages(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-2-7b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{Impl: optimizer.Fused}, Batch: 1, SeqLen: 1}
	one, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	// The end of backward holds every gradient: the model states.
	if one.Phase != Backward {
		t.Fatalf("phase %v", one.Phase)
	}
	var prev gpumem.Bytes = one.Allocated()
	for stage := 0; stage <= 3; stage++ {
		j.Parallel = Parallel{DataParallel: 8, Stage: stage}
		b, err := Estimate(j)
		if err != nil {
			t.Fatal(err)
		}
		if stage >= 1 && (b.Master != partition(one.Master, 8) || b.Optimizer != partition(one.Optimizer, 8)) {
			t.Errorf("stage %d: master %v optimizer %v, want an eighth of %v and %v", stage, b.Master, b.Optimizer, one.Master, one.Optimizer)
		}
		if stage == 0 && b != one {
			t.Errorf("stage 0 changed the estimate")
		}
		if stage >= 2 && b.Gradients >= one.Gradients {
			t.Errorf("stage %d: gradients %v not partitioned (%v)", stage, b.Gradients, one.Gradients)
		}
		if stage == 3 && b.Weights >= one.Weights/2 {
			t.Errorf("stage 3: weights %v not partitioned (%v)", b.Weights, one.Weights)
		}
		if b.Allocated() > prev {
			t.Errorf("stage %d needs more (%v) than stage %d (%v)", stage, b.Allocated(), stage-1, prev)
		}
		prev = b.Allocated()
	}
	for _, bad := range []Parallel{{Stage: 4}, {DataParallel: -1}, {DataParallel: 8, ShardGroup: 3}, {DataParallel: 4, ShardGroup: 8}} {
		j.Parallel = bad
		if _, err := Estimate(j); !errors.Is(err, gpumem.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	for _, c := range []struct {
		p     Parallel
		field string
		kind  error
	}{
		{Parallel{TensorParallel: 3}, "Workload.TensorParallel", gpumem.ErrInvalid}, // 32 heads
		{Parallel{SequenceParallel: true}, "Job.Parallel.SequenceParallel", gpumem.ErrInvalid},
		{Parallel{DataParallel: 8, Stage: 1, FSDP: true}, "Job.Parallel.Stage", gpumem.ErrUnsupported},
		{Parallel{PipelineParallel: 64}, "Job.Parallel.PipelineParallel", gpumem.ErrInvalid}, // 32 layers
		{Parallel{VirtualStages: 2}, "Job.Parallel.VirtualStages", gpumem.ErrInvalid},
		{Parallel{PipelineParallel: 4, VirtualStages: 2}, "Job.GradAccum", gpumem.ErrInvalid},
		{Parallel{DataParallel: 8, ExpertParallel: 8}, "Job.Parallel.ExpertParallel", gpumem.ErrInvalid}, // dense model
		{Parallel{DataParallel: 8, ExpertParallel: 3}, "Job.Parallel.ExpertParallel", gpumem.ErrInvalid},
		{Parallel{ContextParallel: 2}, "Workload.ContextParallel", gpumem.ErrUnsupported}, // eager attention
	} {
		j.Parallel = c.p
		_, err := Estimate(j)
		var fe *gpumem.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, c.kind) {
			t.Errorf("%+v: %v, want a %v error naming %s", c.p, err, c.kind, c.field)
		}
	}
}
