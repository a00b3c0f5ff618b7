package budget

import (
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// Mode is what the job does with the model: Training, Prefill,
// Generation or Load (each constant's doc says what it runs; `go doc
// budget.Training` shows them). The zero Mode is invalid: Estimate names
// Job.Mode.
type Mode uint8

const (
	// Training runs forward, backward and an optimizer step.
	Training Mode = iota + 1
	// Prefill runs one forward pass without gradients over Batch ×
	// SeqLen tokens and keeps the logits of every position (scoring,
	// embedding, the prompt pass of a server that keeps no cache).
	Prefill
	// Generation generates Generate tokens per sequence after a prompt of
	// SeqLen tokens, with a KV cache of Batch × (SeqLen + Generate)
	// tokens; its peak is the larger of the prompt pass (logits of the
	// last position only, as generate() asks for) and the last step.
	Generation
	// Load loads the model and runs nothing: "does it load?". The peak
	// is the weights (with their quantization constants and the
	// persistent scratch a quantized kernel allocates at load, GPTQ's
	// exllamav2, or the largest weight bitsandbytes is quantizing as it
	// loads), the frozen copies and buffers, and the CUDA context:
	// no activation, KV cache or cuBLAS workspace (allocated at the first
	// matmul), and no fragmentation (after loading the caching allocator
	// held 0.1% and 1.0% more than it allocated in the pairs
	// DefaultFragmentation cites). Batch, SeqLen and an optimizer do not
	// apply.
	Load
)

var modeNames = [...]string{Training: "train", Prefill: "prefill", Generation: "generate", Load: "load"}

// String returns "train", "prefill", "generate" or "load".
func (m Mode) String() string {
	if m >= Training && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Precision is the precision policy: in which dtype weights, gradients,
// master copies and activations live. FP32; FP16Mixed and BF16Mixed
// (torch.autocast over fp32 weights, as the Hugging Face Trainer's fp16 and
// bf16 flags run it); FP16Master and BF16Master (16-bit weights with an fp32
// master copy, DeepSpeed's and Megatron-LM's mixed precision); BF16 and
// FP16 (pure 16-bit, as torchtune and litgpt train and as inference runs);
// FP8 (Transformer Engine). `go doc budget.FP32` shows each constant's
// doc; the zero Precision is invalid: Estimate names Job.Precision.
type Precision uint8

const (
	// FP32: everything in fp32.
	FP32 Precision = iota + 1
	// FP16Mixed and BF16Mixed ("fp16-mixed", "bf16-mixed", Lightning's
	// names) are torch.autocast: fp32 weights and gradients,
	// 16-bit activations; autocast's 16-bit copies of the weights are
	// saved for backward by the matmuls that use them, so they stay
	// alive until backward (aten/src/ATen/autocast_mode.cpp caches casts
	// of leaf fp32 tensors that require grad).
	FP16Mixed
	BF16Mixed
	// FP16Master and BF16Master ("fp16-master", "bf16-master") are mixed
	// precision with an fp32 master copy of the weights, as DeepSpeed and
	// Megatron-LM run it (ZeRO paper §3.1): 16-bit weights and
	// gradients, fp32 optimizer states: 2Ψ + 2Ψ + 12Ψ bytes with Adam.
	FP16Master
	BF16Master
	// BF16 is pure bf16 with no master copy, as torchtune and litgpt
	// run it: weights, gradients and optimizer states in bf16.
	BF16
	// FP16 is pure fp16 (inference, mostly).
	FP16
	// FP8 is Transformer Engine style fp8 compute: bf16 weights and
	// gradients with an fp32 master copy, fp8 copies of the weights and
	// of the inputs saved by linear layers.
	FP8
)

var precisionNames = [...]string{FP32: "fp32", FP16Mixed: "fp16-mixed", BF16Mixed: "bf16-mixed",
	FP16Master: "fp16-master", BF16Master: "bf16-master", BF16: "bf16", FP16: "fp16", FP8: "fp8"}

// String returns the policy's name as the command line spells it.
func (p Precision) String() string {
	if p >= FP32 && int(p) < len(precisionNames) {
		return precisionNames[p]
	}
	return "Precision(" + strconv.Itoa(int(p)) + ")"
}

// ParsePrecision reads a precision name: "fp32", "fp16-mixed" / "amp" /
// "16-mixed", "bf16-mixed", "fp16-master", "bf16-master", "bf16" /
// "bf16-true", "fp16" / "fp16-true", "fp8".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "fp32", "32", "32-true", "float32":
		return FP32, nil
	case "fp16-mixed", "16-mixed", "amp", "amp-fp16":
		return FP16Mixed, nil
	case "bf16-mixed", "amp-bf16":
		return BF16Mixed, nil
	case "fp16-master", "deepspeed-fp16":
		return FP16Master, nil
	case "bf16-master", "deepspeed-bf16":
		return BF16Master, nil
	case "bf16", "bf16-true", "bfloat16":
		return BF16, nil
	case "fp16", "16-true", "fp16-true", "float16":
		return FP16, nil
	case "fp8":
		return FP8, nil
	}
	return 0, gpumem.Errorf("precision", s, gpumem.ErrInvalid,
		"want fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8")
}

