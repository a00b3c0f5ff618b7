package budget

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// Pipeline is a diffusers text-to-image pipeline (Stable Diffusion 1.x,
// 2.x, XL) run as one job on one GPU: its UNet trained or run, its VAE
// and text encoders frozen beside it.
//
// Training is what diffusers' example scripts do
// (examples/text_to_image/train_text_to_image.py and _lora.py,
// examples/dreambooth/train_dreambooth_lora.py and _sdxl.py, diffusers
// 0.40.0.dev0 at 58eb52c0): each step encodes the images with the frozen
// VAE (latents at 1/8 of the resolution) and the captions with the
// frozen text encoders, runs the UNet forward and backward on the noisy
// latents, and steps the optimizer. The frozen components and a LoRA
// base are cast to weight_dtype (fp16 or bf16 with
// --mixed_precision), the LoRA adapters kept in fp32
// (cast_training_params); a full fine-tune keeps the UNet in fp32 under
// autocast.
//
// Inference is a pipeline call: the text encoders, Steps UNet passes
// (twice the images with classifier-free guidance) and the VAE decode,
// with enable_model_cpu_offload holding only the running component on
// the GPU, and enable_vae_slicing / enable_vae_tiling shrinking the
// decode.
type Pipeline struct {
	// UNet is the denoiser as set up: model.Finetune{Model: unet} trains
	// every parameter, with LoRA the adapters.
	UNet Model
	// VAE is the AutoencoderKL; the zero Model means none on the GPU
	// (latents cached beforehand).
	VAE Model
	// TextEncoders are the frozen text encoders on the GPU (none when
	// the prompts' embeddings were computed beforehand and the encoders
	// freed, as the DreamBooth LoRA scripts do without text-encoder
	// training).
	TextEncoders []Model
	// Mode is Training or Prefill (a pipeline call).
	Mode Mode
	// Precision is the UNet's policy: FP16Mixed or BF16Mixed are the scripts'
	// --mixed_precision fp16 or bf16 (a full fine-tune's fp32 UNet under
	// autocast, a LoRA base in 16 bits), FP32 none; a pipeline call runs
	// in FP16, BF16 or FP32 (torch_dtype).
	Precision Precision
	// FrozenDType is the storage of the frozen components and of a LoRA
	// base (weight_dtype); Invalid means the policy's compute dtype.
	FrozenDType gpumem.DType
	// VAEDType overrides FrozenDType for the VAE (the SDXL scripts keep
	// it in fp32); Invalid means FrozenDType.
	VAEDType gpumem.DType
	// Optimizer steps the UNet's trainable parameters (training).
	Optimizer optimizer.Optimizer
	// Batch is the images per step (training) or per call (inference).
	Batch int
	// Height and Width are the image's pixels; the latent is 1/8.
	Height, Width int
	// TextTokens is the text encoders' sequence (zero: 77 for a UNet;
	// for FLUX.1 512 T5 tokens, for SD3 77 CLIP + 256 T5 tokens, the
	// joint attention's text part).
	TextTokens int
	// Attention is the UNet's attention processor: model.SDPA
	// (AttnProcessor2_0, the default with torch 2; xformers'
	// memory-efficient kernel saves the same), or model.Eager
	// (AttnProcessor, as unet.set_default_attn_processor() sets it,
	// which materializes the scores). The VAE keeps its default,
	// AttnProcessor2_0.
	Attention model.Attention
	// Checkpointing is unet.enable_gradient_checkpointing().
	Checkpointing bool
	// GradAccum is gradient_accumulation_steps (0, 1: none).
	GradAccum int
	// Guidance runs the UNet on the conditional and unconditional
	// batch together (guidance_scale > 1, the pipelines' default 7.5 or
	// 5.0).
	Guidance bool
	// CPUOffload is enable_model_cpu_offload (inference): only the
	// running component is on the GPU; the others are in Host.
	CPUOffload bool
	// VAESlicing decodes one image at a time; VAETiling decodes in
	// overlapping tiles of the VAE's sample_size.
	VAESlicing, VAETiling bool
	// Device and Overhead are as in Job.
	Device   gpumem.Device
	Overhead Overhead
}

// PipelineStage is the pass of a pipeline that sets its peak.
type PipelineStage uint8

const (
	// StageEncode is the VAE encoding the training images.
	StageEncode PipelineStage = iota + 1
	// StageUNet is the UNet's forward pass (a denoising step).
	StageUNet
	// StageBackward is the UNet's backward pass.
	StageBackward
	// StageStep is the optimizer step.
	StageStep
	// StageDecode is the VAE decoding the latents.
	StageDecode
)

