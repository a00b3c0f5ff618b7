package enginelog

// Comparing llama.cpp and Ollama load logs with the estimate.

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

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
