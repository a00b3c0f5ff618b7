package model

// Counting a Spec: its tensors, runs, parameters and bytes, grouped by
// component.

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Tensors returns the parameter inventory of s: every tensor of the
// standard Hugging Face class with its checkpoint name, row-major shape
// and storage type. Tied weights appear once. Buffers that checkpoints
// store (deepseek_v3's e_score_correction_bias) are included; the
// non-persistent ones (rotary tables, causal masks, position ids) are
// not. It returns nil for a Spec that fails [Spec.Validate].
func (s Spec) Tensors() []gpumem.Tensor {
	if s.Validate() != nil {
		return nil
	}
	if s.Inventory != nil {
		out := make([]gpumem.Tensor, len(s.Inventory))
		for i, t := range s.Inventory {
			t.Shape = slices.Clone(t.Shape)
			out[i] = t
		}
		return out
	}
	var b builder
	s.build(&b)
	return b.out
}

// Run is Count tensors of one shape and storage whose names differ only
// in a layer or expert index; Tensor is the first of them (its names
// carry the indices of the first layer of its kind and of expert 0).
// Layers is how many layers of a stack the run spans, 1 outside a stack:
// each of those layers holds Count/Layers of the tensors.
type Run struct {
	Tensor gpumem.Tensor
	Count  int64
	Layers int64
}

// Runs returns [Spec.Tensors] folded into runs: one layer of each kind
// (dense or with experts; T5's first block) and one expert of each
// block, with how many each stands for. Its cost follows the number of
// distinct layer kinds, not the layer count: a 65,536-layer stack of one
// kind is one layer's tensors. An Inventory (a checkpoint's tensor list)
// is not folded: each tensor is a run of 1. It returns nil for a Spec
// that fails [Spec.Validate].
func (s Spec) Runs() []Run {
	if s.Validate() != nil {
		return nil
	}
	if s.Inventory != nil {
		out := make([]Run, len(s.Inventory))
		for i, t := range s.Inventory {
			t.Shape = slices.Clone(t.Shape)
			out[i] = Run{Tensor: t, Count: 1, Layers: 1}
		}
		return out
	}
	b := builder{fold: true}
	s.build(&b)
	return b.runs
}

// Params returns the number of parameters of s: the sum of the element
// counts of [Spec.Tensors]. It returns 0 for a Spec that fails
// [Spec.Validate], which says why. Every parameter count of the module
// takes this shape ([Finetune.Params], [Finetune.TrainableParams],
// [DiffusionPipeline.Params]): a count is asked for again and again of a
// value checked once.
func (s Spec) Params() int64 {
	if s.Inventory != nil {
		if s.Validate() != nil {
			return 0
		}
		var n int64
		for _, t := range s.Inventory {
			e, _ := t.Elems()
			n += e
		}
		return n
	}
	// validate ends by counting (checkCount) only after the field checks
	// pass; count once here with the same limits.
	if err := s.validateFields("Spec"); err != nil {
		return 0
	}
	b := builder{count: true, limit: maxTensors}
	s.build(&b)
	if b.err != nil {
		return 0
	}
	return b.n
}

// ActiveParams returns the parameters one token passes through in a
// mixture-of-experts model: all parameters but the routed experts, plus
// MoE.Active of every MoE.Experts routed experts, the convention of the
// "A3B"/"37B active" figures. It equals Params for a dense model and
// returns 0 for a Spec that fails [Spec.Validate].
func (s Spec) ActiveParams() int64 {
	total := s.Params()
	if total == 0 || s.MoE.Experts <= 0 || s.MoE.Active <= 0 {
		return total
	}
	var routed int64
	for _, t := range s.Tensors() {
		if IsExpert(t.Name) {
			n, _ := t.Elems()
			routed += n
		}
	}
	return total - routed + routed/s.MoE.Experts*s.MoE.Active
}

