package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// jobFlags are the flags that describe a job, shared by estimate and
// (later) plan.
type Flags struct {
	ModelFlags
	Train, Infer      bool
	Generate          int
	Batch, Seq, Accum int
	Precision         string
	Opt, Attn, Ckpt   string
	SSMKernel         string
	OptImpl           string  // --optimizer-impl
	Momentum          float64 // --momentum
	Nesterov          bool    // --nesterov
	InBwd             bool    // --optimizer-in-backward
	Frozen            bool    // --frozen
	OffloadActs       bool    // --offload-activations
	LoRARank          int64
	LoRATargets       string
	QLoRA             bool
	LoadOnly          bool   // --load: a Load job, the model loaded, nothing run
	Quant             string // --quant: int8, nf4, fp4, gptq, awq or fp8
	GroupSize         int64  // --group-size, with gptq and awq
	KVDType           string // --kv-dtype
	KVBlock           int    // --kv-block
	GPU, Memory       string
	Images            int
	Dropout           bool
	Head              string // --head: the task head, overriding the config's architectures
	Labels            int    // --labels: num_labels of a classification head
	ImageSize         int    // --image-size: a vision backbone's image side in pixels
	Loss              string // --loss: full, chunked[:N], liger or cce
	LogitsToKeep      int    // --logits-to-keep
	KeepLogits        bool   // --keep-logits
	EvalLoss          bool   // --eval
	GPUs, ZeRO        int
	Layout            LayoutFlags
	CUDA              string
	Lazy              OptBool
	Llama             LlamaFlags // --runtime and llama.cpp's flags
	VLLM              VLLMFlags  // vLLM's flags (--runtime vllm)
	SGLang            SGLangFlags

	// profile is --profile: an overhead profile file written by gpumem
	// calibrate, applied as the job's Overhead.
	Profile string
	// profileData is a profile given inline (serve's "profile" field),
	// applied like --profile's file.
	ProfileData *Profile
}

// vllmFlags are vLLM's engine arguments (budget.VLLMOptions).
type VLLMFlags struct {
	GPUMemUtil     float64 // --gpu-memory-utilization; 0: 0.9
	MaxModelLen    int     // --max-model-len; 0: --seq + --generate
	BatchedTokens  int     // --max-num-batched-tokens; 0: 2048
	MaxNumSeqs     int     // --max-num-seqs; 0: 256
	BlockSize      int     // --block-size; 0: 16
	KVCacheDType   string  // --kv-cache-dtype; "" or auto: the weights' dtype
	TensorParallel int     // --tensor-parallel-size; 0: 1
	CUDAGraphMem   string  // --cuda-graph-memory: vLLM's "Estimated CUDA graph memory"
	EnforceEager   bool    // --enforce-eager
	V0             bool    // --vllm-v0
}

// vllmFlagNames are the flags that only a vLLM job takes.
var vllmFlagNames = []string{"gpu-memory-utilization", "max-model-len", "max-num-batched-tokens", "max-num-seqs", "block-size", "kv-cache-dtype", "tensor-parallel-size",
	"cuda-graph-memory", "enforce-eager", "vllm-v0"}

func (v *VLLMFlags) Register(fs *flag.FlagSet) {
	fs.Float64Var(&v.GPUMemUtil, "gpu-memory-utilization", 0, "with --runtime vllm: the fraction of the GPU's total memory vLLM may use, in (0, 1] (default 0.9)")
	fs.IntVar(&v.MaxModelLen, "max-model-len", 0, "with --runtime vllm: the longest request vLLM must hold in its KV cache (default --seq + --generate)")
	fs.IntVar(&v.BatchedTokens, "max-num-batched-tokens", 0, "with --runtime vllm: the tokens of vLLM's profile run (default 2048)")
	fs.IntVar(&v.MaxNumSeqs, "max-num-seqs", 0, "with --runtime vllm: the sequences of vLLM's profile sampler run (default 256)")
	fs.IntVar(&v.BlockSize, "block-size", 0, "with --runtime vllm: tokens per KV block (default 16)")
	fs.StringVar(&v.KVCacheDType, "kv-cache-dtype", "", "with --runtime vllm or sglang: auto (the weights' dtype, default), fp8 (vLLM), fp8_e4m3 or fp8_e5m2")
	fs.StringVar(&v.CUDAGraphMem, "cuda-graph-memory", "", "with --runtime vllm: vLLM's \"Estimated CUDA graph memory\" from a log of the same model and settings (v0.21+ subtract it from the KV cache), e.g. 1.58GiB")
	fs.BoolVar(&v.EnforceEager, "enforce-eager", false, "with --runtime vllm: vLLM's --enforce-eager, no CUDA graphs")
	fs.BoolVar(&v.V0, "vllm-v0", false, "with --runtime vllm: the V0 engine (VLLM_USE_V1=0, the default before 0.8): its profile run sorts the sampler's logits for top-k/top-p (a larger activation peak) and only the driver rank samples")
	fs.IntVar(&v.TensorParallel, "tensor-parallel-size", 0, "with --runtime vllm or sglang: GPUs the weights and KV heads are split over; figures are per GPU (default 1)")
}

// apply sets j's vLLM options (j.Runtime is set). On error it returns the
// flag at fault, without its dashes.
func (v *VLLMFlags) Apply(j *budget.Job) (string, error) {
	given := map[string]string{}
	if v.GPUMemUtil != 0 {
		given["gpu-memory-utilization"] = strconv.FormatFloat(v.GPUMemUtil, 'g', -1, 64)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max-model-len", v.MaxModelLen}, {"max-num-batched-tokens", v.BatchedTokens}, {"max-num-seqs", v.MaxNumSeqs},
		{"block-size", v.BlockSize}, {"tensor-parallel-size", v.TensorParallel}} {
		if c.v != 0 {
			given[c.name] = strconv.Itoa(c.v)
		}
	}
	if v.KVCacheDType != "" {
		given["kv-cache-dtype"] = v.KVCacheDType
	}
	if v.CUDAGraphMem != "" {
		given["cuda-graph-memory"] = v.CUDAGraphMem
	}
	if v.EnforceEager {
		given["enforce-eager"] = "true"
	}
	if v.V0 {
		given["vllm-v0"] = "true"
	}
	if j.Runtime == budget.SGLang {
		// SGLang names these two as vLLM does; the others are vLLM's.
		for _, name := range vllmFlagNames {
			if val, ok := given[name]; ok && name != "tensor-parallel-size" && name != "kv-cache-dtype" {
				return name, fmt.Errorf("%w: --%s %s: it is a vLLM option (SGLang's are --mem-fraction-static, --max-total-tokens, --page-size, --context-length, --tensor-parallel-size and --kv-cache-dtype)", ErrUsage, name, val)
			}
		}
		if v.TensorParallel < 0 {
			return "tensor-parallel-size", fmt.Errorf("%w: --tensor-parallel-size %d: must not be negative", ErrUsage, v.TensorParallel)
		}
		j.SGLang.TensorParallel = v.TensorParallel
		switch v.KVCacheDType {
		case "", "auto":
		case "fp8_e5m2":
			j.SGLang.KVCacheDType = gpumem.FP8E5M2
		case "fp8_e4m3":
			j.SGLang.KVCacheDType = gpumem.FP8E4M3
		default:
			return "kv-cache-dtype", fmt.Errorf("%w: --kv-cache-dtype %q: SGLang takes auto, fp8_e5m2 or fp8_e4m3", ErrUsage, v.KVCacheDType)
		}
		return "", nil
	}
	if j.Runtime != budget.VLLM {
		for _, name := range vllmFlagNames {
			if val, ok := given[name]; ok {
				return name, fmt.Errorf("%w: --%s %s: it is a vLLM option (give --runtime vllm, or leave --%s out)", ErrUsage, name, val, name)
			}
		}
		return "", nil
	}
	if u := v.GPUMemUtil; math.IsNaN(u) || u < 0 || u > 1 {
		return "gpu-memory-utilization", fmt.Errorf("%w: --gpu-memory-utilization %s: want a fraction in (0, 1], such as 0.9", ErrUsage, given["gpu-memory-utilization"])
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max-model-len", v.MaxModelLen}, {"max-num-batched-tokens", v.BatchedTokens}, {"max-num-seqs", v.MaxNumSeqs},
		{"block-size", v.BlockSize}, {"tensor-parallel-size", v.TensorParallel}} {
		if c.v < 0 {
			return c.name, fmt.Errorf("%w: --%s %d: must not be negative", ErrUsage, c.name, c.v)
		}
	}
	o := &j.VLLM
	if v.CUDAGraphMem != "" {
		b, err := gpumem.ParseBytes(v.CUDAGraphMem)
		if err != nil || b < 0 {
			return "cuda-graph-memory", fmt.Errorf("%w: --cuda-graph-memory %q: want a size such as 1.58GiB", ErrUsage, v.CUDAGraphMem)
		}
		if v.EnforceEager && b > 0 {
			return "cuda-graph-memory", fmt.Errorf("%w: --cuda-graph-memory %s: --enforce-eager captures no CUDA graphs", ErrUsage, v.CUDAGraphMem)
		}
		o.CUDAGraphMemory = b
	}
	o.EnforceEager, o.V0 = v.EnforceEager, v.V0
	o.GPUMemoryUtilization, o.MaxModelLen, o.MaxNumBatchedTokens = v.GPUMemUtil, v.MaxModelLen, v.BatchedTokens
	o.MaxNumSeqs, o.BlockSize, o.TensorParallel = v.MaxNumSeqs, v.BlockSize, v.TensorParallel
	switch v.KVCacheDType {
	case "", "auto":
	case "fp8", "fp8_e4m3":
		o.KVCacheDType = gpumem.FP8E4M3
	case "fp8_e5m2":
		o.KVCacheDType = gpumem.FP8E5M2
	default:
		return "kv-cache-dtype", fmt.Errorf("%w: --kv-cache-dtype %q: want auto, fp8, fp8_e4m3 or fp8_e5m2", ErrUsage, v.KVCacheDType)
	}
	return "", nil
}

