package model

// # Activations: what each layer saves for backward
//
// This file derives, op by op, the bytes that autograd saves for the
// backward pass during a training forward pass, in the manner of
// Korthikanti et al., "Reducing Activation Recomputation in Large
// Transformer Models" (2022), §4.1: list each op of the block, the tensors
// its backward needs, their dtype and shape. The op sequences are those of
// Hugging Face transformers' eager implementations (modeling_llama.py,
// modeling_gpt2.py, modeling_bert.py, modeling_t5.py, modeling_whisper.py,
// modeling_vit.py, modeling_clip.py, modeling_mixtral.py, modeling_llava.py)
// run by PyTorch 2.x on CUDA. Tensors are counted by storage: a view and
// its base count once, and a storage counts in the first part of the model
// that saves it (a block's input, saved by the block's first norm, counts
// in that block; the last block's output counts in the final norm).
//
// # Accuracy
//
// Per-layer saved bytes, and the embedding, final-norm, head and token-id
// figures, are checked against an exact CPU oracle
// (tools/oracle/activations.py: plain-torch blocks in the op order of the
// transformers eager code, saved tensors summed by storage with
// saved_tensors_hooks, torch 1.13.0a0), recorded in
// testdata/oracle/activations.json: Llama (MHA, GQA, MQA), Qwen3 (q/k
// norms), Gemma2 (Gemma RMSNorm, sandwich norms, soft-capping), GPT-2, BERT,
// Mixtral-style MoE, ViT and CLIP vision blocks, T5 (ReLU and gated-gelu,
// heads·d_kv ≠ d_model) and Whisper (with its convolutional front-end)
// encoder–decoders; batch 1–4, sequence 12–128, hidden 64–256; fp32 and
// bf16; no checkpointing, reentrant and
// non-reentrant full checkpointing; dropout 0 and 0.1 (through
// native_dropout, CUDA's 1-byte masks). The oracle's "_cuda" figures,
// which the tests use, apply three documented corrections for CPU/1.13
// artefacts (LayerNorm statistics of 16-bit inputs are fp32 on CUDA;
// torch 2.x mean.dim saves no input; Python-float operands stay CPU
// scalars). Against those, every one of the 117 grid points matches
// exactly: worst relative error 0, median 0, over 267 per-layer figures
// (TestActivationsOracle). SDPA and Flash kernels, MLA, parallel blocks
// (falcon, phi, neox), OPT and LLaVA's projector follow the same
// derivation but have no oracle (the CPU torch has no fused attention
// kernels). Transients are modelled: [Activations.ForwardPeak] against the
// CPU profiler's forward peak of the same 117 runs (same corrections) has
// ratio median 0.99, range 0.59–1.09 (TestActivationsForwardPeak; the low
// end is tiny checkpointed ViT/CLIP runs whose CPU kernels allocate fp32
// and im2col workspaces); backward transients are not measured.
// Hugging Face's op order changes between releases (ViT and
// CLIP moved to an fp32 softmax with the shared eager_attention_forward);
// the figures follow the releases named in the oracle script.

