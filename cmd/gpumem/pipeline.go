package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/request"
)

// pipelineFlags are gpumem estimate's flags for a diffusers pipeline
// (budget.EstimatePipeline); the job's other flags (--train, --infer,
// --batch, --precision, --optimizer, --attention, --checkpointing,
// --lora-rank, --grad-accum, --gpu, --memory) keep their meaning.
type pipelineFlags struct {
	pipeline, diffusers          string
	resolution, height, width    int
	guidance                     float64
	cpuOffload                   bool
	vaeSlicing, vaeTiling        bool
	cacheLatents, precomputeText bool
	frozenDType, vaeDType        string
	maxSeqLen                    int
}

func (p *pipelineFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.pipeline, "pipeline", "", "a diffusers text-to-image pipeline from the catalog: "+strings.Join(model.PipelineNames(), ", ")+" (or its Hub repository); the UNet trains (--train: full, or LoRA with --lora-rank) or the pipeline runs (--infer)")
	fs.StringVar(&p.diffusers, "diffusers", "", "a diffusers pipeline `DIR` (a Hub snapshot): its unet, vae, text_encoder and text_encoder_2 config.json files")
	fs.IntVar(&p.resolution, "resolution", 0, "with --pipeline or --diffusers: the image's side in pixels (default the UNet's sample_size × 8: 512 for SD 1.5, 768 for SD 2.1, 1024 for SDXL)")
	fs.IntVar(&p.height, "height", 0, "with --pipeline or --diffusers: the image's height in pixels (default --resolution)")
	fs.IntVar(&p.width, "width", 0, "with --pipeline or --diffusers: the image's width in pixels (default --resolution)")
	fs.Float64Var(&p.guidance, "guidance-scale", 7.5, "with --pipeline --infer: classifier-free guidance runs the UNet on twice the images when it is above 1 (the pipelines' default 7.5)")
	fs.BoolVar(&p.cpuOffload, "cpu-offload", false, "with --pipeline --infer: enable_model_cpu_offload, only the running component on the GPU")
	fs.BoolVar(&p.vaeSlicing, "vae-slicing", false, "with --pipeline --infer: enable_vae_slicing, the VAE decodes one image at a time")
	fs.BoolVar(&p.vaeTiling, "vae-tiling", false, "with --pipeline --infer: enable_vae_tiling, the VAE decodes in overlapping tiles of its sample_size")
	fs.BoolVar(&p.cacheLatents, "cache-latents", false, "with --pipeline --train: latents encoded beforehand and the VAE not on the GPU (the DreamBooth scripts' --cache_latents)")
	fs.BoolVar(&p.precomputeText, "precompute-text", false, "with --pipeline: prompt embeddings computed beforehand and the text encoders not on the GPU (the DreamBooth LoRA scripts without --train_text_encoder; a pipeline loaded with text_encoder=None)")
	fs.StringVar(&p.frozenDType, "frozen-dtype", "", "with --pipeline: the storage of the frozen VAE, text encoders and LoRA base (weight_dtype; default the compute dtype)")
	fs.StringVar(&p.vaeDType, "vae-dtype", "", "with --pipeline: the VAE's storage when it differs (the SDXL scripts keep it in fp32)")
	fs.IntVar(&p.maxSeqLen, "max-sequence-length", 0, "with a FLUX.1 or SD3 pipeline: the T5 prompt tokens in the joint attention (the pipelines' and scripts' max_sequence_length; default 512 for FLUX.1, 256 for SD3, whose 77 CLIP tokens come first)")
}

// given reports whether a pipeline was named.
func (p *pipelineFlags) given() bool { return p.pipeline != "" || p.diffusers != "" }

// usedWithout returns the first pipeline-only flag set on fs while no
// pipeline is named.
func (p *pipelineFlags) usedWithout(fs *flag.FlagSet) string {
	used := ""
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "resolution", "height", "width", "guidance-scale", "cpu-offload", "vae-slicing", "vae-tiling",
			"cache-latents", "precompute-text", "frozen-dtype", "vae-dtype", "max-sequence-length":
			if used == "" {
				used = f.Name
			}
		}
	})
	return used
}