// dtypes returns the storage of weights, gradients and the tensors the
// optimizer steps (master or weights), and the compute dtype.
func (p Precision) dtypes() (weights, grads, stepped, compute gpumem.DType) {
	switch p {
	case FP32:
		return gpumem.FP32, gpumem.FP32, gpumem.FP32, gpumem.FP32
	case FP16Mixed:
		return gpumem.FP32, gpumem.FP32, gpumem.FP32, gpumem.FP16
	case BF16Mixed:
		return gpumem.FP32, gpumem.FP32, gpumem.FP32, gpumem.BF16
	case FP16Master:
		return gpumem.FP16, gpumem.FP16, gpumem.FP32, gpumem.FP16
	case BF16Master, FP8:
		return gpumem.BF16, gpumem.BF16, gpumem.FP32, gpumem.BF16
	case BF16:
		return gpumem.BF16, gpumem.BF16, gpumem.BF16, gpumem.BF16
	case FP16:
		return gpumem.FP16, gpumem.FP16, gpumem.FP16, gpumem.FP16
	}
	return gpumem.Invalid, gpumem.Invalid, gpumem.Invalid, gpumem.Invalid
}

// DTypes returns the policy's storage of weights, gradients and the
// tensors the optimizer steps (master or weights), and its compute
// dtype; all Invalid for an undefined policy.
func (p Precision) DTypes() (weights, grads, stepped, compute gpumem.DType) { return p.dtypes() }

// master reports whether the policy keeps an fp32 master copy apart from
// the weights.
func (p Precision) master() bool { return p == FP16Master || p == BF16Master || p == FP8 }

// autocast reports whether 16-bit copies of fp32 weights are made.
func (p Precision) autocast() bool { return p == FP16Mixed || p == BF16Mixed }

// Copy is a frozen model held beside the trained one: a reference model
// (DPO, RLHF), a teacher (distillation), or the original model kept for
// comparison (unlearning in CogVideoX-5b, docs/scenarios.md). It holds weights only, in DType,
// and runs forward without gradients.
type Copy struct {
	Name  string
	Model Model
	// DType is the storage of the copy's weights; Invalid means the
	// job's weight dtype (quantized groups keep their own).
	DType gpumem.DType
}

// Buffer is memory the job's own code keeps on the GPU: a fixed tensor,
// or an elastic cache of Entries entries of EntryBytes each (the
// distribution compensator's cached_Z of feature vectors). Its size is Bytes + Entries×EntryBytes.
type Buffer struct {
	Name       string
	Bytes      gpumem.Bytes
	Entries    int64
	EntryBytes gpumem.Bytes
	// Elastic marks a cache whose Entries the allocator may shrink
	// ([Allocate]); a fixed buffer keeps its size.
	Elastic bool
}

// size returns the buffer's bytes.
func (b Buffer) size() (gpumem.Bytes, error) {
	n, ok := checked.Mul(b.Entries, int64(b.EntryBytes))
	if !ok {
		return 0, gpumem.Errorf("Buffer("+b.Name+").Entries", b.Entries, gpumem.ErrRange, "Entries × EntryBytes overflows")
	}
	s, ok := checked.Add(int64(b.Bytes), n)
	if !ok {
		return 0, gpumem.Errorf("Buffer("+b.Name+").Bytes", b.Bytes, gpumem.ErrRange, "size overflows")
	}
	return gpumem.Bytes(s), nil
}

