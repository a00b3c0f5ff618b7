package budget

import (
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// Megatron returns the Megatron-LM command-line flags (pretrain_gpt.py,
// megatron/training/arguments.py) that run p: the parallel degrees
// (--tensor-model-parallel-size, --pipeline-model-parallel-size,
// --num-layers-per-virtual-pipeline-stage, --sequence-parallel,
// --context-parallel-size, --expert-model-parallel-size), the batch
// (--micro-batch-size, --global-batch-size over every data-parallel
// rank, --seq-length), recomputation (--recompute-granularity full with
// --recompute-method uniform --recompute-num-layers 1, or selective),
// the distributed optimizer for ZeRO-1 (--use-distributed-optimizer),
// --bf16 or --fp16 and --use-flash-attn. It fails with ErrUnsupported
// for what Megatron's flags do not express this way: ZeRO-2/3 and FSDP
// layouts (use DeepSpeed or Accelerate), offload, and inference plans.
func (p Plan) Megatron() ([]string, error) {
	j := p.Job
	par := j.Parallel
	switch {
	case j.Mode != Training:
		return nil, gpumem.Errorf("Plan.Job.Mode", j.Mode, gpumem.ErrUnsupported, "Megatron flags describe training")
	case par.FSDP || par.Stage >= 2:
		return nil, gpumem.Errorf("Plan.Job.Parallel.Stage", par.Stage, gpumem.ErrUnsupported,
			"Megatron's distributed optimizer is ZeRO-1; run stage %d with DeepSpeed or FSDP", par.Stage)
	case j.Offload != 0:
		return nil, gpumem.Errorf("Plan.Job.Offload", j.Offload, gpumem.ErrUnsupported, "no Megatron flag for it here; use DeepSpeed's offload_optimizer")
	}
	dp := max(par.DataParallel, 1)
	accum := max(j.GradAccum, 1)
	itoa := strconv.Itoa
	args := []string{
		"--tensor-model-parallel-size", itoa(max(par.TensorParallel, 1)),
		"--pipeline-model-parallel-size", itoa(max(par.PipelineParallel, 1)),
	}
	if m := par.VirtualStages; m > 1 {
		layers := int(j.Model.layers)
		args = append(args, "--num-layers-per-virtual-pipeline-stage", itoa(layers/(max(par.PipelineParallel, 1)*m)))
	}
	if par.SequenceParallel {
		args = append(args, "--sequence-parallel")
	}
	if cp := par.ContextParallel; cp > 1 {
		args = append(args, "--context-parallel-size", itoa(cp))
	}
	if ep := par.ExpertParallel; ep > 1 {
		args = append(args, "--expert-model-parallel-size", itoa(ep))
	}
	args = append(args, "--micro-batch-size", itoa(j.Batch), "--global-batch-size", itoa(j.Batch*accum*dp),
		"--seq-length", itoa(j.SeqLen))
	switch j.Checkpointing {
	case model.FullCheckpointing:
		args = append(args, "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1")
	case model.SelectiveCheckpointing:
		args = append(args, "--recompute-granularity", "selective")
	case model.EveryKCheckpointing:
		args = append(args, "--recompute-granularity", "full", "--recompute-method", "uniform",
			"--recompute-num-layers", itoa(max(j.CheckpointEvery, 1)))
	case model.NoCheckpointing:
	default:
		return nil, gpumem.Errorf("Plan.Job.Checkpointing", j.Checkpointing, gpumem.ErrUnsupported, "no Megatron recompute flag for it")
	}
	if par.Stage == 1 {
		args = append(args, "--use-distributed-optimizer")
	}
	switch j.Precision {
	case BF16Master, BF16Mixed, BF16:
		args = append(args, "--bf16")
	case FP16Master, FP16Mixed, FP16:
		args = append(args, "--fp16")
	case FP32:
	default:
		return nil, gpumem.Errorf("Plan.Job.Precision", j.Precision, gpumem.ErrUnsupported, "no Megatron flag for it here")
	}
	if j.Attention == model.Flash {
		args = append(args, "--use-flash-attn")
	}
	return args, nil
}