// components reads the pipeline named by --pipeline or --diffusers.
func (p *pipelineFlags) components() (model.DiffusionPipeline, error) {
	switch {
	case p.pipeline != "" && p.diffusers != "":
		return model.DiffusionPipeline{}, fmt.Errorf("%w: give one of --pipeline and --diffusers", request.ErrUsage)
	case p.pipeline != "":
		d, ok := model.LookupPipeline(p.pipeline)
		if !ok {
			return d, fmt.Errorf("%w: --pipeline %q: not in the catalog (want %s, or --diffusers DIR)", request.ErrUsage, p.pipeline, strings.Join(model.PipelineNames(), ", "))
		}
		return d, nil
	}
	st, err := os.Stat(p.diffusers)
	if err != nil || !st.IsDir() {
		return model.DiffusionPipeline{}, fmt.Errorf("%w: --diffusers %q: not a directory", request.ErrUsage, p.diffusers)
	}
	d, err := model.FromDiffusersDir(os.DirFS(p.diffusers))
	if err != nil {
		return d, fmt.Errorf("%w: --diffusers %s: %v", request.ErrUsage, p.diffusers, err)
	}
	d.Name = p.diffusers
	return d, nil
}

// build turns the flags into a budget.Pipeline and the device to check
// it on. Errors name the flag.
func (p *pipelineFlags) build(f *request.Flags, d model.DiffusionPipeline) (budget.Pipeline, gpumem.Device, error) {
	var pl budget.Pipeline
	var dev gpumem.Device
	switch {
	case f.LoadOnly:
		return pl, dev, fmt.Errorf("%w: --load: a pipeline is estimated for --train or --infer", request.ErrUsage)
	case f.Train == f.Infer:
		return pl, dev, fmt.Errorf("%w: give one of --train and --infer", request.ErrUsage)
	case f.Train:
		pl.Mode = budget.Training
	default:
		pl.Mode = budget.Prefill
	}
	prec := f.Precision
	if prec == "" {
		prec = "fp16"
		if f.Train {
			prec = "fp16-mixed"
		}
	}
	var err error
	if pl.Precision, err = budget.ParsePrecision(prec); err != nil {
		return pl, dev, fmt.Errorf("%w: --precision %q: want fp32, fp16-mixed or bf16-mixed to train, fp32, fp16 or bf16 to infer", request.ErrUsage, prec)
	}
	for _, x := range []struct {
		flag, v string
		dst     *gpumem.DType
	}{{"frozen-dtype", p.frozenDType, &pl.FrozenDType}, {"vae-dtype", p.vaeDType, &pl.VAEDType}} {
		if x.v == "" {
			continue
		}
		dt, err := gpumem.ParseDType(x.v)
		if err != nil || !dt.IsFloat() || dt.Bits() < 16 {
			return pl, dev, fmt.Errorf("%w: --%s %q: want fp32, fp16 or bf16", request.ErrUsage, x.flag, x.v)
		}
		*x.dst = dt
	}
	if pl.Attention, err = request.ParseAttention(f.Attn); err != nil {
		return pl, dev, err
	}
	ck, err := request.ParseCheckpointing(f.Ckpt)
	if err != nil {
		return pl, dev, err
	}
	switch ck {
	case model.NoCheckpointing:
	case model.FullCheckpointing:
		pl.Checkpointing = true
	default:
		return pl, dev, fmt.Errorf("%w: --checkpointing %s: a UNet checkpoints whole resnets and transformer blocks (enable_gradient_checkpointing): want none or full", request.ErrUsage, f.Ckpt)
	}
	if f.Train {
		if pl.Optimizer, _, _, err = f.OptimizerFor(); err != nil {
			return pl, dev, err
		}
		if pl.Optimizer == nil {
			return pl, dev, fmt.Errorf("%w: --optimizer %s: a pipeline's training steps an optimizer", request.ErrUsage, f.Opt)
		}
	}
	if f.Accum > 1 {
		pl.GradAccum = f.Accum
	}
	if f.Batch < 1 {
		return pl, dev, fmt.Errorf("%w: --batch %d: must be at least 1", request.ErrUsage, f.Batch)
	}
	pl.Batch = f.Batch
	side := p.resolution
	if side == 0 {
		if d.UNet.UNet != nil {
			side = int(d.UNet.UNet.SampleSize) * 8
		} else {
			// FluxPipeline's and StableDiffusion3Pipeline's
			// default_sample_size 128 latents.
			side = 128 * 8
		}
	}
	pl.Height, pl.Width = side, side
	if p.height > 0 {
		pl.Height = p.height
	}
	if p.width > 0 {
		pl.Width = p.width
	}
	for _, x := range []struct {
		flag string
		v    int
	}{{"resolution", p.resolution}, {"height", p.height}, {"width", p.width}} {
		if x.v < 0 || x.v%8 != 0 || x.v > 1<<20 {
			return pl, dev, fmt.Errorf("%w: --%s %d: want a multiple of 8 pixels (the VAE's latent scale), at most 2^20", request.ErrUsage, x.flag, x.v)
		}
		if d.UNet.UNet == nil && x.v%16 != 0 {
			return pl, dev, fmt.Errorf("%w: --%s %d: want a multiple of 16 pixels for a %s transformer (2×2 patches of the latent)", request.ErrUsage, x.flag, x.v, d.UNet.Family)
		}
	}
	if pl.Height < 8 || pl.Width < 8 {
		return pl, dev, fmt.Errorf("%w: --resolution: the UNet's config gives no sample_size; give --resolution", request.ErrUsage)
	}
	if p.guidance > 1 && !f.Train && d.UNet.Family != model.FamilyFlux {
		// FLUX.1's guidance scale is an input embedding, not a second
		// batch.
		pl.Guidance = true
	}
	if f.Train {
		for _, x := range []struct {
			flag string
			on   bool
		}{{"cpu-offload", p.cpuOffload}, {"vae-slicing", p.vaeSlicing}, {"vae-tiling", p.vaeTiling}} {
			if x.on {
				return pl, dev, fmt.Errorf("%w: --%s: a pipeline call's option (give --infer)", request.ErrUsage, x.flag)
			}
		}
	} else {
		for _, x := range []struct {
			flag string
			on   bool
		}{{"cache-latents", p.cacheLatents}} {
			if x.on {
				return pl, dev, fmt.Errorf("%w: --%s: a training script's option (give --train)", request.ErrUsage, x.flag)
			}
		}
	}
	pl.CPUOffload, pl.VAESlicing, pl.VAETiling = p.cpuOffload, p.vaeSlicing, p.vaeTiling
	if p.maxSeqLen != 0 {
		if d.UNet.UNet != nil {
			return pl, dev, fmt.Errorf("%w: --max-sequence-length: a FLUX.1 or SD3 pipeline's option (the UNet's text is CLIP's 77 tokens)", request.ErrUsage)
		}
		if p.maxSeqLen < 1 || p.maxSeqLen > 1<<20 {
			return pl, dev, fmt.Errorf("%w: --max-sequence-length %d: want a token count in [1, 2^20]", request.ErrUsage, p.maxSeqLen)
		}
		pl.TextTokens = p.maxSeqLen
		if d.UNet.Family == model.FamilySD3 {
			pl.TextTokens += 77 // the CLIP tokens, concatenated before T5's
		}
	}
	ft := model.Finetune{Model: d.UNet}
	if f.LoRARank < 0 {
		return pl, dev, fmt.Errorf("%w: --lora-rank %d: must not be negative", request.ErrUsage, f.LoRARank)
	}
	if f.LoRARank > 0 {
		ft.LoRA = model.LoRA{Rank: f.LoRARank}
		if f.LoRATargets != "" {
			if ft.LoRA.Targets, err = request.SplitTargets(f.LoRATargets); err != nil {
				return pl, dev, err
			}
		}
	}
	if pl.UNet, err = budget.NewModel(ft); err != nil {
		return pl, dev, fmt.Errorf("%w: --lora-rank %d: %v", request.ErrUsage, f.LoRARank, err)
	}
	if !p.cacheLatents {
		if pl.VAE, err = budget.ModelOf(d.VAE); err != nil {
			return pl, dev, err
		}
	}
	if !p.precomputeText {
		for _, t := range d.TextEncoders {
			m, err := budget.ModelOf(t)
			if err != nil {
				return pl, dev, err
			}
			pl.TextEncoders = append(pl.TextEncoders, m)
		}
	}
	g, catalog, err := request.DeviceFlags(f.GPU, f.Memory)
	if err != nil {
		return pl, dev, err
	}
	if dev = g; catalog {
		pl.Device = g
	}
	return pl, dev, nil
}

