package request

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// job builds the budget.Job the flags describe, and the device to check
// it against (Capacity zero when none was named).
func (f *Flags) Job() (budget.Job, gpumem.Device, error) {
	s, err := f.Load()
	if err != nil {
		return budget.Job{}, gpumem.Device{}, err
	}
	return f.JobFor(s)
}

// JobFor builds the budget.Job the flags describe for the model s, which
// the caller has loaded (gpumem serve reads an inline config.json).
func (f *Flags) JobFor(s model.Spec) (budget.Job, gpumem.Device, error) {
	return f.JobWith(s, budget.NewModel)
}

// JobWith is JobFor with the step that turns the model.Finetune the
// flags describe into a budget.Model given: budget.NewModel for the CLI,
// the cache of prepared models for gpumem serve (modelCache).
func (f *Flags) JobWith(s model.Spec, prepare func(model.Finetune) (budget.Model, error)) (budget.Job, gpumem.Device, error) {
	var j budget.Job
	var dev gpumem.Device
	var err error
	switch {
	case f.LoadOnly && (f.Train || f.Infer):
		return j, dev, fmt.Errorf("%w: give one of --train, --infer and --load", ErrUsage)
	case f.LoadOnly:
		j.Mode = budget.Load
	case f.Train == f.Infer:
		return j, dev, fmt.Errorf("%w: give one of --train and --infer", ErrUsage)
	case f.Train:
		j.Mode = budget.Training
	case f.Generate > 0:
		j.Mode = budget.Generation
	default:
		j.Mode = budget.Prefill
	}
	prec := f.Precision
	if prec == "" {
		prec = "bf16"
		if f.Train {
			prec = "bf16-mixed"
		}
	}
	if j.Precision, err = budget.ParsePrecision(prec); err != nil {
		return j, dev, fmt.Errorf("%w: --precision %q: want fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8", ErrUsage, prec)
	}
	if f.Train {
		if j.Optimizer, j.Gradients, _, err = f.OptimizerFor(); err != nil {
			return j, dev, err
		}
		j.OptimizerInBackward = f.InBwd
	}
	if j.Attention, err = ParseAttention(f.Attn); err != nil {
		return j, dev, err
	}
	if j.SSMKernel, err = model.ParseSSMKernel(f.SSMKernel); err != nil {
		return j, dev, fmt.Errorf("%w: --ssm-kernel %q: want fused or sequential", ErrUsage, f.SSMKernel)
	}
	if j.Checkpointing, err = ParseCheckpointing(f.Ckpt); err != nil {
		return j, dev, err
	}
	j.OffloadActivations = f.OffloadActs
	if s, err = WithHead(s, f.Head); err != nil {
		return j, dev, fmt.Errorf("%w: --head %s: %v", ErrUsage, f.Head, err)
	}
	if s, err = WithLabels(s, f.Labels); err != nil {
		return j, dev, fmt.Errorf("%w: --labels %d: %v", ErrUsage, f.Labels, err)
	}
	if s, err = WithImageSize(s, f.ImageSize); err != nil {
		return j, dev, fmt.Errorf("%w: --image-size %d: %v", ErrUsage, f.ImageSize, err)
	}
	if s.Backbone != nil && j.Attention == model.SDPA {
		// transformers' Swin has only its eager attention (ResNet and
		// ConvNeXt have none): the default sdpa reads as eager.
		j.Attention = model.Eager
	}
	if s.Family == model.FamilyZamba && j.Attention == model.SDPA {
		// transformers' Zamba has only its eager attention
		// (ZambaPreTrainedModel._supports_sdpa false; Zamba2 has SDPA):
		// the default sdpa reads as eager.
		j.Attention = model.Eager
	}
	if f.Generate > 0 && s.Head != model.HeadDefault && s.Head != model.HeadCausalLM {
		return j, dev, fmt.Errorf("%w: --generate %d: a %s head generates no tokens (give --head causal-lm, or leave --generate out)", ErrUsage, f.Generate, s.Head)
	}
	ft := model.Finetune{Model: s}
	if f.LoRARank < 0 {
		return j, dev, fmt.Errorf("%w: --lora-rank %d: must not be negative", ErrUsage, f.LoRARank)
	}
	if f.LoRARank > 0 || f.QLoRA {
		rank := f.LoRARank
		if rank == 0 {
			rank = 64 // the QLoRA paper's rank for its Guanaco runs
		}
		ft.LoRA = model.LoRA{Rank: rank}
		if f.LoRATargets != "" {
			if ft.LoRA.Targets, err = SplitTargets(f.LoRATargets); err != nil {
				return j, dev, err
			}
		}
	} else if f.LoRATargets != "" {
		return j, dev, fmt.Errorf("%w: --lora-targets %s: give --lora-rank or --qlora too", ErrUsage, f.LoRATargets)
	} else if f.LoRADropout != 0 {
		return j, dev, fmt.Errorf("%w: --lora-dropout %g: give --lora-rank or --qlora too", ErrUsage, f.LoRADropout)
	} else if f.LoRACode != "" && f.LoRACode != "peft" {
		return j, dev, fmt.Errorf("%w: --lora-code %s: give --lora-rank or --qlora too", ErrUsage, f.LoRACode)
	}
	if f.QLoRA && f.Quant != "" {
		return j, dev, fmt.Errorf("%w: --quant %s: --qlora stores the weights in nf4 already (give one of them)", ErrUsage, f.Quant)
	}
	if f.QLoRA {
		ft.Quant = gpumem.NF4
		ft.Blockwise = gpumem.Blockwise{Nested: true}
	}
	if f.Quant != "" {
		if ft.Quant, ft.Method, ft.FP8Block, err = ParseQuant(f.Quant); err != nil {
			return j, dev, err
		}
		switch {
		case f.Train && f.Frozen:
			// Backward to the input only: nothing trains, the
			// quantized weights included.
			ft.Train = func(gpumem.Tensor) bool { return false }
		case f.Train && f.LoRARank == 0:
			return j, dev, fmt.Errorf("%w: --quant %s: quantized weights cannot train; give --lora-rank to train adapters on them (or --frozen for gradients to the input only)", ErrUsage, f.Quant)
		}
	}
	if f.GroupSize != 0 {
		if ft.Method != "gptq" && ft.Method != "awq" {
			return j, dev, fmt.Errorf("%w: --group-size %d: it applies to --quant gptq or awq", ErrUsage, f.GroupSize)
		}
		ft.GroupSize = f.GroupSize
	}
	if ft.Quant != gpumem.Invalid && f.Train {
		// The QLoRA recipe: the frozen weights bitsandbytes leaves alone
		// in the compute dtype (Finetune.Unquantized).
		_, _, _, ft.Unquantized = j.Precision.DTypes()
	}
	if j.Model, err = prepare(ft); err != nil {
		return j, dev, err
	}
	if f.KVDType != "" {
		if j.KVDType, err = gpumem.ParseDType(f.KVDType); err != nil {
			return j, dev, fmt.Errorf("%w: --kv-dtype %q: want fp8, fp8_e5m2, int8, fp16, bf16, Q8_0, Q4_0, ...", ErrUsage, f.KVDType)
		}
	}
	j.KVBlock = f.KVBlock
	if (f.KVDType != "" || f.KVBlock != 0) && j.Mode != budget.Generation {
		name, v := "--kv-dtype", f.KVDType
		if f.KVDType == "" {
			name, v = "--kv-block", strconv.Itoa(f.KVBlock)
		}
		return j, dev, fmt.Errorf("%w: %s %s: only a generating job keeps a KV cache (give --infer --generate N)", ErrUsage, name, v)
	}
	j.Batch, j.SeqLen, j.Generate, j.GradAccum, j.Images = f.Batch, f.Seq, f.Generate, f.Accum, f.Images
	if j.Mode == budget.Load {
		j.Batch, j.SeqLen, j.Optimizer = 0, 0, nil
	}
	j.Dropout = f.Dropout && f.Train
	if j.Loss, err = ParseLoss(f.Loss); err != nil {
		return j, dev, err
	}
	j.LogitsToKeep = f.LogitsToKeep
	j.KeepLogits = f.KeepLogits
	j.EvalLoss = f.EvalLoss
	if j.Compile, err = model.ParseCompile(f.Compile); err != nil {
		return j, dev, fmt.Errorf("%w: --compile %q: want none, layers, loss, layers+loss or model", ErrUsage, f.Compile)
	}
	if j.Backend, err = model.ParseBackend(f.Backend); err != nil {
		return j, dev, fmt.Errorf("%w: --backend %q: want cuda or cpu", ErrUsage, f.Backend)
	}
	if j.LoRACode, err = budget.ParseLoRACode(f.LoRACode); err != nil {
		return j, dev, fmt.Errorf("%w: --lora-code %q: want peft, torchtune or litgpt", ErrUsage, f.LoRACode)
	}
	if !(f.LoRADropout >= 0 && f.LoRADropout < 1) {
		return j, dev, fmt.Errorf("%w: --lora-dropout %g: want a probability in [0, 1)", ErrUsage, f.LoRADropout)
	}
	j.LoRADropout = f.LoRADropout
	if _, err := f.Llama.Apply(&j, f.GGUF != ""); err != nil {
		return j, dev, err
	}
	if _, err := f.VLLM.Apply(&j); err != nil {
		return j, dev, err
	}
	if _, err := f.SGLang.Apply(&j); err != nil {
		return j, dev, err
	}
	if j.Runtime == budget.SGLang && (f.KVDType != "" || f.KVBlock != 0) {
		return j, dev, fmt.Errorf("%w: --kv-dtype/--kv-block: SGLang's pool is typed by --kv-cache-dtype and paged by --page-size", ErrUsage)
	}
	if j.Runtime == budget.VLLM && (f.KVDType != "" || f.KVBlock != 0) {
		return j, dev, fmt.Errorf("%w: --kv-dtype/--kv-block: vLLM's cache is typed by --kv-cache-dtype and paged by --block-size", ErrUsage)
	}
	if j.Runtime == budget.LlamaCpp && (f.KVDType != "" || f.KVBlock != 0) {
		name, v := "--kv-dtype", f.KVDType
		if f.KVDType == "" {
			name, v = "--kv-block", strconv.Itoa(f.KVBlock)
		}
		return j, dev, fmt.Errorf("%w: %s %s: llama.cpp's cache is typed by --cache-type-k and --cache-type-v, and not paged", ErrUsage, name, v)
	}
	gpus := f.GPUs
	if j.Runtime == budget.LlamaCpp {
		// llama.cpp's GPUs split the model (--split-mode), they are not
		// data-parallel ranks.
		o := &j.LlamaCpp
		switch {
		case o.GPUs > 1 && gpus > 1 && gpus != o.GPUs:
			return j, dev, fmt.Errorf("%w: --gpus %d: --tensor-split %s names %d GPUs", ErrUsage, gpus, f.Llama.TensorSplit, o.GPUs)
		case gpus > 1:
			o.GPUs = gpus
		}
		if o.MainGPU >= max(o.GPUs, 1) {
			return j, dev, fmt.Errorf("%w: --main-gpu %d: there are %d GPUs (give --gpus)", ErrUsage, o.MainGPU, max(o.GPUs, 1))
		}
		if f.Llama.SplitMode != "" && o.GPUs <= 1 && o.SplitMode != budget.LlamaSplitNone {
			return j, dev, fmt.Errorf("%w: --split-mode %s: one GPU has nothing to split (give --gpus N)", ErrUsage, f.Llama.SplitMode)
		}
		gpus = 1
	}
	par, off, err := f.Layout.Layout(gpus, f.ZeRO)
	if err != nil {
		return j, dev, err
	}
	j.Parallel, j.Offload = par, j.Offload|off
	if f.CUDA != "" {
		if j.Overhead.CUDA, err = budget.ParseCUDAVersion(f.CUDA); err != nil {
			return j, dev, fmt.Errorf("%w: --cuda %q: want a CUDA version such as 12.1 (or a wheel tag such as cu121)", ErrUsage, f.CUDA)
		}
	}
	if f.Lazy.Given {
		j.Overhead.Loading = budget.LoadingEager
		if f.Lazy.Value {
			j.Overhead.Loading = budget.LoadingLazy
		}
	}
	if f.Profile != "" {
		p, err := ReadProfile(f.Profile)
		if err != nil {
			return j, dev, err
		}
		p.Apply(&j.Overhead)
	}
	if f.ProfileData != nil {
		f.ProfileData.Apply(&j.Overhead)
	}
	dev, err = f.OnDevice(&j)
	return j, dev, err
}

