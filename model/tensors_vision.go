package model

// Tensor inventories of vision towers and multimodal models: ViT, CLIP and
// SigLIP, LLaVA-style models, Qwen2-VL's vision tower and CogVideoX.

// buildQwen2VLVision is Qwen2VisionTransformerPretrainedModel and
// Qwen2_5_VisionTransformerPretrainedModel (transformers v4.57.1
// modeling_qwen2_vl.py, modeling_qwen2_5_vl.py): a bias-free Conv3d
// patch embedding of (hidden, channels, temporal, patch, patch); blocks
// of norm1, biased fused qkv and proj, norm2 and a biased MLP (Qwen2-VL
// fc1/fc2 with LayerNorms, Qwen2.5-VL gate/up/down with RMSNorms); the
// patch merger: ln_q over the tower width, then mlp.0 (hidden·merge²
// square) and mlp.2 to the language model's width.
func (s Spec) buildQwen2VLVision(b *builder) {
	D, nk := s.Hidden, s.norm()
	b.add("visual.patch_embed.proj.weight", D, s.Image.Channels, max(s.Image.Temporal, 1), s.Image.Patch, s.Image.Patch)
	b.stack(s.Layers, nil, func(i int64) {
		p := "visual.blocks." + itoa(i) + "."
		b.normP(p, "norm1", D, nk)
		b.normP(p, "norm2", D, nk)
		b.linearP(p, "attn.qkv", 3*D, D, true)
		b.linearP(p, "attn.proj", D, D, true)
		if s.Gated {
			b.linearP(p, "mlp.gate_proj", s.Intermediate, D, true)
			b.linearP(p, "mlp.up_proj", s.Intermediate, D, true)
			b.linearP(p, "mlp.down_proj", D, s.Intermediate, true)
		} else {
			b.linearP(p, "mlp.fc1", s.Intermediate, D, true)
			b.linearP(p, "mlp.fc2", D, s.Intermediate, true)
		}
	})
	m := D * max(s.Image.Merge, 1) * max(s.Image.Merge, 1)
	b.norm("visual.merger.ln_q", D, nk)
	b.linear("visual.merger.mlp.0", m, m, true)
	b.linear("visual.merger.mlp.2", s.ProjectionDim, m, true)
}

// buildViT is ViTModel (with its pooler when Pooler): class token,
// (patches+1) learned positions, Conv2d patch projection with bias.
func (s Spec) buildViT(b *builder) {
	H, I, P, C := s.Hidden, s.Intermediate, s.Image.Patch, s.Image.Channels
	inner := s.Heads * s.HeadDim
	p0 := "vit."
	b.addP(p0, "embeddings.cls_token", 1, 1, H)
	b.addP(p0, "embeddings.position_embeddings", 1, s.Image.Patches()+1, H)
	b.addP(p0, "embeddings.patch_embeddings.projection.weight", H, C, P, P)
	b.addP(p0, "embeddings.patch_embeddings.projection.bias", H)
	b.stack(s.Layers, nil, func(i int64) {
		p := p0 + "encoder.layer." + itoa(i) + "."
		b.linearP(p, "attention.attention.query", inner, H, s.Bias.QKV)
		b.linearP(p, "attention.attention.key", inner, H, s.Bias.QKV)
		b.linearP(p, "attention.attention.value", inner, H, s.Bias.QKV)
		b.linearP(p, "attention.output.dense", H, inner, true)
		b.linearP(p, "intermediate.dense", I, H, true)
		b.linearP(p, "output.dense", H, I, true)
		b.normP(p, "layernorm_before", H, LayerNorm)
		b.normP(p, "layernorm_after", H, LayerNorm)
	})
	b.normP(p0, "layernorm", H, LayerNorm)
	if s.Pooler && s.Head != HeadImageCls {
		b.linearP(p0, "pooler.dense", H, H, true)
	}
	if s.Head == HeadImageCls {
		// ViTForImageClassification: ViTModel(add_pooling_layer=False)
		// and a classifier on the class token.
		b.linear("classifier", s.labels(), H, true)
	}
}

