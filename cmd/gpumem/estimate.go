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
type jobFlags struct {
	modelFlags
	train, infer      bool
	generate          int
	batch, seq, accum int
	precision         string
	opt, attn, ckpt   string
	ssmKernel         string
	optImpl           string  // --optimizer-impl
	momentum          float64 // --momentum
	nesterov          bool    // --nesterov
	inBwd             bool    // --optimizer-in-backward
	frozen            bool    // --frozen
	offloadActs       bool    // --offload-activations
	loraRank          int64
	loraTargets       string
	qlora             bool
	peft              bool
	loadOnly          bool   // --load: a Load job, the model loaded, nothing run
	quant             string // --quant: int8, nf4, fp4, gptq, awq or fp8
	groupSize         int64  // --group-size, with gptq and awq
	kvDType           string // --kv-dtype
	kvBlock           int    // --kv-block
	gpu, memory       string
	images            int
	dropout           bool
	head              string // --head: the task head, overriding the config's architectures
	labels            int    // --labels: num_labels of a classification head
	imageSize         int    // --image-size: a vision backbone's image side in pixels
	loss              string // --loss: full, chunked[:N], liger or cce
	logitsToKeep      int    // --logits-to-keep
	keepLogits        bool   // --keep-logits
	evalLoss          bool   // --eval
	gpus, zero        int
	layout            layoutFlags
	cuda              string
	lazy              optBool
	llama             llamaFlags // --runtime and llama.cpp's flags
	vllm              vllmFlags  // vLLM's flags (--runtime vllm)
	sglang            sglangFlags

	// profile is --profile: an overhead profile file written by gpumem
	// calibrate, applied as the job's Overhead.
	profile string
	// profileData is a profile given inline (serve's "profile" field),
	// applied like --profile's file.
	profileData *profile
}

// vllmFlags are vLLM's engine arguments (budget.VLLMOptions).
type vllmFlags struct {
	gpuMemUtil     float64 // --gpu-memory-utilization; 0: 0.9
	maxModelLen    int     // --max-model-len; 0: --seq + --generate
	batchedTokens  int     // --max-num-batched-tokens; 0: 2048
	maxNumSeqs     int     // --max-num-seqs; 0: 256
	blockSize      int     // --block-size; 0: 16
	kvCacheDType   string  // --kv-cache-dtype; "" or auto: the weights' dtype
	tensorParallel int     // --tensor-parallel-size; 0: 1
	cudaGraphMem   string  // --cuda-graph-memory: vLLM's "Estimated CUDA graph memory"
	enforceEager   bool    // --enforce-eager
	v0             bool    // --vllm-v0
}

// vllmFlagNames are the flags that only a vLLM job takes.
var vllmFlagNames = []string{"gpu-memory-utilization", "max-model-len", "max-num-batched-tokens", "max-num-seqs", "block-size", "kv-cache-dtype", "tensor-parallel-size",
	"cuda-graph-memory", "enforce-eager", "vllm-v0"}

func (v *vllmFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&v.gpuMemUtil, "gpu-memory-utilization", 0, "with --runtime vllm: the fraction of the GPU's total memory vLLM may use, in (0, 1] (default 0.9)")
	fs.IntVar(&v.maxModelLen, "max-model-len", 0, "with --runtime vllm: the longest request vLLM must hold in its KV cache (default --seq + --generate)")
	fs.IntVar(&v.batchedTokens, "max-num-batched-tokens", 0, "with --runtime vllm: the tokens of vLLM's profile run (default 2048)")
	fs.IntVar(&v.maxNumSeqs, "max-num-seqs", 0, "with --runtime vllm: the sequences of vLLM's profile sampler run (default 256)")
	fs.IntVar(&v.blockSize, "block-size", 0, "with --runtime vllm: tokens per KV block (default 16)")
	fs.StringVar(&v.kvCacheDType, "kv-cache-dtype", "", "with --runtime vllm or sglang: auto (the weights' dtype, default), fp8 (vLLM), fp8_e4m3 or fp8_e5m2")
	fs.StringVar(&v.cudaGraphMem, "cuda-graph-memory", "", "with --runtime vllm: vLLM's \"Estimated CUDA graph memory\" from a log of the same model and settings (v0.21+ subtract it from the KV cache), e.g. 1.58GiB")
	fs.BoolVar(&v.enforceEager, "enforce-eager", false, "with --runtime vllm: vLLM's --enforce-eager, no CUDA graphs")
	fs.BoolVar(&v.v0, "vllm-v0", false, "with --runtime vllm: the V0 engine (VLLM_USE_V1=0, the default before 0.8): its profile run sorts the sampler's logits for top-k/top-p (a larger activation peak) and only the driver rank samples")
	fs.IntVar(&v.tensorParallel, "tensor-parallel-size", 0, "with --runtime vllm or sglang: GPUs the weights and KV heads are split over; figures are per GPU (default 1)")
}

// apply sets j's vLLM options (j.Runtime is set). On error it returns the
// flag at fault, without its dashes.
func (v *vllmFlags) apply(j *budget.Job) (string, error) {
	given := map[string]string{}
	if v.gpuMemUtil != 0 {
		given["gpu-memory-utilization"] = strconv.FormatFloat(v.gpuMemUtil, 'g', -1, 64)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max-model-len", v.maxModelLen}, {"max-num-batched-tokens", v.batchedTokens}, {"max-num-seqs", v.maxNumSeqs},
		{"block-size", v.blockSize}, {"tensor-parallel-size", v.tensorParallel}} {
		if c.v != 0 {
			given[c.name] = strconv.Itoa(c.v)
		}
	}
	if v.kvCacheDType != "" {
		given["kv-cache-dtype"] = v.kvCacheDType
	}
	if v.cudaGraphMem != "" {
		given["cuda-graph-memory"] = v.cudaGraphMem
	}
	if v.enforceEager {
		given["enforce-eager"] = "true"
	}
	if v.v0 {
		given["vllm-v0"] = "true"
	}
	if j.Runtime == budget.SGLang {
		// SGLang names these two as vLLM does; the others are vLLM's.
		for _, name := range vllmFlagNames {
			if val, ok := given[name]; ok && name != "tensor-parallel-size" && name != "kv-cache-dtype" {
				return name, fmt.Errorf("%w: --%s %s: it is a vLLM option (SGLang's are --mem-fraction-static, --max-total-tokens, --page-size, --context-length, --tensor-parallel-size and --kv-cache-dtype)", errUsage, name, val)
			}
		}
		if v.tensorParallel < 0 {
			return "tensor-parallel-size", fmt.Errorf("%w: --tensor-parallel-size %d: must not be negative", errUsage, v.tensorParallel)
		}
		j.SGLang.TensorParallel = v.tensorParallel
		switch v.kvCacheDType {
		case "", "auto":
		case "fp8_e5m2":
			j.SGLang.KVCacheDType = gpumem.FP8E5M2
		case "fp8_e4m3":
			j.SGLang.KVCacheDType = gpumem.FP8E4M3
		default:
			return "kv-cache-dtype", fmt.Errorf("%w: --kv-cache-dtype %q: SGLang takes auto, fp8_e5m2 or fp8_e4m3", errUsage, v.kvCacheDType)
		}
		return "", nil
	}
	if j.Runtime != budget.VLLM {
		for _, name := range vllmFlagNames {
			if val, ok := given[name]; ok {
				return name, fmt.Errorf("%w: --%s %s: it is a vLLM option (give --runtime vllm, or leave --%s out)", errUsage, name, val, name)
			}
		}
		return "", nil
	}
	if u := v.gpuMemUtil; math.IsNaN(u) || u < 0 || u > 1 {
		return "gpu-memory-utilization", fmt.Errorf("%w: --gpu-memory-utilization %s: want a fraction in (0, 1], such as 0.9", errUsage, given["gpu-memory-utilization"])
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max-model-len", v.maxModelLen}, {"max-num-batched-tokens", v.batchedTokens}, {"max-num-seqs", v.maxNumSeqs},
		{"block-size", v.blockSize}, {"tensor-parallel-size", v.tensorParallel}} {
		if c.v < 0 {
			return c.name, fmt.Errorf("%w: --%s %d: must not be negative", errUsage, c.name, c.v)
		}
	}
	o := &j.VLLM
	if v.cudaGraphMem != "" {
		b, err := gpumem.ParseBytes(v.cudaGraphMem)
		if err != nil || b < 0 {
			return "cuda-graph-memory", fmt.Errorf("%w: --cuda-graph-memory %q: want a size such as 1.58GiB", errUsage, v.cudaGraphMem)
		}
		if v.enforceEager && b > 0 {
			return "cuda-graph-memory", fmt.Errorf("%w: --cuda-graph-memory %s: --enforce-eager captures no CUDA graphs", errUsage, v.cudaGraphMem)
		}
		o.CUDAGraphMemory = b
	}
	o.EnforceEager, o.V0 = v.enforceEager, v.v0
	o.GPUMemoryUtilization, o.MaxModelLen, o.MaxNumBatchedTokens = v.gpuMemUtil, v.maxModelLen, v.batchedTokens
	o.MaxNumSeqs, o.BlockSize, o.TensorParallel = v.maxNumSeqs, v.blockSize, v.tensorParallel
	switch v.kvCacheDType {
	case "", "auto":
	case "fp8", "fp8_e4m3":
		o.KVCacheDType = gpumem.FP8E4M3
	case "fp8_e5m2":
		o.KVCacheDType = gpumem.FP8E5M2
	default:
		return "kv-cache-dtype", fmt.Errorf("%w: --kv-cache-dtype %q: want auto, fp8, fp8_e4m3 or fp8_e5m2", errUsage, v.kvCacheDType)
	}
	return "", nil
}

