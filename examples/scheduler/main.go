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
// BenchmarkPlace places 10,000 jobs on 1,000 GPUs (PreFilter once per
// job, Filter and Score on every GPU):
//
//	BENCHMARK FIGURE HERE
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
