package enginelog

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// Row is one logged figure compared with gpumem's runtime model of it.
type Row struct {
	File   string // the log
	Figure string // "KV buffer [GPU]", "vLLM GPU blocks", …; Kind and the device in brackets
	// Kind is the figure without its device ("KV buffer"): the rows'
	// statistics are by kind.
	Kind string
	// Shape says where the model's shape came from: "catalog <key>", "log
	// hparams" (the hyperparameters llama.cpp printed at load) or "thread
	// hparams" (printed in the same thread, quoted in the index).
	Shape     string
	Logged    float64 // bytes, or a count (tokens, blocks, concurrency)
	Estimated float64
	// Tol is the relative error the figure is held to; Slack adds the
	// rounding of the log's printed value (half its last place over it).
	Tol, Slack float64
}

// Err is the relative error of the estimate: (estimated − logged) / logged.
func (r Row) Err() float64 { return (r.Estimated - r.Logged) / r.Logged }

// OK is true when the estimate is within the row's tolerance.
func (r Row) OK() bool { return math.Abs(r.Err()) <= r.Tol+r.Slack }

// Key names the figure, as Miss.Key.
func (r Row) Key() string { return r.File + " | " + r.Figure }

// Result is a corpus compared: the rows, and the logs or figures skipped,
// counted by reason.
type Result struct {
	Rows  []Row
	Skips map[string]int
	Logs  int // the logs read
}

// Compare compares gpumem's runtime models with every figure of the corpus
// whose job can be stated to budget: llama.cpp's (and Ollama's) layer
// slots and repeating layers offloaded at the job's -ngl (exact), KV cache
// (exact arithmetic, 2%), weights (2%) and compute buffer (5%) with
// budget.LlamaCppBuffers; vLLM's weights (2%), the KV tokens its logged KV
// memory holds (2%), its KV space, activation peak, blocks and
// concurrency (5%) with budget.VLLMBuffers; SGLang's K and V per token of
// its pool (2%) with budget.SGLangBuffers. The model's shape is the
// catalog entry the index names, or else the hyperparameters llama.cpp
// printed in the log itself (Log.Hparams, when complete), or else those
// the index quotes from the same thread (Entry.Hparams). Logs with none,
// and figures budget does not model, are skipped with the reason.
func Compare(c Corpus) (Result, error) {
	res := Result{Skips: map[string]int{}, Logs: len(c.Entries)}
	for _, e := range c.Entries {
		l := c.Logs[e.File]
		if l == nil {
			return res, fmt.Errorf("enginelog: %s: not read", e.File)
		}
		s, shape, skip, err := shapeOf(e, l)
		if err != nil {
			return res, err
		}
		if skip != "" {
			res.Skips[skip]++
			continue
		}
		m, err := budget.ModelOf(s)
		if err != nil {
			return res, fmt.Errorf("enginelog: %s: %w", e.File, err)
		}
		var rs []Row
		switch e.Engine {
		case "llama.cpp", "ollama":
			rs, err = compareLlamaCpp(e, l, m, res.Skips)
		case "vllm":
			rs, err = compareVLLM(e, l, m, res.Skips)
		case "sglang":
			rs, err = compareSGLang(e, l, m, res.Skips)
		default:
			res.Skips["no "+e.Engine+" runtime in budget"]++
		}
		if err != nil {
			return res, fmt.Errorf("enginelog: %s: %w", e.File, err)
		}
		for i := range rs {
			rs[i].Shape = shape
		}
		res.Rows = append(res.Rows, rs...)
	}
	return res, nil
}

