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
// BenchmarkPlace places 10,000 jobs on 1,000 GPUs, on a fresh copy of
// the fleet each time: PreFilter once per job, Filter and Score on every
// GPU, Reserve on the chosen one. BenchmarkPreFilter estimates the same
// jobs alone. On an AMD EPYC (cpuinfo's model name; a 2-vCPU VM shared
// with other builds), Go 1.26, go test -bench . -benchmem:
//
//	BenchmarkPlace-2        6   193669880 ns/op   19367 ns/job   1530 placed   107050 B/op   13 allocs/op
//	BenchmarkPreFilter-2   64    18497034 ns/op    1850 ns/job                    473 B/op   10 allocs/op
//
// That is 19 µs per job, 0.19 s for the queue: 1.9 µs of budget.Estimate
// and 17 ns per GPU of Filter and Score, most of it copying the
// Breakdown that budget.Fits takes by value (see [Scheduler]). The
// allocations are the fleet's copy and the errors of the two invalid
// jobs; placing a valid job allocates nothing.
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
