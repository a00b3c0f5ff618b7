package enginelog

// The lines each engine prints at load, the regular expressions that read
// them, and the number helpers they share.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

var (
	num = `([0-9]+(?:\.[0-9]+)?)`

	// llama.cpp.
	reModelBuf   = regexp.MustCompile(`load_tensors:\s+(\S+)\s+(?:model\s+)?buffer size\s*=\s*` + num + `\s*MiB`)
	reKVBuf      = regexp.MustCompile(`(\S+)\s+KV buffer size\s*=\s*` + num + `\s*MiB`)
	reISWA       = regexp.MustCompile(`llama_kv_cache(?:_unified)?_iswa: creating\s+(non-)?SWA KV cache, size = (\d+) cells`)
	reComputeBuf = regexp.MustCompile(`(\S+)\s+compute buffer size\s*=\s*` + num + `\s*MiB`)
	reKVSelf     = regexp.MustCompile(`(?i)KV self size\s*=\s*` + num + `\s*(MiB|MB)(?:,\s*K \((\w+)\):\s*[0-9.]+\s*MiB,\s*V \((\w+)\))?`)
	reKVSize     = regexp.MustCompile(`llama_kv_cache(?:_unified)?: size =\s*` + num + ` MiB \(\s*(\d+) cells,\s*(\d+) layers.*?K \((\w+)\).*?V \((\w+)\)`)
	reVRAMUsed   = regexp.MustCompile(`(?:llm_load_tensors|llama_model_load_internal): (?:total )?VRAM used:\s*` + num + `\s*(MiB|MB)`)
	reVRAMTotal  = regexp.MustCompile(`llama_new_context_with_model: total VRAM used:\s*` + num + ` MB \(model:\s*` + num + ` MB, context:\s*` + num + ` MB\)`)
	reVRAMKV     = regexp.MustCompile(`llama_kv_cache_init: VRAM kv self = ` + num + ` (MiB|MB)`)
	reMemReq     = regexp.MustCompile(`(?:llm_load_tensors|llama_model_load_internal): mem required\s*=\s*` + num + `\s*(MiB|MB)`)
	reComputeTot = regexp.MustCompile(`compute buffer total size\s*=\s*` + num + `\s*(MiB|MB)`)
	reAlloc      = regexp.MustCompile(`ggml_backend_cuda_buffer_type_alloc_buffer: allocating ` + num + ` MiB on device (\d+)`)
	reOffloaded  = regexp.MustCompile(`offloaded (\d+)/(\d+) layers to GPU`)
	reRepeating  = regexp.MustCompile(`offloading (\d+) repeating layers to GPU`)
	reCtxParam   = regexp.MustCompile(`(?:llama_new_context_with_model|llama_context|llama_init_from_model):\s+(n_ctx|n_batch|n_ubatch|n_seq_max|flash_attn)\s*=\s*(\w+)`)
	reKVInit     = regexp.MustCompile(`kv_size = (\d+), .*type_k = '(\w+)', type_v = '(\w+)'`)

	// Ollama.
	reOllamaMem    = regexp.MustCompile(`memory\.(required\.full|required\.partial|required\.kv|weights\.total|graph\.full|graph\.partial|available)="([^"]*)"`)
	reOllamaBuf    = regexp.MustCompile(`msg="(model weights|kv cache|compute graph)" (?:buffer|device|backend)=(\S+)(?: buffer_type=\S+)? size="([^"]+)"`)
	reOllamaLayers = regexp.MustCompile(`layers\.offload=(\d+)`)
	reOllamaFlag   = regexp.MustCompile(`--(ctx-size|batch-size|n-gpu-layers|parallel) (\d+)`)

	// vLLM.
	reVWeights   = regexp.MustCompile(`(?:Loading model weights took|Model loading took)\s+` + num + `\s*(GB|GiB)`)
	reVWeights2  = regexp.MustCompile(`model weights take\s+` + num + `\s*GiB`)
	reVNonTorch  = regexp.MustCompile(`non_torch_memory(?: takes)?[\s=]+` + num + `\s*GiB`)
	reVAct       = regexp.MustCompile(`PyTorch activation peak memory(?: takes)?\s+` + num + `\s*GiB`)
	reVRest      = regexp.MustCompile(`(?:the rest of the memory reserved for KV Cache is|available_kv_cache_memory|kv_cache_size=|Available KV cache memory:)\s*` + num + `\s*GiB`)
	reVTotal     = regexp.MustCompile(`total_gpu_memory[\s=(]+` + num + `\s*GiB`)
	reVUtil      = regexp.MustCompile(`gpu_memory_utilization[\s=(]+` + num)
	reVBlocks    = regexp.MustCompile(`(?i)(?:# )?(?:GPU|CUDA) blocks: \**(\d+)`)
	reVTokens    = regexp.MustCompile(`GPU KV cache size: ([0-9,]+) tokens`)
	reVConc      = regexp.MustCompile(`Maximum concurrency for ([0-9,]+) tokens per request: ` + num + `x`)
	reVMaxTok    = regexp.MustCompile(`maximum number of tokens that can be stored in KV cache \((\d+)\)`)
	reVSeqLen    = regexp.MustCompile(`max seq len \((\d+)\)`)
	reVNeeded    = regexp.MustCompile(`\(?` + num + ` GiB KV cache is needed, which is larger than the available KV cache memory \(` + num + ` GiB\)`)
	reVEstimate  = regexp.MustCompile(`estimated maximum model length is (\d+)`)
	reVGraph     = regexp.MustCompile(`(?:Estimated CUDA graph memory:|Graph capturing finished in [0-9.]+ secs?, took)\s*` + num + `\s*GiB`)
	reVFlagMML   = regexp.MustCompile(`(?:--max-model-len[ =]|max_seq_len=|'max_model_len': )(\d+)`)
	reVFlagUtil  = regexp.MustCompile(`--gpu-memory-utilization[ =]` + num)
	reVFlagTP    = regexp.MustCompile(`(?:--tensor-parallel-size[ =]|tensor_parallel_size=)(\d+)`)
	reVQuant     = regexp.MustCompile(`(?:\bquantization=|'quantization': |--quantization[ =])'?([A-Za-z0-9_.-]+)`)
	reVQuantRun  = regexp.MustCompile(`convertible to (\w+) during runtime`)
	reVScheme    = regexp.MustCompile(`Selected \w+Kernel for (\w+)`)
	reVModelName = regexp.MustCompile(`LLM engine.* with config: model='([^']+)'`)
	reVKVDType   = regexp.MustCompile(`(?:\bkv_cache_dtype=|'kv_cache_dtype': |--kv-cache-dtype[ =])'?([A-Za-z0-9_]+)`)
	reSGAlloc    = regexp.MustCompile(`KV Cache is allocated\.(?: dtype: \S+,)? #tokens: (\d+), K size: ` + num + ` GB, V size: ` + num + ` GB`)
	reSGMaxTok   = regexp.MustCompile(`max_total_num_tokens=(\d+)`)
	reSGAvail    = regexp.MustCompile(`available_gpu_mem=` + num + ` GB`)
	reSGCtx      = regexp.MustCompile(`context_len=(\d+)`)
	reSGGraph    = regexp.MustCompile(`Capture cuda graph end\..*mem usage=` + num + ` GB`)
	reSGMaxInput = regexp.MustCompile(`maximum allowed length \((\d+) tokens\)`)
	reSGWBegin   = regexp.MustCompile(`Load weight begin\. avail mem=` + num + ` GB`)
	reSGWEnd     = regexp.MustCompile(`Load weight end\..*avail mem=` + num + ` GB, mem usage=` + num + ` GB`)
	reSGFlagMem  = regexp.MustCompile(`--mem-fraction-static[ =]` + num)
	reSGFlagTP   = regexp.MustCompile(`--(?:tensor-parallel-size|tp)[ =](\d+)`)
)

// find runs re on s when s contains needle, a literal every match holds:
// most lines match none of the patterns, and a substring test is far
// cheaper than a regular expression.
func find(re *regexp.Regexp, s, needle string) []string {
	if !strings.Contains(s, needle) {
		return nil
	}
	return re.FindStringSubmatch(s)
}

// size reads a number with a unit the engines use. "MB" and "GB" are the
// engines' binary units (llama.cpp divides by 1024², vLLM's and SGLang's
// "GB" by 2^30), so they are read as MiB and GiB.
func size(v, unit string, line int) (gpumem.Bytes, error) {
	switch unit {
	case "MB":
		unit = "MiB"
	case "GB":
		unit = "GiB"
	}
	b, err := gpumem.ParseBytes(v + " " + unit)
	if err != nil {
		return 0, fmt.Errorf("enginelog: line %d: size %q %s: %w", line, v, unit, err)
	}
	return b, nil
}

func count(v string, line int) (float64, error) {
	f, err := strconv.ParseFloat(strings.ReplaceAll(v, ",", ""), 64)
	if err != nil {
		return 0, fmt.Errorf("enginelog: line %d: count %q: %w", line, v, err)
	}
	return f, nil
}

func atoi(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
