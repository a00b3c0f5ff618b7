package budget

import (
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// schedulerCycle is one scheduling cycle as a program written from the
// package doc runs it: 1,000 jobs (inference and fine-tunes of four 7–13B
// models at several batches and lengths) against 100 GPUs of three kinds
// (L4, A100 80 GB, H100, with some memory in use), each job estimated once
// per kind of GPU (Job.Overhead: the context and workspace are the
// device's) and checked with Fits against every GPU, the tightest fit by
// Utilization chosen. It returns how many jobs found a GPU.
func schedulerCycle(tb testing.TB, models []Model, kinds []gpumem.Device, gpus []int, used []gpumem.Bytes) int {
	placed := 0
	for i := range 1000 {
		j := schedulerJob(models, i)
		var need [3]Breakdown
		for k := range kinds {
			j.Device = kinds[k]
			n, err := Estimate(j)
			if err != nil {
				tb.Fatal(err)
			}
			need[k] = n
		}
		best, score := -1, -1.0
		for g, k := range gpus {
			d := kinds[k]
			d.Used = used[g]
			if _, ok := Fits(need[k], d); ok {
				if u := Utilization(need[k], d); u > score {
					best, score = g, u
				}
			}
		}
		if best >= 0 {
			placed++
		}
	}
	return placed
}

// schedulerJob is the cycle's i-th job: generation at batch 1–8 after
// prompts of 1k–4k tokens, and every tenth a full fine-tune with 8-bit
// AdamW, flash attention and full checkpointing.
func schedulerJob(models []Model, i int) Job {
	j := Job{Model: models[i%len(models)], Mode: Generation, Precision: BF16,
		Batch: 1 + i%8, SeqLen: 1024 * (1 + i%4), Generate: 256}
	if i%10 == 0 {
		j.Mode, j.Optimizer, j.Generate = Training, optimizer.AdamW8bit{}, 0
		j.Checkpointing, j.Attention = model.FullCheckpointing, model.Flash
	}
	return j
}

func schedulerFleet(tb testing.TB) ([]Model, []gpumem.Device, []int, []gpumem.Bytes) {
	var models []Model
	for _, name := range []string{"llama-3-8b", "mistral-7b", "qwen2.5-7b", "llama-2-13b"} {
		models = append(models, lookupModel(tb, name, nil))
	}
	var kinds []gpumem.Device
	for _, name := range []string{"l4", "a100-80gb", "h100"} {
		d, ok := gpumem.LookupDevice(name)
		if !ok {
			tb.Fatalf("no %s in the catalog", name)
		}
		kinds = append(kinds, d)
	}
	gpus := make([]int, 100)
	used := make([]gpumem.Bytes, 100)
	for g := range gpus {
		gpus[g] = g % 3
		used[g] = gpumem.Bytes(g%5) * 8 * gpumem.GiB
	}
	return models, kinds, gpus, used
}

// The cycle places the jobs that fit somewhere and only those: a job's
// placement agrees with Fits on the emptiest GPU of each kind.
func TestSchedulerCycle(t *testing.T) {
	t.Parallel()
	models, kinds, gpus, used := schedulerFleet(t)
	placed := schedulerCycle(t, models, kinds, gpus, used)
	if placed == 0 || placed == 1000 {
		t.Fatalf("placed %d of 1000 jobs; the fleet of L4s, A100s and H100s should take some and refuse others", placed)
	}
	want := 0
	for i := range 1000 {
		j := schedulerJob(models, i)
		for k := range kinds {
			j.Device = kinds[k]
			n, err := Estimate(j)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := Fits(n, kinds[k]); ok { // used is 0 on g%5 == 0, which every kind has
				want++
				break
			}
		}
	}
	t.Logf("placed %d of 1000 jobs", placed)
	if placed != want {
		t.Errorf("placed %d jobs, but %d fit an idle GPU of some kind", placed, want)
	}
}

// BenchmarkSchedulerCycle is one cycle of 1,000 jobs over 100 GPUs:
// 3,000 estimates and 100,000 Fits.
func BenchmarkSchedulerCycle(b *testing.B) {
	models, kinds, gpus, used := schedulerFleet(b)
	b.ReportAllocs()
	for b.Loop() {
		schedulerCycle(b, models, kinds, gpus, used)
	}
}
