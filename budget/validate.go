package budget

import (
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
)

// maxTokens bounds Batch × (SeqLen + Generate), so that products of
// user-given sizes stay far from int64 overflow before any arithmetic:
// 2^40 tokens is beyond any real job by orders of magnitude.
const maxTokens = 1 << 40

// validate checks the job's fields; each error names the field.
func (j *Job) validate() error {
	if !j.Model.valid() {
		return gpumem.Errorf("Job.Model", "zero Model", gpumem.ErrInvalid, "build it with budget.NewModel")
	}
	if j.Mode < Training || j.Mode > Generation {
		return gpumem.Errorf("Job.Mode", j.Mode, gpumem.ErrInvalid, "want Training, Prefill or Generation")
	}
	if j.Precision < FP32 || j.Precision > FP8 {
		return gpumem.Errorf("Job.Precision", j.Precision, gpumem.ErrInvalid, "want one of FP32 ... FP8")
	}
	if j.Batch < 1 {
		return gpumem.Errorf("Job.Batch", j.Batch, gpumem.ErrInvalid, "must be at least 1")
	}
	if j.SeqLen < 1 {
		return gpumem.Errorf("Job.SeqLen", j.SeqLen, gpumem.ErrInvalid, "must be at least 1")
	}
	if j.Generate < 0 {
		return gpumem.Errorf("Job.Generate", j.Generate, gpumem.ErrInvalid, "must not be negative")
	}
	if j.Mode == Generation && j.Generate < 1 {
		return gpumem.Errorf("Job.Generate", j.Generate, gpumem.ErrInvalid, "a Generation job generates at least 1 token")
	}
	if j.GradAccum < 0 {
		return gpumem.Errorf("Job.GradAccum", j.GradAccum, gpumem.ErrInvalid, "must not be negative")
	}
	if j.Checkpointing > model.OffloadActivations {
		return gpumem.Errorf("Job.Checkpointing", j.Checkpointing, gpumem.ErrInvalid, "want none, full, selective, every-k or offload")
	}
	if j.Attention > model.Flash {
		return gpumem.Errorf("Job.Attention", j.Attention, gpumem.ErrInvalid, "want eager, sdpa or flash")
	}
	if j.CheckpointEvery < 0 {
		return gpumem.Errorf("Job.CheckpointEvery", j.CheckpointEvery, gpumem.ErrInvalid, "must not be negative")
	}
	if j.Images < 0 {
		return gpumem.Errorf("Job.Images", j.Images, gpumem.ErrInvalid, "must not be negative")
	}
	if j.HeadChunk < 0 || j.HeadChunk > 1<<20 {
		return gpumem.Errorf("Job.HeadChunk", j.HeadChunk, gpumem.ErrInvalid, "must be in [0, 2^20]")
	}
	if err := j.Parallel.validate(); err != nil {
		return err
	}
	if j.Offload&^offloadAll != 0 {
		return gpumem.Errorf("Job.Offload", j.Offload, gpumem.ErrInvalid, "want OffloadOptimizer, OffloadCopies, OffloadParams")
	}
	if j.Offload&OffloadParams != 0 && (j.Parallel.Stage != 3 || j.Mode != Training) {
		return gpumem.Errorf("Job.Offload", j.Offload, gpumem.ErrInvalid,
			"parameter offload needs a training job with ZeRO stage 3 or FSDP FULL_SHARD (Parallel.Stage %d)", j.Parallel.Stage)
	}
	seq, okSeq := checked.Add(int64(j.SeqLen), int64(j.Generate))
	tokens, ok := checked.Mul(int64(j.Batch), seq)
	if !okSeq || !ok || tokens > maxTokens {
		return gpumem.Errorf("Job.Batch", j.Batch, gpumem.ErrRange,
			"Batch × (SeqLen + Generate) = %d×(%d+%d) tokens exceeds 2^40", j.Batch, j.SeqLen, j.Generate)
	}
	if j.Mode == Training {
		// A frozen model without an optimizer is a backward pass to the
		// inputs only (an adversarial attack, seed 000): activations are
		// saved, no parameter gradient or state exists.
		_, t := j.Model.Params()
		if j.Optimizer == nil && t > 0 {
			return gpumem.Errorf("Job.Optimizer", nil, gpumem.ErrInvalid, "a Training job needs an optimizer (or a model with nothing trainable)")
		}
		if t == 0 && j.Optimizer != nil {
			return gpumem.Errorf("Job.Model", j.Model.spec.Name, gpumem.ErrInvalid, "nothing is trainable (omit the optimizer for a backward pass to the inputs only)")
		}
	}
	for i := range j.Copies {
		if !j.Copies[i].Model.valid() {
			return gpumem.Errorf("Job.Copies["+strconv.Itoa(i)+"].Model", j.Copies[i].Name, gpumem.ErrInvalid, "build it with budget.NewModel")
		}
		if d := j.Copies[i].DType; d != gpumem.Invalid && !d.Valid() {
			return gpumem.Errorf("Job.Copies["+strconv.Itoa(i)+"].DType", d, gpumem.ErrInvalid, "not a storage format")
		}
	}
	for i, b := range j.Buffers {
		f := "Job.Buffers[" + strconv.Itoa(i) + "]"
		if b.Bytes < 0 {
			return gpumem.Errorf(f+".Bytes", b.Bytes, gpumem.ErrInvalid, "must not be negative")
		}
		if b.Entries < 0 {
			return gpumem.Errorf(f+".Entries", b.Entries, gpumem.ErrInvalid, "must not be negative")
		}
		if b.EntryBytes < 0 {
			return gpumem.Errorf(f+".EntryBytes", b.EntryBytes, gpumem.ErrInvalid, "must not be negative")
		}
	}
	return j.Overhead.validate(j.Mode == Training, j.Device)
}