// llamaFlags are --runtime and the llama.cpp options (budget.LlamaCppOptions).
type llamaFlags struct {
	runtime        string // --runtime: pytorch or llama.cpp (default llama.cpp for --gguf inference)
	gpuLayers      string // --n-gpu-layers; "" or -1: all
	ctxSize        int    // --ctx-size; 0: --parallel × (--seq + --generate)
	parallel       int    // --parallel; 0: --batch
	ubatch         int    // --ubatch-size; 0: 512
	flashAttn      bool   // --flash-attn
	cacheK, cacheV string // --cache-type-k, --cache-type-v
	splitMode      string // --split-mode: layer (default), row or none
	tensorSplit    string // --tensor-split: comma-separated shares
	mainGPU        int    // --main-gpu
	noMmap         bool   // --no-mmap
	version        string // --llamacpp-version: the build's date (budget.ParseLlamaCppVersion)
	swaFull        bool   // --swa-full
}

// llamaFlagNames are the flags that only a llama.cpp job takes.
var llamaFlagNames = []string{"n-gpu-layers", "ctx-size", "parallel", "ubatch-size", "flash-attn", "cache-type-k", "cache-type-v",
	"split-mode", "tensor-split", "main-gpu", "no-mmap", "llamacpp-version", "swa-full"}

func (l *llamaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.runtime, "runtime", "", "the engine: pytorch (transformers), llama.cpp (also Ollama) or vllm; default llama.cpp for a --gguf inference job, pytorch otherwise")
	fs.StringVar(&l.gpuLayers, "n-gpu-layers", "", "with --runtime llama.cpp: llama.cpp's -ngl, the last N of the n_layer + 1 slots (the output layer is one) on the GPU (default, or -1: all)")
	fs.IntVar(&l.ctxSize, "ctx-size", 0, "with --runtime llama.cpp: llama.cpp's -c, the KV cache's tokens over all sequences (default --parallel × (--seq + --generate))")
	fs.IntVar(&l.parallel, "parallel", 0, "with --runtime llama.cpp: llama-server's --parallel, the sequences that share --ctx-size, each share padded to 256 cells (default --batch)")
	fs.IntVar(&l.ubatch, "ubatch-size", 0, "with --runtime llama.cpp: llama.cpp's -ub, the tokens per graph evaluation, which size the compute buffer (default 512)")
	fs.BoolVar(&l.flashAttn, "flash-attn", false, "with --runtime llama.cpp: llama.cpp's --flash-attn on (no n_ctx × n_ubatch × n_head score matrix)")
	fs.StringVar(&l.cacheK, "cache-type-k", "", "with --runtime llama.cpp: llama.cpp's -ctk: f16 (default), f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl")
	fs.StringVar(&l.cacheV, "cache-type-v", "", "with --runtime llama.cpp: llama.cpp's -ctv (as --cache-type-k)")
	fs.StringVar(&l.splitMode, "split-mode", "", "with --runtime llama.cpp and --gpus N: llama.cpp's -sm: layer (default: whole layers and their KV per GPU), row (matrices' rows over every GPU) or none (--main-gpu alone)")
	fs.StringVar(&l.tensorSplit, "tensor-split", "", "with --runtime llama.cpp: llama.cpp's -ts, each GPU's share, comma-separated (3,1); its entries set --gpus when that is not given (default even)")
	fs.BoolVar(&l.noMmap, "no-mmap", false, "with --runtime llama.cpp: llama.cpp's --no-mmap: the CPU tensors read into a buffer of their size, not the file span mapped")
	fs.StringVar(&l.version, "llamacpp-version", "", "with --runtime llama.cpp: the build's date, YYYY-MM-DD (or YYYY-MM), which sets how -ngl places the layers: before 2025-12-17 the repeating layers go first and the output layer last, before 2023-12-07 the V and K caches are two more slots, and a DeepSeek-V2/V3 cache keeps every head's K and V before 2025-04-15, the MLA latent in K and V until 2026-01-24, in K alone since; a sliding-window model (Gemma 2 and 3, gpt-oss) has no SWA cache before 2025-05-20 (default current: the output layer first)")
	fs.BoolVar(&l.swaFull, "swa-full", false, "with --runtime llama.cpp: llama.cpp's --swa-full: a sliding-window model's (Gemma 2 and 3, gpt-oss, Cohere2, Llama 4) SWA layers keep a cache of the whole context instead of n_swa + n_ubatch cells per sequence (builds from 2025-05-20; earlier ones always do)")
	fs.IntVar(&l.mainGPU, "main-gpu", 0, "with --runtime llama.cpp and --split-mode none: llama.cpp's -mg, the GPU used")
}

