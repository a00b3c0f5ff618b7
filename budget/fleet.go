package budget

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Fleet is the GPUs a job may spread over: Nodes nodes of GPUsPerNode
// GPUs, each with Free bytes free. A valid fleet has 1 to 65536 nodes of
// 1 to 1024 GPUs, and positive Free.
type Fleet struct {
	Nodes, GPUsPerNode int
	Free               gpumem.Bytes
}

// GPUs returns Nodes × GPUsPerNode: 0 when either is below 1, and
// math.MaxInt when the product does not fit an int (it saturates rather
// than wrapping; a valid Fleet has at most 2^26 GPUs).
func (f Fleet) GPUs() int {
	if f.Nodes < 1 || f.GPUsPerNode < 1 {
		return 0
	}
	n, ok := checked.Mul(int64(f.Nodes), int64(f.GPUsPerNode))
	if !ok || n > math.MaxInt {
		return math.MaxInt
	}
	return int(n)
}

func (f Fleet) validate() error {
	switch {
	case f.Nodes < 1 || f.Nodes > 1<<16:
		return gpumem.Errorf("Fleet.Nodes", f.Nodes, gpumem.ErrInvalid, "must be in [1, 65536]")
	case f.GPUsPerNode < 1 || f.GPUsPerNode > 1<<10:
		return gpumem.Errorf("Fleet.GPUsPerNode", f.GPUsPerNode, gpumem.ErrInvalid, "must be in [1, 1024]")
	case f.Free <= 0:
		return gpumem.Errorf("Fleet.Free", f.Free, gpumem.ErrInvalid, "must be positive")
	}
	return nil
}

// Layouts returns the layouts AllocateFleet tries for j on f, least
// communication first:
//
//  1. plain data parallelism over every GPU (gradients all-reduced);
//  2. ZeRO-1, ZeRO-2, ZeRO-3 over every GPU (FSDP NO_SHARD,
//     SHARD_GRAD_OP, FULL_SHARD when j.Parallel.FSDP; FSDP has no stage
//     1): each stage adds communication (ZeRO §7: stage 3 moves 1.5× the
//     data of stages 0–2);
//  3. tensor parallelism within a node (t = 2, 4, ... up to
//     GPUsPerNode, dividing the attention heads; sequence parallel on)
//     with ZeRO-1 over the remaining data-parallel ranks, as Megatron's
//     distributed optimizer does;
//  4. with more than one node, pipeline stages across nodes on top of
//     a node-wide tensor-parallel group.
//
// Offloading and the other costly changes of Limits are not layouts:
// AllocateFleet tries them only after every layout failed without them.
//
// An invalid fleet (see [Fleet]; AllocateFleet reports which field) has
// no layouts: Layouts returns nil.
func Layouts(f Fleet, j Job) []Parallel {
	if f.validate() != nil {
		return nil
	}
	n := f.GPUs()
	fsdp := j.Parallel.FSDP
	var out []Parallel
	for stage := 0; stage <= 3; stage++ {
		if n == 1 && stage > 0 {
			break
		}
		if fsdp && stage == 1 {
			continue
		}
		out = append(out, Parallel{DataParallel: n, Stage: stage, FSDP: fsdp, GPUsPerNode: f.GPUsPerNode})
	}
	lm := j.Model.spec.LM()
	heads := lm.Heads
	tpOK := func(t int) bool {
		if heads <= 0 || heads%int64(t) != 0 {
			return false
		}
		kv := lm.KVHeads
		return kv <= 0 || kv%int64(t) == 0 || int64(t)%kv == 0
	}
	var maxTP int
	for t := 2; t <= f.GPUsPerNode; t *= 2 {
		if f.GPUsPerNode%t != 0 || !tpOK(t) {
			continue
		}
		maxTP = t
		out = append(out, Parallel{DataParallel: n / t, Stage: 1, TensorParallel: t, SequenceParallel: true, GPUsPerNode: f.GPUsPerNode})
	}
	if maxTP == 0 {
		maxTP = 1
	}
	if j.Model.spec.Encoder == nil && j.Model.spec.Vision == nil {
		for p := 2; p <= f.Nodes && int64(p) <= lm.Layers; p *= 2 {
			if f.Nodes%p != 0 {
				continue
			}
			par := Parallel{DataParallel: n / (maxTP * p), Stage: 1, TensorParallel: maxTP, SequenceParallel: maxTP > 1,
				PipelineParallel: p, GPUsPerNode: f.GPUsPerNode}
			out = append(out, par)
		}
	}
	return out
}