// pipelineEstimation is a pipeline's estimate and its fit.
type pipelineEstimation struct {
	need      budget.PipelineEstimate
	dev       gpumem.Device
	headroom  request.Headroom
	fits      bool
	shortfall gpumem.Bytes
}

func estimatePipeline(pl budget.Pipeline, dev gpumem.Device, hr request.Headroom) (pipelineEstimation, error) {
	need, err := budget.EstimatePipeline(pl)
	if err != nil {
		return pipelineEstimation{}, err
	}
	e := pipelineEstimation{need: need, dev: dev, headroom: hr, fits: true}
	if dev.Capacity > 0 {
		usable := checked.SatSub(int64(dev.Free()), int64(hr.Bytes))
		if short := gpumem.Bytes(checked.SatSub(int64(need.Required()), usable)); short > 0 {
			e.shortfall, e.fits = short, false
		}
	}
	return e, nil
}

func (e pipelineEstimation) verdict() error {
	if e.fits {
		return nil
	}
	return fmt.Errorf("%w on %s with %s: %s short", gpumem.ErrDoesNotFit, request.Clean(e.dev.Name), e.headroom.Name, e.shortfall.String())
}

func (e pipelineEstimation) writeJSON(out io.Writer, d model.DiffusionPipeline, pl budget.Pipeline) error {
	b := e.need.Breakdown
	_, trainable := pl.UNet.Params()
	params := map[string]any{"unet": d.UNet.Params(), "unet_trainable": trainable, "vae": d.VAE.Params()}
	var te []int64
	for _, t := range d.TextEncoders {
		te = append(te, t.Params())
	}
	params["text_encoders"] = te
	r := map[string]any{
		"pipeline": d.Name, "allocated_peak": int64(b.Allocated()), "reserved_peak": int64(b.Reserved()),
		"device_peak": int64(b.Device()), "phase": b.Phase.String(), "stage": e.need.Stage.String(),
		"components": components(b), "parameters": params, "height": pl.Height, "width": pl.Width,
	}
	if b.Host > 0 {
		r["host"] = int64(b.Host)
	}
	return writeFitJSON(out, r, e.dev, e.headroom, e.fits, e.shortfall)
}

