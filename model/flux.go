package model

import "github.com/gpumem/gpumem"

// FamilyFlux is diffusers' FluxTransformer2DModel (FLUX.1-dev and
// -schnell), read from a config whose "_class_name" names it.
const FamilyFlux = "flux"

// flux reads a FluxTransformer2DModel config with the register_to_config
// defaults of diffusers 0.40.0.dev0 (commit 58eb52c0)
// models/transformers/transformer_flux.py.
func (c *config) flux(s *Spec) error {
	var e errs
	s.Heads = e.i(c.posv(24, "num_attention_heads"))
	s.HeadDim = e.i(c.posv(128, "attention_head_dim"))
	s.KVHeads = s.Heads
	s.Layers = e.i(c.posv(19, "num_layers"))
	s.DiT.SingleLayers = e.i(c.intv(38, "num_single_layers"))
	s.Image.Channels = e.i(c.posv(64, "in_channels"))
	s.Image.Patch = e.i(c.posv(1, "patch_size"))
	s.DiT.OutChannels = e.i(c.intv(0, "out_channels"))
	s.DiT.TextEmbed = e.i(c.posv(4096, "joint_attention_dim"))
	s.DiT.PooledDim = e.i(c.posv(768, "pooled_projection_dim"))
	s.DiT.Guidance = e.b(c.boolv(false, "guidance_embeds"))
	if e.err != nil {
		return e.err
	}
	if s.DiT.OutChannels == 0 {
		s.DiT.OutChannels = s.Image.Channels
	}
	var err error
	if s.Hidden, err = mulField(c.field("attention_head_dim"), s.Heads, s.HeadDim); err != nil {
		return err
	}
	// mlp_ratio 4.0 in both block kinds (FeedForward's default mult 4).
	if s.Intermediate, err = mulField(c.field("attention_head_dim"), s.Hidden, 4); err != nil {
		return err
	}
	if s.Hidden > maxDim/8 {
		return gpumem.Errorf(c.field("attention_head_dim"), s.HeadDim, gpumem.ErrRange, "width %d too large", s.Hidden)
	}
	s.Norm = LayerNorm
	return nil
}

// buildFlux is FluxTransformer2DModel in named_parameters order:
// time_text_embed (timestep and, with guidance_embeds, guidance
// TimestepEmbeddings from 256 sinusoidal channels; the pooled text's
// PixArtAlphaTextProjection), context_embedder, x_embedder, the
// double-stream FluxTransformerBlocks (AdaLayerNormZero linears to 6·D
// for the image and the text stream, joint attention with biased
// projections for both streams and RMSNorm on q and k, two tanh-GELU
// feed-forwards of 4·D; the LayerNorms carry no weights), the
// single-stream FluxSingleTransformerBlocks (AdaLayerNormZeroSingle to
// 3·D, proj_mlp to 4·D, attention without an output projection,
// proj_out from 5·D), norm_out (AdaLayerNormContinuous to 2·D) and
// proj_out.
func (s Spec) buildFlux(b *builder) {
	D, hd, ff := s.Hidden, s.HeadDim, s.Intermediate
	b.linear("time_text_embed.timestep_embedder.linear_1", D, 256, true)
	b.linear("time_text_embed.timestep_embedder.linear_2", D, D, true)
	if s.DiT.Guidance {
		b.linear("time_text_embed.guidance_embedder.linear_1", D, 256, true)
		b.linear("time_text_embed.guidance_embedder.linear_2", D, D, true)
	}
	b.linear("time_text_embed.text_embedder.linear_1", D, s.DiT.PooledDim, true)
	b.linear("time_text_embed.text_embedder.linear_2", D, D, true)
	b.linear("context_embedder", D, s.DiT.TextEmbed, true)
	b.linear("x_embedder", D, s.Image.Channels*s.Image.Patch*s.Image.Patch, true)
	b.stack(s.Layers, nil, func(i int64) {
		p := "transformer_blocks." + itoa(i) + "."
		b.linearP(p, "norm1.linear", 6*D, D, true)
		b.linearP(p, "norm1_context.linear", 6*D, D, true)
		b.normP(p, "attn.norm_q", hd, RMSNorm)
		b.normP(p, "attn.norm_k", hd, RMSNorm)
		b.linearP(p, "attn.to_q", D, D, true)
		b.linearP(p, "attn.to_k", D, D, true)
		b.linearP(p, "attn.to_v", D, D, true)
		b.linearP(p, "attn.to_out.0", D, D, true)
		b.normP(p, "attn.norm_added_q", hd, RMSNorm)
		b.normP(p, "attn.norm_added_k", hd, RMSNorm)
		b.linearP(p, "attn.add_q_proj", D, D, true)
		b.linearP(p, "attn.add_k_proj", D, D, true)
		b.linearP(p, "attn.add_v_proj", D, D, true)
		b.linearP(p, "attn.to_add_out", D, D, true)
		b.linearP(p, "ff.net.0.proj", ff, D, true)
		b.linearP(p, "ff.net.2", D, ff, true)
		b.linearP(p, "ff_context.net.0.proj", ff, D, true)
		b.linearP(p, "ff_context.net.2", D, ff, true)
	})
	b.stack(s.DiT.SingleLayers, nil, func(i int64) {
		p := "single_transformer_blocks." + itoa(i) + "."
		b.linearP(p, "norm.linear", 3*D, D, true)
		b.linearP(p, "proj_mlp", ff, D, true)
		b.linearP(p, "proj_out", D, D+ff, true)
		b.normP(p, "attn.norm_q", hd, RMSNorm)
		b.normP(p, "attn.norm_k", hd, RMSNorm)
		b.linearP(p, "attn.to_q", D, D, true)
		b.linearP(p, "attn.to_k", D, D, true)
		b.linearP(p, "attn.to_v", D, D, true)
	})
	b.linear("norm_out.linear", 2*D, D, true)
	b.linear("proj_out", s.Image.Patch*s.Image.Patch*s.DiT.OutChannels, D, true)
}