// Bytes returns the storage of all parameters of s held in d, as
// [gpumem.DType.Size] of the total element count (block formats round
// per tensor, as ggml stores them).
func (s Spec) Bytes(d gpumem.DType) (gpumem.Bytes, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if !d.Valid() {
		return 0, gpumem.Errorf("dtype", d, gpumem.ErrInvalid, "not a storage format")
	}
	var total gpumem.Bytes
	for _, t := range s.Tensors() {
		t.DType = d
		n, err := t.Elems()
		if err != nil {
			return 0, err
		}
		b, err := d.Size(n)
		if err != nil {
			return 0, err
		}
		sum, ok := checked.Add(int64(total), int64(b))
		if !ok {
			return 0, gpumem.Errorf("Spec", s.Family, gpumem.ErrRange, "bytes overflow int64")
		}
		total = gpumem.Bytes(sum)
	}
	return total, nil
}

// WeightsBytes returns the storage of all parameters of s in their own
// dtypes ([Spec.DType], or each checkpoint tensor's dtype).
func (s Spec) WeightsBytes() (gpumem.Bytes, error) {
	m, err := s.BytesByDType()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, b := range m {
		var ok bool
		if total, ok = checked.Add(total, int64(b)); !ok {
			return 0, gpumem.Errorf("Spec", s.Family, gpumem.ErrRange, "bytes overflow int64")
		}
	}
	return gpumem.Bytes(total), nil
}

// BytesByDType returns the storage of s's parameters grouped by their
// storage type.
func (s Spec) BytesByDType() (map[gpumem.DType]gpumem.Bytes, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	m := make(map[gpumem.DType]gpumem.Bytes)
	for _, t := range s.Tensors() {
		b, err := t.Bytes()
		if err != nil {
			return nil, err
		}
		sum, ok := checked.Add(int64(m[t.DType]), int64(b))
		if !ok {
			return nil, gpumem.Errorf("Spec", s.Family, gpumem.ErrRange, "bytes overflow int64")
		}
		m[t.DType] = gpumem.Bytes(sum)
	}
	return m, nil
}

// Group is one component of a model's inventory: the embeddings, one
// transformer layer, the final norm and head, or a part of a composite
// model, so that later estimates can size per-layer and per-stage
// shards.
type Group struct {
	// Part is the sub-model: "" for a single model, "encoder",
	// "decoder", "vision", "projector" or "language".
	Part string
	// Name is "embeddings", "layer", "head" (final norm and output
	// head), or "other".
	Name string
	// Layer is the layer index for Name "layer", -1 otherwise.
	Layer int
	// Params is the number of elements of the group's tensors.
	Params int64
	// Bytes is their storage in their own dtypes.
	Bytes gpumem.Bytes
	// Experts is the number of those parameters in routed experts.
	Experts int64
	// Tensors are the group's tensors, in inventory order.
	Tensors []gpumem.Tensor
}

// Groups partitions [Spec.Tensors] by component, in first-appearance
// order. Grouping is by tensor name, so it works for checkpoint
// inventories too.
func (s Spec) Groups() ([]Group, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var groups []Group
	index := map[string]int{}
	for _, t := range s.Tensors() {
		part, name, layer := Component(t.Name)
		key := part + "/" + name + "/" + strconv.Itoa(layer)
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, Group{Part: part, Name: name, Layer: layer})
		}
		g := &groups[i]
		n, _ := t.Elems()
		b, err := t.Bytes()
		if err != nil {
			return nil, err
		}
		g.Params += n
		g.Bytes += b
		if IsExpert(t.Name) {
			g.Experts += n
		}
		g.Tensors = append(g.Tensors, t)
	}
	return groups, nil
}

// IsExpert reports whether a tensor name belongs to a routed expert
// ("...experts.N...", "...ffn_*_exps..."), not a shared expert or router.
func IsExpert(name string) bool {
	return strings.Contains(name, ".experts.") || strings.Contains(name, "_exps.")
}

