package budget

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/gpumem/gpumem"
)

// OllamaVersion is the Ollama release whose placement [OllamaLayers] and
// [OllamaMaxContext] reproduce: v0.12.11 (ollama/ollama 4372d0bf,
// llm/memory.go estimateGPULayers and pickBestFullFitByLibrary,
// fs/ggml/ggml.go GraphSize, ml/device.go MinimumMemory). The next
// commit (f560bd07, "llm: Use Ollama engine memory layouts for both old
// and new engines") replaced the formula by a layout measured by
// allocating the graph in the backend, and releases of 2026 hand the
// fit to llama-server (llama.cpp's --fit); neither can be computed
// without running the engine.
const OllamaVersion = "v0.12.11"

// ollamaMinimumMemory is what Ollama v0.12.11 sets aside on every CUDA
// or ROCm GPU for the context structures independent of the model
// (DeviceInfo.MinimumMemory, ml/device.go: 457 MiB; 512 MiB on Metal).
const ollamaMinimumMemory = 457 << 20

// ollamaDefaultContext is num_ctx when neither the request nor
// OLLAMA_CONTEXT_LENGTH sets it (envconfig.ContextLength, 4096 in
// v0.12.11).
const ollamaDefaultContext = 4096

// OllamaOptions are the request options and server settings that size
// Ollama's placement (api.Options and envconfig of v0.12.11; the names
// in parentheses). The zero value is Ollama's defaults: num_ctx 4096,
// num_batch 512, one parallel request, as many layers as fit, no flash
// attention, no extra overhead.
type OllamaOptions struct {
	// NumCtx is num_ctx (or OLLAMA_CONTEXT_LENGTH), the context of one
	// request; zero means 4096. Ollama caps it at the model's
	// context_length (NewLlamaServer, llm/server.go).
	NumCtx int
	// NumBatch is num_batch; zero means 512. Ollama caps it at NumCtx.
	NumBatch int
	// NumParallel is OLLAMA_NUM_PARALLEL: the requests served at once,
	// each with NumCtx of cache; zero means 1.
	NumParallel int
	// NumGPU is num_gpu, the layers to offload (the output layer counts
	// as one, as llama.cpp's -ngl); zero means as many as fit (Ollama's
	// -1). Ollama's num_gpu 0, CPU only, has nothing to place.
	NumGPU int
	// FlashAttention is OLLAMA_FLASH_ATTENTION=1 on a GPU that supports
	// it (CUDA compute capability 7.0 or later). Only with it does
	// KVCacheType apply.
	FlashAttention bool
	// KVCacheType is OLLAMA_KV_CACHE_TYPE: F16 (or Invalid), Q8_0 or
	// Q4_0; Ollama ignores it without flash attention.
	KVCacheType gpumem.DType
	// GPUOverhead is OLLAMA_GPU_OVERHEAD: memory reserved on every GPU.
	GPUOverhead gpumem.Bytes
}

// OllamaReport is Ollama's placement of a model on one or more GPUs: the
// fields of its "offload to cuda" log line (MemoryEstimate.LogValue).
type OllamaReport struct {
	Layers int // layers offloaded, the output layer included ("layers.offload")
	Slots  int // block_count + 1 ("layers.model")
	// GPUs is how many of the given GPUs Ollama uses: the fewest, largest
	// first, that hold every layer (pickBestFullFitByLibrary), or all of
	// them when none do.
	GPUs        int
	TensorSplit []int          // layers per GPU used ("layers.split")
	GPUSizes    []gpumem.Bytes // memory per GPU used ("memory.required.allocations")
	VRAM        gpumem.Bytes   // the sum of GPUSizes ("memory.required.partial")
	Total       gpumem.Bytes   // VRAM and what overflows to the CPU ("memory.required.full")
	KV          gpumem.Bytes   // the cache of every layer ("memory.required.kv")
	// GraphFull and GraphPartial are the compute graph's estimates when
	// every layer is offloaded and when some are not ("memory.graph");
	// Graph is the one that applies, counted on every GPU used.
	GraphFull, GraphPartial, Graph gpumem.Bytes
	Repeating                      gpumem.Bytes // the blocks' weights ("memory.weights.repeating")
	Output                         gpumem.Bytes // output_norm and output (or token_embd) ("memory.weights.nonrepeating")
	Full                           bool         // every layer is on a GPU
	Context                        int          // num_ctx as used (capped at context_length)
	Batch                          int          // num_batch as used
	Parallel                       int
	FlashAttn                      bool   // flash attention as used (the model supports it)
	Arch                           string // the GGUF architecture whose graph formula applies
}

