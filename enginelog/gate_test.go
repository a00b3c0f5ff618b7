package enginelog_test

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/enginelog"
	"github.com/gpumem/gpumem/model"
)

// entry is one line of testdata/enginelogs/index.jsonl: a log's source
// and the job its thread states (nil where it does not).
type entry struct {
	File          string   `json:"file"`
	Engine        string   `json:"engine"`
	Source        string   `json:"source"`
	URL           string   `json:"url"`
	Model         string   `json:"model"`
	Catalog       *string  `json:"catalog"`
	Quant         *string  `json:"quant"`
	GPU           *string  `json:"gpu"`
	GPUs          *int     `json:"gpus"`
	EngineVersion *string  `json:"engine_version"`
	NCtx          *int     `json:"n_ctx"`
	NGPULayers    *int     `json:"n_gpu_layers"`
	NParallel     *int     `json:"n_parallel"`
	NBatch        *int     `json:"n_batch"`
	NUBatch       *int     `json:"n_ubatch"`
	FlashAttn     *bool    `json:"flash_attn"`
	CacheTypeK    *string  `json:"cache_type_k"`
	CacheTypeV    *string  `json:"cache_type_v"`
	TensorSplit   *string  `json:"tensor_split"`
	SplitMode     *string  `json:"split_mode"`
	Utilization   *float64 `json:"gpu_memory_utilization"`
	MaxModelLen   *int     `json:"max_model_len"`
	MaxNumSeqs    *int     `json:"max_num_seqs"`
	MaxBatched    *int     `json:"max_num_batched_tokens"`
	TP            *int     `json:"tp"`
	DType         *string  `json:"dtype"`
	KVCacheDType  *string  `json:"kv_cache_dtype"`
	EnforceEager  *bool    `json:"enforce_eager"`
	MemFraction   *float64 `json:"mem_fraction_static"`
	Note          *string  `json:"note"`
}

// miss is one line of testdata/enginelogs/misses.jsonl: a figure the
// runtime model misses by more than its tolerance, with the mechanism.
type miss struct {
	File      string `json:"file"`
	Figure    string `json:"figure"`
	Mechanism string `json:"mechanism"`
}

// row is one figure compared.
type row struct {
	file, figure    string
	logged, model   float64 // bytes or counts
	tol, err, slack float64 // err relative to logged; slack for the log's print rounding
}

func (r row) ok() bool { return math.Abs(r.err) <= r.tol+r.slack }

func readIndex(t *testing.T) []entry {
	t.Helper()
	f, err := os.Open("../testdata/enginelogs/index.jsonl")
	require.NoError(t, err)
	defer f.Close()
	var out []entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e entry
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&e), sc.Text())
		out = append(out, e)
	}
	require.NoError(t, sc.Err())
	return out
}

func readMisses(t *testing.T) map[string]miss {
	t.Helper()
	f, err := os.Open("../testdata/enginelogs/misses.jsonl")
	require.NoError(t, err)
	defer f.Close()
	out := map[string]miss{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m miss
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&m), sc.Text())
		require.NotEmpty(t, m.Mechanism, "%s %s: a miss needs its mechanism", m.File, m.Figure)
		out[m.File+" | "+m.Figure] = m
	}
	require.NoError(t, sc.Err())
	return out
}

// printSlack is the relative error a figure printed to `decimals` places
// in its unit can carry: half the last place over the value. Ollama prints
// "2.5 GiB", vLLM "3.81GiB"; an exact model differs from them by the
// rounding alone.
func printSlack(f enginelog.Figure, decimals int, unit float64) float64 {
	if f.Bytes <= 0 {
		return 0
	}
	return 0.5 * math.Pow(10, -float64(decimals)) * unit / float64(f.Bytes)
}

