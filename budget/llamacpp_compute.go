package budget

// llama.cpp's compute buffer: the graph's largest intermediate at the batch
// and context.

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
)

// llamaCppCompute is a device's compute buffer: what ggml's graph
// allocator reserves for the part of the worst-case graph the device runs
// (llama_context reserves n_ubatch tokens over a full cache, n_kv =
// kv_size, every token an output), replayed by llamaGraph.peak
// (llamacpp_graph.go, which states the allocator and the graph with their
// sources): layers is the repeating layers the device holds (the last
// ones), output whether it holds the output layer, host whether the
// whole graph runs on one CPU device (the tokens' lookup and the inputs in
// the same buffer; on a GPU the layer input and the inputs arrive as
// copies). The build's date v selects the graph: builds from August 2025
// (llamaCppSetRowsFrom) store K and V with set_rows and index inputs and
// keep the last layer's get_rows by out_ids when every token is an
// output; builds from January 2026 (llamaCppEmbdInputFrom) hold an unused
// embeddings input on the host; earlier builds pad the mask's rows to
// GGML_KQ_MASK_PAD (llamaCppMaskPad). Mixture-of-experts layers are
// replayed as a dense feed-forward of the active experts' width and MLA
// layers with the compressed cache's K width: approximations.
func llamaCppCompute(lm model.Spec, nKV, ub int64, flash bool, layers int, output, host bool, v LlamaCppVersion) (gpumem.Bytes, error) {
	return llamaCppComputeKV(lm, llamaCppGraphKV{cells: nKV}, ub, flash, layers, output, host, v)
}

// llamaCppGraphKV is the caches the worst-case graph attends over: the
// cells of the (non-SWA) cache, and of a sliding-window model's SWA cache
// (zero: none).
//
// With more than one stream (--parallel N and a cache that is not
// unified: llama_kv_cache's n_stream = n_seq_max, PR #14363, which
// needs set_rows), each sequence's tokens attend over their own stream:
// the mask and the score matrix are n_kv of one stream by the ubatch's
// tokens ([n_kv, n_tokens/n_stream, 1, n_stream] in build_attn_inp_kv),
// so the graph's n_kv is the cells of one stream. Builds before
// llamaCppSetRowsFrom are taken to have one stream.
type llamaCppGraphKV struct{ cells, swaCells, streams int64 }

// llamaCppComputeKV is llamaCppCompute over the caches kv. With an SWA
// cache the graph has a second set of attention inputs
// (build_attn_inp_kv_iswa, src/llama-graph.cpp): the SWA mask
// (swaCells × n_ubatch, f16 with flash attention) and, from
// llamaCppSetRowsFrom, the SWA cache's K and V row indices. Every
// replayed layer attends over the non-SWA cache's cells, the larger: an
// SWA layer's score matrix is smaller, so this bounds the peak from
// above.
func llamaCppComputeKV(lm model.Spec, kvc llamaCppGraphKV, ub int64, flash bool, layers int, output, host bool, v LlamaCppVersion) (gpumem.Bytes, error) {
	if kvc.streams > 1 && (v == 0 || v >= llamaCppSetRowsFrom) {
		kvc.cells /= kvc.streams
		kvc.swaCells /= kvc.streams
	}
	nKV := kvc.cells
	if layers == 0 && !output {
		return 0, nil
	}
	headDim := lm.HeadDim
	if headDim == 0 && lm.Heads > 0 {
		headDim = lm.Hidden / lm.Heads
	}
	kv := lm.KVHeads * headDim
	if lm.MLA.Enabled() {
		kv = lm.MLA.KVLoRARank + lm.MLA.QKRopeHeadDim
	}
	ff := lm.Intermediate
	if lm.MoE.Experts > 0 && lm.MoE.Intermediate > 0 {
		ff = lm.MoE.Intermediate * max(lm.MoE.Active, 1)
	}
	qDim, ok := checked.Mul(lm.Heads, headDim)
	if !ok {
		return 0, errOverflow("llama.cpp compute buffer")
	}
	recent := v == 0 || v >= llamaCppSetRowsFrom
	rows := ub
	if !recent {
		r, _ := checked.CeilDiv(ub, llamaCppMaskPad)
		rows = r * llamaCppMaskPad
	}
	g := llamaGraph{embd: lm.Hidden, qDim: qDim, kv: kv, ff: ff, vocab: lm.Vocab, heads: lm.Heads,
		nKV: nKV, swaKV: kvc.swaCells, ub: ub, flash: flash, layers: layers, output: output, host: host, idx: recent,
		unusedEmbd: host && (v == 0 || v >= llamaCppEmbdInputFrom)}
	var peak int64
	if rows == ub {
		peak, ok = g.peak()
	} else {
		// the padded mask: replay with the mask's rows, then take the
		// padding's extra bytes (the other tensors are of n_ubatch).
		peak, ok = g.peak()
		if ok {
			el := int64(4)
			if flash {
				el = 2
			}
			extra, ok2 := checked.Mul(nKV+kvc.swaCells, (rows-ub)*el)
			peak, ok = checked.Add(peak, extra)
			ok = ok && ok2
		}
	}
	if !ok {
		return 0, errOverflow("llama.cpp compute buffer")
	}
	return gpumem.Bytes(peak), nil
}

// llamaCppSetRowsFrom is the first build day taken to store the cache
// with set_rows (PR #14285, July 2025, enabled by default by the end of
// that month) and to keep the last layer's out_ids get_rows when every
// token is an output (PR #14275, June 2025): builds of June and July 2025
// may have one without the other.
const llamaCppSetRowsFrom LlamaCppVersion = 20250801

// llamaCppEmbdInputFrom is the first build day taken to hold the unused
// embeddings input on the host (build_inp_embd's ggml_build_forward_select,
// PR #18550, January 2026).
const llamaCppEmbdInputFrom LlamaCppVersion = 20260115
