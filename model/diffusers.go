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

// refuse returns an error naming key when it is present with a value
// other than the defaults the modelled classes use (null, false, or one
// of ok).
func (c *config) refuse(key string, ok ...string) error {
	_, v, present := c.lookup(key)
	if !present {
		return nil
	}
	if b, isBool := v.(bool); isBool && !b {
		return nil
	}
	if s, isStr := v.(string); isStr {
		for _, o := range ok {
			if s == o {
				return nil
			}
		}
	}
	return gpumem.Errorf(c.field(key), v, gpumem.ErrUnsupported, "not modelled (the Stable Diffusion 1.x, 2.x and SDXL UNets leave it unset)")
}

// unet reads a diffusers UNet2DConditionModel config with the
// register_to_config defaults of unet_2d_condition.py.
func (c *config) unet(s *Spec) error {
	for _, k := range []struct {
		key string
		ok  []string
	}{{"class_embed_type", nil}, {"encoder_hid_dim", nil}, {"encoder_hid_dim_type", nil}, {"time_cond_proj_dim", nil},
		{"dual_cross_attention", nil}, {"only_cross_attention", nil}, {"mid_block_only_cross_attention", nil},
		{"num_class_embeds", nil}, {"cross_attention_norm", nil}, {"timestep_post_act", nil}, {"time_embedding_act_fn", nil},
		{"class_embeddings_concat", nil}, {"resnet_skip_time_act", nil},
		{"attention_type", []string{"default"}}, {"resnet_time_scale_shift", []string{"default"}},
		{"time_embedding_type", []string{"positional"}}, {"addition_embed_type", []string{"text_time"}}} {
		if err := c.refuse(k.key, k.ok...); err != nil {
			return err
		}
	}
	var e errs
	u := &UNet{}
	u.In = e.i(c.posv(4, "in_channels"))
	u.Out = e.i(c.posv(4, "out_channels"))
	if e.err != nil {
		return e.err
	}
	down, err := c.strs([]string{blockCrossDown, blockCrossDown, blockCrossDown, blockDown}, "down_block_types")
	if err != nil {
		return err
	}
	up, err := c.strs([]string{blockUp, blockCrossUp, blockCrossUp, blockCrossUp}, "up_block_types")
	if err != nil {
		return err
	}
	n := len(down)
	if n == 0 || n > 16 {
		return gpumem.Errorf(c.field("down_block_types"), n, gpumem.ErrInvalid, "must list 1 to 16 blocks")
	}
	if len(up) != n {
		return gpumem.Errorf(c.field("up_block_types"), len(up), gpumem.ErrInvalid, "lists %d blocks, want %d as down_block_types", len(up), n)
	}
	for i, t := range down {
		if t != blockCrossDown && t != blockDown {
			return gpumem.Errorf(c.field("down_block_types")+"["+strconv.Itoa(i)+"]", t, gpumem.ErrUnsupported, "want %s or %s", blockCrossDown, blockDown)
		}
		u.Cross = append(u.Cross, t == blockCrossDown)
	}
	for i, t := range up {
		if t != blockCrossUp && t != blockUp {
			return gpumem.Errorf(c.field("up_block_types")+"["+strconv.Itoa(i)+"]", t, gpumem.ErrUnsupported, "want %s or %s", blockCrossUp, blockUp)
		}
		u.UpCross = append(u.UpCross, t == blockCrossUp)
	}
	if u.Channels, err = c.ints([]int64{320, 640, 1280, 1280}, n, "block_out_channels"); err != nil {
		return err
	}
	if u.LayersPerBlock, err = c.ints([]int64{2}, n, "layers_per_block"); err != nil {
		return err
	}
	if c.has("num_attention_heads") {
		u.Heads, err = c.ints(nil, n, "num_attention_heads")
	} else {
		u.Heads, err = c.ints([]int64{8}, n, "attention_head_dim")
	}
	if err != nil {
		return err
	}
	headKey := "attention_head_dim"
	if c.has("num_attention_heads") {
		headKey = "num_attention_heads"
	}
	for i, h := range u.Heads {
		if h == 0 || u.Channels[i]%h != 0 {
			return gpumem.Errorf(c.field(headKey)+"["+strconv.Itoa(i)+"]", h, gpumem.ErrInvalid,
				"the heads must divide block_out_channels[%d] = %d (UNet2DConditionModel reads attention_head_dim as the head count)", i, u.Channels[i])
		}
	}
	if u.TransformerLayers, err = c.ints([]int64{1}, n, "transformer_layers_per_block"); err != nil {
		return err
	}
	if c.has("reverse_transformer_layers_per_block") {
		if u.UpTransformerLayers, err = c.ints(nil, n, "reverse_transformer_layers_per_block"); err != nil {
			return err
		}
	} else {
		u.UpTransformerLayers = make([]int64, n)
		for i := range u.UpTransformerLayers {
			u.UpTransformerLayers[i] = u.TransformerLayers[n-1-i]
		}
	}
	if u.CrossDim, err = c.ints([]int64{1280}, n, "cross_attention_dim"); err != nil {
		return err
	}
	u.Groups = e.i(c.posv(32, "norm_num_groups"))
	if err := c.groupsDivide(u); err != nil {
		return err
	}
	u.TimeEmbed = e.i(c.intv(0, "time_embedding_dim"))
	if u.TimeEmbed == 0 && e.err == nil {
		u.TimeEmbed = e.i(mulField(c.field("block_out_channels"), u.Channels[0], 4))
	}
	u.LinearProjection = e.b(c.boolv(false, "use_linear_projection"))
	u.UpcastAttention = e.b(c.boolv(false, "upcast_attention"))
	u.SampleSize = e.i(c.intv(0, "sample_size"))
	if add, _ := c.str("addition_embed_type", ""); add == "text_time" {
		u.AddTimeEmbed = e.i(c.posv(256, "addition_time_embed_dim"))
		u.AddEmbedIn = e.i(c.intv(-1, "projection_class_embeddings_input_dim"))
	}
	if v, present := c.m["mid_block_type"]; !present || v != nil {
		mid, err := c.str("mid_block_type", "UNetMidBlock2DCrossAttn")
		if err != nil {
			return err
		}
		if mid != "UNetMidBlock2DCrossAttn" {
			return gpumem.Errorf(c.field("mid_block_type"), mid, gpumem.ErrUnsupported, "want UNetMidBlock2DCrossAttn or null")
		}
		u.MidBlock = true
	}
	for _, k := range []string{"conv_in_kernel", "conv_out_kernel"} {
		if v := e.i(c.intv(3, k)); e.err == nil && v != 3 {
			return gpumem.Errorf(c.field(k), v, gpumem.ErrUnsupported, "only 3 is modelled")
		}
	}
	if e.err != nil {
		return e.err
	}
	s.UNet = u
	return nil
}