// llamaFlags are --runtime and the llama.cpp options (budget.LlamaCppOptions).
type LlamaFlags struct {
	Runtime        string // --runtime: pytorch or llama.cpp (default llama.cpp for --gguf inference)
	GPULayers      string // --n-gpu-layers; "" or -1: all
	CtxSize        int    // --ctx-size; 0: --parallel × (--seq + --generate)
	Parallel       int    // --parallel; 0: --batch
	UBatch         int    // --ubatch-size; 0: 512
	FlashAttn      bool   // --flash-attn
	CacheK, CacheV string // --cache-type-k, --cache-type-v
	SplitMode      string // --split-mode: layer (default), row or none
	TensorSplit    string // --tensor-split: comma-separated shares
	MainGPU        int    // --main-gpu
	NoMmap         bool   // --no-mmap
	Version        string // --llamacpp-version: the build's date (budget.ParseLlamaCppVersion)
	SWAFull        bool   // --swa-full
}

// llamaFlagNames are the flags that only a llama.cpp job takes.
var llamaFlagNames = []string{"n-gpu-layers", "ctx-size", "parallel", "ubatch-size", "flash-attn", "cache-type-k", "cache-type-v",
	"split-mode", "tensor-split", "main-gpu", "no-mmap", "llamacpp-version", "swa-full"}

func (l *LlamaFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&l.Runtime, "runtime", "", "the engine: pytorch (transformers), llama.cpp (also Ollama) or vllm; default llama.cpp for a --gguf inference job, pytorch otherwise")
	fs.StringVar(&l.GPULayers, "n-gpu-layers", "", "with --runtime llama.cpp: llama.cpp's -ngl, the last N of the n_layer + 1 slots (the output layer is one) on the GPU (default, or -1: all)")
	fs.IntVar(&l.CtxSize, "ctx-size", 0, "with --runtime llama.cpp: llama.cpp's -c, the KV cache's tokens over all sequences (default --parallel × (--seq + --generate))")
	fs.IntVar(&l.Parallel, "parallel", 0, "with --runtime llama.cpp: llama-server's --parallel, the sequences that share --ctx-size, each share padded to 256 cells (default --batch)")
	fs.IntVar(&l.UBatch, "ubatch-size", 0, "with --runtime llama.cpp: llama.cpp's -ub, the tokens per graph evaluation, which size the compute buffer (default 512)")
	fs.BoolVar(&l.FlashAttn, "flash-attn", false, "with --runtime llama.cpp: llama.cpp's --flash-attn on (no n_ctx × n_ubatch × n_head score matrix)")
	fs.StringVar(&l.CacheK, "cache-type-k", "", "with --runtime llama.cpp: llama.cpp's -ctk: f16 (default), f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl")
	fs.StringVar(&l.CacheV, "cache-type-v", "", "with --runtime llama.cpp: llama.cpp's -ctv (as --cache-type-k)")
	fs.StringVar(&l.SplitMode, "split-mode", "", "with --runtime llama.cpp and --gpus N: llama.cpp's -sm: layer (default: whole layers and their KV per GPU), row (matrices' rows over every GPU) or none (--main-gpu alone)")
	fs.StringVar(&l.TensorSplit, "tensor-split", "", "with --runtime llama.cpp: llama.cpp's -ts, each GPU's share, comma-separated (3,1); its entries set --gpus when that is not given (default even)")
	fs.BoolVar(&l.NoMmap, "no-mmap", false, "with --runtime llama.cpp: llama.cpp's --no-mmap: the CPU tensors read into a buffer of their size, not the file span mapped")
	fs.StringVar(&l.Version, "llamacpp-version", "", "with --runtime llama.cpp: the build's date, YYYY-MM-DD (or YYYY-MM), which sets how -ngl places the layers: before 2025-12-17 the repeating layers go first and the output layer last, before 2023-12-07 the V and K caches are two more slots, and a DeepSeek-V2/V3 cache keeps every head's K and V before 2025-04-15, the MLA latent in K and V until 2026-01-24, in K alone since; a sliding-window model (Gemma 2 and 3, gpt-oss) has no SWA cache before 2025-05-20 (default current: the output layer first)")
	fs.BoolVar(&l.SWAFull, "swa-full", false, "with --runtime llama.cpp: llama.cpp's --swa-full: a sliding-window model's (Gemma 2 and 3, gpt-oss, Cohere2, Llama 4) SWA layers keep a cache of the whole context instead of n_swa + n_ubatch cells per sequence (builds from 2025-05-20; earlier ones always do)")
	fs.IntVar(&l.MainGPU, "main-gpu", 0, "with --runtime llama.cpp and --split-mode none: llama.cpp's -mg, the GPU used")
}