// OnDevice sets j's device from f's --gpu or --memory and returns the
// device to check the fit on (Capacity zero when neither is given): a
// catalog GPU is the job's device (its compute capability sizes the CUDA
// context); free memory alone is not, but vLLM and SGLang size their
// caches from it. It is the last step of JobWith, and the only one that
// reads --gpu and --memory: a job built for one device is moved to
// another by setting f's GPU or Memory and calling OnDevice again.
func (f *Flags) OnDevice(j *budget.Job) (gpumem.Device, error) {
	dev, catalog, err := DeviceFlags(f.GPU, f.Memory)
	if err != nil {
		j.Device = gpumem.Device{}
		return dev, err
	}
	return OnDeviceOf(j, dev, catalog)
}

// OnDeviceOf is OnDevice for a device already read: dev as DeviceFlags
// returns it, catalog whether it is a catalog GPU. A caller that holds
// the catalog entry of a --gpu (the Kubernetes components, one per GPU
// kind) skips the name's look-up.
func OnDeviceOf(j *budget.Job, dev gpumem.Device, catalog bool) (gpumem.Device, error) {
	j.Device = gpumem.Device{}
	if catalog {
		j.Device = dev
	}
	if j.Runtime == budget.VLLM || j.Runtime == budget.SGLang {
		if dev.Capacity == 0 {
			return dev, fmt.Errorf("%w: --runtime %s: %s sizes its KV cache from the GPU's memory: give --gpu or --memory", ErrUsage, j.Runtime, j.Runtime)
		}
		if j.Device.Capacity == 0 {
			j.Device.Capacity = dev.Capacity
		}
	}
	return dev, nil
}

