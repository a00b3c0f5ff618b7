package budget

// What Allocate returns: the plan, its ladder of rungs with their costs,
// why the search stopped, and the error when nothing fits.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

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
	// LongestSeqLen (objective MaximizeSeqLen) is the longest sequence that
	// fits after this change, at the smallest batch; LargestBatch
	// (MaximizeBatch) the largest batch. Zero: not searched, or nothing
	// fits.
	LongestSeqLen int `json:"max_seq_len,omitempty"`
	LargestBatch  int `json:"max_batch,omitempty"`
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
	Attention     model.Attention
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
