package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
)

// This file sizes llama.cpp's sliding-window (iSWA) KV cache.
//
// Since PR #13194 ("kv-cache : add SWA support", ggml-org/llama.cpp, in
// builds from 2025-05-20: LlamaCppSWAFrom) a model whose architecture
// sets a sliding-window type (llama_model::load_hparams, src/llama-model.cpp)
// gets two caches (llama_kv_cache_iswa, src/llama-kv-cache-iswa.cpp; named
// llama_kv_cache_unified_iswa until October 2025): the non-SWA layers'
// of kv_size cells, and the SWA layers' of
//
//	size_swa = GGML_PAD(min(kv_size, n_swa × (unified ? n_seq_max : 1) + n_ubatch), 256)
//
// cells in builds from PR #17046 ("kv-cache : pad the cache size to 256
// for performance", opened 2025-11-06: LlamaCppSWAPad256From; read at
// ggml-org/llama.cpp 02c28f53 and in ollama/ollama's vendored copy at
// upstream b7108, ollama 0cf7794b1), or
//
//	size_swa = min(kv_size, GGML_PAD(n_swa × (unified ? n_seq_max : 1) + n_ubatch, n_pad))
//
// before it, n_pad being 256 with flash attention and 32 without
// (llama_kv_cache::get_padding; ollama's vendored copies at upstream
// b6646 and df1b612, ollama c68f367ef and 4987f13d3). --swa-full
// (LlamaCppOptions.SWAFull) gives the SWA layers kv_size cells. kv_size
// is the context of one stream (n_ctx_seq): with --parallel N and a cache
// that is not unified, each of the N streams holds size_swa cells.
//
// Which layers slide is set per architecture by llama_hparams::
// set_swa_pattern(n): layer il slides when il % n < n − 1 (or, with
// dense_first, when il % n ≠ 0), and n_swa is the GGUF's
// <arch>.attention.sliding_window (read at ollama's vendored upstream
// b7108, src/llama-model.cpp):
//
//   - gemma2: pattern 2 (the even layers), n_swa 4096 unless the key says;
//   - gemma3: pattern 6 (five sliding layers, then a global one);
//   - cohere2: pattern 4;
//   - gpt-oss (LLM_ARCH_OPENAI_MOE): pattern 2;
//   - llama4: chunked attention, n_swa 8192 (the chunk), pattern 4;
//   - olmo2 with a sliding window: pattern 4;
//   - exaone4 of 64 layers (32B): pattern 4, n_swa 4096 unless the key says.
//
// The pattern is the architecture's: at b7108 no architecture reads a
// per-layer pattern from the GGUF (its swa_layers are set by
// set_swa_pattern alone), so a Hugging Face config's layer_types is not
// consulted either. Other architectures — Mistral's and Qwen2's
// sliding_window among them, and ones added after b7108 such as Gemma 4 —
// keep one cache of kv_size cells for every layer here. Gemma 3n (whose later
// layers reuse earlier layers' caches) is not modelled as SWA.
//
// Not modelled: builds of 2025-05-20 to 2025-05-31, which sized the SWA
// cache by n_batch (PR #13833 changed it to n_ubatch), and of 2025-10-28
// to 2025-11-07, between PR #16812 (no padding) and PR #17046, are
// refused for SWA models (llamaSWACells); builds before the
// kv_unified option (July 2025) with --parallel > 1 kept one stream of
// min(n_ctx, PAD(n_swa × n_seq_max + n_ubatch)) cells, which the
// per-stream size above approximates.

// The build days of llama.cpp's sliding-window cache. A model whose
// architecture slides (gemma2, gemma3, gpt-oss, cohere2, llama4's chunked
// attention, olmo2 with a window, exaone4-32B) has, in builds from
// LlamaCppSWAFrom, a cache for its sliding layers of
// GGML_PAD(min(n_ctx_seq, n_swa + n_ubatch), 256) cells per sequence
// (llama_kv_cache_iswa, src/llama-kv-cache-iswa.cpp), or
// min(n_ctx_seq, GGML_PAD(n_swa + n_ubatch, 32, or 256 with flash
// attention)) before LlamaCppSWAPad256From; with LlamaCppOptions.SWAFull
// (--swa-full) the whole context. Builds of 2025-05-20 to 2025-05-31
// (an n_batch-sized SWA cache) and of 2025-10-28 to 2025-11-07 (between
// PR #16812 and PR #17046) are refused for such a model.
const (
	// LlamaCppSWAFrom is the first build day with the sliding-window
	// cache (PR #13194, merged 2025-05-20: build b5439 of 2025-05-21 has
	// --swa-full); earlier builds give every layer kv_size cells.
	LlamaCppSWAFrom LlamaCppVersion = 20250520
	// LlamaCppSWAPad256From is the first build day taken to pad the SWA
	// cache to 256 cells whatever the attention kernel (PR #17046, opened
	// 2025-11-06).
	LlamaCppSWAPad256From LlamaCppVersion = 20251108
)