// ParseQuant reads --quant: the storage, the library that keeps it, and
// FP8's block: transformers' FineGrainedFP8Config weight_block_size
// (128, 128) default.
func ParseQuant(s string) (gpumem.DType, string, [2]int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "int8", "llm.int8", "8bit":
		return gpumem.INT8, "bitsandbytes", [2]int64{}, nil
	case "nf4":
		return gpumem.NF4, "bitsandbytes", [2]int64{}, nil
	case "fp4":
		return gpumem.FP4, "bitsandbytes", [2]int64{}, nil
	case "gptq":
		return gpumem.INT4, "gptq", [2]int64{}, nil
	case "awq":
		return gpumem.INT4, "awq", [2]int64{}, nil
	case "fp8":
		return gpumem.FP8E4M3, "fp8", [2]int64{128, 128}, nil
	}
	return gpumem.Invalid, "", [2]int64{}, fmt.Errorf("%w: --quant %q: want int8, nf4, fp4, gptq, awq or fp8", ErrUsage, s)
}

// ParseLoss reads --loss (model.ParseLoss) with the flag's own message.
func ParseLoss(s string) (model.Loss, error) {
	l, err := model.ParseLoss(s)
	if err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			return l, fmt.Errorf("%w: --loss %q: %v", ErrUsage, s, fe.Err)
		}
		return l, fmt.Errorf("%w: --loss %q: %v", ErrUsage, s, err)
	}
	return l, nil
}

