package model

// The UNet's and VAE's tensors, block by block as diffusers builds them.

import (
	"strconv"
)

// conv adds a Conv2d(in, out, k) with bias.
func (b *builder) conv(prefix, name string, out, in, k int64) {
	b.addP(prefix, name+".weight", out, in, k, k)
	b.addP(prefix, name+".bias", out)
}

// groupNorm adds a GroupNorm's weight and bias.
func (b *builder) groupNorm(prefix, name string, c int64) {
	b.addP(prefix, name+".weight", c)
	b.addP(prefix, name+".bias", c)
}

// resnet adds a ResnetBlock2D(in, out) (models/resnet.py): GroupNorm,
// 3×3 conv, the time embedding's Linear (temb > 0), GroupNorm, 3×3
// conv, and the 1×1 conv_shortcut when in ≠ out.
func (b *builder) resnet(p string, in, out, temb int64) {
	b.groupNorm(p, "norm1", in)
	b.conv(p, "conv1", out, in, 3)
	if temb > 0 {
		b.linearP(p, "time_emb_proj", out, temb, true)
	}
	b.groupNorm(p, "norm2", out)
	b.conv(p, "conv2", out, out, 3)
	if in != out {
		b.conv(p, "conv_shortcut", out, in, 1)
	}
}

// transformer2D adds a Transformer2DModel over c channels with layers
// BasicTransformerBlocks (models/transformers/transformer_2d.py,
// models/attention.py): GroupNorm, proj_in (1×1 conv, or Linear with
// use_linear_projection: the same parameters, stored [c, c] or
// [c, c, 1, 1]), blocks of LayerNorm + self-attention (to_q/k/v without
// bias, to_out.0 with), LayerNorm + cross-attention (keys and values
// from the text width cross), LayerNorm + GEGLU feed-forward
// (net.0.proj to 2·4c, net.2 back to c), and proj_out.
func (b *builder) transformer2D(p string, c, cross, layers int64, linear bool) {
	b.groupNorm(p, "norm", c)
	proj := func(name string) {
		if linear {
			b.linearP(p, name, c, c, true)
		} else {
			b.conv(p, name, c, c, 1)
		}
	}
	proj("proj_in")
	ff := 4 * c
	b.stack(layers, nil, func(i int64) {
		q := p + "transformer_blocks." + itoa(i) + "."
		b.normP(q, "norm1", c, LayerNorm)
		b.linearP(q, "attn1.to_q", c, c, false)
		b.linearP(q, "attn1.to_k", c, c, false)
		b.linearP(q, "attn1.to_v", c, c, false)
		b.linearP(q, "attn1.to_out.0", c, c, true)
		b.normP(q, "norm2", c, LayerNorm)
		b.linearP(q, "attn2.to_q", c, c, false)
		b.linearP(q, "attn2.to_k", c, cross, false)
		b.linearP(q, "attn2.to_v", c, cross, false)
		b.linearP(q, "attn2.to_out.0", c, c, true)
		b.normP(q, "norm3", c, LayerNorm)
		b.linearP(q, "ff.net.0.proj", 2*ff, c, true)
		b.linearP(q, "ff.net.2", c, ff, true)
	})
	proj("proj_out")
}

// buildUNet is UNet2DConditionModel in named_parameters order: conv_in,
// the time embedding (and SDXL's add_embedding), down blocks (resnets,
// attentions, downsampler), the mid block, up blocks (resnets over the
// concatenated skip connection, attentions, upsampler), conv_norm_out
// and conv_out.
func (s Spec) buildUNet(b *builder) {
	u := s.UNet
	n := len(u.Channels)
	c0, T := u.Channels[0], u.TimeEmbed
	b.conv("", "conv_in", c0, u.In, 3)
	b.linear("time_embedding.linear_1", T, c0, true)
	b.linear("time_embedding.linear_2", T, T, true)
	if u.AddEmbedIn > 0 {
		b.linear("add_embedding.linear_1", T, u.AddEmbedIn, true)
		b.linear("add_embedding.linear_2", T, T, true)
	}
	out := c0
	for i := 0; i < n; i++ {
		in := out
		out = u.Channels[i]
		p := "down_blocks." + strconv.Itoa(i) + "."
		for j := int64(0); j < u.LayersPerBlock[i]; j++ {
			rin := out
			if j == 0 {
				rin = in
			}
			b.resnet(p+"resnets."+itoa(j)+".", rin, out, T)
		}
		if u.Cross[i] {
			for j := int64(0); j < u.LayersPerBlock[i]; j++ {
				b.transformer2D(p+"attentions."+itoa(j)+".", out, u.CrossDim[i], u.TransformerLayers[i], u.LinearProjection)
			}
		}
		if i < n-1 {
			b.conv(p, "downsamplers.0.conv", out, out, 3)
		}
	}
	if u.MidBlock {
		c := u.Channels[n-1]
		b.resnet("mid_block.resnets.0.", c, c, T)
		b.transformer2D("mid_block.attentions.0.", c, u.CrossDim[n-1], u.TransformerLayers[n-1], u.LinearProjection)
		b.resnet("mid_block.resnets.1.", c, c, T)
	}
	out = u.Channels[n-1]
	for i := 0; i < n; i++ {
		prev := out
		lv := u.upLevel(i)
		out = u.Channels[lv]
		in := u.Channels[max(lv-1, 0)]
		p := "up_blocks." + strconv.Itoa(i) + "."
		layers := u.LayersPerBlock[lv] + 1
		for j := int64(0); j < layers; j++ {
			skip := out
			if j == layers-1 {
				skip = in
			}
			rin := out
			if j == 0 {
				rin = prev
			}
			b.resnet(p+"resnets."+itoa(j)+".", rin+skip, out, T)
		}
		if u.UpCross[i] {
			for j := int64(0); j < layers; j++ {
				b.transformer2D(p+"attentions."+itoa(j)+".", out, u.CrossDim[lv], u.UpTransformerLayers[i], u.LinearProjection)
			}
		}
		if i < n-1 {
			b.conv(p, "upsamplers.0.conv", out, out, 3)
		}
	}
	b.groupNorm("", "conv_norm_out", c0)
	b.conv("", "conv_out", u.Out, c0, 3)
}