// llamaSWA ambiguous windows (see the file comment).
const (
	llamaSWABatchUntil  LlamaCppVersion = 20250601 // PR #13833: n_ubatch, not n_batch
	llamaSWAUnpadFrom   LlamaCppVersion = 20251028 // PR #16812: no padding
	llamaSWAUnpadBefore                 = LlamaCppSWAPad256From
)

// llamaSWA is llama.cpp's sliding-window layout of a model: the window
// n_swa and the pattern of set_swa_pattern (zero window: no SWA layers).
type llamaSWA struct {
	window     int64
	pattern    int
	denseFirst bool
}

// slides reports whether layer il is a sliding-window layer.
func (w llamaSWA) slides(il int) bool {
	if w.window <= 0 {
		return false
	}
	if w.pattern <= 0 {
		return true
	}
	if w.denseFirst {
		return il%w.pattern != 0
	}
	return il%w.pattern < w.pattern-1
}

// llamaCppSWALayout is the sliding-window layout llama.cpp gives a model
// of lm's architecture: the GGUF's general.architecture or the Hugging
// Face model_type of the same model.
func llamaCppSWALayout(lm *model.Spec) llamaSWA {
	win := lm.SlidingWindow
	or := func(def int64) int64 {
		if win > 0 {
			return win
		}
		return def
	}
	switch lm.Family {
	case "gemma2":
		return llamaSWA{window: or(4096), pattern: 2}
	case "gemma3", "gemma3_text":
		return llamaSWA{window: win, pattern: 6}
	case "cohere2":
		return llamaSWA{window: win, pattern: 4}
	case "gpt-oss", "gpt_oss":
		return llamaSWA{window: win, pattern: 2}
	case "llama4", "llama4_text":
		return llamaSWA{window: 8192, pattern: 4}
	case "olmo2":
		return llamaSWA{window: win, pattern: 4}
	case "exaone4":
		if lm.Layers == 64 {
			return llamaSWA{window: or(4096), pattern: 4}
		}
	}
	return llamaSWA{}
}

// llamaSWACells is the SWA cache's cells over all streams for a model of
// layout w: perSeq is the non-SWA cache's cells of one stream (kv_size),
// nSeq the streams, ub n_ubatch as used. It returns 0 when the build or
// the model keeps no SWA cache (every layer of kv_size cells), and perSeq
// × nSeq with SWAFull.
func llamaSWACells(w llamaSWA, o *LlamaCppOptions, perSeq, nSeq, ub int64) (int64, error) {
	v := o.Version
	if w.window <= 0 || (v != 0 && v < LlamaCppSWAFrom) {
		return 0, nil
	}
	switch {
	case v != 0 && v < llamaSWABatchUntil:
		return 0, gpumem.Errorf("Job.LlamaCpp.Version", v.String(), gpumem.ErrUnsupported,
			"builds of 2025-05-20 to 2025-05-31 sized a sliding-window model's SWA cache by n_batch (before PR #13833), which is not modelled: give a date outside them")
	case v >= llamaSWAUnpadFrom && v < llamaSWAUnpadBefore:
		return 0, gpumem.Errorf("Job.LlamaCpp.Version", v.String(), gpumem.ErrUnsupported,
			"builds of 2025-10-28 to 2025-11-07 (between PR #16812 and PR #17046) padded a sliding-window model's SWA cache differently, which is not modelled: give a date outside them")
	}
	per := perSeq
	if !o.SWAFull {
		want, ok := checked.Add(w.window, ub)
		if !ok {
			return 0, errOverflow("llama.cpp SWA cache")
		}
		if v == 0 || v >= LlamaCppSWAPad256From {
			per = min(perSeq, want)
			per = (per + 255) / 256 * 256
		} else {
			pad := int64(32)
			if o.FlashAttention {
				pad = 256
			}
			per = min(perSeq, (want+pad-1)/pad*pad)
		}
	}
	cells, ok := checked.Mul(per, nSeq)
	if !ok {
		return 0, errOverflow("llama.cpp SWA cache")
	}
	return cells, nil
}
