package model

// Validating a Spec: the bounds on counts and dimensions and the checks of
// every field.

import (
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// maxTensors bounds the inventory a Spec may describe, so that a config
// with 10^9 layers or experts fails validation instead of exhausting
// memory. DeepSeek-V3 has about 92,000 checkpoint tensors.
const maxTensors = 1 << 20

// maxDim bounds every size field; no real model comes near it and it keeps
// every product of two fields far from overflow checks' edge.
const maxDim = 1 << 40

// maxLayers bounds the layers of one stack; the deepest published models
// have a few hundred.
const maxLayers = 1 << 16

// Validate reports the first field of s that makes it unusable, as a
// *gpumem.FieldError naming the field ("Spec.KVHeads") and value. A nil
// error guarantees that Tensors and Params succeed, and Bytes,
// WeightsBytes and Groups too unless the total bytes exceed int64.
func (s Spec) Validate() error {
	return s.validate("Spec")
}

func (s Spec) validate(path string) error {
	if err := s.validateFields(path); err != nil {
		return err
	}
	if s.Inventory != nil {
		return nil
	}
	return s.checkCount(path)
}

// validateFields checks every field but the total tensor count, which
// checkCount bounds by building the inventory in counting mode.
func (s Spec) validateFields(path string) error {
	if s.Inventory != nil {
		var total int64
		for i, t := range s.Inventory {
			n, err := t.Elems()
			if err != nil {
				return err
			}
			if !t.DType.Valid() {
				return gpumem.Errorf(path+".Inventory["+strconv.Itoa(i)+"].DType", t.DType, gpumem.ErrInvalid, "not a storage format")
			}
			if _, err := t.Bytes(); err != nil {
				return err
			}
			var ok bool
			if total, ok = checked.Add(total, n); !ok {
				return gpumem.Errorf(path+".Inventory", len(s.Inventory), gpumem.ErrRange, "parameter count overflows int64")
			}
		}
		return nil
	}
	if s.Family == "" {
		return gpumem.Errorf(path+".Family", s.Family, gpumem.ErrInvalid, "empty model family")
	}
	switch s.Activation {
	case "", "gelu_new", "gelu", "gelu_pytorch_tanh", "relu", "quick_gelu":
	default:
		return gpumem.Errorf(path+".Activation", s.Activation, gpumem.ErrUnsupported, "want gelu_new, gelu, gelu_pytorch_tanh, relu or quick_gelu")
	}
	if !s.DType.Valid() {
		return gpumem.Errorf(path+".DType", s.DType, gpumem.ErrInvalid, "not a storage format")
	}
	if s.Head >= numHeads {
		return gpumem.Errorf(path+".Head", s.Head, gpumem.ErrInvalid, "unknown head")
	}
	if !s.headSupported(s.Head) {
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
		if err := s.Vision.validate(path + ".Vision"); err != nil {
			return err
		}
		if err := s.Text.validate(path + ".Text"); err != nil {
			return err
		}
		if s.Family == "llava" && (s.ProjectorLayers < 1 || s.ProjectorLayers > 16) {
			return gpumem.Errorf(path+".ProjectorLayers", s.ProjectorLayers, gpumem.ErrInvalid, "must be in [1, 16]")
		}
		if s.Family == "clip" && s.ProjectionDim <= 0 {
			return gpumem.Errorf(path+".ProjectionDim", s.ProjectionDim, gpumem.ErrInvalid, "must be positive")
		}
		return nil
	}
	if l == layoutUNet || l == layoutVAE {
		return s.validateUNet(path)
	}
	if l == layoutMamba {
		return s.validateMamba(path)
	}
	if l == layoutMamba2 {
		return s.validateMamba2(path)
	}
	if l == layoutJamba {
		return s.validateJamba(path)
	}
	if l == layoutZamba {
		return s.validateZamba(path)
	}
	pos := func(name string, v int64) error {
		if v <= 0 {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrInvalid, "must be positive")
		}
		if v > maxDim {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrRange, "exceeds 2^40")
		}
		return nil
	}
	nonneg := func(name string, v int64) error {
		if v < 0 {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrInvalid, "must not be negative")
		}
		if v > maxDim {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrRange, "exceeds 2^40")
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Layers", s.Layers}, {"Hidden", s.Hidden}, {"Heads", s.Heads}, {"KVHeads", s.KVHeads}, {"HeadDim", s.HeadDim}} {
		if err := pos(f.name, f.v); err != nil {
			return err
		}
	}
	if s.Layers > maxLayers {
		return gpumem.Errorf(path+".Layers", s.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
	}
	if s.KVHeads > s.Heads {
		return gpumem.Errorf(path+".KVHeads", s.KVHeads, gpumem.ErrInvalid, "more KV heads than the %d query heads", s.Heads)
	}
	if s.Heads%s.KVHeads != 0 {
		return gpumem.Errorf(path+".KVHeads", s.KVHeads, gpumem.ErrInvalid, "does not divide the %d query heads", s.Heads)
	}
	needsFFN := !(s.MoE.Experts > 0 && s.MoE.DenseFirst == 0 && s.MoE.Step <= 1)
	if needsFFN || s.Family == "mixtral" {
		if err := pos("Intermediate", s.Intermediate); err != nil {
			return err
		}
	} else if err := nonneg("Intermediate", s.Intermediate); err != nil {
		return err
	}
	if l.hasVocab() {
		if err := pos("Vocab", s.Vocab); err != nil {
			return err
		}
	} else if err := nonneg("Vocab", s.Vocab); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Positions", s.Positions}, {"TypeVocab", s.TypeVocab}, {"RelativeBuckets", s.RelativeBuckets},
		{"EmbedDim", s.EmbedDim}, {"SlidingWindow", s.SlidingWindow}, {"MaxPositions", s.MaxPositions},
		{"MelBins", s.MelBins}, {"ProjectionDim", s.ProjectionDim}, {"ParallelNorms", s.ParallelNorms},
		{"MoE.Experts", s.MoE.Experts}, {"MoE.Active", s.MoE.Active}, {"MoE.Intermediate", s.MoE.Intermediate},
		{"MoE.Shared", s.MoE.Shared}, {"MoE.SharedIntermediate", s.MoE.SharedIntermediate},
		{"MoE.DenseFirst", s.MoE.DenseFirst}, {"MoE.Step", s.MoE.Step},
		{"MLA.QLoRARank", s.MLA.QLoRARank}, {"MLA.KVLoRARank", s.MLA.KVLoRARank},
		{"MLA.QKNopeHeadDim", s.MLA.QKNopeHeadDim}, {"MLA.QKRopeHeadDim", s.MLA.QKRopeHeadDim},
		{"MLA.VHeadDim", s.MLA.VHeadDim}, {"Image.Size", s.Image.Size}, {"Image.Patch", s.Image.Patch},
		{"Image.Channels", s.Image.Channels}} {
		if err := nonneg(f.name, f.v); err != nil {
			return err
		}
	}
	if s.MoE.Experts > 0 {
		if s.MoE.Active <= 0 || s.MoE.Active > s.MoE.Experts {
			return gpumem.Errorf(path+".MoE.Active", s.MoE.Active, gpumem.ErrInvalid, "must be in [1, %d experts]", s.MoE.Experts)
		}
		if err := pos("MoE.Intermediate", s.MoE.Intermediate); err != nil {
			return err
		}
		if s.MoE.Shared > 0 && s.MoE.SharedIntermediate <= 0 {
			return gpumem.Errorf(path+".MoE.SharedIntermediate", s.MoE.SharedIntermediate, gpumem.ErrInvalid, "must be positive with %d shared experts", s.MoE.Shared)
		}
	}
	if s.MLA.Enabled() {
		if s.MLA.QKNopeHeadDim+s.MLA.QKRopeHeadDim <= 0 {
			return gpumem.Errorf(path+".MLA.QKNopeHeadDim", s.MLA.QKNopeHeadDim, gpumem.ErrInvalid, "query/key head size must be positive")
		}
		if err := pos("MLA.VHeadDim", s.MLA.VHeadDim); err != nil {
			return err
		}
	}
	// Products of two fields size projections; bound them so that the
	// layouts' sums of a few such products cannot overflow.
	ps := max(s.Image.Patch, 1)
	pt := max(s.DiT.PatchT, 1)
	for _, p := range []struct {
		name string
		xs   []int64
	}{
		{"HeadDim", []int64{s.Heads + 2*s.KVHeads, s.HeadDim}},
		{"MLA.QKNopeHeadDim", []int64{s.Heads, s.MLA.QKNopeHeadDim + max(s.MLA.QKRopeHeadDim, s.MLA.VHeadDim)}},
		{"Image.Patch", []int64{ps, ps, max(s.Image.Channels, s.DiT.OutChannels, 1), pt}},
	} {
		if n, ok := checked.MulAll(p.xs...); !ok || n > maxDim {
			return gpumem.Errorf(path+"."+p.name, p.xs[len(p.xs)-1], gpumem.ErrRange, "projection size %v exceeds 2^40", p.xs)
		}
	}
	if s.LayerTypes != nil && int64(len(s.LayerTypes)) != s.Layers {
		return gpumem.Errorf(path+".LayerTypes", len(s.LayerTypes), gpumem.ErrInvalid, "lists %d layers, want %d", len(s.LayerTypes), s.Layers)
	}
	switch l {
	case layoutVision, layoutCLIPVision, layoutSiglipVision:
		if err := pos("Image.Patch", s.Image.Patch); err != nil {
			return err
		}
		if err := pos("Image.Channels", s.Image.Channels); err != nil {
			return err
		}
		if s.Image.Size < s.Image.Patch {
			return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrInvalid, "smaller than the %d-pixel patch", s.Image.Patch)
		}
		if s.Image.Size > 1<<20 {
			return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrRange, "exceeds 2^20 pixels")
		}
	case layoutT5, layoutWhisper:
		if s.EncoderOnly && l == layoutT5 {
			if s.Encoder != nil {
				return gpumem.Errorf(path+".Encoder", s.Encoder.Layers, gpumem.ErrInvalid, "an encoder-only model has no separate encoder half")
			}
			break
		}
		if s.Encoder == nil {
			return gpumem.Errorf(path+".Encoder", nil, gpumem.ErrInvalid, "%s needs an encoder", s.Family)
		}
		e := *s.Encoder
		for _, f := range []struct {
			name string
			v    int64
		}{{"Encoder.Layers", e.Layers}, {"Encoder.Heads", e.Heads}, {"Encoder.Intermediate", e.Intermediate}} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		if e.Layers > maxLayers {
			return gpumem.Errorf(path+".Encoder.Layers", e.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
		}
		if l == layoutWhisper {
			if err := pos("MelBins", s.MelBins); err != nil {
				return err
			}
			if err := pos("Encoder.Positions", e.Positions); err != nil {
				return err
			}
			if err := pos("Positions", s.Positions); err != nil {
				return err
			}
		}
	case layoutFlux, layoutSD3:
		for _, f := range []struct {
			name string
			v    int64
		}{{"Image.Patch", s.Image.Patch}, {"Image.Channels", s.Image.Channels}, {"DiT.TextEmbed", s.DiT.TextEmbed},
			{"DiT.OutChannels", s.DiT.OutChannels}, {"DiT.PooledDim", s.DiT.PooledDim}} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		if err := nonneg("DiT.SingleLayers", s.DiT.SingleLayers); err != nil {
			return err
		}
		if s.DiT.SingleLayers > maxLayers {
			return gpumem.Errorf(path+".DiT.SingleLayers", s.DiT.SingleLayers, gpumem.ErrRange, "more than %d layers", maxLayers)
		}
	case layoutCogVideoX:
		for _, f := range []struct {
			name string
			v    int64
		}{{"Image.Patch", s.Image.Patch}, {"Image.Channels", s.Image.Channels}, {"DiT.TimeEmbed", s.DiT.TimeEmbed},
			{"DiT.TextEmbed", s.DiT.TextEmbed}, {"DiT.OutChannels", s.DiT.OutChannels}} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			name string
			v    int64
		}{{"DiT.OfsEmbed", s.DiT.OfsEmbed}, {"DiT.PatchT", s.DiT.PatchT}, {"DiT.MaxText", s.DiT.MaxText},
			{"DiT.Frames", s.DiT.Frames}, {"DiT.Height", s.DiT.Height}, {"DiT.Width", s.DiT.Width},
			{"DiT.TemporalCompression", s.DiT.TemporalCompression}} {
			if err := nonneg(f.name, f.v); err != nil {
				return err
			}
		}
	case layoutGPT2, layoutBigCode, layoutOPT, layoutBERT:
		if err := pos("Positions", s.Positions); err != nil {
			return err
		}
	}
	return nil
}

// checkCount bounds the number of tensors and checks that every tensor
// and the total parameter count fit in int64.
func (s Spec) checkCount(path string) error {
	b := builder{count: true, limit: maxTensors}
	s.build(&b)
	if b.err != nil {
		return gpumem.Errorf(path, s.Family, gpumem.ErrRange, "%v", b.err)
	}
	return nil
}