// Job is one training or inference job on one GPU (or one rank of a
// parallel job: see Parallel). Required: Model, Mode, Precision, Batch,
// SeqLen; Optimizer for training. The zero values of the other fields
// mean: eager attention as the model's Hugging Face class runs it, no
// checkpointing, no accumulation, no extra models or buffers, a single
// GPU, and the default overheads of the device.
type Job struct {
	Model     Model
	Mode      Mode
	Precision Precision
	// Optimizer steps the trainable parameters (training only).
	Optimizer optimizer.Optimizer
	// Gradients says what a Training job's backward pass computes
	// gradients for; the zero value, ParamGradients, is the trainable
	// parameters, stepped by Optimizer.
	Gradients Gradients
	// OptimizerInBackward steps each parameter inside the backward pass,
	// as soon as its gradient is accumulated, with an optimizer of its
	// own, and frees the gradient (torchtune's optimizer_in_bwd:
	// torchtune/modules/optim.py OptimizerInBackward, and before it
	// training/memory.py register_optim_in_bwd_hooks, which call
	// step() and zero_grad() from a register_post_accumulate_grad_hook).
	// The full set of gradients is never alive: backward holds one
	// gradient and its step temporaries at a time, and there is no
	// separate step phase. torchtune refuses it with gradient
	// accumulation and gradient clipping, and so does Estimate with
	// GradAccum > 1; it is modelled for one GPU, with the optimizer
	// state on the GPU.
	OptimizerInBackward bool
	// HoldsPreviousStep says that the training loop still references the
	// previous micro-batch's logits and loss while the next forward runs:
	// loop variables reassigned only when the next step's model call and
	// loss return, as in litgpt's fine-tuning loops (logits =
	// model(input_ids, lm_head_chunk_size=128); loss =
	// chunked_cross_entropy(...); fabric.backward(...), litgpt/finetune/
	// lora.py at 00af8b0d, finetune/lora.py at 8641822). A loop whose
	// step function returns loss.detach() (Hugging Face's Trainer) frees
	// them before the next forward. PyTorch's own autograd nodes release
	// what they saved during backward, so the old graph holds nothing
	// else, but a custom autograd.Function keeps what it stored on ctx
	// beyond ctx.save_for_backward: bitsandbytes' 4-bit layers before
	// 0.43.2 (model.Finetune.KeepsInputs). During the forward the
	// estimate adds the previous logits, as the model returned them
	// (freed when the new logits are assigned), and those kept inputs
	// (freed when the new loss is), and holds the step's own through its
	// optimizer step. Training only.
	HoldsPreviousStep bool
	// Attention is the attention implementation (zero: Hugging Face's
	// eager attention, with the softmax dtype its family uses).
	Attention model.Attention
	// HeadChunk, with eager attention, computes the attention scores
	// HeadChunk heads at a time (model.Workload.HeadChunk); zero means
	// all heads at once.
	HeadChunk int
	// SSMKernel is the implementation of a Mamba, Mamba-2 or Jamba
	// model's state-space mixers (zero: FusedSSM, mamba_ssm's CUDA
	// kernels, what a GPU with them installed runs; SequentialSSM:
	// transformers' slow_forward or torch_forward without them).
	SSMKernel model.SSMKernel
	// Backend is the PyTorch backend whose kernels run the model (zero:
	// model.CUDA). model.CPU estimates what the job's tensors take on a
	// CPU under torch 2.6, whose dropout saves its noise in the input's
	// dtype and whose scaled_dot_product_attention falls back to the
	// math kernel under dropout and grouped-query attention (model.CPU
	// cites each fact). It changes the activations only: the overheads
	// (Job.Overhead: CUDA context, cuBLAS workspaces, fragmentation) stay
	// as given, and a CPU job's allocated level is Breakdown.Allocated()
	// less Breakdown.Workspace. PyTorch runtime only; flash_attention_2
	// has no CPU kernel.
	Backend model.Backend
	// LoRACode is the model code a LoRA or QLoRA job's forward runs
	// (zero: FrozenBaseLoRA, PEFT's LoRA Linear.forward on transformers'
	// code or torchtune's LoRALinear, whose frozen base
	// saves nothing for its weights: model.FrozenBase derives the saved
	// tensors; LitGPTLoRA: litgpt's own GPT and LoRAQKVLinear, not
	// modelled op by op, estimated as a trained base, which its published LoRA runs measure 2-9% below and its QLoRA runs within 3.3% of).
	// The frozen base needs adapters on Llama-style projections only
	// (q_proj ... down_proj) and nothing else trained; otherwise the
	// activations are a trained base's whatever the code. It changes
	// nothing for a job without adapters.
	LoRACode LoRACode
	// LoRADropout is the adapters' dropout probability (PEFT's and
	// torchtune's lora_dropout; zero: none, their default). Above zero,
	// on the frozen base each adapter saves its dropout mask and the
	// dropped copy of its input (model.FrozenBase.Dropout); a trained
	// base's activations (LitGPTLoRA, or anything trained besides the
	// adapters) do not add them. It must lie in [0, 1).
	LoRADropout float64
	// Batch is the micro-batch size (sequences per forward pass).
	Batch int
	// SeqLen is the sequence length in tokens (the prompt length when
	// generating).
	SeqLen int
	// Generate is the number of tokens generated per sequence (Generation).
	Generate int
	// KVDType is the KV cache's storage in a Generation job; Invalid
	// (zero) means the compute dtype, as Hugging Face's DynamicCache
	// keeps it. FP8E4M3 and FP8E5M2 are vLLM's kv_cache_dtype "fp8"
	// (1 byte per element; docs/features/quantization/quantized_kvcache.md),
	// INT8 TensorRT-LLM's int8 cache, Q8_0 and Q4_0 llama.cpp's
	// --cache-type-k/-v (attention.KVCache describes each); its per-tensor
	// scales are not counted.
	KVDType gpumem.DType
	// KVBlock is the page size in tokens of a paged KV cache (vLLM's
	// --block-size, 16 by default on CUDA; transformers' PagedAttentionCache
	// block_size, 32): each sequence's cache rounds up to whole blocks
	// (attention.KVCache.BlockTokens). Zero means a contiguous cache.
	KVBlock int
	// GradAccum is the number of micro-batches whose gradients are
	// accumulated before each optimizer step; 0 and 1 mean none. With
	// accumulation the gradients stay allocated through every forward
	// pass after the first.
	GradAccum int
	// Checkpointing is the activation checkpointing policy (zero: none),
	// and CheckpointEvery its k for model.EveryKCheckpointing.
	Checkpointing   model.Checkpointing
	CheckpointEvery int
	// OffloadActivations is torchtune's enable_activation_offloading
	// (torchtune/training/_activation_offloading.py, OffloadActivations
	// with its defaults: pinned host memory, a side stream, a forward
	// stash of 5 tensors, min_offload_size 1024 bytes; the output head
	// runs under NoOpManager and the loss outside the context, so the
	// logits and the loss stay on the GPU). With FullCheckpointing only
	// the checkpointed blocks' inputs are saved at the outer level, so
	// they are what moves to the host: each to a pinned buffer of the
	// CUDA host caching allocator, which rounds every request up to a
	// power of two (aten/src/ATen/core/CachingHostAllocator.h,
	// PowerOf2Ceil), reported in Breakdown.Host. The GPU keeps the
	// forward stash, the last 5 block inputs whose copies may be in
	// flight, until backward's first node clears it, and in backward the
	// block input brought back for the node being computed and the
	// previous node's, beside the recomputed block. With NoCheckpointing
	// every saved tensor of the blocks moves, as
	// model.OffloadActivations (save_on_cpu) models it. Other policies
	// are refused.
	OffloadActivations bool
	// Images is the number of images per sequence of a multimodal model;
	// each adds its image tokens (576 for LLaVA-1.5) to the sequence.
	Images int
	// Dropout marks a model run with dropout > 0 in training: CUDA
	// keeps a 1-byte mask per dropped element.
	Dropout bool
	// Loss is how a training step computes the LM head and the
	// cross-entropy (model.Loss; zero: Hugging Face's full logits with an
	// fp32 upcast). model.ChunkedLoss is torchtune's chunked output,
	// model.FusedLinearLoss Liger-Kernel's fused linear cross entropy,
	// model.CutCrossEntropyLoss Apple's cut cross-entropy; any but the
	// full loss needs a Training job of a causal language model without
	// tensor parallelism.
	Loss model.Loss
	// Compile is what of a Training job's step runs under torch.compile
	// (zero: nothing; model.CompileLayers, model.CompileLoss, both as
	// torchtune's compile=True, or model.CompileModel for the whole
	// model): compiled blocks save the min-cut partitioner's set, and a
	// compiled loss saves the logits instead of fp32 log-probabilities
	// (model/compile.go). PyTorch runtime only; Llama-style decoders with
	// SDPA or flash attention.
	Compile model.Compile
	// KeepLogits says that the training loop holds the model's output,
	// and with it the B·T·V logits, through backward and the optimizer
	// step, as a loop written `logits, loss = model(x, y);
	// loss.backward(); opt.step()` does (litgpt's fine-tuning loops, most
	// hand-written loops). The zero value is Hugging Face's Trainer:
	// Trainer.compute_loss returns only the loss (transformers v4.57.0
	// src/transformers/trainer.py, compute_loss: `return (loss, outputs)
	// if return_outputs else loss`), so the output and its logits are
	// freed before training_step calls backward; autograd saves no
	// logits (cross_entropy saves log_softmax's result, and the head's
	// matmul its input), so the loss backward runs without them.
	KeepLogits bool
	// EvalLoss, in a Prefill job, gives the model labels: the pass
	// computes the loss under torch.no_grad, as evaluation does
	// (transformers' Trainer.prediction_step: compute_loss with
	// return_outputs=True inside torch.no_grad(), the logits kept for
	// the metrics), so the loss's fp32 upcast and log-softmax exist
	// beside the logits (model.Workload.Labels). It needs every
	// position's logits (LogitsToKeep 0).
	EvalLoss bool
	// LogitsToKeep, in a Prefill job, projects only the last
	// LogitsToKeep positions of each sequence to logits (transformers'
	// logits_to_keep); zero means every position. A Generation job's
	// prompt pass already keeps one, as generate() asks.
	LogitsToKeep int
	// Copies are frozen extra models held beside the trained one.
	Copies []Copy
	// Offload moves state to host memory (see Offload).
	Offload Offload
	// Parallel is the multi-GPU layout (zero: one GPU); Estimate then
	// returns one rank's memory.
	Parallel Parallel
	// Buffers are the job's own GPU tensors and caches.
	Buffers []Buffer
	// Overhead overrides the default overheads; the zero value means
	// DefaultOverhead(Device): the CUDA context and cuBLAS workspace of
	// the job's Device, or of a GPU of unknown generation when Device is
	// zero. Fits and Utilization check the Breakdown as estimated and do
	// not redo them for the device they are given, so a scheduler that
	// checks one estimate against several kinds of GPU either estimates
	// once per kind (the context is 256 MiB on compute capability 8.6
	// parts and 426 MiB on the others, the workspace 32 MiB on Hopper and
	// 8.1 MiB elsewhere) or accepts the unknown GPU's figures.
	Overhead Overhead
	// Runtime is the engine that runs the job; zero is PyTorch. With
	// LlamaCpp, Estimate returns llama.cpp's buffers (LlamaCppBuffers):
	// the GPU model buffer in Weights, the KV buffer in KVCache, the
	// compute buffer in Workspace, the CPU buffers in Host.
	Runtime Runtime
	// LlamaCpp are llama.cpp's options (Runtime LlamaCpp only).
	LlamaCpp LlamaCppOptions
	// VLLM are vLLM's engine arguments (Runtime VLLM only). With VLLM,
	// Estimate returns one rank's memory as vLLM sizes it (VLLMBuffers):
	// the weights, the profile run's peak in Activations and the blocks
	// of KV cache gpu_memory_utilization leaves in KVCache.
	VLLM VLLMOptions
	// SGLang are SGLang's server arguments (Runtime SGLang only). With
	// SGLang, Estimate returns one rank's weights and the KV pool
	// mem_fraction_static leaves (SGLangBuffers).
	SGLang SGLangOptions
	// Device chooses device-specific defaults: the CUDA context by its
	// compute capability (Device.Compute, or the catalog's for its Name;
	// DefaultContext) and the Hopper cuBLAS workspace. The zero Device is
	// a GPU of unknown generation.
	Device gpumem.Device
}