// shapeOf returns the model a log's figures are compared on, and where it
// came from: the catalog entry the index names; else the hyperparameters
// llama.cpp printed in the log; else those the index quotes from the same
// thread (Entry.Hparams). skip is the reason when there is none.
func shapeOf(e Entry, l *Log) (s model.Spec, shape, skip string, err error) {
	if e.Catalog != nil {
		s, ok := model.Lookup(*e.Catalog)
		if !ok {
			return s, "", "", fmt.Errorf("enginelog: %s: catalog %q is not a gpumem catalog model", e.File, *e.Catalog)
		}
		return s, "catalog " + *e.Catalog, "", nil
	}
	h, shape := l.Hparams, "log hparams"
	if !h.Complete() && e.Hparams != nil {
		if h, err = ParseHparams(*e.Hparams); err != nil {
			return s, "", "", fmt.Errorf("enginelog: %s: hparams: %w", e.File, err)
		}
		if !h.Complete() {
			return s, "", "", fmt.Errorf("enginelog: %s: the hparams quoted in the index are incomplete (want n_layer, n_embd, n_head, n_head_kv, the head sizes, n_ff and n_vocab)", e.File)
		}
		shape = "thread hparams"
	}
	switch {
	case !h.Complete() && h.NLayer > 0:
		return s, "", "model not in the catalog, hparams incomplete in the log", nil
	case !h.Complete():
		return s, "", "model not in the catalog, no hparams in the log or its thread", nil
	case e.Engine != "llama.cpp" && e.Engine != "ollama":
		return s, "", "llama.cpp hparams in a " + e.Engine + " log", nil
	}
	if s, err = h.Spec(); err != nil {
		return s, "", "hparams of a model that is not a llama-style decoder", nil
	}
	return s, shape, "", nil
}

// Unlisted returns the rows outside their tolerance that misses does not
// list, and the listed misses that are now within tolerance or no longer
// compared: what a change must fix, explain or remove (the ratchet).
func (r Result) Unlisted(misses map[string]Miss) (newMisses []Row, stale []string) {
	seen := map[string]bool{}
	for _, row := range r.Rows {
		seen[row.Key()] = true
		_, listed := misses[row.Key()]
		switch {
		case !row.OK() && !listed:
			newMisses = append(newMisses, row)
		case row.OK() && listed:
			stale = append(stale, row.Key()+" is within tolerance")
		}
	}
	for k := range misses {
		if !seen[k] {
			stale = append(stale, k+" is no longer compared")
		}
	}
	sort.Strings(stale)
	return newMisses, stale
}

// KindStat summarizes the rows of one figure kind.
type KindStat struct {
	Kind      string
	N, Within int
	Median    float64 // median absolute relative error
	Bias      float64 // median signed relative error (negative: under-estimates)
	Under     float64 // the share of rows under-estimated
	Worst     float64 // the signed error of the largest absolute one
	WorstFile string
}

