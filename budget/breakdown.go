package budget

import (
	"encoding/json"
	"log/slog"
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Phase is the part of a step in which memory peaks.
type Phase uint8

const (
	// Forward: saved activations have grown through every layer and the
	// logits and loss sit on top (training), or the largest layer's
	// temporaries (inference).
	Forward Phase = iota + 1
	// Backward: gradients appear while saved activations are released;
	// the gradient of the logits and the attention backward workspace
	// are the usual spikes.
	Backward
	// Step: the optimizer step, with every gradient and the step's
	// temporary buffers.
	Step
	// Decode: one generated token per sequence against the KV cache.
	Decode
	// Loaded: the model loaded, nothing run (a Load job).
	Loaded
)

var phaseNames = [...]string{Forward: "forward", Backward: "backward", Step: "optimizer step", Decode: "decode", Loaded: "loaded"}

// String returns "forward", "backward", "optimizer step", "decode" or
// "loaded".
func (p Phase) String() string {
	if p >= Forward && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (p Phase) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Breakdown is the per-GPU memory of a job at its peak, component by
// component. Every field is the component's bytes at the moment of the
// peak (Phase), so the fields add up to the peak.
//
// The components fall into three levels, matching what the tools
// measure:
//   - allocated (torch.cuda.max_memory_allocated): Weights, Gradients,
//     Optimizer, Master, Activations, Attention, Transient, Logits, KVCache,
//     Buffers, ExtraModels and Workspace;
//   - reserved (torch.cuda.max_memory_reserved): allocated plus
//     Fragmentation;
//   - device (nvidia-smi): reserved plus Context and Paged.
//
// Paged, the optimizer state bitsandbytes' paged optimizers keep in
// CUDA unified memory, is at the device level only: PyTorch's caching
// allocator never sees it, and the driver can move it to the host. What
// a job cannot do without on the device is [Breakdown.Required], which
// [Fits] checks.
//
// The sums (Allocated, Reserved, Device, Total) are exact when they fit
// in int64 and saturate at [math.MaxInt64] (or [math.MinInt64], for
// negative fields, which Estimate never returns) instead of wrapping, so
// that an absurd breakdown never looks small.
type Breakdown struct {
	// Weights are the model's parameters as stored on the GPU, plus the
	// 16-bit copies autocast keeps for backward under AMP.
	Weights gpumem.Bytes
	// Gradients of the trainable parameters present at the peak.
	Gradients gpumem.Bytes
	// Optimizer is the optimizer state, plus its step transient when the
	// peak is the step.
	Optimizer gpumem.Bytes
	// Master is the fp32 master copy of 16-bit weights (mixed
	// precision as DeepSpeed and Megatron keep it).
	Master gpumem.Bytes
	// Activations saved for backward and alive at the peak.
	Activations gpumem.Bytes
	// Attention is the transient of the attention kernel at the peak
	// (eager scores and probabilities, flash workspace).
	Attention gpumem.Bytes
	// Transient is the largest transient of a block without attention at
	// the peak: for a convolutional backbone (ResNet, ConvNeXt,
	// EfficientNet), the gradients of the block's largest map and of its
	// input in backward, or the maps alive at one op in forward
	// (model.LayerActivations.Forward and Backward, after the modules'
	// forward in transformers' modeling_resnet.py, modeling_convnext.py
	// and modeling_efficientnet.py). Blocks with attention, Swin's
	// windows included, report theirs as Attention.
	Transient gpumem.Bytes
	// Logits is the output logits, their fp32 upcast for the loss, and
	// the loss gradient, as alive at the peak.
	Logits gpumem.Bytes
	// KVCache is the key/value cache of decoding.
	KVCache gpumem.Bytes
	// Buffers are the job's own tensors and caches, and the model's
	// registered buffers (model.Spec.BufferBytes).
	Buffers gpumem.Bytes
	// ExtraModels are frozen copies: a reference, teacher or original
	// model held for inference only.
	ExtraModels gpumem.Bytes
	// Workspace is cuBLAS workspaces, allocated through PyTorch's
	// caching allocator, and the memory of quantized kernels: GPTQ's
	// persistent exllamav2 scratch, and at the peak the transient of the
	// quantized matmul that sets it (a dequantized weight, LLM.int8's
	// int32 product), or in a Load job the weight bitsandbytes is
	// quantizing as it loads.
	Workspace gpumem.Bytes
	// Fragmentation is what the caching allocator reserves beyond live
	// tensors at the peak.
	Fragmentation gpumem.Bytes
	// Context is the CUDA context and loaded kernels.
	Context gpumem.Bytes
	// Paged is the optimizer state in CUDA unified memory
	// (cudaMallocManaged): state1 and state2 of bitsandbytes' paged
	// optimizers (PagedAdamW, PagedAdamW8bit, PagedLion8bit, ...) for
	// tensors of at least 100,000 elements (get_state_buffer,
	// bitsandbytes/optim/optimizer.py at 95f9af3). bitsandbytes wraps the
	// managed pointer in a CPU tensor (get_paged,
	// bitsandbytes/functional.py), so it is in neither
	// max_memory_allocated nor max_memory_reserved; each step prefetches
	// a tensor's state to the GPU before its update (prefetch_state), and
	// nothing moves it back, so once stepped it is resident and
	// nvidia-smi counts it: it is part of Device. Under memory pressure
	// the driver evicts its pages to the host instead of failing an
	// allocation (cudaMallocManaged memory can oversubscribe the GPU),
	// so it is not part of Required beyond PagedResident. The rest of
	// the optimizer state (absmax, quantization maps, tensors under
	// 100,000 elements) is in Optimizer.
	Paged gpumem.Bytes
	// PagedResident is the part of Paged that must be on the GPU at
	// once: the state of the largest paged tensor, which the step
	// prefetches before its update kernel and synchronizes after it,
	// one tensor at a time (Optimizer8bit.step).
	PagedResident gpumem.Bytes

	// Host is what the job keeps in host (CPU) memory because of
	// Job.Offload; it is not part of the GPU peak, Total or Device.
	Host gpumem.Bytes
	// HostNode is Host for every rank of one node (Parallel.GPUsPerNode
	// ranks): what a node's host memory must hold.
	HostNode gpumem.Bytes
	// Stage is the pipeline stage of the rank the figures are for, the
	// most loaded one (0: the first; PipelineParallel−1: the last).
	Stage int

	// Phase is the phase that sets the peak.
	Phase Phase
	// Phases holds the allocated peak of each phase, indexed by Phase
	// (zero for phases the job does not have).
	Phases [Loaded + 1]gpumem.Bytes
}

// Allocated returns the peak of live tensors, what
// torch.cuda.max_memory_allocated reports: the sum of the allocated
// components, saturating at math.MaxInt64.
func (b Breakdown) Allocated() gpumem.Bytes {
	return gpumem.Bytes(checked.SatSum(int64(b.Weights), int64(b.Gradients), int64(b.Optimizer), int64(b.Master),
		int64(b.Activations), int64(b.Attention), int64(b.Transient), int64(b.Logits), int64(b.KVCache), int64(b.Buffers),
		int64(b.ExtraModels), int64(b.Workspace)))
}

// Reserved returns what the caching allocator holds at the peak, what
// torch.cuda.max_memory_reserved reports: Allocated plus Fragmentation,
// summed exactly and saturating at math.MaxInt64.
func (b Breakdown) Reserved() gpumem.Bytes {
	return gpumem.Bytes(checked.SatSum(int64(b.Weights), int64(b.Gradients), int64(b.Optimizer), int64(b.Master),
		int64(b.Activations), int64(b.Attention), int64(b.Transient), int64(b.Logits), int64(b.KVCache), int64(b.Buffers),
		int64(b.ExtraModels), int64(b.Workspace), int64(b.Fragmentation)))
}

// Device returns the process's memory as nvidia-smi shows it once every
// paged optimizer state is resident: Reserved plus Context and Paged,
// summed exactly and saturating at math.MaxInt64. Without a paged
// optimizer it equals [Breakdown.Required], what a scheduler compares
// with a GPU's free memory.
func (b Breakdown) Device() gpumem.Bytes { return b.device() }

// device is Device without copying b.
func (b *Breakdown) device() gpumem.Bytes {
	return gpumem.Bytes(checked.SatSum(int64(b.Weights), int64(b.Gradients), int64(b.Optimizer), int64(b.Master),
		int64(b.Activations), int64(b.Attention), int64(b.Transient), int64(b.Logits), int64(b.KVCache), int64(b.Buffers),
		int64(b.ExtraModels), int64(b.Workspace), int64(b.Fragmentation), int64(b.Context), int64(b.Paged)))
}

// Required returns the device memory the job cannot do without: Device
// less the paged optimizer state the driver may evict to the host, but
// with the largest paged tensor's state (PagedResident), which its update
// needs on the GPU. It is what [Fits], [FitsWithHeadroom] and
// [Utilization] compare with a GPU's free memory: a job whose Required
// fits runs, paging its optimizer state in and out (slower: torchtune
// PR #990 measured > 6 s/it when large states page), where counting all
// of Paged would refuse it. Without a paged optimizer it equals Device.
// Saturates at math.MaxInt64.
func (b Breakdown) Required() gpumem.Bytes { return b.required() }

// required is Required without copying b: Fits and Utilization run per
// node in a scheduler's loop.
func (b *Breakdown) required() gpumem.Bytes {
	return gpumem.Bytes(checked.SatSum(int64(b.Weights), int64(b.Gradients), int64(b.Optimizer), int64(b.Master),
		int64(b.Activations), int64(b.Attention), int64(b.Transient), int64(b.Logits), int64(b.KVCache), int64(b.Buffers),
		int64(b.ExtraModels), int64(b.Workspace), int64(b.Fragmentation), int64(b.Context),
		int64(min(b.PagedResident, b.Paged))))
}

// Component is one named part of a Breakdown.
type Component struct {
	Name  string
	Bytes gpumem.Bytes
}

// Components returns the parts in a fixed order, with their JSON names.
func (b Breakdown) Components() [15]Component {
	return [15]Component{
		{"weights", b.Weights}, {"gradients", b.Gradients}, {"optimizer", b.Optimizer},
		{"master_weights", b.Master}, {"activations", b.Activations}, {"attention", b.Attention},
		{"transient", b.Transient}, {"logits", b.Logits}, {"kv_cache", b.KVCache}, {"buffers", b.Buffers},
		{"extra_models", b.ExtraModels}, {"workspace", b.Workspace},
		{"fragmentation", b.Fragmentation}, {"context", b.Context},
		{"paged_optimizer", b.Paged},
	}
}

// Dominant returns the largest component that counts toward Required:
// all but the paged optimizer state, which the driver pages out rather
// than fail (see [Breakdown.Paged]), so that a job that does not fit is
// told what it must shrink.
func (b Breakdown) Dominant() Component {
	var best Component
	for _, c := range b.Components() {
		if c.Bytes > best.Bytes && c.Name != "paged_optimizer" {
			best = c
		}
	}
	return best
}

// LogValue implements slog.LogValuer, so a scheduler can log a Breakdown
// without the library logging.
func (b Breakdown) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 18)
	attrs = append(attrs,
		slog.String("phase", b.Phase.String()),
		slog.Int64("allocated", int64(b.Allocated())),
		slog.Int64("reserved", int64(b.Reserved())),
		slog.Int64("device", int64(b.Device())))
	if b.Host != 0 {
		attrs = append(attrs, slog.Int64("host", int64(b.Host)))
	}
	for _, c := range b.Components() {
		if c.Bytes != 0 {
			attrs = append(attrs, slog.Int64(c.Name, int64(c.Bytes)))
		}
	}
	return slog.GroupValue(attrs...)
}