// ollamaOpts resolves o's defaults against the model.
func ollamaOpts(o OllamaOptions, om *ollamaModel) (ctx, batch, par int, bpe float64, fa bool) {
	ctx = cmp.Or(o.NumCtx, ollamaDefaultContext)
	if om.trainCtx > 0 && ctx > om.trainCtx {
		ctx = om.trainCtx
	}
	batch = min(cmp.Or(o.NumBatch, 512), ctx)
	par = max(o.NumParallel, 1)
	// SupportsFlashAttention (fs/ggml/ggml.go): equal, non-zero K and V
	// head sizes, not gemma2.
	fa = o.FlashAttention && om.headK != 0 && om.headK == om.headV && om.arch != "gemma2"
	bpe = 2
	if fa {
		switch o.KVCacheType {
		case gpumem.Q8_0:
			bpe = 1
		case gpumem.Q4_0:
			bpe = 0.5
		}
	}
	return
}

func validateOllama(free []gpumem.Bytes, o OllamaOptions) error {
	switch {
	case len(free) == 0:
		return gpumem.Errorf("free", "none", gpumem.ErrInvalid, "give the free memory of at least one GPU")
	case len(free) > 64:
		return gpumem.Errorf("free", len(free), gpumem.ErrRange, "at most 64 GPUs")
	case o.NumCtx < 0 || o.NumCtx > 1<<24:
		return gpumem.Errorf("Ollama.NumCtx", o.NumCtx, gpumem.ErrInvalid, "want 1 to 2^24 tokens (zero: 4096)")
	case o.NumBatch < 0 || o.NumBatch > 1<<20:
		return gpumem.Errorf("Ollama.NumBatch", o.NumBatch, gpumem.ErrInvalid, "want 1 to 2^20 tokens (zero: 512)")
	case o.NumParallel < 0 || o.NumParallel > 1024:
		return gpumem.Errorf("Ollama.NumParallel", o.NumParallel, gpumem.ErrInvalid, "want 1 to 1024 requests (zero: 1)")
	case o.NumGPU < 0:
		return gpumem.Errorf("Ollama.NumGPU", o.NumGPU, gpumem.ErrInvalid, "must not be negative (zero: as many as fit)")
	case o.GPUOverhead < 0:
		return gpumem.Errorf("Ollama.GPUOverhead", o.GPUOverhead, gpumem.ErrInvalid, "must not be negative")
	}
	switch o.KVCacheType {
	case gpumem.Invalid, gpumem.FP16, gpumem.Q8_0, gpumem.Q4_0:
	default:
		return gpumem.Errorf("Ollama.KVCacheType", o.KVCacheType, gpumem.ErrInvalid, "want f16, q8_0 or q4_0 (OLLAMA_KV_CACHE_TYPE)")
	}
	for i, f := range free {
		if f <= 0 {
			return gpumem.Errorf("free["+strconv.Itoa(i)+"]", f, gpumem.ErrInvalid, "a GPU's free memory must be positive")
		}
	}
	return nil
}

