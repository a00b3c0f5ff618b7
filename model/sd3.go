package model

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// FamilySD3 is diffusers' SD3Transformer2DModel (the MMDiT of Stable
// Diffusion 3 and 3.5), read from a config whose "_class_name" names it.
const FamilySD3 = "sd3"

// sd3 reads an SD3Transformer2DModel config with the register_to_config
// defaults of diffusers 0.40.0.dev0 (commit 58eb52c0)
// models/transformers/transformer_sd3.py.
func (c *config) sd3(s *Spec) error {
	var e errs
	s.Heads = e.i(c.posv(18, "num_attention_heads"))
	s.HeadDim = e.i(c.posv(64, "attention_head_dim"))
	s.KVHeads = s.Heads
	s.Layers = e.i(c.posv(18, "num_layers"))
	s.Image.Channels = e.i(c.posv(16, "in_channels"))
	s.Image.Patch = e.i(c.posv(2, "patch_size"))
	s.Image.Size = e.i(c.posv(96, "pos_embed_max_size"))
	s.DiT.OutChannels = e.i(c.posv(16, "out_channels"))
	s.DiT.TextEmbed = e.i(c.posv(4096, "joint_attention_dim"))
	s.DiT.TimeEmbed = e.i(c.posv(1152, "caption_projection_dim"))
	s.DiT.PooledDim = e.i(c.posv(2048, "pooled_projection_dim"))
	if e.err != nil {
		return e.err
	}
	qk, err := c.str("qk_norm", "")
	if err != nil {
		return err
	}
	switch qk {
	case "":
	case "rms_norm":
		s.QKNorm = true
	default:
		return gpumem.Errorf(c.field("qk_norm"), qk, gpumem.ErrUnsupported, "want null or rms_norm (SD 3 and 3.5)")
	}
	dual, err := c.ints([]int64{}, -1, "dual_attention_layers")
	if err != nil {
		return err
	}
	if s.Hidden, err = mulField(c.field("attention_head_dim"), s.Heads, s.HeadDim); err != nil {
		return err
	}
	if s.Hidden > maxDim/16 {
		return gpumem.Errorf(c.field("attention_head_dim"), s.HeadDim, gpumem.ErrRange, "width %d too large", s.Hidden)
	}
	s.Intermediate = 4 * s.Hidden // FeedForward's mult 4
	if s.DiT.TimeEmbed != s.Hidden {
		// The text stream runs through the blocks at the image width.
		return gpumem.Errorf(c.field("caption_projection_dim"), s.DiT.TimeEmbed, gpumem.ErrInvalid,
			"must equal num_attention_heads × attention_head_dim = %d", s.Hidden)
	}
	if len(dual) > 0 {
		s.LayerTypes = make([]string, s.Layers)
		for i := range s.LayerTypes {
			s.LayerTypes[i] = "joint"
		}
		for i, l := range dual {
			if l >= s.Layers {
				return gpumem.Errorf(c.field("dual_attention_layers")+"["+strconv.Itoa(i)+"]", l, gpumem.ErrInvalid, "beyond the %d layers", s.Layers)
			}
			s.LayerTypes[l] = "dual"
		}
	}
	s.Norm = LayerNorm
	return nil
}

// buildSD3 is SD3Transformer2DModel: pos_embed (a Conv2d patch
// projection, and the persistent pos_embed buffer of
// pos_embed_max_size² positions, which the checkpoint stores and the
// model keeps on the GPU but parameters() does not list),
// time_text_embed (timestep TimestepEmbedding from 256 channels and the
// pooled text's PixArtAlphaTextProjection), context_embedder, the
// JointTransformerBlocks, norm_out and proj_out. A block holds
// AdaLayerNormZero (Linear to 6·D; SD35AdaLayerNormZeroX, to 9·D, in a
// dual-attention layer), the text stream's AdaLayerNormZero (the last
// block, context_pre_only: AdaLayerNormContinuous to 2·D), the joint
// attention (biased to_q/k/v/out, add_q/k/v_proj, to_add_out except in
// the last block; qk_norm rms_norm adds per-head norms on both
// streams), a second self-attention in dual-attention layers, and
// tanh-GELU feed-forwards of 4·D for the image and (but in the last
// block) the text stream.
func (s Spec) buildSD3(b *builder) {
	D, hd, ff, P := s.Hidden, s.HeadDim, s.Intermediate, s.Image.Patch
	b.add("pos_embed.proj.weight", D, s.Image.Channels, P, P)
	b.add("pos_embed.proj.bias", D)
	b.addT(gpumem.FP32, "pos_embed.pos_embed", 1, s.Image.Size*s.Image.Size, D)
	b.linear("time_text_embed.timestep_embedder.linear_1", D, 256, true)
	b.linear("time_text_embed.timestep_embedder.linear_2", D, D, true)
	b.linear("time_text_embed.text_embedder.linear_1", D, s.DiT.PooledDim, true)
	b.linear("time_text_embed.text_embedder.linear_2", D, D, true)
	b.linear("context_embedder", s.DiT.TimeEmbed, s.DiT.TextEmbed, true)
	last := s.Layers - 1
	class := func(i int64) int {
		switch {
		case i == last:
			return 2
		case s.LayerTypes != nil && s.LayerTypes[i] == "dual":
			return 1
		}
		return 0
	}
	b.stack(s.Layers, class, func(i int64) {
		p := "transformer_blocks." + itoa(i) + "."
		dual := class(i) == 1
		if dual {
			b.linearP(p, "norm1.linear", 9*D, D, true)
		} else {
			b.linearP(p, "norm1.linear", 6*D, D, true)
		}
		if i == last {
			b.linearP(p, "norm1_context.linear", 2*D, D, true)
		} else {
			b.linearP(p, "norm1_context.linear", 6*D, D, true)
		}
		attn := func(q string, joint bool) {
			if s.QKNorm {
				b.normP(p, q+"norm_q", hd, RMSNorm)
				b.normP(p, q+"norm_k", hd, RMSNorm)
			}
			b.linearP(p, q+"to_q", D, D, true)
			b.linearP(p, q+"to_k", D, D, true)
			b.linearP(p, q+"to_v", D, D, true)
			if joint {
				b.linearP(p, q+"add_k_proj", D, D, true)
				b.linearP(p, q+"add_v_proj", D, D, true)
				b.linearP(p, q+"add_q_proj", D, D, true)
			}
			b.linearP(p, q+"to_out.0", D, D, true)
			if joint && i != last {
				b.linearP(p, q+"to_add_out", D, D, true)
			}
			if joint && s.QKNorm {
				b.normP(p, q+"norm_added_q", hd, RMSNorm)
				b.normP(p, q+"norm_added_k", hd, RMSNorm)
			}
		}
		attn("attn.", true)
		if dual {
			attn("attn2.", false)
		}
		b.linearP(p, "ff.net.0.proj", ff, D, true)
		b.linearP(p, "ff.net.2", D, ff, true)
		if i != last {
			b.linearP(p, "ff_context.net.0.proj", ff, D, true)
			b.linearP(p, "ff_context.net.2", D, ff, true)
		}
	})
	b.linear("norm_out.linear", 2*D, D, true)
	b.linear("proj_out", P*P*s.DiT.OutChannels, D, true)
}