// Describe names a layout as the ladder prints it: "DP 16, ZeRO-2",
// "TP 8 (SP) × DP 2, ZeRO-1", "one GPU". A layout Estimate would refuse is
// still named, from its fields ("DP 4, FSDP stage 5").
func (p Parallel) Describe() string {
	if p.GPUs() <= 1 {
		return "one GPU"
	}
	var parts []string
	if p.TensorParallel > 1 {
		s := fmt.Sprintf("TP %d", p.TensorParallel)
		if p.SequenceParallel {
			s += " (SP)"
		}
		parts = append(parts, s)
	}
	if p.PipelineParallel > 1 {
		s := fmt.Sprintf("PP %d", p.PipelineParallel)
		if p.VirtualStages > 1 {
			s += fmt.Sprintf(" (%d virtual)", p.VirtualStages)
		}
		parts = append(parts, s)
	}
	if p.ContextParallel > 1 {
		parts = append(parts, fmt.Sprintf("CP %d", p.ContextParallel))
	}
	if p.ExpertParallel > 1 {
		parts = append(parts, fmt.Sprintf("EP %d", p.ExpertParallel))
	}
	dp := max(p.DataParallel, 1)
	shard := "no sharding"
	switch {
	case p.FSDP && (p.Stage < 0 || p.Stage > 3):
		shard = fmt.Sprintf("FSDP stage %d", p.Stage)
	case p.FSDP:
		shard = [...]string{"FSDP NO_SHARD", "FSDP", "FSDP SHARD_GRAD_OP", "FSDP FULL_SHARD"}[p.Stage]
		if p.Stage == 3 && p.ShardGroup > 0 && p.ShardGroup < dp {
			shard = fmt.Sprintf("FSDP HYBRID_SHARD (groups of %d)", p.ShardGroup)
		}
	case p.Stage > 0:
		shard = fmt.Sprintf("ZeRO-%d", p.Stage)
	}
	if len(parts) == 0 {
		return fmt.Sprintf("DP %d, %s", dp, shard)
	}
	return fmt.Sprintf("%s × DP %d, %s", strings.Join(parts, " × "), dp, shard)
}

