package budget

// What the llama.cpp estimate reports: each GPU's model, KV and compute
// buffers as llama.cpp prints them at load.

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// LlamaCppDevice is one GPU's buffers: "CUDAn model buffer size" (with
// row split, its "CUDA_Split" share too), "CUDAn KV buffer size" and
// "CUDAn compute buffer size".
type LlamaCppDevice struct {
	Weights, KV, Compute gpumem.Bytes
	Layers               int  // repeating layers assigned to it
	Output               bool // the output layer is on it
}

// Total is the device's buffers (without the CUDA context).
func (d LlamaCppDevice) Total() gpumem.Bytes {
	return gpumem.Bytes(checked.SatSum(int64(d.Weights), int64(d.KV), int64(d.Compute)))
}

// LlamaCppReport is one llama.cpp job's buffers as llama.cpp prints them
// at load: "CUDA0 model buffer size" (GPUWeights), "CPU_Mapped model
// buffer size" (HostWeights), "CUDA0 KV buffer size" (KV), "CUDA0 compute
// buffer size" (Compute), and the CUDA context besides them.
//
// With more than one GPU, GPUWeights, KV and Compute are the sums over
// the GPUs, and Devices[:GPUs] the buffers of each.
type LlamaCppReport struct {
	GPUWeights  gpumem.Bytes // the offloaded layers' and (when offloaded) the output layer's tensors
	HostWeights gpumem.Bytes // token_embd and the layers left on the CPU
	KV          gpumem.Bytes // the offloaded layers' K and V caches
	HostKV      gpumem.Bytes // the CPU layers' caches
	Compute     gpumem.Bytes // the GPU compute buffers (llamaCppCompute)
	// HostMapped is, with mmap (the default), what llama.cpp prints as
	// "CPU_Mapped model buffer size": the span of the file from the first
	// to the last byte of the tensors left on the CPU (llama_model_loader
	// maps that range), which covers the offloaded tensors between them:
	// with some layers offloaded it is more than HostWeights. It is
	// HostWeights with NoMmap, and for a model without a GGUF inventory.
	// CPU weight repacking (the CPU_REPACK and AMX buffer types, which
	// take the CPU layers' matrices out of the mapping into buffers of
	// their own) is not modelled.
	HostMapped  gpumem.Bytes
	GPUs        int // the GPUs used (1 with LlamaSplitNone)
	Devices     [LlamaMaxDevices]LlamaCppDevice
	Busiest     int          // the index in Devices of the GPU with the most memory
	Context     gpumem.Bytes // the CUDA context (Overhead.Context)
	Layers      int          // layers on the GPU, the output layer included ("offloaded N/M layers to GPU")
	Slots       int          // n_layer + 1 (n_layer + 3 before 2023-12-07: LlamaCppVersion)
	OutputOnGPU bool
	Cells       int // KV cells: n_ctx padded
	// SWACells is the cells of the sliding-window layers' cache over all
	// sequences (llama_kv_cache_iswa's "creating SWA KV cache, size = N
	// cells" times the streams), and SWALayers how many layers use it;
	// both zero when every layer has Cells (no SWA layers, an older
	// build: LlamaCppSWAFrom).
	SWACells, SWALayers int
	UBatch              int // n_ubatch as used
}

// Total is the device memory of the job: the GPU buffers and the context.
func (r LlamaCppReport) Total() gpumem.Bytes {
	return gpumem.Bytes(checked.SatSum(int64(r.GPUWeights), int64(r.KV), int64(r.Compute), int64(r.Context)))
}
