package budget

// llama.cpp's multi-GPU split (layer, row or none) and where its split
// points fall.

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// LlamaMaxDevices is LLAMA_MAX_DEVICES (include/llama.h): the most GPUs
// a tensor split describes.
const LlamaMaxDevices = 16

// LlamaSplitMode is llama.cpp's --split-mode (enum llama_split_mode).
type LlamaSplitMode uint8

const (
	// LlamaSplitLayer (--split-mode layer, the default) gives each GPU
	// whole layers, their weights and KV cache: layer il of the
	// offloaded ones (the output layer is il = n_layer) goes to the
	// first GPU whose cumulative, normalised tensor-split share exceeds
	// (il − i_gpu_start) / act_gpu_layers (std::upper_bound over the
	// split points in llama_model::load_tensors, src/llama-model.cpp).
	LlamaSplitLayer LlamaSplitMode = iota
	// LlamaSplitRow (--split-mode row) assigns the layers as
	// LlamaSplitLayer does, but the layers' weight matrices go to the
	// backend's split buffer type (make_gpu_buft_list), which spreads
	// their rows over every GPU by the tensor split (ggml-cuda's
	// ggml_backend_cuda_split_buffer_type); the KV cache and the other
	// tensors stay on the layer's GPU, and every GPU runs every
	// offloaded layer's matrix products, so each has the compute buffer
	// of the whole graph.
	LlamaSplitRow
	// LlamaSplitNone (--split-mode none) uses MainGPU alone: the other
	// devices are removed (llama_model_load_from_file_impl, src/llama.cpp).
	LlamaSplitNone
)

var llamaSplitNames = [...]string{LlamaSplitLayer: "layer", LlamaSplitRow: "row", LlamaSplitNone: "none"}

// String returns "layer", "row" or "none".
func (m LlamaSplitMode) String() string {
	if int(m) < len(llamaSplitNames) {
		return llamaSplitNames[m]
	}
	return "LlamaSplitMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseLlamaSplitMode reads "layer", "row" or "none".
func ParseLlamaSplitMode(s string) (LlamaSplitMode, error) {
	for i, n := range llamaSplitNames {
		if s == n {
			return LlamaSplitMode(i), nil
		}
	}
	return 0, gpumem.Errorf("Job.LlamaCpp.SplitMode", s, gpumem.ErrInvalid, "want layer, row or none")
}

// llamaSplit is the split points of llama_model::load_tensors: the
// cumulative, normalised shares of the GPUs, in float as llama.cpp
// computes them.
type llamaSplit struct {
	n      int
	points [LlamaMaxDevices]float32
}

// llamaSplitPoints returns o's split points: --tensor-split, or even
// shares (the free memory of GPUs alike) when it is all zero; one GPU
// with LlamaSplitNone.
func llamaSplitPoints(o *LlamaCppOptions) llamaSplit {
	sp := llamaSplit{n: max(o.GPUs, 1)}
	if o.SplitMode == LlamaSplitNone {
		sp.n = 1
	}
	var shares [LlamaMaxDevices]float32
	all0 := true
	for i := range sp.n {
		if sp.n > 1 && o.TensorSplit[i] != 0 {
			all0 = false
		}
	}
	var sum float32
	for i := range sp.n {
		shares[i] = 1
		if !all0 {
			shares[i] = float32(o.TensorSplit[i])
		}
		sum += shares[i]
		sp.points[i] = sum
	}
	for i := range sp.n {
		sp.points[i] /= sum
	}
	return sp
}

// device is the GPU of the k-th offloaded slot of act:
// std::upper_bound(splits, float(k)/act) in llama_model::load_tensors.
func (sp *llamaSplit) device(k, act int) int {
	x := float32(k) / float32(act)
	for i := range sp.n {
		if sp.points[i] > x {
			return i
		}
	}
	return sp.n - 1 // past the last point: llama.cpp would index past its devices
}
