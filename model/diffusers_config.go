package model

// Reading diffusers' UNet and VAE config.json and validating the UNet.

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

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
