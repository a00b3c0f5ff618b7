// Command perfdriver runs one of the budget package's benchmark jobs n
// times, for an instruction count under callgrind that the load of a
// shared machine does not move:
//
//	CGO_ENABLED=0 go build -o /tmp/perfdriver ./internal/perfdriver
//	GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
//	    --toggle-collect='github.com/gpumem/gpumem/budget.Estimate' \
//	    /tmp/perfdriver -case train -n 2000
//
// and divide the instructions collected by n (+1: the driver estimates
// once before the loop to check the job). --toggle-collect names the
// function measured: budget.Estimate, budget.Allocate or
// budget.AllocateFleet. Asynchronous preemption is off because
// callgrind does not survive Go's preemption signals.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

func lookup(name string, f func(*model.Finetune)) budget.Model {
	s, ok := model.Lookup(name)
	if !ok {
		fmt.Fprintln(os.Stderr, "no model", name)
		os.Exit(2)
	}
	ft := model.Finetune{Model: s}
	if f != nil {
		f(&ft)
	}
	m, err := budget.NewModel(ft)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return m
}

func main() {
	c := flag.String("case", "train", "train, zero3, fsdp, parallel, generate, moe, allocate or fleet")
	n := flag.Int("n", 1000, "repetitions")
	flag.Parse()
	m := lookup("llama-2-70b", nil)
	// BenchmarkEstimate's job.
	j := budget.Job{Model: m, Mode: budget.Training, Precision: budget.BF16Master, Optimizer: optimizer.AdamW{},
		Attention: model.Flash, Batch: 1, SeqLen: 4096, Checkpointing: model.FullCheckpointing}
	var run func() error
	est := func() error { _, err := budget.Estimate(j); return err }
	switch *c {
	case "train":
		run = est
	case "zero3":
		j.Parallel = budget.Parallel{DataParallel: 64, Stage: 3}
		run = est
	case "fsdp":
		j.Parallel = budget.Parallel{DataParallel: 64, Stage: 3, FSDP: true}
		run = est
	case "parallel":
		// BenchmarkEstimateParallel's job.
		j = budget.Job{Model: m, Mode: budget.Training, Precision: budget.BF16Master, Optimizer: optimizer.AdamW{Impl: optimizer.Fused},
			Batch: 1, SeqLen: 4096, Attention: model.Flash, GradAccum: 8,
			Parallel: budget.Parallel{DataParallel: 2, Stage: 1, TensorParallel: 8, SequenceParallel: true, PipelineParallel: 4}}
		run = est
	case "generate":
		j = budget.Job{Model: m, Mode: budget.Generation, Precision: budget.BF16, Attention: model.SDPA,
			Batch: 8, SeqLen: 4096, Generate: 512}
		run = est
	case "moe":
		j.Model = lookup("mixtral-8x7b", nil)
		j.Parallel = budget.Parallel{DataParallel: 8, Stage: 1, ExpertParallel: 8, ContextParallel: 2, TensorParallel: 2}
		run = est
	case "allocate", "fleet":
		// BenchmarkAllocate's job and limits.
		lora := lookup("llama-2-70b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 16} })
		qlora := lookup("llama-2-70b", func(f *model.Finetune) {
			f.LoRA = model.LoRA{Rank: 16}
			f.Quant, f.Blockwise = gpumem.NF4, gpumem.Blockwise{Nested: true}
		})
		j = budget.Job{Model: m, Mode: budget.Training, Precision: budget.BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.Eager, Batch: 4, SeqLen: 4096}
		lim := &budget.Limits{
			TargetGlobalBatch: 256,
			Attention:         []model.Attention{model.SDPA, model.Flash},
			Checkpointing:     []model.Checkpointing{model.SelectiveCheckpointing, model.FullCheckpointing},
			Optimizers:        []optimizer.Optimizer{optimizer.AdamW8bit{}, optimizer.Adafactor{}},
			Precisions:        []budget.Precision{budget.BF16},
			Offload:           budget.OffloadOptimizer,
			Models:            []budget.Alternative{{Name: "LoRA r=16", Model: lora}, {Name: "QLoRA r=16", Model: qlora}},
		}
		if *c == "allocate" {
			run = func() error { _, err := budget.Allocate(80<<30, j, lim); return err }
		} else {
			// BenchmarkAllocateFleet's: two nodes of eight 80 GB GPUs.
			run = func() error {
				_, err := budget.AllocateFleet(budget.Fleet{Nodes: 2, GPUsPerNode: 8, Free: 80 << 30}, j, lim)
				return err
			}
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown case", *c)
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 0; i < *n; i++ {
		_ = run()
	}
}
