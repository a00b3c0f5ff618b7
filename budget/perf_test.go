package budget

import (
	"testing"

	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// perfLayouts are the layouts BenchmarkEstimateLayouts measures and
// TestEstimateLayoutsAllocationFree checks: one per kind of sharding and
// model parallelism, on llama-2-70b (dense) and mixtral-8x7b (experts).
var perfLayouts = []struct {
	name, model string
	par         Parallel
}{
	{"single", "llama-2-70b", Parallel{}},
	{"ddp", "llama-2-70b", Parallel{DataParallel: 64}},
	{"zero1", "llama-2-70b", Parallel{DataParallel: 64, Stage: 1}},
	{"zero2", "llama-2-70b", Parallel{DataParallel: 64, Stage: 2}},
	{"zero3", "llama-2-70b", Parallel{DataParallel: 64, Stage: 3}},
	{"zero3-offload", "llama-2-70b", Parallel{DataParallel: 64, Stage: 3}},
	{"fsdp", "llama-2-70b", Parallel{DataParallel: 64, Stage: 3, FSDP: true}},
	{"fsdp-hybrid", "llama-2-70b", Parallel{DataParallel: 64, Stage: 3, FSDP: true, ShardGroup: 8, GPUsPerNode: 8}},
	{"tp8-sp", "llama-2-70b", Parallel{DataParallel: 8, Stage: 1, TensorParallel: 8, SequenceParallel: true}},
	{"tp8-pp4", "llama-2-70b", Parallel{DataParallel: 2, Stage: 1, TensorParallel: 8, SequenceParallel: true, PipelineParallel: 4}},
	{"pp4-virtual", "llama-2-70b", Parallel{DataParallel: 2, Stage: 1, PipelineParallel: 4, VirtualStages: 2}},
	{"tp2-cp2", "llama-2-70b", Parallel{DataParallel: 4, Stage: 1, TensorParallel: 2, ContextParallel: 2}},
	{"ep8", "mixtral-8x7b", Parallel{DataParallel: 8, Stage: 1, ExpertParallel: 8}},
	{"ep4-zero3", "mixtral-8x7b", Parallel{DataParallel: 8, Stage: 3, ExpertParallel: 4}},
}

func perfJob(t testing.TB, models map[string]Model, i int) Job {
	l := perfLayouts[i]
	m, ok := models[l.model]
	if !ok {
		m = lookupModel(t, l.model, nil)
		models[l.model] = m
	}
	j := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{}, Attention: model.Flash,
		Batch: 1, SeqLen: 4096, Checkpointing: model.FullCheckpointing, GradAccum: 8, Parallel: l.par}
	if l.name == "zero3-offload" {
		j.Offload = OffloadOptimizer | OffloadParams
	}
	return j
}

// TestEstimateLayoutsAllocationFree: Estimate allocates nothing for any
// layout once the Model has the figures of its precision, rank and
// optimizer (the first Estimate computes them).
func TestEstimateLayoutsAllocationFree(t *testing.T) {
	models := map[string]Model{}
	for i, l := range perfLayouts {
		j := perfJob(t, models, i)
		if _, err := Estimate(j); err != nil {
			t.Fatalf("%s: %v", l.name, err)
		}
		if n := testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }); n != 0 {
			t.Errorf("%s: %v allocations per Estimate", l.name, n)
		}
	}
}

// BenchmarkEstimateLayouts estimates a 70B training job (an 8×7B MoE
// for expert parallelism) under each layout of perfLayouts.
func BenchmarkEstimateLayouts(b *testing.B) {
	models := map[string]Model{}
	for i, l := range perfLayouts {
		j := perfJob(b, models, i)
		b.Run(l.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Estimate(j); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAllocateFleet plans BenchmarkAllocate's job over two nodes
// of eight 80 GB GPUs: a layout whose model states cannot fit is not
// searched.
func BenchmarkAllocateFleet(b *testing.B) {
	m := lookupModel(b, "llama-2-70b", nil)
	lora := lookupModel(b, "llama-2-70b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 16} })
	j := Job{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.Eager, Batch: 4, SeqLen: 4096}
	lim := &Limits{
		TargetGlobalBatch: 256,
		Attention:         []model.Attention{model.SDPA, model.Flash},
		Checkpointing:     []model.Checkpointing{model.SelectiveCheckpointing, model.FullCheckpointing},
		Optimizers:        []optimizer.Optimizer{optimizer.AdamW8bit{}, optimizer.Adafactor{}},
		Precisions:        []Precision{BF16},
		Offload:           OffloadOptimizer,
		Models:            []Alternative{{"LoRA r=16", lora}},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AllocateFleet(Fleet{Nodes: 2, GPUsPerNode: 8, Free: 80 << 30}, j, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEstimateConcurrentMemo estimates the differential grid's jobs from
// several goroutines at once, on Models built afresh so that their
// figures are computed while other goroutines read them (run it with
// -race too), and checks every answer against the same job estimated
// alone.
func TestEstimateConcurrentMemo(t *testing.T) {
	_, jobs := differentialJobs(t)
	want := make([]string, len(jobs))
	for i, j := range jobs {
		b, err := Estimate(j)
		want[i] = formatResult(b, err)
	}
	_, fresh := differentialJobs(t) // new Models, nothing kept
	const workers = 4
	n := len(fresh)
	errs := make(chan string, workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			for i := 0; i < n; i++ {
				k := (i*7 + w*13) % n // each worker in its own order
				b, err := Estimate(fresh[k])
				if got := formatResult(b, err); got != want[k] {
					errs <- got + " != " + want[k]
					return
				}
			}
			errs <- ""
		}(w)
	}
	for w := 0; w < workers; w++ {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}