// vae reads a diffusers AutoencoderKL config with the register_to_config
// defaults of autoencoder_kl.py.
func (c *config) vae(s *Spec) error {
	var e errs
	u := &UNet{}
	u.In = e.i(c.posv(3, "in_channels"))
	u.Out = e.i(c.posv(3, "out_channels"))
	u.Latent = e.i(c.posv(4, "latent_channels"))
	u.Groups = e.i(c.posv(32, "norm_num_groups"))
	u.SampleSize = e.i(c.intv(32, "sample_size"))
	u.QuantConv = e.b(c.boolv(true, "use_quant_conv"))
	u.PostQuantConv = e.b(c.boolv(true, "use_post_quant_conv"))
	u.MidBlock = e.b(c.boolv(true, "mid_block_add_attention"))
	u.ForceUpcast = e.b(c.boolv(true, "force_upcast"))
	if e.err != nil {
		return e.err
	}
	down, err := c.strs([]string{blockEncDown}, "down_block_types")
	if err != nil {
		return err
	}
	up, err := c.strs([]string{blockDecUp}, "up_block_types")
	if err != nil {
		return err
	}
	n := len(down)
	if n == 0 || n > 16 {
		return gpumem.Errorf(c.field("down_block_types"), n, gpumem.ErrInvalid, "must list 1 to 16 blocks")
	}
	if len(up) != n {
		return gpumem.Errorf(c.field("up_block_types"), len(up), gpumem.ErrInvalid, "lists %d blocks, want %d as down_block_types", len(up), n)
	}
	for i, t := range down {
		if t != blockEncDown {
			return gpumem.Errorf(c.field("down_block_types")+"["+strconv.Itoa(i)+"]", t, gpumem.ErrUnsupported, "want %s", blockEncDown)
		}
	}
	for i, t := range up {
		if t != blockDecUp {
			return gpumem.Errorf(c.field("up_block_types")+"["+strconv.Itoa(i)+"]", t, gpumem.ErrUnsupported, "want %s", blockDecUp)
		}
	}
	if u.Channels, err = c.ints([]int64{64}, n, "block_out_channels"); err != nil {
		return err
	}
	lpb, err := c.intv(1, "layers_per_block")
	if err != nil {
		return err
	}
	u.LayersPerBlock = make([]int64, n)
	for i := range u.LayersPerBlock {
		u.LayersPerBlock[i] = lpb
	}
	if f, ok := c.m["scaling_factor"]; ok {
		if num, isNum := f.(interface{ Float64() (float64, error) }); isNum {
			u.ScalingFactor, _ = num.Float64()
		}
	}
	if err := c.groupsDivide(u); err != nil {
		return err
	}
	u.Heads = make([]int64, n)
	for i := range u.Heads {
		u.Heads[i] = 1
	}
	s.UNet = u
	return nil
}