import (
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// AttentionKernel is the implementation of the attention core (scores,
// softmax, weighted sum) whose saved tensors an estimate assumes. The zero
// value is [Eager].
//
// It is the choice of a kernel, as Hugging Face's attn_implementation
// names it and as budget.Job.Attention, budget.Limits.Attention and the
// command line's --attention take it. Package attention describes one
// call of each kernel, with the options a model's code sets, behind the
// attention.Kernel interface; the choices are those kernels: Eager is
// attention.Eager, SDPA is attention.MemEfficient, Flash is
// attention.Flash (Version 2).
type AttentionKernel uint8

const (
	// Eager is the Hugging Face "eager" implementation: the score and
	// probability matrices (batch·heads·s_q·s_k elements) are
	// materialized and the probabilities saved for backward. The softmax
	// dtype follows the family: llama-style decoders, T5, phi, phi3 and
	// gpt_bigcode compute it in fp32 (softmax(..., dtype=float32)) and
	// save the fp32 result plus the cast copy; GPT-2, BERT, Whisper,
	// ViT and CLIP keep the compute dtype; OPT upcasts fp16 scores only
	// and also saves the masked scores (its torch.max clamp). GQA keys and values are
	// expanded to all heads (repeat_kv).
	Eager AttentionKernel = iota
	// SDPA is torch's scaled_dot_product_attention with the
	// memory-efficient backend, as Hugging Face's "sdpa" path calls it:
	// keys and values expanded to all heads (repeat_kv), nothing
	// quadratic saved, plus an fp32 log-sum-exp of batch·heads·s_q rows
	// padded to a multiple of 32 (PyTorch's _efficient_attention_forward).
	SDPA
	// Flash is FlashAttention-2 (Hugging Face "flash_attention_2"): keys
	// and values stay at KVHeads, and the kernel saves q, k, v, the output
	// and an fp32 log-sum-exp of batch·heads·s_q (Dao, 2023).
	Flash

	numKernels
)

// String returns "eager", "sdpa" or "flash".
func (k AttentionKernel) String() string {
	switch k {
	case Eager:
		return "eager"
	case SDPA:
		return "sdpa"
	case Flash:
		return "flash"
	}
	return "AttentionKernel(" + strconv.Itoa(int(k)) + ")"
}

// ParseAttention parses an attention implementation as users name it:
// "eager", "sdpa" or "flash" (the command line's --attention and the
// service's "attention" field), and Hugging Face's attn_implementation
// spelling "flash_attention_2" (transformers' modeling_utils.py). The
// empty string is SDPA, the implementation transformers picks by
// default when PyTorch provides scaled_dot_product_attention. It is the
// one parser of the vocabulary, so that every entry point accepts the
// same names.
func ParseAttention(s string) (AttentionKernel, error) {
	switch s {
	case "eager":
		return Eager, nil
	case "sdpa", "":
		return SDPA, nil
	case "flash", "flash_attention_2":
		return Flash, nil
	}
	return 0, gpumem.Errorf("attention", s, gpumem.ErrInvalid, `want "eager", "sdpa" or "flash"`)
}

// Softmax is the dtype of an eager attention softmax.
type Softmax uint8

const (
	// SoftmaxDefault follows the family's Hugging Face code (see [Eager]).
	SoftmaxDefault Softmax = iota
	// SoftmaxFP32 upcasts: softmax(..., dtype=float32).to(dtype) saves the
	// fp32 result and the cast copy.
	SoftmaxFP32
	// SoftmaxNative computes the softmax in the compute dtype.
	SoftmaxNative

	numSoftmax
)

// Checkpointing is an activation checkpointing (recomputation) policy.
// The zero value is [NoCheckpointing].
type Checkpointing uint8

const (
	// NoCheckpointing keeps every saved tensor until backward.
	NoCheckpointing Checkpointing = iota
	// FullCheckpointing keeps only each block's input (torch.utils.checkpoint
	// around every block, Hugging Face gradient_checkpointing) and
	// recomputes one block at a time in backward: Korthikanti et al. §5,
	// "2sbh per layer" in 16 bits.
	FullCheckpointing
	// SelectiveCheckpointing drops the attention core (scores,
	// probabilities, their dropout masks, or the kernel's log-sum-exp)
	// and recomputes it (Korthikanti et al. §5, "selective activation
	// recomputation").
	SelectiveCheckpointing
	// EveryKCheckpointing checkpoints one block in every
	// [Workload.CheckpointEvery] (ceil(layers/k) blocks keep only their
	// input; the rest keep everything).
	EveryKCheckpointing
	// OffloadActivations moves every saved tensor to host memory as it is
	// saved (torch.autograd.graph.save_on_cpu): nothing stays on the GPU
	// but the block being computed; nothing is recomputed.
	OffloadActivations

	numPolicies
)

// String returns "none", "full", "selective", "every-k" or "offload".
func (c Checkpointing) String() string {
	switch c {
	case NoCheckpointing:
		return "none"
	case FullCheckpointing:
		return "full"
	case SelectiveCheckpointing:
		return "selective"
	case EveryKCheckpointing:
		return "every-k"
	case OffloadActivations:
		return "offload"
	}
	return "Checkpointing(" + strconv.Itoa(int(c)) + ")"
}

// Workload is the shape of one forward/backward pass whose activations
// [Spec.Activations] estimates.
type Workload struct {
	// Batch is the micro-batch size in sequences (images for a vision
	// encoder). It must be at least 1.
	Batch int64
	// SeqLen is the number of text tokens per sequence: the language
	// model's input without image tokens, the decoder's input of an
	// encoder–decoder. It must be at least 1, except for a vision encoder,
	// whose sequence is set by its image size.
	SeqLen int64
	// EncoderLen is the encoder's sequence length of an encoder–decoder.
	// Zero means SeqLen for T5 and the encoder's Positions (1500 frames,
	// 30 s of audio) for Whisper, which always pads to 30 s.
	EncoderLen int64
	// DType is the compute dtype of activations: FP32, TF32, BF16 or
	// FP16. Zero means the Spec's DType when that is one of these, else
	// BF16.
	DType gpumem.DType
	// Attention is the attention kernel (zero: Eager).
	Attention AttentionKernel
	// Softmax overrides the dtype of the eager softmax (zero: the
	// family's, see [Eager]).
	Softmax Softmax
	// HeadChunk, with Eager attention, computes the score and softmax
	// matrices HeadChunk heads at a time (a loop over head slices, as
	// the 32k-token block attention's chunked loop does), so the forward and
	// no-grad transients hold batch·HeadChunk·s² elements instead of
	// batch·heads·s². Zero (or at least the head count) means all heads
	// at once. What training saves for backward is unchanged: every
	// head's probabilities are kept.
	HeadChunk int64
	// TensorParallel is Megatron's tensor-parallel degree t (zero: 1):
	// each rank holds Heads/t query heads, KVHeads/t key/value heads (one,
	// replicated, when KVHeads < t), Intermediate/t of the MLP (and of
	// every expert) and Vocab/t of the logits (vocab-parallel cross
	// entropy); LayerNorms, dropout masks and each block's input stay
	// whole on every rank (Korthikanti et al. 2022, eq. 2: the 10·sbh
	// left replicated). t must divide Heads, and KVHeads and t must
	// divide one another.
	TensorParallel int64
	// SequenceParallel splits what tensor parallelism leaves replicated
	// (norms, dropout masks, block inputs, the final norm and head input)
	// along the sequence over the t ranks (Korthikanti et al. 2022, §4.2.2,
	// eq. 4). It needs TensorParallel above 1.
	SequenceParallel bool
	// ContextParallel is the context-parallel degree (Megatron-Core
	// --context-parallel-size, ring attention): each rank holds SeqLen/cp
	// tokens of every activation. It needs a fused attention kernel (the
	// ring exchanges K/V blocks; no eager implementation exists), a
	// decoder-only model, and a SeqLen divisible by cp (zero: 1).
	ContextParallel int64
	// Checkpointing is the recomputation policy (zero: none).
	Checkpointing Checkpointing
	// CheckpointEvery is k for EveryKCheckpointing (zero means 1, which
	// equals full checkpointing).
	CheckpointEvery int64
	// Dropout says that the model's dropout layers are active (p > 0):
	// each saves a 1-byte mask per element on CUDA (ATen native_dropout),
	// and eager attention also saves the dropped probabilities.
	Dropout bool
	// Train says that autograd records the graph. When false (inference,
	// torch.no_grad) nothing is saved; only transients and logits remain.
	Train bool
	// Images is the number of images per sequence of a multimodal model
	// (zero: none).
	Images int64
	// ImageTokens overrides the number of language-model tokens per image.
	// Zero means the vision tower's patch count ((336/14)² = 576 for
	// LLaVA-1.5; the CLS token is dropped, vision_feature_select_strategy
	// "default").
	ImageTokens int64
	// FreezeVision says that the vision tower of a multimodal model is
	// frozen and its input needs no gradient (LLaVA's second stage): the
	// tower saves nothing.
	FreezeVision bool
	// Loss is how a training step computes the LM head and the
	// cross-entropy (zero: the full loss, as transformers'
	// ForCausalLMLoss); see loss.go. Any other kind needs Train and a
	// causal language model, and no tensor parallelism.
	Loss Loss
	// HeadGrad is the dtype of the LM head weight's gradient when the
	// head is trained (Invalid: a frozen head): the fused losses
	// allocate it themselves (Liger's grad_weight in forward,
	// cut-cross-entropy's dc in backward). Other losses ignore it.
	HeadGrad gpumem.DType
	// Labels, in a pass without gradients, says that the model is given
	// labels and computes its loss (evaluation: Trainer.evaluate's
	// prediction_step runs compute_loss under torch.no_grad and keeps
	// the logits): the loss's fp32 upcast of the logits and its
	// log-softmax exist beside them ([Activations.LogitsFP32]). It is
	// ignored in training, which always computes the loss.
	Labels bool
	// Autocast says that the 16-bit compute dtype comes from
	// torch.autocast over fp32 weights (AMP), whose CUDA op lists
	// (aten/src/ATen/autocast_mode.cpp) run some ops in fp32 whatever
	// their input: log_softmax is fp32_set_opt_dtype, so the plain
	// CrossEntropyLoss of BERT, T5, Whisper and OPT computes an fp32
	// log-softmax of the 16-bit logits (see [Activations.Head]).
	Autocast bool
	// LogitsToKeep, in a pass without gradients, projects only the last
	// LogitsToKeep positions of each sequence to logits (transformers'
	// logits_to_keep: hidden_states[:, -k:, :]); zero means every
	// position, and k above the sequence means every position too. It
	// must be zero in training.
	LogitsToKeep int64
	// SSMKernel is the implementation of the state-space mixers of Mamba,
	// Mamba-2 and Jamba (zero: FusedSSM, mamba_ssm's CUDA kernels);
	// other families ignore it.
	SSMKernel SSMKernel
	// Backend is the device whose kernels run the pass (zero: CUDA);
	// [CPU] lists what the CPU's kernels save differently.
	Backend Backend
	// NoAttentionMask says that transformers calls SDPA without an
	// attention mask (is_causal instead), and so with enable_gqa=True
	// for grouped-query heads, where the CUDA kernels and the CPU's
	// differ (see [CPU]). transformers v4.57.1 (commit 8cb5963c,
	// masking_utils.py) skips the causal mask when nothing is padded,
	// but without a cache it first looks for packed sequences in the
	// position ids, and the packed-sequence mask it then always makes
	// forbids the skip: a model that holds a cache (generate(); a
	// training forward without gradient checkpointing, whose use_cache
	// defaults to the config's True) gets no mask, one without a cache
	// (use_cache=False, gradient checkpointing) a boolean one, and
	// sdpa_attention.py's use_gqa_in_sdpa then repeats the K/V heads
	// with repeat_kv instead.
	NoAttentionMask bool
	// Compile is what of a training step runs under torch.compile
	// (zero: nothing), see [Compile]: compiled blocks save the min-cut
	// partitioner's set, a compiled loss neither upcasts nor saves fp32
	// log-probabilities. Training of Llama-style decoders only.
	Compile Compile
	// FrozenBase, when its Rank is set, says that LoRA adapters train on
	// a frozen base: frozen weights save nothing for their gradients
	// (see [FrozenBase]). Pre-norm blocks follow it; other layouts are
	// estimated as if the base trained. [FrozenInput] (its Input set)
	// says that every weight is frozen and the input requires grad
	// instead: every block layout but sandwich-norm and MLA blocks
	// follows it, encoder–decoders and vision encoders included.
	FrozenBase FrozenBase
}

// LayerActivations is the activation memory of one kind of block, the same
// for each of its Count identical instances.
type LayerActivations struct {
	// Part is the sub-model: "" for a single model, "encoder", "decoder",
	// "vision", "projector" or "language".
	Part string
	// Kind names the block: "decoder", "moe", "dense" (the dense layers of
	// an MoE model), "encoder", "cross" (a decoder block with
	// cross-attention), "projector".
	Kind string
	// Count is the number of identical blocks.
	Count int64
	// Tokens is the sequence length the block sees.
	Tokens int64
	// Saved is the bytes one block saves for backward without
	// checkpointing.
	Saved gpumem.Bytes
	// Attention is the part of Saved that selective recomputation drops:
	// the eager probabilities (and softmax copies, dropout masks and
	// soft-capping tanh), or a fused kernel's log-sum-exp.
	Attention gpumem.Bytes
	// Input is the block's input, what full checkpointing keeps.
	Input gpumem.Bytes
	// Kept is the bytes one block keeps on the GPU under the workload's
	// policy (for EveryKCheckpointing, the average over the blocks, rounded
	// up; KeptTotal is exact).
	Kept gpumem.Bytes
	// KeptTotal is the bytes all Count blocks keep under the policy.
	KeptTotal gpumem.Bytes
	// Forward is the largest transient of one block during forward, on top
	// of what it saves: the eager score matrix and its scaled/masked copy,
	// rotary temporaries. A block that runs without recording (inference,
	// the first forward of a checkpointed block) saves nothing, and Forward
	// is its whole live set: input, q/k/v and scores, or the MLP's inner
	// tensors.
	Forward gpumem.Bytes
	// Backward is the largest transient of one block during backward:
	// gradients of the probabilities (with the fp32 copy), of the MLP's
	// inner tensors, or a fused kernel's fp32 accumulators.
	Backward gpumem.Bytes
	// FLOPs is one block's forward floating-point operations (2 per
	// multiply-add), for recomputation costs.
	FLOPs int64
	// AttentionFLOPs is the part of FLOPs in the attention core (the two
	// batched matrix products).
	AttentionFLOPs int64
}

// Activations is the activation memory of one training (or inference)
// step of a Spec under a Workload.
type Activations struct {
	// Layers lists each kind of block once, with its count.
	Layers []LayerActivations
	// Tokens is the language model's (or decoder's) sequence length,
	// including image tokens.
	Tokens int64
	// ImageTokens is the number of language-model tokens per image.
	ImageTokens int64
	// Embedding is what the embeddings save: BERT's embedding LayerNorm,
	// a ViT's pixel input to the patch convolution, Whisper's
	// convolutional front-end, dropout masks.
	Embedding gpumem.Bytes
	// TokenIDs is the integer tensors saved: token ids (by the embedding)
	// and labels (by the loss), int64.
	TokenIDs gpumem.Bytes
	// Shared is what every block reads but is computed once: rotary
	// cos/sin tables (batch·seq·head_dim each), an encoder's output read
	// by every cross-attention, T5's relative-position bucket indices, and
	// under reentrant full or every-k checkpointing with eager attention
	// the 4-D causal mask (seq² elements), which the checkpoint saves as a
	// block argument.
	Shared gpumem.Bytes
	// FinalNorm is what the final norm saves (and BERT's MLM transform).
	FinalNorm gpumem.Bytes
	// Inputs is the float inputs a training loop holds through the step
	// (a vision model's pixel values, a speech model's log-mel
	// features), in the dtype it passed them: part of Embedding, where
	// the first convolution saves them or, under autocast, beside the
	// 16-bit cast it saves; after backward the loop still holds them.
	Inputs gpumem.Bytes
	// EncoderNorm is the part of FinalNorm an encoder–decoder's encoder
	// saves after its last block (its final norm, and T5's dropout
	// after it): released by the encoder's backward, which runs last,
	// not with the decoder's final norm and the head.
	EncoderNorm gpumem.Bytes
	// Head is what the LM head and the loss save: the head's input and
	// cross_entropy's log-softmax of batch·seq·vocab, in fp32 for causal
	// LMs (ForCausalLMLoss upcasts) and in the compute dtype for BERT, T5,
	// Whisper and OPT (its own loss), plus gemma2's soft-capping tanh.
	Head gpumem.Bytes
	// Logits is the output logits, batch·seq·vocab in the compute dtype,
	// held by the model output until backward.
	Logits gpumem.Bytes
	// LogitsFP32 is the fp32 upcast of the logits (transformers'
	// ForCausalLMLoss: logits.float()), a transient of the loss in forward;
	// 0 when the compute dtype is 4 bytes. Under another Workload.Loss it
	// is that loss's largest forward transient: one chunk's upcast
	// (chunked), one chunk's logits and the weight-gradient product
	// (Liger), the valid-index build (cut cross-entropy); see loss.go.
	LogitsFP32 gpumem.Bytes
	// LossGrad is the largest transient of the loss backward: the
	// gradients of the log-softmax output and of its input, live together
	// (8 bytes per logit in fp32); one chunk's under the chunked loss,
	// none under Liger's (its gradients were made in forward), the
	// gradients of the hidden states and the head's weight under cut
	// cross-entropy.
	LossGrad gpumem.Bytes
	// HeadWeightGrad is the LM head weight's gradient when the loss
	// allocates it in forward (Liger's fused linear cross entropy,
	// grad_weight): resident from the loss to backward, where it becomes
	// the head's gradient. Zero for the other losses.
	HeadWeightGrad gpumem.Bytes
	// LogitsReleased says that the logits are freed after the loss,
	// before backward (torchtune's recipes delete the chunked output
	// list), so the loss backward does not see them.
	LogitsReleased bool
	// LogitsSaved says that the loss saves the logits for its backward
	// (a compiled loss, see [Compile]): they live until the loss's
	// backward has run, whatever the loop holds.
	LogitsSaved bool
	// Forward is the largest per-block transient during forward.
	Forward gpumem.Bytes
	// Backward is the largest per-block transient during backward, with
	// the recomputed block's saved tensors under full or every-k
	// checkpointing.
	Backward gpumem.Bytes
	// Recompute is the extra forward work the policy costs in backward,
	// as a fraction of one forward pass's FLOPs (0 for none and offload;
	// about 0.9–1 for full).
	Recompute float64
	// Offloaded is the bytes moved to host memory under
	// OffloadActivations (0 otherwise).
	Offloaded gpumem.Bytes
	// FLOPs is one forward pass's floating-point operations.
	FLOPs int64
}

// LayersTotal returns the total bytes all blocks keep under the policy.
func (a Activations) LayersTotal() gpumem.Bytes {
	var t gpumem.Bytes
	for _, l := range a.Layers {
		t += l.KeptTotal
	}
	return t
}

// Total returns the activation bytes resident on the GPU at the end of the
// forward pass: every block's kept bytes, the embedding, token ids, shared
// tables, final norm, head and logits. Transients (Forward, Backward,
// LogitsFP32, LossGrad) come on top at their own phases.
func (a Activations) Total() gpumem.Bytes {
	return a.LayersTotal() + a.Embedding + a.TokenIDs + a.Shared + a.FinalNorm + a.Head + a.Logits + a.HeadWeightGrad
}

// ForwardPeak returns the largest activation footprint of the forward
// pass: the larger of the blocks' phase (everything the blocks, the
// embedding and the shared tables keep, plus the largest block
// transient) and the loss (Total plus the logits' fp32 upcast).
func (a Activations) ForwardPeak() gpumem.Bytes {
	blocks := a.LayersTotal() + a.Embedding + a.TokenIDs + a.Shared + a.Forward
	return max(blocks, a.Total()+a.LogitsFP32)
}

// Peak returns the largest activation footprint of the step, the largest
// of four phases: the forward blocks and the loss forward (see
// [Activations.ForwardPeak]), the loss backward (Total plus LossGrad),
// and the backward blocks (Total without the head and logits, released
// after the loss backward, plus the largest block transient, which under
// full checkpointing includes the recomputed block). Each transient is
// taken on top of everything saved at its phase, so the figure errs high;
// parameter gradients are not included. When the loss dominates (large
// vocabularies) the peak is Total + LossGrad at the start of backward.
func (a Activations) Peak() gpumem.Bytes {
	back := a.Total() - a.Head - a.Logits - a.HeadWeightGrad + a.Backward
	loss := a.Total() + a.LossGrad
	if a.LogitsReleased {
		loss -= a.Logits
	}
	return max(a.ForwardPeak(), loss, back)
}

// PolicyCost is the activation memory and recompute cost of one
// checkpointing policy, for ranking policies.
type PolicyCost struct {
	// Policy is the checkpointing policy.
	Policy Checkpointing
	// Every is k for EveryKCheckpointing, 0 otherwise.
	Every int64
	// Total and Peak are [Activations.Total] and [Activations.Peak]
	// under the policy.
	Total, Peak gpumem.Bytes
	// Recompute is the extra forward work, a fraction of one forward
	// pass ([Activations.Recompute]).
	Recompute float64
	// Offloaded is the bytes moved to host memory.
	Offloaded gpumem.Bytes
}

// CheckpointingCosts returns the cost of every checkpointing policy for w
// (whose own Checkpointing is ignored), in the order none, selective,
// every-k (k = w.CheckpointEvery, or 2 when that is below 2), full,
// offload. Which of selective and every-k keeps less depends on the
// kernel and the sequence (selective drops only the attention core, which
// is quadratic with eager attention and a few rows with Flash).
// Allocators pick the cheapest recompute whose Peak fits.
func (s Spec) CheckpointingCosts(w Workload) ([]PolicyCost, error) {
	k := w.CheckpointEvery
	if k < 2 {
		k = 2
	}
	policies := [...]PolicyCost{{Policy: NoCheckpointing}, {Policy: SelectiveCheckpointing},
		{Policy: EveryKCheckpointing, Every: k}, {Policy: FullCheckpointing}, {Policy: OffloadActivations}}
	out := make([]PolicyCost, 0, len(policies))
	for _, p := range policies {
		w.Checkpointing, w.CheckpointEvery = p.Policy, p.Every
		a, err := s.Activations(w)
		if err != nil {
			return nil, err
		}
		p.Total, p.Peak, p.Recompute, p.Offloaded = a.Total(), a.Peak(), a.Recompute, a.Offloaded
		out = append(out, p)
	}
	return out, nil
}

// actMaxTokens bounds Batch, SeqLen and the like: 2^40 is far beyond any job
// and keeps products of a few of them checkable.
const actMaxTokens = 1 << 40

// Activations estimates the activation memory of one step of s under w:
// per kind of block (identical blocks computed once and multiplied by
// their count), the embedding, final norm, head, logits and loss, the
// forward and backward transients and the policy's recompute cost. The
// derivation is described at the top of activations.go. It fails with a
// *gpumem.FieldError naming the field for an invalid Spec or Workload, and
// with gpumem.ErrRange when a size overflows int64.
func (s Spec) Activations(w Workload) (Activations, error) {
	return s.AppendActivations(nil, w)
}

// AppendActivations is [Spec.Activations] with the per-block figures
// appended to dst[:0], so a caller that estimates often (a scheduler's
// hot path) can pass a reused or stack buffer and allocate nothing. A
// few entries suffice: one per kind of block (a multimodal model has
// three or four).
func (s Spec) AppendActivations(dst []LayerActivations, w Workload) (Activations, error) {
	if err := s.CheckActivations(); err != nil {
		return Activations{}, err
	}
	return s.appendChecked(dst, w)
}

// CheckActivations returns the error [Spec.AppendActivations] returns
// for s whatever the workload, nil when the activation model covers s's
// fields. It depends on s alone: a caller that estimates one Spec often
// (budget.NewModel) checks it once and calls
// [Spec.AppendActivationsChecked].
func (s Spec) CheckActivations() error {
	if s.Inventory != nil && s.Hidden == 0 {
		return gpumem.Errorf("Spec.Inventory", len(s.Inventory), gpumem.ErrUnsupported, "activations need the architecture fields, not only a tensor inventory")
	}
	return s.checkAct("Spec")
}

// AppendActivationsChecked is [Spec.AppendActivations] without the
// checks of [Spec.CheckActivations], for a Spec they passed (the Spec's
// checks cost about as much as a tenth of the estimate); the Workload is
// checked. Called on a Spec that fails them, its answer is undefined.
func (s *Spec) AppendActivationsChecked(dst []LayerActivations, w Workload) (Activations, error) {
	return s.appendChecked(dst, w)
}

// appendChecked is AppendActivations once s is checked.
func (s *Spec) appendChecked(dst []LayerActivations, w Workload) (Activations, error) {
	e, err := w.check(s)
	if err != nil {
		return Activations{}, err
	}
	l := layoutOf(s)
	switch l {
	case layoutMamba:
		if err := w.checkMamba(); err != nil {
			return Activations{}, err
		}
	case layoutMamba2, layoutJamba:
		if err := w.checkMamba(); err != nil {
			return Activations{}, err
		}
	case layoutBackbone:
		if err := w.checkBackbone(*s); err != nil {
			return Activations{}, err
		}
	}
	if cp := w.ContextParallel; cp > 1 {
		// Each rank holds its SeqLen/cp tokens of every tensor; the
		// fused kernel saves the rank's q, k, v, output and log-sum-exp
		// (the K/V blocks of the ring are transients).
		w.SeqLen /= cp
	}
	var c actCalc
	var a Activations
	switch l {
	case layoutMultimodal:
		c.multimodal(&a, *s, w, e)
	case layoutT5, layoutWhisper:
		c.encDec(&a, *s, w, e)
	case layoutMamba:
		c.mamba(&a, *s, w, e)
	case layoutMamba2:
		c.mamba2(&a, *s, w, e)
	case layoutJamba:
		c.jamba(&a, *s, w, e)
	case layoutBackbone:
		c.backbone(&a, *s, w, e)
	case layoutVision, layoutCLIPVision, layoutSiglipVision:
		tokens := c.vision(&a, *s, w, e, "", w.Batch, !w.Train)
		if s.Head == HeadImageCls {
			T := c.m(w.Batch, tokens)
			c.taskHead(&a, *s, w, HeadImageCls, e, T, T, false)
		}
		c.finish(&a, w)
	default:
		c.decoderOnly(&a, s, w, e, "", w.SeqLen)
	}
	if c.bad {
		// Name the larger of the two dimensions the bytes grow with (the
		// sequence, quadratically with eager attention).
		field, v := "Workload.SeqLen", w.SeqLen
		if w.Batch > w.SeqLen {
			field, v = "Workload.Batch", w.Batch
		}
		return Activations{}, gpumem.Errorf(field, v, gpumem.ErrRange, "activation bytes overflow int64 (batch %d, sequence %d)", w.Batch, w.SeqLen)
	}
	out := a
	out.Layers = append(dst[:0], c.layers()...)
	return out, nil
}

// checkAct checks the fields the activation model reads; it is cheaper
// than [Spec.Validate], which builds the tensor inventory.
func (s Spec) checkAct(path string) error {
	if s.Family == "" {
		return gpumem.Errorf(path+".Family", s.Family, gpumem.ErrInvalid, "empty model family")
	}
	if layoutOf(&s) == layoutMamba {
		return s.validateMamba(path)
	}
	if layoutOf(&s) == layoutMamba2 {
		return s.validateMamba2(path)
	}
	if layoutOf(&s) == layoutJamba {
		return s.validateJamba(path)
	}
	if l := layoutOf(&s); l == layoutFlux || l == layoutSD3 {
		return gpumem.Errorf(path+".Family", s.Family, gpumem.ErrUnsupported,
			"a Flux or SD3 transformer runs in its pipeline: estimate it with budget.EstimatePipeline (gpumem estimate --pipeline flux.1-dev or sd3-medium, or --diffusers DIR)")
	}
	if layoutOf(&s) == layoutZamba {
		if err := s.validateZamba(path); err != nil {
			return err
		}
		return gpumem.Errorf(path+".Family", s.Family, gpumem.ErrUnsupported,
			"the activations of a Zamba model are not modelled: its parameters, KV cache and Mamba state are (a load job)")
	}
	if l := layoutOf(&s); l == layoutUNet || l == layoutVAE {
		return gpumem.Errorf(path+".Family", s.Family, gpumem.ErrUnsupported,
			"a diffusers UNet or VAE runs in its pipeline: estimate it with budget.EstimatePipeline (gpumem estimate --pipeline NAME or --diffusers DIR)")
	}
	if s.Head >= numHeads || !s.headSupported(s.Head) {
		return gpumem.Errorf(path+".Head", s.Head.String(), gpumem.ErrUnsupported, "%s has no %s head modelled", s.Family, s.Head)
	}
	if s.Labels < 0 || s.Labels > 1<<24 {
		return gpumem.Errorf(path+".Labels", s.Labels, gpumem.ErrInvalid, "must be in [0, 2^24]")
	}
	l := layoutOf(&s)
	if l == layoutBackbone {
		return s.validateBackbone(path)
	}
	if l == layoutMultimodal {
		if s.Vision == nil {
			return gpumem.Errorf(path+".Vision", nil, gpumem.ErrInvalid, "%s needs a vision tower", s.Family)
		}
		if s.Text == nil {
			return gpumem.Errorf(path+".Text", nil, gpumem.ErrInvalid, "%s needs a language model", s.Family)
		}
		if err := s.Vision.checkAct(path + ".Vision"); err != nil {
			return err
		}
		return s.Text.checkAct(path + ".Text")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Layers", s.Layers}, {"Hidden", s.Hidden}, {"Heads", s.Heads}, {"KVHeads", s.KVHeads}, {"HeadDim", s.HeadDim}} {
		if f.v <= 0 || f.v > maxDim {
			return gpumem.Errorf(path+"."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, 2^40]")
		}
	}
	if s.Layers > 1<<16 {
		return gpumem.Errorf(path+".Layers", s.Layers, gpumem.ErrRange, "more than 65536 layers")
	}
	if s.KVHeads > s.Heads || s.Heads%s.KVHeads != 0 {
		return gpumem.Errorf(path+".KVHeads", s.KVHeads, gpumem.ErrInvalid, "must divide the %d query heads", s.Heads)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Intermediate", s.Intermediate}, {"Vocab", s.Vocab}, {"MoE.Experts", s.MoE.Experts}, {"MoE.Active", s.MoE.Active},
		{"MoE.Intermediate", s.MoE.Intermediate}, {"MoE.Shared", s.MoE.Shared}, {"MoE.SharedIntermediate", s.MoE.SharedIntermediate},
		{"MoE.DenseFirst", s.MoE.DenseFirst}, {"MoE.Step", s.MoE.Step}, {"Image.Size", s.Image.Size},
		{"Image.Patch", s.Image.Patch}, {"Image.Channels", s.Image.Channels}, {"MelBins", s.MelBins},
		{"MLA.KVLoRARank", s.MLA.KVLoRARank}, {"MLA.QLoRARank", s.MLA.QLoRARank},
		{"MLA.QKNopeHeadDim", s.MLA.QKNopeHeadDim}, {"MLA.QKRopeHeadDim", s.MLA.QKRopeHeadDim}, {"MLA.VHeadDim", s.MLA.VHeadDim}} {
		if f.v < 0 || f.v > maxDim {
			return gpumem.Errorf(path+"."+f.name, f.v, gpumem.ErrInvalid, "must be in [0, 2^40]")
		}
	}
	if s.MoE.Experts > 0 {
		if s.MoE.Active <= 0 || s.MoE.Active > s.MoE.Experts {
			return gpumem.Errorf(path+".MoE.Active", s.MoE.Active, gpumem.ErrInvalid, "must be in [1, %d experts]", s.MoE.Experts)
		}
		if s.MoE.Intermediate <= 0 {
			return gpumem.Errorf(path+".MoE.Intermediate", s.MoE.Intermediate, gpumem.ErrInvalid, "must be positive")
		}
	}
	switch l {
	case layoutVision, layoutCLIPVision, layoutSiglipVision:
		if s.Image.Patch <= 0 || s.Image.Size < s.Image.Patch {
			return gpumem.Errorf(path+".Image.Patch", s.Image.Patch, gpumem.ErrInvalid, "must be positive and at most the %d-pixel image", s.Image.Size)
		}
		if s.Image.Size > 1<<20 {
			return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrRange, "exceeds 2^20 pixels")
		}
	case layoutT5, layoutWhisper:
		if s.Encoder == nil {
			return gpumem.Errorf(path+".Encoder", nil, gpumem.ErrInvalid, "%s needs an encoder", s.Family)
		}
		enc := *s.Encoder
		for _, f := range []struct {
			name string
			v    int64
		}{{"Encoder.Layers", enc.Layers}, {"Encoder.Heads", enc.Heads}, {"Encoder.Intermediate", enc.Intermediate}} {
			if f.v <= 0 || f.v > maxDim {
				return gpumem.Errorf(path+"."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, 2^40]")
			}
		}
		if enc.Layers > 1<<16 {
			return gpumem.Errorf(path+".Encoder.Layers", enc.Layers, gpumem.ErrRange, "more than 65536 layers")
		}
		if l == layoutWhisper && (enc.Positions <= 0 || enc.Positions > actMaxTokens) {
			return gpumem.Errorf(path+".Encoder.Positions", enc.Positions, gpumem.ErrInvalid, "must be positive (1500 audio frames for 30 s)")
		}
	}
	if layoutOf(&s).hasVocab() && s.Vocab <= 0 {
		return gpumem.Errorf(path+".Vocab", s.Vocab, gpumem.ErrInvalid, "must be positive")
	}
	return nil
}

