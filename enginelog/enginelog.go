package enginelog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// Engine is the serving engine a log comes from.
type Engine string

// The engines Parse recognizes.
const (
	LlamaCpp Engine = "llama.cpp" // llama.cpp and the programs built on it (KoboldCpp, llama-cpp-python)
	Ollama   Engine = "ollama"    // Ollama's scheduler and engine lines (its llama.cpp runner's lines read as LlamaCpp)
	VLLM     Engine = "vllm"
	SGLang   Engine = "sglang"
)

// Kind says what a figure measures.
type Kind string

// The figures Parse reads. Sizes are in Figure.Bytes, counts in
// Figure.Count.
const (
	// llama.cpp (and Ollama's engine): ggml backend buffers.
	ModelBuffer   Kind = "model buffer"   // weights on a device ("CUDA0 buffer size", "CPU_Mapped model buffer size")
	KVBuffer      Kind = "KV buffer"      // the KV cache on a device
	ComputeBuffer Kind = "compute buffer" // the graph's compute buffer on a device
	KVSelf        Kind = "KV self"        // the whole KV cache over all devices ("KV self size", "llama_kv_cache: size")
	VRAMUsed      Kind = "VRAM used"      // 2023 releases: the weights on the GPU
	HostRequired  Kind = "mem required"   // 2023 releases: the weights left in host memory
	ComputeTotal  Kind = "compute total"  // 2023 releases: "compute buffer total size"
	VRAMTotal     Kind = "VRAM total"     // 2023 releases: "total VRAM used" (model and context)
	VRAMContext   Kind = "VRAM context"   // 2023 releases: the context's part of "total VRAM used"
	AllocFailed   Kind = "failed allocation"

	// Ollama's scheduler estimate (llm/memory.go).
	OllamaRequiredFull    Kind = "ollama required full"
	OllamaRequiredPartial Kind = "ollama required partial"
	OllamaKV              Kind = "ollama required kv"
	OllamaWeightsTotal    Kind = "ollama weights total"
	OllamaGraphFull       Kind = "ollama graph full"
	OllamaGraphPartial    Kind = "ollama graph partial"
	OllamaAvailable       Kind = "ollama available"

	// vLLM.
	Weights        Kind = "weights"          // "Loading model weights took", "Model loading took", "model weights take"
	TotalGPUMemory Kind = "total GPU memory" // total_gpu_memory
	NonTorch       Kind = "non-torch memory"
	ActivationPeak Kind = "activation peak" // "PyTorch activation peak memory"
	KVCacheMemory  Kind = "KV cache memory" // the memory left for the KV cache
	KVNeeded       Kind = "KV needed"       // the refusal's KV cache of one max_model_len request
	GPUBlocks      Kind = "GPU blocks"
	KVTokens       Kind = "KV tokens"   // "GPU KV cache size: N tokens", the refusal's maximum tokens
	Concurrency    Kind = "concurrency" // "Maximum concurrency for L tokens per request"
	MaxLenEstimate Kind = "estimated max model length"
	CUDAGraph      Kind = "CUDA graph memory" // vLLM's estimate or capture, SGLang's capture

	// SGLang.
	SGLangTokens      Kind = "sglang KV tokens"
	SGLangK           Kind = "sglang K size"
	SGLangV           Kind = "sglang V size"
	SGLangMaxTokens   Kind = "sglang max_total_num_tokens"
	SGLangAvailable   Kind = "sglang available memory"
	SGLangMaxInputLen Kind = "sglang max input length"
	// "Load weight begin. avail mem=X GB" and "Load weight end. …, avail
	// mem=X GB, mem usage=Y GB" (ModelRunner.load_model): the free memory
	// before and after the weights load, and their difference.
	SGLangFreeBeforeWeights Kind = "sglang free before weights"
	SGLangFreeAfterWeights  Kind = "sglang free after weights"
	SGLangWeightsUsage      Kind = "sglang weights"
)

// Figure is one number an engine printed.
type Figure struct {
	Kind   Kind
	Device string       // "CUDA0", "CPU", "CUDA_Host", …; "" when the line names none
	Bytes  gpumem.Bytes // for sizes
	Count  float64      // for counts (tokens, blocks, concurrency)
	Line   int          // 1-based
}