// AllocateFleet plans j over the fleet f: the least-communication layout
// (see Layouts) at which the job fits, then the batch, sequence and
// checkpointing as Allocate chooses them on one GPU of that layout. The
// costly changes that l allows (optimizer, precision, offload,
// alternative models) are tried only when no layout fits without them,
// layout by layout again. The plan's Ladder starts with one rung per
// layout tried (the job as given under it); Plan.Job.Parallel is the
// chosen layout. A maximizing Limits.Objective applies on the chosen
// layout, whose rung carries the maximum under it (Rung.LongestSeqLen,
// LargestBatch). When nothing fits, the error is the
// *InsufficientMemoryError of the last layout, with those rungs.
func AllocateFleet(f Fleet, j Job, l *Limits) (Plan, error) {
	if err := f.validate(); err != nil {
		return Plan{}, err
	}
	layouts := Layouts(f, j)
	var cheap Limits
	if l != nil {
		cheap = *l
	}
	cheap.Optimizers, cheap.Precisions, cheap.Offload, cheap.Models = nil, nil, 0, nil
	var rungs []Rung
	var prev gpumem.Bytes
	var last error
	passes := []*Limits{&cheap}
	if l != nil && (len(l.Optimizers) > 0 || len(l.Precisions) > 0 || l.Offload != 0 || len(l.Models) > 0) {
		passes = append(passes, l)
	}
	for pass, lim := range passes {
		for i, par := range layouts {
			jl := j
			jl.Parallel = par
			var p Plan
			var err error
			skip := false
			var r Rung
			if pass == 0 && (len(passes) > 1 || i < len(layouts)-1) {
				r, skip = cannotFit(f.Free, jl, lim)
			}
			if skip {
				// Allocate would search every rung and fail: its answer
				// here is its first rung, and its error is overwritten
				// by a later layout's (the last call is always made).
				err = &InsufficientMemoryError{Ladder: []Rung{r}}
			} else {
				p, err = Allocate(f.Free, jl, lim)
			}
			var ime *InsufficientMemoryError
			if err != nil && !errors.As(err, &ime) {
				return Plan{}, err
			}
			inner := p.Ladder
			if ime != nil {
				inner = ime.Ladder
			}
			if pass == 0 {
				// The layout's rung is the job as given under it: the
				// first rung of Allocate's own ladder.
				r := Rung{Change: "layout " + par.Describe(), Cost: layoutCost(par)}
				if len(inner) > 0 {
					r.Allocated, r.Device, r.Fits = inner[0].Allocated, inner[0].Device, inner[0].Fits
					r.LongestSeqLen, r.LargestBatch = inner[0].LongestSeqLen, inner[0].LargestBatch
				}
				if i > 0 && prev > r.Device {
					r.Saving = prev - r.Device
				}
				prev = r.Device
				rungs = append(rungs, r)
			}
			if len(inner) > 0 {
				inner = inner[1:]
			}
			if err == nil {
				ladder := rungs
				if pass == 0 {
					ladder = rungs[:i+1]
				}
				ladder = append([]Rung(nil), ladder...)
				ladder[i].Applied = true
				p.Ladder = append(ladder, inner...)
				return p, nil
			}
			last = err
			ime.Ladder = inner
		}
	}
	var ime *InsufficientMemoryError
	if errors.As(last, &ime) {
		e := *ime
		e.Ladder = append(append([]Rung(nil), rungs...), ime.Ladder...)
		return Plan{}, &e
	}
	if last == nil {
		last = gpumem.Errorf("Fleet", f.GPUs(), gpumem.ErrDoesNotFit, "no layout of %d GPUs applies to %s", f.GPUs(), j.Model.spec.Name)
	}
	return Plan{}, last
}

// layoutCost says what a layout costs in communication.
// cannotFit reports whether Allocate(free, j, lim) cannot fit j with
// the first pass's Limits (kernels, losses, checkpointing, batch and
// sequence; no change of model, precision, optimizer or offload)
// because the model states alone exceed the budget (statesBound), and
// returns the rung Allocate would begin its ladder with (the job as
// given). It is false whenever Allocate would answer otherwise than with
// that ladder's InsufficientMemoryError: arguments it refuses, a job as
// given that does not estimate.
func cannotFit(free gpumem.Bytes, j Job, lim *Limits) (Rung, bool) {
	a, given, err := prepareAllocate(free, j, lim)
	if err != nil {
		return Rung{}, false
	}
	if states, ok := statesBound(&given); !ok || states <= a.budget() {
		return Rung{}, false
	}
	b, fits, err := a.fits(given)
	if err != nil || fits {
		return Rung{}, false
	}
	return Rung{Change: "as given", Allocated: b.Allocated(), Device: b.Device(), Fits: false, Applied: true,
		Cost: Cost{Kind: CostNone, Text: "—"}}, true
}

func layoutCost(p Parallel) Cost {
	var parts []string
	switch {
	case p.GPUs() <= 1:
		return Cost{Kind: CostNone, Text: "none"}
	case p.Stage == 0 && p.TensorParallel <= 1 && p.PipelineParallel <= 1:
		parts = append(parts, "gradient all-reduce (2Ψ per step)")
	case p.Stage == 1 || p.Stage == 2:
		parts = append(parts, "reduce-scatter + all-gather (2Ψ, as all-reduce)")
	case p.Stage == 3:
		parts = append(parts, "parameter all-gathers in forward and backward (3Ψ, 1.5×)")
	}
	if p.TensorParallel > 1 {
		parts = append(parts, "activation all-reduces in every block (within a node)")
	}
	if p.PipelineParallel > 1 {
		parts = append(parts, "pipeline bubble (p−1)/m over micro-batches")
	}
	return Cost{Kind: CostCommunication, Text: strings.Join(parts, "; ")}
}
