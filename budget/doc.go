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
//     process, with the CUDA context, and the optimizer state
//     bitsandbytes' paged optimizers keep in CUDA unified memory
//     ([Breakdown.Paged]), outside PyTorch's allocator. The driver pages
//     that state out to the host under pressure, so what [Fits] checks
//     is [Breakdown.Required]: Device with only the largest paged
//     tensor's state.
//
// # How a scheduler uses it
//
// Prepare the model once ([ModelOf] or [NewModel] reduces its tensor inventory to
// groups of identical tensors), estimate once per job, then check every
// node cheaply:
//
//	m, err := budget.ModelOf(spec)
//	need, err := budget.Estimate(budget.Job{Model: m, Mode: budget.Training, ...})
//	short, ok := budget.Fits(need, node.GPU)   // Filter: allocation-free
//	score := budget.Utilization(need, node.GPU) // Score: in [0,1] when it fits
//
// The estimate's CUDA context and workspaces are those of Job.Device:
// estimate once per kind of GPU, as BenchmarkSchedulerCycle does (1,000
// jobs over 100 GPUs of three kinds: 3,000 estimates and 100,000 Fits,
// 15–18 ms and no allocation per cycle in two runs on the shared machine
// below, in a run where BenchmarkEstimate took 2.4–2.6 µs).
// A Breakdown, a Plan, its DeepSpeed and accelerate configs and a Parallel
// layout print readably with fmt.Println. `go doc` does not show the
// runnable examples; they are in this directory's example_*_test.go files
// (ExampleEstimate_qlora, ExampleFits_scheduler,
// ExampleAllocateFleet_llama70bFullFinetune, ExampleVLLMBuffers, ...).
//
// Estimate allocates nothing, for every layout (ZeRO, FSDP, tensor,
// pipeline, context and expert parallelism: BenchmarkEstimateLayouts,
// TestEstimateLayoutsAllocationFree). A Model keeps what does not depend
// on the workload — its weights', gradients' and master copies' bytes
// per precision and rank, the optimizer's state and step per optimizer
// value, precision and rank, the architecture's checks — computed on
// the first Estimate that needs them; NewModel also prepares the
// activation model's view of the architecture (model.ActivationModel:
// its block layout and block description) and the language model's
// fields the activations read. The rest (the activation model, the
// peak's composition) runs per call. Measured with callgrind
// (internal/perfdriver, instructions per Estimate call, 2,000 calls): a
// 70B training job (BenchmarkEstimate) 11,227 instructions (12,800
// before the Model prepared the activation model's view, 35,015 before
// it kept its figures), the same under ZeRO-3 over 64 GPUs 11,450
// (13,025), FSDP 11,413 (12,987), TP 8 × PP 4 × DP 2
// (BenchmarkEstimateParallel, two stages) 15,012 (16,562; 78,794 before
// the figures were kept), an 8×7B MoE under EP 8 × TP 2 × CP 2 12,411
// (13,906), generation 10,057 (12,233); the estimates of one Allocate
// (BenchmarkAllocate's job, 200 calls) 330,570 (371,021), of one
// AllocateFleet (BenchmarkAllocateFleet's, 20 calls) 667,649
// (747,194). At the rate of an earlier measurement of 2.4 µs for about
// 30,400 instructions this is about 0.9 µs for the 70B job (1.2 µs for the two pipeline
// stages); on the machine the earlier figures were measured on (2
// vCPUs of an Intel Xeon, nproc 2, shared with other work, load average
// about 3.5 to 4, so that wall-clock figures are upper bounds)
// BenchmarkEstimate took 2.9–4.1 µs in three runs and
// BenchmarkEstimateLayouts 2.6–5.5 µs across its layouts, with no
// allocation; on the same kind of machine at load average about 1,
// BenchmarkEstimate took 2.45–2.60 µs in three runs before the
// activation model's view was prepared and 1.94–2.46 µs in six after.
// Fits and Utilization take nanoseconds. NewModel
// costs the model's distinct layer kinds, not its size: it builds one
// layer of each kind and one expert of each block (model.Spec.Runs), so
// DeepSeek-V3's 92,000 tensors take 240–290 µs and a config of 65,536
// identical layers 92–98 µs (29 KB) on that machine
// (BenchmarkNewModelDeepSeekV3, BenchmarkNewModelDeep).
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
// Its [Objective] says what the allowed changes are for: the fewest that
// fit the job as given ([FitAsGiven]), or the ones that push the longest
// sequence ([MaximizeSeqLen], the default when [Limits.MaxSeqLen] lets
// the sequence vary) or the largest batch ([MaximizeBatch]) furthest,
// with each rung's maximum in the ladder.
// [LargestBatch], [LongestSeqLen] and [CacheEntries] answer the single questions
// (they allow no change).
// A plan for a 70B job over every knob takes about 24 estimates
// (BenchmarkAllocate): 533,571 instructions under callgrind (883,194
// in an earlier version), about 42 µs at the rate above (110–116 µs
// wall-clock in two runs on the shared machine), 48 allocations. [AllocateFleet] does not search
// a layout whose model states alone (weights as stored, master copies
// and optimizer state after sharding and offload, and the CUDA context)
// exceed the free memory: the layout keeps its first rung, and the plan
// or the error is the one the full search gives (two nodes of eight 80
// GB GPUs, BenchmarkAllocateFleet: 1,194,042 instructions, 2,975,848
// before).
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
// The context is a table of published measurements by GPU generation
// (gpumem.Device.Compute), CUDA version and module loading
// ([DefaultContext]): 426 MiB for a current GPU under CUDA 12 with lazy
// loading, up to 1685 MiB when every kernel is loaded eagerly (CUDA 11.6
// and before).
//
// CPU offload of the optimizer state (ZeRO-Offload) and of frozen models
// (diffusers' model offload) moves their bytes to [Breakdown.Host], and
// [Breakdown.HostNode] is that for every rank of a node.
//
// # Accuracy
//
// Whole-job peaks are compared with GPU memory measured by others and
// published with the job that produced it (testdata/published/jobs.jsonl;
// `gpumem accuracy` prints the table, cmd/gpumem/internal/accuracy holds the gate):
//
//   - allocated peaks (torch.cuda.max_memory_allocated), 37 figures from
//     litgpt and lit-gpt, torchtune and Hugging Face on A10G and A100
//     GPUs (a few unstated): median error 2.3%, none more than 3.5% under;
//     litgpt's phi-1.5 LoRA runs over by 31–55% (its model fuses the
//     tanh-GELU where transformers' Phi, which gpumem models, saves its
//     intermediates) and torchtune's compiled LoRA, QLoRA and checkpointed
//     chunked-loss runs 7–20% over;
//   - reserved peaks, 9 figures: within 5.1% (median 4.2% under) with
//     [DefaultFragmentation];
//   - device level, 9 BERT-large sequence-classification runs on a 2022
//     V100 under CUDA 11.2 and the same model only loaded ([Load]):
//     median error 3.1% (21% under to 3.1% over; the batch-1 runs within
//     3.1%, the batch-4 ones 17–21% under), with the CUDA context of that
//     setup, 1341 MiB of eagerly loaded kernels ([DefaultContext]);
//     [Calibrate] fits the context from a fleet's own measurements;
//   - quantized weights (allocated): OctoCoder generating with LLM.int8,
//     2.3% under, and with 2023's bitsandbytes 4-bit defaults (fp4, fp32
//     compute, dequantized in the prompt's forward), 0.1% under;
//   - the KV cache (7 figures) and weights as vLLM and llama.cpp load
//     them (21), within 2.2%.
//
// 28 more figures are listed apart, each with the reason from its source
// (`gpumem accuracy` prints them). No GPU measurement of our own is
// recorded yet: tools/calibrate has the grid (842 cases; every one
// estimable, TestGrid) but has not run on a GPU. Bitsandbytes QLoRA
// training through litgpt is within 3.3% on Llama-3.2-1B/3B, Llama-3.1-8B,
// Mistral-7B and lit-gpt's Llama-2-7B and 13B runs; litgpt's Llama-2-7B
// nf4 run is 8.9% under and listed apart: litgpt's own attention block
// (fused qkv viewed per query group, its roped copies) is not modelled op
// by op.
//
// # Serving engines
//
// Job.Runtime chooses an engine whose own buffers Estimate reports instead of
// PyTorch's allocator: LlamaCpp ([LlamaCppBuffers]: the model, KV and compute
// buffers per device, over several GPUs by --split-mode layer or row and
// --tensor-split, and the CPU_Mapped span of mmap), VLLM ([VLLMBuffers]: the
// KV cache gpu_memory_utilization leaves, with the CUDA graphs' estimate that
// v0.21 and later subtract; [VLLMUtilizationFor] and [VLLMMaxModelLenFor]
// answer the inverse for a target concurrency) and SGLang ([SGLangBuffers]:
// the KV pool of mem_fraction_static, as profile_max_num_token computes it).
// [OllamaLayers] and [OllamaMaxContext] reproduce Ollama v0.12.11's
// placement: the layers it offloads at a context, and the longest context
// with all of them. llama.cpp's KV and model buffers are checked against its
// own logs and against runs of the real llama.cpp on the CPU
// (testdata/llamacpp); the compute buffer replays ggml's graph allocator
// over the llama graph and matches those to the printed 0.01 MiB.
// LlamaCppOptions.Version (a build's date, [LlamaCppVersion]) selects the
// -ngl placement rule and the graph of older builds; VLLMOptions.V0 the V0
// engine's profile sampler.
//
// # More than one GPU
//
// [Parallel] describes a layout: data parallelism with DeepSpeed ZeRO
// stages 1–3 or PyTorch FSDP (NO_SHARD, SHARD_GRAD_OP, FULL_SHARD,
// HYBRID_SHARD), Megatron tensor parallelism with sequence parallelism,
// pipeline stages with the 1F1B or interleaved schedule, context and
// expert parallelism. Estimate then returns the most loaded rank. What
// the figures are checked against (parallel_test.go, megatron_test.go,
// deepspeed_test.go; model/parallel_test.go):
//
//   - [ModelStates] reproduces all 54 cells of Table 1 of the ZeRO paper
//     (Rajbhandari et al., SC'20) and the 120 / 31.4 / 16.6 / 1.9 GB of
//     its Figure 1 (7.5B on 64 GPUs), and [DeepSpeedZero2] and
//     [DeepSpeedZero3] DeepSpeed's estimate_zero2/3_model_states_mem_needs
//     printed examples;
//   - the per-op activation model reproduces Korthikanti et al. (MLSys
//     2023) Table 2 for their four GPT models (22B, GPT-3 175B, MT-NLG
//     530B, 1T; tensor, tensor+sequence, selective and full
//     recomputation) to the byte, beyond two terms the paper leaves out
//     and the tests name (LayerNorm statistics, 16 bytes per token and
//     layer; GPT-2's 2-byte attention scale), the 70% and 65% selective
//     savings of §5, and eq. 5/6 with the interleaved factor for the
//     first pipeline stage of GPT-3 (t = 8, p = 8, m = 3);
//   - per-rank parameters under tensor, pipeline and expert parallelism
//     are exact counts (norms replicated, KV heads replicated below t).
//
// No multi-GPU run has been measured: the transients the engines add
// (ZeRO-3's live parameters and prefetch bucket, FSDP's gathered units,
// the ZeRO-2 reduce bucket) follow the engines' documented defaults, not
// a measurement.
//
// [AllocateFleet] chooses a layout over nodes of GPUs, least
// communication first (plain data parallelism, ZeRO-1, 2, 3, tensor
// parallelism within a node, pipeline stages across nodes), and only
// then the costly changes of [Limits]; a [Plan] becomes a DeepSpeed
// config ([Plan.DeepSpeed]), an accelerate FSDP config ([Plan.Accelerate]),
// Megatron-LM flags ([Plan.Megatron]) or Hugging Face TrainingArguments.
//
// Parameter offload ([OffloadParams], ZeRO-Infinity to CPU, FSDP CPU
// offload) moves the rank's weight and gradient partitions to the host
// under stage 3. Not modelled yet: NVMe offload, NCCL buffers,
// pipeline send/receive buffers, torch.compile's buffers, CUDA graphs'
// private pools.
package budget