// OllamaLayers returns how Ollama v0.12.11 places m on GPUs with the
// given free memory (as nvidia-smi reports it) for a request with
// options o: how many layers it offloads, on how many GPUs, and the
// memory it expects to use on each. It is the scheduler's choice
// (pickBestFullFitByLibrary, llm/memory.go): the GPUs are taken largest
// first, and the fewest that hold every layer are used; when none do,
// all of them, partly.
//
// The arithmetic is estimateGPULayers' (llm/memory.go, ollama/ollama
// 4372d0bf), on the sizes of the GGUF's tensors:
//   - each GPU keeps aside OLLAMA_GPU_OVERHEAD, 457 MiB (MinimumMemory)
//     and one layer's size (blk.0 and its cache) as a buffer; a GPU
//     that cannot also hold the larger graph estimate and one more
//     layer gets none;
//   - the blocks, last first, each with its cache, go to the GPUs in
//     turn while they fit beside the graph estimate; the output layer
//     (output_norm and output, or token_embd when tied) last;
//   - the cache of a layer is num_ctx × num_parallel × (key_length +
//     value_length) × head_count_kv × 2 bytes (f16; q8_0 1 and q4_0 ½
//     with flash attention), not padded;
//   - the graph (GraphSize, fs/ggml/ggml.go) is a per-architecture
//     formula in num_batch, num_ctx × num_parallel, the width, heads
//     and vocabulary for llama (and Mistral, Mixtral), qwen2, gemma,
//     gemma2, command-r, phi2, stablelm, deepseek2 and chatglm, and
//     head_count / head_count_kv × KV / 6 for the others; with more
//     than one GPU the partial estimate applies to both cases.
//
// These are Ollama's estimates, not llama.cpp's buffers (LlamaCppBuffers
// sizes those): what Ollama decides to offload, the num_gpu it passes to
// its runner. Architectures Ollama runs on its own engine (gemma3, qwen3,
// llama4, gpt-oss, mistral3 and their vision variants) are refused with
// gpumem.ErrUnsupported; projectors and adapters are not counted.
func OllamaLayers(m Model, free []gpumem.Bytes, o OllamaOptions) (OllamaReport, error) {
	if err := validateOllama(free, o); err != nil {
		return OllamaReport{}, err
	}
	om, err := ollamaRead(&m)
	if err != nil {
		return OllamaReport{}, err
	}
	return ollamaFit(&om, free, o), nil
}

// ollamaFit is pickBestFullFitByLibrary then estimateGPULayers on the
// GPUs chosen.
func ollamaFit(om *ollamaModel, free []gpumem.Bytes, o OllamaOptions) OllamaReport {
	gpus := slices.Clone(free)
	slices.SortStableFunc(gpus, func(a, b gpumem.Bytes) int { return cmp.Compare(b, a) })
	want := len(om.blocks) + 1
	if o.NumGPU > 0 {
		want = o.NumGPU
	}
	for n := 1; n <= len(gpus); n++ {
		r := ollamaEstimate(om, gpus[:n], o)
		if r.Layers > 0 && r.Layers >= want {
			return r
		}
	}
	return ollamaEstimate(om, gpus, o)
}