// apply sets j's Runtime and llama.cpp options; gguf says the model came
// from a GGUF file. On error it returns the flag at fault, without its
// dashes (gpumem serve names the request field after it).
func (l *llamaFlags) apply(j *budget.Job, gguf bool) (string, error) {
	rt := budget.PyTorch
	if l.runtime != "" {
		var err error
		if rt, err = budget.ParseRuntime(l.runtime); err != nil {
			return "runtime", fmt.Errorf("%w: --runtime %q: want pytorch, llama.cpp or vllm", errUsage, l.runtime)
		}
		if rt != budget.PyTorch && j.Mode != budget.Prefill && j.Mode != budget.Generation {
			return "runtime", fmt.Errorf("%w: --runtime %s: %s runs inference (give --infer)", errUsage, l.runtime, rt)
		}
	} else if gguf && (j.Mode == budget.Prefill || j.Mode == budget.Generation) {
		rt = budget.LlamaCpp
	}
	j.Runtime = rt
	given := map[string]string{}
	if l.gpuLayers != "" {
		given["n-gpu-layers"] = l.gpuLayers
	}
	if l.ctxSize != 0 {
		given["ctx-size"] = strconv.Itoa(l.ctxSize)
	}
	if l.parallel != 0 {
		given["parallel"] = strconv.Itoa(l.parallel)
	}
	if l.ubatch != 0 {
		given["ubatch-size"] = strconv.Itoa(l.ubatch)
	}
	if l.flashAttn {
		given["flash-attn"] = "true"
	}
	if l.cacheK != "" {
		given["cache-type-k"] = l.cacheK
	}
	if l.cacheV != "" {
		given["cache-type-v"] = l.cacheV
	}
	if l.splitMode != "" {
		given["split-mode"] = l.splitMode
	}
	if l.tensorSplit != "" {
		given["tensor-split"] = l.tensorSplit
	}
	if l.mainGPU != 0 {
		given["main-gpu"] = strconv.Itoa(l.mainGPU)
	}
	if l.noMmap {
		given["no-mmap"] = "true"
	}
	if l.version != "" {
		given["llamacpp-version"] = l.version
	}
	if l.swaFull {
		given["swa-full"] = "true"
	}
	if rt != budget.LlamaCpp {
		for _, name := range llamaFlagNames {
			if v, ok := given[name]; ok {
				return name, fmt.Errorf("%w: --%s %s: it is a llama.cpp option (give --runtime llama.cpp, or leave --%s out)", errUsage, name, v, name)
			}
		}
		return "", nil
	}
	o := &j.LlamaCpp
	if l.gpuLayers != "" {
		n, err := strconv.Atoi(l.gpuLayers)
		switch {
		case err != nil || n < -1:
			return "n-gpu-layers", fmt.Errorf("%w: --n-gpu-layers %s: want -1 (all) or a count of layers", errUsage, l.gpuLayers)
		case n == 0:
			return "n-gpu-layers", fmt.Errorf("%w: --n-gpu-layers 0: nothing would be on the GPU but the compute buffer, which is not modelled (give 1 or more, or -1 for all)", errUsage)
		case n > 0:
			o.GPULayers = n
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"ctx-size", l.ctxSize}, {"parallel", l.parallel}, {"ubatch-size", l.ubatch}} {
		if c.v < 0 {
			return c.name, fmt.Errorf("%w: --%s %d: must not be negative", errUsage, c.name, c.v)
		}
	}
	o.Context, o.Parallel, o.UBatch, o.FlashAttention = l.ctxSize, l.parallel, l.ubatch, l.flashAttn
	if l.version != "" {
		v, err := budget.ParseLlamaCppVersion("--llamacpp-version", l.version)
		if err != nil {
			return "llamacpp-version", fmt.Errorf("%w: %w", errUsage, err)
		}
		o.Version = v
	}
	for _, c := range []struct {
		name, v string
		dst     *gpumem.DType
	}{{"cache-type-k", l.cacheK, &o.CacheK}, {"cache-type-v", l.cacheV, &o.CacheV}} {
		if c.v == "" {
			continue
		}
		dt, err := gpumem.ParseDType(c.v)
		if err != nil {
			return c.name, fmt.Errorf("%w: --%s %q: want f16, f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl", errUsage, c.name, c.v)
		}
		*c.dst = dt
	}
	if l.splitMode != "" {
		m, err := budget.ParseLlamaSplitMode(l.splitMode)
		if err != nil {
			return "split-mode", fmt.Errorf("%w: --split-mode %q: want layer, row or none", errUsage, l.splitMode)
		}
		o.SplitMode = m
	}
	if l.tensorSplit != "" {
		parts := strings.Split(l.tensorSplit, ",")
		if len(parts) > budget.LlamaMaxDevices {
			return "tensor-split", fmt.Errorf("%w: --tensor-split %s: at most %d GPUs", errUsage, l.tensorSplit, budget.LlamaMaxDevices)
		}
		sum := 0.0
		for i, p := range parts {
			f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
				return "tensor-split", fmt.Errorf("%w: --tensor-split %s: %q is not a share (want numbers of at least 0, such as 3,1)", errUsage, l.tensorSplit, p)
			}
			o.TensorSplit[i] = f
			sum += f
		}
		if sum == 0 {
			return "tensor-split", fmt.Errorf("%w: --tensor-split %s: every share is zero", errUsage, l.tensorSplit)
		}
		o.GPUs = len(parts)
	}
	if l.mainGPU < 0 {
		return "main-gpu", fmt.Errorf("%w: --main-gpu %d: must not be negative", errUsage, l.mainGPU)
	}
	o.MainGPU, o.NoMmap, o.SWAFull = l.mainGPU, l.noMmap, l.swaFull
	return "", nil
}

// optBool is a boolean flag that remembers whether it was given:
// --lazy-loading, --lazy-loading=false, or neither (the default).
type optBool struct{ set, v bool }

func (b *optBool) String() string {
	if b == nil || !b.set {
		return ""
	}
	return strconv.FormatBool(b.v)
}

func (b *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	b.set, b.v = true, v
	return nil
}

func (b *optBool) IsBoolFlag() bool { return true }

