// Package budget composes the memory components of a job — weights,
// gradients, optimizer state, master copies, activations, attention,
// logits, KV cache, buffers, frozen copies and the runtime's overheads —
// into the per-GPU peak ([Estimate]), checks it against a device for a
// scheduler ([Fits], [Utilization]), and labels it with the three
// meanings of memory:
//
//   - Allocated ([Breakdown.Allocated]): live tensors, what
//     torch.cuda.max_memory_allocated reports;
//   - Reserved ([Breakdown.Reserved]): what the caching allocator holds,
//     max_memory_reserved;
//   - Device ([Breakdown.Device]): what nvidia-smi shows for the
//     process, with the CUDA context.
//
// # How a scheduler uses it
//
// Prepare the model once ([NewModel] reduces its tensor inventory to
// groups of identical tensors), estimate once per job, then check every
// node cheaply:
//
//	m, err := budget.NewModel(model.Finetune{Model: spec})
//	need, err := budget.Estimate(budget.Job{Model: m, Mode: budget.Training, ...})
//	short, ok := budget.Fits(need, node.GPU)   // Filter: allocation-free
//	score := budget.Utilization(need, node.GPU) // Score: in [0,1] when it fits
//
// Estimate takes about 2 µs for a 70B training job and allocates nothing
// (BenchmarkEstimate); Fits and Utilization take nanoseconds.
//
// # What to change so that it fits
//
// [Allocate] is the inverse: given the free memory and a job with some
// knobs free ([Limits]), it returns the [Plan] to run — micro-batch,
// sequence length, gradient accumulation, checkpointing, attention kernel
// and head chunking, optimizer, precision, offload, LoRA/QLoRA, elastic
// buffer sizes — and the ladder of changes it tried, each with the peak
// after it, the saving and its cost. When nothing fits it returns an
// [*InsufficientMemoryError] with the ladder and what else to allow.
// [MaxBatch], [MaxSeqLen] and [CacheEntries] answer the single questions.
// A plan for a 70B job over every knob takes about 24 estimates
// (BenchmarkAllocate).
//
// # What is modelled
//
// Weights, gradients, master weights and optimizer state are exact
// arithmetic on the tensor inventory (the optimizer package sizes the
// state per tensor), rounded per tensor to the caching allocator's 512
// bytes. Activations and the attention transient come from the model and
// attention packages. The CUDA context, the cuBLAS workspaces and the
// allocator's fragmentation are the [Overhead] model's defaults, each
// with its source, which callers override with their own measurements.
//
// CPU offload of the optimizer state (ZeRO-Offload) and of frozen models
// (diffusers' model offload) moves their bytes to [Breakdown.Host].
//
// Not modelled yet: parallel layouts across GPUs (ZeRO, FSDP, tensor and
// pipeline parallelism), parameter offload, NCCL buffers, torch.compile's
// buffers, CUDA graphs' private pools.
package budget