// ollamaGraph is GraphSize (fs/ggml/ggml.go, ollama/ollama 4372d0bf):
// the per-layer cache and the graph's estimates. context is num_ctx ×
// num_parallel, par num_parallel.
func ollamaGraph(om *ollamaModel, context, batch, par uint64, bpe float64) (kv []uint64, partial, full uint64) {
	kv = ollamaCache(om, context, batch, par, bpe)
	var kvTotal uint64
	for _, k := range kv {
		kvTotal += k
	}
	embedding, heads, headsKV, vocab := om.embd, om.heads, om.headsKV, om.vocab
	embeddingHeads := embedding / heads
	embeddingHeadsK := om.headK
	switch om.arch {
	case "llama":
		full = max(4*batch*(1+4*embedding+context*(1+heads)), 4*batch*(embedding+vocab))
		partial = 4 * batch * embedding
		partial += max(
			4*batch*(1+embedding+max(context, embedding))+embedding*embedding*9/16+4*context*(batch*heads+embeddingHeads*headsKV),
			4*batch*(embedding+vocab)+embedding*vocab*105/128,
		)
		if om.gateExps > 0 { // mixtral 8x22b
			ff := om.ff
			partial = max(
				3*om.gateExps+4*batch*(2*ff+headsKV+embedding+context+embeddingHeads*headsKV),
				4*(context*batch*heads+context*embeddingHeads*headsKV+batch*1024+embeddingHeads*headsKV*batch),
			)
		} else if w1 := om.gate0Rows; w1 > 0 { // mixtral 8x7b
			full = 4 * batch * (2 + 3*embedding + context*(1+heads) + 2*headsKV + w1)
			partial = max(
				4*batch*(3+embeddingHeads*headsKV+embedding+context*(1+heads)+w1)+(embedding*embedding+3*embedding*headsKV*w1)*9/16,
				4*batch*(1+2*embedding+context*(1+heads))+embedding*(6*context*headsKV/heads+embedding*9/16),
			)
		}
	case "gemma", "gemma2":
		full = max(4*batch*(embedding+vocab), 4*batch*(2+context+context*heads+2*embedding+2*embeddingHeadsK*heads))
		partial = max(
			4*embedding*batch+embedding*vocab*105/128+4*vocab*batch,
			4*batch*(2*embedding+1+2*embeddingHeadsK*heads+context+context*heads)+4*embeddingHeadsK*context*8+embedding*embeddingHeadsK*heads*9/16,
		)
	case "command-r":
		full = max(4*batch*(embedding+vocab), 4*batch*(2+4*embedding+context*(1+heads)))
		partial = max(
			4*batch*(embedding+vocab)+embedding*vocab*105/128,
			4*batch*(1+2*embedding+context*(1+heads))+4*embedding*context+embedding*embedding*9/16,
		)
	case "qwen2":
		full = max(4*batch*(embedding+vocab), 4*batch*(1+2*embedding+context+context*heads))
		partial = max(
			4*batch*(embedding+vocab)+embedding*vocab*105/128,
			4*(batch*(1+2*embedding+context*(1+heads))+embedding*(1+context)),
		)
	case "phi2":
		full = max(4*batch*(embedding+vocab), 4*batch*(1+4*embedding+context+context*heads))
		partial = max(4*batch*(2*embedding+vocab)+embedding*vocab*105/128, 4*batch*(2+3*embedding+context+context*heads))
	case "stablelm":
		full = 4 * batch * (context*(1+heads) + 3*embedding + 2)
		partial = max(4*batch*(vocab+2*embedding), full)
	case "deepseek2":
		full = max(4*batch*(3*embedding+vocab), 4*batch*(3*embedding+2+context*(1+headsKV)+2*embeddingHeadsK*headsKV))
		partial = max(
			4*batch*(3*embedding+vocab)+embedding*vocab*105/128,
			4*batch*(2*embedding+1+2*embeddingHeadsK*headsKV+context+context*headsKV)+4*embeddingHeadsK*context*headsKV+embedding*embeddingHeadsK*headsKV*9/16,
		)
	case "chatglm": // without the attn_qkv.bias term of GLM-4's variant
		full = 4 * batch * (embedding + vocab)
		partial = 4*batch*(embedding+vocab) + embedding*vocab*105/128
	}
	// estimateGPULayers' fallback for the architectures without a formula.
	if partial == 0 {
		partial = heads / headsKV * kvTotal / 6
	}
	if full == 0 {
		full = partial
	}
	return kv, partial, full
}