func (f *jobFlags) register(fs *flag.FlagSet) {
	f.modelFlags.register(fs)
	fs.BoolVar(&f.train, "train", false, "a training job (forward, backward, optimizer step)")
	fs.BoolVar(&f.infer, "infer", false, "an inference job (one forward pass without gradients)")
	fs.IntVar(&f.generate, "generate", 0, "with --infer: generate N tokens per sequence with a KV cache")
	fs.IntVar(&f.batch, "batch", 1, "micro-batch size in sequences")
	fs.IntVar(&f.seq, "seq", 2048, "sequence length in tokens (the prompt with --generate)")
	fs.IntVar(&f.accum, "grad-accum", 1, "gradient accumulation steps")
	fs.StringVar(&f.precision, "precision", "", "fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8 (default bf16-mixed to train, bf16 to infer)")
	fs.StringVar(&f.opt, "optimizer", "adamw", "adamw, adam, adamw8bit, paged_adamw_8bit, adafactor, sgd, lion, ... (Hugging Face names); none: forward and backward only, the gradients kept, no state and no step")
	fs.StringVar(&f.optImpl, "optimizer-impl", "", "with a torch.optim optimizer (adam, adamw, sgd, adagrad, rmsprop): foreach (PyTorch 2's default on CUDA), for-loop (foreach=False) or fused (fused=True); sets the step's temporaries")
	fs.Float64Var(&f.momentum, "momentum", 0, "with --optimizer sgd or rmsprop: the momentum factor; above 0 keeps a momentum_buffer per parameter")
	fs.BoolVar(&f.nesterov, "nesterov", false, "with --optimizer sgd and --momentum: Nesterov momentum (nesterov=True)")
	fs.BoolVar(&f.inBwd, "optimizer-in-backward", false, "step each parameter inside backward as soon as its gradient is ready, then free the gradient (torchtune's optimizer_in_bwd); not with --grad-accum")
	fs.BoolVar(&f.frozen, "frozen", false, "with --train: every parameter frozen, backward to the input only (an adversarial attack on the input): activations saved, no gradients, no optimizer")
	fs.StringVar(&f.attn, "attention", "sdpa", "eager, sdpa or flash")
	fs.StringVar(&f.ssmKernel, "ssm-kernel", "fused", "a Mamba, Mamba-2 or Jamba model's state-space mixer: fused (mamba_ssm's CUDA kernels) or sequential (transformers' code without them)")
	fs.StringVar(&f.ckpt, "checkpointing", "none", "none, selective, full or offload")
	fs.BoolVar(&f.offloadActs, "offload-activations", false, "with --train: torchtune's enable_activation_offloading: with --checkpointing full the block inputs move to pinned host memory (5 in flight stay on the GPU); with none every saved tensor of the blocks, as --checkpointing offload")
	fs.Int64Var(&f.loraRank, "lora-rank", 0, "train LoRA adapters of this rank (base frozen)")
	fs.StringVar(&f.loraTargets, "lora-targets", "", "with --lora-rank or --qlora: PEFT's target_modules, comma-separated (q_proj,v_proj; all-linear); default: PEFT's for the family")
	fs.BoolVar(&f.qlora, "qlora", false, "store the base linear weights in NF4 with double quantization (QLoRA); the other frozen weights in the compute dtype")
	fs.BoolVar(&f.peft, "peft", false, "with --lora-rank or --qlora: the adapters run PEFT's LoRA forward (lora_dropout 0) on transformers' code, whose frozen base saves nothing for its weights (budget.Job.PEFTLoRA); without it the activations are a trained base's, an upper bound")
	fs.BoolVar(&f.loadOnly, "load", false, "a load-only job: the weights, buffers and CUDA context, nothing run (instead of --train or --infer)")
	fs.StringVar(&f.quant, "quant", "", "store the base linear weights quantized: int8 (bitsandbytes LLM.int8), nf4, fp4 (bitsandbytes 4-bit), gptq, awq (4-bit) or fp8 (128×128 block scales); training needs --lora-rank")
	fs.Int64Var(&f.groupSize, "group-size", 0, "with --quant gptq or awq: input features per scale (default 128; -1: one group per row)")
	fs.StringVar(&f.kvDType, "kv-dtype", "", "with --generate: the KV cache's dtype (fp8, fp8_e5m2, int8, Q8_0, Q4_0, ...; default the compute dtype)")
	fs.IntVar(&f.kvBlock, "kv-block", 0, "with --generate: a paged KV cache of blocks of N tokens (vLLM --block-size; default contiguous)")
	fs.IntVar(&f.images, "images", 0, "images per sequence (multimodal models)")
	fs.BoolVar(&f.dropout, "dropout", false, "with --train: the model trains with dropout > 0 (BERT, T5, OPT, GPT-2 by their configs); CUDA keeps a 1-byte mask per dropped element")
	fs.StringVar(&f.head, "head", "", "the task head, overriding the class the config's architectures name: "+strings.Join(model.HeadNames(), ", "))
	fs.IntVar(&f.labels, "labels", 0, "with a seq-cls, token-cls or image-cls head: the classifier's num_labels (default: the config's, else 2)")
	fs.IntVar(&f.imageSize, "image-size", 0, "a vision backbone's (resnet, convnext, swin, efficientnet) square image side in pixels, with --batch images per step (default: the config's image_size, 224)")
	fs.StringVar(&f.loss, "loss", "full", "with --train: the LM head's loss: full (Hugging Face: every logit, upcast to fp32), chunked or chunked:N (torchtune's chunked output, 8 chunks by default), liger (Liger-Kernel's fused linear cross entropy) or cce (Apple's cut cross-entropy)")
	fs.BoolVar(&f.keepLogits, "keep-logits", false, "with --train: the loop holds the model's output (its batch×seq×vocab logits) through backward and the optimizer step, as `logits, loss = model(x, y)` does (litgpt); the default is Hugging Face's Trainer, whose compute_loss returns the loss alone, so the logits are freed before backward")
	fs.BoolVar(&f.evalLoss, "eval", false, "with --infer and no --generate: an evaluation pass, labels given, the loss computed under torch.no_grad (Trainer.evaluate): the loss's fp32 upcast and log-softmax beside the logits")
	fs.IntVar(&f.logitsToKeep, "logits-to-keep", 0, "with --infer and no --generate: project only the last N positions of each sequence to logits (transformers' logits_to_keep); 0: every position")
	fs.IntVar(&f.gpus, "gpus", 1, "GPUs per node (data-parallel ranks, with --zero the ranks state is sharded over); the estimate is per GPU")
	fs.IntVar(&f.zero, "zero", 0, "DeepSpeed ZeRO stage 0-3 (see --fsdp for PyTorch FSDP)")
	f.layout.register(fs)
	fs.StringVar(&f.gpu, "gpu", "", "check the fit on this GPU (e.g. h100, a100-80gb, \"NVIDIA GeForce RTX 4090\"; see gpumem devices)")
	fs.StringVar(&f.memory, "memory", "", "check the fit in this much free memory (e.g. 80GiB, 24GB)")
	f.llama.register(fs)
	f.vllm.register(fs)
	f.sglang.register(fs)
	fs.StringVar(&f.cuda, "cuda", "", "the CUDA version of the PyTorch build (torch.version.cuda: 12.1, or the wheel's cu121), which sizes the CUDA context (default: a current CUDA 12)")
	fs.Var(&f.lazy, "lazy-loading", "CUDA lazy module loading (CUDA_MODULE_LOADING=LAZY); --lazy-loading=false for EAGER, whose context holds every kernel (default: lazy from CUDA 11.7, eager before)")
	fs.StringVar(&f.profile, "profile", "", "apply the overhead `FILE` gpumem calibrate wrote from your GPUs' measurements (CUDA context, fragmentation, cuBLAS workspace) instead of the defaults")
}

// job builds the budget.Job the flags describe, and the device to check
// it against (Capacity zero when none was named).
func (f *jobFlags) job() (budget.Job, gpumem.Device, error) {
	s, err := f.load()
	if err != nil {
		return budget.Job{}, gpumem.Device{}, err
	}
	return f.jobFor(s)
}

// jobFor builds the budget.Job the flags describe for the model s, which
// the caller has loaded (gpumem serve reads an inline config.json).
func (f *jobFlags) jobFor(s model.Spec) (budget.Job, gpumem.Device, error) {
	return f.jobWith(s, budget.NewModel)
}