// check validates w and returns the compute dtype's element size.
func (w Workload) check(s *Spec) (int64, error) {
	if w.Batch < 1 || w.Batch > actMaxTokens {
		return 0, gpumem.Errorf("Workload.Batch", w.Batch, gpumem.ErrInvalid, "must be in [1, 2^40]")
	}
	l := layoutOf(s)
	vision := l == layoutVision || l == layoutCLIPVision || l == layoutSiglipVision || l == layoutBackbone
	if (w.SeqLen < 1 && !vision) || w.SeqLen < 0 || w.SeqLen > actMaxTokens {
		return 0, gpumem.Errorf("Workload.SeqLen", w.SeqLen, gpumem.ErrInvalid, "must be in [1, 2^40]")
	}
	if w.EncoderLen < 0 || w.EncoderLen > actMaxTokens {
		return 0, gpumem.Errorf("Workload.EncoderLen", w.EncoderLen, gpumem.ErrInvalid, "must be in [0, 2^40]")
	}
	if w.FrozenBase.Rank < 0 || w.FrozenBase.Rank > actMaxTokens {
		return 0, gpumem.Errorf("Workload.FrozenBase.Rank", w.FrozenBase.Rank, gpumem.ErrInvalid, "must be in [0, 2^40]")
	}
	if w.Images < 0 || w.Images > 1<<20 {
		return 0, gpumem.Errorf("Workload.Images", w.Images, gpumem.ErrInvalid, "must be in [0, 2^20]")
	}
	if w.Images > 0 && (s.Family == "qwen2_vl" || s.Family == "qwen2_5_vl") {
		return 0, gpumem.Errorf("Workload.Images", w.Images, gpumem.ErrUnsupported,
			"%s's dynamic-resolution vision tower is not in the activation model; count the image tokens in SeqLen", s.Family)
	}
	if w.ImageTokens < 0 || w.ImageTokens > 1<<30 {
		return 0, gpumem.Errorf("Workload.ImageTokens", w.ImageTokens, gpumem.ErrInvalid, "must be in [0, 2^30]")
	}
	if w.Attention >= numKernels {
		return 0, gpumem.Errorf("Workload.Attention", w.Attention, gpumem.ErrInvalid, "unknown attention kernel")
	}
	if w.Backend >= numBackends {
		return 0, gpumem.Errorf("Workload.Backend", w.Backend, gpumem.ErrInvalid, "unknown backend")
	}
	if w.Softmax >= numSoftmax {
		return 0, gpumem.Errorf("Workload.Softmax", w.Softmax, gpumem.ErrInvalid, "unknown softmax dtype")
	}
	if w.Checkpointing >= numPolicies {
		return 0, gpumem.Errorf("Workload.Checkpointing", w.Checkpointing, gpumem.ErrInvalid, "unknown checkpointing policy")
	}
	if w.HeadChunk < 0 || w.HeadChunk > 1<<20 {
		return 0, gpumem.Errorf("Workload.HeadChunk", w.HeadChunk, gpumem.ErrInvalid, "must be in [0, 2^20]")
	}
	if err := w.checkParallel(s); err != nil {
		return 0, err
	}
	if w.CheckpointEvery < 0 || w.CheckpointEvery > 1<<16 {
		return 0, gpumem.Errorf("Workload.CheckpointEvery", w.CheckpointEvery, gpumem.ErrInvalid, "must be in [0, 65536]")
	}
	if err := w.checkLoss(s); err != nil {
		return 0, err
	}
	if w.Compile != 0 {
		if err := w.checkCompile(s); err != nil {
			return 0, err
		}
	}
	switch w.computeDType(s) {
	case gpumem.FP32, gpumem.TF32:
		return 4, nil
	case gpumem.BF16, gpumem.FP16:
		return 2, nil
	}
	return 0, gpumem.Errorf("Workload.DType", w.DType, gpumem.ErrUnsupported, "compute dtype must be fp32, tf32, bf16 or fp16")
}

// computeDType resolves Workload.DType: the Spec's (the language model's
// of a multimodal Spec) when zero and a compute dtype, else BF16.
func (w Workload) computeDType(s *Spec) gpumem.DType {
	d := w.DType
	if d == gpumem.Invalid {
		d = s.DType
		if layoutOf(s) == layoutMultimodal && s.Text != nil && d == gpumem.Invalid {
			d = s.Text.DType
		}
		switch d {
		case gpumem.FP32, gpumem.TF32, gpumem.BF16, gpumem.FP16:
		default:
			d = gpumem.BF16
		}
	}
	return d
}

// checkParallel validates the tensor, sequence and context degrees against s.
func (w Workload) checkParallel(s *Spec) error {
	t := w.TensorParallel
	if t < 0 || t > 1<<16 {
		return gpumem.Errorf("Workload.TensorParallel", t, gpumem.ErrInvalid, "must be in [0, 65536]")
	}
	if w.SequenceParallel && t < 2 {
		return gpumem.Errorf("Workload.SequenceParallel", true, gpumem.ErrInvalid, "sequence parallelism needs TensorParallel above 1 (got %d)", t)
	}
	if cp := w.ContextParallel; cp != 0 && cp != 1 {
		switch {
		case cp < 0 || cp > 1<<16:
			return gpumem.Errorf("Workload.ContextParallel", cp, gpumem.ErrInvalid, "must be in [0, 65536]")
		case w.Attention == Eager:
			return gpumem.Errorf("Workload.ContextParallel", cp, gpumem.ErrUnsupported, "context parallelism needs a fused attention kernel (flash or sdpa), not eager")
		case s.Encoder != nil || s.Vision != nil || s.Text != nil || s.Image.Size > 0:
			return gpumem.Errorf("Workload.ContextParallel", cp, gpumem.ErrUnsupported, "context parallelism is modelled for decoder-only language models, not %s", s.Family)
		case w.SeqLen%cp != 0:
			return gpumem.Errorf("Workload.ContextParallel", cp, gpumem.ErrInvalid, "must divide the sequence length %d", w.SeqLen)
		}
	}
	if t <= 1 {
		return nil
	}
	check := func(path string, p *Spec) error {
		if p.Heads%t != 0 {
			return gpumem.Errorf("Workload.TensorParallel", t, gpumem.ErrInvalid, "must divide %s.Heads = %d", path, p.Heads)
		}
		if kv := p.KVHeads; kv%t != 0 && t%kv != 0 {
			return gpumem.Errorf("Workload.TensorParallel", t, gpumem.ErrInvalid, "%s.KVHeads = %d and t must divide one another", path, kv)
		}
		if p.Encoder != nil && p.Encoder.Heads%t != 0 {
			return gpumem.Errorf("Workload.TensorParallel", t, gpumem.ErrInvalid, "must divide %s.Encoder.Heads = %d", path, p.Encoder.Heads)
		}
		return nil
	}
	if s.Vision != nil {
		if err := check("Spec.Vision", s.Vision); err != nil {
			return err
		}
	}
	if s.Text != nil {
		return check("Spec.Text", s.Text)
	}
	return check("Spec", s)
}

// tp returns the tensor-parallel degree (at least 1).
func (w Workload) tp() int64 { return max(1, w.TensorParallel) }

// sp returns the divisor of the replicated per-token tensors: t under
// sequence parallelism, else 1.
func (w Workload) sp() int64 {
	if w.SequenceParallel {
		return w.tp()
	}
	return 1
}

// split returns bl as one of t tensor-parallel ranks holds it (Megatron's
// column/row split of attention and MLP): heads, key/value heads (one,
// replicated, below t), MLP and expert inner sizes divided by t.
func (bl actBlock) split(t int64) actBlock {
	if t <= 1 {
		return bl
	}
	bl.H /= t
	if bl.KV >= t {
		bl.KV /= t
	} else {
		bl.KV = 1
	}
	bl.I, _ = checked.CeilDiv(bl.I, t)
	if bl.moe != nil {
		m := *bl.moe
		m.Intermediate, _ = checked.CeilDiv(m.Intermediate, t)
		m.SharedIntermediate, _ = checked.CeilDiv(m.SharedIntermediate, t)
		bl.moe = &m
	}
	return bl
}

// actCalc does checked int64 arithmetic; any overflow sets bad, and the
// caller reports one ErrRange.
type actCalc struct {
	bad bool
	// The per-block figures, in order: the first eight in buf (n of
	// them), all of them in more once there are more. A fixed array keeps
	// AppendActivations allocation-free: a slice grown through a pointer
	// would escape to the heap.
	buf  [8]LayerActivations
	n    int
	more []LayerActivations
}

// push appends a block's figures.
func (c *actCalc) push(l LayerActivations) {
	switch {
	case c.more != nil:
		c.more = append(c.more, l)
	case c.n < len(c.buf):
		c.buf[c.n] = l
		c.n++
	default:
		c.more = make([]LayerActivations, 0, 2*len(c.buf))
		c.more = append(append(c.more, c.buf[:]...), l)
	}
}

// layers returns the blocks' figures pushed so far.
func (c *actCalc) layers() []LayerActivations {
	if c.more != nil {
		return c.more
	}
	return c.buf[:c.n]
}

// m returns the product of xs.
func (c *actCalc) m(xs ...int64) int64 {
	v, ok := checked.MulAll(xs...)
	if !ok {
		c.bad = true
		return 0
	}
	return v
}

// a returns the sum of xs.
func (c *actCalc) a(xs ...int64) int64 {
	var s int64
	for _, x := range xs {
		var ok bool
		if s, ok = checked.Add(s, x); !ok {
			c.bad = true
			return 0
		}
	}
	return s
}

func actMax(xs ...int64) int64 {
	var m int64
	for _, x := range xs {
		if x > m {
			m = x
		}
	}
	return m
}

func actB2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// actNorm is how a block's norm saves its input.
type actNorm uint8

const (
	// actLN is nn.LayerNorm (native_layer_norm): it saves its input and
	// the per-row mean and rstd, kept in fp32 on CUDA for 16-bit inputs:
	// e·T·h + 8·T bytes.
	actLN actNorm = iota
	// actRMS is LlamaRMSNorm: x.to(fp32) (the fp32 copy is saved by pow
	// and by the multiply: 4·T·h), rsqrt(mean(x²)+eps) (saved: 4·T), the
	// normalized fp32 tensor cast back to the compute dtype (saved by
	// weight*x: e·T·h). mean.dim saves only sizes in torch 2.x.
	actRMS
	// actGemmaRMS is GemmaRMSNorm: like actRMS, but the weight multiply
	// runs in fp32, x_norm*(1+weight.float()), saving the fp32 normalized
	// tensor (4·T·h) and the fp32 1+weight (4·h); the output is cast back.
	actGemmaRMS
	// actT5RMS is T5LayerNorm: pow saves the fp32 copy (4·T·h), the
	// multiply hidden*rsqrt saves the input in its own dtype (e·T·h, the
	// same storage as the copy in fp32) and rsqrt (4·T), and weight*x
	// saves the cast-back copy (e·T·h, 16-bit only).
	actT5RMS
)

