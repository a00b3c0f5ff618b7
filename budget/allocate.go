package budget

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

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
	Attention []model.AttentionKernel
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

// Alternative is a model set-up Allocate may switch to (see
// Limits.Models), with the name the ladder prints ("LoRA r=16").
type Alternative struct {
	Name  string
	Model Model
}

// CostKind says what a change of the ladder costs.
type CostKind uint8

const (
	// CostNone: the same computation by another kernel or loop.
	CostNone CostKind = iota
	// CostRecompute: part of the forward pass runs twice.
	CostRecompute
	// CostNumerics: lower-precision state or arithmetic.
	CostNumerics
	// CostTransfer: host–device copies every step.
	CostTransfer
	// CostTraining: fewer parameters are trained.
	CostTraining
	// CostCommunication: more collective traffic between GPUs (a
	// parallel layout; see AllocateFleet).
	CostCommunication
)

var costNames = [...]string{"none", "recompute", "numerics", "transfer", "training", "communication"}

// String returns "none", "recompute", "numerics", "transfer", "training"
// or "communication".
func (k CostKind) String() string {
	if int(k) < len(costNames) {
		return costNames[k]
	}
	return "CostKind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (k CostKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Cost is the price of one change.
type Cost struct {
	Kind CostKind `json:"kind"`
	// Recompute is the extra forward work as a fraction of one forward
	// pass (CostRecompute), from model.Activations.Recompute.
	Recompute float64 `json:"recompute,omitempty"`
	// Text says it in words.
	Text string `json:"text"`
}

// Rung is one rung of the ladder: a change applied on top of the ones
// before it, with the peak of the job as given (its batch, sequence and
// buffers) after it.
type Rung struct {
	// Change describes it: "attention eager → sdpa".
	Change string `json:"change"`
	// Allocated and Device are the peaks after the change.
	Allocated gpumem.Bytes `json:"allocated_peak"`
	Device    gpumem.Bytes `json:"device_peak"`
	// Saving is the drop of the device peak the change brings.
	Saving gpumem.Bytes `json:"saving"`
	Cost   Cost         `json:"cost"`
	// Fits says the job as given fits after this change.
	Fits bool `json:"fits"`
	// Applied says the plan includes the change.
	Applied bool `json:"applied"`
	// MaxSeqLen (objective MaximizeSeqLen) is the longest sequence that
	// fits after this change, at the smallest batch; MaxBatch
	// (MaximizeBatch) the largest batch. Zero: not searched, or nothing
	// fits.
	MaxSeqLen int `json:"max_seq_len,omitempty"`
	MaxBatch  int `json:"max_batch,omitempty"`
}

// Reason says what stopped the search.
type Reason uint8

const (
	// ReasonMemory: one more sequence (or token, or entry) does not fit.
	ReasonMemory Reason = iota + 1
	// ReasonBatchLimit: the batch reached Limits.MaxBatch (or the target
	// global batch).
	ReasonBatchLimit
	// ReasonSeqLimit: the sequence length reached Limits.MaxSeqLen.
	ReasonSeqLimit
	// ReasonBufferLimit: every elastic buffer has its full size and the
	// batch and sequence their limits.
	ReasonBufferLimit
)

var reasonNames = [...]string{ReasonMemory: "memory", ReasonBatchLimit: "batch limit",
	ReasonSeqLimit: "sequence limit", ReasonBufferLimit: "buffer limit"}

// String returns "memory", "batch limit", "sequence limit" or "buffer limit".
func (r Reason) String() string {
	if r >= ReasonMemory && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Plan is what Allocate returns: the job to run and why.
type Plan struct {
	// Job is the job with every chosen setting applied; the fields below
	// repeat its knobs.
	Job           Job
	Batch         int
	SeqLen        int
	GradAccum     int
	Checkpointing model.Checkpointing
	Attention     model.AttentionKernel
	HeadChunk     int
	Optimizer     optimizer.Optimizer
	Precision     Precision
	Offload       Offload
	// ModelName is the Alternative chosen, "" for the job's own model.
	ModelName string
	// Buffers are the job's buffers with the chosen sizes.
	Buffers []Buffer
	// Need is the Estimate of Job.
	Need Breakdown
	// Free is the memory Allocate was given; Headroom what the plan
	// leaves of it (Free − Need.Required()), at least MinHeadroom, the
	// headroom the Limits asked for (Limits.HeadroomFor(Free):
	// DefaultHeadroom(Free) by default).
	Free, Headroom, MinHeadroom gpumem.Bytes
	// Reason says what stopped the search, and Limiting the component
	// that the next increment would have overflowed with (ReasonMemory).
	Reason   Reason
	Limiting string
	// Objective is what the plan was chosen for (never
	// ObjectiveDefault): FitAsGiven, MaximizeSeqLen or MaximizeBatch.
	Objective Objective
	// Ladder is every change tried, in order, from the job as given.
	Ladder []Rung
}

// InsufficientMemoryError is Allocate's error when the job does not fit
// even with every allowed change at the smallest allowed workload. It
// unwraps to gpumem.ErrDoesNotFit.
type InsufficientMemoryError struct {
	// Need is the estimate of the smallest job tried.
	Need Breakdown
	// Free is the memory given; Shortfall what is missing, headroom
	// included.
	Free, Shortfall gpumem.Bytes
	// Dominant is Need's largest component.
	Dominant Component
	// Ladder is every change tried.
	Ladder []Rung
	// Hints are changes the Limits did not allow that would save memory
	// (Limits.Checkpointing, Optimizers, Offload, Models), and the ZeRO-2
	// sharding that would hold the rest.
	Hints []string
}

func (e *InsufficientMemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "does not fit: needs %s more than the %s free (at least %s on the device; the largest part is %s, %s)",
		e.Shortfall.String(), e.Free.String(), e.Need.Required().String(), e.Dominant.Name, e.Dominant.Bytes.String())
	if len(e.Hints) > 0 {
		b.WriteString("; ")
		b.WriteString(strings.Join(e.Hints, "; "))
	}
	return b.String()
}

// Unwrap returns gpumem.ErrDoesNotFit.
func (e *InsufficientMemoryError) Unwrap() error { return gpumem.ErrDoesNotFit }

// change is one candidate rung.
type change struct {
	text  string
	cost  Cost
	apply func(*Job)
	model string // the Alternative's name, for a model change
}

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
//     rung (Rung.MaxSeqLen, Rung.MaxBatch); the plan takes the earliest
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
			ladder[i].MaxBatch = m
		} else {
			m, s, err = a.maximizeSeq(small, max(hint, given.SeqLen, a.minSeq))
			ladder[i].MaxSeqLen = m
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

// changes lists the candidate rungs for j, in order of cost.
func (a *allocator) changes(j Job) []change {
	l := &a.lim
	var cs []change
	kernels := l.Attention
	if kernels == nil {
		kernels = []model.AttentionKernel{model.SDPA}
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
	p, err := Allocate(free, j, &Limits{Checkpointing: []model.Checkpointing{}, Attention: []model.AttentionKernel{}})
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
		Checkpointing: []model.Checkpointing{}, Attention: []model.AttentionKernel{}})
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

// String prints the plan and its ladder as a table.
func (p Plan) String() string {
	var b strings.Builder
	if p.Job.Parallel.GPUs() > 1 {
		fmt.Fprintf(&b, "layout %s; ", p.Job.Parallel.Describe())
	}
	if s := p.Job.Model.Spec(); s.Backbone != nil {
		fmt.Fprintf(&b, "batch %d × %d×%d px images", p.Batch, s.Image.Size, s.Image.Size)
	} else {
		fmt.Fprintf(&b, "batch %d × %d tokens", p.Batch, p.SeqLen)
	}
	if p.GradAccum > 1 {
		fmt.Fprintf(&b, ", %d accumulation steps", p.GradAccum)
	}
	fmt.Fprintf(&b, ", attention %s", p.Attention)
	if p.HeadChunk > 0 {
		fmt.Fprintf(&b, " (%d heads at a time)", p.HeadChunk)
	}
	if p.Job.Mode == Training {
		fmt.Fprintf(&b, ", checkpointing %s", p.Checkpointing)
		switch {
		case p.Optimizer != nil:
			fmt.Fprintf(&b, ", %s", p.Optimizer)
			if p.Job.OptimizerInBackward {
				b.WriteString(" stepped in backward")
			}
		case p.Job.Gradients == InputGradients || p.Job.Model.trainableParams == 0:
			b.WriteString(", gradients to the input only")
		default:
			b.WriteString(", no optimizer step")
		}
		if p.Job.Loss.Kind != model.FullLoss {
			fmt.Fprintf(&b, ", %s loss", p.Job.Loss)
		}
	}
	fmt.Fprintf(&b, ", %s", p.Precision)
	if p.Offload != 0 {
		fmt.Fprintf(&b, ", offload %s", p.Offload)
	}
	if p.ModelName != "" {
		fmt.Fprintf(&b, ", %s", p.ModelName)
	}
	for _, buf := range p.Buffers {
		if buf.Elastic {
			fmt.Fprintf(&b, ", %s %d entries", buf.Name, buf.Entries)
		}
	}
	fmt.Fprintf(&b, "\nneeds %s of %s free (%s left); stopped by %s", p.Need.Required().String(), p.Free.String(),
		p.Headroom.String(), p.Reason)
	if p.Limiting != "" {
		fmt.Fprintf(&b, " (%s)", p.Limiting)
	}
	b.WriteString("\n")
	if what, unit, first, ok := p.maximum(); ok && len(p.Ladder) > 1 {
		changed := false
		for _, r := range p.Ladder[1:] {
			changed = changed || r.Applied
		}
		v := gpumem.Thousands(int64(p.objectiveValue()))
		switch {
		case !changed:
			fmt.Fprintf(&b, "objective: the %s, %s %s; no change tried lengthens it\n", what, v, unit)
		case first == 0:
			fmt.Fprintf(&b, "objective: the %s, %s %s with the changes marked * (nothing fits without them)\n", what, v, unit)
		default:
			fmt.Fprintf(&b, "objective: the %s, %s %s with the changes marked * (%s without them)\n", what, v, unit, gpumem.Thousands(int64(first)))
		}
	}
	writeLadder(&b, p.Ladder)
	return b.String()
}

// maximum names the quantity a maximizing plan maximized and its unit,
// and gives its maximum on the ladder's first rung (the job as given,
// without changes); ok is false for FitAsGiven.
func (p Plan) maximum() (what, unit string, first int, ok bool) {
	if len(p.Ladder) == 0 {
		return "", "", 0, false
	}
	switch p.Objective {
	case MaximizeSeqLen:
		return "longest sequence", "tokens", p.Ladder[0].MaxSeqLen, true
	case MaximizeBatch:
		return "largest batch", "sequences", p.Ladder[0].MaxBatch, true
	}
	return "", "", 0, false
}

// objectiveValue is the plan's value of the quantity it maximized.
func (p Plan) objectiveValue() int {
	if p.Objective == MaximizeBatch {
		return p.Batch
	}
	return p.SeqLen
}

// LadderString prints the ladder as the table Plan.String ends with;
// rows marked * are in the plan.
func (p Plan) LadderString() string {
	var b strings.Builder
	writeLadder(&b, p.Ladder)
	return b.String()
}

// writeLadder prints the ladder table, with a column for the maximum a
// maximizing objective searched on each rung.
func writeLadder(b *strings.Builder, ladder []Rung) {
	column := ""
	for _, s := range ladder {
		switch {
		case s.MaxSeqLen > 0:
			column = "longest seq"
		case s.MaxBatch > 0:
			column = "largest batch"
		}
	}
	maxCell := func(s Rung) string {
		switch {
		case column == "":
			return ""
		case s.MaxSeqLen > 0:
			return fmt.Sprintf("%13s  ", gpumem.Thousands(int64(s.MaxSeqLen)))
		case s.MaxBatch > 0:
			return fmt.Sprintf("%13s  ", gpumem.Thousands(int64(s.MaxBatch)))
		}
		return fmt.Sprintf("%13s  ", "—")
	}
	head := ""
	if column != "" {
		head = fmt.Sprintf("%13s  ", column)
	}
	fmt.Fprintf(b, "  %-44s %12s %12s  %-4s  %s%s\n", "change", "device peak", "saving", "fits", head, "cost")
	for _, s := range ladder {
		mark := " "
		if s.Applied {
			mark = "*"
		}
		fits := "no"
		if s.Fits {
			fits = "yes"
		}
		saving := "—"
		if s.Saving > 0 {
			saving = "−" + s.Saving.String()
		}
		fmt.Fprintf(b, "%s %-44s %12s %12s  %-4s  %s%s\n", mark, s.Change, s.Device.String(), saving, fits, maxCell(s), s.Cost.Text)
	}
}
