package budget

// The ladder: the changes Allocate may make, in order of cost, and the
// rungs they build.

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// change is one candidate rung.
type change struct {
	text  string
	cost  Cost
	apply func(*Job)
	model string // the Alternative's name, for a model change
}

// maximizeRungs is the rung search of the maximizing objectives: for
// each rung of the ladder, the longest sequence (MaximizeSeqLen) or the
// largest batch (MaximizeBatch) that fits there with the rest of the
// workload at its smallest, recorded in the rung. It returns the
// earliest rung of the largest maximum, that maximum and the component
// one more would overflow with; or the last rung and a zero maximum when
// nothing fits anywhere (Allocate then reports the shortfall).
func (a *allocator) maximizeRungs(ladder []Rung, jobs []Job, given Job) (rung, maximum int, stop string, err error) {
	rung, hint := -1, 0
	for i := range jobs {
		small := a.shrink(jobs[i])
		if _, ok, err := a.fitsCandidate(small); err != nil {
			return 0, 0, "", err
		} else if !ok {
			continue
		}
		var m int
		var s string
		if a.objective == MaximizeBatch {
			m, s, err = a.maximizeBatch(small, max(hint, given.Batch))
			ladder[i].LargestBatch = m
		} else {
			m, s, err = a.maximizeSeq(small, max(hint, given.SeqLen, a.minSeq))
			ladder[i].LongestSeqLen = m
		}
		if err != nil {
			return 0, 0, "", err
		}
		hint = m
		if m > maximum {
			rung, maximum, stop = i, m, s
		}
	}
	if rung < 0 {
		return len(jobs) - 1, 0, "", nil
	}
	return rung, maximum, stop, nil
}

// changes lists the candidate rungs for j, in order of cost.
func (a *allocator) changes(j Job) []change {
	l := &a.lim
	var cs []change
	kernels := l.Attention
	if kernels == nil {
		kernels = []model.Attention{model.SDPA}
	}
	for _, k := range kernels {
		cs = append(cs, change{
			text: "attention → " + k.String(),
			cost: Cost{Kind: CostNone, Text: "another kernel for the same attention"},
			apply: func(x *Job) {
				x.Attention = k
				if k != model.Eager {
					x.HeadChunk = 0
				}
			},
		})
	}
	for _, hc := range l.HeadChunks {
		cs = append(cs, change{
			text: "eager attention " + strconv.Itoa(hc) + " head(s) at a time",
			cost: Cost{Kind: CostNone, Text: "a loop over head slices"},
			apply: func(x *Job) {
				if x.Attention == model.Eager {
					x.HeadChunk = hc
				}
			},
		})
	}
	if j.Mode == Training {
		// A loss that holds fewer logits costs no recompute: before
		// checkpointing.
		for _, lo := range l.Losses {
			cs = append(cs, change{
				text:  "loss → " + lo.String(),
				cost:  Cost{Kind: CostNone, Text: "the same cross-entropy without holding every logit (a kernel library)"},
				apply: func(x *Job) { x.Loss = lo },
			})
		}
		policies := l.Checkpointing
		if policies == nil {
			policies = []model.Checkpointing{model.FullCheckpointing}
		}
		for _, c := range policies {
			cs = append(cs, change{
				text: "checkpointing → " + c.String(),
				cost: Cost{Kind: CostRecompute},
				apply: func(x *Job) {
					x.Checkpointing = c
					if c == model.EveryKCheckpointing && x.CheckpointEvery == 0 {
						x.CheckpointEvery = 2
					}
				},
			})
		}
		for _, o := range l.Optimizers {
			if j.Optimizer == nil {
				break // no step (Gradients NoStep or InputGradients, or a frozen model)
			}
			cs = append(cs, change{
				text:  "optimizer → " + o.String(),
				cost:  Cost{Kind: CostNumerics, Text: "a different optimizer state"},
				apply: func(x *Job) { x.Optimizer = o },
			})
		}
	}
	for _, p := range l.Precisions {
		cs = append(cs, change{
			text:  "precision → " + p.String(),
			cost:  Cost{Kind: CostNumerics, Text: "lower-precision weights or state"},
			apply: func(x *Job) { x.Precision = p },
		})
	}
	if l.Offload&OffloadCopies != 0 && len(j.Copies) > 1 {
		cs = append(cs, change{
			text:  "offload frozen models to the CPU",
			cost:  Cost{Kind: CostTransfer, Text: "each frozen model is copied to the GPU when it runs"},
			apply: func(x *Job) { x.Offload |= OffloadCopies },
		})
	}
	if l.Offload&OffloadOptimizer != 0 && j.Mode == Training {
		cs = append(cs, change{
			text:  "offload optimizer state to the CPU",
			cost:  Cost{Kind: CostTransfer, Text: "gradients to the host and weights back every step; the step runs on the CPU"},
			apply: func(x *Job) { x.Offload |= OffloadOptimizer },
		})
	}
	for _, m := range l.Models {
		cs = append(cs, change{
			text:  "model → " + m.Name,
			model: m.Name,
			cost:  Cost{Kind: CostTraining},
			apply: func(x *Job) {
				x.Model = m.Model
			},
		})
	}
	return cs
}

