package model

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// Diffusers model classes FromHFConfig reads from a diffusers config's
// "_class_name", as the Spec.Family they get.
const (
	// FamilyUNet is diffusers' UNet2DConditionModel (Stable Diffusion
	// 1.x, 2.x and SDXL denoisers).
	FamilyUNet = "unet2d_condition"
	// FamilyVAE is diffusers' AutoencoderKL (the Stable Diffusion VAEs).
	FamilyVAE = "autoencoder_kl"
)

// UNet block types (diffusers models/unets/unet_2d_blocks.py).
const (
	blockCrossDown = "CrossAttnDownBlock2D"
	blockDown      = "DownBlock2D"
	blockCrossUp   = "CrossAttnUpBlock2D"
	blockUp        = "UpBlock2D"
	blockEncDown   = "DownEncoderBlock2D"
	blockDecUp     = "UpDecoderBlock2D"
)

// UNet is the architecture of a convolutional diffusers model: a
// UNet2DConditionModel denoiser or an AutoencoderKL. Per-level lists are
// in the order of block_out_channels (down blocks); the up blocks run
// them reversed, as the classes build them.
//
// The modelled classes are those of diffusers 0.40.0.dev0 (commit
// 58eb52c0803ea9af3abec60841c2a093bdf1f951): models/unets/unet_2d_condition.py,
// models/unets/unet_2d_blocks.py (CrossAttnDownBlock2D, DownBlock2D,
// CrossAttnUpBlock2D, UpBlock2D, UNetMidBlock2DCrossAttn,
// DownEncoderBlock2D, UpDecoderBlock2D, UNetMidBlock2D),
// models/resnet.py (ResnetBlock2D, Downsample2D, Upsample2D),
// models/transformers/transformer_2d.py (Transformer2DModel),
// models/attention.py (BasicTransformerBlock, FeedForward with GEGLU),
// models/embeddings.py (TimestepEmbedding), and
// models/autoencoders/autoencoder_kl.py with vae.py (Encoder, Decoder).
type UNet struct {
	In, Out  int64   // in_channels, out_channels
	Channels []int64 // block_out_channels
	// LayersPerBlock is layers_per_block per level (the up blocks have
	// one resnet more).
	LayersPerBlock []int64
	// Cross marks the levels with cross-attention blocks
	// (CrossAttnDownBlock2D), in down order; UpCross the up blocks'
	// (CrossAttnUpBlock2D), in up order.
	Cross, UpCross []bool
	// Heads is the attention heads per level (num_attention_heads, or
	// attention_head_dim, which UNet2DConditionModel reads as the head
	// count when num_attention_heads is absent).
	Heads []int64
	// TransformerLayers is transformer_layers_per_block per level;
	// UpTransformerLayers the up blocks' (in up order: the reverse, or
	// reverse_transformer_layers_per_block).
	TransformerLayers, UpTransformerLayers []int64
	// CrossDim is cross_attention_dim per level: the text encoder's
	// width (768 SD 1.x, 1024 SD 2.x, 2048 SDXL).
	CrossDim []int64
	// TimeEmbed is the time embedding width (time_embedding_dim, or 4 ×
	// block_out_channels[0]).
	TimeEmbed int64
	// AddTimeEmbed and AddEmbedIn are SDXL's "text_time" addition
	// embedding: addition_time_embed_dim (256) and
	// projection_class_embeddings_input_dim (2816); zero: none.
	AddTimeEmbed, AddEmbedIn int64
	// MidBlock says the UNet has its UNetMidBlock2DCrossAttn
	// (mid_block_type), or the VAE its mid-block attention
	// (mid_block_add_attention).
	MidBlock bool
	// LinearProjection is use_linear_projection: proj_in/proj_out are
	// Linear instead of 1×1 convolutions (same parameter count).
	LinearProjection bool
	Groups           int64 // norm_num_groups
	// Latent is an AutoencoderKL's latent_channels; QuantConv and
	// PostQuantConv its use_quant_conv and use_post_quant_conv.
	Latent                   int64
	QuantConv, PostQuantConv bool
	// SampleSize is sample_size: the latent side (UNet) or the image
	// side (VAE) the model was trained at; it sizes nothing.
	SampleSize int64
	// ScalingFactor is the VAE's scaling_factor as written (informational).
	ScalingFactor float64
	// ForceUpcast is the VAE's force_upcast: the Stable Diffusion XL
	// pipelines decode in fp32 when the VAE is fp16 (upcast_vae).
	ForceUpcast bool
	// UpcastAttention is the UNet's upcast_attention (SD 2.x): the
	// eager attention computes its scores and softmax in fp32.
	UpcastAttention bool
}

// Levels returns the number of resolution levels.
func (u *UNet) Levels() int { return len(u.Channels) }

// upLevel returns, for the up block i (up order), the down level it
// mirrors.
func (u *UNet) upLevel(i int) int { return len(u.Channels) - 1 - i }

// ints reads an integer or a list of integers under key; a single value
// is repeated n times, a list must have n entries (n < 0: any length).
func (c *config) ints(def []int64, n int, key string) ([]int64, error) {
	_, v, ok := c.lookup(key)
	if !ok {
		if def == nil {
			return nil, gpumem.Errorf(c.field(key), nil, gpumem.ErrInvalid, "missing")
		}
		if n >= 0 && len(def) == 1 {
			out := make([]int64, n)
			for i := range out {
				out[i] = def[0]
			}
			return out, nil
		}
		return append([]int64(nil), def...), nil
	}
	l, isList := v.([]any)
	if !isList {
		x, err := toInt(c.field(key), v)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return []int64{x}, nil
		}
		out := make([]int64, n)
		for i := range out {
			out[i] = x
		}
		return out, nil
	}
	if n >= 0 && len(l) != n {
		return nil, gpumem.Errorf(c.field(key), len(l), gpumem.ErrInvalid, "lists %d values, want one per block (%d)", len(l), n)
	}
	out := make([]int64, len(l))
	for i, x := range l {
		if _, nested := x.([]any); nested {
			return nil, gpumem.Errorf(c.field(key)+"["+strconv.Itoa(i)+"]", x, gpumem.ErrUnsupported, "per-layer lists are not modelled")
		}
		y, err := toInt(c.field(key)+"["+strconv.Itoa(i)+"]", x)
		if err != nil {
			return nil, err
		}
		out[i] = y
	}
	return out, nil
}

// strs reads a list of strings under key, or def.
func (c *config) strs(def []string, key string) ([]string, error) {
	_, v, ok := c.lookup(key)
	if !ok {
		return append([]string(nil), def...), nil
	}
	l, isList := v.([]any)
	if !isList {
		return nil, gpumem.Errorf(c.field(key), v, gpumem.ErrSyntax, "not a list")
	}
	out := make([]string, len(l))
	for i, x := range l {
		s, ok := x.(string)
		if !ok {
			return nil, gpumem.Errorf(c.field(key)+"["+strconv.Itoa(i)+"]", x, gpumem.ErrSyntax, "not a string")
		}
		out[i] = s
	}
	return out, nil
}