// jobWith is jobFor with the step that turns the model.Finetune the
// flags describe into a budget.Model given: budget.NewModel for the CLI,
// the cache of prepared models for gpumem serve (modelCache).
func (f *jobFlags) jobWith(s model.Spec, prepare func(model.Finetune) (budget.Model, error)) (budget.Job, gpumem.Device, error) {
	var j budget.Job
	var dev gpumem.Device
	var err error
	switch {
	case f.loadOnly && (f.train || f.infer):
		return j, dev, fmt.Errorf("%w: give one of --train, --infer and --load", errUsage)
	case f.loadOnly:
		j.Mode = budget.Load
	case f.train == f.infer:
		return j, dev, fmt.Errorf("%w: give one of --train and --infer", errUsage)
	case f.train:
		j.Mode = budget.Training
	case f.generate > 0:
		j.Mode = budget.Generation
	default:
		j.Mode = budget.Prefill
	}
	prec := f.precision
	if prec == "" {
		prec = "bf16"
		if f.train {
			prec = "bf16-mixed"
		}
	}
	if j.Precision, err = budget.ParsePrecision(prec); err != nil {
		return j, dev, fmt.Errorf("%w: --precision %q: want fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8", errUsage, prec)
	}
	if f.train {
		if j.Optimizer, j.Gradients, _, err = f.optimizerFor(); err != nil {
			return j, dev, err
		}
		j.OptimizerInBackward = f.inBwd
	}
	if j.Attention, err = parseAttention(f.attn); err != nil {
		return j, dev, err
	}
	if j.SSMKernel, err = model.ParseSSMKernel(f.ssmKernel); err != nil {
		return j, dev, fmt.Errorf("%w: --ssm-kernel %q: want fused or sequential", errUsage, f.ssmKernel)
	}
	if j.Checkpointing, err = parseCheckpointing(f.ckpt); err != nil {
		return j, dev, err
	}
	j.OffloadActivations = f.offloadActs
	if s, err = withHead(s, f.head); err != nil {
		return j, dev, fmt.Errorf("%w: --head %s: %v", errUsage, f.head, err)
	}
	if s, err = withLabels(s, f.labels); err != nil {
		return j, dev, fmt.Errorf("%w: --labels %d: %v", errUsage, f.labels, err)
	}
	if s, err = withImageSize(s, f.imageSize); err != nil {
		return j, dev, fmt.Errorf("%w: --image-size %d: %v", errUsage, f.imageSize, err)
	}
	if s.Backbone != nil && j.Attention == model.SDPA {
		// transformers' Swin has only its eager attention (ResNet and
		// ConvNeXt have none): the default sdpa reads as eager.
		j.Attention = model.Eager
	}
	if f.generate > 0 && s.Head != model.HeadDefault && s.Head != model.HeadCausalLM {
		return j, dev, fmt.Errorf("%w: --generate %d: a %s head generates no tokens (give --head causal-lm, or leave --generate out)", errUsage, f.generate, s.Head)
	}
	ft := model.Finetune{Model: s}
	if f.loraRank < 0 {
		return j, dev, fmt.Errorf("%w: --lora-rank %d: must not be negative", errUsage, f.loraRank)
	}
	if f.loraRank > 0 || f.qlora {
		rank := f.loraRank
		if rank == 0 {
			rank = 64 // the QLoRA paper's rank for its Guanaco runs
		}
		ft.LoRA = model.LoRA{Rank: rank}
		if f.loraTargets != "" {
			if ft.LoRA.Targets, err = splitTargets(f.loraTargets); err != nil {
				return j, dev, err
			}
		}
	} else if f.loraTargets != "" {
		return j, dev, fmt.Errorf("%w: --lora-targets %s: give --lora-rank or --qlora too", errUsage, f.loraTargets)
	} else if f.peft {
		return j, dev, fmt.Errorf("%w: --peft: give --lora-rank or --qlora too", errUsage)
	}
	if f.qlora && f.quant != "" {
		return j, dev, fmt.Errorf("%w: --quant %s: --qlora stores the weights in nf4 already (give one of them)", errUsage, f.quant)
	}
	if f.qlora {
		ft.Quant = gpumem.NF4
		ft.Blockwise = gpumem.Blockwise{Nested: true}
	}
	if f.quant != "" {
		if ft.Quant, ft.Method, ft.FP8Block, err = parseQuant(f.quant); err != nil {
			return j, dev, err
		}
		switch {
		case f.train && f.frozen:
			// Backward to the input only: nothing trains, the
			// quantized weights included.
			ft.Train = func(gpumem.Tensor) bool { return false }
		case f.train && f.loraRank == 0:
			return j, dev, fmt.Errorf("%w: --quant %s: quantized weights cannot train; give --lora-rank to train adapters on them (or --frozen for gradients to the input only)", errUsage, f.quant)
		}
	}
	if f.groupSize != 0 {
		if ft.Method != "gptq" && ft.Method != "awq" {
			return j, dev, fmt.Errorf("%w: --group-size %d: it applies to --quant gptq or awq", errUsage, f.groupSize)
		}
		ft.GroupSize = f.groupSize
	}
	if ft.Quant != gpumem.Invalid && f.train {
		// The QLoRA recipe: the frozen weights bitsandbytes leaves alone
		// in the compute dtype (Finetune.Unquantized).
		_, _, _, ft.Unquantized = j.Precision.DTypes()
	}
	if j.Model, err = prepare(ft); err != nil {
		return j, dev, err
	}
	if f.kvDType != "" {
		if j.KVDType, err = gpumem.ParseDType(f.kvDType); err != nil {
			return j, dev, fmt.Errorf("%w: --kv-dtype %q: want fp8, fp8_e5m2, int8, fp16, bf16, Q8_0, Q4_0, ...", errUsage, f.kvDType)
		}
	}
	j.KVBlock = f.kvBlock
	if (f.kvDType != "" || f.kvBlock != 0) && j.Mode != budget.Generation {
		name, v := "--kv-dtype", f.kvDType
		if f.kvDType == "" {
			name, v = "--kv-block", strconv.Itoa(f.kvBlock)
		}
		return j, dev, fmt.Errorf("%w: %s %s: only a generating job keeps a KV cache (give --infer --generate N)", errUsage, name, v)
	}
	j.Batch, j.SeqLen, j.Generate, j.GradAccum, j.Images = f.batch, f.seq, f.generate, f.accum, f.images
	if j.Mode == budget.Load {
		j.Batch, j.SeqLen, j.Optimizer = 0, 0, nil
	}
	j.Dropout = f.dropout && f.train
	if j.Loss, err = parseLoss(f.loss); err != nil {
		return j, dev, err
	}
	j.LogitsToKeep = f.logitsToKeep
	j.KeepLogits = f.keepLogits
	j.EvalLoss = f.evalLoss
	j.PEFTLoRA = f.peft
	if _, err := f.llama.apply(&j, f.gguf != ""); err != nil {
		return j, dev, err
	}
	if _, err := f.vllm.apply(&j); err != nil {
		return j, dev, err
	}
	if _, err := f.sglang.apply(&j); err != nil {
		return j, dev, err
	}
	if j.Runtime == budget.SGLang && (f.kvDType != "" || f.kvBlock != 0) {
		return j, dev, fmt.Errorf("%w: --kv-dtype/--kv-block: SGLang's pool is typed by --kv-cache-dtype and paged by --page-size", errUsage)
	}
	if j.Runtime == budget.VLLM && (f.kvDType != "" || f.kvBlock != 0) {
		return j, dev, fmt.Errorf("%w: --kv-dtype/--kv-block: vLLM's cache is typed by --kv-cache-dtype and paged by --block-size", errUsage)
	}
	if j.Runtime == budget.LlamaCpp && (f.kvDType != "" || f.kvBlock != 0) {
		name, v := "--kv-dtype", f.kvDType
		if f.kvDType == "" {
			name, v = "--kv-block", strconv.Itoa(f.kvBlock)
		}
		return j, dev, fmt.Errorf("%w: %s %s: llama.cpp's cache is typed by --cache-type-k and --cache-type-v, and not paged", errUsage, name, v)
	}
	gpus := f.gpus
	if j.Runtime == budget.LlamaCpp {
		// llama.cpp's GPUs split the model (--split-mode), they are not
		// data-parallel ranks.
		o := &j.LlamaCpp
		switch {
		case o.GPUs > 1 && gpus > 1 && gpus != o.GPUs:
			return j, dev, fmt.Errorf("%w: --gpus %d: --tensor-split %s names %d GPUs", errUsage, gpus, f.llama.tensorSplit, o.GPUs)
		case gpus > 1:
			o.GPUs = gpus
		}
		if o.MainGPU >= max(o.GPUs, 1) {
			return j, dev, fmt.Errorf("%w: --main-gpu %d: there are %d GPUs (give --gpus)", errUsage, o.MainGPU, max(o.GPUs, 1))
		}
		if f.llama.splitMode != "" && o.GPUs <= 1 && o.SplitMode != budget.LlamaSplitNone {
			return j, dev, fmt.Errorf("%w: --split-mode %s: one GPU has nothing to split (give --gpus N)", errUsage, f.llama.splitMode)
		}
		gpus = 1
	}
	par, off, err := f.layout.layout(gpus, f.zero)
	if err != nil {
		return j, dev, err
	}
	j.Parallel, j.Offload = par, j.Offload|off
	if f.cuda != "" {
		if j.Overhead.CUDA, err = budget.ParseCUDAVersion(f.cuda); err != nil {
			return j, dev, fmt.Errorf("%w: --cuda %q: want a CUDA version such as 12.1 (or a wheel tag such as cu121)", errUsage, f.cuda)
		}
	}
	if f.lazy.set {
		j.Overhead.Loading = budget.LoadingEager
		if f.lazy.v {
			j.Overhead.Loading = budget.LoadingLazy
		}
	}
	if f.profile != "" {
		p, err := readProfile(f.profile)
		if err != nil {
			return j, dev, err
		}
		p.apply(&j.Overhead)
	}
	if f.profileData != nil {
		f.profileData.apply(&j.Overhead)
	}
	d, catalog, err := deviceFlags(f.gpu, f.memory)
	if err != nil {
		return j, dev, err
	}
	if dev = d; catalog {
		j.Device = d
	}
	if j.Runtime == budget.VLLM || j.Runtime == budget.SGLang {
		if dev.Capacity == 0 {
			return j, dev, fmt.Errorf("%w: --runtime %s: %s sizes its KV cache from the GPU's memory: give --gpu or --memory", errUsage, j.Runtime, j.Runtime)
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
func (f *jobFlags) optimizerFor() (optimizer.Optimizer, budget.Gradients, string, error) {
	none := strings.EqualFold(strings.TrimSpace(f.opt), "none")
	if f.frozen || none {
		what := "--frozen: no parameter is trained"
		if !f.frozen {
			what = "--optimizer none: no step runs"
		}
		switch {
		case f.frozen && (f.loraRank > 0 || f.qlora):
			return nil, 0, "frozen", fmt.Errorf("%w: --frozen: every parameter is frozen, LoRA adapters too (leave out --frozen or --lora-rank and --qlora)", errUsage)
		case f.inBwd:
			return nil, 0, "optimizer-in-backward", fmt.Errorf("%w: --optimizer-in-backward: %s, so there is nothing to step in backward", errUsage, what)
		case f.optImpl != "":
			return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %s: %s, so there is no optimizer implementation to choose", errUsage, f.optImpl, what)
		case f.momentum != 0 || f.nesterov:
			name := "momentum"
			if f.momentum == 0 {
				name = "nesterov"
			}
			return nil, 0, name, fmt.Errorf("%w: --%s: %s, so there is no momentum", errUsage, name, what)
		}
		if f.frozen {
			return nil, budget.InputGradients, "", nil
		}
		return nil, budget.NoStep, "", nil
	}
	o, ok := optimizer.Lookup(f.opt)
	if !ok {
		return nil, 0, "optimizer", fmt.Errorf("%w: --optimizer %q is not modelled (try adamw, adamw8bit, adafactor, sgd, lion, none)", errUsage, f.opt)
	}
	if math.IsNaN(f.momentum) || math.IsInf(f.momentum, 0) || f.momentum < 0 {
		return nil, 0, "momentum", fmt.Errorf("%w: --momentum %v: want a finite factor of at least 0, such as 0.9", errUsage, f.momentum)
	}
	if f.nesterov && f.momentum == 0 {
		return nil, 0, "nesterov", fmt.Errorf("%w: --nesterov: Nesterov momentum needs a momentum (give --momentum 0.9, say)", errUsage)
	}
	switch opt := o.(type) {
	case optimizer.SGD:
		opt.Momentum, opt.Nesterov = f.momentum, f.nesterov
		o = opt
	case optimizer.RMSprop:
		if f.nesterov {
			return nil, 0, "nesterov", fmt.Errorf("%w: --nesterov: torch.optim.RMSprop has no Nesterov momentum (--optimizer sgd has)", errUsage)
		}
		opt.Momentum = f.momentum
		o = opt
	default:
		if f.momentum != 0 || f.nesterov {
			name := "momentum"
			if f.momentum == 0 {
				name = "nesterov"
			}
			return nil, 0, name, fmt.Errorf("%w: --%s: %s takes no momentum setting (--optimizer sgd or rmsprop do)", errUsage, name, o)
		}
	}
	if f.optImpl == "" {
		return o, budget.ParamGradients, "", nil
	}
	var impl optimizer.Impl
	switch strings.ToLower(strings.TrimSpace(f.optImpl)) {
	case "foreach":
		impl = optimizer.Foreach
	case "for-loop", "forloop", "single-tensor":
		impl = optimizer.ForLoop
	case "fused":
		impl = optimizer.Fused
	default:
		return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %q: want foreach, for-loop or fused", errUsage, f.optImpl)
	}
	clash := func(had optimizer.Impl) error {
		if had != optimizer.Foreach && had != impl {
			return fmt.Errorf("%w: --optimizer-impl %s: --optimizer %s already names the %s implementation", errUsage, f.optImpl, f.opt, had)
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
			return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl fused: torch.optim.RMSprop has no fused kernel (want foreach or for-loop)", errUsage)
		}
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	default:
		return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %s: %s has no choice of foreach, for-loop and fused (torch.optim's adam, adamw, sgd, adagrad and rmsprop have)", errUsage, f.optImpl, o)
	}
	if cerr != nil {
		return nil, 0, "optimizer-impl", cerr
	}
	return o, budget.ParamGradients, "", nil
}

// parseQuant reads --quant: the storage, the library that keeps it, and
// FP8's block: transformers' FineGrainedFP8Config weight_block_size
// (128, 128) default.
func parseQuant(s string) (gpumem.DType, string, [2]int64, error) {
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
	return gpumem.Invalid, "", [2]int64{}, fmt.Errorf("%w: --quant %q: want int8, nf4, fp4, gptq, awq or fp8", errUsage, s)
}

// maxCount is the largest --gpus, --nodes, --tp, --pp, --vpp, --cp and
// --ep layoutFlags.layout accepts.
const maxCount = 1 << 16

// checkGiven refuses, before any work, flags given on the command line
// that cannot change the answer for the mode asked for (an optimizer for
// an inference job), and layout counts out of range. A flag set to the
// value that does nothing in every mode (--dropout=false, --grad-accum 1,
// --generate 0, --zero 0, --checkpointing none) passes. gpumem serve
// does not call it: a request's fields are not "given" flags.
func (f *jobFlags) checkGiven(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, c := range []struct {
		name string
		v    int
	}{{"gpus", f.gpus}, {"nodes", f.layout.nodes}, {"tp", f.layout.tp}, {"pp", f.layout.pp}, {"vpp", f.layout.vpp},
		{"cp", f.layout.cp}, {"ep", f.layout.ep}} {
		if given[c.name] && (c.v < 1 || c.v > maxCount) {
			return fmt.Errorf("%w: --%s %d: want 1 to %d", errUsage, c.name, c.v, maxCount)
		}
	}
	if f.loadOnly {
		// A load-only job runs nothing: the flags of a run do not apply.
		for _, name := range []string{"generate", "batch", "seq", "grad-accum", "optimizer", "checkpointing", "dropout",
			"images", "image-size", "attention", "kv-dtype", "kv-block"} {
			if given[name] {
				return fmt.Errorf("%w: --%s: a load-only job runs nothing (leave --%s out, or give --train or --infer instead of --load)", errUsage, name, name)
			}
		}
		return nil
	}
	if f.train == f.infer {
		return nil // jobFor asks for one of them
	}
	if f.train {
		if given["generate"] && f.generate != 0 {
			return fmt.Errorf("%w: --generate %d: a training job generates no tokens (give --infer, or leave --generate out)", errUsage, f.generate)
		}
		if f.frozen && given["optimizer"] {
			return fmt.Errorf("%w: --frozen: every parameter is frozen, so --optimizer %s has nothing to step (leave one out)", errUsage, f.opt)
		}
		if given["logits-to-keep"] && f.logitsToKeep != 0 {
			return fmt.Errorf("%w: --logits-to-keep %d: a training step's loss needs the logits of every position (give --infer, or leave --logits-to-keep out)", errUsage, f.logitsToKeep)
		}
		return nil
	}
	const leave = "give --train, or leave %s out"
	for _, name := range []string{"optimizer-impl", "momentum", "nesterov", "optimizer-in-backward", "frozen", "offload-activations", "keep-logits"} {
		if fl := fs.Lookup(name); given[name] && fl.Value.String() != fl.DefValue {
			return fmt.Errorf("%w: --%s: an inference job runs no backward pass and no optimizer ("+leave+")", errUsage, name, "--"+name)
		}
	}
	switch {
	case given["loss"] && f.loss != "full" && f.loss != "":
		return fmt.Errorf("%w: --loss %s: an inference job computes no loss ("+leave+")", errUsage, f.loss, "--loss")
	case given["logits-to-keep"] && f.logitsToKeep != 0 && f.generate > 0:
		return fmt.Errorf("%w: --logits-to-keep %d: generation's prompt pass keeps the last position's logits already (leave --generate or --logits-to-keep out)", errUsage, f.logitsToKeep)
	case given["optimizer"]:
		return fmt.Errorf("%w: --optimizer %s: an inference job keeps no optimizer state ("+leave+")", errUsage, f.opt, "--optimizer")
	case given["grad-accum"] && f.accum != 1:
		return fmt.Errorf("%w: --grad-accum %d: an inference job accumulates no gradients ("+leave+")", errUsage, f.accum, "--grad-accum")
	case given["dropout"] && f.dropout:
		return fmt.Errorf("%w: --dropout: dropout masks are kept for the backward pass of a training job only ("+leave+")", errUsage, "--dropout")
	case given["checkpointing"] && f.ckpt != "none":
		return fmt.Errorf("%w: --checkpointing %s: an inference job saves no activations for a backward pass ("+leave+")", errUsage, f.ckpt, "--checkpointing")
	case given["offload"] && (strings.Contains(f.layout.offload, "optimizer") || f.layout.offload == "all"):
		return fmt.Errorf("%w: --offload %s: an inference job has no optimizer state to offload ("+leave+")", errUsage, f.layout.offload, "--offload")
	case given["zero"] && (f.zero == 1 || f.zero == 2):
		return fmt.Errorf("%w: --zero %d: stages 1 and 2 shard optimizer state and gradients, which an inference job does not have (--zero 3 or --tp shard the weights)", errUsage, f.zero)
	case given["fsdp"] && strings.EqualFold(f.layout.fsdp, "shard_grad_op"):
		return fmt.Errorf("%w: --fsdp %s: it shards optimizer state and gradients, which an inference job does not have (full_shard or --tp shard the weights)", errUsage, f.layout.fsdp)
	}
	return nil
}

// checkJob refuses flags the model cannot take: --images for a model
// without a vision tower (it would be ignored).
func checkJob(j budget.Job) error {
	if s := j.Model.Spec(); j.Images > 0 && s.Vision == nil {
		return fmt.Errorf("%w: --images %d: %s has no vision tower (a multimodal model such as llava-1.5-7b takes images)", errUsage, j.Images, describe(j))
	}
	return nil
}

// parseLoss reads --loss (model.ParseLoss) with the flag's own message.
func parseLoss(s string) (model.Loss, error) {
	l, err := model.ParseLoss(s)
	if err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			return l, fmt.Errorf("%w: --loss %q: %v", errUsage, s, fe.Err)
		}
		return l, fmt.Errorf("%w: --loss %q: %v", errUsage, s, err)
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
		n, what, lm.MaxPositions, describe(j))
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
type headroom struct {
	bytes gpumem.Bytes
	name  string // "5% headroom", "2.00 GiB headroom", "2.00 GiB + 5% headroom", "no headroom"
}

// headroomOf returns the headroom lim asks for out of free bytes (nil:
// the default).
func headroomOf(lim *budget.Limits, free gpumem.Bytes) headroom {
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
	hr := headroom{bytes: lim.HeadroomFor(free)}
	pct := strconv.FormatFloat(100*frac, 'g', 4, 64) + "%"
	switch {
	case fixed > 0 && frac > 0:
		hr.name = fixed.String() + " + " + pct + " headroom"
	case fixed > 0:
		hr.name = fixed.String() + " headroom"
	case frac > 0:
		hr.name = pct + " headroom"
	default:
		hr.name = "no headroom"
	}
	return hr
}

// defaultHeadroom is budget.DefaultHeadroom(free), named.
func defaultHeadroom(free gpumem.Bytes) headroom { return headroomOf(nil, free) }

// String is the headroom's name with its bytes: "5% headroom (3.96 GiB)".
func (h headroom) String() string {
	if h.bytes == 0 || !strings.Contains(h.name, "%") {
		return h.name
	}
	return h.name + " (" + h.bytes.String() + ")"
}

func runEstimate(args []string, _ io.Reader, out, errOut io.Writer) error {
	fs := newFlags("estimate", out)
	var jf jobFlags
	jf.register(fs)
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
	if err := jf.checkGiven(fs); err != nil {
		return err
	}
	if jf.loadOnly && cf.file != "" {
		return fmt.Errorf("%w: --chart %s: it draws memory against the batch or sequence, which a load-only job does not run", errUsage, cf.file)
	}
	var lim budget.Limits
	if err := parseHeadroom(*headroomFlag, &lim); err != nil {
		return err
	}
	j, dev, err := jf.job()
	if err != nil {
		return err
	}
	if err := checkJob(j); err != nil {
		return err
	}
	if *headroomFlag != "" && dev.Capacity == 0 {
		return fmt.Errorf("%w: --headroom %s: it applies to the fit on --gpu or --memory (give one, or leave --headroom out)", errUsage, *headroomFlag)
	}
	hr := headroomOf(&lim, dev.Free())
	e, err := estimateWith(j, dev, hr)
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
		return e.verdict()
	}
	need, fits, shortfall := e.need, e.fits, e.shortfall
	total, trainable := j.Model.Params()
	if j.Mode == budget.Load {
		fmt.Fprintf(out, "%s%s: load only, %s precision", describe(j), headNote(j.Model.Spec()), j.Precision)
	} else if j.Runtime == budget.LlamaCpp {
		fmt.Fprintf(out, "%s%s: llama.cpp inference", describe(j), headNote(j.Model.Spec()))
	} else if j.Runtime == budget.VLLM {
		fmt.Fprintf(out, "%s%s: vLLM serving, %s precision", describe(j), headNote(j.Model.Spec()), j.Precision)
	} else if j.Runtime == budget.SGLang {
		fmt.Fprintf(out, "%s%s: SGLang serving, %s precision", describe(j), headNote(j.Model.Spec()), j.Precision)
	} else {
		fmt.Fprintf(out, "%s%s: %s, %s, %s precision", describe(j), headNote(j.Model.Spec()), j.Mode, batchNote(j), j.Precision)
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
	if l := e.llama; l != nil {
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
	if v := e.vllm; v != nil {
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
	if e.sglang != nil {
		writeSGLang(out, j, e.sglang)
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
			fmt.Fprintf(out, "fits on %s with %s: %s free, %s left (%.0f%% used)\n", clean(dev.Name), e.headroom, dev.Free().String(),
				(dev.Free() - need.Required()).String(), 100*budget.Utilization(need, dev))
		} else if e.vllm != nil {
			fmt.Fprintf(out, "does NOT fit on %s: one request of max_model_len %s tokens needs %s of KV cache, %s more than vLLM has\n",
				clean(dev.Name), gpumem.Thousands(int64(e.vllm.MaxModelLen)), e.vllm.Needed.String(), shortfall.String())
		} else {
			d := need.Dominant()
			fmt.Fprintf(out, "does NOT fit on %s with %s: %s free, %s short; the largest component is %s (%s)\n", clean(dev.Name),
				e.headroom, dev.Free().String(), shortfall.String(), d.Name, d.Bytes.String())
		}
	}
	return e.verdict()
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
func (e estimation) verdict() error {
	if e.sglang != nil && e.sglang.Refused != "" {
		return fmt.Errorf("%w: SGLang refuses to start on %s: %s", gpumem.ErrDoesNotFit, clean(e.dev.Name), e.sglang.Refused)
	}
	if e.vllm != nil && e.vllm.Refused != "" {
		return fmt.Errorf("%w: vLLM refuses max_model_len %d on %s: %s", gpumem.ErrDoesNotFit, e.vllm.MaxModelLen, clean(e.dev.Name), e.vllm.Refused)
	}
	if e.fits {
		return nil
	}
	return fmt.Errorf("%w on %s with %s: %s short", gpumem.ErrDoesNotFit, clean(e.dev.Name), e.headroom.name, e.shortfall.String())
}

// estimation is an estimate and its fit on a device: what gpumem estimate
// prints, and what gpumem serve's /v1/estimate returns.
type estimation struct {
	need      budget.Breakdown
	dev       gpumem.Device          // Capacity zero: no device named
	headroom  headroom               // left unused by a fit
	fits      bool                   // true when no device was named
	shortfall gpumem.Bytes           // headroom included
	llama     *budget.LlamaCppReport // the llama.cpp buffers (Runtime LlamaCpp)
	vllm      *budget.VLLMReport     // vLLM's KV cache sizing (Runtime VLLM)
	sglang    *budget.SGLangReport   // SGLang's KV pool (Runtime SGLang)
}

// estimate estimates j and checks the fit on dev when it has a capacity,
// with the default headroom (budget.FitsWithHeadroom: the fit plan and
// budget.LargestBatch and LongestSeqLen answer for).
func estimate(j budget.Job, dev gpumem.Device) (estimation, error) {
	return estimateWith(j, dev, defaultHeadroom(dev.Free()))
}

// estimateWith is estimate with the headroom hr: the job fits when its
// device peak plus hr is within the free memory.
func estimateWith(j budget.Job, dev gpumem.Device, hr headroom) (estimation, error) {
	need, err := budget.Estimate(j)
	if err != nil {
		return estimation{}, err
	}
	e := estimation{need: need, dev: dev, headroom: hr, fits: true}
	if j.Runtime == budget.LlamaCpp {
		r, err := budget.LlamaCppBuffers(j)
		if err != nil {
			return estimation{}, err
		}
		e.llama = &r
	}
	if j.Runtime == budget.VLLM {
		r, err := budget.VLLMBuffers(j)
		if err != nil {
			return estimation{}, err
		}
		e.vllm = &r
		// vLLM takes its share of the GPU whatever the job: it fits when
		// vLLM starts, short by the KV cache one request of max_model_len
		// needs beyond what is left.
		if r.Refused != "" {
			e.fits = false
			e.shortfall = gpumem.Bytes(max(checked.SatSub(int64(r.Needed), int64(r.KVMemory)), 1))
		}
		return e, nil
	}
	if j.Runtime == budget.SGLang {
		r, err := budget.SGLangBuffers(j)
		if err != nil {
			return estimation{}, err
		}
		e.sglang = &r
		// SGLang sizes its pool to the GPU: it fits when the pool holds a
		// token, short by one token's cell when not.
		if r.Refused != "" {
			e.fits = false
			e.shortfall = gpumem.Bytes(max(checked.SatSub(int64(r.CellBytes), int64(r.Rest)), 1))
		}
		return e, nil
	}
	if dev.Capacity > 0 {
		usable := checked.SatSub(int64(dev.Free()), int64(hr.bytes))
		if short := gpumem.Bytes(checked.SatSub(int64(need.Required()), usable)); short > 0 {
			e.shortfall, e.fits = short, false
		}
	}
	return e, nil
}

// writeJSON writes the --json form of e (bytes as integers), the same
// bytes for gpumem estimate --json and gpumem serve.
func (e estimation) writeJSON(out io.Writer) error {
	r := map[string]any{
		"allocated_peak": int64(e.need.Allocated()), "reserved_peak": int64(e.need.Reserved()),
		"device_peak": int64(e.need.Device()), "phase": e.need.Phase.String(), "components": components(e.need),
	}
	if e.need.Paged != 0 {
		// A paged optimizer: what the fit is checked against.
		r["required_peak"] = int64(e.need.Required())
	}
	if e.need.Host > 0 {
		// Offloaded state and activations, in host memory.
		r["host"], r["host_per_node"] = int64(e.need.Host), int64(e.need.HostNode)
	}
	if l := e.llama; l != nil {
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
	if v := e.vllm; v != nil {
		r["vllm"] = map[string]any{
			"requested": int64(v.Requested), "weights": int64(v.Weights), "activations": int64(v.Activations),
			"non_torch": int64(v.NonTorch), "kv_cache_memory": int64(v.KVMemory), "page_bytes": int64(v.PageBytes),
			"gpu_blocks": v.Blocks, "kv_tokens": v.Tokens, "max_model_len": v.MaxModelLen,
			"max_concurrency": v.Concurrency, "min_utilization": v.MinUtilization, "refused": v.Refused,
			"cuda_graph_memory": int64(v.CUDAGraphs), "equivalent_utilization": v.EquivalentUtilization,
			"compensating_utilization": v.CompensatingUtilization,
		}
	}
	if sg := e.sglang; sg != nil {
		r["sglang"] = sglangJSON(sg)
	}
	return writeFitJSON(out, r, e.dev, e.headroom, e.fits, e.shortfall)
}

// describe names j's model for people: its name, else its family, with
// anything unprintable escaped (a name comes from a config.json).
func describe(j budget.Job) string {
	s := j.Model.Spec()
	if s.Name != "" {
		return clean(s.Name)
	}
	return clean(s.Family)
}

// clean returns s for printing: unchanged when every rune is printable,
// else with the unprintable ones (control and format characters, line
// breaks, bytes that are not UTF-8) escaped as strconv.Quote does.
func clean(s string) string {
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
func withHead(s model.Spec, name string) (model.Spec, error) {
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
func withLabels(s model.Spec, n int) (model.Spec, error) {
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
func withImageSize(s model.Spec, n int) (model.Spec, error) {
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
func splitTargets(s string) ([]string, error) {
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, fmt.Errorf("%w: --lora-targets %q: an empty module name", errUsage, s)
		}
		out = append(out, t)
	}
	return out, nil
}

// deviceFlags reads --gpu and --memory: a GPU of the catalog (catalog
// true), or free memory on an unnamed device, or neither (the zero
// Device). Zero memory is refused, not taken for "no GPU named": that
// would pass any job.
func deviceFlags(gpu, memory string) (dev gpumem.Device, catalog bool, err error) {
	switch {
	case gpu != "" && memory != "":
		return dev, false, fmt.Errorf("%w: give one of --gpu and --memory", errUsage)
	case gpu != "":
		d, ok := gpumem.LookupDevice(gpu)
		if !ok {
			return dev, false, fmt.Errorf("%w: --gpu %q: not in the catalog%s (see gpumem devices, or give --memory)", errUsage, gpu, suggestGPU(gpu))
		}
		return d, true, nil
	case memory != "":
		b, err := gpumem.ParseBytes(memory)
		if err != nil {
			return dev, false, fmt.Errorf("%w: --memory: %v", errUsage, err)
		}
		if b < 1 {
			return dev, false, fmt.Errorf("%w: --memory %q: want a size of at least 1B, such as 80GiB", errUsage, memory)
		}
		return gpumem.Device{Name: memory + " of free memory", Capacity: b}, false, nil
	}
	return dev, false, nil
}

// writeFitJSON adds the fit on dev to the estimate's JSON object r, when
// a device was given (device, free, min_headroom, fits, shortfall), and
// writes r indented.
func writeFitJSON(out io.Writer, r map[string]any, dev gpumem.Device, h headroom, fits bool, shortfall gpumem.Bytes) error {
	if dev.Capacity > 0 {
		r["device"] = dev.Name
		r["free"] = int64(dev.Free())
		r["min_headroom"] = int64(h.bytes)
		r["fits"] = fits
		r["shortfall"] = int64(shortfall)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