// apply sets j's Runtime and llama.cpp options; gguf says the model came
// from a GGUF file. On error it returns the flag at fault, without its
// dashes (gpumem serve names the request field after it).
func (l *LlamaFlags) Apply(j *budget.Job, gguf bool) (string, error) {
	rt := budget.PyTorch
	if l.Runtime != "" {
		var err error
		if rt, err = budget.ParseRuntime(l.Runtime); err != nil {
			return "runtime", fmt.Errorf("%w: --runtime %q: want pytorch, llama.cpp or vllm", ErrUsage, l.Runtime)
		}
		if rt != budget.PyTorch && j.Mode != budget.Prefill && j.Mode != budget.Generation {
			return "runtime", fmt.Errorf("%w: --runtime %s: %s runs inference (give --infer)", ErrUsage, l.Runtime, rt)
		}
	} else if gguf && (j.Mode == budget.Prefill || j.Mode == budget.Generation) {
		rt = budget.LlamaCpp
	}
	j.Runtime = rt
	given := map[string]string{}
	if l.GPULayers != "" {
		given["n-gpu-layers"] = l.GPULayers
	}
	if l.CtxSize != 0 {
		given["ctx-size"] = strconv.Itoa(l.CtxSize)
	}
	if l.Parallel != 0 {
		given["parallel"] = strconv.Itoa(l.Parallel)
	}
	if l.UBatch != 0 {
		given["ubatch-size"] = strconv.Itoa(l.UBatch)
	}
	if l.FlashAttn {
		given["flash-attn"] = "true"
	}
	if l.CacheK != "" {
		given["cache-type-k"] = l.CacheK
	}
	if l.CacheV != "" {
		given["cache-type-v"] = l.CacheV
	}
	if l.SplitMode != "" {
		given["split-mode"] = l.SplitMode
	}
	if l.TensorSplit != "" {
		given["tensor-split"] = l.TensorSplit
	}
	if l.MainGPU != 0 {
		given["main-gpu"] = strconv.Itoa(l.MainGPU)
	}
	if l.NoMmap {
		given["no-mmap"] = "true"
	}
	if l.Version != "" {
		given["llamacpp-version"] = l.Version
	}
	if l.SWAFull {
		given["swa-full"] = "true"
	}
	if rt != budget.LlamaCpp {
		for _, name := range llamaFlagNames {
			if v, ok := given[name]; ok {
				return name, fmt.Errorf("%w: --%s %s: it is a llama.cpp option (give --runtime llama.cpp, or leave --%s out)", ErrUsage, name, v, name)
			}
		}
		return "", nil
	}
	o := &j.LlamaCpp
	if l.GPULayers != "" {
		n, err := strconv.Atoi(l.GPULayers)
		switch {
		case err != nil || n < -1:
			return "n-gpu-layers", fmt.Errorf("%w: --n-gpu-layers %s: want -1 (all) or a count of layers", ErrUsage, l.GPULayers)
		case n == 0:
			return "n-gpu-layers", fmt.Errorf("%w: --n-gpu-layers 0: nothing would be on the GPU but the compute buffer, which is not modelled (give 1 or more, or -1 for all)", ErrUsage)
		case n > 0:
			o.GPULayers = n
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"ctx-size", l.CtxSize}, {"parallel", l.Parallel}, {"ubatch-size", l.UBatch}} {
		if c.v < 0 {
			return c.name, fmt.Errorf("%w: --%s %d: must not be negative", ErrUsage, c.name, c.v)
		}
	}
	o.Context, o.Parallel, o.UBatch, o.FlashAttention = l.CtxSize, l.Parallel, l.UBatch, l.FlashAttn
	if l.Version != "" {
		v, err := budget.ParseLlamaCppVersion("--llamacpp-version", l.Version)
		if err != nil {
			return "llamacpp-version", fmt.Errorf("%w: %w", ErrUsage, err)
		}
		o.Version = v
	}
	for _, c := range []struct {
		name, v string
		dst     *gpumem.DType
	}{{"cache-type-k", l.CacheK, &o.CacheK}, {"cache-type-v", l.CacheV, &o.CacheV}} {
		if c.v == "" {
			continue
		}
		dt, err := gpumem.ParseDType(c.v)
		if err != nil {
			return c.name, fmt.Errorf("%w: --%s %q: want f16, f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl", ErrUsage, c.name, c.v)
		}
		*c.dst = dt
	}
	if l.SplitMode != "" {
		m, err := budget.ParseLlamaSplitMode(l.SplitMode)
		if err != nil {
			return "split-mode", fmt.Errorf("%w: --split-mode %q: want layer, row or none", ErrUsage, l.SplitMode)
		}
		o.SplitMode = m
	}
	if l.TensorSplit != "" {
		parts := strings.Split(l.TensorSplit, ",")
		if len(parts) > budget.LlamaMaxDevices {
			return "tensor-split", fmt.Errorf("%w: --tensor-split %s: at most %d GPUs", ErrUsage, l.TensorSplit, budget.LlamaMaxDevices)
		}
		sum := 0.0
		for i, p := range parts {
			f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
				return "tensor-split", fmt.Errorf("%w: --tensor-split %s: %q is not a share (want numbers of at least 0, such as 3,1)", ErrUsage, l.TensorSplit, p)
			}
			o.TensorSplit[i] = f
			sum += f
		}
		if sum == 0 {
			return "tensor-split", fmt.Errorf("%w: --tensor-split %s: every share is zero", ErrUsage, l.TensorSplit)
		}
		o.GPUs = len(parts)
	}
	if l.MainGPU < 0 {
		return "main-gpu", fmt.Errorf("%w: --main-gpu %d: must not be negative", ErrUsage, l.MainGPU)
	}
	o.MainGPU, o.NoMmap, o.SWAFull = l.MainGPU, l.NoMmap, l.SWAFull
	return "", nil
}

// optBool is a boolean flag that remembers whether it was given:
// --lazy-loading, --lazy-loading=false, or neither (the default).
type OptBool struct{ Given, Value bool }

func (b *OptBool) String() string {
	if b == nil || !b.Given {
		return ""
	}
	return strconv.FormatBool(b.Value)
}

func (b *OptBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	b.Given, b.Value = true, v
	return nil
}

func (b *OptBool) IsBoolFlag() bool { return true }

func (f *Flags) Register(fs *flag.FlagSet) {
	f.ModelFlags.Register(fs)
	fs.BoolVar(&f.Train, "train", false, "a training job (forward, backward, optimizer step)")
	fs.BoolVar(&f.Infer, "infer", false, "an inference job (one forward pass without gradients)")
	fs.IntVar(&f.Generate, "generate", 0, "with --infer: generate N tokens per sequence with a KV cache")
	fs.IntVar(&f.Batch, "batch", 1, "micro-batch size in sequences")
	fs.IntVar(&f.Seq, "seq", 2048, "sequence length in tokens (the prompt with --generate)")
	fs.IntVar(&f.Accum, "grad-accum", 1, "gradient accumulation steps")
	fs.StringVar(&f.Precision, "precision", "", "fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8 (default bf16-mixed to train, bf16 to infer)")
	fs.StringVar(&f.Opt, "optimizer", "adamw", "adamw, adam, adamw8bit, paged_adamw_8bit, adafactor, sgd, lion, ... (Hugging Face names); none: forward and backward only, the gradients kept, no state and no step")
	fs.StringVar(&f.OptImpl, "optimizer-impl", "", "with a torch.optim optimizer (adam, adamw, sgd, adagrad, rmsprop): foreach (PyTorch 2's default on CUDA), for-loop (foreach=False) or fused (fused=True); sets the step's temporaries")
	fs.Float64Var(&f.Momentum, "momentum", 0, "with --optimizer sgd or rmsprop: the momentum factor; above 0 keeps a momentum_buffer per parameter")
	fs.BoolVar(&f.Nesterov, "nesterov", false, "with --optimizer sgd and --momentum: Nesterov momentum (nesterov=True)")
	fs.BoolVar(&f.InBwd, "optimizer-in-backward", false, "step each parameter inside backward as soon as its gradient is ready, then free the gradient (torchtune's optimizer_in_bwd); not with --grad-accum")
	fs.BoolVar(&f.Frozen, "frozen", false, "with --train: every parameter frozen, backward to the input only (an adversarial attack on the input): activations saved, no gradients, no optimizer")
	fs.StringVar(&f.Attn, "attention", "sdpa", "eager, sdpa or flash")
	fs.StringVar(&f.SSMKernel, "ssm-kernel", "fused", "a Mamba, Mamba-2 or Jamba model's state-space mixer: fused (mamba_ssm's CUDA kernels) or sequential (transformers' code without them)")
	fs.StringVar(&f.Ckpt, "checkpointing", "none", "none, selective, full or offload")
	fs.BoolVar(&f.OffloadActs, "offload-activations", false, "with --train: torchtune's enable_activation_offloading: with --checkpointing full the block inputs move to pinned host memory (5 in flight stay on the GPU); with none every saved tensor of the blocks, as --checkpointing offload")
	fs.Int64Var(&f.LoRARank, "lora-rank", 0, "train LoRA adapters of this rank (base frozen)")
	fs.StringVar(&f.LoRATargets, "lora-targets", "", "with --lora-rank or --qlora: PEFT's target_modules, comma-separated (q_proj,v_proj; all-linear); default: PEFT's for the family")
	fs.BoolVar(&f.QLoRA, "qlora", false, "store the base linear weights in NF4 with double quantization (QLoRA); the other frozen weights in the compute dtype")
	fs.BoolVar(&f.LoadOnly, "load", false, "a load-only job: the weights, buffers and CUDA context, nothing run (instead of --train or --infer)")
	fs.StringVar(&f.Quant, "quant", "", "store the base linear weights quantized: int8 (bitsandbytes LLM.int8), nf4, fp4 (bitsandbytes 4-bit), gptq, awq (4-bit) or fp8 (128×128 block scales); training needs --lora-rank")
	fs.Int64Var(&f.GroupSize, "group-size", 0, "with --quant gptq or awq: input features per scale (default 128; -1: one group per row)")
	fs.StringVar(&f.KVDType, "kv-dtype", "", "with --generate: the KV cache's dtype (fp8, fp8_e5m2, int8, Q8_0, Q4_0, ...; default the compute dtype)")
	fs.IntVar(&f.KVBlock, "kv-block", 0, "with --generate: a paged KV cache of blocks of N tokens (vLLM --block-size; default contiguous)")
	fs.IntVar(&f.Images, "images", 0, "images per sequence (multimodal models)")
	fs.BoolVar(&f.Dropout, "dropout", false, "with --train: the model trains with dropout > 0 (BERT, T5, OPT, GPT-2 by their configs); CUDA keeps a 1-byte mask per dropped element")
	fs.StringVar(&f.Head, "head", "", "the task head, overriding the class the config's architectures name: "+strings.Join(model.HeadNames(), ", "))
	fs.IntVar(&f.Labels, "labels", 0, "with a seq-cls, token-cls or image-cls head: the classifier's num_labels (default: the config's, else 2)")
	fs.IntVar(&f.ImageSize, "image-size", 0, "a vision backbone's (resnet, convnext, swin, efficientnet) square image side in pixels, with --batch images per step (default: the config's image_size, 224)")
	fs.StringVar(&f.Loss, "loss", "full", "with --train: the LM head's loss: full (Hugging Face: every logit, upcast to fp32), chunked or chunked:N (torchtune's chunked output, 8 chunks by default), liger (Liger-Kernel's fused linear cross entropy) or cce (Apple's cut cross-entropy)")
	fs.BoolVar(&f.KeepLogits, "keep-logits", false, "with --train: the loop holds the model's output (its batch×seq×vocab logits) through backward and the optimizer step, as `logits, loss = model(x, y)` does (litgpt); the default is Hugging Face's Trainer, whose compute_loss returns the loss alone, so the logits are freed before backward")
	fs.BoolVar(&f.EvalLoss, "eval", false, "with --infer and no --generate: an evaluation pass, labels given, the loss computed under torch.no_grad (Trainer.evaluate): the loss's fp32 upcast and log-softmax beside the logits")
	fs.IntVar(&f.LogitsToKeep, "logits-to-keep", 0, "with --infer and no --generate: project only the last N positions of each sequence to logits (transformers' logits_to_keep); 0: every position")
	fs.IntVar(&f.GPUs, "gpus", 1, "GPUs per node (data-parallel ranks, with --zero the ranks state is sharded over); the estimate is per GPU")
	fs.IntVar(&f.ZeRO, "zero", 0, "DeepSpeed ZeRO stage 0-3 (see --fsdp for PyTorch FSDP)")
	f.Layout.Register(fs)
	fs.StringVar(&f.GPU, "gpu", "", "check the fit on this GPU (e.g. h100, a100-80gb, \"NVIDIA GeForce RTX 4090\"; see gpumem devices)")
	fs.StringVar(&f.Memory, "memory", "", "check the fit in this much free memory (e.g. 80GiB, 24GB)")
	f.Llama.Register(fs)
	f.VLLM.Register(fs)
	f.SGLang.Register(fs)
	fs.StringVar(&f.CUDA, "cuda", "", "the CUDA version of the PyTorch build (torch.version.cuda: 12.1, or the wheel's cu121), which sizes the CUDA context (default: a current CUDA 12)")
	fs.Var(&f.Lazy, "lazy-loading", "CUDA lazy module loading (CUDA_MODULE_LOADING=LAZY); --lazy-loading=false for EAGER, whose context holds every kernel (default: lazy from CUDA 11.7, eager before)")
	fs.StringVar(&f.Profile, "profile", "", "apply the overhead `FILE` gpumem calibrate wrote from your GPUs' measurements (CUDA context, fragmentation, cuBLAS workspace) instead of the defaults")
}