// Gradients is what the backward pass of a training job computes
// gradients for.
type Gradients uint8

const (
	// ParamGradients, the zero value: the trainable parameters get
	// gradients, and Job.Optimizer steps them. A model with nothing
	// trainable and no optimizer is a backward pass to the input only,
	// as with InputGradients.
	ParamGradients Gradients = iota
	// NoStep computes and keeps the trainable parameters' gradients but
	// runs no optimizer (loss.backward() alone: gradient statistics,
	// saliency over weights, an optimizer the job steps elsewhere):
	// gradients, no optimizer state, no step phase. Job.Optimizer must be
	// nil.
	NoStep
	// InputGradients freezes every parameter (requires_grad_(False)) and
	// differentiates with respect to the input only, as an adversarial
	// attack does (the Whisper language attack's PGD on the input
	// perturbation):
	// forward saves activations because the input requires grad, and
	// backward reaches the input; no parameter gradient, no optimizer
	// state, no step. The Model's trainable set is ignored (a LoRA
	// adapter is a frozen weight like the others); Job.Optimizer must be
	// nil. A frozen weight's op saves no input for the weight's gradient
	// (model.FrozenInput), so the forward saves less than a trained
	// model's.
	InputGradients

	numGradients
)

var gradientsNames = [...]string{ParamGradients: "params", NoStep: "no-step", InputGradients: "input"}