var stageNames = [...]string{StageEncode: "vae encode", StageUNet: "unet forward", StageBackward: "unet backward",
	StageStep: "optimizer step", StageDecode: "vae decode"}

// String returns the stage's name ("vae decode").
func (s PipelineStage) String() string {
	if s >= StageEncode && int(s) < len(stageNames) {
		return stageNames[s]
	}
	return "PipelineStage(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (s PipelineStage) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// PipelineEstimate is a pipeline's peak: the Breakdown (Weights is the
// UNet's, ExtraModels the VAE and text encoders on the GPU at the
// peak), and the stage that sets it.
type PipelineEstimate struct {
	Breakdown
	Stage PipelineStage
}

// EstimatePipeline returns the per-GPU memory of a diffusion pipeline
// at its peak. Activations come from model.Spec.UNetActivations and
// model.Spec.VAEActivations (model/diffusers_act.go); weights, gradients,
// optimizer state, workspaces, fragmentation and the CUDA context as in
// Estimate. Errors name the Pipeline field.
func EstimatePipeline(p Pipeline) (PipelineEstimate, error) {
	if err := p.validate(); err != nil {
		return PipelineEstimate{}, err
	}
	train := p.Mode == Training
	ov := p.Overhead.resolve(train, p.Device)
	wDT, gDT, sDT, cDT := p.Precision.dtypes()
	frozen := p.FrozenDType
	if frozen == gpumem.Invalid {
		frozen = cDT
	}
	vaeDT := p.VAEDType
	if vaeDT == gpumem.Invalid {
		vaeDT = frozen
	}
	var acc accumulator
	var b Breakdown
	m := &p.UNet
	// The UNet: a trainable part in the policy's weight dtype (with
	// autocast's 16-bit copies), the frozen rest in FrozenDType.
	all := acc.add(m.weightsOf(frozen, false, false, nil, 0))
	trainedAsFrozen := acc.add(m.weightsOf(frozen, true, false, nil, 0))
	var trained, casts, grads, state, step gpumem.Bytes
	if train {
		trained = acc.add(m.weightsOf(wDT, true, false, nil, 0))
		if p.Precision.autocast() {
			// autocast caches 16-bit casts of leaf weights that
			// require grad; the saving ops keep them to backward.
			casts = acc.add(m.weightsOf(cDT, true, true, nil, 0))
		}
		grads = acc.add(m.weightsOf(gDT, true, false, nil, 0))
		if p.Precision.master() {
			b.Master = acc.add(m.weightsOf(gpumem.FP32, true, false, nil, 0))
		}
		j := Job{Model: p.UNet, Mode: Training, Precision: p.Precision, Optimizer: p.Optimizer}
		var paged pagedFigures
		state, step, paged = acc.optimizer(&j, nil, sDT)
		b.Paged, b.PagedResident = paged.all, paged.one
		state -= paged.all
	} else {
		trainedAsFrozen = 0
	}
	unetW := acc.sum(all-trainedAsFrozen, trained)
	b.Optimizer = state
	// The frozen components.
	vaeW := gpumem.Bytes(0)
	if p.VAE.valid() {
		vaeW = acc.add(p.VAE.weightsOf(vaeDT, false, false, nil, 0))
	}
	var textW gpumem.Bytes
	for i := range p.TextEncoders {
		textW = acc.sum(textW, acc.add(p.TextEncoders[i].weightsOf(frozen, false, false, nil, 0)))
	}
	if w, ok := checked.Mul(int64(ov.Workspace), int64(ov.Workspaces)); ok {
		b.Workspace = gpumem.Bytes(w)
	} else {
		acc.add(0, errOverflow("workspaces"))
	}
	if acc.err != nil {
		return PipelineEstimate{}, acc.err
	}

	// Activations.
	B := int64(p.Batch)
	lh, lw := int64(p.Height)/8, int64(p.Width)/8
	uspec := m.spec
	vspec := p.VAE.spec
	uw := model.DiffusionWorkload{Batch: B, Height: lh, Width: lw, TextTokens: int64(p.TextTokens), DType: cDT,
		Attention: p.Attention, Upcast: uspec.UNet != nil && uspec.UNet.UpcastAttention, Train: train,
		Checkpointing: p.Checkpointing, Autocast: train && p.Precision.autocast()}
	if train && m.adapters {
		uw.LoRARank = loraRank(m)
	}
	mmdit := uspec.Family == model.FamilyFlux || uspec.Family == model.FamilySD3
	if !train && p.Guidance && uspec.Family != model.FamilyFlux {
		// FLUX.1's guidance is an embedding (guidance_embeds); FluxPipeline
		// runs one batch unless true_cfg_scale and a negative prompt ask
		// for a second pass.
		uw.Batch = 2 * B
	}
	var ua model.DiffusionActivations
	var err error
	if mmdit {
		if train && m.adapters {
			uw.LoRATargets = m.loraModules
		}
		ua, err = uspec.MMDiTActivations(uw)
	} else {
		ua, err = uspec.UNetActivations(uw)
	}
	if err != nil {
		return PipelineEstimate{}, pipelineField(err)
	}

	type cand struct {
		stage                    PipelineStage
		phase                    Phase
		unet, extra, grads, acts gpumem.Bytes
		optExtra, host           gpumem.Bytes
	}
	var cands []cand
	persist := gpumem.Bytes(0)
	if train && p.GradAccum > 1 {
		persist = grads
	}
	extra := acc.sum(vaeW, textW)
	if train {
		unet := acc.sum(unetW, casts)
		if p.VAE.valid() {
			va, err := vspec.VAEActivations(model.DiffusionWorkload{Batch: B, Height: int64(p.Height), Width: int64(p.Width),
				DType: vaeDT, Attention: model.SDPA})
			if err != nil {
				return PipelineEstimate{}, pipelineField(err)
			}
			cands = append(cands, cand{stage: StageEncode, phase: Forward, unet: unetW, extra: extra, grads: persist, acts: va.Forward})
		}
		cands = append(cands,
			cand{stage: StageUNet, phase: Forward, unet: unet, extra: extra, grads: persist, acts: ua.Forward},
			cand{stage: StageBackward, phase: Backward, unet: unet, extra: extra, grads: persist, acts: acc.sum(ua.Saved, ua.Backward)},
			// The end of backward: every gradient, the first unit's
			// transient (bounded by the largest).
			cand{stage: StageBackward, phase: Backward, unet: unet, extra: extra, grads: grads, acts: ua.Backward})
		if p.Optimizer != nil {
			cands = append(cands, cand{stage: StageStep, phase: Step, unet: unetW, extra: extra, grads: grads, optExtra: step})
		}
	} else {
		var host gpumem.Bytes
		unetOn, extraOn := unetW, extra
		if p.CPUOffload {
			// Only the UNet is on the GPU while it runs.
			host, extraOn = extra, 0
		}
		cands = append(cands, cand{stage: StageUNet, phase: Forward, unet: unetOn, extra: extraOn, acts: ua.Forward, host: host})
		if p.VAE.valid() {
			dec, vaeOn, err := p.decode(vaeDT, cDT, lh, lw)
			if err != nil {
				return PipelineEstimate{}, err
			}
			unetOn, extraOn, host = unetW, acc.sum(textW, vaeOn), 0
			if p.CPUOffload {
				unetOn, extraOn, host = 0, vaeOn, acc.sum(unetW, textW)
			}
			cands = append(cands, cand{stage: StageDecode, phase: Forward, unet: unetOn, extra: extraOn, acts: dec, host: host})
		}
	}
	best := -1
	var bestTotal gpumem.Bytes
	for i := range cands {
		c := &cands[i]
		t := acc.sum(acc.sum(acc.sum(c.unet, c.extra), acc.sum(c.grads, c.acts)),
			acc.sum(acc.sum(b.Master, b.Optimizer), acc.sum(b.Workspace, c.optExtra)))
		b.Phases[c.phase] = max(b.Phases[c.phase], t)
		if best < 0 || t > bestTotal {
			best, bestTotal = i, t
		}
	}
	if acc.err != nil {
		return PipelineEstimate{}, acc.err
	}
	c := cands[best]
	b.Phase = c.phase
	b.Weights, b.ExtraModels, b.Gradients, b.Activations = c.unet, c.extra, c.grads, c.acts
	b.Optimizer += c.optExtra
	b.Host = c.host
	b.HostNode = c.host
	frag, ok := checked.Scale(int64(b.Allocated()), ov.Fragmentation)
	if !ok {
		return PipelineEstimate{}, errOverflow("fragmentation")
	}
	b.Fragmentation = gpumem.Bytes(frag)
	b.Context = ov.Context
	return PipelineEstimate{Breakdown: b, Stage: c.stage}, nil
}

// decode returns the VAE decode's activations and the VAE's weights on
// the GPU while it decodes: StableDiffusionXLPipeline upcasts an fp16
// VAE whose config says force_upcast to fp32 first (upcast_vae), so
// both are fp32 then.
func (p *Pipeline) decode(vaeDT, cDT gpumem.DType, lh, lw int64) (acts, weights gpumem.Bytes, err error) {
	v := &p.VAE
	u := v.spec.UNet
	dt := vaeDT
	if dt == gpumem.FP16 && u.ForceUpcast && p.UNet.spec.UNet != nil && p.UNet.spec.UNet.AddEmbedIn > 0 {
		dt = gpumem.FP32
	}
	if weights, err = v.weightsOf(dt, false, false, nil, 0); err != nil {
		return 0, 0, err
	}
	B := int64(p.Batch)
	e := int64(dt.Bits() / 8)
	scale := int64(1) << (len(u.Channels) - 1)
	outOne := e * u.Out * lh * scale * lw * scale // one decoded image
	w := model.DiffusionWorkload{Batch: B, Height: lh, Width: lw, DType: dt, Attention: model.SDPA, Decode: true}
	// tile_latent_min_size: sample_size / 2^(levels-1).
	tile := u.SampleSize / scale
	if p.VAETiling && tile > 0 && (lh > tile || lw > tile) {
		// AutoencoderKL.tiled_decode: tiles of tile latents every
		// 0.75·tile, each decoded whole and kept (rows) until blended
		// into the output.
		stride := tile * 3 / 4
		nh, nw := (lh+stride-1)/stride, (lw+stride-1)/stride
		w.Height, w.Width = tile, tile
		a, err := v.spec.VAEActivations(w)
		if err != nil {
			return 0, 0, pipelineField(err)
		}
		tileOut := e * u.Out * B * u.SampleSize * u.SampleSize
		kept := tileOut * nh * nw
		return a.Forward + gpumem.Bytes(kept) + gpumem.Bytes(outOne*B), weights, nil
	}
	if p.VAESlicing && B > 1 {
		// Each image decoded alone; the decoded ones kept until cat.
		w.Batch = 1
		a, err := v.spec.VAEActivations(w)
		if err != nil {
			return 0, 0, pipelineField(err)
		}
		return a.Forward + gpumem.Bytes(2*outOne*B), weights, nil
	}
	a, err := v.spec.VAEActivations(w)
	if err != nil {
		return 0, 0, pipelineField(err)
	}
	return a.Forward, weights, nil
}

// addLoRAModule adds the module of an adapter tensor to list, named
// within its block ("attn.to_q": the transformer_blocks.<i>. or
// single_transformer_blocks.<i>. prefix removed), once.
func addLoRAModule(list []string, tensor string) []string {
	name, ok := strings.CutSuffix(tensor, ".lora_A.weight")
	if !ok {
		return list
	}
	for _, p := range []string{"single_transformer_blocks.", "transformer_blocks."} {
		if rest, ok := strings.CutPrefix(name, p); ok {
			if j := strings.IndexByte(rest, '.'); j >= 0 {
				name = rest[j+1:]
			}
			break
		}
	}
	if slices.Contains(list, name) {
		return list
	}
	return append(list, name)
}

// loraRank returns the adapters' rank from the first lora_A group.
func loraRank(m *Model) int64 {
	for i := range m.groups {
		g := &m.groups[i]
		if g.trainable && len(g.shape) == 2 && len(g.name) > 14 && g.name[len(g.name)-14:] == ".lora_A.weight" {
			return g.shape[0]
		}
	}
	return 0
}

// pipelineField renames a model workload error to the Pipeline field
// ("DiffusionWorkload.Batch" → "Pipeline.Batch").
func pipelineField(err error) error {
	var fe *gpumem.FieldError
	if errors.As(err, &fe) {
		if rest, ok := strings.CutPrefix(fe.Field, "DiffusionWorkload"); ok {
			return &gpumem.FieldError{Field: "Pipeline" + rest, Value: fe.Value, Err: fe.Err}
		}
	}
	return err
}

func (p *Pipeline) validate() error {
	if !p.UNet.valid() {
		return gpumem.Errorf("Pipeline.UNet", "zero Model", gpumem.ErrInvalid, "build it with budget.NewModel")
	}
	if f := p.UNet.spec.Family; (f != model.FamilyUNet || p.UNet.spec.UNet == nil) && f != model.FamilyFlux && f != model.FamilySD3 {
		return gpumem.Errorf("Pipeline.UNet", p.UNet.spec.Name, gpumem.ErrInvalid, "not a UNet2DConditionModel, FluxTransformer2DModel or SD3Transformer2DModel (family %q)", p.UNet.spec.Family)
	}
	if p.VAE.valid() && (p.VAE.spec.Family != model.FamilyVAE || p.VAE.spec.UNet == nil) {
		return gpumem.Errorf("Pipeline.VAE", p.VAE.spec.Name, gpumem.ErrInvalid, "not an AutoencoderKL (family %q)", p.VAE.spec.Family)
	}
	for i := range p.TextEncoders {
		if !p.TextEncoders[i].valid() {
			return gpumem.Errorf("Pipeline.TextEncoders["+strconv.Itoa(i)+"]", "zero Model", gpumem.ErrInvalid, "build it with budget.NewModel")
		}
	}
	switch p.Mode {
	case Training:
		if p.UNet.untrainable != nil {
			return p.UNet.untrainable
		}
		if p.UNet.trainableParams == 0 {
			return gpumem.Errorf("Pipeline.UNet", p.UNet.spec.Name, gpumem.ErrInvalid, "nothing is trainable")
		}
		if p.Optimizer == nil {
			return gpumem.Errorf("Pipeline.Optimizer", nil, gpumem.ErrInvalid, "training needs an optimizer")
		}
		if p.CPUOffload {
			return gpumem.Errorf("Pipeline.CPUOffload", true, gpumem.ErrUnsupported, "enable_model_cpu_offload is a pipeline call's; the training scripts keep the models on the GPU")
		}
		switch p.Precision {
		case FP32, FP16Mixed, BF16Mixed:
		default:
			return gpumem.Errorf("Pipeline.Precision", p.Precision, gpumem.ErrUnsupported, "training runs fp32, fp16-mixed or bf16-mixed (--mixed_precision)")
		}
	case Prefill:
		if p.Optimizer != nil {
			return gpumem.Errorf("Pipeline.Optimizer", p.Optimizer.String(), gpumem.ErrInvalid, "a pipeline call steps no optimizer")
		}
		switch p.Precision {
		case FP32, FP16, BF16:
		default:
			return gpumem.Errorf("Pipeline.Precision", p.Precision, gpumem.ErrUnsupported, "a pipeline call runs fp32, fp16 or bf16 (torch_dtype)")
		}
	default:
		return gpumem.Errorf("Pipeline.Mode", p.Mode, gpumem.ErrInvalid, "want Training or Prefill (a pipeline call)")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Batch", p.Batch}, {"Height", p.Height}, {"Width", p.Width}} {
		if f.v < 1 || f.v > 1<<20 {
			return gpumem.Errorf("Pipeline."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, 2^20]")
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Height", p.Height}, {"Width", p.Width}} {
		if f.v%8 != 0 {
			return gpumem.Errorf("Pipeline."+f.name, f.v, gpumem.ErrInvalid, "must be a multiple of 8 (the VAE's latent scale)")
		}
		if fam := p.UNet.spec.Family; (fam == model.FamilyFlux || fam == model.FamilySD3) && f.v%16 != 0 {
			// 2×2 latent patches: FluxPipeline checks height and width
			// are multiples of vae_scale_factor × 2.
			return gpumem.Errorf("Pipeline."+f.name, f.v, gpumem.ErrInvalid, "must be a multiple of 16 for a %s transformer (2×2 patches of the latent)", fam)
		}
	}
	if p.TextTokens < 0 || p.TextTokens > 1<<20 {
		return gpumem.Errorf("Pipeline.TextTokens", p.TextTokens, gpumem.ErrInvalid, "must be in [0, 2^20]")
	}
	if p.GradAccum < 0 {
		return gpumem.Errorf("Pipeline.GradAccum", p.GradAccum, gpumem.ErrInvalid, "must not be negative")
	}
	switch p.Attention {
	case model.Eager, model.SDPA, model.Flash:
	default:
		return gpumem.Errorf("Pipeline.Attention", p.Attention, gpumem.ErrUnsupported, "want eager or sdpa")
	}
	for _, f := range []struct {
		name string
		dt   gpumem.DType
	}{{"FrozenDType", p.FrozenDType}, {"VAEDType", p.VAEDType}} {
		if f.dt != gpumem.Invalid && (!f.dt.IsFloat() || f.dt.Bits() < 16) {
			return gpumem.Errorf("Pipeline."+f.name, f.dt, gpumem.ErrInvalid, "want fp32, fp16 or bf16")
		}
	}
	if err := p.Overhead.validate(p.Mode == Training, p.Device); err != nil {
		return err
	}
	// The UNet's own bound on the batch × latent: checked by the model.
	return nil
}
