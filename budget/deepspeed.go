package budget

import (
	"encoding/json"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// DeepSpeedEstimate is one row of DeepSpeed's own model-state estimators,
// for comparing gpumem with what DeepSpeed users already run.
type DeepSpeedEstimate struct {
	// CPU and GPU are DeepSpeed's per-CPU (node) and per-GPU bytes.
	CPU, GPU gpumem.Bytes
	// OffloadParam, OffloadOptimizer and ZeroInit are the row's options.
	OffloadParam, OffloadOptimizer, ZeroInit bool
}

// DeepSpeedZero2 reproduces estimate_zero2_model_states_mem_needs of
// deepspeed/runtime/zero/stage_1_and_2.py (DeepSpeed ≥ 0.14.3, after
// PR #5099): with the optimizer offloaded the GPU holds 2 bytes per
// parameter and the CPU max(4·gpus, 16)·P·factor; without, the GPU holds
// 2P + 18P/gpus and the CPU 4·P·gpus_per_node·factor. factor is
// additional_buffer_factor (zero: DeepSpeed's 1.5). Rows come in
// DeepSpeed's order: offload, then none.
func DeepSpeedZero2(totalParams int64, gpusPerNode, nodes int, factor float64) ([2]DeepSpeedEstimate, error) {
	var out [2]DeepSpeedEstimate
	if err := checkDS(totalParams, gpusPerNode, nodes, factor); err != nil {
		return out, err
	}
	if factor == 0 {
		factor = 1.5
	}
	p, gpus := float64(totalParams), float64(gpusPerNode*nodes)
	out[0] = DeepSpeedEstimate{OffloadOptimizer: true, GPU: gpumem.Bytes(2 * p),
		CPU: gpumem.Bytes(p * max(4*gpus, 16) * factor)}
	out[1] = DeepSpeedEstimate{GPU: gpumem.Bytes(2*p + float64(int64(18*p/gpus))),
		CPU: gpumem.Bytes(p * 4 * float64(gpusPerNode) * factor)}
	return out, nil
}

// DeepSpeedZero3 reproduces estimate_zero3_model_states_mem_needs of
// deepspeed/runtime/zero/stage3.py: the six rows of
// estimate_zero3_model_states_mem_needs_all_cold, in its order
// (offload_param, offload_optimizer, zero_init) = (cpu, cpu, 1), (cpu,
// cpu, 0), (none, cpu, 1), (none, cpu, 0), (none, none, 1), (none, none,
// 0). largestLayer is the parameter count of the largest single module
// (a Linear or an Embedding, not a block); the GPU holds 4 bytes of it
// (its gathered 16-bit parameters and gradients).
func DeepSpeedZero3(totalParams, largestLayer int64, gpusPerNode, nodes int, factor float64) ([6]DeepSpeedEstimate, error) {
	var out [6]DeepSpeedEstimate
	if err := checkDS(totalParams, gpusPerNode, nodes, factor); err != nil {
		return out, err
	}
	if largestLayer < 0 || largestLayer > totalParams {
		return out, gpumem.Errorf("largestLayer", largestLayer, gpumem.ErrInvalid, "must be in [0, totalParams]")
	}
	if factor == 0 {
		factor = 1.5
	}
	p, gpus, perNode := float64(totalParams), float64(gpusPerNode*nodes), float64(gpusPerNode)
	gf := 1 / float64(nodes)
	layer := 4 * float64(largestLayer)
	i := 0
	for _, offOpt := range []bool{true, false} {
		for _, offParam := range []bool{true, false} {
			if !offOpt && offParam {
				continue
			}
			for _, zeroInit := range []bool{true, false} {
				var gpu, cpu float64
				switch {
				case offOpt && offParam:
					gpu = layer
					cpu = p * max(4*perNode, 18*gf) * factor
					if zeroInit {
						cpu = p * 18 * gf * factor
					}
				case offOpt:
					gpu = layer + float64(int64(2*p/gpus))
					cpu = p * max(4*perNode, 16*gf) * factor
					if zeroInit {
						cpu = p * 16 * gf * factor
					}
				default:
					gpu = layer + float64(int64(18*p/gpus))
					cpu = p * 4 * perNode * factor
					if zeroInit {
						cpu = float64(largestLayer) * 4 * perNode * factor
					}
				}
				out[i] = DeepSpeedEstimate{CPU: gpumem.Bytes(cpu), GPU: gpumem.Bytes(gpu),
					OffloadParam: offParam, OffloadOptimizer: offOpt, ZeroInit: zeroInit}
				i++
			}
		}
	}
	return out, nil
}

func checkDS(totalParams int64, gpusPerNode, nodes int, factor float64) error {
	switch {
	case totalParams < 0 || totalParams > 1<<50:
		return gpumem.Errorf("totalParams", totalParams, gpumem.ErrInvalid, "must be in [0, 2^50]")
	case gpusPerNode < 1 || gpusPerNode > 1<<16:
		return gpumem.Errorf("gpusPerNode", gpusPerNode, gpumem.ErrInvalid, "must be in [1, 65536]")
	case nodes < 1 || nodes > 1<<20:
		return gpumem.Errorf("nodes", nodes, gpumem.ErrInvalid, "must be in [1, 2^20]")
	case factor < 0 || factor > 100 || factor != factor:
		return gpumem.Errorf("factor", factor, gpumem.ErrInvalid, "must be in [0, 100]")
	}
	return nil
}

// DeepSpeedConfig is the part of a DeepSpeed config JSON
// (https://www.deepspeed.ai/docs/config-json/) a Plan determines. Keys are
// exactly as DeepSpeed documents them; optional blocks are omitted when
// unset.
type DeepSpeedConfig struct {
	TrainBatchSize             int                   `json:"train_batch_size"`
	TrainMicroBatchSizePerGPU  int                   `json:"train_micro_batch_size_per_gpu"`
	GradientAccumulationSteps  int                   `json:"gradient_accumulation_steps"`
	GradientClipping           float64               `json:"gradient_clipping,omitempty"`
	FP16                       *DeepSpeedEnabled     `json:"fp16,omitempty"`
	BF16                       *DeepSpeedEnabled     `json:"bf16,omitempty"`
	ZeroOptimization           DeepSpeedZero         `json:"zero_optimization"`
	ActivationCheckpointing    *DeepSpeedCheckpoints `json:"activation_checkpointing,omitempty"`
	WallClockBreakdown         bool                  `json:"wall_clock_breakdown"`
	ZeroAllowUntestedOptimizer bool                  `json:"zero_allow_untested_optimizer,omitempty"`
}

// DeepSpeedEnabled is the fp16 or bf16 block.
type DeepSpeedEnabled struct {
	Enabled bool `json:"enabled"`
}

// DeepSpeedZero is the zero_optimization block.
type DeepSpeedZero struct {
	Stage               int               `json:"stage"`
	OverlapComm         *bool             `json:"overlap_comm,omitempty"`
	ContiguousGradients *bool             `json:"contiguous_gradients,omitempty"`
	ReduceBucketSize    float64           `json:"reduce_bucket_size,omitempty"`
	OffloadOptimizer    *DeepSpeedOffload `json:"offload_optimizer,omitempty"`
	OffloadParam        *DeepSpeedOffload `json:"offload_param,omitempty"`
}

// DeepSpeedOffload is an offload_optimizer or offload_param block.
type DeepSpeedOffload struct {
	Device    string `json:"device"`
	PinMemory bool   `json:"pin_memory"`
}

// DeepSpeedCheckpoints is the activation_checkpointing block. DeepSpeed
// only configures it; the model's code (Hugging Face's
// gradient_checkpointing) does the checkpointing.
type DeepSpeedCheckpoints struct {
	PartitionActivations bool `json:"partition_activations"`
	CPUCheckpointing     bool `json:"cpu_checkpointing"`
}

// DeepSpeed returns the DeepSpeed config that runs p: batch sizes (the
// global batch over every data-parallel rank), fp16 or bf16, the ZeRO
// stage of p.Job.Parallel, optimizer offload, and activation
// checkpointing. It fails with ErrUnsupported for plans DeepSpeed does
// not express this way (pure fp32 is expressed by omitting both blocks;
// fp8 needs Transformer Engine).
func (p Plan) DeepSpeed() (DeepSpeedConfig, error) {
	j := p.Job
	if j.Mode != Training {
		return DeepSpeedConfig{}, gpumem.Errorf("Plan.Job.Mode", j.Mode, gpumem.ErrUnsupported, "DeepSpeed configs describe training")
	}
	par := j.Parallel
	if par.FSDP {
		return DeepSpeedConfig{}, gpumem.Errorf("Plan.Job.Parallel.FSDP", true, gpumem.ErrUnsupported, "an FSDP plan: use Plan.Accelerate")
	}
	if par.TensorParallel > 1 || par.PipelineParallel > 1 || par.ContextParallel > 1 {
		return DeepSpeedConfig{}, gpumem.Errorf("Plan.Job.Parallel", par.Describe(), gpumem.ErrUnsupported,
			"DeepSpeed's JSON config has no tensor, pipeline or context degree; run the plan with Megatron flags (Plan.Megatron)")
	}
	dp := max(par.DataParallel, 1)
	accum := max(j.GradAccum, 1)
	c := DeepSpeedConfig{
		TrainBatchSize: j.Batch * accum * dp, TrainMicroBatchSizePerGPU: j.Batch, GradientAccumulationSteps: accum,
		GradientClipping: 1.0,
		ZeroOptimization: DeepSpeedZero{Stage: j.Parallel.Stage},
	}
	switch j.Precision {
	case FP16Master, FP16Mixed, FP16:
		c.FP16 = &DeepSpeedEnabled{Enabled: true}
	case BF16Master, BF16Mixed, BF16:
		c.BF16 = &DeepSpeedEnabled{Enabled: true}
	case FP32:
	default:
		return DeepSpeedConfig{}, gpumem.Errorf("Plan.Job.Precision", j.Precision, gpumem.ErrUnsupported, "no DeepSpeed precision block for it")
	}
	if j.Offload&OffloadOptimizer != 0 {
		c.ZeroOptimization.OffloadOptimizer = &DeepSpeedOffload{Device: "cpu", PinMemory: true}
		if c.ZeroOptimization.Stage == 0 {
			c.ZeroOptimization.Stage = 1 // offload_optimizer needs ZeRO 1, 2 or 3
		}
	}
	if j.Offload&OffloadParams != 0 {
		c.ZeroOptimization.OffloadParam = &DeepSpeedOffload{Device: "cpu", PinMemory: true}
	}
	if j.Checkpointing != model.NoCheckpointing {
		c.ActivationCheckpointing = &DeepSpeedCheckpoints{CPUCheckpointing: j.Checkpointing == model.OffloadActivations}
	}
	if j.Optimizer != nil && !strings.HasPrefix(j.Optimizer.String(), "torch.optim.Adam") {
		// A client optimizer other than Adam/AdamW under ZeRO.
		c.ZeroAllowUntestedOptimizer = c.ZeroOptimization.Stage > 0
	}
	return c, nil
}

// HFTrainingArguments returns the Hugging Face TrainingArguments flags
// that run p on one node (transformers' training_args.py names):
// per_device_train_batch_size, gradient_accumulation_steps,
// gradient_checkpointing, optim, bf16/fp16.
func (p Plan) HFTrainingArguments() (map[string]any, error) {
	j := p.Job
	if j.Mode != Training {
		return nil, gpumem.Errorf("Plan.Job.Mode", j.Mode, gpumem.ErrUnsupported, "TrainingArguments describe training")
	}
	a := map[string]any{
		"per_device_train_batch_size": j.Batch,
		"gradient_accumulation_steps": max(j.GradAccum, 1),
		"gradient_checkpointing":      j.Checkpointing != model.NoCheckpointing,
	}
	switch j.Precision {
	case BF16Mixed, BF16Master, BF16:
		a["bf16"] = true
	case FP16Mixed, FP16Master, FP16:
		a["fp16"] = true
	}
	if name := hfOptim(j.Optimizer); name != "" {
		a["optim"] = name
	}
	return a, nil
}

// hfOptim returns TrainingArguments' optim value for o ("" when it has
// none).
func hfOptim(o optimizer.Optimizer) string {
	switch x := o.(type) {
	case optimizer.AdamW:
		if x.Impl == optimizer.Fused {
			return "adamw_torch_fused"
		}
		return "adamw_torch"
	case optimizer.AdamW8bit:
		if x.Paged {
			return "paged_adamw_8bit"
		}
		return "adamw_bnb_8bit"
	case optimizer.Adafactor:
		return "adafactor"
	case optimizer.SGD:
		return "sgd"
	case optimizer.Lion8bit:
		if x.Paged {
			return "paged_lion_8bit"
		}
		return "lion_8bit"
	case optimizer.Adagrad:
		return "adagrad"
	case optimizer.RMSprop:
		return "rmsprop"
	}
	return ""
}

// MarshalIndent is json.MarshalIndent of c with two spaces.
func (c DeepSpeedConfig) MarshalIndent() ([]byte, error) { return json.MarshalIndent(c, "", "  ") }