// job builds the budget.Job the flags describe, and the device to check
// it against (Capacity zero when none was named).
func (f *Flags) Job() (budget.Job, gpumem.Device, error) {
	s, err := f.Load()
	if err != nil {
		return budget.Job{}, gpumem.Device{}, err
	}
	return f.JobFor(s)
}

// jobFor builds the budget.Job the flags describe for the model s, which
// the caller has loaded (gpumem serve reads an inline config.json).
func (f *Flags) JobFor(s model.Spec) (budget.Job, gpumem.Device, error) {
	return f.JobWith(s, budget.NewModel)
}

// jobWith is jobFor with the step that turns the model.Finetune the
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
	d, catalog, err := DeviceFlags(f.GPU, f.Memory)
	if err != nil {
		return j, dev, err
	}
	if dev = d; catalog {
		j.Device = d
	}
	if j.Runtime == budget.VLLM || j.Runtime == budget.SGLang {
		if dev.Capacity == 0 {
			return j, dev, fmt.Errorf("%w: --runtime %s: %s sizes its KV cache from the GPU's memory: give --gpu or --memory", ErrUsage, j.Runtime, j.Runtime)
		}
		if j.Device.Capacity == 0 {
			j.Device.Capacity = dev.Capacity
		}
	}
	return j, dev, nil
}

