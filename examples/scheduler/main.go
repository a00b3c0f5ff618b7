// Command scheduler places a queue of training and inference jobs on a
// heterogeneous GPU fleet the way a Kubernetes scheduler plugin would,
// with package budget: PreFilter estimates each job once
// (budget.Estimate), Filter keeps the GPUs it fits (budget.Fits), Score
// packs it onto the GPU it fills most tightly (budget.Utilization), and
// Reserve books it there; an index of the fleet by free memory finds
// that GPU without visiting the others (see Scheduler). It prints a few placements, every
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
// Scheduler.Place, on a fresh copy of the fleet each time, and
// BenchmarkPlace100kOn10k 100,000 jobs on 10,000 GPUs; BenchmarkPreFilter
// estimates the 10,000 jobs alone. Run
//
//	go test -run x -bench . -benchtime 3x -benchmem ./examples/scheduler
//
// on a shared, noisy 2-vCPU VM ("Intel(R) Xeon(R) Processor" in
// cpuinfo) with Go 1.26, with other builds running, the index (see
// Scheduler) made the whole queue, placing the same 1,535 and 15,152
// jobs (TestPlaceMatchesLinear checks that every decision is the old
// one):
//
//   - 100,000 jobs on 10,000 GPUs: 0.46 to 0.48 s, against 43.6 to 44.7 s
//     for Filter and Score on every GPU (about 90 times as fast);
//   - 10,000 jobs on 1,000 GPUs: 47 to 53 ms against 385 to 572 ms (8 to
//     11 times), in runs of the old and new code taken in turn.
//
// A typical run:
//
//	BenchmarkPlace10kOn1k-2     3     50458483 ns/op   5046 ns/job    1535 placed   2728762 B/op   17 allocs/op
//	BenchmarkPreFilter-2        3     41177668 ns/op   4118 ns/job                     2450 B/op   13 allocs/op
//	BenchmarkPlace100kOn10k-2   3    478618285 ns/op   4786 ns/job   15152 placed  27214560 B/op   16 allocs/op
//
// The time per job no longer grows with the fleet: under about 1 µs of
// it is the index (two or three O(log n) walks and a Reserve that moves
// one GPU in it), the rest budget.Estimate, which BenchmarkPreFilter
// shows alone (its time per job on a quiet machine is about half
// what this loaded one took). The bytes are mostly the queue's
// Decisions; the allocations are that slice, the fleet's copy and its
// index, and the errors of the two invalid jobs: placing a valid job
// allocates nothing (TestScheduleAllocs).
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