// ollamaEstimate is estimateGPULayers (llm/memory.go, ollama/ollama
// 4372d0bf) for GPUs of the given free memory, in that order.
func ollamaEstimate(om *ollamaModel, gpus []gpumem.Bytes, o OllamaOptions) OllamaReport {
	ctx, batch, par, bpe, fa := ollamaOpts(o, om)
	r := OllamaReport{Slots: len(om.blocks) + 1, Context: ctx, Batch: batch, Parallel: par, FlashAttn: fa, Arch: om.arch}
	kv, partial, full := ollamaGraph(om, uint64(ctx)*uint64(par), uint64(batch), uint64(par), bpe)
	if len(gpus) > 1 {
		full = partial // multigpu should always use the partial graph size
	}
	overhead := uint64(o.GPUOverhead)
	var kvTotal uint64
	for _, k := range kv {
		kvTotal += k
	}
	layerSize := om.blocks[0] + kv[0]
	graph := max(partial, full)

	type gs struct {
		i    int
		free uint64
	}
	alloc := make([]uint64, len(gpus))
	split := make([]int, len(gpus))
	var withSpace []gs
	for i, f := range gpus {
		if uint64(f) < overhead+graph+ollamaMinimumMemory+2*layerSize {
			continue
		}
		withSpace = append(withSpace, gs{i, uint64(f)})
		alloc[i] += ollamaMinimumMemory + layerSize
	}
	numGPU := -1
	if o.NumGPU > 0 {
		numGPU = o.NumGPU
	}
	var overflow, weights uint64
	layerCount := 0
	for i := len(om.blocks) - 1; i >= 0; i-- {
		layerSize = om.blocks[i] + kv[i]
		weights += om.blocks[i]
		if numGPU >= 0 && layerCount >= numGPU {
			overflow += layerSize
			continue
		}
		for j := len(withSpace); j > 0; j-- {
			g := withSpace[i%j]
			used := alloc[g.i] + graph
			if g.free > overhead+used+layerSize {
				alloc[g.i] += layerSize
				split[g.i]++
				layerCount++
				break
			}
			withSpace = append(withSpace[:i%j], withSpace[i%j+1:]...)
		}
		if len(withSpace) == 0 {
			overflow += layerSize
		}
	}
	fully := layerCount >= len(om.blocks)
	if last := om.output; last > 0 {
		if numGPU < 0 || layerCount < numGPU {
			for j := len(withSpace); j > 0; j-- {
				g := withSpace[layerCount%j]
				used := alloc[g.i] + graph
				if g.free > overhead+used+last {
					alloc[g.i] += last
					split[g.i]++
					layerCount++
					break
				}
			}
		}
		if layerCount < len(om.blocks)+1 {
			fully = false
			overflow += last
		}
	}
	r.Graph = gpumem.Bytes(partial)
	if fully {
		r.Graph = gpumem.Bytes(full)
	}
	var vram uint64
	for i := range alloc {
		if split[i] > 0 {
			alloc[i] += uint64(r.Graph)
		}
		vram += alloc[i]
	}
	r.GraphFull, r.GraphPartial = gpumem.Bytes(full), gpumem.Bytes(partial)
	r.KV, r.Repeating, r.Output = gpumem.Bytes(kvTotal), gpumem.Bytes(weights), gpumem.Bytes(om.output)
	r.Total = gpumem.Bytes(vram + overflow)
	if layerCount == 0 {
		return r
	}
	r.Layers, r.Full, r.GPUs = layerCount, fully, len(gpus)
	r.VRAM = gpumem.Bytes(vram)
	r.TensorSplit = split
	r.GPUSizes = make([]gpumem.Bytes, len(alloc))
	for i, a := range alloc {
		r.GPUSizes[i] = gpumem.Bytes(a)
	}
	return r
}

