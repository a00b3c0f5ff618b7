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
	"github.com/gpumem/gpumem"
)

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
	return s.appendPrepared(dst, w, nil)
}

// appendPrepared is appendChecked with, when prep is not nil, s its
// Spec and the layout and block description it holds.
func (s *Spec) appendPrepared(dst []LayerActivations, w Workload, prep *ActivationModel) (Activations, error) {
	var c actCalc
	c.prep = prep
	l := c.layoutOf(s)
	e, err := w.checkLayout(s, l)
	if err != nil {
		return Activations{}, err
	}
	switch l {
	case layoutMamba:
		if err := w.checkMamba(); err != nil {
			return Activations{}, err
		}
	case layoutMamba2, layoutJamba:
		if err := w.checkMamba(); err != nil {
			return Activations{}, err
		}
	case layoutZamba:
		if err := w.checkZamba(s); err != nil {
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
	case layoutZamba:
		c.zamba(&a, *s, w, e)
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
		return s.validateZamba(path)
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
