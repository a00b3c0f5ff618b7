package budget_test

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// node is one GPU as a scheduler sees it: a name and the device's memory,
// with Used filled in from what is running on it.
type node struct {
	name string
	gpu  gpumem.Device
}

// maxNodeScore is the top of the scheduler's score scale, as the
// Kubernetes scheduler framework's MaxNodeScore.
const maxNodeScore = 100

// memoryFit is a scheduler plugin's memory check, in the shape of the
// Kubernetes scheduler framework: PreFilter estimates the job once and
// keeps the estimate (the framework's CycleState), Filter checks it
// against each node without side effects, Score ranks the nodes that
// passed.
type memoryFit struct {
	need budget.Breakdown
}

// PreFilter estimates the job. An invalid job is unschedulable, and the
// reason names the job field at fault.
func (p *memoryFit) PreFilter(j budget.Job) error {
	need, err := budget.Estimate(j)
	if err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			return fmt.Errorf("unschedulable: field %s: %w", fe.Field, fe.Err)
		}
		return fmt.Errorf("unschedulable: %w", err)
	}
	p.need = need
	return nil
}

// Filter reports whether the job fits the node, and why not: the
// shortfall and the job's largest component, data a user can act on.
func (p *memoryFit) Filter(n node) (ok bool, reason string) {
	short, ok := budget.Fits(p.need, n.gpu)
	if ok {
		return true, ""
	}
	d := p.need.Dominant()
	return false, fmt.Sprintf("%.1f GiB short; largest component %s %.1f GiB", short.GiB(), d.Name, d.Bytes.GiB())
}

// Score maps the fraction of the node's free memory the job takes to
// [0, maxNodeScore]; a higher score is a tighter fit, so jobs pack onto
// busy GPUs and idle ones stay whole for large jobs.
func (p *memoryFit) Score(n node) int64 {
	return int64(budget.Utilization(p.need, n.gpu) * maxNodeScore)
}

// A scheduler plugin places an inference job, Llama-3.1-8B in bf16
// generating 512 tokens after 4096-token prompts for 8 sequences, on one
// of three GPUs: an L4, an A100 80 GB with 40 GiB in use by another job,
// and an idle H100. The L4 is too small; of the two that fit, the busy
// A100 is the tighter fit and wins. A job with a mistake in its spec is
// turned away in PreFilter with the field named.
func ExampleFits_scheduler() {
	gpu := func(name string, used gpumem.Bytes) gpumem.Device {
		d, ok := gpumem.LookupDevice(name)
		if !ok {
			panic("no GPU " + name + " in the catalog")
		}
		d.Used = used
		return d
	}
	nodes := []node{
		{"node-a", gpu("l4", 0)},
		{"node-b", gpu("a100-80gb", 40*gpumem.GiB)},
		{"node-c", gpu("h100", 0)},
	}
	spec, _ := model.Lookup("llama-3.1-8b")
	m, err := budget.ModelOf(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	job := budget.Job{Model: m, Mode: budget.Generation, Precision: budget.BF16, Attention: model.Flash,
		Batch: 8, SeqLen: 4096, Generate: 512}

	var p memoryFit
	if err := p.PreFilter(job); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("needs %.1f GiB (kv_cache %.1f GiB, peak in %s)\n", p.need.Device().GiB(), p.need.KVCache.GiB(), p.need.Phase)
	best, bestScore := "", int64(-1)
	for _, n := range nodes {
		ok, why := p.Filter(n)
		if !ok {
			fmt.Printf("%s %-22s %5.1f GiB free: filtered out, %s\n", n.name, n.gpu.Name, n.gpu.Free().GiB(), why)
			continue
		}
		score := p.Score(n)
		fmt.Printf("%s %-22s %5.1f GiB free: score %d\n", n.name, n.gpu.Name, n.gpu.Free().GiB(), score)
		if score > bestScore {
			best, bestScore = n.name, score
		}
	}
	fmt.Println("placed on", best)

	job.Generate = 0 // a generation job that generates nothing
	fmt.Println(p.PreFilter(job))
	// Output:
	// needs 24.7 GiB (kv_cache 4.5 GiB, peak in decode)
	// node-a NVIDIA L4               22.0 GiB free: filtered out, 2.7 GiB short; largest component weights 15.0 GiB
	// node-b NVIDIA A100-SXM4-80GB   39.2 GiB free: score 63
	// node-c NVIDIA H100 80GB HBM3   79.2 GiB free: score 31
	// placed on node-b
	// unschedulable: field Job.Generate: invalid value: a Generation job generates at least 1 token
}