// mlpAct is an MLP's activation as Hugging Face implements it; its count is
// the number of batch·seq·intermediate tensors the MLP saves, including
// the input of the down projection.
type mlpAct uint8

const (
	actGated     mlpAct = iota // SiLU/GELU(gate)·up: act input, act output, up, product (4)
	actGELU                    // F.gelu, exact or tanh: input, output (2)
	actGELUNew                 // NewGELUActivation in Python ops: x (pow), tanh, 0.5·x, 1+tanh, output (5)
	actQuickGELU               // x·sigmoid(1.702x): x, sigmoid, output (3)
	actReLU                    // ReLU saves its result, also the down projection's input (1)
	actGatedNew                // T5 gated-gelu: gelu_new on wi_0 (5), wi_1 output, product (7)
)

func (a mlpAct) tensors() int64 {
	return [...]int64{actGated: 4, actGELU: 2, actGELUNew: 5, actQuickGELU: 3, actReLU: 1, actGatedNew: 7}[a]
}

// gated reports whether the MLP has three matrices (for FLOPs).
func (a mlpAct) gated() bool { return a == actGated || a == actGatedNew }

// actBlock describes one kind of transformer block for the derivation.
type actBlock struct {
	h, H, KV, d, dv, I int64 // hidden, heads, KV heads, q/k head dim, v head dim, MLP inner
	norm               actNorm
	post               bool  // post-LN (BERT): the input is saved by the q/k/v projections
	parallel           bool  // attention and MLP read the same normed input (falcon, phi, neox)
	pnorms             int64 // norms of a parallel block (1 or 2)
	sandwich           bool  // gemma2/3: norms after attention and after the MLP too
	qkNorm             bool  // per-head RMSNorm on q and k (qwen3, gemma3)
	upcast             bool  // eager softmax in fp32
	sinks              bool  // gpt_oss eager attention: sink logits concatenated to the scores
	softcap            bool  // gemma2 attention logit soft-capping: tanh saves its result
	scalar             bool  // GPT-2 divides scores by a 0-dim device tensor, saved (1 element)
	clamp              bool  // OPT clamps the masked scores with torch.max, which saves them (e·P)
	act                mlpAct
	attnDrop           bool  // dropout on the attention probabilities
	residDrop          int64 // dropout sites on batch·seq·hidden tensors
	mlpDrop            bool  // dropout inside the MLP (T5)
	cross              bool  // a cross-attention sub-block (T5, Whisper decoders)
	// floatMask: the eager core adds the model's float mask to the
	// scores and takes a plain softmax of the sum (BertSelfAttention,
	// GPT-2's eager_attention_forward at transformers v4.57.1); castBack:
	// it then casts the probabilities to the value's dtype
	// (attn_weights.type(value.dtype), GPT-2) before their dropout.
	floatMask, castBack bool
	// fusedQKV: q, k and v are views of one fused projection's output
	// (GPT-2's c_attn), which a fused kernel's saved q keeps whole.
	fusedQKV bool
	// qkvIn and mlpIn: the linears that read the attention's and the
	// MLP's norm output, each casting it for itself under autocast
	// (zero: the autocast residual stream is not modelled; see
	// autocastNorms).
	qkvIn, mlpIn int64
	// heldWeights: the layer keeps the attention weights its attention
	// returns in a local until it returns, so an eager pass without a
	// graph holds the probabilities through the MLP (heldWeightsFamilies).
	heldWeights bool
	// heldHidden and heldAttn: the hidden-size tensors a pass without a
	// graph holds beside the MLP's own and beside the attention's (zero:
	// one, the block's input).
	heldHidden, heldAttn int64
	// heldBias: bytes a pass without a graph holds through every block
	// of the stack beside them (T5's position biases).
	heldBias int64
	// keepsScores: the attention binds the scores and the probabilities
	// to two locals (T5Attention), so without a graph both are alive at
	// probs@v, beside matmul's contiguous copy of v and its output.
	keepsScores bool
	// outCopy: the fused kernel's output, which it saves, is not the
	// output projection's input: sdpa_attention_forward's
	// transpose(1, 2).contiguous() copies it (Whisper: whisperOutCopy).
	outCopy bool
	// firstMoment: bytes the stack's first block holds, without a graph,
	// at a moment of its own beyond the per-block figure (T5's
	// relative-position buckets: t5FirstMoment), everything counted.
	firstMoment int64
	moe         *MoE // routed experts replace the MLP
	noRenorm    bool // the top-k routing weights are used as they are (Jamba)
	mla         *MLA // DeepSeek latent attention projections
}

// actShape is the workload as one block sees it.
type actShape struct {
	b, s, sk int64 // batch, sequence, cross-attention key length
	e        int64 // compute dtype bytes
	k        AttentionKernel
	hc       int64 // eager head chunk; 0: all heads
	drop     bool
	// mask is the bytes a dropout site saves per element (Workload.dropMask).
	mask    int64
	softmax Softmax
	// cpu says the CPU's kernels run the block (Workload.Backend): an
	// SDPA core runs the math kernel under attention dropout, or for
	// grouped-query heads called without a mask (gqa). causal says the
	// core is a causal self-attention, which transformers calls with
	// is_causal. autocast says the 16-bit compute dtype comes from
	// torch.autocast (Workload.Autocast).
	cpu, gqa, causal, autocast bool
	sp                         int64 // divisor of the replicated per-token tensors (sequence parallelism); 0 or 1: none
	// compiled says the block runs under torch.compile (Workload.Compile
	// CompileLayers): it saves the partitioner's set (compile.go).
	compiled bool
	// half says the compute dtype is fp16, whose softmax(dtype=float32)
	// CUDA computes from the fp16 scores directly (half_to_float); a
	// bf16 one converts them to an fp32 copy first.
	half bool
	// fz is the workload's frozen base (Workload.FrozenBase).
	fz FrozenBase
}

// actCost is one block's figures.
type actCost struct {
	saved, attn, input, fwd, bwd, flops, attnFlops int64
	// tail is the part of saved the block makes after its last attention
	// core's scores: the probabilities (part), the core's output and the
	// MLP's tensors, which do not exist yet at the moment of fwd.
	tail int64
	// noGrad is the block's largest live set when it runs without
	// recording (inference, or the first forward of a checkpointed
	// block): its input plus the attention core's or the MLP's
	// temporaries.
	noGrad int64
}

// attention returns what the attention core of one (self or cross)
// attention saves, with sq queries over sk keys:
//
//   - q: batch·H·sq·d (eager: the post-RoPE query, or the contiguous copy
//     that torch.matmul's reshape makes of a transposed view; fused
//     kernels: the query they are given);
//   - k, v: batch·H·sk·d with eager and SDPA, which expand GQA heads with
//     repeat_kv (a copy), batch·KV·sk·d with Flash (and for a single KV
//     head, whose expansion is a view: see below);
//   - out: batch·sq·H·dv, the input of the output projection (eager: the
//     contiguous transpose of probs@v; fused: the kernel's output itself,
//     which the kernel also saves);
//   - eager: the probabilities P = batch·H·sq·sk: softmax saves its result
//     (4·P with the fp32 upcast, else e·P); probs@v saves the probabilities
//     it multiplies: the cast copy (e·P) after an upcast, or with dropout
//     the 1-byte mask plus the dropped copy ((1+e)·P);
//   - SDPA: an fp32 log-sum-exp of batch·H·ceil32(sq); Flash: of batch·H·sq.
//
// part is the portion selective recomputation drops.
func (c *actCalc) attention(bl *actBlock, sh actShape, sq, sk int64) (saved, part, fwd, bwd, attnFlops, live int64) {
	if sh.math(bl) {
		return c.mathAttention(bl, sh, sq, sk)
	}
	b, e := sh.b, sh.e
	kvH := bl.H
	switch {
	case sh.k == Flash:
		kvH = bl.KV
	case bl.KV == 1 && (sh.k == SDPA || b == 1):
		// MQA: repeat_kv's expand+reshape of a single KV head is a
		// stride-0 view, not a copy; SDPA saves that view, and eager's
		// matmul reshapes it without a copy when batch is 1.
		kvH = 1
	}
	q := c.m(e, b, bl.H, sq, bl.d)
	k := c.m(e, b, kvH, sk, bl.d)
	v := c.m(e, b, kvH, sk, bl.dv)
	out := c.m(e, b, sq, bl.H, bl.dv)
	P := c.m(b, bl.H, sq, sk)
	switch sh.k {
	case Eager:
		sm := e // softmax saves its result, in fp32 after an upcast
		if (bl.upcast && sh.softmax != SoftmaxNative) || sh.softmax == SoftmaxFP32 {
			sm = 4
		}
		// The dropout's input: the probabilities in the compute dtype
		// (after an upcast, its cast back: eager_attention_forward's
		// .to(query.dtype)).
		dropIn := e
		if sm == e && sh.autocast && sh.softmax == SoftmaxDefault && (bl.floatMask || !sh.cpu) {
			// CUDA autocast lists softmax as fp32_set_opt_dtype
			// (aten/src/ATen/autocast_mode.cpp, v2.6.0: KERNEL_CUDA
			// softmax): an fp32 result from 16-bit scores in every
			// family; the CPU's lists do not, which leaves the fp32
			// result to the float-mask families below.
			// CPU autocast: the float mask, fp32 as the embeddings
			// (see decoderOnly), promotes the 16-bit scores to fp32,
			// and the CPU's softmax, on no autocast list
			// (autocast_mode.cpp, v2.6.0; validation row
			// autocast-cpu-dtypes), keeps its input's dtype: an fp32
			// result. (CUDA autocast lists softmax as fp32 too.)
			sm, dropIn = 4, 4
			if bl.castBack {
				dropIn = e
			}
		}
		part = c.m(sm, P)
		switch {
		case sh.drop && bl.attnDrop:
			// The mask (the CPU's noise, in the dropout input's dtype)
			// and the dropped copy saved by probs@v (a 16-bit cast of it
			// under autocast).
			noise := sh.mask
			if sh.cpu {
				noise = dropIn
			}
			part = c.a(part, c.m(noise+e, P))
		case sm != e:
			part = c.a(part, c.m(e, P)) // the cast copy, saved by probs@v
		}
		if bl.softcap {
			part = c.a(part, c.m(e, P))
		}
		if bl.sinks {
			// gpt_oss eager_attention_forward (transformers v4.55.0
			// modeling_gpt_oss.py): softmax over [scores, sink] saves its
			// b·H·sq·(sk+1) result (the sink column: e·b·H·sq more), the
			// max for the shift saves int64 indices (8·b·H·sq), and
			// probs[..., :-1] is a strided view that matmul copies to
			// contiguous for the bmm, which saves the copy (e·P).
			part = c.a(part, c.m(e, P), c.m(8+e, b, bl.H, sq))
		}
		if bl.scalar {
			part = c.a(part, e)
		}
		if bl.clamp {
			part = c.a(part, c.m(e, P)) // torch.max(scores + mask, finfo.min) saves its input
		}
		// Forward: q@kᵀ and its scaled/masked copy live together (2·e·P),
		// for one chunk of heads when the heads are chunked. An fp32
		// softmax of 16-bit scores (softmax(x, dtype=torch.float32),
		// aten/src/ATen/native/SoftMax.cpp): on CUDA an fp16 input goes
		// to _softmax(x, half_to_float=true), any other is first
		// converted (input_.toType(Float), a 4-byte copy), so a bf16
		// softmax holds its input (e), that copy (4) and its fp32
		// result (4) at once, then the input, the result and the
		// .to(query.dtype) copy (e + 4 + e).
		conv := int64(0)
		if sm == 4 && e != 4 && !sh.half {
			conv = 4
		}
		Pc := P
		if sh.hc > 0 && sh.hc < bl.H {
			Pc = c.m(b, sh.hc, sq, sk)
		}
		// With a graph the result (and the cast copy) are saved: the
		// transient is the input and the conversion's copy.
		fwd = c.m(actMax(2*e, e+conv), Pc)
		// Without a graph: q, k, v and the largest of those two copies,
		// the softmax's input, conversion and result, or its input,
		// result and cast copy.
		live = c.a(q, k, v, c.m(actMax(2*e, e+conv+sm, sm+2*e*actB2i(sm != e)), Pc))
		if bl.keepsScores {
			live = actMax(live, c.a(q, k, c.m(2, v), out, c.m(2*e, Pc)))
		}
		// Backward: the gradient of the probabilities, its fp32 copy
		// after an upcast, and softmax's input gradient.
		if sm != e {
			bwd = c.m(4+2*e, P)
		} else {
			bwd = c.m(2*e, P)
		}
	case SDPA:
		rows, _ := checked.CeilDiv(sq, 32)
		part = c.m(4, b, bl.H, rows, 32)
		// Backward: fp32 gradient accumulators for q and the gradients of
		// q, k, v.
		bwd = c.a(c.m(4, b, bl.H, sq, bl.d), q, k, v)
	default: // Flash
		part = c.m(4, b, bl.H, sq)
		// Backward: dq accumulated in fp32, dq, dk and dv at all heads
		// before the GQA reduction, and the fp32 rowwise dot(dO, O).
		bwd = c.a(c.m(4, b, bl.H, sq, bl.d), q, c.m(e, b, bl.H, sk, bl.d), c.m(e, b, bl.H, sk, bl.dv), c.m(4, b, bl.H, sq))
	}
	saved = c.a(q, k, v, out, part)
	if bl.fusedQKV && sh.k != Eager && sh.gqa {
		// A forward that holds a cache (Workload.NoAttentionMask: a
		// training forward without checkpointing, whose use_cache
		// defaults to true) hands the kernel the cache's k and v:
		// DynamicLayer.update (cache_utils.py, transformers v4.57.1)
		// returns torch.cat([self.keys, key_states], dim=-2), new
		// tensors, while q stays a view of c_attn's output
		// (GPT2Attention.forward splits it), whose whole storage the
		// kernel's saved q keeps: k and v once more (recorded,
		// testdata/measured/cpu/saved).
		saved = c.a(saved, k, v)
	}
	if sh.k != Eager {
		live = saved
	}
	attnFlops = c.m(2, b, bl.H, sq, sk, bl.d+bl.dv)
	return saved, part, fwd, bwd, attnFlops, live
}

// normSaved returns what a norm over rows of width w saves, without its
// output (which the next projection saves, or the residual add does not).
func (c *actCalc) normSaved(k actNorm, T, w, e int64) int64 {
	switch k {
	case actRMS:
		return c.a(c.m(4, T, w), c.m(4, T), c.m(e, T, w))
	case actGemmaRMS:
		return c.a(c.m(8, T, w), c.m(4, T), c.m(4, w))
	case actT5RMS:
		x := c.a(c.m(4, T, w), c.m(4, T), c.m(e, T, w))
		if e != 4 {
			x = c.a(x, c.m(e, T, w))
		}
		return x
	}
	return c.a(c.m(e, T, w), c.m(8, T))
}

