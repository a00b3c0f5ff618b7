package budget

import (
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// DefaultMaxBatch bounds the micro-batch when Limits.MaxBatch and
// Limits.TargetGlobalBatch are zero. It is a bound for the search, not a
// measured figure: a plan that reaches it says so (ReasonBatchLimit).
const DefaultMaxBatch = 4096

// DefaultHeadroomFraction is the share of the free memory Allocate leaves
// unused when Limits.HeadroomFraction is zero. It covers the estimate's
// measured error: the published reserved peaks of testdata/published fall
// at most 5.1% above Estimate (torchtune's Llama-2-7B LoRA runs, see
// calibrate_test.go); 5% of the free memory on top of the estimate's own
// 5% fragmentation covers them.
const DefaultHeadroomFraction = 0.05

// DefaultMaxSeqLen bounds LongestSeqLen's search: the longest sequence it
// reports. Like DefaultMaxBatch it is a bound for the search, not a
// measured figure.
const DefaultMaxSeqLen = 1 << 20

// DefaultHeadroom returns the memory left unused out of free bytes when
// no other headroom is asked for: DefaultHeadroomFraction of free,
// rounded down; zero when free is not positive. It is the one headroom of
// "the largest job that fits": Allocate with zero Limits.Headroom and
// HeadroomFraction, LargestBatch, LongestSeqLen and FitsWithHeadroom all leave
// exactly this much.
func DefaultHeadroom(free gpumem.Bytes) gpumem.Bytes {
	if free <= 0 {
		return 0
	}
	return gpumem.Bytes(DefaultHeadroomFraction * float64(free))
}

// FitsWithHeadroom reports whether a job that needs need fits on d with
// DefaultHeadroom(d.Free()) left unused: need.Required() + headroom against
// d.Free(). It is the test Allocate, LargestBatch and LongestSeqLen apply with
// default Limits, so that a job at the batch or sequence length they
// return fits here and one more does not. When it does not fit,
// shortfall is the missing amount, headroom included; when it does,
// shortfall is zero. Fits is the same test without the headroom (a job
// at 100% of the free memory fits there). Allocation-free.
func FitsWithHeadroom(need Breakdown, d gpumem.Device) (shortfall gpumem.Bytes, ok bool) {
	free := d.Free()
	usable := checked.SatSub(int64(free), int64(DefaultHeadroom(free)))
	s := gpumem.Bytes(checked.SatSub(int64(need.required()), usable))
	if s > 0 {
		return s, false
	}
	return 0, true
}

// Limits bounds what Allocate may change. The zero value (or a nil
// *Limits) lets Allocate choose the micro-batch in [1, DefaultMaxBatch],
// turn on full activation checkpointing for training, swap eager
// attention for SDPA (in PyTorch since 2.0), and shrink elastic buffers
// down to zero entries; it keeps the sequence length, optimizer,
// precision and trainable set, offloads nothing, leaves
// DefaultHeadroomFraction of the free memory unused, and fits the job as
// given with the fewest changes (see Objective).
type Limits struct {
	// Objective is what the allowed changes are for (zero,
	// ObjectiveDefault: MaximizeSeqLen when the sequence may vary over a
	// range, MaxSeqLen above MinSeqLen, else FitAsGiven).
	Objective Objective
	// MinBatch and MaxBatch bound the micro-batch (zero: 1, and
	// TargetGlobalBatch or else DefaultMaxBatch).
	MinBatch, MaxBatch int
	// MinSeqLen and MaxSeqLen let the sequence length vary, for jobs
	// that can take shorter or longer sequences. Both zero: the job's
	// SeqLen is kept. With MaxSeqLen set, Allocate takes the longest
	// sequence up to MaxSeqLen (at least MinSeqLen, zero meaning 1)
	// before growing the batch, and by default (Objective) makes the
	// allowed changes that lengthen it.
	MinSeqLen, MaxSeqLen int
	// TargetGlobalBatch is the number of sequences per optimizer step
	// over every data-parallel rank: GradAccum becomes
	// ceil(TargetGlobalBatch / (Batch × DataParallel)).
	TargetGlobalBatch int
	// Checkpointing lists the policies Allocate may turn on, in the
	// order to try them (cheapest recompute first). Nil: full
	// checkpointing (Hugging Face's gradient_checkpointing) for
	// training. An empty non-nil slice allows none.
	Checkpointing []model.Checkpointing
	// Attention lists the kernels Allocate may swap in, in the order to
	// try them. Nil: SDPA. Flash needs the flash-attn package, so it is
	// tried only when listed. An empty non-nil slice allows none.
	Attention []model.Attention
	// HeadChunks lists head-chunk sizes for eager attention
	// (Job.HeadChunk), largest first. Nil: none.
	HeadChunks []int
	// Optimizers lists substitutes for the job's optimizer, in order
	// (e.g. optimizer.AdamW8bit{}, optimizer.Adafactor{}). Nil: none.
	Optimizers []optimizer.Optimizer
	// Losses lists losses Allocate may swap in for a training job's
	// (Job.Loss: model.FusedLinearLoss, model.CutCrossEntropyLoss, a
	// model.ChunkedLoss), in order; a loss the model cannot take (no
	// causal LM head) is skipped. Nil: none.
	Losses []model.Loss
	// Precisions lists substitute precision policies, in order. Nil:
	// none.
	Precisions []Precision
	// Offload is what Allocate may move to host memory (OffloadCopies
	// is tried before OffloadOptimizer). Zero: nothing.
	Offload Offload
	// Models lists alternative set-ups of the same model — LoRA, QLoRA,
	// frozen parts — tried last, in order, because they change what is
	// trained. Nil: none.
	Models []Alternative
	// BufferMin is the smallest number of entries of each elastic
	// buffer, by name (missing: 0). The job's Entries are the largest.
	BufferMin map[string]int64
	// Headroom is memory left unused, in bytes, on top of
	// HeadroomFraction of the free memory (zero:
	// DefaultHeadroomFraction; negative: none). HeadroomFor adds them up.
	Headroom         gpumem.Bytes
	HeadroomFraction float64
}

// Objective is what Allocate uses the allowed changes (Limits.Attention,
// Checkpointing, Optimizers, ...) for: to make the job as given fit, or
// to push a maximum as far as they can.
type Objective uint8

const (
	// ObjectiveDefault is MaximizeSeqLen when the limits let the sequence
	// vary over a range (Limits.MaxSeqLen above Limits.MinSeqLen), and
	// FitAsGiven otherwise.
	ObjectiveDefault Objective = iota
	// FitAsGiven takes the changes up to the first rung of the ladder at
	// which the job as given (its Batch, SeqLen and buffers) fits, and
	// then the largest workload on that configuration: the fewest
	// changes that make the job run.
	FitAsGiven
	// MaximizeSeqLen takes the rung of the ladder at which the longest
	// sequence that fits (at the smallest batch) is longest, the
	// earliest, so the cheapest, of those that reach it; then the largest
	// batch there. A change is in the plan when it lengthens the
	// sequence: checkpointing on a job that already fits at a shorter
	// length is taken if it fits a longer one. It needs
	// Limits.MaxSeqLen.
	MaximizeSeqLen
	// MaximizeBatch is MaximizeSeqLen for the micro-batch: the rung at
	// which the largest batch (at MinSeqLen when the sequence varies) is
	// largest, the earliest of those; then the longest sequence there.
	MaximizeBatch
)

var objectiveNames = [...]string{ObjectiveDefault: "default", FitAsGiven: "fit", MaximizeSeqLen: "max-seq", MaximizeBatch: "max-batch"}

// String returns "default", "fit", "max-seq" or "max-batch".
func (o Objective) String() string {
	if int(o) < len(objectiveNames) {
		return objectiveNames[o]
	}
	return "Objective(" + strconv.Itoa(int(o)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (o Objective) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// HeadroomFor returns the memory Allocate leaves unused out of free
// bytes under l: Headroom (negative: none) plus HeadroomFraction of free
// (zero: DefaultHeadroom(free); negative: none). A nil *Limits gives
// DefaultHeadroom(free).
func (l *Limits) HeadroomFor(free gpumem.Bytes) gpumem.Bytes {
	if l == nil {
		return DefaultHeadroom(free)
	}
	h := max(l.Headroom, 0)
	switch frac := l.HeadroomFraction; {
	case frac == 0:
		h = gpumem.Bytes(checked.SatAdd(int64(h), int64(DefaultHeadroom(free))))
	case frac > 0 && free > 0:
		part := int64(math.MaxInt64)
		if f := frac * float64(free); f < math.MaxInt64 {
			part = int64(f)
		}
		h = gpumem.Bytes(checked.SatAdd(int64(h), part))
	}
	return h
}

// Allocate returns the job to run in free bytes of device memory: j with
// the batch, sequence length, gradient accumulation, checkpointing,
// attention kernel, optimizer, precision, offload, trainable set and
// buffer sizes that lim allows, chosen so that the estimate plus the
// headroom fits.
//
// The search builds the ladder first: starting from j as given, each
// allowed change is applied in order of cost — kernel swaps and head
// chunking (free), checkpointing (recompute, cheapest first), optimizer
// and precision substitutes (numerics), offload (transfers), alternative
// models (what is trained) — and kept when it lowers the peak. Which
// rung the plan takes depends on Limits.Objective:
//
//   - FitAsGiven (the default when the sequence does not vary): the
//     changes up to the first rung at which j fits as given (its Batch,
//     SeqLen and buffers); when none does, every change, and the
//     workload shrinks instead;
//   - MaximizeSeqLen (the default when Limits.MaxSeqLen lets the
//     sequence vary over a range) and MaximizeBatch: on every rung, the
//     longest sequence (or largest batch) that fits, recorded in the
//     rung (Rung.LongestSeqLen, Rung.LargestBatch); the plan takes the earliest
//     rung of the largest, so a change is made when it pushes the
//     maximum, even if the job as given fits without it.
//
// On that configuration it maximizes the tokens of a micro-step — the
// sequence first when Limits.MaxSeqLen lets it vary, then the batch (the
// batch first under MaximizeBatch) — and then the elastic buffers, in
// order, each by an exact integer search (the peak is monotone in each).
// Costly changes the final workload does not need are dropped again.
// GradAccum follows from Limits.TargetGlobalBatch.
//
// When even the smallest workload does not fit with every change, the
// error is an *InsufficientMemoryError carrying the ladder. Invalid jobs
// or limits return a *gpumem.FieldError. Allocate is deterministic and
// safe for concurrent use.
func Allocate(free gpumem.Bytes, j Job, lim *Limits) (Plan, error) {
	a, given, err := prepareAllocate(free, j, lim)
	if err != nil {
		return Plan{}, err
	}
	ladder, jobs, changes, firstFit, err := a.ladder(given)
	if err != nil {
		return Plan{}, err
	}
	rung := firstFit
	if rung < 0 {
		rung = len(jobs) - 1
	}
	// A maximizing objective searches every rung; the chosen rung's
	// maximum, at the smallest workload, is the first search below.
	var first struct {
		v    int
		stop string
	}
	if a.objective != FitAsGiven {
		if rung, first.v, first.stop, err = a.maximizeRungs(ladder, jobs, given); err != nil {
			return Plan{}, err
		}
	}
	cfg := jobs[rung]

	// The smallest workload on that rung.
	small := a.shrink(cfg)
	need, ok, err := a.fits(small)
	if err != nil {
		return Plan{}, err
	}
	if !ok {
		return Plan{}, a.insufficient(need, ladder, small)
	}
	for i := 1; i <= rung; i++ {
		ladder[i].Applied = true
	}
	// Changes after the first rung: the plan's rung is the earliest
	// that fits, but a costly change before it may have become
	// unnecessary once a later one was made (offload before LoRA).
	p := Plan{Free: free, Ladder: ladder, Objective: a.objective}
	best := small
	// The sequence first, when it may vary, then the batch; the batch
	// first when it is the objective.
	growSeq := func() error {
		if !a.varySeq {
			return nil
		}
		s, stop := first.v, first.stop
		if a.objective != MaximizeSeqLen || s == 0 {
			var err error
			if s, stop, err = a.maximizeSeq(best, max(given.SeqLen, a.minSeq)); err != nil {
				return err
			}
		}
		best.SeqLen = s
		switch {
		case s < a.maxSeq:
			p.Reason, p.Limiting = ReasonMemory, stop
		case p.Reason != ReasonMemory:
			p.Reason = ReasonSeqLimit
		}
		return nil
	}
	growBatch := func() error {
		b, stop := first.v, first.stop
		if a.objective != MaximizeBatch || b == 0 {
			var err error
			if b, stop, err = a.maximizeBatch(best, given.Batch); err != nil {
				return err
			}
		}
		best.Batch = b
		a.setAccum(&best)
		switch {
		case b < a.maxBatch:
			p.Reason, p.Limiting = ReasonMemory, stop
		case p.Reason != ReasonMemory:
			p.Reason = ReasonBatchLimit
		}
		return nil
	}
	order := []func() error{growSeq, growBatch}
	if a.objective == MaximizeBatch {
		order[0], order[1] = growBatch, growSeq
	}
	for _, grow := range order {
		if err := grow(); err != nil {
			return Plan{}, err
		}
	}
	// Elastic buffers, in order, up to the job's sizes.
	grown := true
	for i := range best.Buffers {
		if !best.Buffers[i].Elastic {
			continue
		}
		hi := cfg.Buffers[i].Entries
		lo := best.Buffers[i].Entries
		n, stop, err := a.maximize64(lo, hi, hi, func(v int64) Job {
			x := best
			x.Buffers = append([]Buffer(nil), best.Buffers...)
			x.Buffers[i].Entries = v
			return x
		})
		if err != nil {
			return Plan{}, err
		}
		best.Buffers = append([]Buffer(nil), best.Buffers...)
		best.Buffers[i].Entries = n
		if n < hi {
			grown = false
			if p.Reason != ReasonMemory {
				p.Reason, p.Limiting = ReasonMemory, stop
			}
		}
	}
	if grown && (p.Reason == ReasonBatchLimit || p.Reason == ReasonSeqLimit) && hasElastic(best.Buffers) {
		p.Reason = ReasonBufferLimit
	}

	if p.Need, err = Estimate(best); err != nil {
		return Plan{}, err
	}
	// A rung before the chosen one may already hold the final workload
	// when the job as given fitted nowhere: take the cheapest.
	if firstFit < 0 {
		for r := 0; r < rung; r++ {
			x := withWorkload(jobs[r], best)
			if nb, ok, err := a.fits(x); err == nil && ok {
				for i := r + 1; i <= rung; i++ {
					p.Ladder[i].Applied = false
				}
				best, p.Need = x, nb
				break
			}
		}
	}
	// Drop costly changes the final job does not need, the most recent
	// first, keeping the workload: each must still fit without them.
	for i := len(p.Ladder) - 1; i > 0; i-- {
		if !p.Ladder[i].Applied || p.Ladder[i].Cost.Kind == CostNone {
			continue
		}
		p.Ladder[i].Applied = false
		a.scratch = given
		for k := 1; k < len(p.Ladder); k++ {
			if p.Ladder[k].Applied {
				changes[k].apply(&a.scratch)
			}
		}
		x := withWorkload(a.scratch, best)
		if nb, ok, err := a.fits(x); err == nil && ok {
			best, p.Need = x, nb
		} else {
			p.Ladder[i].Applied = true
		}
	}
	p.Job = best
	p.Batch, p.SeqLen, p.GradAccum = best.Batch, best.SeqLen, max(best.GradAccum, 1)
	p.Checkpointing, p.Attention, p.HeadChunk = best.Checkpointing, best.Attention, best.HeadChunk
	p.Optimizer, p.Precision, p.Offload = best.Optimizer, best.Precision, best.Offload
	p.Buffers = best.Buffers
	for i := len(p.Ladder) - 1; i > 0; i-- {
		if p.Ladder[i].Applied && changes[i].model != "" {
			p.ModelName = changes[i].model
			break
		}
	}
	p.Headroom, p.MinHeadroom = free-p.Need.Required(), a.headroom
	return p, nil
}

// prepareAllocate checks Allocate's arguments and returns its allocator
// and the job as given: buffers at their sizes, batch (and sequence,
// when it may vary) within limits, accumulation for the target batch.
func prepareAllocate(free gpumem.Bytes, j Job, lim *Limits) (*allocator, Job, error) {
	if err := j.validate(); err != nil {
		return nil, Job{}, err
	}
	if j.Mode == Load {
		return nil, Job{}, gpumem.Errorf("Job.Mode", j.Mode, gpumem.ErrInvalid,
			"a Load job has no batch or sequence to plan; Estimate tells whether it loads")
	}
	a, err := newAllocator(free, j, lim)
	if err != nil {
		return nil, Job{}, err
	}
	given := j
	given.Batch = min(max(j.Batch, a.minBatch), a.maxBatch)
	if a.varySeq {
		given.SeqLen = min(max(j.SeqLen, a.minSeq), a.maxSeq)
	}
	a.setAccum(&given)
	return a, given, nil
}

// LargestBatch returns the largest micro-batch (up to DefaultMaxBatch) at
// which j, otherwise unchanged, fits in free bytes with DefaultHeadroom
// left unused (the test of FitsWithHeadroom); 0 and an
// *InsufficientMemoryError when batch 1 does not fit. j.Batch is what
// is searched, so it may be left zero; any positive value gives the same
// answer, and a negative one is refused as Estimate refuses it.
func LargestBatch(j Job, free gpumem.Bytes) (int, error) {
	if j.Batch == 0 {
		j.Batch = 1
	}
	p, err := Allocate(free, j, &Limits{Checkpointing: []model.Checkpointing{}, Attention: []model.Attention{}})
	if err != nil {
		return 0, err
	}
	return p.Batch, nil
}

// LongestSeqLen returns the longest sequence (up to DefaultMaxSeqLen, 2^20
// tokens) at which j, with its batch and otherwise unchanged, fits in
// free bytes with DefaultHeadroom left unused (the test of
// FitsWithHeadroom); 0 and an *InsufficientMemoryError when one token
// does not fit. A sequence whose estimate overflows does not fit.
// j.SeqLen is what is searched, so it may be left zero (j.Batch may not).
func LongestSeqLen(j Job, free gpumem.Bytes) (int, error) {
	if j.SeqLen == 0 {
		j.SeqLen = 1
	}
	p, err := Allocate(free, j, &Limits{MinBatch: j.Batch, MaxBatch: j.Batch, MinSeqLen: 1, MaxSeqLen: DefaultMaxSeqLen,
		Checkpointing: []model.Checkpointing{}, Attention: []model.Attention{}})
	if err != nil {
		return 0, err
	}
	return p.SeqLen, nil
}

// CacheEntries returns how many entries of entryBytes each an elastic
// cache may hold in budget bytes: ⌊budget / entryBytes⌋, at most max
// (zero: no maximum). The distribution compensator (docs/scenarios.md)
// caps its cache of fp32 feature vectors at
// min(2000, ⌊1 GiB / (4·feature_dim)⌋); CacheEntries derives the
// count from the memory actually left instead of a fixed cap. When the
// budget holds fewer than min entries it returns an
// *InsufficientMemoryError.
func CacheEntries(entryBytes, budget gpumem.Bytes, min, max int64) (int64, error) {
	switch {
	case entryBytes <= 0:
		return 0, gpumem.Errorf("entryBytes", entryBytes, gpumem.ErrInvalid, "must be positive")
	case min < 0:
		return 0, gpumem.Errorf("min", min, gpumem.ErrInvalid, "must not be negative")
	case max < 0:
		return 0, gpumem.Errorf("max", max, gpumem.ErrInvalid, "must not be negative")
	case max > 0 && min > max:
		return 0, gpumem.Errorf("min", min, gpumem.ErrInvalid, "above max %d", max)
	}
	n := int64(0)
	if budget > 0 {
		n = int64(budget / entryBytes)
	}
	if n < min {
		need := Breakdown{Buffers: entryBytes * gpumem.Bytes(min)}
		return 0, &InsufficientMemoryError{Need: need, Free: budget, Shortfall: need.Buffers - budget,
			Dominant: Component{"buffers", need.Buffers}}
	}
	if max > 0 && n > max {
		n = max
	}
	return n, nil
}