// Component classifies a tensor name into a part, a component name and a
// layer index, for [Spec.Groups]: "model.layers.3.mlp.up_proj.weight" is
// ("", "layer", 3); "vision_tower.vision_model.encoder.layers.0..." is
// ("vision", "layer", 0); "lm_head.weight" is ("", "head", -1).
func Component(name string) (part, comp string, layer int) {
	switch {
	case strings.HasPrefix(name, "vision_tower.") || strings.HasPrefix(name, "vision_model.") ||
		strings.HasPrefix(name, "model.vision_tower.") || strings.HasPrefix(name, "visual_projection."):
		part = "vision"
	case strings.HasPrefix(name, "multi_modal_projector.") || strings.HasPrefix(name, "model.multi_modal_projector.") ||
		strings.HasPrefix(name, "visual.merger."):
		part = "projector"
	case strings.HasPrefix(name, "visual."):
		part = "vision" // Qwen2-VL's tower
	case strings.HasPrefix(name, "language_model.") || strings.HasPrefix(name, "model.language_model.") ||
		strings.HasPrefix(name, "text_model.") || strings.HasPrefix(name, "text_projection."):
		part = "language"
	case strings.Contains(name, "encoder."):
		part = "encoder"
	case strings.Contains(name, "decoder."):
		part = "decoder"
	}
	if l, ok := backboneBlock(name); ok {
		return part, "layer", l
	}
	if p, l, ok := diffusersBlock(name); ok {
		// A diffusers UNet's or VAE's resolution blocks: part "down",
		// "mid" or "up" (inside the VAE's encoder or decoder).
		if part == "" {
			part = p
		}
		return part, "layer", l
	}
	if l, ok := layerIndex(name); ok {
		return part, "layer", l
	}
	if part == "projector" {
		return part, "projector", -1
	}
	switch {
	case strings.Contains(name, "embed") || strings.Contains(name, "wte.") || strings.Contains(name, "wpe.") ||
		strings.HasPrefix(name, "shared.") || strings.Contains(name, "conv1.") || strings.Contains(name, "conv2.") ||
		strings.Contains(name, "cls_token") || strings.Contains(name, "class_embedding") ||
		strings.Contains(name, "pre_layrnorm") || strings.HasPrefix(name, "token_embd") || strings.Contains(name, "project_in"):
		return part, "embeddings", -1
	case strings.Contains(name, "lm_head") || strings.Contains(name, "norm") || strings.Contains(name, "ln_f") ||
		strings.Contains(name, "embed_out") || strings.Contains(name, "proj_out") || strings.Contains(name, "pooler") ||
		strings.Contains(name, "output") || strings.Contains(name, "project_out") || strings.Contains(name, "head") ||
		strings.Contains(name, "projection") || strings.Contains(name, "logit_scale") ||
		strings.HasPrefix(name, "classifier"):
		// A classification head (ViTForImageClassification's and the
		// *ForSequenceClassification and *ForTokenClassification
		// classifiers, transformers v4.57.1) runs after the final norm:
		// its backward, and its gradients, come right after the loss's.
		return part, "head", -1
	}
	return part, "other", -1
}

// diffusersBlock finds a diffusers block segment ("down_blocks.N",
// "up_blocks.N", "mid_block") of a tensor name.
func diffusersBlock(name string) (part string, index int, ok bool) {
	prev := ""
	for len(name) > 0 {
		seg, rest, _ := strings.Cut(name, ".")
		switch {
		case seg == "mid_block":
			return "mid", 0, true
		case prev == "down_blocks" || prev == "up_blocks":
			if n, err := strconv.Atoi(seg); err == nil && n >= 0 && len(seg) <= 4 {
				return strings.TrimSuffix(prev, "_blocks"), n, true
			}
		}
		prev, name = seg, rest
	}
	return "", 0, false
}

// layerIndex finds the number after the first "layers", "layer", "h",
// "block", "blk" or "transformer_blocks" segment of a dotted tensor name.
func layerIndex(name string) (int, bool) {
	prev := ""
	for len(name) > 0 {
		seg, rest, _ := strings.Cut(name, ".")
		switch prev {
		case "layers", "layer", "h", "block", "blk", "transformer_blocks", "blocks":
			if len(seg) > 0 && len(seg) <= 9 && strings.Trim(seg, "0123456789") == "" {
				n, err := strconv.Atoi(seg)
				if err == nil {
					return n, true
				}
			}
		}
		prev, name = seg, rest
	}
	return 0, false
}