// block returns one block's figures. For example, one LlamaDecoderLayer
// in bf16 (e = 2) with eager attention, T = b·s tokens, op by op:
//
//	input_layernorm  x.to(fp32): pow and the multiply save this copy   4·T·h
//	                 rsqrt(mean(x²)+eps): the multiply saves it         4·T
//	                 (x·rsqrt).to(bf16): weight·x saves it              2·T·h
//	q/k/v_proj       their input, the norm output (one storage)         2·T·h
//	RoPE             q·cos, rotate_half(q)·sin save cos and sin only
//	                 (they need no grad): counted once in Shared
//	q @ kᵀ           the roped q, and k expanded by repeat_kv (a copy)  2·b·H·s·d each
//	softmax(fp32)    its fp32 result                                    4·b·H·s²
//	.to(bf16)        the cast copy, saved by probs @ v                  2·b·H·s²
//	probs @ v        v expanded by repeat_kv                            2·b·H·s·d
//	o_proj           its input, the contiguous transpose of probs @ v   2·T·H·d
//	post_attention_layernorm, as input_layernorm                        4·T·h + 4·T + 2·T·h
//	gate/up_proj     their input, the norm output                       2·T·h
//	SiLU             its input, the gate output                         2·T·I
//	silu(g) · up     both factors: SiLU's output and up's output        2·2·T·I
//	down_proj        its input, the product                             2·T·I
//
// GPT-2 instead: LayerNorm saves its input and fp32 mean and rstd
// (e·T·h + 8·T), c_attn its input; torch.matmul copies q, k and v out of
// the fused c_attn output (the fused storage itself is not saved); the
// scores are divided by a 0-dim device tensor (saved: e bytes); softmax
// saves its result in the compute dtype; gelu_new, written in Python ops,
// saves x (pow), tanh's result, 0.5·x and 1+tanh, and c_proj saves their
// product: 5·e·T·I where a fused GELU keeps 2·e·T·I. Dropout saves a
// 1-byte mask per element and, on the probabilities, the dropped copy
// that probs @ v then saves instead of the softmax output.
//
// In general, a pre-norm block (llama, GPT-2):
//
//	norm1 (normSaved) → its output, saved by q/k/v (e·T·h)
//	[q/k norms] → attention core (see attention) → [post-attention norm]
//	→ residual dropout mask (T·h) → norm2 → its output, saved by the
//	MLP's input projections (e·T·h) → MLP (act.tensors()·e·T·I) →
//	[post-MLP norm] → residual dropout mask (T·h).
//
// A post-norm block (BERT) saves its input (by q/k/v), the attention core,
// norm1's input and output and norm2's input; its output is the next
// block's input. A parallel block (falcon, phi, neox) normalizes the input
// once or twice (the input is saved once), then runs attention and MLP on
// the normed input. A decoder block with cross-attention adds a norm, the
// query projection's input and a core over sk encoder positions; the
// encoder output that its k/v projections save is shared by all blocks
// ([Activations.Shared]).
func (c *actCalc) block(bl *actBlock, sh actShape) actCost {
	b, s, e := sh.b, sh.s, sh.e
	T := c.m(b, s)
	// Th is the tokens of the per-token tensors tensor parallelism
	// leaves whole (norms, dropout masks, block input, projection
	// inputs): all T, or T/t of them under sequence parallelism.
	Th := T
	if sh.sp > 1 {
		Th, _ = checked.CeilDiv(T, sh.sp)
	}
	eTh := c.m(e, Th, bl.h)
	var x actCost
	x.input = eTh
	norm := c.normSaved(bl.norm, Th, bl.h, e)
	var saved int64
	switch {
	case bl.post:
		saved = c.a(eTh, norm, eTh, norm) // input; norm1 input+stats; norm1 output; norm2 input+stats
	case bl.parallel && sh.autocast && e != 4 && bl.qkvIn > 0 && bl.norm == actLN:
		// One fp32 LayerNorm read by every projection (autocastNorms).
		saved = c.a(c.normSaved(bl.norm, Th, bl.h, 4), c.m(bl.qkvIn+bl.mlpIn, eTh))
	case bl.parallel:
		saved = c.a(norm, eTh)
		if bl.pnorms > 1 {
			// The second norm reads the same input storage: only its
			// statistics (and normalized copy for RMS) are new.
			saved = c.a(saved, c.normSaved(bl.norm, Th, bl.h, e)-eTh, eTh)
		}
	case sh.autocast && !sh.compiled && e != 4 && bl.qkvIn > 0 && (bl.norm == actRMS || bl.norm == actLN) && !bl.sandwich && bl.mla == nil:
		// The fp32 residual stream under autocast (autocastNorms). A
		// compiled block fuses the casts (the partitioner's set below,
		// measured: testdata/measured/cpu/compile-*.jsonl).
		an := c.normSaved(bl.norm, Th, bl.h, 4)
		saved = c.a(an, c.m(bl.qkvIn, eTh), an, c.m(bl.mlpIn, eTh))
	default:
		if sh.compiled {
			// Compiled (compile.go): each RMSNorm saves its input in its
			// own dtype and rsqrt; the fp32 upcast and the normalized
			// rows are recomputed in backward: 4·T·h less.
			norm -= c.m(4, Th, bl.h)
		}
		saved = c.a(norm, eTh, norm, eTh)
		if bl.sandwich {
			saved = c.a(saved, norm, norm)
		}
	}
	if bl.qkNorm {
		// Per-head norms of q and k before RoPE (qwen3: llama-style;
		// gemma3: Gemma's). RoPE saves only cos and sin, so the norms'
		// outputs are not saved; the roped q and k are, in the core.
		qk := actRMS
		if bl.norm == actGemmaRMS {
			qk = actGemmaRMS
		}
		saved = c.a(saved, c.normSaved(qk, c.m(T, bl.H), bl.d, e), c.normSaved(qk, c.m(T, bl.KV), bl.d, e))
	}
	if bl.mla != nil {
		// DeepSeek MLA: the latent projections and their RMSNorms save the
		// q and kv latents (q_a_layernorm, kv_a_layernorm) and their
		// normalized outputs; the decompressed q, k, v enter the core.
		m := bl.mla
		if m.QLoRARank > 0 {
			saved = c.a(saved, c.normSaved(actRMS, T, m.QLoRARank, e), c.m(e, T, m.QLoRARank))
		}
		saved = c.a(saved, c.normSaved(actRMS, T, m.KVLoRARank, e), c.m(e, T, m.KVLoRARank))
	}
	as, ap, af, ab, aflops, alive := c.attention(bl, sh, s, s)
	saved = c.a(saved, as)
	if bl.outCopy && sh.k != Eager {
		saved = c.a(saved, c.m(e, T, bl.H, bl.dv))
	}
	x.attn = ap
	x.fwd, x.bwd = af, ab
	x.attnFlops = aflops
	if sh.drop {
		saved = c.a(saved, c.m(bl.residDrop, sh.mask, Th, bl.h))
	}
	if bl.cross {
		cs, cp, cf, cb, cflops, clive := c.attention(bl, sh, s, sh.sk)
		alive = actMax(alive, clive)
		// The cross core's k and v are projections of the encoder output
		// and are this block's own; the query's input is norm3's output.
		saved = c.a(saved, norm, eTh, cs)
		x.attn = c.a(x.attn, cp)
		x.fwd, x.bwd = actMax(x.fwd, cf), actMax(x.bwd, cb)
		x.attnFlops = c.a(x.attnFlops, cflops)
	}
	// MLP.
	var mlp, mlpBwd int64
	if bl.moe != nil {
		mlp, mlpBwd = c.moe(bl, T, e)
	} else {
		eTI := c.m(e, T, bl.I)
		n := bl.act.tensors()
		if sh.compiled && bl.act == actGated {
			// Compiled (compile.go): SiLU(gate) is recomputed from the
			// saved gate; gate, up and their product are saved.
			n--
		}
		mlp = c.m(n, eTI)
		if sh.drop && bl.mlpDrop {
			mlp = c.a(mlp, c.m(sh.mask, T, bl.I))
			if bl.act == actReLU {
				mlp = c.a(mlp, eTI)
			}
		}
		// Backward: the gradient of the down projection's input
		// replaces that input (saved by the projection, released once
		// its node has run), and the activation's backward makes the
		// gradients of its inputs (gated: of act(gate) and up, with
		// the product's gradient): two T·I tensors more than saved at
		// most (measured, tools/oracle/step.py block_backward). A
		// plain activation's backward makes one, its input's gradient,
		// beside the gradient of the down projection's input (which
		// replaced that saved input) and the gradient of the block's
		// output, which the residual branch still holds: one T·I and
		// one T·h more than saved (measured on the CPU,
		// testdata/measured/cpu, ViT fp32 training rows: GeluBackward0
		// is the peak, at the last block's saved tensors less fc2's
		// input, plus its gradient, GELU's and the block output's).
		mlpBwd = c.m(2, eTI)
		if !bl.act.gated() {
			mlpBwd = c.a(eTI, c.m(e, T, bl.h))
		}
	}
	saved = c.a(saved, mlp)
	if sh.fz.on() && ((!bl.post && !bl.parallel && !bl.sandwich && !bl.cross && bl.mla == nil) || sh.fz.inputOnly(bl)) {
		less, more := c.frozenSavings(bl, sh, sh.k == Eager || sh.math(bl))
		if sh.fz.Input {
			less = c.frozenInputSavings(bl, sh, less) // FrozenInput
		}
		saved = c.a(actMax(0, saved-less), more)
		mlpBwd = c.a(mlpBwd, c.frozenMLPBackward(bl, sh))
	}
	x.saved = saved
	lastPart := ap
	if bl.cross {
		lastPart = x.attn - ap
	}
	x.tail = c.a(lastPart, c.m(e, T, bl.H, bl.dv), mlp)
	// Rotary and head-splitting temporaries in forward: about three
	// copies of q.
	x.fwd = actMax(x.fwd, c.m(3, e, T, bl.H, bl.d))
	// Without a graph the MLP holds about three T·I tensors at once
	// (gated: act(gate), up and their product), two for a plain
	// activation; an MoE block one expert's worth, bounded by all tokens
	// going to one expert. gelu_new holds four: NewGELUActivation.forward
	// (transformers src/transformers/activations.py at v4.57.1) is
	// 0.5 * input * (1.0 + torch.tanh(c * (input + 0.044715 *
	// torch.pow(input, 3.0)))), which Python evaluates left first, so
	// 0.5·input stays alive beside the caller's input while each step of
	// the right operand makes its result from the previous one: input,
	// 0.5·input and two temporaries at every step.
	inner, n := bl.I, int64(2)
	if bl.moe != nil {
		inner = bl.moe.Intermediate
	}
	if bl.act.gated() || bl.moe != nil {
		n = 3
	}
	if bl.act == actGELUNew {
		n = 4
	}
	mlpLive := c.m(n, e, T, inner)
	if sh.k == Eager && bl.heldWeights {
		// The probabilities the layer holds (heldWeightsFamilies), in
		// the compute dtype eager_attention_forward returns them in;
		// a loop over head slices (Workload.HeadChunk) returns its
		// last slice's.
		heads := bl.H
		if sh.hc > 0 && sh.hc < bl.H {
			heads = sh.hc
		}
		mlpLive = c.a(mlpLive, c.m(e, sh.b, heads, sh.s, sh.s))
	}
	held, heldAttn := eTh, eTh
	if bl.heldHidden > 1 {
		held, heldAttn = c.m(bl.heldHidden, eTh), c.m(bl.heldAttn, eTh)
	}
	x.noGrad = actMax(c.a(actMax(c.a(heldAttn, alive), c.a(held, mlpLive)), bl.heldBias), bl.firstMoment)
	// Backward runs the block in reverse: the MLP's backward first,
	// with every tensor the block saved still alive, then the
	// attention's, once the MLP's saved tensors are released (autograd
	// frees a node's saved tensors when it has run). So the attention
	// core's transient sits on the block's saved bytes without the
	// MLP's. A parallel block (falcon, phi, neox) runs both branches on
	// one input and has no such order.
	attnBwd := x.bwd
	if !bl.parallel {
		attnBwd = actMax(0, attnBwd-mlp)
	}
	x.bwd = actMax(attnBwd, mlpBwd)
	x.flops = c.a(c.flops(bl, T, sh), aflops)
	if bl.cross {
		x.flops = c.a(x.flops, x.attnFlops-aflops, c.m(2, T, bl.h, bl.H, bl.d), c.m(2, T, bl.H, bl.dv, bl.h), c.m(2, sh.b, sh.sk, bl.h, bl.KV, bl.d+bl.dv))
	}
	return x
}

// moe returns what a mixture-of-experts MLP saves (Mixtral's
// MixtralSparseMoeBlock, Qwen2-MoE, DeepSeek), for T tokens each routed
// to Active of Experts experts without capacity limits (Hugging Face's
// implementations drop no token):
//
//   - router: the gate's input is the norm output (already counted); the
//     fp32 softmax of T·E logits (4·T·E), top-k indices (8·T·k), the
//     in-place renormalization's fp32 weights and their sum (4·T·k + 4·T;
//     JambaSparseMoeBlock casts the top-k softmax without renormalizing:
//     none);
//   - per routed token: the torch.where indices of the expert mask (top_x
//     and idx, two int64 views of one nonzero() result: 16), the gathered
//     input (e·h, saved by w1 and w3), the expert's SwiGLU (4·e·I_expert),
//     the expert output and its routing weight, both saved by their product
//     (e·h + e), and that product, saved by index_add_ as its source (e·h);
//   - shared experts: one SwiGLU over all tokens (4·e·T·I_shared), with
//     Qwen2-MoE's sigmoid gate (e·T) and gated product (e·T·h).
func (c *actCalc) moe(bl *actBlock, T, e int64) (saved, bwd int64) {
	m := bl.moe
	Tk := c.m(T, m.Active)
	saved = c.a(c.m(4, T, m.Experts), c.m(8, Tk))
	if !bl.noRenorm {
		saved = c.a(saved, c.m(4, Tk), c.m(4, T))
	}
	per := c.a(c.m(3, e, bl.h), c.m(4, e, m.Intermediate), e, 16)
	saved = c.a(saved, c.m(Tk, per))
	if m.Shared > 0 && m.SharedIntermediate > 0 {
		saved = c.a(saved, c.m(4, e, T, m.SharedIntermediate), c.m(e, T), c.m(e, T, bl.h))
	}
	bwd = c.m(3, e, Tk, m.Intermediate)
	return saved, bwd
}

// flops returns the forward FLOPs of one block's projections and MLP
// (2 per multiply-add), without the attention core.
func (c *actCalc) flops(bl *actBlock, T int64, sh actShape) int64 {
	proj := c.a(c.m(bl.h, bl.H, bl.d), c.m(bl.h, bl.KV, bl.d+bl.dv), c.m(bl.H, bl.dv, bl.h))
	var mlp int64
	if bl.moe != nil {
		m := bl.moe
		mlp = c.a(c.m(bl.h, m.Experts), c.m(m.Active, 3, bl.h, m.Intermediate))
		if m.Shared > 0 {
			mlp = c.a(mlp, c.m(3, bl.h, m.SharedIntermediate))
		}
	} else {
		n := int64(2)
		if bl.act.gated() {
			n = 3
		}
		mlp = c.m(n, bl.h, bl.I)
	}
	return c.m(2, T, c.a(proj, mlp))
}

// heldWeightsFamilies are the model types whose decoder (or encoder) layer
// binds the attention weights its self-attention returns to a local,
// hidden_states, _ = self.self_attn(...) (Llama, Mistral, Qwen2, Gemma,
// Gemma2), hidden_states, self_attn_weights = ... (OPT, Whisper's encoder
// and decoder), attn_outputs, self_attn_weights = ... (Phi) or
// attn_output, self_attn_weights = self.attn(...) (GPT-2), in
// transformers v4.57.1 (commit 8cb5963c, modeling_<type>.py), and keeps
// it until the layer returns: with eager attention, whose
// eager_attention_forward returns the probabilities, they stay alive
// through the MLP. T5, BERT and ViT layers do not bind them (their
// attention modules return the weights only under output_attentions, or
// drop them: ViTAttention's self_attn_output, _ is local to the
// attention). In training the probabilities are saved anyway.
var heldWeightsFamilies = map[string]bool{
	"llama": true, "mistral": true, "qwen2": true, "gemma": true, "gemma2": true,
	"phi": true, "opt": true, "gpt2": true, "whisper": true,
}

