// Command scheduler places a queue of training and inference jobs on a
// heterogeneous GPU fleet the way a Kubernetes scheduler plugin would,
// with package budget: PreFilter estimates each job once
// (budget.Estimate), Filter checks it against every GPU (budget.Fits),
// Score packs it onto the GPU it fills most tightly (budget.Utilization),
// and Reserve books it there. It prints a few placements, every
// rejection with its smallest shortfall and the job's largest memory
// component, and the fleet's memory in use before and after.
//
// The fleet (a few hundred nodes of 1 to 8 catalog GPUs, some partly
// used) and the queue (LoRA, QLoRA and full fine-tunes, inference with a
// KV cache, a few jobs that fit no GPU and two invalid ones) are drawn
// from a fixed seed and the embedded catalogs, so the output is the same
// on every run; nothing is read from the network or from files.
//
//	go run ./examples/scheduler
//
// # Performance
//
// BenchmarkPlace10kOn1k places a queue of 10,000 jobs on 1,000 GPUs with
// Scheduler.Place, on a fresh copy of the fleet each time: PreFilter
// once per job, Filter and Score on every GPU, Reserve on the chosen
// one. It takes at most 0.2 s for the whole queue (20 µs per job):
// between 0.156 and 0.199 s over eight runs of
//
//	go test -run x -bench . -benchtime 3x -benchmem ./examples/scheduler
//
// on a shared, noisy 2-vCPU AMD EPYC VM (cpuinfo's model name) with
// Go 1.26; a typical run:
//
//	BenchmarkPlace10kOn1k-2   3   163652322 ns/op   16365 ns/job   1530 placed   2589184 B/op   13 allocs/op
//	BenchmarkPreFilter-2      3    21313547 ns/op    2131 ns/job                     560 B/op   11 allocs/op
//
// BenchmarkPreFilter estimates the same jobs alone: about 2 µs of each
// job is budget.Estimate, the rest 14 ns per GPU of Filter and Score,
// most of it copying the Breakdown that budget.Fits takes by value (see
// [Scheduler]). The bytes are mostly the queue's 10,000 Decisions; the
// allocations are that slice, the fleet's copy and the errors of the two
// invalid jobs: placing a valid job allocates nothing.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
