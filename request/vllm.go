package request

import (
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// VLLMFlags are vLLM's engine arguments (budget.VLLMOptions).
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

// SGLangFlags are SGLang's server arguments (budget.SGLangOptions);
// --tensor-parallel-size and --kv-cache-dtype are shared with vLLM
// (VLLMFlags), as both engines name them so.
type SGLangFlags struct {
	MemFraction    float64 // --mem-fraction-static; 0: SGLang's default by TP
	MaxTotalTokens int     // --max-total-tokens; 0: no cap
	PageSize       int     // --page-size; 0: 1
	ContextLength  int     // --context-length; 0: the model's
}

// sglangFlagNames are the flags that only an SGLang job takes.
var sglangFlagNames = []string{"mem-fraction-static", "max-total-tokens", "page-size", "context-length"}

func (s *SGLangFlags) Register(fs *flag.FlagSet) {
	fs.Float64Var(&s.MemFraction, "mem-fraction-static", 0, "with --runtime sglang: the fraction of the free memory the weights and the KV pool may take, in (0, 1) (default SGLang's: 0.88 on one GPU, less with --tensor-parallel-size)")
	fs.IntVar(&s.MaxTotalTokens, "max-total-tokens", 0, "with --runtime sglang: a cap on the KV pool's tokens (default none)")
	fs.IntVar(&s.PageSize, "page-size", 0, "with --runtime sglang: tokens per page; the pool is whole pages (default 1)")
	fs.IntVar(&s.ContextLength, "context-length", 0, "with --runtime sglang: the longest request, for the concurrency printed (default the model's max_position_embeddings)")
}

// apply sets j's SGLang options (j.Runtime is set, and the vLLM flags
// applied: they set the shared --tensor-parallel-size and
// --kv-cache-dtype). On error it returns the flag at fault, without its
// dashes.
func (s *SGLangFlags) Apply(j *budget.Job) (string, error) {
	given := map[string]string{}
	if s.MemFraction != 0 {
		given["mem-fraction-static"] = strconv.FormatFloat(s.MemFraction, 'g', -1, 64)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max-total-tokens", s.MaxTotalTokens}, {"page-size", s.PageSize}, {"context-length", s.ContextLength}} {
		if c.v != 0 {
			given[c.name] = strconv.Itoa(c.v)
		}
	}
	if j.Runtime != budget.SGLang {
		for _, name := range sglangFlagNames {
			if v, ok := given[name]; ok {
				return name, fmt.Errorf("%w: --%s %s: it is an SGLang option (give --runtime sglang, or leave --%s out)", ErrUsage, name, v, name)
			}
		}
		return "", nil
	}
	if f := s.MemFraction; math.IsNaN(f) || f < 0 || f >= 1 {
		return "mem-fraction-static", fmt.Errorf("%w: --mem-fraction-static %s: want a fraction in (0, 1), such as 0.88", ErrUsage, given["mem-fraction-static"])
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max-total-tokens", s.MaxTotalTokens}, {"page-size", s.PageSize}, {"context-length", s.ContextLength}} {
		if c.v < 0 {
			return c.name, fmt.Errorf("%w: --%s %d: must not be negative", ErrUsage, c.name, c.v)
		}
	}
	o := &j.SGLang
	o.MemFractionStatic, o.MaxTotalTokens, o.PageSize, o.ContextLength = s.MemFraction, s.MaxTotalTokens, s.PageSize, s.ContextLength
	return "", nil
}