// heldFourFamilies are the model types whose forward without a graph
// holds four B·S·h tensors through a layer's MLP and three through its
// attention, from the second layer on (transformers v4.57.1, commit
// 8cb5963c): the base model's forward keeps inputs_embeds for the whole
// stack (LlamaModel.forward: hidden_states = inputs_embeds; Gemma's
// normalized copy is the first layer's input only), its loop variable
// the layer's input, and the decoder layer its residual sum and
// post_attention_layernorm's output (the MLP's argument), or, in the
// attention, input_layernorm's output (PhiDecoderLayer: the shared norm
// output and the attention output beside the MLP, set with its layout).
// Measured on the CPU (testdata/measured/cpu, Llama generate rows: three
// B·S·h beyond one, to 9 KiB).
var heldFourFamilies = map[string]bool{
	"llama": true, "mistral": true, "qwen2": true, "gemma": true,
}

// actFamily returns the block description of a decoder-only or encoder
// Spec's layers (MLP fields filled from Intermediate; MoE set by the
// caller).
func actFamily(s *Spec) actBlock {
	bl := actBlock{h: s.Hidden, H: s.Heads, KV: s.KVHeads, d: s.HeadDim, dv: s.HeadDim, I: s.Intermediate,
		norm: actLN, act: actGELU, attnDrop: true, residDrop: 2, heldWeights: heldWeightsFamilies[s.Family]}
	switch layoutOf(s) {
	case layoutLlama, layoutPhi3, layoutJamba:
		bl.norm, bl.act, bl.upcast, bl.residDrop = actRMS, actGated, true, 0
		switch s.Family {
		case "gemma", "gemma2", "gemma3_text":
			bl.norm = actGemmaRMS
			bl.softcap = s.Family == "gemma2"
		}
		if !s.Gated {
			bl.act = actGELU
		}
		bl.qkNorm, bl.sandwich = s.QKNorm, s.SandwichNorm
		if heldFourFamilies[s.Family] {
			bl.heldHidden, bl.heldAttn = 4, 3
		}
		if s.Family == "gpt_oss" {
			// softmax(combined_logits, dtype=combined_logits.dtype): no
			// fp32 upcast.
			bl.upcast, bl.sinks = false, true
		}
		if s.Family == "phi3" {
			bl.residDrop = 2 // resid_attn_dropout, resid_mlp_dropout
		}
		if s.MLA.Enabled() {
			m := s.MLA
			bl.mla = &m
			bl.d, bl.dv = m.QKNopeHeadDim+m.QKRopeHeadDim, m.VHeadDim
		}
	case layoutPhi:
		bl.parallel, bl.pnorms, bl.act, bl.upcast, bl.residDrop = true, 1, actGELUNew, true, 1
		if s.Family == "phi" {
			// PhiModel.forward and PhiDecoderLayer.forward
			// (modeling_phi.py at v4.57.1) hold, through the MLP,
			// inputs_embeds, the layer's input (its residual), the
			// shared input_layernorm output and attn_outputs; through
			// the attention the first three (heldFourFamilies' count).
			bl.heldHidden, bl.heldAttn = 4, 3
		}
	case layoutFalcon:
		bl.parallel, bl.pnorms, bl.residDrop = true, actMax(1, s.ParallelNorms), 1
		if s.Family == "bloom" {
			// BloomBlock is sequential (attention, then MLP, each with
			// its LayerNorm and dropout_add of hidden_dropout); its GELU
			// is bloom_gelu_forward, which saves its input.
			bl.parallel, bl.pnorms, bl.residDrop = false, 0, 2
			// BloomAttention: F.softmax(..., dtype=torch.float32).to(input_dtype).
			bl.upcast = true
		}
	case layoutNeoX:
		bl.parallel, bl.pnorms = true, 2
	case layoutGPT2:
		bl.act, bl.scalar = actGELUNew, true
		bl.floatMask, bl.castBack = true, true
		bl.fusedQKV = true
		if s.Family == "gpt2" {
			// modeling_gpt2.py at v4.57.1 (commit 8cb5963c), without a
			// graph: GPT2Model.forward holds inputs_embeds and
			// position_embeds for the whole stack, its loop variable
			// the block's input, and GPT2Block.forward its attn_output,
			// the residual sum and ln_2's output (the MLP's argument)
			// through the MLP: six B·S·h tensors (position_embeds is
			// B·S·h in generate(), whose position_ids have the batch's
			// rows, 1·S·h otherwise); in the attention, the two
			// embeddings, the input and ln_1's output.
			bl.heldHidden, bl.heldAttn = 6, 4
		}
		switch s.Activation {
		case "gelu", "gelu_pytorch_tanh":
			bl.act = actGELU
		case "relu":
			bl.act = actReLU
		case "quick_gelu":
			bl.act = actQuickGELU
		}
	case layoutBigCode:
		bl.upcast = true // attention_softmax_in_fp32
	case layoutOPT:
		// OPTAttention as transformers wrote it from the fp16 upcast of
		// PR #17437 (v4.20) to its move to the shared
		// eager_attention_forward (modeling_opt.py, read as of v4.45,
		// the release the OPT-350m SDPA benchmarks of PR #33298 ran
		// on): scores = bmm(q, kᵀ); scores.view(b, H, s, s) +
		// the [b, 1, s, s] causal mask; torch.max(scores, finfo.min),
		// which saves its input (clamp); softmax(dtype=float32)
		// .to(float16) only when the scores are fp16 (upcast, set by
		// decoderOnly from the compute dtype), else a softmax in the
		// compute dtype; dropout (attention_dropout 0.0 in every OPT
		// config: a no-op); bmm with v. Later releases
		// (eager_attention_forward) drop the clamp and upcast every
		// dtype; SoftmaxFP32 models that.
		bl.act, bl.clamp = actReLU, true
		// Dropout with Workload.Dropout is OPT's config.dropout (0.1) on
		// the two residual branches; its attention_dropout and
		// activation_dropout default to 0.0 (OPTConfig.__init__,
		// configuration_opt.py) and no facebook/opt-* config sets them,
		// so nn.functional.dropout on the probabilities returns its
		// input and saves no mask or dropped copy.
		bl.attnDrop = false
		bl.post = s.NoFinalNorm && s.Family == "opt" && s.EmbedDim != 0 // opt-350m: do_layer_norm_before=false
	case layoutBERT:
		bl.post = true
		bl.floatMask = true
	case layoutVision, layoutSiglipVision:
		bl.upcast = true // eager_attention_forward of modeling_vit.py / modeling_siglip.py
		if s.Family == "vit" {
			// modeling_vit.py at v4.57.1 (commit 8cb5963c), without a
			// graph, in the MLP of the second and later layers: ViTModel.
			// forward holds embedding_output for the whole encoder,
			// ViTEncoder's loop variable the layer's input, and
			// ViTLayer.forward its hidden_states_norm, attention_output,
			// the residual sum and layernorm_after's output (the
			// intermediate's argument): six B·S·h tensors. Measured on
			// the CPU (testdata/measured/cpu, ViT prefill rows): the
			// peak is the pixel values, these six and the MLP's two. In
			// the attention: embedding_output, the layer's input and
			// hidden_states_norm.
			bl.heldHidden, bl.heldAttn = 6, 3
		}
	case layoutCLIPVision, layoutCLIPText:
		bl.act, bl.upcast = actQuickGELU, true
	}
	return bl
}

// stack adds blocks to a: Count blocks of one kind, computed once.
func (c *actCalc) stack(a *Activations, w Workload, part, kind string, bl *actBlock, sh actShape, count int64, train bool) LayerActivations {
	rank := bl.split(w.tp())
	sh.sp = w.sp()
	sh.compiled = w.Compile&CompileLayers != 0
	x := c.block(&rank, sh)
	return c.place(a, w, part, kind, sh.s, x, count, train)
}

// place records count blocks of one kind, each costing x, under the
// workload's checkpointing policy (or, without train, as inference).
func (c *actCalc) place(a *Activations, w Workload, part, kind string, tokens int64, x actCost, count int64, train bool) LayerActivations {
	l := LayerActivations{Part: part, Kind: kind, Count: count, Tokens: tokens,
		Saved: gpumem.Bytes(x.saved), Attention: gpumem.Bytes(x.attn), Input: gpumem.Bytes(x.input),
		Forward: gpumem.Bytes(x.fwd), Backward: gpumem.Bytes(x.bwd), FLOPs: x.flops, AttentionFLOPs: x.attnFlops}
	if !train {
		// Inference: nothing is saved; a block's live set is about its
		// saved tensors, freed as the block proceeds.
		l.Saved, l.Attention, l.Input = 0, 0, 0
		l.Forward = gpumem.Bytes(x.noGrad)
		l.Backward = 0
		c.push(l)
		return l
	}
	kept := x.saved
	total := c.m(kept, count)
	if w.Checkpointing == NoCheckpointing {
		// The transient comes before the block has saved its tail
		// (actCost.tail): on top of what the block saves by the end of
		// forward, it is the excess over that tail. Measured on the CPU
		// (testdata/measured/cpu, ViT eager fp32 training rows: the
		// forward's peak is its end, the last block's eager scores and
		// their scaled copy beside its q, k and v only).
		l.Forward = gpumem.Bytes(x.fwd - min(x.fwd, x.tail))
	}
	switch w.Checkpointing {
	case FullCheckpointing:
		// The recomputed block's saved tensors include its input, which
		// the checkpoint kept: torch.utils.checkpoint hands the recompute
		// the saved input itself (detached, the same storage), so the
		// recompute's backward holds the block's saved tensors once, the
		// input among them, plus the transient. Measured on the CPU
		// (testdata/measured/cpu, ViT and Whisper full-checkpointing
		// rows).
		kept, total = x.input, c.m(x.input, count)
		l.Forward = gpumem.Bytes(x.noGrad) // the first forward runs without a graph
		if sh := w.Compile & CompileLayers; sh != 0 {
			// A compiled block under a non-reentrant checkpoint runs its
			// compiled forward, which returns every tensor it saves
			// before the checkpoint's hooks drop them.
			l.Forward = gpumem.Bytes(actMax(x.noGrad, x.saved))
		}
		l.Backward = gpumem.Bytes(c.a(x.saved-min(x.saved, x.input), x.bwd))
	case SelectiveCheckpointing:
		kept = x.saved - x.attn
		total = c.m(kept, count)
		l.Backward = gpumem.Bytes(c.a(x.attn, x.bwd))
	case EveryKCheckpointing:
		k := actMax(1, w.CheckpointEvery)
		n, _ := checked.CeilDiv(count, k)
		total = c.a(c.m(n, x.input), c.m(count-n, x.saved))
		kept, _ = checked.CeilDiv(total, count)
		if n > 0 {
			l.Forward = gpumem.Bytes(actMax(x.fwd, x.noGrad))
			l.Backward = gpumem.Bytes(c.a(x.saved-min(x.saved, x.input), x.bwd))
		}
	case OffloadActivations:
		a.Offloaded = gpumem.Bytes(c.a(int64(a.Offloaded), c.m(x.saved, count)))
		kept, total = 0, 0
		// The block being computed holds its saved tensors until they
		// are copied out.
		l.Forward = gpumem.Bytes(c.a(x.fwd, x.saved))
		l.Backward = gpumem.Bytes(c.a(x.saved, x.bwd))
	}
	l.Kept, l.KeptTotal = gpumem.Bytes(kept), gpumem.Bytes(total)
	c.push(l)
	return l
}

