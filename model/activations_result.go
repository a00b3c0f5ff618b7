package model

// What an activation estimate returns: saved bytes per layer, totals and
// peaks, and the cost of each checkpointing policy.

import (
	"github.com/gpumem/gpumem"
)

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
	// CrossInputs is the part of Shared the decoder blocks'
	// cross-attention key and value projections save: the encoder's
	// output, or under autocast each projection's own 16-bit cast of it
	// (t5Autocast). It exists from the decoder's first block in forward
	// to the decoder's last block in backward, so not at the encoder's
	// moments.
	CrossInputs gpumem.Bytes
	// EncoderOutputGrad is the gradient of an encoder–decoder's encoder
	// output, in that output's dtype (fp32 under autocast: t5Autocast):
	// the decoder's cross k/v projections' backward sums it, and it
	// lives until the encoder's final norm has run its backward.
	EncoderOutputGrad gpumem.Bytes
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