// optimizerFor reads --optimizer, --optimizer-impl, --momentum,
// --nesterov and --frozen for a training job: the optimizer (nil for
// none), what backward computes gradients for, and on error the flag at
// fault, without its dashes (gpumem serve names the request field
// after it).
func (f *Flags) OptimizerFor() (optimizer.Optimizer, budget.Gradients, string, error) {
	none := strings.EqualFold(strings.TrimSpace(f.Opt), "none")
	if f.Frozen || none {
		what := "--frozen: no parameter is trained"
		if !f.Frozen {
			what = "--optimizer none: no step runs"
		}
		switch {
		case f.Frozen && (f.LoRARank > 0 || f.QLoRA):
			return nil, 0, "frozen", fmt.Errorf("%w: --frozen: every parameter is frozen, LoRA adapters too (leave out --frozen or --lora-rank and --qlora)", ErrUsage)
		case f.InBwd:
			return nil, 0, "optimizer-in-backward", fmt.Errorf("%w: --optimizer-in-backward: %s, so there is nothing to step in backward", ErrUsage, what)
		case f.OptImpl != "":
			return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %s: %s, so there is no optimizer implementation to choose", ErrUsage, f.OptImpl, what)
		case f.Momentum != 0 || f.Nesterov:
			name := "momentum"
			if f.Momentum == 0 {
				name = "nesterov"
			}
			return nil, 0, name, fmt.Errorf("%w: --%s: %s, so there is no momentum", ErrUsage, name, what)
		}
		if f.Frozen {
			return nil, budget.InputGradients, "", nil
		}
		return nil, budget.NoStep, "", nil
	}
	o, ok := optimizer.Lookup(f.Opt)
	if !ok {
		return nil, 0, "optimizer", fmt.Errorf("%w: --optimizer %q is not modelled (try adamw, adamw8bit, adafactor, sgd, lion, none)", ErrUsage, f.Opt)
	}
	if math.IsNaN(f.Momentum) || math.IsInf(f.Momentum, 0) || f.Momentum < 0 {
		return nil, 0, "momentum", fmt.Errorf("%w: --momentum %v: want a finite factor of at least 0, such as 0.9", ErrUsage, f.Momentum)
	}
	if f.Nesterov && f.Momentum == 0 {
		return nil, 0, "nesterov", fmt.Errorf("%w: --nesterov: Nesterov momentum needs a momentum (give --momentum 0.9, say)", ErrUsage)
	}
	switch opt := o.(type) {
	case optimizer.SGD:
		opt.Momentum, opt.Nesterov = f.Momentum, f.Nesterov
		o = opt
	case optimizer.RMSprop:
		if f.Nesterov {
			return nil, 0, "nesterov", fmt.Errorf("%w: --nesterov: torch.optim.RMSprop has no Nesterov momentum (--optimizer sgd has)", ErrUsage)
		}
		opt.Momentum = f.Momentum
		o = opt
	default:
		if f.Momentum != 0 || f.Nesterov {
			name := "momentum"
			if f.Momentum == 0 {
				name = "nesterov"
			}
			return nil, 0, name, fmt.Errorf("%w: --%s: %s takes no momentum setting (--optimizer sgd or rmsprop do)", ErrUsage, name, o)
		}
	}
	if f.OptImpl == "" {
		return o, budget.ParamGradients, "", nil
	}
	var impl optimizer.Impl
	switch strings.ToLower(strings.TrimSpace(f.OptImpl)) {
	case "foreach":
		impl = optimizer.Foreach
	case "for-loop", "forloop", "single-tensor":
		impl = optimizer.ForLoop
	case "fused":
		impl = optimizer.Fused
	default:
		return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %q: want foreach, for-loop or fused", ErrUsage, f.OptImpl)
	}
	clash := func(had optimizer.Impl) error {
		if had != optimizer.Foreach && had != impl {
			return fmt.Errorf("%w: --optimizer-impl %s: --optimizer %s already names the %s implementation", ErrUsage, f.OptImpl, f.Opt, had)
		}
		return nil
	}
	var cerr error
	switch opt := o.(type) {
	case optimizer.SGD:
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	case optimizer.Adam:
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	case optimizer.AdamW:
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	case optimizer.Adagrad:
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	case optimizer.RMSprop:
		if impl == optimizer.Fused {
			return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl fused: torch.optim.RMSprop has no fused kernel (want foreach or for-loop)", ErrUsage)
		}
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	default:
		return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %s: %s has no choice of foreach, for-loop and fused (torch.optim's adam, adamw, sgd, adagrad and rmsprop have)", ErrUsage, f.OptImpl, o)
	}
	if cerr != nil {
		return nil, 0, "optimizer-impl", cerr
	}
	return o, budget.ParamGradients, "", nil
}

// parseQuant reads --quant: the storage, the library that keeps it, and
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

// maxCount is the largest --gpus, --nodes, --tp, --pp, --vpp, --cp and
// --ep layoutFlags.layout accepts.
const MaxCount = 1 << 16

// checkGiven refuses, before any work, flags given on the command line
// that cannot change the answer for the mode asked for (an optimizer for
// an inference job), and layout counts out of range. A flag set to the
// value that does nothing in every mode (--dropout=false, --grad-accum 1,
// --generate 0, --zero 0, --checkpointing none) passes. gpumem serve
// does not call it: a request's fields are not "given" flags.
func (f *Flags) CheckGiven(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, c := range []struct {
		name string
		v    int
	}{{"gpus", f.GPUs}, {"nodes", f.Layout.Nodes}, {"tp", f.Layout.TP}, {"pp", f.Layout.PP}, {"vpp", f.Layout.VPP},
		{"cp", f.Layout.CP}, {"ep", f.Layout.EP}} {
		if given[c.name] && (c.v < 1 || c.v > MaxCount) {
			return fmt.Errorf("%w: --%s %d: want 1 to %d", ErrUsage, c.name, c.v, MaxCount)
		}
	}
	if f.LoadOnly {
		// A load-only job runs nothing: the flags of a run do not apply.
		for _, name := range []string{"generate", "batch", "seq", "grad-accum", "optimizer", "checkpointing", "dropout",
			"images", "image-size", "attention", "kv-dtype", "kv-block"} {
			if given[name] {
				return fmt.Errorf("%w: --%s: a load-only job runs nothing (leave --%s out, or give --train or --infer instead of --load)", ErrUsage, name, name)
			}
		}
		return nil
	}
	if f.Train == f.Infer {
		return nil // jobFor asks for one of them
	}
	if f.Train {
		if given["generate"] && f.Generate != 0 {
			return fmt.Errorf("%w: --generate %d: a training job generates no tokens (give --infer, or leave --generate out)", ErrUsage, f.Generate)
		}
		if f.Frozen && given["optimizer"] {
			return fmt.Errorf("%w: --frozen: every parameter is frozen, so --optimizer %s has nothing to step (leave one out)", ErrUsage, f.Opt)
		}
		if given["logits-to-keep"] && f.LogitsToKeep != 0 {
			return fmt.Errorf("%w: --logits-to-keep %d: a training step's loss needs the logits of every position (give --infer, or leave --logits-to-keep out)", ErrUsage, f.LogitsToKeep)
		}
		return nil
	}
	const leave = "give --train, or leave %s out"
	for _, name := range []string{"optimizer-impl", "momentum", "nesterov", "optimizer-in-backward", "frozen", "offload-activations", "keep-logits"} {
		if fl := fs.Lookup(name); given[name] && fl.Value.String() != fl.DefValue {
			return fmt.Errorf("%w: --%s: an inference job runs no backward pass and no optimizer ("+leave+")", ErrUsage, name, "--"+name)
		}
	}
	switch {
	case given["loss"] && f.Loss != "full" && f.Loss != "":
		return fmt.Errorf("%w: --loss %s: an inference job computes no loss ("+leave+")", ErrUsage, f.Loss, "--loss")
	case given["logits-to-keep"] && f.LogitsToKeep != 0 && f.Generate > 0:
		return fmt.Errorf("%w: --logits-to-keep %d: generation's prompt pass keeps the last position's logits already (leave --generate or --logits-to-keep out)", ErrUsage, f.LogitsToKeep)
	case given["optimizer"]:
		return fmt.Errorf("%w: --optimizer %s: an inference job keeps no optimizer state ("+leave+")", ErrUsage, f.Opt, "--optimizer")
	case given["grad-accum"] && f.Accum != 1:
		return fmt.Errorf("%w: --grad-accum %d: an inference job accumulates no gradients ("+leave+")", ErrUsage, f.Accum, "--grad-accum")
	case given["dropout"] && f.Dropout:
		return fmt.Errorf("%w: --dropout: dropout masks are kept for the backward pass of a training job only ("+leave+")", ErrUsage, "--dropout")
	case given["checkpointing"] && f.Ckpt != "none":
		return fmt.Errorf("%w: --checkpointing %s: an inference job saves no activations for a backward pass ("+leave+")", ErrUsage, f.Ckpt, "--checkpointing")
	case given["offload"] && (strings.Contains(f.Layout.Offload, "optimizer") || f.Layout.Offload == "all"):
		return fmt.Errorf("%w: --offload %s: an inference job has no optimizer state to offload ("+leave+")", ErrUsage, f.Layout.Offload, "--offload")
	case given["zero"] && (f.ZeRO == 1 || f.ZeRO == 2):
		return fmt.Errorf("%w: --zero %d: stages 1 and 2 shard optimizer state and gradients, which an inference job does not have (--zero 3 or --tp shard the weights)", ErrUsage, f.ZeRO)
	case given["fsdp"] && strings.EqualFold(f.Layout.FSDP, "shard_grad_op"):
		return fmt.Errorf("%w: --fsdp %s: it shards optimizer state and gradients, which an inference job does not have (full_shard or --tp shard the weights)", ErrUsage, f.Layout.FSDP)
	}
	return nil
}

// checkJob refuses flags the model cannot take: --images for a model
// without a vision tower (it would be ignored).
func checkJob(j budget.Job) error {
	if s := j.Model.Spec(); j.Images > 0 && s.Vision == nil {
		return fmt.Errorf("%w: --images %d: %s has no vision tower (a multimodal model such as llava-1.5-7b takes images)", ErrUsage, j.Images, Describe(j))
	}
	return nil
}

// parseLoss reads --loss (model.ParseLoss) with the flag's own message.
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

// tokensPerSequence is what a sequence of j holds at its longest: the
// prompt and the generated tokens.
func tokensPerSequence(j budget.Job) int64 { return int64(j.SeqLen) + int64(j.Generate) }

// contextWarning returns a warning when j's sequences hold more tokens
// than its model's max_position_embeddings, or "". what names the flags
// that set them. The estimate stands (memory does not depend on the
// model having been trained at that length); the warning says the model
// was not configured for it, or, with a learned position table (GPT-2,
// OPT, BERT), cannot take it.
func contextWarning(j budget.Job, what string) string {
	lm := j.Model.Spec().LM()
	n := tokensPerSequence(j)
	if lm.MaxPositions <= 0 || n <= lm.MaxPositions {
		return ""
	}
	msg := fmt.Sprintf("warning: %d tokens per sequence (%s) exceed the %d positions %s was configured for (max_position_embeddings)",
		n, what, lm.MaxPositions, Describe(j))
	if lm.Positions > 0 {
		return msg + fmt.Sprintf("; its learned position table has %d rows, so the model cannot take them", lm.Positions)
	}
	return msg + "; the estimate is for the tokens given, but the model may not work at that length without RoPE scaling"
}

// seqFlags names the flags that set j's tokens per sequence.
func seqFlags(j budget.Job) string {
	if j.Generate > 0 {
		return fmt.Sprintf("--seq %d + --generate %d", j.SeqLen, j.Generate)
	}
	return fmt.Sprintf("--seq %d", j.SeqLen)
}

// headroom is the memory a fit leaves unused, the same for estimate's
// verdict, the chart's largest value and plan: budget.Limits.HeadroomFor,
// DefaultHeadroom (5% of the free memory) unless --headroom says
// otherwise.
type Headroom struct {
	Bytes gpumem.Bytes
	Name  string // "5% headroom", "2.00 GiB headroom", "2.00 GiB + 5% headroom", "no headroom"
}

// headroomOf returns the headroom lim asks for out of free bytes (nil:
// the default).
func HeadroomOf(lim *budget.Limits, free gpumem.Bytes) Headroom {
	frac, fixed := budget.DefaultHeadroomFraction, gpumem.Bytes(0)
	if lim != nil {
		fixed = max(lim.Headroom, 0)
		switch f := lim.HeadroomFraction; {
		case f < 0:
			frac = 0
		case f > 0:
			frac = f
		}
	}
	hr := Headroom{Bytes: lim.HeadroomFor(free)}
	pct := strconv.FormatFloat(100*frac, 'g', 4, 64) + "%"
	switch {
	case fixed > 0 && frac > 0:
		hr.Name = fixed.String() + " + " + pct + " headroom"
	case fixed > 0:
		hr.Name = fixed.String() + " headroom"
	case frac > 0:
		hr.Name = pct + " headroom"
	default:
		hr.Name = "no headroom"
	}
	return hr
}

// defaultHeadroom is budget.DefaultHeadroom(free), named.
func DefaultHeadroom(free gpumem.Bytes) Headroom { return HeadroomOf(nil, free) }

// String is the headroom's name with its bytes: "5% headroom (3.96 GiB)".
func (h Headroom) String() string {
	if h.Bytes == 0 || !strings.Contains(h.Name, "%") {
		return h.Name
	}
	return h.Name + " (" + h.Bytes.String() + ")"
}

func runEstimate(args []string, _ io.Reader, out, errOut io.Writer) error {
	fs := newFlags("estimate", out)
	var jf Flags
	jf.Register(fs)
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	headroomFlag := fs.String("headroom", "", "memory to leave unused when checking the fit: a fraction of the free memory (0.05) or a size (2GiB); 0 for none; default 5%, as plan")
	var cf chartFlags
	cf.register(fs)
	var pf pipelineFlags
	pf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(fs); err != nil {
		return err
	}
	if pf.given() || pf.usedWithout(fs) != "" {
		return estimatePipelineFlags(fs, &pf, &jf, &cf, *headroomFlag, *asJSON, out)
	}
	if err := jf.CheckGiven(fs); err != nil {
		return err
	}
	if jf.LoadOnly && cf.file != "" {
		return fmt.Errorf("%w: --chart %s: it draws memory against the batch or sequence, which a load-only job does not run", ErrUsage, cf.file)
	}
	var lim budget.Limits
	if err := parseHeadroom(*headroomFlag, &lim); err != nil {
		return err
	}
	j, dev, err := jf.Job()
	if err != nil {
		return err
	}
	if err := checkJob(j); err != nil {
		return err
	}
	if *headroomFlag != "" && dev.Capacity == 0 {
		return fmt.Errorf("%w: --headroom %s: it applies to the fit on --gpu or --memory (give one, or leave --headroom out)", ErrUsage, *headroomFlag)
	}
	hr := HeadroomOf(&lim, dev.Free())
	e, err := EvaluateWith(j, dev, hr)
	if err != nil {
		return err
	}
	if w := contextWarning(j, seqFlags(j)); w != "" {
		fmt.Fprintf(errOut, "gpumem estimate: %s\n", w)
	}
	if err := cf.write(j, dev, "as given", hr); err != nil {
		return err
	}
	if *asJSON {
		if err := e.writeJSON(out); err != nil {
			return err
		}
		return e.Verdict()
	}
	need, fits, shortfall := e.Need, e.Fits, e.Shortfall
	total, trainable := j.Model.Params()
	if j.Mode == budget.Load {
		fmt.Fprintf(out, "%s%s: load only, %s precision", Describe(j), headNote(j.Model.Spec()), j.Precision)
	} else if j.Runtime == budget.LlamaCpp {
		fmt.Fprintf(out, "%s%s: llama.cpp inference", Describe(j), headNote(j.Model.Spec()))
	} else if j.Runtime == budget.VLLM {
		fmt.Fprintf(out, "%s%s: vLLM serving, %s precision", Describe(j), headNote(j.Model.Spec()), j.Precision)
	} else if j.Runtime == budget.SGLang {
		fmt.Fprintf(out, "%s%s: SGLang serving, %s precision", Describe(j), headNote(j.Model.Spec()), j.Precision)
	} else {
		fmt.Fprintf(out, "%s%s: %s, %s, %s precision", Describe(j), headNote(j.Model.Spec()), j.Mode, batchNote(j), j.Precision)
	}
	if j.Optimizer != nil {
		fmt.Fprintf(out, ", %s", j.Optimizer)
		if j.OptimizerInBackward {
			fmt.Fprint(out, " stepped in backward")
		}
	}
	switch {
	case j.Mode == budget.Training && j.Gradients == budget.NoStep:
		fmt.Fprint(out, ", no optimizer step")
	case j.Mode == budget.Training && j.Gradients == budget.InputGradients:
		fmt.Fprint(out, ", frozen: gradients to the input only")
	}
	if j.Loss.Kind != model.FullLoss {
		fmt.Fprintf(out, ", %s loss", j.Loss)
	}
	if j.LogitsToKeep > 0 {
		if j.LogitsToKeep == 1 {
			fmt.Fprint(out, ", logits of the last position")
		} else {
			fmt.Fprintf(out, ", logits of the last %d positions", j.LogitsToKeep)
		}
	}
	if j.KeepLogits {
		fmt.Fprint(out, ", logits held to the step")
	}
	if j.EvalLoss {
		fmt.Fprint(out, ", evaluation loss")
	}
	if j.Mode == budget.Load {
		fmt.Fprintf(out, "\nparameters %s\n", gpumem.Thousands(total))
	} else {
		fmt.Fprintf(out, "\nparameters %s, trainable %s\n", gpumem.Thousands(total), gpumem.Thousands(trainable))
	}
	if j.Parallel.GPUs() > 1 {
		fmt.Fprintf(out, "layout %s over %d GPUs; figures for one GPU", j.Parallel.Describe(), j.Parallel.GPUs())
		if j.Parallel.PipelineParallel > 1 {
			fmt.Fprintf(out, " (pipeline stage %d, the most loaded)", need.Stage)
		}
		fmt.Fprintln(out)
	}
	if need.Host > 0 {
		fmt.Fprintf(out, "host memory: %s per GPU, %s per node\n", need.Host.String(), need.HostNode.String())
	}
	fmt.Fprintln(out)
	row := func(name string, b gpumem.Bytes) { fmt.Fprintf(out, "  %-38s %12s\n", name, b.String()) }
	if l := e.LlamaCpp; l != nil {
		fmt.Fprintf(out, "llama.cpp: offloaded %d/%d layers to GPU, %d KV cells, n_ubatch %d, flash attention %v\n",
			l.Layers, l.Slots, l.Cells, l.UBatch, j.LlamaCpp.FlashAttention)
		if l.SWACells > 0 {
			fmt.Fprintf(out, "  sliding-window cache: %d of %d layers keep %d cells (--swa-full %v)\n",
				l.SWALayers, l.Slots-1, l.SWACells, j.LlamaCpp.SWAFull)
		}
		mib := func(b gpumem.Bytes) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
		lrow := func(name string, b gpumem.Bytes) { fmt.Fprintf(out, "  %-38s %14s\n", name, mib(b)) }
		lrow("GPU model buffer", l.GPUWeights)
		lrow("GPU KV buffer", l.KV)
		lrow("GPU compute buffer", l.Compute)
		lrow("CUDA context", l.Context)
		if l.GPUs > 1 {
			fmt.Fprintf(out, "  over %d GPUs, --split-mode %s (the buffers above are their sums; the estimate below is GPU %d's):\n",
				l.GPUs, j.LlamaCpp.SplitMode, l.Busiest)
			for i := range l.GPUs {
				d := l.Devices[i]
				tail := ""
				if d.Output {
					tail = " + output"
				}
				fmt.Fprintf(out, "    CUDA%d (%d layers%s): model %s, KV %s, compute %s\n", i, d.Layers, tail, mib(d.Weights), mib(d.KV), mib(d.Compute))
			}
		}
		lrow("host model buffer (token_embd ...)", l.HostWeights)
		if l.HostMapped != l.HostWeights {
			lrow("CPU_Mapped (mmap: the file span)", l.HostMapped)
		}
		if l.HostKV > 0 {
			lrow("host KV buffer", l.HostKV)
		}
		fmt.Fprintln(out)
	}
	if v := e.VLLM; v != nil {
		gib := func(b gpumem.Bytes) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
		vrow := func(name, v string) { fmt.Fprintf(out, "  %-38s %14s\n", name, v) }
		fmt.Fprintf(out, "vLLM (per GPU")
		if tp := j.VLLM.TensorParallel; tp > 1 {
			fmt.Fprintf(out, " of %d, tensor parallel", tp)
		}
		fmt.Fprintln(out, "):")
		vrow("requested (utilization × total)", gib(v.Requested))
		vrow("model weights", gib(v.Weights))
		vrow("profile run peak activation", gib(v.Activations))
		if v.NonTorch > 0 {
			vrow("non-torch memory", gib(v.NonTorch))
		}
		if v.CUDAGraphs > 0 {
			vrow("Estimated CUDA graph memory", gib(v.CUDAGraphs))
		}
		vrow("Available KV cache memory", gib(v.KVMemory))
		vrow("# GPU blocks", gpumem.Thousands(v.Blocks))
		vrow("GPU KV cache size (tokens)", gpumem.Thousands(v.Tokens))
		fmt.Fprintf(out, "  Maximum concurrency for %s tokens per request: %.2fx\n", gpumem.Thousands(int64(v.MaxModelLen)), v.Concurrency)
		fmt.Fprintf(out, "  least gpu_memory_utilization for one request of %s tokens: %.3f\n", gpumem.Thousands(int64(v.MaxModelLen)), v.MinUtilization)
		if v.CUDAGraphs > 0 {
			fmt.Fprintf(out, "  the current --gpu-memory-utilization=%.4f is equivalent to --gpu-memory-utilization=%.4f without CUDA graph memory profiling; %.4f keeps the cache of earlier releases\n",
				v.EquivalentUtilization+(v.CompensatingUtilization-v.EquivalentUtilization)/2, v.EquivalentUtilization, v.CompensatingUtilization)
		}
		if v.Refused != "" {
			fmt.Fprintf(out, "vLLM would refuse to start: ValueError: %s\n", v.Refused)
		}
		fmt.Fprintln(out)
	}
	if e.SGLang != nil {
		writeSGLang(out, j, e.SGLang)
	}
	for _, c := range need.Components() {
		if c.Bytes != 0 {
			row(c.Name, c.Bytes)
		}
	}
	fmt.Fprintln(out)
	row("allocated peak (max_memory_allocated)", need.Allocated())
	row("reserved peak (max_memory_reserved)", need.Reserved())
	row("device peak (nvidia-smi)", need.Device())
	if need.Paged != 0 {
		// bitsandbytes' paged optimizer state: on the device once stepped,
		// but the driver pages it to the host under pressure.
		row("required (paged state can page out)", need.Required())
	}
	fmt.Fprintf(out, "peak phase: %s\n", need.Phase)
	fmt.Fprintf(out, "CUDA context for %s\n", contextNote(j))
	if dev.Capacity > 0 {
		if fits {
			fmt.Fprintf(out, "fits on %s with %s: %s free, %s left (%.0f%% used)\n", Clean(dev.Name), e.Headroom, dev.Free().String(),
				(dev.Free() - need.Required()).String(), 100*budget.Utilization(need, dev))
		} else if e.VLLM != nil {
			fmt.Fprintf(out, "does NOT fit on %s: one request of max_model_len %s tokens needs %s of KV cache, %s more than vLLM has\n",
				Clean(dev.Name), gpumem.Thousands(int64(e.VLLM.MaxModelLen)), e.VLLM.Needed.String(), shortfall.String())
		} else {
			d := need.Dominant()
			fmt.Fprintf(out, "does NOT fit on %s with %s: %s free, %s short; the largest component is %s (%s)\n", Clean(dev.Name),
				e.Headroom, dev.Free().String(), shortfall.String(), d.Name, d.Bytes.String())
		}
	}
	return e.Verdict()
}

// contextNote says what the CUDA context was sized for: the GPU's
// compute capability, the CUDA version (assumed 12 without --cuda) and
// the module loading.
func contextNote(j budget.Job) string {
	gpu := "a GPU of unknown generation"
	if c := j.Device.Compute; !c.IsZero() {
		gpu = "compute capability " + c.String()
	}
	cuda := "CUDA 12 (assumed; --cuda)"
	if v := j.Overhead.CUDA; !v.IsZero() {
		cuda = "CUDA " + v.String()
	}
	loading := "eager"
	if j.Overhead.Loading.Lazy(j.Overhead.CUDA) {
		loading = "lazy"
	}
	return fmt.Sprintf("%s, %s, %s module loading", gpu, cuda, loading)
}

// verdict is nil when the job fits (or no device was named), else an
// error wrapping gpumem.ErrDoesNotFit: the command exits 1.
func (e Result) Verdict() error {
	if e.SGLang != nil && e.SGLang.Refused != "" {
		return fmt.Errorf("%w: SGLang refuses to start on %s: %s", gpumem.ErrDoesNotFit, Clean(e.Device.Name), e.SGLang.Refused)
	}
	if e.VLLM != nil && e.VLLM.Refused != "" {
		return fmt.Errorf("%w: vLLM refuses max_model_len %d on %s: %s", gpumem.ErrDoesNotFit, e.VLLM.MaxModelLen, Clean(e.Device.Name), e.VLLM.Refused)
	}
	if e.Fits {
		return nil
	}
	return fmt.Errorf("%w on %s with %s: %s short", gpumem.ErrDoesNotFit, Clean(e.Device.Name), e.Headroom.Name, e.Shortfall.String())
}

// estimation is an estimate and its fit on a device: what gpumem estimate
// prints, and what gpumem serve's /v1/estimate returns.
type Result struct {
	Need      budget.Breakdown
	Device       gpumem.Device          // Capacity zero: no device named
	Headroom  Headroom               // left unused by a fit
	Fits      bool                   // true when no device was named
	Shortfall gpumem.Bytes           // headroom included
	LlamaCpp     *budget.LlamaCppReport // the llama.cpp buffers (Runtime LlamaCpp)
	VLLM      *budget.VLLMReport     // vLLM's KV cache sizing (Runtime VLLM)
	SGLang    *budget.SGLangReport   // SGLang's KV pool (Runtime SGLang)
}

// estimate estimates j and checks the fit on dev when it has a capacity,
// with the default headroom (budget.FitsWithHeadroom: the fit plan and
// budget.LargestBatch and LongestSeqLen answer for).
func Evaluate(j budget.Job, dev gpumem.Device) (Result, error) {
	return EvaluateWith(j, dev, DefaultHeadroom(dev.Free()))
}

// estimateWith is estimate with the headroom hr: the job fits when its
// device peak plus hr is within the free memory.
func EvaluateWith(j budget.Job, dev gpumem.Device, hr Headroom) (Result, error) {
	need, err := budget.Estimate(j)
	if err != nil {
		return Result{}, err
	}
	e := Result{Need: need, Device: dev, Headroom: hr, Fits: true}
	if j.Runtime == budget.LlamaCpp {
		r, err := budget.LlamaCppBuffers(j)
		if err != nil {
			return Result{}, err
		}
		e.LlamaCpp = &r
	}
	if j.Runtime == budget.VLLM {
		r, err := budget.VLLMBuffers(j)
		if err != nil {
			return Result{}, err
		}
		e.VLLM = &r
		// vLLM takes its share of the GPU whatever the job: it fits when
		// vLLM starts, short by the KV cache one request of max_model_len
		// needs beyond what is left.
		if r.Refused != "" {
			e.Fits = false
			e.Shortfall = gpumem.Bytes(max(checked.SatSub(int64(r.Needed), int64(r.KVMemory)), 1))
		}
		return e, nil
	}
	if j.Runtime == budget.SGLang {
		r, err := budget.SGLangBuffers(j)
		if err != nil {
			return Result{}, err
		}
		e.SGLang = &r
		// SGLang sizes its pool to the GPU: it fits when the pool holds a
		// token, short by one token's cell when not.
		if r.Refused != "" {
			e.Fits = false
			e.Shortfall = gpumem.Bytes(max(checked.SatSub(int64(r.CellBytes), int64(r.Rest)), 1))
		}
		return e, nil
	}
	if dev.Capacity > 0 {
		usable := checked.SatSub(int64(dev.Free()), int64(hr.Bytes))
		if short := gpumem.Bytes(checked.SatSub(int64(need.Required()), usable)); short > 0 {
			e.Shortfall, e.Fits = short, false
		}
	}
	return e, nil
}

// writeJSON writes the --json form of e (bytes as integers), the same
// bytes for gpumem estimate --json and gpumem serve.
func (e Result) writeJSON(out io.Writer) error {
	r := map[string]any{
		"allocated_peak": int64(e.Need.Allocated()), "reserved_peak": int64(e.Need.Reserved()),
		"device_peak": int64(e.Need.Device()), "phase": e.Need.Phase.String(), "components": components(e.Need),
	}
	if e.Need.Paged != 0 {
		// A paged optimizer: what the fit is checked against.
		r["required_peak"] = int64(e.Need.Required())
	}
	if e.Need.Host > 0 {
		// Offloaded state and activations, in host memory.
		r["host"], r["host_per_node"] = int64(e.Need.Host), int64(e.Need.HostNode)
	}
	if l := e.LlamaCpp; l != nil {
		r["llamacpp"] = map[string]any{
			"gpu_weights": int64(l.GPUWeights), "host_weights": int64(l.HostWeights), "kv": int64(l.KV),
			"host_kv": int64(l.HostKV), "compute": int64(l.Compute), "context": int64(l.Context),
			"layers_offloaded": l.Layers, "layers": l.Slots, "output_on_gpu": l.OutputOnGPU,
			"kv_cells": l.Cells, "n_ubatch": l.UBatch, "host_mapped": int64(l.HostMapped),
		}
		if l.SWACells > 0 {
			r["llamacpp"].(map[string]any)["swa_kv_cells"] = l.SWACells
			r["llamacpp"].(map[string]any)["swa_layers"] = l.SWALayers
		}
		if l.GPUs > 1 {
			devs := make([]map[string]any, l.GPUs)
			for i := range devs {
				d := l.Devices[i]
				devs[i] = map[string]any{"weights": int64(d.Weights), "kv": int64(d.KV), "compute": int64(d.Compute),
					"layers": d.Layers, "output": d.Output}
			}
			r["llamacpp"].(map[string]any)["devices"] = devs
			r["llamacpp"].(map[string]any)["busiest"] = l.Busiest
		}
	}
	if v := e.VLLM; v != nil {
		r["vllm"] = map[string]any{
			"requested": int64(v.Requested), "weights": int64(v.Weights), "activations": int64(v.Activations),
			"non_torch": int64(v.NonTorch), "kv_cache_memory": int64(v.KVMemory), "page_bytes": int64(v.PageBytes),
			"gpu_blocks": v.Blocks, "kv_tokens": v.Tokens, "max_model_len": v.MaxModelLen,
			"max_concurrency": v.Concurrency, "min_utilization": v.MinUtilization, "refused": v.Refused,
			"cuda_graph_memory": int64(v.CUDAGraphs), "equivalent_utilization": v.EquivalentUtilization,
			"compensating_utilization": v.CompensatingUtilization,
		}
	}
	if sg := e.SGLang; sg != nil {
		r["sglang"] = sglangJSON(sg)
	}
	return writeFitJSON(out, r, e.Device, e.Headroom, e.Fits, e.Shortfall)
}

// describe names j's model for people: its name, else its family, with
// anything unprintable escaped (a name comes from a config.json).
func Describe(j budget.Job) string {
	s := j.Model.Spec()
	if s.Name != "" {
		return Clean(s.Name)
	}
	return Clean(s.Family)
}

// clean returns s for printing: unchanged when every rune is printable,
// else with the unprintable ones (control and format characters, line
// breaks, bytes that are not UTF-8) escaped as strconv.Quote does.
func Clean(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			q := strconv.Quote(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}

// withHead returns s with the task head named (--head, request "head");
// an empty name keeps the config's. A checkpoint's tensor list fixes its
// head, so it takes none.
func WithHead(s model.Spec, name string) (model.Spec, error) {
	if name == "" {
		return s, nil
	}
	h, err := model.ParseHead(name)
	if err != nil {
		return s, fmt.Errorf("want %s", strings.Join(model.HeadNames(), ", "))
	}
	if s.Inventory != nil {
		return s, errors.New("a checkpoint's tensors fix the head (give --model or --config)")
	}
	if s.Text != nil || s.Vision != nil {
		return s, fmt.Errorf("a %s model has no %s head modelled", s.Family, h)
	}
	s.Head = h
	if err := s.Validate(); err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) && fe.Field == "Spec.Head" {
			return s, fmt.Errorf("a %s model has no %s head modelled", s.Family, h)
		}
		return s, err
	}
	return s, nil
}