// runPipeline is gpumem estimate for --pipeline or --diffusers.
func runPipeline(p *pipelineFlags, f *request.Flags, lim *budget.Limits, headroomGiven bool, asJSON bool, out io.Writer) error {
	d, err := p.components()
	if err != nil {
		return err
	}
	pl, dev, err := p.build(f, d)
	if err != nil {
		return err
	}
	if headroomGiven && dev.Capacity == 0 {
		return fmt.Errorf("%w: --headroom: it applies to the fit on --gpu or --memory (give one, or leave --headroom out)", request.ErrUsage)
	}
	e, err := estimatePipeline(pl, dev, request.HeadroomOf(lim, dev.Free()))
	if err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			return fmt.Errorf("%w: %v", request.ErrUsage, pipelineFlagError(fe))
		}
		return err
	}
	if asJSON {
		if err := e.writeJSON(out, d, pl); err != nil {
			return err
		}
		return e.verdict()
	}
	b := e.need.Breakdown
	what := "a pipeline call"
	denoiser := "UNet"
	if d.UNet.UNet == nil {
		denoiser = "transformer"
	}
	if pl.Mode == budget.Training {
		what = denoiser + " training"
		if f.LoRARank > 0 {
			what = denoiser + " LoRA r=" + strconv.FormatInt(f.LoRARank, 10) + " training"
		}
	}
	fmt.Fprintf(out, "%s pipeline: %s, batch %d at %d×%d (latent %d×%d), %s precision", request.Clean(d.Name), what, pl.Batch,
		pl.Width, pl.Height, pl.Width/8, pl.Height/8, pl.Precision)
	if pl.Optimizer != nil {
		fmt.Fprintf(out, ", %s", pl.Optimizer)
	}
	if pl.Guidance {
		fmt.Fprint(out, ", classifier-free guidance")
	}
	if pl.CPUOffload {
		fmt.Fprint(out, ", model CPU offload")
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "parameters: %s %s", strings.ToLower(denoiser), gpumem.Thousands(d.UNet.Params()))
	if pl.Mode == budget.Training {
		_, trainable := pl.UNet.Params()
		fmt.Fprintf(out, " (trainable %s)", gpumem.Thousands(trainable))
	}
	fmt.Fprintf(out, ", vae %s", gpumem.Thousands(d.VAE.Params()))
	for i, t := range d.TextEncoders {
		fmt.Fprintf(out, ", text encoder %d %s", i+1, gpumem.Thousands(t.Params()))
	}
	fmt.Fprintln(out)
	if b.Host > 0 {
		fmt.Fprintf(out, "host memory: %s (the components not running)\n", b.Host.String())
	}
	fmt.Fprintln(out)
	row := func(name string, v gpumem.Bytes) { fmt.Fprintf(out, "  %-38s %12s\n", name, v.String()) }
	for _, c := range b.Components() {
		if c.Bytes != 0 {
			name := c.Name
			switch name {
			case "weights":
				name = "weights (" + strings.ToLower(denoiser) + ")"
			case "extra_models", "extra models":
				name = "frozen models (vae, text encoders)"
			}
			row(name, c.Bytes)
		}
	}
	fmt.Fprintln(out)
	row("allocated peak (max_memory_allocated)", b.Allocated())
	row("reserved peak (max_memory_reserved)", b.Reserved())
	row("device peak (nvidia-smi)", b.Device())
	fmt.Fprintf(out, "peak stage: %s (%s)\n", e.need.Stage, b.Phase)
	if dev.Capacity > 0 {
		if e.fits {
			fmt.Fprintf(out, "fits on %s with %s: %s free, %s left (%.0f%% used)\n", request.Clean(dev.Name), e.headroom, dev.Free().String(),
				(dev.Free() - b.Required()).String(), 100*budget.Utilization(b, dev))
		} else {
			dom := b.Dominant()
			fmt.Fprintf(out, "does NOT fit on %s with %s: %s free, %s short; the largest component is %s (%s)\n", request.Clean(dev.Name),
				e.headroom, dev.Free().String(), e.shortfall.String(), dom.Name, dom.Bytes.String())
		}
	}
	return e.verdict()
}

