// Package attention models the GPU memory of attention: for one attention
// call, the bytes its autograd graph keeps for backward and the transient
// peaks of its forward and its backward, per kernel; and for a decoder's
// KV cache, the bytes per token, per sequence and per batch.
//
// All figures are live tensor bytes, what torch.cuda.memory_allocated
// counts before the caching allocator rounds a request (to 512 bytes, and
// to 2 MiB segments above 1 MiB). They are computed in exact integer
// arithmetic with overflow checks, allocate nothing, and fail with a
// *gpumem.FieldError naming the offending field.
//
// # Kernels and their contract
//
// A [Kernel] gives three figures for a [Shape]: Saved (kept for backward,
// q, k and v included, the output excluded), Forward (peak above the
// inputs during the forward, output included) and Backward (peak above
// the saved bytes and dO during the backward, input gradients included).
// The Kernel documentation states the contract precisely and how a budget
// composes a layer from it; [Peak] composes one call in isolation.
//
//   - [Eager]: transformers' eager_attention_forward op by op, with an
//     fp32 softmax, repeat_kv, the 4-D mask, dropout's mask (1 byte on CUDA,
//     DType on CPU) and output_attentions ([Retained]).
//   - [Math]: PyTorch's SDPA math backend, which upcasts fp16/bf16 to fp32.
//   - [Flash]: FlashAttention-2 and -3, following flash_api.cpp's
//     allocations (out, fp32 log-sum-exp, dq_accum, softmax_d, GQA buffers).
//   - [MemEfficient]: SDPA's memory-efficient (xformers/CUTLASS) kernel.
//   - [HeadChunked], [QueryChunked]: any kernel run on groups of heads or
//     blocks of query rows (the remedy of the 32k-token block attention,
//     docs/scenarios.md).
//   - [SlidingWindow]: blocked local attention, linear in the sequence.
//
// Cross-attention is a Shape with QueryLen ≠ KeyLen; inference is
// Shape.NoGrad. [LongestSeqLen], [LargestBatch] and [MaxHeadChunk] invert the
// peak: the largest sequence, batch or head chunk that fits a budget.
//
// # KV cache
//
// [KVCache] sizes per-head K/V caches (Hugging Face, vLLM, llama.cpp) and
// MLA latent caches (vLLM's kv_lora_rank + qk_rope_head_dim per token and
// layer, against the decompressed per-head cache Hugging Face keeps), with
// quantized element types (fp8 and int8 with per-tensor scales; llama.cpp's
// Q8_0/Q4_0/... blocks with their scales), per-layer sliding windows, and
// paged block rounding (vLLM's 16-token blocks).
//
// # How it was checked
//
//   - Eager, HeadChunked{Eager} and QueryChunked{Eager} against a CPU
//     oracle, testdata/eager_oracle.py (torch 1.13 on CPU, 132
//     configurations: fp32/bf16, fp32 softmax, dropout, 4-D mask, GQA with
//     and without repeat_kv copies, head and query chunks, and 32 forwards
//     under torch.no_grad; saved tensors
//     counted by storage with saved_tensors_hooks, peaks from the profiler's
//     allocator events in one session). Saved bytes agree within 32 bytes
//     in every case (the oracle also sees an 8-byte CPU scalar saved by
//     "* scaling"); forward and backward peaks agree within 32 bytes except
//     in two documented families: bf16 softmax with dropout, where torch's
//     CPU kernels allocate fp32 scratch (model up to 30% under the CPU
//     figure; CUDA uses fused kernels), and query chunking with three or
//     more blocks, where the model's backward is over by at most one dV.
//     The oracle found three effects now modelled: torch.matmul copies the
//     transposed dO when batch > 1, repeat_kv of a single KV head is a view,
//     and slice_backward materializes whole-size gradients per chunk.
//   - Math, Flash and MemEfficient against the allocation sequences of the
//     sources named in their documentation (PyTorch attention.cpp and the
//     mem_eff_attention kernels; Dao-AILab/flash-attention snapshot 0251105,
//     csrc/flash_attn/flash_api.cpp and hopper/flash_api.cpp), with
//     hand-derived figures in the tests. They have not been measured on a
//     GPU; the memory-efficient backward workspace is an approximation.
//   - The scenarios' numbers (docs/scenarios.md) as examples: Whisper-small's fp32 score matrix of
//     108,000,000 bytes (the "104MB" allocation of the Whisper language attack once rounded to
//     2 MiB), 0.5 GiB of fp32 scores per layer at 2048 tokens × 32 heads
//     (LLaVA-1.5-7B's language model), 128 GiB for 32 heads at 32k tokens and a 4× smaller peak
//     with chunks of 8 heads (the 32k-token block attention).
//   - The KV cache against published per-token sizes: OPT-13B 800 KB
//     (PagedAttention paper), Llama-2-7B 512 KiB, Llama-3-8B 128 KiB,
//     GPT-OSS-120B 9.66 GB at 131k tokens (vLLM Neuron docs), DeepSeek-V3's
//     576-element latent (DeepSeek-V2 paper, Table 1) and the ≈71× larger
//     decompressed cache.
//   - Properties: every figure and the peak are non-decreasing in batch and
//     sequence length (Backward on its own may dip, being relative to saved
//     bytes that grow; Saved + Backward does not); Flash ≤ MemEfficient ≤
//     Eager and Math for saved bytes and peaks on sequences of at least 4×
//     the head dim (shorter ones can let the fused kernels' s·d fp32 buffers
//     win; FlashAttention-2's GQA backward may exceed MemEfficient by dk +
//     dv); HeadChunked never raises the peak under NoGrad nor, in training,
//     for sequences of at least 4× the head dim; the inverse helpers' result
//     fits and the next value does not.
//
// # Not modelled
//
// CUDA caching-allocator rounding and fragmentation (the budget package's
// concern); cuBLAS and cuDNN workspaces; torch.matmul's forward copies of
// q, k, v when they are non-contiguous views (transformers' transposed
// layout: the copies replace the originals in Saved, same bytes, and add
// to the forward transient); FlashAttention's split-KV forward (decoding)
// and deterministic backward; varlen packing; FlashAttention-3's fp8
// scaling tensors; the inputs' own gradients outside the kernel; PyTorch
// versions whose SDPA math path predates the fp32 upcast and _safe_softmax
// (Math{ReducedPrecision: true} approaches them from above); per-token
// KV-cache quantization scales and engine-level pool preallocation.
package attention