// withLabels returns s with the classifier's num_labels (--labels,
// request "labels"); zero keeps the config's.
func WithLabels(s model.Spec, n int) (model.Spec, error) {
	switch {
	case n == 0:
		return s, nil
	case n < 0 || n > 1<<24:
		return s, errors.New("want 1 to 16777216 labels")
	case s.Head != model.HeadSeqCls && s.Head != model.HeadTokenCls && s.Head != model.HeadImageCls:
		return s, fmt.Errorf("a %s head has no labels (give --head seq-cls, token-cls or image-cls)", s.Head)
	}
	s.Labels = int64(n)
	return s, nil
}

// withImageSize returns s with a vision backbone's image side
// (--image-size, request "image_size"); zero keeps the config's.
func WithImageSize(s model.Spec, n int) (model.Spec, error) {
	switch {
	case n == 0:
		return s, nil
	case s.Backbone == nil:
		return s, fmt.Errorf("%s is not a vision backbone (resnet, convnext, swin or efficientnet); a ViT's image size is its config's image_size, which sizes its position table", s.Name)
	case n < 0 || n > 1<<16:
		return s, errors.New("want 1 to 65536 pixels")
	}
	s.Image.Size = int64(n)
	if err := s.Validate(); err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			return s, fe.Err
		}
		return s, err
	}
	return s, nil
}