// pipelineFlagError names the flag behind a budget.Pipeline field.
func pipelineFlagError(fe *gpumem.FieldError) error {
	flags := map[string]string{
		"Pipeline.Batch": "--batch", "Pipeline.Height": "--height", "Pipeline.Width": "--width",
		"Pipeline.Precision": "--precision", "Pipeline.Optimizer": "--optimizer", "Pipeline.Attention": "--attention",
		"Pipeline.GradAccum": "--grad-accum", "Pipeline.CPUOffload": "--cpu-offload", "Pipeline.UNet": "--lora-rank",
		"Pipeline.FrozenDType": "--frozen-dtype", "Pipeline.VAEDType": "--vae-dtype", "Pipeline.TextTokens": "--max-sequence-length",
	}
	if fl, ok := flags[fe.Field]; ok {
		return fmt.Errorf("%s %v: %v", fl, fe.Value, fe.Err)
	}
	return fe
}

// estimatePipelineFlags is runEstimate's branch for a pipeline: the
// flags a pipeline does not read are refused by name.
func estimatePipelineFlags(fs *flag.FlagSet, p *pipelineFlags, f *request.Flags, cf *chartFlags, headroomText string, asJSON bool, out io.Writer) error {
	if !p.given() {
		return fmt.Errorf("%w: --%s: give --pipeline or --diffusers", request.ErrUsage, p.usedWithout(fs))
	}
	var bad string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "pipeline", "diffusers", "resolution", "height", "width", "guidance-scale", "cpu-offload", "vae-slicing",
			"vae-tiling", "cache-latents", "precompute-text", "frozen-dtype", "vae-dtype", "max-sequence-length",
			"train", "infer", "batch", "grad-accum", "precision", "optimizer", "optimizer-impl", "momentum", "nesterov",
			"attention", "checkpointing", "lora-rank", "lora-targets", "gpu", "memory", "json", "headroom":
		default:
			if bad == "" {
				bad = fl.Name
			}
		}
	})
	if bad != "" {
		return fmt.Errorf("%w: --%s: not read for a diffusers pipeline (--pipeline, --diffusers)", request.ErrUsage, bad)
	}
	var lim budget.Limits
	if err := parseHeadroom(headroomText, &lim); err != nil {
		return err
	}
	_ = cf
	return runPipeline(p, f, &lim, headroomText != "", asJSON, out)
}