// buildCLIPFamily is CLIPVisionModel, SiglipVisionModel and
// CLIPTextModel: shared encoder layer layout (q/k/v/out_proj with bias,
// layer_norm1/2, mlp.fc1/fc2).
func (s Spec) buildCLIPFamily(b *builder) {
	H, I := s.Hidden, s.Intermediate
	inner := s.Heads * s.HeadDim
	l := layoutOf(&s)
	p0 := "vision_model."
	switch l {
	case layoutCLIPText:
		p0 = "text_model."
		b.addP(p0, "embeddings.token_embedding.weight", s.Vocab, H)
		b.addP(p0, "embeddings.position_embedding.weight", s.Positions, H)
	case layoutCLIPVision:
		P, C := s.Image.Patch, s.Image.Channels
		b.addP(p0, "embeddings.class_embedding", H)
		b.addP(p0, "embeddings.patch_embedding.weight", H, C, P, P)
		b.addP(p0, "embeddings.position_embedding.weight", s.Image.Patches()+1, H)
		b.normP(p0, "pre_layrnorm", H, LayerNorm)
	case layoutSiglipVision:
		P, C := s.Image.Patch, s.Image.Channels
		b.addP(p0, "embeddings.patch_embedding.weight", H, C, P, P)
		b.addP(p0, "embeddings.patch_embedding.bias", H)
		b.addP(p0, "embeddings.position_embedding.weight", s.Image.Patches(), H)
	}
	b.stack(s.Layers, nil, func(i int64) {
		p := p0 + "encoder.layers." + itoa(i) + "."
		b.linearP(p, "self_attn.k_proj", inner, H, true)
		b.linearP(p, "self_attn.v_proj", inner, H, true)
		b.linearP(p, "self_attn.q_proj", inner, H, true)
		b.linearP(p, "self_attn.out_proj", H, inner, true)
		b.normP(p, "layer_norm1", H, LayerNorm)
		b.linearP(p, "mlp.fc1", I, H, true)
		b.linearP(p, "mlp.fc2", H, I, true)
		b.normP(p, "layer_norm2", H, LayerNorm)
	})
	if l == layoutCLIPText {
		b.normP(p0, "final_layer_norm", H, LayerNorm)
		if s.ProjectionDim > 0 {
			b.add("text_projection.weight", s.ProjectionDim, H)
		}
		return
	}
	b.normP(p0, "post_layernorm", H, LayerNorm)
	if l == layoutSiglipVision && s.Pooler {
		// SiglipMultiheadAttentionPoolingHead: probe, nn.MultiheadAttention
		// (fused in_proj), LayerNorm, MLP.
		b.addP(p0, "head.probe", 1, 1, H)
		b.addP(p0, "head.attention.in_proj_weight", 3*H, H)
		b.addP(p0, "head.attention.in_proj_bias", 3*H)
		b.linearP(p0, "head.attention.out_proj", H, H, true)
		b.normP(p0, "head.layernorm", H, LayerNorm)
		b.linearP(p0, "head.mlp.fc1", I, H, true)
		b.linearP(p0, "head.mlp.fc2", H, I, true)
	}
	if s.Head == HeadImageCls {
		// CLIPForImageClassification, SiglipForImageClassification
		// (modeling_clip.py, modeling_siglip.py at v4.57.1): a
		// classifier over the mean of the tower's output tokens.
		b.linear("classifier", s.labels(), H, true)
	}
}