// batchNote describes a job's batch: images of a side for a vision
// backbone, else sequences of tokens.
func batchNote(j budget.Job) string {
	if s := j.Model.Spec(); s.Backbone != nil {
		return fmt.Sprintf("batch %d × %d×%d px images", j.Batch, s.Image.Size, s.Image.Size)
	}
	return fmt.Sprintf("batch %d × %d tokens", j.Batch, j.SeqLen)
}

// headNote describes a classification or question-answering head for
// the estimate's first line: " (seq-cls, 2 labels)", " (qa)".
func headNote(s model.Spec) string {
	switch s.Head {
	case model.HeadSeqCls, model.HeadTokenCls, model.HeadImageCls:
		n := s.Labels
		if n == 0 {
			n = 2
		}
		return fmt.Sprintf(" (%s, %d labels)", s.Head, n)
	case model.HeadQA:
		return " (qa)"
	}
	return ""
}

// splitTargets reads --lora-targets: module names separated by commas.
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

// deviceFlags reads --gpu and --memory: a GPU of the catalog (catalog
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

// writeFitJSON adds the fit on dev to the estimate's JSON object r, when
// a device was given (device, free, min_headroom, fits, shortfall), and
// writes r indented.
func writeFitJSON(out io.Writer, r map[string]any, dev gpumem.Device, h Headroom, fits bool, shortfall gpumem.Bytes) error {
	if dev.Capacity > 0 {
		r["device"] = dev.Name
		r["free"] = int64(dev.Free())
		r["min_headroom"] = int64(h.Bytes)
		r["fits"] = fits
		r["shortfall"] = int64(shortfall)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