// ladder applies the allowed changes to j in order, keeping those that
// lower the peak of j as given. It returns the ladder (rung 0 is j
// itself), the job after each rung, and the first rung at which j fits
// (-1: none).
func (a *allocator) ladder(j Job) ([]Rung, []Job, []change, int, error) {
	b, ok, err := a.fits(j)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	cs := a.changes(j)
	// At most one rung per change: sized once (a Job is 1.8 KB, and
	// growing the slice copied them over and over).
	steps := make([]Rung, 1, len(cs)+1)
	steps[0] = Rung{Change: "as given", Allocated: b.Allocated(), Device: b.Device(), Fits: ok, Applied: true,
		Cost: Cost{Kind: CostNone, Text: "—"}}
	jobs := make([]Job, 1, len(cs)+1)
	jobs[0] = j
	applied := make([]change, 1, len(cs)+1)
	first := -1
	if ok {
		first = 0
	}
	cur, curB := j, b
	for _, c := range cs {
		// The change applies to the allocator's scratch Job: a local
		// whose address a func value takes would move to the heap.
		a.scratch = cur
		c.apply(&a.scratch)
		x := a.scratch
		nb, ok, err := a.fits(x)
		if err != nil {
			if errors.Is(err, gpumem.ErrInvalid) || errors.Is(err, gpumem.ErrUnsupported) {
				continue // not applicable to this job
			}
			return nil, nil, nil, 0, err
		}
		if nb.Device() >= curB.Device() {
			continue
		}
		cost := c.cost
		if cost.Kind == CostRecompute {
			cost.Recompute, cost.Text = recompute(x)
		}
		if cost.Kind == CostTraining {
			cost.Text = "weights " + (curB.Weights + curB.Master).String() + " → " + (nb.Weights + nb.Master).String()
			if x.Mode == Training {
				_, tr := x.Model.Params()
				_, was := cur.Model.Params()
				cost.Text += "; trains " + gpumem.Thousands(tr) + " parameters instead of " + gpumem.Thousands(was)
			}
		}
		steps = append(steps, Rung{Change: c.text, Allocated: nb.Allocated(), Device: nb.Device(),
			Saving: curB.Device() - nb.Device(), Cost: cost, Fits: ok})
		jobs = append(jobs, x)
		applied = append(applied, c)
		if ok && first < 0 {
			first = len(jobs) - 1
		}
		cur, curB = x, nb
	}
	return steps, jobs, applied, first, nil
}

// recompute returns the recompute fraction of j's checkpointing policy.
func recompute(j Job) (float64, string) {
	_, _, _, cDT := j.Precision.dtypes()
	var buf [8]model.LayerActivations
	act, err := j.Model.spec.AppendActivations(buf[:0], workload(&j, cDT))
	if err != nil {
		return 0, "recomputes part of the forward pass"
	}
	return act.Recompute, fmt.Sprintf("recomputes %.0f%% of a forward pass", 100*act.Recompute)
}