// TestEngineLogGate compares gpumem's runtime models with every figure of
// testdata/enginelogs whose job can be stated to budget: the KV cache
// (exact arithmetic, 2%), the weights (2%), llama.cpp's compute buffer and
// vLLM's KV space, blocks and concurrency (5%). A figure outside its
// tolerance must be listed, with its mechanism, in misses.jsonl, and every
// listed miss must still miss (a ratchet: a fix removes its line). Logs
// whose model is not in the catalog, and figures budget does not model,
// are skipped with the reason, counted by reason.
func TestEngineLogGate(t *testing.T) {
	entries := readIndex(t)
	require.GreaterOrEqual(t, len(entries), 100)
	files, err := filepath.Glob("../testdata/enginelogs/*.log")
	require.NoError(t, err)
	indexed := map[string]bool{}
	for _, e := range entries {
		require.False(t, indexed[e.File], "%s is indexed twice", e.File)
		indexed[e.File] = true
		prefix := map[string]string{"llama.cpp": "llamacpp-", "ollama": "ollama-", "vllm": "vllm-", "sglang": "sglang-"}[e.Engine]
		require.True(t, prefix != "" && strings.HasPrefix(e.File, prefix), "%s: engine %q", e.File, e.Engine)
	}
	for _, f := range files {
		require.True(t, indexed[filepath.Base(f)], "%s is not in index.jsonl", f)
	}
	require.Len(t, files, len(entries))
	misses := readMisses(t)
	var rows []row
	skips := map[string]int{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("../testdata/enginelogs", e.File))
		require.NoError(t, err, e.File)
		require.True(t, strings.HasPrefix(e.URL, "https://github.com/"), e.File)
		l, err := enginelog.Parse(strings.NewReader(string(b)))
		require.NoError(t, err, e.File)
		if e.Catalog == nil {
			skips["model not in the catalog"]++
			continue
		}
		s, ok := model.Lookup(*e.Catalog)
		require.True(t, ok, "%s: catalog %q", e.File, *e.Catalog)
		m, err := budget.NewModel(model.Finetune{Model: s})
		require.NoError(t, err, e.File)
		var rs []row
		switch e.Engine {
		case "llama.cpp", "ollama":
			rs = gateLlamaCpp(t, e, l, m, skips)
		case "vllm":
			rs = gateVLLM(t, e, l, m, skips)
		default:
			skips["no "+e.Engine+" runtime in budget"]++
		}
		rows = append(rows, rs...)
	}

	// The ratchet.
	seen := map[string]bool{}
	for _, r := range rows {
		key := r.file + " | " + r.figure
		seen[key] = true
		_, listed := misses[key]
		switch {
		case !r.ok() && !listed:
			t.Errorf("%s: %s logged %.4g, modelled %.4g (%+.1f%%, tolerance %.0f%%): a new miss — fix the model or list it with its mechanism in misses.jsonl",
				r.file, r.figure, r.logged, r.model, 100*r.err, 100*r.tol)
		case r.ok() && listed:
			t.Errorf("%s: %s is now within tolerance (%+.2f%%): remove it from misses.jsonl", r.file, r.figure, 100*r.err)
		}
	}
	for key := range misses {
		assert.True(t, seen[key], "misses.jsonl lists %q, which the gate no longer compares", key)
	}

	// The figures by kind: n, within tolerance, median and worst error.
	byKind := map[string][]row{}
	for _, r := range rows {
		k := r.figure
		if i := strings.Index(k, " ["); i >= 0 {
			k = k[:i]
		}
		byKind[k] = append(byKind[k], r)
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	total, within := 0, 0
	for _, k := range kinds {
		rs := byKind[k]
		errs := make([]float64, len(rs))
		in, worst := 0, rs[0]
		for i, r := range rs {
			errs[i] = math.Abs(r.err)
			if r.ok() {
				in++
			}
			if math.Abs(r.err) > math.Abs(worst.err) {
				worst = r
			}
		}
		sort.Float64s(errs)
		t.Logf("%-28s n=%-3d within=%-3d median |err| %5.2f%%  worst %+7.1f%% (%s)", k, len(rs), in, 100*errs[len(errs)/2], 100*worst.err, worst.file)
		total += len(rs)
		within += in
	}
	for _, r := range rows {
		t.Logf("  %-48s %-34s logged %12.4g modelled %12.4g %+7.2f%%", r.file, r.figure, r.logged, r.model, 100*r.err)
	}
	reasons := make([]string, 0, len(skips))
	for k := range skips {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		t.Logf("skipped %3d × %s", skips[k], k)
	}
	t.Logf("%d figures compared from %d logs, %d within tolerance, %d listed misses", total, len(entries), within, len(misses))
	require.Positive(t, total)
}