// breakdownJSON is the wire form: integers of bytes.
type breakdownJSON struct {
	AllocatedPeak int64            `json:"allocated_peak"`
	ReservedPeak  int64            `json:"reserved_peak"`
	DevicePeak    int64            `json:"device_peak"`
	RequiredPeak  int64            `json:"required_peak,omitempty"`
	Phase         string           `json:"phase"`
	Components    map[string]int64 `json:"components"`
	Host          int64            `json:"host,omitempty"`
	HostNode      int64            `json:"host_per_node,omitempty"`
	Stage         int              `json:"pipeline_stage,omitempty"`
}

// MarshalJSON writes the totals, the phase and every component as
// integers of bytes:
//
//	{"allocated_peak":..., "reserved_peak":..., "device_peak":...,
//	 "phase":"backward", "components":{"weights":..., ...}}
//
// and, with a paged optimizer, "required_peak": Required.
func (b Breakdown) MarshalJSON() ([]byte, error) {
	w := breakdownJSON{
		AllocatedPeak: int64(b.Allocated()), ReservedPeak: int64(b.Reserved()), DevicePeak: int64(b.Device()),
		Phase: b.Phase.String(), Components: make(map[string]int64, 15), Host: int64(b.Host),
		HostNode: int64(b.HostNode), Stage: b.Stage,
	}
	for _, c := range b.Components() {
		w.Components[c.Name] = int64(c.Bytes)
	}
	if b.Paged != 0 {
		// Only with a paged optimizer, when it differs from device_peak.
		w.RequiredPeak = int64(b.Required())
	}
	return json.Marshal(w)
}