// Params are the job parameters a log states; zero (or nil) when it does
// not.
type Params struct {
	NCtx, NBatch, NUBatch, NSeqMax int // llama.cpp context (n_ctx, n_batch, n_ubatch, n_seq_max)
	KVSize                         int // llama.cpp kv_size (the cache's cells)
	FlashAttn                      *bool
	TypeK, TypeV                   string // llama.cpp cache types ("f16", "q8_0")
	LayersOffloaded, LayersTotal   int    // "offloaded N/M layers to GPU"
	LayersRepeating                int    // "offloading N repeating layers to GPU"
	HasRepeating                   bool   // the log prints LayersRepeating (which may be 0)
	NGPULayers                     int    // --n-gpu-layers of an Ollama runner's command line
	MaxModelLen                    int    // vLLM max_model_len / max seq len, SGLang context_len
	Utilization                    float64
	TensorParallel                 int
	// SWAKVSize is the cells of llama.cpp's sliding-window cache
	// ("llama_kv_cache_iswa: creating     SWA KV cache, size = N cells",
	// llama_kv_cache_unified_iswa before October 2025); zero when the log
	// prints none. SWAFull is set by its "using full-size SWA cache"
	// (--swa-full).
	SWAKVSize int
	SWAFull   bool
	// Quantization is the weights' quantization method a vLLM or SGLang
	// log states: the engine's config line ("quantization=fp8",
	// "quantization=compressed-tensors", SGLang's ServerArgs
	// "quantization='awq'"), the arguments it prints ("'quantization':
	// 'fp8'", --quantization), or the method vLLM switches to at run time
	// ("The model is convertible to gptq_marlin during runtime. Using
	// gptq_marlin kernel.", which wins). "" when the log states none or
	// prints "None".
	Quantization string
	// QuantScheme is the linear method vLLM selected for the quantized
	// layers ("Selected CutlassFP8ScaledMMLinearKernel for
	// CompressedTensorsW8A8Fp8" gives "CompressedTensorsW8A8Fp8"): a
	// compressed-tensors checkpoint's scheme, which its method does not
	// name.
	QuantScheme string
	// ModelName is the model vLLM's engine configuration names
	// ("Initializing a V1 LLM engine (v0.13.0) with config:
	// model='neuralmagic/Qwen2.5-14B-Instruct-FP8-dynamic', …").
	ModelName string
	// KVCacheDType is the cache dtype the config line or the arguments
	// print ("kv_cache_dtype=fp8", "--kv-cache-dtype fp8_e5m2"); "auto"
	// is stored as "".
	KVCacheDType string
}

// Log is what Parse read.
type Log struct {
	Engine  Engine
	Figures []Figure
	Params  Params
	Hparams Hparams // the model's shape, where llama.cpp printed it
}

// Find returns the figures of kind k.
func (l *Log) Find(k Kind) []Figure {
	var out []Figure
	for _, f := range l.Figures {
		if f.Kind == k {
			out = append(out, f)
		}
	}
	return out
}

// Last returns the last figure of kind k: a multi-rank engine prints a
// figure once per rank, and a thread that shows a run before and after a
// change quotes the later one last.
func (l *Log) Last(k Kind) (Figure, bool) {
	for i := len(l.Figures) - 1; i >= 0; i-- {
		if l.Figures[i].Kind == k {
			return l.Figures[i], true
		}
	}
	return Figure{}, false
}

// First returns the first figure of kind k.
func (l *Log) First(k Kind) (Figure, bool) {
	for _, f := range l.Figures {
		if f.Kind == k {
			return f, true
		}
	}
	return Figure{}, false
}

// ErrNoFigures is returned (wrapped) for input in which Parse found no
// engine memory figure.
var ErrNoFigures = errors.New("no serving-engine memory figure")

// MaxLine is the longest line Parse reads; a longer one is an error.
const MaxLine = 1 << 20

// Parse reads a serving engine's log.
func Parse(r io.Reader) (*Log, error) {
	l := &Log{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	n := 0
	var votes [4]int
	for sc.Scan() {
		n++
		if err := l.line(sc.Text(), n, &votes); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("enginelog: line %d is longer than %d bytes: %w", n+1, MaxLine, err)
		}
		return nil, fmt.Errorf("enginelog: reading line %d: %w", n+1, err)
	}
	l.Hparams.resolve()
	if l.Params.SWAKVSize > 0 {
		l.mergeISWA()
	}
	if len(l.Figures) == 0 {
		return nil, fmt.Errorf("enginelog: %w in %d lines (want llama.cpp's \"buffer size = … MiB\", Ollama's \"memory.required\", vLLM's \"Available KV cache memory\" or \"# GPU blocks\", or SGLang's \"KV Cache is allocated\")", ErrNoFigures, n)
	}
	switch {
	case votes[1] > 0:
		l.Engine = Ollama
	case votes[0] > 0:
		l.Engine = LlamaCpp
	case votes[2] >= votes[3]:
		l.Engine = VLLM
	default:
		l.Engine = SGLang
	}
	return l, nil
}