func cmp(file, figure string, logged, modelled, tol, slack float64) row {
	return row{file: file, figure: figure, logged: logged, model: modelled, tol: tol, slack: slack, err: (modelled - logged) / logged}
}

// cacheType reads a llama.cpp cache type ("f16", "q8_0").
func cacheType(t *testing.T, s string) gpumem.DType {
	if s == "" {
		return gpumem.Invalid
	}
	d, err := gpumem.ParseDType(s)
	require.NoError(t, err, s)
	return d
}

// gateLlamaCpp compares a llama.cpp (or Ollama) log with
// budget.LlamaCppBuffers: the whole KV cache (KV self, or Ollama's
// memory.required.kv) with KV + HostKV; a single GPU's KV buffer and the
// host's with KV and HostKV at the log's repeating layers offloaded; a
// single GPU's compute buffer with Compute at full offload; the sum of the
// model buffers with GPUWeights + HostWeights when the GGUF is F16/BF16.
func gateLlamaCpp(t *testing.T, e entry, l *enginelog.Log, m budget.Model, skips map[string]int) []row {
	p := l.Params
	ctx := p.KVSize
	if ctx == 0 {
		ctx = p.NCtx
	}
	if ctx == 0 && e.NCtx != nil {
		ctx = *e.NCtx
	}
	if ctx == 0 {
		skips["n_ctx not stated"]++
		return nil
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
	ub := p.NUBatch
	if ub == 0 && e.NUBatch != nil {
		ub = *e.NUBatch
	}
	job := func(ngl int) (budget.LlamaCppReport, error) {
		return budget.LlamaCppBuffers(budget.Job{Model: m, Mode: budget.Prefill, Precision: budget.BF16, Batch: 1, SeqLen: 1,
			Runtime: budget.LlamaCpp, LlamaCpp: budget.LlamaCppOptions{GPULayers: ngl, Context: ctx, Parallel: par, UBatch: ub,
				FlashAttention: fa, CacheK: cacheType(t, tk), CacheV: cacheType(t, tv)}})
	}
	full, err := job(0)
	require.NoError(t, err, e.File)
	var out []row
	mib := float64(1 << 20)

	// The whole KV cache.
	if f, ok := l.Last(enginelog.KVSelf); ok {
		out = append(out, cmp(e.File, "KV cache (all layers)", float64(f.Bytes), float64(full.KV+full.HostKV), 0.02, printSlack(f, 2, mib)))
	}
	if f, ok := l.Last(enginelog.OllamaKV); ok {
		unit := mib
		if f.Bytes >= 1<<30 {
			unit = 1 << 30
		}
		out = append(out, cmp(e.File, "Ollama memory.required.kv", float64(f.Bytes), float64(full.KV+full.HostKV), 0.02, printSlack(f, 1, unit)))
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
		part, err := job(rep + 1) // rep repeating layers (and the output slot, which holds no cache)
		require.NoError(t, err, e.File)
		for _, f := range l.Find(enginelog.KVBuffer) {
			switch {
			case strings.HasPrefix(f.Device, "CUDA"):
				out = append(out, cmp(e.File, "KV buffer [GPU]", float64(f.Bytes), float64(part.KV), 0.02, printSlack(f, 2, mib)))
			case f.Device == "CPU":
				out = append(out, cmp(e.File, "KV buffer [CPU]", float64(f.Bytes), float64(part.HostKV), 0.02, printSlack(f, 2, mib)))
			}
		}
		if p.LayersOffloaded == p.LayersTotal {
			for _, f := range l.Find(enginelog.ComputeBuffer) {
				if f.Device == "CUDA0" {
					out = append(out, cmp(e.File, "compute buffer [GPU]", float64(f.Bytes), float64(full.Compute), 0.05, 0))
				}
			}
		}
	}

	// The weights, when the GGUF stores them in 16 bits (the catalog's
	// dtype size; norms are F32 in a GGUF, a few KiB).
	if e.Quant != nil && (*e.Quant == "F16" || *e.Quant == "BF16") {
		var sum gpumem.Bytes
		for _, f := range l.Find(enginelog.ModelBuffer) {
			sum += f.Bytes
		}
		if sum > 0 {
			out = append(out, cmp(e.File, "weights (all model buffers)", float64(sum), float64(full.GPUWeights+full.HostWeights), 0.02, 0))
		}
	} else if len(l.Find(enginelog.ModelBuffer)) > 0 || len(l.Find(enginelog.VRAMUsed)) > 0 {
		skips["weights of a quantized GGUF whose recipe is not modelled"]++
	}
	return out
}

// gateVLLM compares a vLLM log with budget.VLLMBuffers: the weights (2%);
// the KV tokens the logged KV memory holds (blocks of the model's page,
// 2%); and, when the log states the GPU's total memory and the non-torch
// memory, the KV memory itself, the activation peak, the blocks and the
// concurrency (5%).
func gateVLLM(t *testing.T, e entry, l *enginelog.Log, m budget.Model, skips map[string]int) []row {
	if e.Quant != nil {
		skips["quantized vLLM weights (not modelled)"]++
		return nil
	}
	p := l.Params
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
	if e.KVCacheDType != nil {
		d, err := gpumem.ParseDType(*e.KVCacheDType)
		require.NoError(t, err, e.File)
		o.KVCacheDType = d
	}
	v0 := e.EngineVersion != nil && strings.Contains(*e.EngineVersion, "V0")
	if e.MaxBatched != nil {
		o.MaxNumBatchedTokens = *e.MaxBatched
	} else if v0 && mml > 0 && mml <= 32768 {
		// V0 without chunked prefill (the default up to 32K tokens)
		// profiles max(max_model_len, 2048) tokens (SchedulerConfig,
		// vllm/config.py, v0.6).
		o.MaxNumBatchedTokens = max(mml, 2048)
	}
	capacity := gpumem.Bytes(1) // the weights and the page do not depend on the device
	total, haveTotal := l.Last(enginelog.TotalGPUMemory)
	if haveTotal {
		capacity = total.Bytes
	}
	nt, haveNT := l.Last(enginelog.NonTorch)
	if haveNT {
		o.NonTorch = nt.Bytes
	}
	seqLen := 1
	if mml == 0 {
		o.MaxModelLen = 1
	}
	r, err := budget.VLLMBuffers(budget.Job{Model: m, Mode: budget.Prefill, Precision: budget.BF16, Batch: 1, SeqLen: seqLen,
		Runtime: budget.VLLM, VLLM: o, Device: gpumem.Device{Capacity: capacity}})
	require.NoError(t, err, e.File)
	gib := float64(1 << 30)
	var out []row
	if f, ok := l.Last(enginelog.Weights); ok {
		out = append(out, cmp(e.File, "vLLM weights", float64(f.Bytes), float64(r.Weights), 0.02, printSlack(f, 2, gib)))
	}
	bs := float64(16)
	tokens := -1.0
	if f, ok := l.Last(enginelog.GPUBlocks); ok {
		tokens = f.Count * bs
	}
	if f, ok := l.Last(enginelog.KVTokens); ok && tokens < 0 {
		tokens = f.Count
	}
	if kv, ok := l.Last(enginelog.KVCacheMemory); ok && tokens > 0 && kv.Bytes > 0 {
		held := math.Floor(float64(kv.Bytes)/float64(r.PageBytes)) * bs
		out = append(out, cmp(e.File, "vLLM KV tokens per logged KV memory", tokens, held, 0.02, printSlack(kv, 2, gib)*1))
	}
	if !haveTotal || !haveNT || mml == 0 {
		skips["vLLM KV space without the GPU's total memory, the non-torch memory or max_model_len in the log"]++
		return out
	}
	if f, ok := l.Last(enginelog.KVCacheMemory); ok {
		out = append(out, cmp(e.File, "vLLM KV cache memory", float64(f.Bytes), float64(r.KVMemory), 0.05, printSlack(f, 2, gib)))
	}
	if f, ok := l.Last(enginelog.ActivationPeak); ok {
		out = append(out, cmp(e.File, "vLLM activation peak", float64(f.Bytes), float64(r.Activations), 0.05, printSlack(f, 2, gib)))
	}
	if f, ok := l.Last(enginelog.GPUBlocks); ok {
		out = append(out, cmp(e.File, "vLLM GPU blocks", f.Count, float64(r.Blocks), 0.05, 0))
	}
	if f, ok := l.Last(enginelog.Concurrency); ok {
		out = append(out, cmp(e.File, "vLLM concurrency", f.Count, r.Concurrency, 0.05, 0.005/f.Count))
	}
	return out
}
