package model

// The workload of an activation estimate: softmax dtype, checkpointing
// policy, batch, sequence and parallel layout, and their validation.

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

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
	Attention Attention
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

// check validates w and returns the compute dtype's element size.
func (w Workload) check(s *Spec) (int64, error) {
	return w.checkLayout(s, layoutOf(s))
}

// checkLayout is check with l, layoutOf(s).
func (w *Workload) checkLayout(s *Spec, l layout) (int64, error) {
	if w.Batch < 1 || w.Batch > actMaxTokens {
		return 0, gpumem.Errorf("Workload.Batch", w.Batch, gpumem.ErrInvalid, "must be in [1, 2^40]")
	}
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
func (w *Workload) checkParallel(s *Spec) error {
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