// decoderOnly fills a for a decoder-only (or BERT-style encoder-only)
// language model with seq tokens per sequence, under part.
func (c *actCalc) decoderOnly(a *Activations, s *Spec, w Workload, e int64, part string, seq int64) {
	sh := actShape{b: w.Batch, s: seq, e: e, k: w.Attention, hc: w.HeadChunk, drop: w.Dropout, mask: w.dropMask(e), cpu: w.Backend == CPU, gqa: w.NoAttentionMask, autocast: w.Autocast, softmax: w.Softmax, half: w.computeDType(s) == gpumem.FP16}
	sh.causal = layoutOf(s) != layoutBERT
	if w.Train {
		sh.fz = w.FrozenBase
	}
	shared0 := a.Shared // a vision tower's, before the language model's
	bl := actFamily(s)
	bl.qkvIn, bl.mlpIn = autocastNormReaders(s, &bl)
	if layoutOf(s) == layoutOPT {
		bl.upcast = w.computeDType(s) == gpumem.FP16 // if attn_weights.dtype == torch.float16
	}
	a.Tokens = seq
	T := c.m(w.Batch, seq)
	layers := s.Layers
	if s.MoE.Experts > 0 {
		step := actMax(1, s.MoE.Step)
		dense := s.MoE.DenseFirst
		if dense > layers {
			dense = layers
		}
		// Layer i >= dense is an MoE layer when (i+1) % step == 0
		// (qwen2_moe decoder_sparse_step, deepseek moe_layer_freq): the
		// multiples of step in (dense, layers].
		moeLayers := layers/step - dense/step
		if dense+moeLayers < layers || dense > 0 {
			c.stack(a, w, part, "dense", &bl, sh, layers-moeLayers, w.Train)
		}
		mb := bl
		m := s.MoE
		if s.Family == "llama4_text" {
			// Llama4TextMoe.forward (transformers v4.51.0
			// modeling_llama4.py) is dropless and dense: it repeats every
			// token for every expert (hidden_states.repeat(num_experts, 1)),
			// scales by the sigmoid router scores, zero for the experts not
			// chosen, and runs all experts in one bmm, so each expert
			// sees every token.
			m.Active = m.Experts
		}
		mb.moe = &m
		c.stack(a, w, part, "moe", &mb, sh, moeLayers, w.Train)
	} else {
		c.stack(a, w, part, "decoder", &bl, sh, layers, w.Train)
		if fb := bl; sh.fz.Rank > 0 && layers > 0 && !bl.post && !bl.parallel && !bl.sandwich && bl.mla == nil && w.Checkpointing == NoCheckpointing && w.tp() == 1 {
			// The first block's input needs no gradient (FrozenBase).
			ls := c.layers()
			l := &ls[len(ls)-1]
			l.KeptTotal -= min(l.Kept, gpumem.Bytes(c.frozenFirst(&fb, sh, sh.math(&fb))))
		}
	}
	l := layoutOf(s)
	// Per-token tensors outside the blocks: whole on every tensor-parallel
	// rank, a 1/t slice of the sequence under sequence parallelism.
	Th := T
	if sp := w.sp(); sp > 1 {
		Th, _ = checked.CeilDiv(T, sp)
	}
	eTh := c.m(e, Th, s.Hidden)
	// Rotary tables: cos and sin, batch·seq·head_dim each, computed once
	// (LlamaRotaryEmbedding) and saved by every block's q·cos, k·cos.
	switch l {
	case layoutLlama, layoutPhi3, layoutPhi, layoutFalcon, layoutNeoX:
		if s.Family == "bloom" {
			// BLOOM has no rotary tables: build_alibi_tensor's
			// (batch·heads, 1, seq) bias in the compute dtype
			// (modeling_bloom.py), passed to every block.
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(e, w.Batch, s.Heads, seq)))
		} else {
			// Under autocast the tables take the dtype of the fp32
			// embeddings (LlamaRotaryEmbedding.forward returns
			// cos.to(dtype=x.dtype)), and q·cos promotes (autocastNorms).
			re := e
			if w.Autocast && w.Train && bl.qkvIn > 0 {
				re = 4
			}
			// A training forward is given no position_ids, and
			// LlamaModel.forward makes them cache_position.unsqueeze(0):
			// one row of tables for the whole batch (measured:
			// testdata/measured/cpu/saved); generate() passes each
			// sequence's own.
			rT := T
			if w.Train {
				rT = seq
			}
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(2, re, rT, bl.d)))
		}
		if w.Train && w.Attention == Eager && (w.Checkpointing == FullCheckpointing || w.Checkpointing == EveryKCheckpointing) {
			// A reentrant checkpoint saves the block's tensor arguments:
			// the eager 4-D causal mask too (s·s in the compute dtype,
			// one storage expanded over the batch).
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(e, seq, seq)))
		}
	case layoutOPT:
		if w.Train && w.Attention == Eager && (w.Checkpointing == FullCheckpointing || w.Checkpointing == EveryKCheckpointing) {
			// OPTDecoder (v4.45) makes an attention mask of ones when
			// none is given and _prepare_4d_causal_attention_mask
			// combines it with the causal mask: a [b, 1, s, s] tensor
			// in the compute dtype, which the reentrant checkpoint saves
			// as a block argument.
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(e, w.Batch, seq, seq)))
		}
	}
	// Embedding: the lookup saves the ids (counted in TokenIDs); BERT's
	// embedding LayerNorm saves its input and statistics; embedding
	// dropout saves a mask. OPTDecoder.forward applies none (its
	// config.dropout is used by the layers' two residual dropouts only,
	// modeling_opt.py at transformers v4.57.1, commit 8cb5963c; the CPU
	// rows' drop − nodrop differences hold four noise tensors for two
	// layers, not five).
	emb := int64(0)
	if l == layoutBERT {
		emb = c.normSaved(actLN, Th, s.Hidden, e)
	}
	if w.Dropout && (l == layoutBERT || l == layoutGPT2 || l == layoutBigCode || l == layoutCLIPText) {
		de := e
		if w.Autocast {
			de = 4 // the fp32 embeddings under autocast: the CPU's noise is fp32 (autocastNorms)
		}
		emb = c.a(emb, c.m(w.dropMask(de), Th, s.Hidden))
	}
	if s.Family == "gemma" || s.Family == "gemma2" || s.Family == "gemma3_text" {
		emb = c.a(emb, e) // the sqrt(hidden) normalizer, a 0-dim device tensor
	}
	if l == layoutGPT2 && w.Train && !w.FrozenBase.Input {
		// wpe saves its indices, the position ids GPT2Model.forward
		// makes once as cache_position.unsqueeze(0): one int64 row
		// (modeling_gpt2.py v4.57.1; testdata/measured/cpu/saved),
		// counted with the tables the model computes once. A frozen
		// wpe (FrozenInput) records nothing.
		a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(8, seq)))
	}
	a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), emb))
	// The head's class: BERT's default is its masked-LM head, a
	// decoder's a causal LM head.
	kind := s.Head
	if kind == HeadDefault || kind == HeadCausalLM {
		kind = HeadCausalLM
		if l == layoutBERT {
			kind = HeadMaskedLM
		}
	}
	lm := kind == HeadCausalLM || kind == HeadMaskedLM
	// Final norm: the last block's output and the norm's own tensors.
	var fin int64
	switch {
	case l == layoutBERT && !lm:
		// Post-LN: the last block's output LayerNorm saved its input;
		// its output is saved by the task head (taskHead).
	case l == layoutBERT:
		// BertPredictionHeadTransform: dense input, GELU input, LayerNorm.
		fin = c.a(eTh, eTh, c.normSaved(actLN, Th, s.Hidden, e))
		if sh.fz.Input {
			fin -= eTh // a frozen dense saves no input (FrozenInput)
		}
	case bl.post || s.NoFinalNorm:
		fin = eTh // the last block's output, saved by the head
		if bl.post {
			fin = 0
		}
	case w.Autocast && w.Train && w.Compile&CompileHead == 0 && e != 4 && bl.qkvIn > 0 && (bl.norm == actRMS || bl.norm == actLN) && !bl.sandwich && bl.mla == nil:
		fin = c.normSaved(bl.norm, Th, s.Hidden, 4) // the fp32 residual stream (autocastNorms)
		if sh.fz.Input {
			fin -= c.normCopy(bl.norm, Th, s.Hidden, 4) // a frozen weight (FrozenInput)
		}
	default:
		fin = c.normSaved(bl.norm, Th, s.Hidden, e)
		if w.Train && w.Compile&CompileHead != 0 {
			// The final norm in the compiled graph: its input and
			// rsqrt, as a compiled block's norms (compile.go).
			fin -= c.m(4, Th, s.Hidden)
		} else if sh.fz.on() {
			fin -= c.normCopy(bl.norm, Th, s.Hidden, e) // a frozen weight (FrozenBase)
		}
	}
	a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), fin))
	var flops int64
	for _, x := range c.layers() {
		flops = c.a(flops, c.m(x.FLOPs, x.Count))
	}
	if !w.Train {
		// Without a graph nothing is saved, but what the model computes
		// once and hands to every block lives through all of them: the
		// rotary cos/sin tables (or BLOOM's ALiBi bias), and with eager
		// attention the 4-D additive mask. transformers' eager_mask
		// (masking_utils.py, v4.53 on: create_causal_mask and the
		// bidirectional masks of the encoders) turns the boolean
		// [b, 1, s, s] mask, a broadcast view, into a float one with
		// torch.where(mask, 0.0, finfo.min), a dense b·s² tensor in the
		// compute dtype.
		a.FinalNorm, a.Embedding = 0, 0
		a.Shared -= shared0
		if w.Attention == Eager {
			// Under autocast the mask takes the dtype of the input
			// embeddings, fp32 with fp32 weights, and so do the masked
			// scores (a bf16 + fp32 add promotes): the softmax then
			// holds the same 10 bytes per score as a bf16 one
			// converting its input (attention), and the mask 4 per entry.
			me := e
			if w.Autocast {
				me = 4
			}
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(me, w.Batch, seq, seq)))
		}
	}
	if !lm {
		a.FLOPs = c.a(a.FLOPs, flops)
		c.taskHead(a, *s, w, kind, e, T, Th, l != layoutBERT && s.NoFinalNorm && !bl.post)
		if sh.fz.Input && part == "" {
			c.frozenEmbeds(a, s, e, T, kind != HeadImageCls)
		}
		c.finish(a, w)
		return
	}
	c.head(a, s, w, e, T, Th, l == layoutBERT || (s.NoFinalNorm && !bl.post))
	if sh.fz.Input && part == "" {
		c.frozenEmbeds(a, s, e, T, true)
	}
	V, _ := checked.CeilDiv(s.Vocab, w.tp())
	a.FLOPs = c.a(a.FLOPs, flops, c.m(2, T, s.Hidden, V))
	c.finish(a, w)
}

// taskHead sets the head, logits and loss of a classification or
// question-answering head (see [Head]) over T tokens of which Th are this
// rank's (sequence parallelism), with the loss CrossEntropyLoss computes
// on the logits in the compute dtype:
//
//   - the head's input, the last hidden state (e·Th·h; counted in
//     FinalNorm when inputCounted): the classifier's or score's input,
//     or the storage of the first-token slice that BERT's pooler,
//     RoBERTa's classification head and ViT's classifier read;
//   - BERT/RoBERTa sequence classification: the pooler's (or the
//     classification head's) tanh output, e·B·h, with dropout a 1-byte
//     mask and the dropped copy (B·h + e·B·h); decoders' sequence
//     classification: score runs at every position (T·labels, a
//     transient) and the logits of the last non-pad token are gathered,
//     saving two int64 index vectors (16·B); token classification with
//     dropout: the mask (Th·h);
//   - logits of rows × labels: B rows for sequence and image
//     classification, T for token classification, T × 2 (start, end)
//     for question answering; log-softmax (e per logit), its 0-dim fp32
//     total weight (two for question answering: start and end losses),
//     the loss gradient (2·e per logit);
//   - ids (8·T, none for images) and labels (8·B; 8·T for token
//     classification; 16·B for start and end positions).
func (c *actCalc) taskHead(a *Activations, s Spec, w Workload, kind Head, e, T, Th int64, inputCounted bool) {
	B, H, L := w.Batch, s.Hidden, s.labels()
	bert := layoutOf(&s) == layoutBERT
	rows, flopRows, labels, losses := T, T, c.m(8, T), int64(1)
	switch kind {
	case HeadSeqCls, HeadImageCls:
		rows, labels = B, c.m(8, B)
		if bert || kind == HeadImageCls {
			flopRows = B
		}
	case HeadQA:
		labels, losses = c.m(16, B), 2
	}
	elems := c.m(rows, L)
	a.Logits = gpumem.Bytes(c.a(int64(a.Logits), c.m(e, elems)))
	flops := c.m(2, flopRows, H, L)
	if bert && kind == HeadSeqCls {
		flops = c.a(flops, c.m(2, B, H, H)) // pooler, or RoBERTa's classifier.dense
	}
	a.FLOPs = c.a(a.FLOPs, flops)
	if !w.Train {
		return
	}
	h := int64(0)
	if !inputCounted {
		h = c.m(e, Th, H)
	}
	switch {
	case kind == HeadSeqCls && bert:
		h = c.a(h, c.m(e, B, H))
		if w.Dropout {
			h = c.a(h, c.m(w.dropMask(e), B, H), c.m(e, B, H))
		}
	case kind == HeadSeqCls:
		h = c.a(h, c.m(16, B))
	case kind == HeadTokenCls && w.Dropout:
		h = c.a(h, c.m(w.dropMask(e), Th, H))
	}
	a.Head = gpumem.Bytes(c.a(int64(a.Head), h, c.m(e, elems), c.m(4, losses)))
	ids := c.m(8, T)
	if kind == HeadImageCls {
		ids = 0
	}
	a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), ids, labels))
	a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), c.m(2, e, elems)))
}

// head sets the LM head, logits and loss of a language model with T
// tokens: the head's input (e·T·h; counted in FinalNorm when it is the
// last block's output), cross_entropy's log-softmax (T·V) and its 0-dim
// fp32 total weight, the logits (e·T·V), the loss gradient (8·T·V); ids
// and labels are int64 (16·T). Causal LMs compute the loss through
// transformers' ForCausalLMLoss, which upcasts the logits to fp32 first
// (logits.float(): LogitsFP32, and an fp32 log-softmax); BERT's MLM loss,
// T5 and Whisper call CrossEntropyLoss on the logits as they are.
//
// Under tensor parallelism the head is vocab-parallel (Megatron's
// VocabParallelEmbedding and vocab-parallel cross entropy): each rank
// holds Vocab/t columns of the logits, their fp32 copy, log-softmax and
// gradient. Th is the head input's tokens (T, or T/t under sequence
// parallelism).
func (c *actCalc) head(a *Activations, s *Spec, w Workload, e, T, Th int64, inputCounted bool) {
	V, _ := checked.CeilDiv(s.Vocab, w.tp())
	if w.Train && w.Loss.Kind != FullLoss {
		c.lossHead(a, *s, w, e, T, V, inputCounted)
		return
	}
	if k := w.LogitsToKeep; k > 0 && !w.Train && k < T/w.Batch {
		// logits_to_keep: the head projects the last k positions.
		a.Logits = gpumem.Bytes(c.a(int64(a.Logits), c.m(e, w.Batch, k, V)))
		return
	}
	TV := c.m(T, V)
	a.Logits = gpumem.Bytes(c.a(int64(a.Logits), c.m(e, TV)))
	if !w.Train && !w.Labels {
		return
	}
	h := int64(0)
	if !inputCounted && (!w.Train || !w.FrozenBase.on()) {
		h = c.m(e, Th, s.Hidden) // a frozen head saves no input (FrozenBase)
	}
	if layoutOf(s) == layoutBERT && !w.FrozenBase.Input {
		h = c.m(e, Th, s.Hidden) // the transform's LayerNorm output
	}
	if s.Family == "gemma2" {
		h = c.a(h, c.m(e, TV)) // final_logit_softcapping: tanh saves its result
	}
	if w.Train && w.Compile&CompileLoss != 0 {
		// Compiled loss (compile.go): the max and log-sum-exp of each
		// row (4·T each) are saved and the log-probabilities recomputed;
		// the 0-dim fp32 total weight too, as in eager.
		ids := c.m(16, T)
		if w.Batch == 1 {
			ids = c.a(ids, 8) // as below: a view of the padded labels
		}
		a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), ids))
		if w.Compile&CompileHead == 0 && e != 4 {
			// The loss alone compiled (torchtune's compile_loss): it is
			// given the logits upcast outside it (TransformerDecoder.
			// unembed: output(h).float(), torchtune/modules/
			// transformer.py), so it saves that fp32 copy, and its
			// backward makes the fp32 gradient beside it (4 per logit);
			// the upcast's backward casts it back once the compiled
			// backward has freed the copy (validation-compile rows:
			// eager 8, compiled 4 bytes per logit at the backward). The
			// copy is made in forward beside the logits, and it is the
			// saved copy (in Head): no other fp32 tensor of the logits.
			a.Head = gpumem.Bytes(c.a(int64(a.Head), h, c.m(4, TV), c.m(8, T), 4))
			a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), c.m(4, TV)))
			return
		}
		// With the head in the graph (the whole model compiled, whose
		// ForCausalLMLoss upcasts inside it): the logits (an mm output)
		// are saved in their dtype, no fp32 copy is made in forward,
		// and the backward writes the logits' gradient in their dtype.
		// The model also returns the logits, an output of the compiled
		// graph that the loss does not use: autograd hands the compiled
		// backward a zero gradient for it, materialized (a tangent of
		// AOTAutograd's backward graph, added into the logits'
		// gradient by the fused loss backward in Inductor's code), e
		// per logit more (measured on the CPU, compile-model rows).
		// Without checkpointing, transformers' decoder also returns its
		// DynamicCache in training (LlamaModel.forward makes one when
		// use_cache, the config's default, which only gradient
		// checkpointing turns off): every layer's roped k and v (KV
		// heads), outputs of the graph too, whose zero gradients are
		// materialized as well: k in fp32 under autocast (the fp32 cos
		// and sin promote it), v in e.
		grad := c.m(2*e, TV)
		if w.Checkpointing == NoCheckpointing {
			ke := e
			if w.Autocast {
				ke = 4
			}
			grad = c.a(grad, c.m(ke+e, s.Layers, T, s.KVHeads, s.HeadDim))
		}
		a.LogitsSaved = true
		a.Head = gpumem.Bytes(c.a(int64(a.Head), h, c.m(8, T), 4))
		a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), grad))
		return
	}
	lsm, causal := int64(4), true
	halfGrad := int64(0)
	switch layoutOf(s) {
	case layoutBERT, layoutT5, layoutWhisper, layoutOPT:
		// CrossEntropyLoss on the logits as they are (OPTForCausalLM of
		// transformers up to v4.45 computes its own loss so, with no
		// fp32 upcast: ForCausalLMLoss, which upcasts, came in v4.46).
		// Under autocast, cross_entropy's log_softmax is on the fp32
		// list (fp32_set_opt_dtype: log_softmax(x, dtype=float32)),
		// which on CUDA converts bf16 logits to an fp32 copy first
		// (fp16 ones are read directly, half_to_float; SoftMax.cpp):
		// an fp32 log-softmax, and for bf16 a transient fp32 copy.
		lsm, causal = e, false
		if w.Autocast && e != 4 {
			lsm = 4
			if w.computeDType(s) != gpumem.FP16 {
				a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(4, TV)))
			} else {
				// half_to_float's backward gives the gradient in fp16
				// (_log_softmax_backward_data to the input dtype): the
				// loss's fp32 gradient and that one.
				halfGrad = c.m(4+e, TV)
			}
		}
	default:
		if e != 4 {
			a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(4, TV)))
		}
	}
	if !w.Train {
		// Evaluation: nothing is saved, but cross_entropy's log-softmax
		// (lsm per logit) is made beside the upcast, both freed once
		// nll_loss has reduced them.
		a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(lsm, TV)))
		return
	}
	rows := TV
	if layoutOf(s) == layoutMamba {
		// MambaForCausalLM (transformers v4.57.1) computes its own loss:
		// logits[..., :-1, :].contiguous(), an fp32 copy of T − b rows
		// alive until the forward returns, whose CrossEntropyLoss saves
		// the log-softmax of those rows (testdata/oracle/mamba.json).
		rows = c.m(T-w.Batch, V)
		a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(4, rows)))
	}
	a.Head = gpumem.Bytes(c.a(int64(a.Head), h, c.m(lsm, rows), 4))
	ids := c.m(16, T)
	if causal && w.Batch == 1 {
		// ForCausalLMLoss pads the labels by one and slices them:
		// with one sequence the slice is already contiguous, so the loss
		// saves a view of the padded (s+1)-long tensor.
		ids = c.a(ids, 8)
	}
	a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), ids))
	lossGrad := c.m(2*lsm, TV)
	if halfGrad > 0 {
		lossGrad = halfGrad
	}
	a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), lossGrad))
}