// line reads one line into l. votes counts the engines' own lines
// (llama.cpp, Ollama, vLLM, SGLang).
func (l *Log) line(s string, n int, votes *[4]int) error {
	add := func(k Kind, dev, v, unit string, vote int) error {
		b, err := size(v, unit, n)
		if err != nil {
			return err
		}
		l.Figures = append(l.Figures, Figure{Kind: k, Device: dev, Bytes: b, Line: n})
		votes[vote]++
		return nil
	}
	addCount := func(k Kind, v string, vote int) error {
		c, err := count(v, n)
		if err != nil {
			return err
		}
		l.Figures = append(l.Figures, Figure{Kind: k, Count: c, Line: n})
		votes[vote]++
		return nil
	}
	p := &l.Params

	// llama.cpp.
	if err := l.Hparams.hparam(s, n); err != nil {
		return err
	}
	if m := find(reModelBuf, s, "buffer size"); m != nil {
		if err := add(ModelBuffer, m[1], m[2], "MiB", 0); err != nil {
			return err
		}
	}
	if m := find(reKVBuf, s, "KV buffer size"); m != nil {
		if err := add(KVBuffer, m[1], m[2], "MiB", 0); err != nil {
			return err
		}
	}
	if m := find(reComputeBuf, s, "compute buffer size"); m != nil {
		if err := add(ComputeBuffer, m[1], m[2], "MiB", 0); err != nil {
			return err
		}
	}
	if m := find(reKVSelf, s, "elf size"); m != nil {
		if err := add(KVSelf, "", m[1], m[2], 0); err != nil {
			return err
		}
		if m[3] != "" {
			p.TypeK, p.TypeV = m[3], m[4]
		}
	}
	if m := find(reKVSize, s, "llama_kv_cache"); m != nil {
		if err := add(KVSelf, "", m[1], "MiB", 0); err != nil {
			return err
		}
		if p.KVSize == 0 {
			p.KVSize = atoi(m[2])
		}
		p.TypeK, p.TypeV = m[4], m[5]
	}
	if m := find(reVRAMTotal, s, "total VRAM used"); m != nil {
		if err := add(VRAMTotal, "", m[1], "MB", 0); err != nil {
			return err
		}
		if err := add(VRAMUsed, "", m[2], "MB", 0); err != nil {
			return err
		}
		if err := add(VRAMContext, "", m[3], "MB", 0); err != nil {
			return err
		}
	} else if m := find(reVRAMUsed, s, "VRAM used"); m != nil {
		if err := add(VRAMUsed, "", m[1], m[2], 0); err != nil {
			return err
		}
	}
	if m := find(reVRAMKV, s, "VRAM kv self"); m != nil {
		// 2023 releases: the offloaded layers' cache, on the GPU.
		if err := add(KVBuffer, "CUDA", m[1], m[2], 0); err != nil {
			return err
		}
	}
	if m := find(reMemReq, s, "mem required"); m != nil {
		if err := add(HostRequired, "CPU", m[1], m[2], 0); err != nil {
			return err
		}
	}
	if m := find(reComputeTot, s, "compute buffer total size"); m != nil {
		if err := add(ComputeTotal, "", m[1], m[2], 0); err != nil {
			return err
		}
	}
	if m := find(reAlloc, s, "alloc_buffer"); m != nil {
		if err := add(AllocFailed, "CUDA"+m[2], m[1], "MiB", 0); err != nil {
			return err
		}
	}
	if m := find(reOffloaded, s, "offloaded "); m != nil {
		p.LayersOffloaded, p.LayersTotal = atoi(m[1]), atoi(m[2])
	}
	if m := find(reRepeating, s, "repeating layers"); m != nil {
		p.LayersRepeating, p.HasRepeating = atoi(m[1]), true
	}
	if m := find(reCtxParam, s, "n_"); m != nil {
		switch m[1] {
		case "n_ctx":
			p.NCtx = atoi(m[2])
		case "n_batch":
			p.NBatch = atoi(m[2])
		case "n_ubatch":
			p.NUBatch = atoi(m[2])
		case "n_seq_max":
			p.NSeqMax = atoi(m[2])
		case "flash_attn":
			fa := m[2] == "1" || m[2] == "enabled" || m[2] == "true"
			p.FlashAttn = &fa
		}
	}
	if m := find(reISWA, s, "SWA KV cache"); m != nil && m[1] == "" {
		p.SWAKVSize = atoi(m[2])
	}
	if strings.Contains(s, "using full-size SWA cache") {
		p.SWAFull = true
	}
	if m := find(reKVInit, s, "kv_size"); m != nil {
		p.KVSize, p.TypeK, p.TypeV = atoi(m[1]), m[2], m[3]
	}

	// Ollama.
	if strings.Contains(s, "msg=offload") || strings.Contains(s, `msg="offload to`) {
		for _, m := range reOllamaMem.FindAllStringSubmatch(s, -1) {
			kind := map[string]Kind{
				"required.full": OllamaRequiredFull, "required.partial": OllamaRequiredPartial,
				"required.kv": OllamaKV, "weights.total": OllamaWeightsTotal,
				"graph.full": OllamaGraphFull, "graph.partial": OllamaGraphPartial,
				"available": OllamaAvailable,
			}[m[1]]
			vals := strings.Fields(strings.Trim(m[2], "[]"))
			for i := 0; i+1 < len(vals); i += 2 {
				dev := ""
				if kind == OllamaAvailable {
					dev = "GPU" + strconv.Itoa(i/2)
				}
				if err := add(kind, dev, vals[i], vals[i+1], 1); err != nil {
					return err
				}
			}
		}
		if m := reOllamaLayers.FindStringSubmatch(s); m != nil {
			p.NGPULayers = atoi(m[1])
		}
	}
	if m := find(reOllamaBuf, s, "msg=\""); m != nil {
		kind := map[string]Kind{"model weights": ModelBuffer, "kv cache": KVBuffer, "compute graph": ComputeBuffer}[m[1]]
		f := strings.Fields(m[3])
		if len(f) == 2 {
			if err := add(kind, m[2], f[0], f[1], 1); err != nil {
				return err
			}
		}
	}
	if strings.Contains(s, "ollama_llama_server") || strings.Contains(s, "ollama runner") || strings.Contains(s, "ollama.exe runner") {
		votes[1]++
		for _, m := range reOllamaFlag.FindAllStringSubmatch(s, -1) {
			switch m[1] {
			case "ctx-size":
				p.NCtx = atoi(m[2])
			case "batch-size":
				p.NBatch = atoi(m[2])
			case "n-gpu-layers":
				p.NGPULayers = atoi(m[2])
			case "parallel":
				p.NSeqMax = atoi(m[2])
			}
		}
		fa := strings.Contains(s, "--flash-attn")
		p.FlashAttn = &fa
	}

	// vLLM.
	if m := find(reVWeights, s, "took"); m != nil {
		if err := add(Weights, "", m[1], m[2], 2); err != nil {
			return err
		}
	} else if m := find(reVWeights2, s, "model weights take"); m != nil {
		if err := add(Weights, "", m[1], "GiB", 2); err != nil {
			return err
		}
	}
	if m := find(reVNonTorch, s, "non_torch_memory"); m != nil {
		if err := add(NonTorch, "", m[1], "GiB", 2); err != nil {
			return err
		}
	}
	if m := find(reVAct, s, "activation peak"); m != nil {
		if err := add(ActivationPeak, "", m[1], "GiB", 2); err != nil {
			return err
		}
	}
	if m := find(reVRest, s, "ache"); m != nil {
		if err := add(KVCacheMemory, "", m[1], "GiB", 2); err != nil {
			return err
		}
	}
	if m := find(reVTotal, s, "total_gpu_memory"); m != nil {
		if err := add(TotalGPUMemory, "", m[1], "GiB", 2); err != nil {
			return err
		}
	}
	if m := find(reVUtil, s, "gpu_memory_utilization"); m != nil {
		p.Utilization, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := find(reVBlocks, s, "locks: "); m != nil {
		if err := addCount(GPUBlocks, m[1], 2); err != nil {
			return err
		}
	}
	if m := find(reVTokens, s, "GPU KV cache size"); m != nil {
		if err := addCount(KVTokens, m[1], 2); err != nil {
			return err
		}
	}
	if m := find(reVConc, s, "Maximum concurrency"); m != nil {
		if err := addCount(Concurrency, m[2], 2); err != nil {
			return err
		}
		p.MaxModelLen = atoi(strings.ReplaceAll(m[1], ",", ""))
	}
	if m := find(reVMaxTok, s, "maximum number of tokens"); m != nil {
		if err := addCount(KVTokens, m[1], 2); err != nil {
			return err
		}
	}
	if m := find(reVSeqLen, s, "max seq len"); m != nil {
		p.MaxModelLen = atoi(m[1])
	}
	if m := find(reVNeeded, s, "KV cache is needed"); m != nil {
		if err := add(KVNeeded, "", m[1], "GiB", 2); err != nil {
			return err
		}
		if err := add(KVCacheMemory, "", m[2], "GiB", 2); err != nil {
			return err
		}
	}
	if m := find(reVEstimate, s, "estimated maximum"); m != nil {
		if err := addCount(MaxLenEstimate, m[1], 2); err != nil {
			return err
		}
	}
	if m := find(reVGraph, s, "raph"); m != nil {
		if err := add(CUDAGraph, "", m[1], "GiB", 2); err != nil {
			return err
		}
	}
	if m := find(reVFlagMML, s, "max"); m != nil {
		p.MaxModelLen = atoi(m[1])
	}
	if m := find(reVFlagUtil, s, "--gpu-memory-utilization"); m != nil {
		p.Utilization, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := find(reVFlagTP, s, "tensor"); m != nil {
		p.TensorParallel = atoi(m[1])
	}
	if m := find(reVQuant, s, "quantization"); m != nil && !strings.Contains(p.Quantization, "_marlin") {
		p.Quantization = m[1]
		if m[1] == "None" {
			p.Quantization = ""
		}
	}
	if m := find(reVQuantRun, s, "convertible to"); m != nil {
		p.Quantization = m[1]
	}
	if m := find(reVModelName, s, "with config: model="); m != nil {
		p.ModelName = m[1]
	}
	if m := find(reVScheme, s, "Selected "); m != nil {
		p.QuantScheme = m[1]
	}
	if m := find(reVKVDType, s, "kv"); m != nil {
		p.KVCacheDType = m[1]
		if m[1] == "auto" || m[1] == "None" {
			p.KVCacheDType = ""
		}
	}

	// SGLang.
	if m := find(reSGAlloc, s, "KV Cache is allocated"); m != nil {
		if err := addCount(SGLangTokens, m[1], 3); err != nil {
			return err
		}
		if err := add(SGLangK, "", m[2], "GB", 3); err != nil {
			return err
		}
		if err := add(SGLangV, "", m[3], "GB", 3); err != nil {
			return err
		}
	}
	if m := find(reSGMaxTok, s, "max_total_num_tokens="); m != nil {
		if err := addCount(SGLangMaxTokens, m[1], 3); err != nil {
			return err
		}
		if m := reSGCtx.FindStringSubmatch(s); m != nil {
			p.MaxModelLen = atoi(m[1])
		}
		if m := reSGAvail.FindStringSubmatch(s); m != nil {
			if err := add(SGLangAvailable, "", m[1], "GB", 3); err != nil {
				return err
			}
		}
	}
	if m := find(reSGGraph, s, "Capture cuda graph end"); m != nil {
		if err := add(CUDAGraph, "", m[1], "GB", 3); err != nil {
			return err
		}
	}
	if m := find(reSGWBegin, s, "Load weight begin"); m != nil {
		if err := add(SGLangFreeBeforeWeights, "", m[1], "GB", 3); err != nil {
			return err
		}
	}
	if m := find(reSGWEnd, s, "Load weight end"); m != nil {
		if err := add(SGLangFreeAfterWeights, "", m[1], "GB", 3); err != nil {
			return err
		}
		if err := add(SGLangWeightsUsage, "", m[2], "GB", 3); err != nil {
			return err
		}
	}
	if m := find(reSGMaxInput, s, "maximum allowed length"); m != nil {
		if err := addCount(SGLangMaxInputLen, m[1], 3); err != nil {
			return err
		}
	}
	if m := find(reSGFlagMem, s, "--mem-fraction-static"); m != nil {
		p.Utilization, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := find(reSGFlagTP, s, "--t"); m != nil {
		p.TensorParallel = atoi(m[1])
	}
	return nil
}

// mergeISWA sums, in a log of llama.cpp's sliding-window cache, the two
// caches' figures that llama_kv_cache_iswa prints one after the other
// (each cache's "<dev> KV buffer size" and "llama_kv_cache: size"), so
// that a device's KV buffer and the whole cache are one figure each, as
// the runtime models them.
func (l *Log) mergeISWA() {
	type key struct {
		k   Kind
		dev string
	}
	first := map[key]int{}
	out := l.Figures[:0]
	for _, f := range l.Figures {
		if f.Kind == KVBuffer || f.Kind == KVSelf {
			k := key{f.Kind, f.Device}
			if i, ok := first[k]; ok {
				out[i].Bytes += f.Bytes
				continue
			}
			first[k] = len(out)
		}
		out = append(out, f)
	}
	l.Figures = out
}
