package enginelog

// Comparing vLLM and SGLang load logs with the estimate.

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

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