// groupsDivide checks that norm_num_groups divides every level's
// channels, as nn.GroupNorm requires.
func (c *config) groupsDivide(u *UNet) error {
	for i, ch := range u.Channels {
		if u.Groups > 0 && ch%u.Groups != 0 {
			return gpumem.Errorf(c.field("norm_num_groups"), u.Groups, gpumem.ErrInvalid, "does not divide block_out_channels[%d] = %d", i, ch)
		}
	}
	return nil
}

// validateUNet checks the fields of a UNet or VAE Spec.
func (s Spec) validateUNet(path string) error {
	u := s.UNet
	if u == nil {
		return gpumem.Errorf(path+".UNet", nil, gpumem.ErrInvalid, "%s needs its UNet architecture", s.Family)
	}
	path += ".UNet"
	n := len(u.Channels)
	if n == 0 || n > 16 {
		return gpumem.Errorf(path+".Channels", n, gpumem.ErrInvalid, "must have 1 to 16 levels")
	}
	lists := []struct {
		name string
		n    int
	}{{"LayersPerBlock", len(u.LayersPerBlock)}, {"Heads", len(u.Heads)}}
	if s.Family == FamilyUNet {
		lists = append(lists, []struct {
			name string
			n    int
		}{{"Cross", len(u.Cross)}, {"UpCross", len(u.UpCross)}, {"TransformerLayers", len(u.TransformerLayers)},
			{"UpTransformerLayers", len(u.UpTransformerLayers)}, {"CrossDim", len(u.CrossDim)}}...)
	}
	for _, l := range lists {
		if l.n != n {
			return gpumem.Errorf(path+"."+l.name, l.n, gpumem.ErrInvalid, "has %d entries, want %d (one per level)", l.n, n)
		}
	}
	pos := func(name string, v int64, limit int64) error {
		if v <= 0 || v > limit {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrInvalid, "must be in [1, %d]", limit)
		}
		return nil
	}
	const maxCh = 1 << 20
	for i := 0; i < n; i++ {
		idx := "[" + strconv.Itoa(i) + "]"
		if err := pos("Channels"+idx, u.Channels[i], maxCh); err != nil {
			return err
		}
		if err := pos("LayersPerBlock"+idx, u.LayersPerBlock[i], 1024); err != nil {
			return err
		}
		if err := pos("Heads"+idx, u.Heads[i], maxCh); err != nil {
			return err
		}
		if u.Channels[i]%u.Heads[i] != 0 {
			return gpumem.Errorf(path+".Heads"+idx, u.Heads[i], gpumem.ErrInvalid, "does not divide the %d channels", u.Channels[i])
		}
		if u.Channels[i]%u.Groups != 0 {
			return gpumem.Errorf(path+".Groups", u.Groups, gpumem.ErrInvalid, "does not divide the %d channels", u.Channels[i])
		}
		if s.Family == FamilyUNet {
			if err := pos("TransformerLayers"+idx, u.TransformerLayers[i], 1024); err != nil {
				return err
			}
			if err := pos("UpTransformerLayers"+idx, u.UpTransformerLayers[i], 1024); err != nil {
				return err
			}
			if err := pos("CrossDim"+idx, u.CrossDim[i], maxCh); err != nil {
				return err
			}
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"In", u.In}, {"Out", u.Out}, {"Groups", u.Groups}} {
		if err := pos(f.name, f.v, maxCh); err != nil {
			return err
		}
	}
	switch s.Family {
	case FamilyUNet:
		if err := pos("TimeEmbed", u.TimeEmbed, maxCh); err != nil {
			return err
		}
		if u.AddTimeEmbed < 0 || u.AddTimeEmbed > maxCh || u.AddEmbedIn < 0 || u.AddEmbedIn > maxCh {
			return gpumem.Errorf(path+".AddEmbedIn", u.AddEmbedIn, gpumem.ErrInvalid, "must be in [0, %d]", maxCh)
		}
		if (u.AddTimeEmbed > 0) != (u.AddEmbedIn > 0) {
			return gpumem.Errorf(path+".AddEmbedIn", u.AddEmbedIn, gpumem.ErrInvalid, "the text_time embedding needs both AddTimeEmbed and AddEmbedIn")
		}
	case FamilyVAE:
		if err := pos("Latent", u.Latent, maxCh); err != nil {
			return err
		}
	}
	return nil
}

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