// Fits reports whether a job that needs need fits on d: need.Required()
// (need.Device() without a paged optimizer) against d.Free(). When it does not, shortfall is the missing amount
// (positive, saturating at math.MaxInt64); when it does, shortfall is
// zero. A saturated need (math.MaxInt64 bytes) fits only a device with
// that much free. Fits is cheap and allocation-free, for a scheduler's
// Filter over thousands of nodes. need is checked as estimated: its CUDA
// context and workspaces are those of the Job.Device it was estimated
// for (Job.Overhead), not of d.
func Fits(need Breakdown, d gpumem.Device) (shortfall gpumem.Bytes, ok bool) {
	s := gpumem.Bytes(checked.SatSub(int64(need.required()), int64(d.Free())))
	if s > 0 {
		return s, false
	}
	return 0, true
}

// Utilization returns need.Required() / d.Free(): the fraction of the
// device's free memory the job would take, in [0, 1] when it fits and
// above 1 when it does not. It is always finite and never negative: 0
// for a job that needs nothing (a negative need, which Estimate never
// returns, counts as nothing), and [math.MaxFloat64] for a job that
// needs something on a device with no free memory (zero capacity, or
// over-committed). A scheduler that packs jobs tightly scores higher
// utilization higher; one that spreads them scores it lower.
// Allocation-free.
func Utilization(need Breakdown, d gpumem.Device) float64 {
	n := need.required()
	if n <= 0 {
		return 0
	}
	free := d.Free()
	if free <= 0 {
		return math.MaxFloat64
	}
	return float64(n) / float64(free)
}