// Stats returns the rows' statistics by kind, sorted by kind.
func Stats(rows []Row) []KindStat {
	by := map[string][]Row{}
	for _, r := range rows {
		by[r.Kind] = append(by[r.Kind], r)
	}
	out := make([]KindStat, 0, len(by))
	for k, rs := range by {
		errs := make([]float64, len(rs))
		signed := make([]float64, len(rs))
		st := KindStat{Kind: k, N: len(rs)}
		worst := rs[0]
		under := 0
		for i, r := range rs {
			errs[i] = math.Abs(r.Err())
			signed[i] = r.Err()
			if r.OK() {
				st.Within++
			}
			if r.Err() < 0 {
				under++
			}
			if math.Abs(r.Err()) > math.Abs(worst.Err()) {
				worst = r
			}
		}
		sort.Float64s(errs)
		sort.Float64s(signed)
		st.Median, st.Bias = median(errs), median(signed)
		st.Under = float64(under) / float64(len(rs))
		st.Worst, st.WorstFile = worst.Err(), worst.File
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func row(file, figure string, logged, estimated, tol, slack float64) Row {
	kind := figure
	if i := strings.Index(kind, " ["); i >= 0 {
		kind = kind[:i]
	}
	return Row{File: file, Figure: figure, Kind: kind, Logged: logged, Estimated: estimated, Tol: tol, Slack: slack}
}

// printSlack is the relative error a figure printed to `decimals` places
// in its unit can carry: half the last place over the value. Ollama prints
// "2.5 GiB", vLLM "3.81GiB"; an exact model differs from them by the
// rounding alone.
func printSlack(f Figure, decimals int, unit float64) float64 {
	if f.Bytes <= 0 {
		return 0
	}
	return 0.5 * math.Pow(10, -float64(decimals)) * unit / float64(f.Bytes)
}

// cacheType reads a llama.cpp cache type ("f16", "q8_0"); "" is Invalid
// (budget's default, f16).
func cacheType(s string) (gpumem.DType, error) {
	if s == "" {
		return gpumem.Invalid, nil
	}
	return gpumem.ParseDType(s)
}

// compareLlamaCpp compares a llama.cpp (or Ollama) log with
// budget.LlamaCppBuffers: the whole KV cache (KV self) with KV + HostKV,
// and Ollama's memory.required.kv with Ollama's own estimate
// (budget.OllamaKV); a single GPU's KV buffer and the
// host's with KV and HostKV at the log's repeating layers offloaded; a
// single GPU's compute buffer with Compute at full offload; the sum of the
// model buffers with GPUWeights + HostWeights when the GGUF is F16/BF16.
func compareLlamaCpp(e Entry, l *Log, m budget.Model, skips map[string]int) ([]Row, error) {
	p := l.Params
	ctx := p.KVSize
	if ctx == 0 {
		ctx = p.NCtx
	}
	if ctx == 0 && e.NCtx != nil {
		ctx = *e.NCtx
	}
	noCtx := ctx == 0
	if noCtx {
		ctx = 1 // the layers' placement does not depend on the context
	}
	par := p.NSeqMax
	if par == 0 && e.NParallel != nil {
		par = *e.NParallel
	}
	if par == 0 {
		par = 1
	}
	fa := e.FlashAttn != nil && *e.FlashAttn
	if p.FlashAttn != nil {
		fa = *p.FlashAttn
	}
	tk, tv := p.TypeK, p.TypeV
	if tk == "" && e.CacheTypeK != nil {
		tk = *e.CacheTypeK
	}
	if tv == "" && e.CacheTypeV != nil {
		tv = *e.CacheTypeV
	}
	if e.Engine == "ollama" && !fa && p.TypeK == "" && (tk != "" && tk != "f16") {
		// Ollama falls back to an f16 cache when flash attention is off
		// ("quantized kv cache requested but flash attention disabled",
		// llm/server.go): llama.cpp quantizes V only with flash attention.
		tk, tv = "f16", "f16"
	}
	ck, err := cacheType(tk)
	if err != nil {
		return nil, fmt.Errorf("cache type_k: %w", err)
	}
	cv, err := cacheType(tv)
	if err != nil {
		return nil, fmt.Errorf("cache type_v: %w", err)
	}
	ub := p.NUBatch
	if ub == 0 && e.NUBatch != nil {
		ub = *e.NUBatch
	}
	var ver budget.LlamaCppVersion
	if e.LlamaCppBuild != nil {
		if ver, err = budget.ParseLlamaCppVersion("llamacpp_build", *e.LlamaCppBuild); err != nil {
			return nil, err
		}
	}
	// A sliding-window model's log that prints a cache but not
	// llama_kv_cache_iswa's SWA cache kept every layer at the full size
	// (--swa-full, a fork whose default that is such as ik_llama.cpp, or a
	// build before the SWA cache); "using full-size SWA cache" says so
	// outright. Other models are not affected.
	swaFull := p.SWAFull || (p.SWAKVSize == 0 && p.KVSize > 0)
	job := func(ngl int) (budget.LlamaCppReport, error) {
		return budget.LlamaCppBuffers(budget.Job{Model: m, Mode: budget.Prefill, Precision: budget.BF16, Batch: 1, SeqLen: 1,
			Runtime: budget.LlamaCpp, LlamaCpp: budget.LlamaCppOptions{GPULayers: ngl, Context: ctx, Parallel: par, UBatch: ub,
				FlashAttention: fa, CacheK: ck, CacheV: cv, Version: ver, SWAFull: swaFull}})
	}
	full, err := job(0)
	if err != nil {
		return nil, err
	}
	var out []Row
	mib := float64(1 << 20)

	// The layers' placement: llama.cpp puts the last -ngl of the n_layer + 1
	// slots (the repeating layers, then the output layer) on the GPU and
	// prints "offloading N repeating layers" and "offloaded N/M layers"
	// (llama_model::load_tensors, src/llama-model.cpp); budget's Layers and
	// Slots are the same counts.
	ngl := p.NGPULayers
	if ngl == 0 && e.NGPULayers != nil {
		ngl = *e.NGPULayers
	}
	if p.LayersTotal > 0 {
		out = append(out, row(e.File, "layer slots (n_layer + 1)", float64(p.LayersTotal), float64(full.Slots), 0, 0))
	}
	if p.HasRepeating && ngl > 0 {
		at, err := job(ngl)
		if err != nil {
			return nil, err
		}
		rep := at.Layers
		if at.OutputOnGPU {
			rep--
		}
		if p.LayersRepeating == 0 {
			skips["a logged zero (no relative error)"]++
		} else {
			out = append(out, row(e.File, "repeating layers offloaded at -ngl", float64(p.LayersRepeating), float64(rep), 0, 0))
		}
	}

	if noCtx {
		skips["n_ctx not stated"]++
		return out, nil
	}

	// The whole KV cache.
	if f, ok := l.Last(KVSelf); ok {
		out = append(out, row(e.File, "KV cache (all layers)", float64(f.Bytes), float64(full.KV+full.HostKV), 0.02, printSlack(f, 2, mib)))
	}
	if f, ok := l.Last(OllamaKV); ok {
		// Ollama's own estimate (GraphSize, budget.OllamaKV): n_ctx is
		// num_ctx × num_parallel, num_batch 512 unless stated.
		unit := mib
		if f.Bytes >= 1<<30 {
			unit = 1 << 30
		}
		nb := p.NBatch
		if nb == 0 && e.NBatch != nil {
			nb = *e.NBatch
		}
		kvt := ck
		if kvt == gpumem.Invalid {
			kvt = gpumem.FP16
		}
		kv, err := budget.OllamaKV(m, budget.OllamaOptions{NumCtx: max(ctx/par, 1), NumParallel: par, NumBatch: nb,
			FlashAttention: fa, KVCacheType: kvt})
		if err != nil {
			return nil, err
		}
		out = append(out, row(e.File, "Ollama memory.required.kv", float64(f.Bytes), float64(kv), 0.02, printSlack(f, 1, unit)))
	}

	// Per device, on one GPU at the log's offload.
	gpus := map[string]bool{}
	for _, f := range l.Figures {
		if strings.HasPrefix(f.Device, "CUDA") && f.Device != "CUDA_Host" {
			gpus[f.Device] = true
		}
	}
	if len(gpus) > 1 {
		skips["per-device figures of a multi-GPU split (not modelled)"]++
	}
	if len(gpus) == 1 && p.LayersTotal > 0 {
		rep := p.LayersOffloaded
		if rep == p.LayersTotal {
			rep--
		}
		at := rep + 1 // rep repeating layers (and the output slot, which holds no cache)
		if ver != 0 && ver < budget.LlamaCppOutputFirstFrom {
			at = rep // the repeating layers went first
		}
		part, err := job(at)
		if err != nil {
			return nil, err
		}
		for _, f := range l.Find(KVBuffer) {
			switch {
			case strings.HasPrefix(f.Device, "CUDA"):
				out = append(out, row(e.File, "KV buffer [GPU]", float64(f.Bytes), float64(part.KV), 0.02, printSlack(f, 2, mib)))
			case f.Device == "CPU":
				out = append(out, row(e.File, "KV buffer [CPU]", float64(f.Bytes), float64(part.HostKV), 0.02, printSlack(f, 2, mib)))
			}
		}
		if p.LayersOffloaded == p.LayersTotal {
			for _, f := range l.Find(ComputeBuffer) {
				if f.Device == "CUDA0" {
					out = append(out, row(e.File, "compute buffer [GPU]", float64(f.Bytes), float64(full.Compute), 0.05, 0))
				}
			}
		}
	}

	// The weights, when the GGUF stores them in 16 bits (the catalog's
	// dtype size; norms are F32 in a GGUF, a few KiB).
	if e.Quant != nil && (*e.Quant == "F16" || *e.Quant == "BF16") {
		var sum gpumem.Bytes
		for _, f := range l.Find(ModelBuffer) {
			sum += f.Bytes
		}
		if sum > 0 {
			out = append(out, row(e.File, "weights (all model buffers)", float64(sum), float64(full.GPUWeights+full.HostWeights), 0.02, 0))
		}
	} else if len(l.Find(ModelBuffer)) > 0 || len(l.Find(VRAMUsed)) > 0 {
		skips["weights of a quantized GGUF whose recipe is not modelled"]++
	}
	return out, nil
}

// compareVLLM compares a vLLM log with budget.VLLMBuffers: the weights
// (2%); the KV tokens the logged KV memory holds (blocks of the model's
// page, 2%); and, when the log states the GPU's total memory and the
// non-torch memory, the KV memory itself, the activation peak, the blocks
// and the concurrency (5%). The weights are quantized as the log states
// (quantOf); a method budget does not model, or a quantized model (the
// index's quant) whose log states none, leaves only the KV tokens. The
// cache's dtype is the log's kv_cache_dtype, else the index's.
func compareVLLM(e Entry, l *Log, m budget.Model, skips map[string]int) ([]Row, error) {
	p := l.Params
	// The weights' quantization, from the log alone (quantOf): a
	// quantized model whose log does not state its method, or states one
	// budget does not model, keeps only the figures the weights do not
	// decide (the KV tokens its logged KV memory holds).
	q, weightsOK, why := quantOf(p)
	if weightsOK && p.Quantization == "" && e.Quant != nil {
		weightsOK, why = false, "quantized vLLM weights whose method the log does not state"
	}
	if !weightsOK {
		skips[why]++
	}
	m, err := quantizedModel(m, q)
	if err != nil {
		return nil, err
	}
	o := budget.VLLMOptions{}
	if e.TP != nil {
		o.TensorParallel = *e.TP
	} else if p.TensorParallel > 0 {
		o.TensorParallel = p.TensorParallel
	}
	mml := p.MaxModelLen
	if mml == 0 && e.MaxModelLen != nil {
		mml = *e.MaxModelLen
	}
	o.MaxModelLen = mml
	if e.Utilization != nil {
		o.GPUMemoryUtilization = *e.Utilization
	}
	if p.Utilization > 0 {
		o.GPUMemoryUtilization = p.Utilization
	}
	kvt := p.KVCacheDType // the log's own, else the index's
	if kvt == "" && e.KVCacheDType != nil {
		kvt = *e.KVCacheDType
	}
	if o.KVCacheDType, err = kvCacheDType(kvt); err != nil {
		return nil, fmt.Errorf("kv_cache_dtype: %w", err)
	}
	v0 := e.EngineVersion != nil && strings.Contains(*e.EngineVersion, "V0")
	o.V0 = v0
	if e.MaxBatched != nil {
		o.MaxNumBatchedTokens = *e.MaxBatched
	} else if v0 && mml > 0 && mml <= 32768 {
		// V0 without chunked prefill (the default up to 32K tokens)
		// profiles max(max_model_len, 2048) tokens (SchedulerConfig,
		// vllm/config.py, v0.6).
		o.MaxNumBatchedTokens = max(mml, 2048)
	}
	capacity := gpumem.Bytes(1) // the weights and the page do not depend on the device
	total, haveTotal := l.Last(TotalGPUMemory)
	if haveTotal {
		capacity = total.Bytes
	}
	nt, haveNT := l.Last(NonTorch)
	if haveNT {
		o.NonTorch = nt.Bytes
	}
	if mml == 0 {
		o.MaxModelLen = 1
	}
	r, err := budget.VLLMBuffers(budget.Job{Model: m, Mode: budget.Prefill, Precision: budget.BF16, Batch: 1, SeqLen: 1,
		Runtime: budget.VLLM, VLLM: o, Device: gpumem.Device{Capacity: capacity}})
	if err != nil {
		return nil, err
	}
	gib := float64(1 << 30)
	var out []Row
	if f, ok := l.Last(Weights); ok && weightsOK {
		out = append(out, row(e.File, "vLLM weights", float64(f.Bytes), float64(r.Weights), 0.02, printSlack(f, 2, gib)))
	}
	bs := float64(16)
	tokens := -1.0
	if f, ok := l.Last(GPUBlocks); ok {
		tokens = f.Count * bs
	}
	if f, ok := l.Last(KVTokens); ok && tokens < 0 {
		tokens = f.Count
	}
	if kv, ok := l.Last(KVCacheMemory); ok && tokens > 0 && kv.Bytes > 0 {
		held := math.Floor(float64(kv.Bytes)/float64(r.PageBytes)) * bs
		out = append(out, row(e.File, "vLLM KV tokens per logged KV memory", tokens, held, 0.02, printSlack(kv, 2, gib)))
	}
	if !weightsOK {
		return out, nil
	}
	if !haveTotal || !haveNT || mml == 0 {
		skips["vLLM KV space without the GPU's total memory, the non-torch memory or max_model_len in the log"]++
		return out, nil
	}
	if f, ok := l.Last(KVCacheMemory); ok {
		out = append(out, row(e.File, "vLLM KV cache memory", float64(f.Bytes), float64(r.KVMemory), 0.05, printSlack(f, 2, gib)))
	}
	if f, ok := l.Last(ActivationPeak); ok {
		out = append(out, row(e.File, "vLLM activation peak", float64(f.Bytes), float64(r.Activations), 0.05, printSlack(f, 2, gib)))
	}
	if f, ok := l.Last(GPUBlocks); ok {
		out = append(out, row(e.File, "vLLM GPU blocks", f.Count, float64(r.Blocks), 0.05, 0))
	}
	if f, ok := l.Last(Concurrency); ok {
		out = append(out, row(e.File, "vLLM concurrency", f.Count, r.Concurrency, 0.05, 0.005/f.Count))
	}
	return out, nil
}

// compareSGLang compares an SGLang log with budget.SGLangBuffers: the K
// and V bytes one token takes in the pool ("KV Cache is allocated.
// #tokens: N, K size: X GB, V size: Y GB": X / N and Y / N, SGLang's GB
// being 2^30 bytes) with the runtime's pool of the same N tokens
// (--max-total-tokens N on a device large enough), at the index's
// --tp-size and --kv-cache-dtype; and N itself (2%) with
// budget.SGLangPoolTokens on the free memory the log prints before and
// after the weights load (the weights as SGLang measured them, which
// budget may not state: experts kept on the host) and the index's
// mem_fraction_static.
func compareSGLang(e Entry, l *Log, m budget.Model, skips map[string]int) ([]Row, error) {
	p := l.Params
	tok, ok1 := l.Last(SGLangTokens)
	k, ok2 := l.Last(SGLangK)
	v, ok3 := l.Last(SGLangV)
	if !ok1 || !ok2 || !ok3 || tok.Count <= 0 {
		skips["sglang log without a KV pool line"]++
		return nil, nil
	}
	var o budget.SGLangOptions
	if e.TP != nil {
		o.TensorParallel = *e.TP
	}
	kvt := p.KVCacheDType // the log's own, else the index's
	if kvt == "" && e.KVCacheDType != nil {
		kvt = *e.KVCacheDType
	}
	d, err := kvCacheDType(kvt)
	if err != nil {
		return nil, fmt.Errorf("kv_cache_dtype: %w", err)
	}
	o.KVCacheDType = d
	if e.MemFraction != nil {
		o.MemFractionStatic = *e.MemFraction
	}
	o.MaxTotalTokens = int(tok.Count)
	r, err := budget.SGLangBuffers(budget.Job{Model: m, Mode: budget.Generation, Precision: budget.BF16, Batch: 1, SeqLen: 1,
		Generate: 1, Runtime: budget.SGLang, SGLang: o, Device: gpumem.Device{Capacity: 1 << 44}})
	if err != nil {
		return nil, err
	}
	if r.Tokens != int64(tok.Count) {
		return nil, fmt.Errorf("sglang pool of %d tokens, want %d", r.Tokens, int64(tok.Count))
	}
	gib := float64(1 << 30)
	n := tok.Count
	out := []Row{
		row(e.File, "sglang K per token", float64(k.Bytes)/n, float64(r.KSize)/n, 0.02, printSlack(k, 2, gib)),
	}
	if v.Bytes > 0 {
		out = append(out, row(e.File, "sglang V per token", float64(v.Bytes)/n, float64(r.VSize)/n, 0.02, printSlack(v, 2, gib)))
	}
	// The pool's tokens from the log's own free memory: before the
	// weights ("Load weight begin", else the end's free memory plus its
	// usage) and after them, with the runtime's cell (budget.
	// SGLangPoolTokens), when the index gives mem_fraction_static.
	var before gpumem.Bytes
	if f, ok := l.Last(SGLangFreeBeforeWeights); ok {
		before = f.Bytes
	}
	after, okA := l.Last(SGLangFreeAfterWeights)
	if before == 0 && okA {
		if u, ok := l.Last(SGLangWeightsUsage); ok {
			before = after.Bytes + u.Bytes
		}
	}
	frac := o.MemFractionStatic
	if frac == 0 {
		frac = p.Utilization
	}
	switch {
	case !okA || before == 0:
		skips["sglang pool tokens without the free memory around the weights' load"]++
	case frac == 0:
		skips["sglang pool tokens without mem_fraction_static"]++
	default:
		t, err := budget.SGLangPoolTokens(before, after.Bytes, frac, r.CellBytes, 0)
		if err != nil {
			return nil, err
		}
		// Slack: the two free-memory figures' print rounding (0.005 GB
		// each) over the pool's memory.
		rest := float64(after.Bytes) - float64(before)*(1-frac)
		slack := 0.0
		if rest > 0 {
			slack = 0.005 * gib * (2 - frac) / rest
		}
		out = append(out, row(e.File, "sglang pool tokens", n, float64(t), 0.02, slack))
	}
	return out, nil
}