// OllamaMaxContext returns the longest num_ctx (per request, with
// o.NumParallel requests) at which Ollama v0.12.11 offloads every layer
// of m to the GPUs of the given free memory (OllamaLayers; o.NumCtx and
// o.NumGPU are ignored), and the placement there. The cache and the
// graph grow with the context, so the answer is found by bisection up to
// the model's context_length (2^24 tokens when it has none). When not
// every layer fits even at one token, it returns an error wrapping
// gpumem.ErrDoesNotFit, with the placement at one token.
func OllamaMaxContext(m Model, free []gpumem.Bytes, o OllamaOptions) (int, OllamaReport, error) {
	o.NumCtx, o.NumGPU = 0, 0
	if err := validateOllama(free, o); err != nil {
		return 0, OllamaReport{}, err
	}
	om, err := ollamaRead(&m)
	if err != nil {
		return 0, OllamaReport{}, err
	}
	limit := 1 << 24
	if om.trainCtx > 0 {
		limit = om.trainCtx
	}
	at := func(ctx int) OllamaReport {
		o.NumCtx = ctx
		return ollamaFit(&om, free, o)
	}
	best := at(1)
	if !best.Full {
		return 0, best, gpumem.Errorf("free", free[0], gpumem.ErrDoesNotFit,
			"Ollama %s offloads %d of %d layers even at a context of one token", OllamaVersion, best.Layers, best.Slots)
	}
	lo, hi := 1, limit
	if r := at(hi); r.Full {
		return hi, r, nil
	}
	for hi-lo > 1 { // lo fits, hi does not
		mid := lo + (hi-lo)/2
		if r := at(mid); r.Full {
			lo, best = mid, r
		} else {
			hi = mid
		}
	}
	return lo, best, nil
}

// ollamaSWACells is the cells GraphSize gives a gpt-oss sliding-window
// layer per parallel request (fs/ggml/ggml.go, case "gptoss", from
// ollama/ollama fa7776fd2 "gpt-oss", 2025-08-05, unchanged at 4372d0bf):
// the size of the sliding-window cache Ollama's engine keeps for it,
// beside num_batch.
const ollamaSWACells = 4096

// ollamaCache is GraphSize's per-layer cache (fs/ggml/ggml.go, ollama/ollama
// 4372d0bf): num_ctx × num_parallel (context) × (key_length +
// value_length) × head_count_kv × bytes per element for every layer,
// except gpt-oss's sliding-window layers (the even ones, i % 2 == 0),
// sized num_parallel × 4096 + num_batch instead of the context.
func ollamaCache(om *ollamaModel, context, batch, par uint64, bpe float64) []uint64 {
	kv := make([]uint64, len(om.blocks))
	for i := range kv {
		cells := context
		if (om.arch == "gptoss" || om.arch == "gpt-oss") && i%2 == 0 {
			cells = par*ollamaSWACells + batch
		}
		kv[i] = uint64(float64(cells*(om.headK+om.headV)*om.headsKV) * bpe)
	}
	return kv
}

// OllamaKV is Ollama's cache estimate for m under options o, the
// "memory.required.kv" of its offload log line: GraphSize's per-layer
// cache summed (ollamaCache; num_ctx capped at the model's
// context_length, num_batch at num_ctx, f16 unless flash attention and
// OLLAMA_KV_CACHE_TYPE say otherwise, as OllamaLayers). Unlike
// OllamaLayers it reads the architectures Ollama runs on its own engine
// too: releases up to v0.12 printed this estimate for them as well (for
// gpt-oss, with its sliding-window layers' smaller cache).
func OllamaKV(m Model, o OllamaOptions) (gpumem.Bytes, error) {
	if err := validateOllama([]gpumem.Bytes{1}, o); err != nil {
		return 0, err
	}
	om, err := ollamaReadArch(&m, true)
	if err != nil {
		return 0, err
	}
	ctx, batch, par, bpe, _ := ollamaOpts(o, &om)
	var total uint64
	for _, k := range ollamaCache(&om, uint64(ctx)*uint64(par), uint64(batch), uint64(par), bpe) {
		total += k
	}
	if total > math.MaxInt64 {
		return 0, errOverflow("Ollama KV cache")
	}
	return gpumem.Bytes(total), nil
}