// buildMultimodal is LlavaForConditionalGeneration (vision tower,
// multi-modal projector, language model, with the checkpoint names of
// the llava-hf conversions) and CLIPModel (text and vision towers,
// projections, logit_scale).
func (s Spec) buildMultimodal(b *builder) {
	if s.Family == "clip" {
		b.sub("", s.Text)
		b.sub("", s.Vision)
		b.add("visual_projection.weight", s.ProjectionDim, s.Vision.Hidden)
		b.add("text_projection.weight", s.ProjectionDim, s.Text.Hidden)
		b.add("logit_scale")
		return
	}
	if s.Family == "gemma3" {
		// Gemma3ForConditionalGeneration: SigLIP tower without head,
		// Gemma3MultiModalProjector (a bare [vision, text] weight and an
		// RMSNorm over the vision width), Gemma3 text model.
		b.sub("vision_tower.", s.Vision)
		b.add("multi_modal_projector.mm_input_projection_weight", s.Vision.Hidden, s.Text.Hidden)
		b.add("multi_modal_projector.mm_soft_emb_norm.weight", s.Vision.Hidden)
		b.sub("language_model.", s.Text)
		return
	}
	b.sub("vision_tower.", s.Vision)
	in, out := s.Vision.Hidden, s.Text.Hidden
	for j := int64(1); j <= s.ProjectorLayers; j++ {
		b.linear("multi_modal_projector.linear_"+itoa(j), out, in, true)
		in = out
	}
	b.sub("language_model.", s.Text)
}

// buildCogVideoX is diffusers' CogVideoXTransformer3DModel
// (models/transformers/cogvideox_transformer_3d.py): patch embedding
// (Conv2d, or a Linear over p·p·p_t patches in 1.5) and text projection,
// timestep MLP (and ofs MLP), blocks of CogVideoXLayerNormZero (a Linear
// from the time embedding to 6·dim and a LayerNorm) around attention
// with per-head LayerNorm on q and k and a GELU feed-forward of 4·dim,
// final LayerNorm, AdaLayerNorm (Linear to 2·dim, LayerNorm) and the
// output projection. The sin-cos position table is a buffer.
func (s Spec) buildCogVideoX(b *builder) {
	D, T, P, C := s.Hidden, s.DiT.TimeEmbed, s.Image.Patch, s.Image.Channels
	if s.DiT.PatchT > 0 {
		b.linear("patch_embed.proj", D, C*P*P*s.DiT.PatchT, !s.DiT.NoPatchBias)
	} else {
		b.add("patch_embed.proj.weight", D, C, P, P)
		if !s.DiT.NoPatchBias {
			b.add("patch_embed.proj.bias", D)
		}
	}
	b.linear("patch_embed.text_proj", D, s.DiT.TextEmbed, true)
	b.linear("time_embedding.linear_1", T, D, true)
	b.linear("time_embedding.linear_2", T, T, true)
	if o := s.DiT.OfsEmbed; o > 0 {
		b.linear("ofs_embedding.linear_1", o, o, true)
		b.linear("ofs_embedding.linear_2", o, o, true)
	}
	inner := s.Heads * s.HeadDim
	b.stack(s.Layers, nil, func(i int64) {
		p := "transformer_blocks." + itoa(i) + "."
		b.linearP(p, "norm1.linear", 6*D, T, true)
		b.normP(p, "norm1.norm", D, LayerNorm)
		b.normP(p, "attn1.norm_q", s.HeadDim, LayerNorm)
		b.normP(p, "attn1.norm_k", s.HeadDim, LayerNorm)
		b.linearP(p, "attn1.to_q", inner, D, s.Bias.QKV)
		b.linearP(p, "attn1.to_k", inner, D, s.Bias.QKV)
		b.linearP(p, "attn1.to_v", inner, D, s.Bias.QKV)
		b.linearP(p, "attn1.to_out.0", D, inner, true)
		b.linearP(p, "norm2.linear", 6*D, T, true)
		b.normP(p, "norm2.norm", D, LayerNorm)
		b.linearP(p, "ff.net.0.proj", s.Intermediate, D, true)
		b.linearP(p, "ff.net.2", D, s.Intermediate, true)
	})
	b.norm("norm_final", D, LayerNorm)
	b.linear("norm_out.linear", 2*D, T, true)
	b.norm("norm_out.norm", D, LayerNorm)
	out := P * P * s.DiT.OutChannels
	if s.DiT.PatchT > 0 {
		out *= s.DiT.PatchT
	}
	b.linear("proj_out", out, D, true)
}
