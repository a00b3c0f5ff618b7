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
	if j.Mode < Training || j.Mode > Load {
		return gpumem.Errorf("Job.Mode", j.Mode, gpumem.ErrInvalid, "want Training, Prefill, Generation or Load")
	}
	if j.Mode == Training && j.Model.untrainable != nil {
		return j.Model.untrainable
	}
	if j.EvalLoss && (j.Mode != Prefill || j.LogitsToKeep != 0) {
		return gpumem.Errorf("Job.EvalLoss", true, gpumem.ErrInvalid, "an evaluation loss is a Prefill job's, over the logits of every position (Mode %s, LogitsToKeep %d)", j.Mode, j.LogitsToKeep)
	}
	if j.KeepLogits && j.Mode != Training {
		return gpumem.Errorf("Job.KeepLogits", true, gpumem.ErrInvalid, "only a Training job's loop holds the logits through backward and the optimizer step (a %s job runs neither)", j.Mode)
	}
	if j.Compile != 0 {
		if err := j.validateCompile(); err != nil {
			return err
		}
	}
	if err := j.validateSSMRuntime(); err != nil {
		return err
	}
	if err := j.validateLlamaCpp(); err != nil {
		return err
	}
	if err := j.validateVLLM(); err != nil {
		return err
	}
	if err := j.validateSGLang(); err != nil {
		return err
	}
	if j.Mode == Load {
		if err := j.validateLoad(); err != nil {
			return err
		}
	}
	if err := j.validateKV(); err != nil {
		return err
	}
	if j.Precision < FP32 || j.Precision > FP8 {
		return gpumem.Errorf("Job.Precision", j.Precision, gpumem.ErrInvalid, "want one of FP32 ... FP8")
	}
	if j.Batch < 1 && j.Mode != Load {
		return gpumem.Errorf("Job.Batch", j.Batch, gpumem.ErrInvalid, "must be at least 1")
	}
	if j.Mode == Load && (j.Batch < 0 || j.SeqLen < 0) {
		f, v := "Job.Batch", j.Batch
		if j.Batch >= 0 {
			f, v = "Job.SeqLen", j.SeqLen
		}
		return gpumem.Errorf(f, v, gpumem.ErrInvalid, "must not be negative")
	}
	if j.SeqLen < 1 && j.Mode != Load {
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
	if j.Model.quant.kept > 0 && j.Mode == Training && (j.Parallel.modelParallel() || j.Parallel.ContextParallel > 1) {
		return gpumem.Errorf("Job.Parallel", j.Parallel.Describe(), gpumem.ErrUnsupported,
			"bitsandbytes' kept inputs (model.Finetune.KeepsInputs) are modelled for a whole model on each rank")
	}
	if j.HoldsPreviousStep && j.Mode != Training {
		return gpumem.Errorf("Job.HoldsPreviousStep", true, gpumem.ErrInvalid, "it is a training loop's; a %s job has no previous step's graph", j.Mode)
	}
	if j.OffloadActivations {
		switch {
		case j.Mode != Training:
			return gpumem.Errorf("Job.OffloadActivations", true, gpumem.ErrInvalid, "an inference job saves no activations for backward")
		case j.Checkpointing != model.NoCheckpointing && j.Checkpointing != model.FullCheckpointing && j.Checkpointing != model.OffloadActivations:
			return gpumem.Errorf("Job.OffloadActivations", true, gpumem.ErrInvalid,
				"torchtune offloads with full activation checkpointing or without any (Checkpointing %s)", j.Checkpointing)
		case j.Parallel.PipelineParallel > 1:
			return gpumem.Errorf("Job.OffloadActivations", true, gpumem.ErrUnsupported, "not modelled with pipeline parallelism")
		}
	}
	if j.Attention > model.Flash {
		return gpumem.Errorf("Job.Attention", j.Attention, gpumem.ErrInvalid, "want eager, sdpa or flash")
	}
	if err := j.checkBackend(); err != nil {
		return err
	}
	if err := j.checkLoRACode(); err != nil {
		return err
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
	if err := j.validateLoss(); err != nil {
		return err
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
	if j.Gradients >= numGradients {
		return gpumem.Errorf("Job.Gradients", j.Gradients, gpumem.ErrInvalid, "want ParamGradients, NoStep or InputGradients")
	}
	if j.Mode != Training && j.Gradients != ParamGradients {
		return gpumem.Errorf("Job.Gradients", j.Gradients, gpumem.ErrInvalid, "an inference job computes no gradients")
	}
	if j.Mode != Training && j.OptimizerInBackward {
		return gpumem.Errorf("Job.OptimizerInBackward", true, gpumem.ErrInvalid, "an inference job runs no optimizer")
	}
	if j.Mode == Training && j.Gradients != ParamGradients {
		if j.Optimizer != nil {
			return gpumem.Errorf("Job.Optimizer", j.Optimizer.String(), gpumem.ErrInvalid,
				"Gradients %s runs no optimizer step (omit the optimizer)", j.Gradients)
		}
		if j.OptimizerInBackward {
			return gpumem.Errorf("Job.OptimizerInBackward", true, gpumem.ErrInvalid, "Gradients %s runs no optimizer", j.Gradients)
		}
	}
	if j.Mode == Training && j.Gradients == NoStep {
		if j.Model.trainableParams == 0 {
			return gpumem.Errorf("Job.Gradients", j.Gradients, gpumem.ErrInvalid, "nothing is trainable, so no parameter gets a gradient (InputGradients differentiates to the input only)")
		}
	}
	if j.OptimizerInBackward && j.Mode == Training {
		switch {
		case j.GradAccum > 1:
			// recipes/full_finetune_single_device.py: "Gradient
			// accumulation is not supported with optimizer_in_bwd: True".
			return gpumem.Errorf("Job.OptimizerInBackward", true, gpumem.ErrInvalid,
				"a step inside backward cannot accumulate gradients over micro-batches (GradAccum %d; torchtune refuses it too)", j.GradAccum)
		case j.Optimizer == nil:
			return gpumem.Errorf("Job.OptimizerInBackward", true, gpumem.ErrInvalid, "there is no optimizer to step")
		case j.Parallel.GPUs() > 1:
			return gpumem.Errorf("Job.OptimizerInBackward", true, gpumem.ErrUnsupported,
				"modelled for one GPU (Parallel describes %d)", j.Parallel.GPUs())
		case j.Offload&OffloadOptimizer != 0:
			return gpumem.Errorf("Job.OptimizerInBackward", true, gpumem.ErrInvalid,
				"the step runs on the GPU inside backward; OffloadOptimizer runs it on the host")
		case j.Loss.Kind == model.FusedLinearLoss || j.Loss.Kind == model.CutCrossEntropyLoss:
			// A fused loss makes the head's weight gradient in forward,
			// before any backward hook could step it: not modelled.
			return gpumem.Errorf("Job.OptimizerInBackward", true, gpumem.ErrUnsupported,
				"not modelled with the %s loss, which makes the head's gradient in forward", j.Loss)
		}
	}
	if j.Mode == Training && j.Gradients != InputGradients && j.Model.quant.method != "" && !j.Model.adapters {
		return gpumem.Errorf("Job.Model", j.Model.quant.method, gpumem.ErrInvalid,
			"a model with quantized weights trains adapters on them (model.Finetune.LoRA), as PEFT does; its quantized weights cannot train")
	}
	if j.Mode == Training && j.Gradients == ParamGradients {
		// A frozen model without an optimizer is a backward pass to the
		// inputs only (an adversarial attack, as the Whisper language attack): activations are
		// saved, no parameter gradient or state exists.
		t := j.Model.trainableParams
		if j.Optimizer == nil && t > 0 {
			return gpumem.Errorf("Job.Optimizer", nil, gpumem.ErrInvalid, "a Training job needs an optimizer (or Gradients NoStep, or a model with nothing trainable)")
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

// validateLoss checks Job.Loss and Job.LogitsToKeep (nothing to check,
// and no Spec to copy, when both are zero).
func (j *Job) validateLoss() error {
	if j.Loss == (model.Loss{}) && j.LogitsToKeep == 0 {
		return nil
	}
	if err := j.Loss.Check("Job.Loss", j.Model.spec, j.Mode == Training); err != nil {
		return err
	}
	if j.Loss.Kind != model.FullLoss && j.Parallel.TensorParallel > 1 {
		return gpumem.Errorf("Job.Loss", j.Loss, gpumem.ErrUnsupported,
			"the %s loss is modelled without tensor parallelism (Parallel.TensorParallel %d)", j.Loss, j.Parallel.TensorParallel)
	}
	if j.LogitsToKeep != 0 && j.Mode == Generation {
		return gpumem.Errorf("Job.LogitsToKeep", j.LogitsToKeep, gpumem.ErrInvalid, "a Generation job's prompt pass keeps the last position's logits already; LogitsToKeep is for Prefill")
	}
	return j.Model.spec.CheckLogitsToKeep("Job.LogitsToKeep", int64(j.LogitsToKeep), j.Mode == Training)
}

// validateLoad checks a Load job: it runs nothing, so the fields of a
// run must be left at their zero values (Batch and SeqLen 0, or 1 as a
// caller that always sets them may give).
func (j *Job) validateLoad() error {
	switch {
	case j.Batch > 1:
		return gpumem.Errorf("Job.Batch", j.Batch, gpumem.ErrInvalid, "a Load job runs no batch")
	case j.SeqLen > 1:
		return gpumem.Errorf("Job.SeqLen", j.SeqLen, gpumem.ErrInvalid, "a Load job runs no sequence")
	case j.Generate != 0:
		return gpumem.Errorf("Job.Generate", j.Generate, gpumem.ErrInvalid, "a Load job generates nothing")
	case j.Optimizer != nil:
		return gpumem.Errorf("Job.Optimizer", j.Optimizer, gpumem.ErrInvalid, "a Load job steps no optimizer")
	case j.GradAccum > 1:
		return gpumem.Errorf("Job.GradAccum", j.GradAccum, gpumem.ErrInvalid, "a Load job accumulates no gradients")
	case j.Checkpointing != model.NoCheckpointing:
		return gpumem.Errorf("Job.Checkpointing", j.Checkpointing, gpumem.ErrInvalid, "a Load job saves no activations")
	}
	return nil
}

// maxKVBlock bounds Job.KVBlock: vLLM's block sizes are 8 to 256
// tokens; 2^20 is far beyond any page.
const maxKVBlock = 1 << 20

// validateKV checks the KV cache options: they apply to a Generation
// job, and KVDType must be a format a cache is stored in.
func (j *Job) validateKV() error {
	if j.KVBlock < 0 || j.KVBlock > maxKVBlock {
		return gpumem.Errorf("Job.KVBlock", j.KVBlock, gpumem.ErrInvalid, "must be in [0, 2^20] tokens")
	}
	if j.KVDType != gpumem.Invalid {
		switch j.KVDType {
		case gpumem.FP32, gpumem.FP16, gpumem.BF16, gpumem.FP8E4M3, gpumem.FP8E5M2, gpumem.FP8E4M3FNUZ, gpumem.FP8E5M2FNUZ,
			gpumem.INT8, gpumem.Q8_0, gpumem.Q4_0, gpumem.Q4_1, gpumem.Q5_0, gpumem.Q5_1, gpumem.IQ4_NL:
		default:
			return gpumem.Errorf("Job.KVDType", j.KVDType, gpumem.ErrInvalid,
				"not a KV cache format (fp16, bf16, fp32, fp8_e4m3, fp8_e5m2, int8, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL)")
		}
	}
	if (j.KVDType != gpumem.Invalid || j.KVBlock != 0) && j.Mode != Generation {
		f, v := "Job.KVDType", any(j.KVDType)
		if j.KVDType == gpumem.Invalid {
			f, v = "Job.KVBlock", j.KVBlock
		}
		return gpumem.Errorf(f, v, gpumem.ErrInvalid, "only a Generation job keeps a KV cache")
	}
	return nil
}
