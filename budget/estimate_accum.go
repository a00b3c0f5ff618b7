package budget

// The peak accumulator: the components live at each moment, and the
// optimizer step's transients (the optimizer in backward included).

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/optimizer"
)

// accumulator sums byte counts and keeps the first error, so that the
// composition reads as arithmetic.
type accumulator struct{ err error }

func (a *accumulator) add(b gpumem.Bytes, err error) gpumem.Bytes {
	if err != nil && a.err == nil {
		a.err = err
	}
	return b
}

// sum is checked.Add (x|y|s is negative when an operand or the sum is),
// small enough to inline: Estimate sums about fifty times.
func (a *accumulator) sum(x, y gpumem.Bytes) gpumem.Bytes {
	if s := x + y; x|y|s >= 0 {
		return s
	}
	return a.overflow()
}

// overflow records a sum that overflows (or a negative operand) and
// returns 0. Kept out of line so that sum inlines.
//
//go:noinline
func (a *accumulator) overflow() gpumem.Bytes {
	if a.err == nil {
		a.err = errOverflow("peak")
	}
	return 0
}

// pagedFigures is the optimizer state in CUDA unified memory
// ([optimizer.PagedState]): all of it, and the largest one tensor's.
type pagedFigures struct{ all, one gpumem.Bytes }

// addPaged counts n tensors of b bytes each of paged state in p.
func (a *accumulator) addPaged(p *pagedFigures, b gpumem.Bytes, n int64) {
	t, ok := checked.Mul(int64(b), n)
	if !ok {
		a.add(0, errOverflow("paged optimizer state"))
		return
	}
	p.all, p.one = a.sum(p.all, gpumem.Bytes(t)), max(p.one, b)
}

// inBwdFigures is what a step inside backward holds at a time, by
// where in backward it happens: each is the largest trainable tensor's
// gradient of its kind (in the gradient dtype, rounded to the
// allocator's 512 bytes) and the largest step transient of one such
// tensor ([optimizer.Optimizer.Transient] of a one-tensor list: what a
// per-parameter optimizer allocates, foreach or for-loop alike).
type inBwdFigures struct {
	// The head and final norm step right after the loss backward,
	// with every block's activations saved; the blocks' tensors while
	// blocks are released; the embeddings at the end of backward.
	headGrad, headStep, layerGrad, layerStep, embedGrad, embedStep gpumem.Bytes
	// held is a tied embedding's gradient: the parameter feeds both the
	// embedding and the head, so autograd sums the two contributions
	// in the AccumulateGrad node's input buffer and runs the node (and
	// the hook that steps it) only after the embedding's backward, at
	// the very end. The head's contribution is alive from the head's
	// backward on.
	held gpumem.Bytes
}

// optimizerInBackward returns, for a job that steps each parameter
// inside backward with an optimizer of its own (Job.OptimizerInBackward,
// one GPU), the persistent state of all those optimizers, stepped in dt
// — state shared per optimizer (bitsandbytes' quantization maps) is kept
// once per parameter, since each has its own optimizer — and what one
// step holds at a time, with gradients in gdt.
func (a *accumulator) optimizerInBackward(j *Job, gdt, dt gpumem.DType) (state gpumem.Bytes, f inBwdFigures, paged pagedFigures) {
	m := &j.Model
	sh, shared := j.Optimizer.(optimizer.SharedState)
	ps, isPaged := j.Optimizer.(optimizer.PagedState)
	// The prepared inventory has one tensor per trainable group, in the
	// groups' order: one-tensor lists are slices of it, without
	// allocating.
	_, reps := m.stepped(dt)
	r := 0
	for i := range m.groups {
		g := &m.groups[i]
		if !g.trainable {
			continue
		}
		var one []gpumem.Tensor
		if r < len(reps) && reps[r].DType == dt {
			one = reps[r : r+1 : r+1]
		} else {
			one = []gpumem.Tensor{{Name: g.name, Shape: g.shape, DType: dt}}
		}
		r++
		s, err := j.Optimizer.State(one[0])
		if err != nil {
			a.add(0, err)
			return 0, inBwdFigures{}, pagedFigures{}
		}
		if isPaged {
			a.addPaged(&paged, a.add(ps.ManagedState(one[0])), g.count)
		}
		if shared {
			x, err := sh.SharedBytes(one)
			if err != nil {
				a.add(0, err)
				return 0, inBwdFigures{}, pagedFigures{}
			}
			s = a.sum(s, x)
		}
		p, ok := checked.Mul(int64(s), g.count)
		if !ok {
			a.add(0, errOverflow("optimizer state"))
			return 0, inBwdFigures{}, pagedFigures{}
		}
		state = a.sum(state, gpumem.Bytes(p))
		gb, err := gdt.Size(g.elems)
		if err != nil {
			a.add(0, err)
			return 0, inBwdFigures{}, pagedFigures{}
		}
		grad := gpumem.Bytes(roundAlloc(int64(gb)))
		step := a.add(j.Optimizer.Transient(one))
		switch g.comp {
		case compHead:
			f.headGrad, f.headStep = max(f.headGrad, grad), max(f.headStep, step)
		case compEmbed:
			f.embedGrad, f.embedStep = max(f.embedGrad, grad), max(f.embedStep, step)
		default:
			f.layerGrad, f.layerStep = max(f.layerGrad, grad), max(f.layerStep, step)
		}
	}
	if m.tied {
		f.held = f.embedGrad
	}
	return state, f, paged
}

// optimizer returns the optimizer's persistent state for the trainable
// groups as the rank v holds them (nil: the whole model), stepped in dt,
// its step transient, and the part of the state in unified memory. The whole model's step uses the inventory
// NewModel prepared; a rank's is built per call (it allocates).
func (a *accumulator) optimizer(j *Job, v *rankView, dt gpumem.DType) (state, step gpumem.Bytes, paged pagedFigures) {
	m := &j.Model
	ps, isPaged := j.Optimizer.(optimizer.PagedState)
	runs, reps := m.stepped(dt)
	if v != nil {
		runs, reps = nil, nil
	}
	for i := range m.groups {
		g := &m.groups[i]
		if !g.trainable {
			continue
		}
		t, n := gpumem.Tensor{Name: g.name, Shape: g.shape, DType: dt}, g.count
		if v != nil {
			if n = v.count(g, m.layers); n == 0 {
				continue
			}
			t.Shape = g.rankShape(v.elems(g))
			runs = append(runs, optimizer.Run{Tensor: t, Count: n})
			reps = append(reps, t)
		}
		s, err := j.Optimizer.State(t)
		if err != nil {
			a.add(0, err)
			return 0, 0, pagedFigures{}
		}
		p, ok := checked.Mul(int64(s), n)
		if !ok {
			a.add(0, errOverflow("optimizer state"))
			return 0, 0, pagedFigures{}
		}
		state = a.sum(state, gpumem.Bytes(p))
		if isPaged {
			a.addPaged(&paged, a.add(ps.ManagedState(t)), n)
		}
	}
	if sh, ok := j.Optimizer.(optimizer.SharedState); ok {
		// State kept once per optimizer (bitsandbytes' quantization
		// maps): a few KiB.
		// One tensor of each run tells what the state is kept for.
		state = a.sum(state, a.add(sh.SharedBytes(reps)))
	}
	step = a.add(optimizer.TransientRuns(j.Optimizer, runs))
	return state, step, paged
}
