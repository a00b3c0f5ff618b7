package main

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/request"
)

// largestResult is the answer of plan --model gpt:largest.
type largestResult struct {
	spec       model.Spec
	plan       budget.Plan
	layout     budget.Parallel
	statesOnly bool
}

// planLargest runs budget.LargestModel for the job j (built with the
// placeholder model) on nodes × gpus GPUs of dev: AllocateFleet chooses
// the layout unless fixed. statesOnly counts the ZeRO paper's model
// states alone; flag names the option as the caller spells it.
func planLargest(j budget.Job, dev gpumem.Device, nodes, gpus int, fixed, statesOnly bool, lim *budget.Limits, flag string) (largestResult, error) {
	if statesOnly && !fixed {
		return largestResult{}, fmt.Errorf("%w: %s: the model states depend on the layout; give one (ZeRO stage, tensor or pipeline parallel)", request.ErrUsage, flag)
	}
	f := budget.Fleet{Nodes: max(nodes, 1), GPUsPerNode: max(gpus, 1), Free: dev.Free()}
	if statesOnly {
		// The paper's analysis divides the whole memory, no headroom.
		f.Free = dev.Capacity
	}
	s, p, err := budget.LargestModel(f, j, budget.LargestOptions{Limits: lim, Fixed: fixed, ModelStatesOnly: statesOnly})
	if err != nil {
		return largestResult{}, err
	}
	layout := j.Parallel
	if !statesOnly {
		layout = p.Job.Parallel
	}
	return largestResult{spec: s, plan: p, layout: layout, statesOnly: statesOnly}, nil
}

// json is the answer's "largest_model" object.
func (r largestResult) json() map[string]any {
	s := r.spec
	return map[string]any{
		"name": fmt.Sprintf("gpt:%dx%d", s.Layers, s.Hidden), "params": s.Params(), "layers": s.Layers, "hidden": s.Hidden,
		"heads": s.Heads, "head_dim": s.HeadDim, "intermediate": s.Intermediate, "vocab": s.Vocab, "positions": s.Positions,
		"layout": r.layout.Describe(), "states_only": r.statesOnly,
	}
}

// writeLargest prints the answer: the model, then the plan (or, for the
// model states alone, their bytes per GPU).
func (r largestResult) write(out io.Writer, dev gpumem.Device, asJSON bool) error {
	if r.statesOnly {
		if asJSON {
			return writeJSON(out, map[string]any{"largest_model": r.json(), "device": dev.Name, "capacity": int64(dev.Capacity),
				"model_states": int64(r.plan.Need.Weights)})
		}
		fmt.Fprintf(out, "largest GPT by model states alone (ZeRO paper, 16 bytes per parameter with mixed-precision Adam, sharded by the layout) on %s (%s): %s\n",
			request.Clean(dev.Name), dev.Capacity.String(), r.describe())
		fmt.Fprintf(out, "model states per GPU: %s\n", r.plan.Need.Weights.String())
		return nil
	}
	if asJSON {
		m := planJSON(r.plan, dev)
		m["largest_model"] = r.json()
		return writeJSON(out, m)
	}
	fmt.Fprintf(out, "largest GPT that fits on %s (%s free): %s\n", request.Clean(dev.Name), dev.Free().String(), r.describe())
	fmt.Fprint(out, r.plan)
	return nil
}

func (r largestResult) describe() string {
	s := r.spec
	return fmt.Sprintf("%s parameters (%d layers × d_model %d, %d heads of %d, FFN %d, vocab %d, %d positions, tied embeddings; --model gpt:%dx%d), layout %s",
		gpumem.Thousands(s.Params()), s.Layers, s.Hidden, s.Heads, s.HeadDim, s.Intermediate, s.Vocab, s.Positions, s.Layers, s.Hidden, r.layout.Describe())
}