// String returns "params", "no-step" or "input".
func (g Gradients) String() string {
	if g < numGradients {
		return gradientsNames[g]
	}
	return "Gradients(" + strconv.Itoa(int(g)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (g Gradients) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// Offload is a set of states kept in host (CPU) memory instead of on the
// GPU. Offloaded bytes are reported in Breakdown.Host, not in the GPU
// peak.
type Offload uint8

const (
	// OffloadOptimizer keeps the optimizer state and the fp32 master
	// weights in host memory and runs the step there, as DeepSpeed's
	// ZeRO-Offload does with its CPU Adam (zero_optimization.
	// offload_optimizer.device "cpu"; Ren et al., "ZeRO-Offload", 2021).
	// The GPU keeps the 16-bit weights and, conservatively, the
	// gradients until the step (DeepSpeed streams them to the host per
	// bucket, which can only lower the peak).
	OffloadOptimizer Offload = 1 << iota
	// OffloadCopies keeps the frozen extra models (Job.Copies) in host
	// memory and moves each to the GPU only while it runs, as diffusers'
	// enable_model_cpu_offload moves whole models on use: the GPU holds
	// the largest copy instead of all of them.
	OffloadCopies
	// OffloadParams keeps the partitioned weights and gradients of a
	// ZeRO-3 / FSDP FULL_SHARD job in host memory (DeepSpeed
	// zero_optimization.offload_param.device "cpu", ZeRO-Infinity;
	// FSDP CPUOffload(offload_params=True)): the GPU holds only the
	// gathered parameters (and the tensors DeepSpeed keeps whole) and the
	// gradients in flight. It needs Parallel.Stage 3.
	OffloadParams

	offloadAll = OffloadOptimizer | OffloadCopies | OffloadParams
)

// String returns "none", "optimizer", "copies" or "optimizer+copies".
func (o Offload) String() string {
	switch o {
	case 0:
		return "none"
	case OffloadOptimizer:
		return "optimizer"
	case OffloadCopies:
		return "copies"
	case OffloadOptimizer | OffloadCopies:
		return "optimizer+copies"
	case OffloadParams:
		return "params"
	case OffloadParams | OffloadOptimizer:
		return "optimizer+params"
	case OffloadParams | OffloadOptimizer | OffloadCopies:
		return "optimizer+params+copies"
	case OffloadParams | OffloadCopies:
		return "params+copies"
	}
	return "Offload(" + strconv.Itoa(int(o)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (o Offload) MarshalText() ([]byte, error) { return []byte(o.String()), nil }
