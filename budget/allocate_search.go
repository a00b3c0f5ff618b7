package budget

// The allocator's search: its state, the fit test of a candidate, and the
// largest batch, sequence or buffer that fits.

import (
	"errors"
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// allocator holds one Allocate call's state.
type allocator struct {
	free, headroom gpumem.Bytes
	lim            Limits
	minBatch       int
	maxBatch       int
	minSeq, maxSeq int
	varySeq        bool
	objective      Objective // resolved: never ObjectiveDefault
	// scratch is the Job a change applies to (change.apply).
	scratch Job
}

// budget is the device bytes a plan may use.
func (a *allocator) budget() gpumem.Bytes {
	return gpumem.Bytes(checked.SatSub(int64(a.free), int64(a.headroom)))
}

// fits estimates j and reports whether it fits the budget.
func (a *allocator) fits(j Job) (Breakdown, bool, error) {
	b, err := Estimate(j)
	if err != nil {
		return b, false, err
	}
	return b, b.Required() <= a.budget(), nil
}

// fitsCandidate is fits for a candidate of a search: a candidate whose
// estimate overflows (gpumem.ErrRange: bytes beyond int64, or more than
// 2^40 tokens) does not fit, with a zero Breakdown, since a job that big
// needs more than any device has; the search goes on below it.
func (a *allocator) fitsCandidate(j Job) (Breakdown, bool, error) {
	b, ok, err := a.fits(j)
	if errors.Is(err, gpumem.ErrRange) {
		return Breakdown{}, false, nil
	}
	return b, ok, err
}

// maximizeSeq returns the longest sequence in [minSeq, maxSeq] at which j
// fits (j fits at minSeq), searching from hint, and the component the
// next token would overflow with.
func (a *allocator) maximizeSeq(j Job, hint int) (int, string, error) {
	return a.maximize(a.minSeq, a.maxSeq, min(hint, a.maxSeq), func(v int) Job {
		x := j
		x.SeqLen = v
		return x
	})
}

// withWorkload returns cfg with w's batch, sequence, accumulation and
// buffers.
func withWorkload(cfg, w Job) Job {
	cfg.Batch, cfg.SeqLen, cfg.GradAccum, cfg.Buffers = w.Batch, w.SeqLen, w.GradAccum, w.Buffers
	return cfg
}

func hasElastic(bs []Buffer) bool {
	for _, b := range bs {
		if b.Elastic {
			return true
		}
	}
	return false
}

func newAllocator(free gpumem.Bytes, j Job, lim *Limits) (*allocator, error) {
	a := &allocator{free: free}
	if lim != nil {
		a.lim = *lim
	}
	l := &a.lim
	if free <= 0 {
		return nil, gpumem.Errorf("free", free, gpumem.ErrInvalid, "must be positive")
	}
	switch {
	case l.MinBatch < 0:
		return nil, gpumem.Errorf("Limits.MinBatch", l.MinBatch, gpumem.ErrInvalid, "must not be negative")
	case l.MaxBatch < 0:
		return nil, gpumem.Errorf("Limits.MaxBatch", l.MaxBatch, gpumem.ErrInvalid, "must not be negative")
	case l.TargetGlobalBatch < 0:
		return nil, gpumem.Errorf("Limits.TargetGlobalBatch", l.TargetGlobalBatch, gpumem.ErrInvalid, "must not be negative")
	case l.MinSeqLen < 0:
		return nil, gpumem.Errorf("Limits.MinSeqLen", l.MinSeqLen, gpumem.ErrInvalid, "must not be negative")
	case l.MaxSeqLen < 0:
		return nil, gpumem.Errorf("Limits.MaxSeqLen", l.MaxSeqLen, gpumem.ErrInvalid, "must not be negative")
	case math.IsNaN(l.HeadroomFraction) || l.HeadroomFraction >= 1:
		return nil, gpumem.Errorf("Limits.HeadroomFraction", l.HeadroomFraction, gpumem.ErrInvalid, "must be below 1 (negative: none)")
	case l.Offload&^(OffloadOptimizer|OffloadCopies|OffloadParams) != 0:
		return nil, gpumem.Errorf("Limits.Offload", l.Offload, gpumem.ErrInvalid, "want OffloadOptimizer, OffloadCopies or both")
	case l.Offload&OffloadParams != 0:
		return nil, gpumem.Errorf("Limits.Offload", l.Offload, gpumem.ErrUnsupported, "Allocate does not try parameter offload; set Job.Offload")
	}
	a.minBatch = max(l.MinBatch, 1)
	a.maxBatch = l.MaxBatch
	if a.maxBatch == 0 {
		a.maxBatch = DefaultMaxBatch
		if l.TargetGlobalBatch > 0 {
			dp := max(j.Parallel.DataParallel, 1)
			a.maxBatch = max((l.TargetGlobalBatch+dp-1)/dp, 1)
		}
	}
	if a.minBatch > a.maxBatch {
		return nil, gpumem.Errorf("Limits.MinBatch", l.MinBatch, gpumem.ErrInvalid, "above MaxBatch %d", a.maxBatch)
	}
	if l.MaxSeqLen > 0 || l.MinSeqLen > 0 {
		a.varySeq = true
		a.minSeq = max(l.MinSeqLen, 1)
		a.maxSeq = l.MaxSeqLen
		if a.maxSeq == 0 {
			a.maxSeq = max(j.SeqLen, a.minSeq)
		}
		if a.minSeq > a.maxSeq {
			return nil, gpumem.Errorf("Limits.MinSeqLen", l.MinSeqLen, gpumem.ErrInvalid, "above MaxSeqLen %d", a.maxSeq)
		}
	}
	switch a.objective = l.Objective; {
	case l.Objective > MaximizeBatch:
		return nil, gpumem.Errorf("Limits.Objective", l.Objective, gpumem.ErrInvalid, "want FitAsGiven, MaximizeSeqLen or MaximizeBatch")
	case l.Objective == MaximizeSeqLen && !a.varySeq:
		return nil, gpumem.Errorf("Limits.Objective", l.Objective, gpumem.ErrInvalid, "MaximizeSeqLen needs Limits.MaxSeqLen (the longest sequence to try)")
	case l.Objective == ObjectiveDefault && a.varySeq && a.maxSeq > a.minSeq:
		a.objective = MaximizeSeqLen
	case l.Objective == ObjectiveDefault:
		a.objective = FitAsGiven
	}
	for i, hc := range l.HeadChunks {
		if hc < 1 || hc > 1<<20 {
			return nil, gpumem.Errorf("Limits.HeadChunks["+strconv.Itoa(i)+"]", hc, gpumem.ErrInvalid, "must be in [1, 2^20]")
		}
	}
	for i, lo := range l.Losses {
		if !lo.Valid() {
			return nil, gpumem.Errorf("Limits.Losses["+strconv.Itoa(i)+"]", lo, gpumem.ErrInvalid, "want a known loss (a chunked one with 1 to 2^20 chunks)")
		}
	}
	for i, o := range l.Optimizers {
		if o == nil {
			return nil, gpumem.Errorf("Limits.Optimizers["+strconv.Itoa(i)+"]", nil, gpumem.ErrInvalid, "nil optimizer")
		}
	}
	for i, m := range l.Models {
		if !m.Model.valid() {
			return nil, gpumem.Errorf("Limits.Models["+strconv.Itoa(i)+"].Model", m.Name, gpumem.ErrInvalid, "build it with budget.NewModel")
		}
	}
	for name, n := range l.BufferMin {
		if n < 0 {
			return nil, gpumem.Errorf("Limits.BufferMin["+name+"]", n, gpumem.ErrInvalid, "must not be negative")
		}
	}
	a.headroom = l.HeadroomFor(free)
	return a, nil
}

// setAccum sets GradAccum from the target global batch.
func (a *allocator) setAccum(j *Job) {
	if t := a.lim.TargetGlobalBatch; t > 0 && j.Mode == Training {
		per := j.Batch * max(j.Parallel.DataParallel, 1) // sequences per micro-step over every rank
		j.GradAccum = (t + per - 1) / per
	}
}

// shrink returns j at the smallest allowed workload: MinBatch, MinSeqLen
// when the sequence may vary, elastic buffers at their minimum.
func (a *allocator) shrink(j Job) Job {
	j.Batch = a.minBatch
	if a.varySeq {
		j.SeqLen = a.minSeq
	}
	a.setAccum(&j)
	if hasElastic(j.Buffers) {
		bs := append([]Buffer(nil), j.Buffers...)
		for i := range bs {
			if bs[i].Elastic {
				bs[i].Entries = min(a.lim.BufferMin[bs[i].Name], bs[i].Entries)
			}
		}
		j.Buffers = bs
	}
	return j
}

// maximizeBatch returns the largest batch in [minBatch, maxBatch] at
// which j fits, starting the search at hint. Fits is monotone in the
// batch within each accumulation regime (GradAccum > 1 keeps gradients
// through forward; 1 does not), so each regime is searched on its own.
func (a *allocator) maximizeBatch(j Job, hint int) (int, string, error) {
	at := func(v int) Job {
		x := j
		x.Batch = v
		a.setAccum(&x)
		return x
	}
	t := a.lim.TargetGlobalBatch
	if dp := max(j.Parallel.DataParallel, 1); t > 0 {
		t = (t + dp - 1) / dp // the micro-batch from which no accumulation is needed
	}
	if t > 0 && j.Mode == Training && t <= a.maxBatch && t > a.minBatch {
		// Batches from t up need no accumulation: search there first.
		if _, ok, err := a.fitsCandidate(at(t)); err != nil {
			return 0, "", err
		} else if ok {
			return a.maximize(t, a.maxBatch, t, at)
		}
		return a.maximize(a.minBatch, t-1, min(hint, t-1), at)
	}
	return a.maximize(a.minBatch, a.maxBatch, hint, at)
}

// maximize returns the largest v in [lo, hi] for which at(v) fits,
// given that at(lo) fits and fitting is monotone, with a galloping search
// from hint; and the dominant component of at(v+1) when v < hi.
func (a *allocator) maximize(lo, hi, hint int, at func(int) Job) (int, string, error) {
	v, stop, err := a.maximize64(int64(lo), int64(hi), int64(hint), func(x int64) Job { return at(int(x)) })
	return int(v), stop, err
}

// maximize64 is maximize over int64, hint outside (lo, hi] meaning none.
// The peak is close to affine in each quantity (activations, KV cache and
// buffers grow linearly; eager scores grow quadratically in the
// sequence), so the search probes where the line through the last two
// points meets the budget, then that point's neighbour, with a bisection
// every fifth probe so that it never takes more than about five times
// log2(hi − lo) estimates; a linear peak takes three or four.
func (a *allocator) maximize64(lo, hi, hint int64, at func(int64) Job) (int64, string, error) {
	limit := a.budget()
	good, bad := lo, hi+1
	bGood, _, err := a.fits(at(lo))
	if err != nil {
		return 0, "", err
	}
	var bBad Breakdown
	lastLo, pLastLo := lo, bGood.Device() // a second point for the slope before any miss
	lastOK := true
	// secant is where the line through the bracket (or, before any
	// miss, through the last two fits) meets the budget.
	secant := func() int64 {
		if bad <= hi {
			pg, pb := float64(bGood.Device()), float64(bBad.Device())
			if pb > pg {
				return good + int64(float64(bad-good)*(float64(limit)-pg)/(pb-pg))
			}
			return good + (bad-good)/2
		}
		pg, pl := float64(bGood.Device()), float64(pLastLo)
		if good > lastLo && pg > pl {
			step := (float64(limit) - pg) / ((pg - pl) / float64(good-lastLo))
			return min(good+int64(min(step, float64(hi-good)))+1, hi)
		}
		return min(good+max(good-lo, 1), hi) // gallop
	}
	for n := 0; bad-good > 1; n++ {
		var probe int64
		switch {
		case n == 0 && hint > lo && hint <= hi:
			probe = hint
		case n%5 == 1 || n%5 == 3: // the neighbour of the last probe
			if lastOK {
				probe = good + 1
			} else {
				probe = bad - 1
			}
		case n%5 == 4:
			probe = good + (bad-good)/2
		default:
			probe = secant()
		}
		if probe <= good || probe >= bad {
			probe = good + (bad-good)/2
		}
		b, ok, err := a.fitsCandidate(at(probe))
		if err != nil {
			return 0, "", err
		}
		if ok {
			lastLo, pLastLo = good, bGood.Device()
			good, bGood = probe, b
		} else {
			bad, bBad = probe, b
		}
		lastOK = ok
	}
	if good == hi {
		return good, "", nil
	}
	if bBad.Device() == 0 {
		if bBad, _, err = a.fitsCandidate(at(good + 1)); err != nil {
			return 0, "", err
		}
		if bBad.Device() == 0 {
			return good, "", nil // one more overflows: no component to name
		}
	}
	return good, growth(bGood, bBad), nil
}

// growth names the component that rises most from x to y (the dominant
// one of y when none rises).
func growth(x, y Breakdown) string {
	cx, cy := x.Components(), y.Components()
	best, name := gpumem.Bytes(0), y.Dominant().Name
	for i := range cy {
		if d := cy[i].Bytes - cx[i].Bytes; d > best {
			best, name = d, cy[i].Name
		}
	}
	return name
}

// insufficient builds the error for a job that does not fit at its
// smallest workload with every allowed change.
func (a *allocator) insufficient(need Breakdown, ladder []Rung, j Job) error {
	e := &InsufficientMemoryError{Need: need, Free: a.free, Shortfall: need.Required() - a.budget(),
		Dominant: need.Dominant(), Ladder: ladder}
	l := &a.lim
	// A hint is worth giving when its saving covers a tenth of the
	// shortfall: allowed together, such changes add up.
	short := e.Shortfall / 10
	if j.Mode == Training {
		if j.Checkpointing == model.NoCheckpointing && l.Checkpointing != nil && len(l.Checkpointing) == 0 && need.Activations >= short {
			e.Hints = append(e.Hints, "allow activation checkpointing")
		}
		state := need.Optimizer + need.Master
		if _, ok := j.Optimizer.(optimizer.AdamW8bit); !ok && j.Optimizer != nil && len(l.Optimizers) == 0 && 3*state/4 >= short {
			e.Hints = append(e.Hints, "allow an 8-bit optimizer")
		}
		if j.Optimizer != nil && j.Offload&OffloadOptimizer == 0 && l.Offload&OffloadOptimizer == 0 && state >= short {
			e.Hints = append(e.Hints, "allow optimizer offload")
		}
		if j.Optimizer != nil && len(l.Models) == 0 && state+need.Gradients >= short {
			e.Hints = append(e.Hints, "allow LoRA or QLoRA")
		}
		// Sharding optimizer state and gradients (ZeRO-2) over n ranks.
		state += need.Gradients
		rest := need.Required() - state
		if state > 0 && rest < a.budget() {
			n := int64(math.Ceil(float64(state) / float64(a.budget()-rest)))
			if n > 1 && n <= 1024 {
				e.Hints = append(e.Hints, "shard gradients and optimizer state (ZeRO-2) over "+strconv.FormatInt(n, 10)+" GPUs")
			}
		}
	}
	if len(j.Copies) > 1 && j.Offload&OffloadCopies == 0 && l.Offload&OffloadCopies == 0 {
		e.Hints = append(e.Hints, "allow offloading the frozen models")
	}
	if !a.varySeq && need.Activations+need.Logits+need.Attention+need.Transient >= short && j.SeqLen > 1 {
		e.Hints = append(e.Hints, "allow shorter sequences (Limits.MaxSeqLen)")
	}
	return e
}
