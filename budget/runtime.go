package budget

// The runtime that runs a job: PyTorch, llama.cpp, vLLM or SGLang.

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// Runtime is the engine that runs the job: how it places the weights and
// what buffers it allocates.
type Runtime uint8

const (
	// PyTorch is a PyTorch (transformers) process: tensors through the
	// CUDA caching allocator. It is the zero value.
	PyTorch Runtime = iota
	// LlamaCpp is llama.cpp (and Ollama, which runs it) serving a GGUF
	// model: fixed ggml backend buffers per device for the weights, the
	// KV cache and the compute graph (see [LlamaCppOptions] and
	// [LlamaCppBuffers]).
	LlamaCpp
	// VLLM is vLLM serving a model: the weights, the profile run's peak,
	// and a KV cache of the memory gpu_memory_utilization leaves (see
	// [VLLMOptions] and [VLLMBuffers]).
	VLLM
	// SGLang is SGLang serving a model: the weights and a KV pool of the
	// memory mem_fraction_static leaves (see [SGLangOptions] and
	// [SGLangBuffers]).
	SGLang
)

var runtimeNames = [...]string{PyTorch: "pytorch", LlamaCpp: "llama.cpp", VLLM: "vllm", SGLang: "sglang"}

// String returns "pytorch", "llama.cpp", "vllm" or "sglang".
func (r Runtime) String() string {
	if int(r) < len(runtimeNames) {
		return runtimeNames[r]
	}
	return "Runtime(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (r Runtime) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// ParseRuntime reads "pytorch" (or "transformers", "torch"),
// "llama.cpp" (or "llamacpp", "llama-cpp", "ollama"), "vllm" and "sglang".
func ParseRuntime(s string) (Runtime, error) {
	switch s {
	case "pytorch", "torch", "transformers":
		return PyTorch, nil
	case "llama.cpp", "llamacpp", "llama-cpp", "ollama":
		return LlamaCpp, nil
	case "vllm", "vLLM":
		return VLLM, nil
	case "sglang", "SGLang":
		return SGLang, nil
	}
	return 0, gpumem.Errorf("Runtime", s, gpumem.ErrInvalid, "want pytorch, llama.cpp, vllm or sglang")
}
