package model

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// Backend is the device whose kernels run a pass. Where PyTorch's CPU and
// CUDA kernels save different tensors for the same Python code, the
// activation model follows the backend's kernels; everything else (the
// modeling code, autograd's graph, the order of the phases) is the same.
// The zero value is CUDA.
type Backend uint8

const (
	// CUDA is PyTorch's CUDA backend, what every figure of this package
	// describes unless it says otherwise.
	CUDA Backend = iota
	// CPU is PyTorch's CPU backend (torch 2.6), whose kernels differ from
	// CUDA's in what they save:
	//
	//   - Dropout: at::native::dropout takes the fused native_dropout,
	//     which saves a 1-byte mask an element, only when
	//     is_fused_kernel_acceptable (a CUDA, XPU, lazy or privateuse1
	//     tensor); on the CPU _dropout_impl makes its noise with
	//     at::empty_like(input).bernoulli_(1 - p).div_(1 - p) and returns
	//     input * noise, whose mul saves the noise: the input's element
	//     size an element (aten/src/ATen/native/Dropout.cpp, v2.6.0).
	//   - Scaled dot-product attention: sdp_utils_cpp.cpp (v2.6.0)
	//     admits the CPU flash kernel only without dropout and without
	//     enable_gqa (check_for_dropout, check_grouped_query_attention's
	//     CPU variant), so a training pass with attention dropout, or a
	//     grouped-query model that transformers calls with
	//     enable_gqa=True, runs _scaled_dot_product_attention_math
	//     (aten/src/ATen/native/transformers/attention.cpp, v2.6.0): it
	//     upcasts 16-bit q, k and v to fp32, repeats the key and value
	//     heads, and saves the scaled query and key, the fp32
	//     probabilities (and with dropout the noise and the dropped
	//     probabilities) and the repeated value.
	CPU

	numBackends
)

// String returns "cuda" or "cpu".
func (b Backend) String() string {
	switch b {
	case CUDA:
		return "cuda"
	case CPU:
		return "cpu"
	}
	return "Backend(" + strconv.Itoa(int(b)) + ")"
}

// ParseBackend reads a backend name: "cuda" (or "") or "cpu".
func ParseBackend(s string) (Backend, error) {
	switch s {
	case "", "cuda":
		return CUDA, nil
	case "cpu":
		return CPU, nil
	}
	return 0, gpumem.Errorf("backend", s, gpumem.ErrInvalid, "want cuda or cpu")
}

// dropMask is the bytes a dropout site saves for backward per element
// of an input of e-byte elements: CUDA's native_dropout a 1-byte bool
// mask, the CPU's _dropout_impl its noise in the input's dtype (see
// [CPU]).
func (w Workload) dropMask(e int64) int64 {
	if w.Backend == CPU {
		return e
	}
	return 1
}
