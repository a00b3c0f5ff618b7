package model

// Vision and multimodal configs: CLIP and SigLIP towers, LLaVA-style
// models, Qwen2-VL and CogVideoX.

import (
	"encoding/json"

	"github.com/gpumem/gpumem"
)

// qwen2vl reads Qwen2VLConfig and Qwen2_5_VLConfig (transformers
// v4.57.1 configuration_qwen2_vl.py, configuration_qwen2_5_vl.py): the
// language model is a qwen2 decoder under the top-level keys (or
// text_config, in newer files), with the classes' defaults (the 72B
// shape); vision_config is the tower read into s.Vision, which
// [Spec.Tensors] emits as "visual.*": Qwen2-VL embed_dim, depth,
// num_heads, mlp_ratio (LayerNorm, fc1/fc2 MLP); Qwen2.5-VL hidden_size,
// depth, num_heads, intermediate_size (RMSNorm, gated MLP), both with
// patch_size, temporal_patch_size, spatial_merge_size and the merger's
// output width (hidden_size, out_hidden_size).
func (c *config) qwen2vl(s Spec) (Spec, error) {
	tc, has, err := c.sub("text_config")
	if err != nil {
		return Spec{}, err
	}
	if !has {
		tc = &config{m: c.m, path: c.path}
	}
	td := map[string]any{"vocab_size": json.Number("152064"), "hidden_size": json.Number("8192"),
		"intermediate_size": json.Number("29568"), "num_hidden_layers": json.Number("80"),
		"num_attention_heads": json.Number("64"), "num_key_value_heads": json.Number("8"),
		"tie_word_embeddings": false}
	for k, v := range tc.m {
		td[k] = v
	}
	td["model_type"] = "qwen2"
	t, err := (&config{m: td, path: tc.path}).spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	vc, _, err := c.sub("vision_config")
	if err != nil {
		return Spec{}, err
	}
	v := Spec{Family: s.Family + "_vision", DType: t.DType}
	var e errs
	if s.Family == "qwen2_vl" {
		// Qwen2VLVisionConfig: depth 32, embed_dim 1280, hidden_size
		// 3584 (the merger's output), mlp_ratio 4, num_heads 16.
		v.Hidden = e.i(vc.posv(1280, "embed_dim"))
		ratio := e.i(vc.posv(4, "mlp_ratio"))
		v.Intermediate = e.i(mulField(vc.field("mlp_ratio"), ratio, v.Hidden))
		v.ProjectionDim = e.i(vc.posv(3584, "hidden_size"))
		v.Norm = LayerNorm
	} else {
		// Qwen2_5_VLVisionConfig: depth 32, hidden_size 3584,
		// intermediate_size 3420, num_heads 16, out_hidden_size 3584.
		v.Hidden = e.i(vc.posv(3584, "hidden_size"))
		v.Intermediate = e.i(vc.posv(3420, "intermediate_size"))
		v.ProjectionDim = e.i(vc.posv(3584, "out_hidden_size"))
		v.Norm, v.Gated = RMSNorm, true
	}
	v.Layers = e.i(vc.posv(32, "depth"))
	v.Heads = e.i(vc.posv(16, "num_heads"))
	v.KVHeads = v.Heads
	v.Image.Patch = e.i(vc.posv(14, "patch_size"))
	v.Image.Channels = e.i(vc.posv(3, "in_channels", "in_chans"))
	v.Image.Temporal = e.i(vc.posv(2, "temporal_patch_size"))
	v.Image.Merge = e.i(vc.posv(2, "spatial_merge_size"))
	if e.err != nil {
		return Spec{}, e.err
	}
	if v.Hidden%v.Heads != 0 {
		return Spec{}, gpumem.Errorf(vc.field("num_heads"), v.Heads, gpumem.ErrInvalid, "does not divide the tower width %d", v.Hidden)
	}
	if v.Layers > maxLayers {
		return Spec{}, gpumem.Errorf(vc.field("depth"), v.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
	}
	v.HeadDim = v.Hidden / v.Heads
	if _, err := mulField(vc.field("spatial_merge_size"), v.Image.Merge*v.Image.Merge, v.Hidden); err != nil {
		return Spec{}, err
	}
	t.Family, t.Vision = s.Family, &v
	return t, nil
}

// cogvideox reads the diffusers config of CogVideoXTransformer3DModel
// (register_to_config defaults of cogvideox_transformer_3d.py).
func (c *config) cogvideox(s *Spec) error {
	var e errs
	s.Heads = e.i(c.posv(30, "num_attention_heads"))
	s.HeadDim = e.i(c.posv(64, "attention_head_dim"))
	s.KVHeads = s.Heads
	s.Layers = e.i(c.posv(30, "num_layers"))
	s.Image.Channels = e.i(c.posv(16, "in_channels"))
	s.DiT.OutChannels = e.i(c.posv(16, "out_channels"))
	s.DiT.TimeEmbed = e.i(c.posv(512, "time_embed_dim"))
	s.DiT.OfsEmbed = e.i(c.intv(0, "ofs_embed_dim"))
	s.DiT.TextEmbed = e.i(c.posv(4096, "text_embed_dim"))
	s.Image.Patch = e.i(c.posv(2, "patch_size"))
	s.DiT.PatchT = e.i(c.intv(0, "patch_size_t"))
	s.DiT.MaxText = e.i(c.intv(226, "max_text_seq_length"))
	s.DiT.Frames = e.i(c.intv(49, "sample_frames"))
	s.DiT.Height = e.i(c.intv(60, "sample_height"))
	s.DiT.Width = e.i(c.intv(90, "sample_width"))
	s.DiT.TemporalCompression = e.i(c.intv(4, "temporal_compression_ratio"))
	s.Bias.QKV = e.b(c.boolv(true, "attention_bias"))
	s.DiT.NoPatchBias = !e.b(c.boolv(true, "patch_bias"))
	if e.b(c.boolv(false, "use_learned_positional_embeddings")) {
		e.err = gpumem.Errorf(c.field("use_learned_positional_embeddings"), true, gpumem.ErrUnsupported, "no CogVideoX checkpoint uses learned positions")
	}
	if !e.b(c.boolv(true, "norm_elementwise_affine")) {
		e.err = gpumem.Errorf(c.field("norm_elementwise_affine"), false, gpumem.ErrUnsupported, "norms without affine parameters are not modelled")
	}
	s.Hidden = e.i(mulField(c.field("attention_head_dim"), s.Heads, s.HeadDim))
	s.Intermediate = 4 * s.Hidden // FeedForward(inner_dim=None) = 4·dim
	s.Norm = LayerNorm
	return e.err
}

// llava reads LlavaConfig: vision_config (default CLIPVisionConfig of
// llava-1.5: 1024 hidden, 24 layers, 336 px, patch 14), text_config
// (default LlamaConfig), and a 2-layer GELU projector.
func (c *config) llava(s Spec) (Spec, error) {
	vc, _, err := c.sub("vision_config")
	if err != nil {
		return Spec{}, err
	}
	vd := map[string]any{"model_type": "clip_vision_model", "hidden_size": json.Number("1024"),
		"intermediate_size": json.Number("4096"), "num_hidden_layers": json.Number("24"),
		"num_attention_heads": json.Number("16"), "image_size": json.Number("336"), "patch_size": json.Number("14")}
	for k, v := range vc.m {
		vd[k] = v
	}
	vc.m = vd
	v, err := vc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	tc, _, err := c.sub("text_config")
	if err != nil {
		return Spec{}, err
	}
	if _, has := tc.m["model_type"]; !has {
		tc.m = maps(tc.m, "model_type", "llama")
	}
	t, err := tc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	act, err := c.str("projector_hidden_act", "gelu")
	if err != nil {
		return Spec{}, err
	}
	_ = act
	s.Vision, s.Text = &v, &t
	s.ProjectorLayers = 2
	bias, err := c.boolv(true, "multimodal_projector_bias")
	if err != nil {
		return Spec{}, err
	}
	if !bias {
		return Spec{}, gpumem.Errorf(c.field("multimodal_projector_bias"), false, gpumem.ErrUnsupported, "projector without bias is not modelled")
	}
	return s, nil
}

// clip reads CLIPConfig (text_config + vision_config + projection_dim)
// and, for siglip, SiglipConfig read as its vision tower.
func (c *config) clip(s Spec) (Spec, error) {
	vc, _, err := c.sub("vision_config")
	if err != nil {
		return Spec{}, err
	}
	tc, _, err := c.sub("text_config")
	if err != nil {
		return Spec{}, err
	}
	if s.Family == "siglip" {
		if _, has := vc.m["model_type"]; !has {
			vc.m = maps(vc.m, "model_type", "siglip_vision_model")
		}
		return vc.spec(s.DType)
	}
	if _, has := vc.m["model_type"]; !has {
		vc.m = maps(vc.m, "model_type", "clip_vision_model")
	}
	if _, has := tc.m["model_type"]; !has {
		tc.m = maps(tc.m, "model_type", "clip_text_model")
	}
	v, err := vc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	t, err := tc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	s.Vision, s.Text = &v, &t
	s.ProjectionDim, err = c.posv(512, "projection_dim")
	if err != nil {
		return Spec{}, err
	}
	return s, nil
}
