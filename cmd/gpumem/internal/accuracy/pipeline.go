package accuracy

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// PipelineJob is a diffusers pipeline's part of a job (budget.Pipeline):
// the job's mode ("train", or "prefill" for a pipeline call), batch
// (images per step or per call), precision, optimizer, attention,
// checkpointing ("none", "full"), lora_rank and grad_accum keep their
// meaning.
type PipelineJob struct {
	// Name is a model.LookupPipeline name ("sdxl", "flux.1-dev").
	Name          string  `json:"name"`
	Height        int     `json:"height"`
	Width         int     `json:"width"`
	GuidanceScale float64 `json:"guidance_scale"`
	CPUOffload    bool    `json:"cpu_offload"`
	VAESlicing    bool    `json:"vae_slicing"`
	VAETiling     bool    `json:"vae_tiling"`
	// PrecomputeText leaves the text encoders off the GPU; CacheLatents
	// the VAE.
	PrecomputeText bool   `json:"precompute_text"`
	CacheLatents   bool   `json:"cache_latents"`
	FrozenDType    string `json:"frozen_dtype"`
	VAEDType       string `json:"vae_dtype"`
}

// pipeline returns the budget.Pipeline of a job with a pipeline part.
// Errors name the job field.
func (j *Job) pipeline() (budget.Pipeline, error) {
	var p budget.Pipeline
	pj := j.Pipeline
	d, ok := model.LookupPipeline(pj.Name)
	if !ok {
		return p, gpumem.Errorf(field("pipeline.name"), pj.Name, gpumem.ErrInvalid, "not a catalog pipeline")
	}
	switch j.Mode {
	case "train":
		p.Mode = budget.Training
	case "prefill":
		p.Mode = budget.Prefill
	default:
		return p, gpumem.Errorf(field("mode"), j.Mode, gpumem.ErrInvalid, "a pipeline job is train or prefill")
	}
	var err error
	if p.Precision, err = budget.ParsePrecision(j.Precision); err != nil {
		return p, gpumem.Errorf(field("precision"), j.Precision, gpumem.ErrInvalid, "want fp32, fp16-mixed, bf16-mixed, fp16 or bf16")
	}
	if p.Mode == budget.Training {
		if j.Optimizer == nil {
			return p, gpumem.Errorf(field("optimizer"), nil, gpumem.ErrInvalid, "a training job needs an optimizer")
		}
		o, ok := optimizer.Lookup(*j.Optimizer)
		if !ok {
			return p, gpumem.Errorf(field("optimizer"), *j.Optimizer, gpumem.ErrUnsupported, "not an optimizer gpumem models")
		}
		if p.Optimizer, err = withImpl(o, j.OptimizerImpl); err != nil {
			return p, err
		}
	}
	// A UNet runs eager or SDPA attention processors (budget.Pipeline).
	if p.Attention, err = model.ParseAttention(j.Attention); err != nil || p.Attention == model.Flash {
		return p, gpumem.Errorf(field("attention"), j.Attention, gpumem.ErrInvalid, "want eager or sdpa")
	}
	switch j.Checkpointing {
	case "", "none":
	case "full":
		p.Checkpointing = true
	default:
		return p, gpumem.Errorf(field("checkpointing"), j.Checkpointing, gpumem.ErrInvalid, "want none or full")
	}
	for _, x := range []struct {
		name, v string
		dst     *gpumem.DType
	}{{"pipeline.frozen_dtype", pj.FrozenDType, &p.FrozenDType}, {"pipeline.vae_dtype", pj.VAEDType, &p.VAEDType}} {
		if x.v == "" {
			continue
		}
		if *x.dst, err = gpumem.ParseDType(x.v); err != nil {
			return p, gpumem.Errorf(field(x.name), x.v, gpumem.ErrInvalid, "not a dtype")
		}
	}
	p.Batch, p.GradAccum = j.Batch, j.GradAccum
	p.Height, p.Width = pj.Height, pj.Width
	side := 128 * 8 // FluxPipeline's and StableDiffusion3Pipeline's default_sample_size 128
	if d.UNet.UNet != nil {
		side = int(d.UNet.UNet.SampleSize) * 8
	}
	if p.Height == 0 {
		p.Height = side
	}
	if p.Width == 0 {
		p.Width = side
	}
	p.Guidance = p.Mode == budget.Prefill && pj.GuidanceScale > 1
	p.CPUOffload, p.VAESlicing, p.VAETiling = pj.CPUOffload, pj.VAESlicing, pj.VAETiling
	ft := model.Finetune{Model: d.UNet}
	if j.LoRARank > 0 {
		ft.LoRA = model.LoRA{Rank: j.LoRARank, Targets: j.LoRATargets}
	}
	if p.UNet, err = budget.NewModel(ft); err != nil {
		return p, err
	}
	if !pj.CacheLatents {
		if p.VAE, err = budget.ModelOf(d.VAE); err != nil {
			return p, err
		}
	}
	if !pj.PrecomputeText {
		for _, t := range d.TextEncoders {
			m, err := budget.ModelOf(t)
			if err != nil {
				return p, err
			}
			p.TextEncoders = append(p.TextEncoders, m)
		}
	}
	return p, nil
}

// estimatePipeline estimates a pipeline job on the device of env.
func (j *Job) estimatePipeline(env *StatedEnv) (budget.Breakdown, string, error) {
	p, err := j.pipeline()
	if err != nil {
		return budget.Breakdown{}, "", err
	}
	if env != nil {
		var bj budget.Job
		if err := environment(&bj, env.GPU, "", env.CUDA, env.ModuleLoading); err != nil {
			return budget.Breakdown{}, "", err
		}
		p.Device, p.Overhead = bj.Device, bj.Overhead
	}
	e, err := budget.EstimatePipeline(p)
	if err != nil {
		return budget.Breakdown{}, "", err
	}
	return e.Breakdown, p.UNet.Spec().Family, nil
}