// vaeMid adds an UNetMidBlock2D without time embedding: a resnet, the
// single-head attention over the c channels (group_norm, to_q/k/v and
// to_out.0, all biased) when attn, and a second resnet.
func (b *builder) vaeMid(p string, c int64, attn bool) {
	b.resnet(p+"resnets.0.", c, c, 0)
	if attn {
		q := p + "attentions.0."
		b.groupNorm(q, "group_norm", c)
		b.linearP(q, "to_q", c, c, true)
		b.linearP(q, "to_k", c, c, true)
		b.linearP(q, "to_v", c, c, true)
		b.linearP(q, "to_out.0", c, c, true)
	}
	b.resnet(p+"resnets.1.", c, c, 0)
}

// buildVAE is AutoencoderKL: the Encoder (conv_in, DownEncoderBlock2Ds,
// mid block, GroupNorm, conv_out to 2·latent channels), quant_conv and
// post_quant_conv (1×1), and the Decoder (conv_in from the latent, mid
// block, UpDecoderBlock2Ds of layers_per_block+1 resnets, GroupNorm,
// conv_out).
func (s Spec) buildVAE(b *builder) {
	u := s.UNet
	n := len(u.Channels)
	c0, cl := u.Channels[0], u.Channels[n-1]
	b.conv("encoder.", "conv_in", c0, u.In, 3)
	out := c0
	for i := 0; i < n; i++ {
		in := out
		out = u.Channels[i]
		p := "encoder.down_blocks." + strconv.Itoa(i) + "."
		for j := int64(0); j < u.LayersPerBlock[i]; j++ {
			rin := out
			if j == 0 {
				rin = in
			}
			b.resnet(p+"resnets."+itoa(j)+".", rin, out, 0)
		}
		if i < n-1 {
			b.conv(p, "downsamplers.0.conv", out, out, 3)
		}
	}
	b.vaeMid("encoder.mid_block.", cl, u.MidBlock)
	b.groupNorm("encoder.", "conv_norm_out", cl)
	b.conv("encoder.", "conv_out", 2*u.Latent, cl, 3)
	b.conv("decoder.", "conv_in", cl, u.Latent, 3)
	b.vaeMid("decoder.mid_block.", cl, u.MidBlock)
	out = cl
	for i := 0; i < n; i++ {
		prev := out
		out = u.Channels[u.upLevel(i)]
		p := "decoder.up_blocks." + strconv.Itoa(i) + "."
		layers := u.LayersPerBlock[u.upLevel(i)] + 1
		for j := int64(0); j < layers; j++ {
			rin := out
			if j == 0 {
				rin = prev
			}
			b.resnet(p+"resnets."+itoa(j)+".", rin, out, 0)
		}
		if i < n-1 {
			b.conv(p, "upsamplers.0.conv", out, out, 3)
		}
	}
	b.groupNorm("decoder.", "conv_norm_out", c0)
	b.conv("decoder.", "conv_out", u.Out, c0, 3)
	if u.QuantConv {
		b.conv("", "quant_conv", 2*u.Latent, 2*u.Latent, 1)
	}
	if u.PostQuantConv {
		b.conv("", "post_quant_conv", u.Latent, u.Latent, 1)
	}
}