// SplitTargets reads --lora-targets: module names separated by commas.
func SplitTargets(s string) ([]string, error) {
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, fmt.Errorf("%w: --lora-targets %q: an empty module name", ErrUsage, s)
		}
		out = append(out, t)
	}
	return out, nil
}

// DeviceFlags reads --gpu and --memory: a GPU of the catalog (catalog
// true), or free memory on an unnamed device, or neither (the zero
// Device). Zero memory is refused, not taken for "no GPU named": that
// would pass any job.
func DeviceFlags(gpu, memory string) (dev gpumem.Device, catalog bool, err error) {
	switch {
	case gpu != "" && memory != "":
		return dev, false, fmt.Errorf("%w: give one of --gpu and --memory", ErrUsage)
	case gpu != "":
		d, ok := gpumem.LookupDevice(gpu)
		if !ok {
			return dev, false, fmt.Errorf("%w: --gpu %q: not in the catalog%s (see gpumem devices, or give --memory)", ErrUsage, gpu, SuggestGPU(gpu))
		}
		return d, true, nil
	case memory != "":
		b, err := gpumem.ParseBytes(memory)
		if err != nil {
			return dev, false, fmt.Errorf("%w: --memory: %v", ErrUsage, err)
		}
		if b < 1 {
			return dev, false, fmt.Errorf("%w: --memory %q: want a size of at least 1B, such as 80GiB", ErrUsage, memory)
		}
		return gpumem.Device{Name: memory + " of free memory", Capacity: b}, false, nil
	}
	return dev, false, nil
}

// ParseAttention reads --attention.
func ParseAttention(s string) (model.Attention, error) {
	k, err := model.ParseAttention(s)
	if err != nil {
		return 0, fmt.Errorf("%w: --attention %q: want eager, sdpa or flash", ErrUsage, s)
	}
	return k, nil
}

// ParseCheckpointing reads --checkpointing.
func ParseCheckpointing(s string) (model.Checkpointing, error) {
	switch s {
	case "none", "":
		return model.NoCheckpointing, nil
	case "selective":
		return model.SelectiveCheckpointing, nil
	case "full":
		return model.FullCheckpointing, nil
	case "offload":
		return model.OffloadActivations, nil
	}
	return 0, fmt.Errorf("%w: --checkpointing %q: want none, selective, full or offload", ErrUsage, s)
}
