package request

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// LlamaFlags are --runtime and the llama.cpp options (budget.LlamaCppOptions).
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
	fs.StringVar(&l.Runtime, "runtime", "", "the engine: pytorch (transformers), llama.cpp (also Ollama), vllm or sglang; default llama.cpp for a --gguf inference job, pytorch otherwise")
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
			return "runtime", fmt.Errorf("%w: --runtime %q: want pytorch, llama.cpp (or ollama), vllm or sglang", ErrUsage, l.Runtime)
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
