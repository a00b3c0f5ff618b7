package request

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// IsOllama says that a runtime (--runtime, the request's runtime) names
// Ollama, whose placement gpumem plan answers (budget.OllamaLayers);
// gpumem estimate runs it as llama.cpp, which Ollama runs.
func IsOllama(runtime string) bool { return strings.EqualFold(strings.TrimSpace(runtime), "ollama") }

// OllamaOptions turns the llama.cpp flags into Ollama's options:
// --ctx-size is num_ctx, --ubatch-size num_batch (Ollama passes it as
// both -b and -ub), --parallel OLLAMA_NUM_PARALLEL, --n-gpu-layers
// num_gpu, --flash-attn OLLAMA_FLASH_ATTENTION and --cache-type-k (and
// -v, which must match) OLLAMA_KV_CACHE_TYPE. name maps a flag to what
// the caller calls it (a request field for a request); on an error the
// flag at fault is returned too, without its dashes.
func OllamaOptions(o budget.LlamaCppOptions, name func(string) string) (budget.OllamaOptions, string, error) {
	if o.CacheV != gpumem.Invalid && o.CacheV != o.CacheK {
		return budget.OllamaOptions{}, "cache-type-v", fmt.Errorf("%w: %s %s: Ollama has one cache type for K and V (OLLAMA_KV_CACHE_TYPE): give %s alone", ErrUsage, name("cache-type-v"), o.CacheV, name("cache-type-k"))
	}
	switch o.CacheK {
	case gpumem.Invalid, gpumem.FP16, gpumem.Q8_0, gpumem.Q4_0:
	default:
		return budget.OllamaOptions{}, "cache-type-k", fmt.Errorf("%w: %s %s: Ollama's cache types are f16, q8_0 and q4_0", ErrUsage, name("cache-type-k"), o.CacheK)
	}
	return budget.OllamaOptions{NumCtx: o.Context, NumBatch: o.UBatch, NumParallel: o.Parallel, NumGPU: o.GPULayers,
		FlashAttention: o.FlashAttention, KVCacheType: o.CacheK}, "", nil
}