// finish computes the peaks and the recompute fraction from a.Layers.
func (c *actCalc) finish(a *Activations, w Workload) {
	var f, b gpumem.Bytes
	var flops, recompute int64
	for _, l := range c.layers() {
		f = max(f, l.Forward)
		b = max(b, l.Backward)
		flops = c.a(flops, c.m(l.FLOPs, l.Count))
		if !w.Train || l.Count == 0 {
			continue
		}
		switch w.Checkpointing {
		case FullCheckpointing:
			recompute = c.a(recompute, c.m(l.FLOPs, l.Count))
		case SelectiveCheckpointing:
			recompute = c.a(recompute, c.m(l.AttentionFLOPs, l.Count))
		case EveryKCheckpointing:
			n, _ := checked.CeilDiv(l.Count, actMax(1, w.CheckpointEvery))
			recompute = c.a(recompute, c.m(l.FLOPs, n))
		}
	}
	a.Forward, a.Backward = f, b
	if a.FLOPs < flops {
		a.FLOPs = flops
	}
	if a.FLOPs > 0 {
		a.Recompute = float64(recompute) / float64(a.FLOPs)
	}
	if !w.Train {
		a.Recompute = 0
	}
}

// vision adds a ViT/CLIP/SigLIP encoder over n images to a: patch tokens
// plus CLS, the patch convolution's pixel input (e·n·C·size²), CLIP's
// pre-LayerNorm, and the final LayerNorm. It returns the tokens per image.
func (c *actCalc) vision(a *Activations, s Spec, w Workload, e int64, part string, n int64, frozen bool) int64 {
	tokens := s.Image.Patches() + actB2i(s.ClassToken)
	sh := actShape{b: n, s: tokens, e: e, k: w.Attention, hc: w.HeadChunk, drop: w.Dropout, mask: w.dropMask(e), cpu: w.Backend == CPU, gqa: w.NoAttentionMask, autocast: w.Autocast, softmax: w.Softmax, half: w.computeDType(&s) == gpumem.FP16}
	bl := actFamily(&s)
	if w.Train && w.FrozenBase.Input {
		sh.fz = w.FrozenBase
	}
	c.stack(a, w, part, "encoder", &bl, sh, s.Layers, w.Train && !frozen)
	pixels := c.m(e, n, s.Image.Channels, s.Image.Size, s.Image.Size)
	if !w.Train {
		// A pass without a graph saves nothing, but the caller holds
		// the pixel values it passed (pixel_values, in the compute
		// dtype) until the pass returns, as a training step's patch
		// convolution saves them; measured on the CPU
		// (testdata/measured/cpu, ViT prefill rows: the level before
		// the pass holds the parameters and the inputs).
		a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), pixels))
	}
	if !w.Train || frozen {
		return tokens
	}
	T := c.m(n, tokens)
	// pixels: saved by the patch convolution, frozen or not (FrozenInput).
	in := autocastInputs(c, w, e, c.m(n, s.Image.Channels, s.Image.Size, s.Image.Size))
	emb := c.a(pixels, in)
	if part == "" {
		a.Inputs = gpumem.Bytes(actMax(pixels, in))
	}
	if layoutOf(&s) == layoutCLIPVision {
		emb = c.a(emb, c.normSaved(actLN, T, s.Hidden, e)) // pre_layrnorm
	}
	if w.Dropout && layoutOf(&s) == layoutVision {
		emb = c.a(emb, c.m(w.dropMask(e), T, s.Hidden))
	}
	a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), emb))
	if part == "" {
		a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), c.normSaved(actLN, T, s.Hidden, e)))
		a.Tokens = tokens
	}
	return tokens
}

// multimodal fills a for a LLaVA-style model: the vision tower over
// Batch·Images images (LLaVA takes the features of the second-to-last
// block, vision_feature_layer -2, so the last block saves nothing that
// survives the tower), the projector (Linear, GELU, Linear: it saves the
// selected features, the GELU input and output), then the language model
// over SeqLen + Images·ImageTokens tokens. Hugging Face scatters the image
// features into the embeddings with masked_scatter, which saves a 1-byte
// mask per position (counted in TokenIDs).
func (c *actCalc) multimodal(a *Activations, s Spec, w Workload, e int64) {
	v, t := *s.Vision, *s.Text
	n := c.m(w.Batch, w.Images)
	per := w.ImageTokens
	if per == 0 {
		per = v.Image.Patches() // LLaVA drops CLS ("default" feature strategy)
	}
	if n > 0 {
		if s.Family == "llava" && v.Layers > 1 {
			// vision_feature_layer -2 (LLaVA-1.5): the last block's output
			// is unused, so its graph is released with it.
			v.Layers--
		}
		c.vision(a, v, w, e, "vision", n, w.FreezeVision)
		ph := t.Hidden
		T := c.m(n, per)
		saved := c.a(c.m(e, T, v.Hidden), c.m(2, e, T, ph))
		l := LayerActivations{Part: "projector", Kind: "projector", Count: 1, Tokens: per, Input: gpumem.Bytes(c.m(e, T, v.Hidden)),
			FLOPs: c.m(2, T, c.a(c.m(v.Hidden, ph), c.m(ph, ph))), Backward: gpumem.Bytes(c.m(2, e, T, ph))}
		if w.Train {
			l.Saved = gpumem.Bytes(saved)
			l.Kept, l.KeptTotal = l.Saved, l.Saved
			if w.Checkpointing == OffloadActivations {
				l.Kept, l.KeptTotal = 0, 0
				a.Offloaded = gpumem.Bytes(c.a(int64(a.Offloaded), saved))
			}
		} else {
			l.Forward = gpumem.Bytes(c.m(2, e, T, ph))
		}
		c.push(l)
	}
	seq := c.a(w.SeqLen, c.m(w.Images, per))
	c.decoderOnly(a, &t, w, e, "language", seq)
	a.ImageTokens = per
	if w.Train && n > 0 {
		a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), c.m(w.Batch, seq)))
	}
}

// encDec fills a for T5 or Whisper: encoder blocks over the encoder
// length, decoder blocks (self-attention, cross-attention over the encoder
// output, MLP) over SeqLen, the head over SeqLen.
//
// T5: T5LayerNorm (actT5RMS), no attention scaling, fp32 softmax
// (scores.float()), dropout after every sub-block and inside the MLP,
// ReLU or gated-gelu (gelu_new) MLP; the relative-position bucket indices
// (int64 s·s) are saved once per stack by the bias embedding; the decoder
// output is scaled by d_model^-0.5 before a tied head (a new tensor, saved
// by the head).
//
// Whisper: pre-LN blocks with GELU; the encoder front-end is two
// convolutions with GELU over 2×frames mel frames (conv1 saves the mel
// input, e·M·2F; GELU saves conv1's output, conv2 the GELU output, each
// e·h·2F; the second GELU saves conv2's output, e·h·F).
// EncoderInput returns the positions the encoder of an encoder–decoder
// reads for a job of seqLen text tokens, and whether they are that text:
// T5 encodes the text (seqLen, true); Whisper always encodes 30 s of
// audio, its encoder's Positions (1500 frames, false). A model without an
// encoder returns (0, false). Generation starts a T5 decoder from one
// start token and a Whisper decoder from its seqLen-token prompt.
func (s Spec) EncoderInput(seqLen int64) (tokens int64, text bool) {
	switch {
	case s.Encoder == nil:
		return 0, false
	case layoutOf(&s) == layoutWhisper:
		return s.Encoder.Positions, false
	}
	return seqLen, true
}

func (c *actCalc) encDec(a *Activations, s Spec, w Workload, e int64) {
	enc := *s.Encoder
	l := layoutOf(&s)
	encLen := w.EncoderLen
	if encLen == 0 {
		encLen, _ = s.EncoderInput(w.SeqLen)
	}
	eb := actBlock{h: s.Hidden, H: enc.Heads, KV: actMax(1, enc.KVHeads), d: actMax(1, enc.HeadDim), I: enc.Intermediate,
		norm: actLN, act: actGELU, attnDrop: true, residDrop: 2}
	if enc.KVHeads == 0 {
		eb.KV = enc.Heads
	}
	if enc.HeadDim == 0 {
		eb.d = s.HeadDim
	}
	eb.dv = eb.d
	db := actBlock{h: s.Hidden, H: s.Heads, KV: s.KVHeads, d: s.HeadDim, dv: s.HeadDim, I: s.Intermediate,
		norm: actLN, act: actGELU, attnDrop: true, residDrop: 3, cross: true}
	eb.mlpDrop, db.mlpDrop = true, true // whisper activation_dropout, T5's dropout after the activation
	if l == layoutT5 {
		for _, b := range []*actBlock{&eb, &db} {
			b.norm, b.upcast, b.act = actT5RMS, true, actReLU
			if s.Gated {
				b.act = actGatedNew
			}
		}
	}
	esh := actShape{b: w.Batch, s: encLen, e: e, k: w.Attention, hc: w.HeadChunk, drop: w.Dropout, mask: w.dropMask(e), cpu: w.Backend == CPU, gqa: w.NoAttentionMask, autocast: w.Autocast, softmax: w.Softmax, half: w.computeDType(&s) == gpumem.FP16}
	dsh := actShape{b: w.Batch, s: w.SeqLen, sk: encLen, e: e, k: w.Attention, hc: w.HeadChunk, drop: w.Dropout, mask: w.dropMask(e), cpu: w.Backend == CPU, gqa: w.NoAttentionMask, autocast: w.Autocast, softmax: w.Softmax, half: w.computeDType(&s) == gpumem.FP16}
	if w.Train && w.FrozenBase.Input {
		esh.fz, dsh.fz = w.FrozenBase, w.FrozenBase
	}
	if l == layoutT5 && !w.Train {
		// T5Stack.forward (modeling_t5.py at v4.57.1, commit 8cb5963c)
		// keeps the position_bias its first layer's attention returns,
		// the relative bias plus the mask, batch × heads × query × key
		// in the compute dtype, for every later layer: the encoder's
		// self-attention bias. The decoder keeps its own (t5HeldDecoder).
		eb.heldBias = c.m(e, w.Batch, eb.H, encLen, encLen)
		db.heldBias = t5HeldDecoder(c, &db, dsh)
		t5Held(&eb, &db)
		eb.firstMoment = t5FirstMoment(c, &eb, esh, s.Hidden, true, 0)
		db.firstMoment = t5FirstMoment(c, &db, dsh, s.Hidden, false, c.a(c.m(e, w.Batch, encLen, s.Hidden), c.m(e, w.Batch, w.SeqLen, w.SeqLen)))
	}
	if !w.Train {
		// The decoder runs beside the encoder's output, which the
		// encoder–decoder's forward holds (encoder_outputs) and every
		// cross-attention reads.
		db.heldBias = c.a(db.heldBias, c.m(e, w.Batch, encLen, s.Hidden))
	}
	if l == layoutWhisper && !w.Train {
		whisperHeld(c, &eb, w, esh, enc.Layers)
	}
	if l == layoutWhisper {
		whisperOutCopy(&eb, &db)
	}
	c.stack(a, w, "encoder", "encoder", &eb, esh, enc.Layers, w.Train)
	c.stack(a, w, "decoder", "cross", &db, dsh, s.Layers, w.Train)
	if dsh.fz.Input && s.Layers > 0 && w.Checkpointing == NoCheckpointing && w.tp() == 1 {
		// The decoder's first block reads token embeddings that need no
		// gradient (FrozenInput).
		ls := c.layers()
		l := &ls[len(ls)-1]
		l.KeptTotal -= min(l.Kept, gpumem.Bytes(c.frozenFirstCross(&db, dsh)))
	}
	a.Tokens = w.SeqLen
	eT := c.m(w.Batch, encLen)
	dT := c.m(w.Batch, w.SeqLen)
	if w.Train {
		// The encoder's final norm, and its output read by every
		// decoder block's cross k/v projections (saved once).
		encNorm := c.normSaved(eb.norm, eT, s.Hidden, e)
		decNorm := c.normSaved(db.norm, dT, s.Hidden, e)
		if esh.fz.Input {
			// Frozen norm weights save no normalized copy (FrozenInput).
			encNorm -= c.normCopy(eb.norm, eT, s.Hidden, e)
			decNorm -= c.normCopy(db.norm, dT, s.Hidden, e)
		}
		a.FinalNorm = gpumem.Bytes(c.a(encNorm, decNorm))
		if l == layoutT5 && w.Dropout {
			// T5Stack applies dropout after each final norm.
			encNorm = c.a(encNorm, c.m(w.dropMask(e), eT, s.Hidden))
			a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), c.m(w.dropMask(e), eT, s.Hidden), c.m(w.dropMask(e), dT, s.Hidden)))
		}
		a.EncoderNorm = gpumem.Bytes(encNorm)
		a.Shared = gpumem.Bytes(c.m(e, eT, s.Hidden))
		if esh.fz.Input {
			a.Shared = 0 // frozen cross k/v projections save no input (FrozenInput)
		}
		if l == layoutT5 && !esh.fz.Input {
			// The relative-position buckets the bias embedding's lookup
			// saves; a frozen one (FrozenInput) records nothing.
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(8, encLen, encLen), c.m(8, w.SeqLen, w.SeqLen)))
		}
		emb := int64(0)
		if l == layoutWhisper {
			F := encLen
			emb = c.a(c.m(e, w.Batch, s.MelBins, 2, F), c.m(2, e, w.Batch, s.Hidden, 2, F), c.m(e, w.Batch, s.Hidden, F))
			in := autocastInputs(c, w, e, c.m(w.Batch, s.MelBins, 2, F))
			emb = c.a(emb, in)
			a.Inputs = gpumem.Bytes(actMax(c.m(e, w.Batch, s.MelBins, 2, F), in))
		}
		if w.Dropout {
			emb = c.a(emb, c.m(w.dropMask(e), eT, s.Hidden), c.m(w.dropMask(e), dT, s.Hidden))
		}
		a.Embedding = gpumem.Bytes(emb)
		if l == layoutT5 {
			a.TokenIDs = gpumem.Bytes(c.m(8, eT)) // encoder ids; head adds decoder ids and labels
			if esh.fz.Input {
				// The encoder's inputs_embeds, which its first block
				// reads as they are (eval dropout), instead of ids.
				a.TokenIDs = 0
			}
		}
	} else if l == layoutWhisper {
		// A pass without a graph saves nothing, but the caller holds the
		// log-mel features it passed (input_features, B·M·2F in the
		// compute dtype) until the pass returns, as a training step's
		// conv1 saves them; measured on the CPU (testdata/measured/cpu,
		// Whisper prefill rows: the level before the pass holds the
		// parameters and the inputs).
		a.Embedding = gpumem.Bytes(c.m(e, w.Batch, s.MelBins, 2, encLen))
	}
	c.head(a, &s, w, e, dT, dT, false)
	var flops int64
	for _, x := range c.layers() {
		flops = c.a(flops, c.m(x.FLOPs, x.Count))
	}
	a.FLOPs = c.a(flops, c.m(2, dT, s.Hidden, s.Vocab))
	c.finish(a, w)
}
