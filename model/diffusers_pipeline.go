package model

import (
	"bytes"
	"errors"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/gpumem/gpumem"
)

// DiffusionPipeline is the components of a diffusers text-to-image
// pipeline: its UNet, VAE and text encoders, as model_index.json lists
// them (unet, vae, text_encoder, text_encoder_2).
type DiffusionPipeline struct {
	Name         string
	UNet         Spec
	VAE          Spec
	TextEncoders []Spec
}

// Params returns the parameters of every component.
func (p DiffusionPipeline) Params() int64 {
	n := p.UNet.Params() + p.VAE.Params()
	for _, t := range p.TextEncoders {
		n += t.Params()
	}
	return n
}

// pipelines are the catalog pipelines: their components' catalog keys.
var pipelines = map[string][]string{
	"sd-1.5": {"sd-1.5-unet", "sd-1.5-vae", "sd-1.5-text-encoder"},
	"sd-2.1": {"sd-2.1-unet", "sd-2.1-vae", "sd-2.1-text-encoder"},
	"sdxl":   {"sdxl-unet", "sdxl-vae", "sdxl-text-encoder", "sdxl-text-encoder-2"},
	// FLUX.1-dev's text_encoder is openai/clip-vit-large-patch14's
	// CLIPTextModel, the same model as SD 1.5's.
	"flux.1-dev": {"flux.1-dev-transformer", "flux.1-dev-vae", "sd-1.5-text-encoder", "flux.1-dev-text-encoder-2"},
	// SD3's text_encoder_2 is CLIP ViT-bigG's text model with its
	// projection, SDXL's text_encoder_2; text_encoder_3 the T5-XXL
	// encoder FLUX.1 also uses.
	"sd3-medium": {"sd3-medium-transformer", "sd3-medium-vae", "sd3-medium-text-encoder", "sdxl-text-encoder-2", "flux.1-dev-text-encoder-2"},
}

// pipelineAlias maps the Hub repositories and common names to the
// catalog pipelines.
func pipelineAlias(name string) string {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "sd-1.5", "sd1.5", "sd15", "stable-diffusion-v1-5", "stable-diffusion-v1-5/stable-diffusion-v1-5", "runwayml/stable-diffusion-v1-5":
		return "sd-1.5"
	case "sd-2.1", "sd2.1", "sd21", "stable-diffusion-2-1", "stabilityai/stable-diffusion-2-1":
		return "sd-2.1"
	case "sdxl", "sdxl-base", "sd-xl", "stable-diffusion-xl-base-1.0", "stabilityai/stable-diffusion-xl-base-1.0":
		return "sdxl"
	case "flux.1-dev", "flux-dev", "flux", "black-forest-labs/flux.1-dev":
		return "flux.1-dev"
	case "sd3-medium", "sd3", "stable-diffusion-3-medium-diffusers", "stabilityai/stable-diffusion-3-medium-diffusers":
		return "sd3-medium"
	}
	return ""
}

// PipelineNames lists the catalog pipelines.
func PipelineNames() []string {
	out := make([]string, 0, len(pipelines))
	for k := range pipelines {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// LookupPipeline returns a catalog pipeline by name ("sd-1.5", "sd-2.1",
// "sdxl") or Hub repository ("stabilityai/stable-diffusion-xl-base-1.0"),
// its components being the catalog entries written from that
// repository's unet, vae and text encoder configs.
func LookupPipeline(name string) (DiffusionPipeline, bool) {
	key := pipelineAlias(name)
	keys, ok := pipelines[key]
	if !ok {
		return DiffusionPipeline{}, false
	}
	p := DiffusionPipeline{Name: key}
	for i, k := range keys {
		s, err := catalogSpec(k)
		if err != nil {
			return DiffusionPipeline{}, false
		}
		switch i {
		case 0:
			p.UNet = s
		case 1:
			p.VAE = s
		default:
			p.TextEncoders = append(p.TextEncoders, s)
		}
	}
	return p, true
}

// FromDiffusersDir reads a diffusers pipeline directory (a snapshot of
// a Hub repository): unet/config.json (or, for FLUX.1 and SD3,
// transformer/config.json) and vae/config.json, and the text encoders'
// text_encoder, text_encoder_2 and text_encoder_3 config.json where
// present. Errors name the file.
func FromDiffusersDir(fsys fs.FS) (DiffusionPipeline, error) {
	var p DiffusionPipeline
	read := func(dir string, required bool) (Spec, bool, error) {
		name := path.Join(dir, "config.json")
		data, err := fs.ReadFile(fsys, name)
		if errors.Is(err, fs.ErrNotExist) && !required {
			return Spec{}, false, nil
		}
		if err != nil {
			return Spec{}, false, gpumem.Errorf(name, "", gpumem.ErrInvalid, "%v", err)
		}
		s, err := FromHFConfig(bytes.NewReader(data))
		if err != nil {
			var fe *gpumem.FieldError
			if errors.As(err, &fe) {
				return Spec{}, false, &gpumem.FieldError{Field: name + ": " + fe.Field, Value: fe.Value, Err: fe.Err}
			}
			return Spec{}, false, err
		}
		s.Name = dir
		return s, true, nil
	}
	var err error
	var ok bool
	if p.UNet, ok, err = read("unet", false); err != nil {
		return DiffusionPipeline{}, err
	}
	if ok && p.UNet.Family != FamilyUNet {
		return DiffusionPipeline{}, gpumem.Errorf("unet/config.json", p.UNet.Family, gpumem.ErrUnsupported, "_class_name is not UNet2DConditionModel")
	}
	if !ok {
		if p.UNet, _, err = read("transformer", true); err != nil {
			return DiffusionPipeline{}, gpumem.Errorf("unet/config.json", "", gpumem.ErrInvalid, "neither unet/config.json nor transformer/config.json: %v", err)
		}
		if p.UNet.Family != FamilyFlux && p.UNet.Family != FamilySD3 {
			return DiffusionPipeline{}, gpumem.Errorf("transformer/config.json", p.UNet.Family, gpumem.ErrUnsupported, "_class_name is not FluxTransformer2DModel or SD3Transformer2DModel")
		}
	}
	if p.VAE, _, err = read("vae", true); err != nil {
		return DiffusionPipeline{}, err
	}
	if p.VAE.Family != FamilyVAE {
		return DiffusionPipeline{}, gpumem.Errorf("vae/config.json", p.VAE.Family, gpumem.ErrUnsupported, "_class_name is not AutoencoderKL")
	}
	for _, dir := range []string{"text_encoder", "text_encoder_2", "text_encoder_3"} {
		s, ok, err := read(dir, false)
		if err != nil {
			return DiffusionPipeline{}, err
		}
		if ok {
			p.TextEncoders = append(p.TextEncoders, s)
		}
	}
	return p, nil
}
