package model

// Reading a CNN backbone's config.json: stages, widths and EfficientNet's
// compound scaling.

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
)

// stageList reads a list of 1 to 16 positive integers (one per stage);
// def when the key is absent.
func (c *config) stageList(key string, def []int64) ([]int64, error) {
	_, v, ok := c.lookup(key)
	if !ok {
		return append([]int64(nil), def...), nil
	}
	l, isList := v.([]any)
	if !isList {
		return nil, gpumem.Errorf(c.field(key), v, gpumem.ErrSyntax, "not a list")
	}
	if len(l) == 0 || len(l) > 16 {
		return nil, gpumem.Errorf(c.field(key), len(l), gpumem.ErrInvalid, "want 1 to 16 stages")
	}
	out := make([]int64, len(l))
	for i, x := range l {
		f := c.field(key) + "[" + strconv.Itoa(i) + "]"
		n, err := toInt(f, x)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, gpumem.Errorf(f, 0, gpumem.ErrInvalid, "must be positive")
		}
		out[i] = n
	}
	return out, nil
}

// floatv reads a finite float (drop_path_rate, layer_scale_init_value).
func (c *config) floatv(key string, def float64) (float64, error) {
	_, v, ok := c.lookup(key)
	if !ok {
		return def, nil
	}
	n, isNum := v.(json.Number)
	if !isNum {
		return 0, gpumem.Errorf(c.field(key), v, gpumem.ErrSyntax, "not a number")
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f < 0 {
		return 0, gpumem.Errorf(c.field(key), string(n), gpumem.ErrInvalid, "want a finite non-negative number")
	}
	return f, nil
}

// backbone reads ResNetConfig, ConvNextConfig and SwinConfig with their
// class defaults (configuration_resnet.py, configuration_convnext.py,
// configuration_swin.py).
func (c *config) backbone(s *Spec) error {
	var e errs
	bb := &Backbone{}
	s.Backbone = bb
	s.Image.Channels = e.i(c.posv(3, "num_channels"))
	s.Image.Size = e.i(c.posv(224, "image_size"))
	if e.err != nil {
		return e.err
	}
	var err error
	switch s.Family {
	case "resnet":
		bb.Stem = e.i(c.posv(64, "embedding_size"))
		if bb.Widths, err = c.stageList("hidden_sizes", []int64{256, 512, 1024, 2048}); err != nil {
			return err
		}
		if bb.Depths, err = c.stageList("depths", []int64{3, 4, 6, 3}); err != nil {
			return err
		}
		switch lt := e.s(c.str("layer_type", "bottleneck")); lt {
		case "bottleneck":
			bb.Bottleneck = true
		case "basic":
		default:
			if e.err == nil {
				e.err = gpumem.Errorf(c.field("layer_type"), lt, gpumem.ErrInvalid, "want basic or bottleneck")
			}
		}
		if act := e.s(c.str("hidden_act", "relu")); act != "relu" && e.err == nil {
			e.err = gpumem.Errorf(c.field("hidden_act"), act, gpumem.ErrUnsupported, "only relu is modelled")
		}
		bb.DownsampleFirst = e.b(c.boolv(false, "downsample_in_first_stage"))
		if e.err == nil && bb.Bottleneck {
			for i, w := range bb.Widths {
				if w%4 != 0 {
					e.err = gpumem.Errorf(c.field("hidden_sizes")+"["+strconv.Itoa(i)+"]", w, gpumem.ErrInvalid, "a bottleneck stage's width must be a multiple of 4 (reduction 4)")
					break
				}
			}
		}
	case "convnext":
		s.Image.Patch = e.i(c.posv(4, "patch_size"))
		if bb.Widths, err = c.stageList("hidden_sizes", []int64{96, 192, 384, 768}); err != nil {
			return err
		}
		if bb.Depths, err = c.stageList("depths", []int64{3, 3, 9, 3}); err != nil {
			return err
		}
		if n := e.i(c.posv(int64(len(bb.Widths)), "num_stages")); e.err == nil && n != int64(len(bb.Widths)) {
			e.err = gpumem.Errorf(c.field("num_stages"), n, gpumem.ErrInvalid, "hidden_sizes lists %d stages", len(bb.Widths))
		}
		bb.Stem = bb.Widths[0]
		ls, err := c.floatv("layer_scale_init_value", 1e-6)
		if err != nil {
			return err
		}
		bb.LayerScale = ls > 0
		if act := e.s(c.str("hidden_act", "gelu")); act != "gelu" && e.err == nil {
			e.err = gpumem.Errorf(c.field("hidden_act"), act, gpumem.ErrUnsupported, "only gelu is modelled")
		}
		dp, err := c.floatv("drop_path_rate", 0)
		if err != nil {
			return err
		}
		bb.DropPath = dp > 0
	case "efficientnet":
		if err := c.efficientnet(s, bb); err != nil {
			return err
		}
	case "swin":
		s.Image.Patch = e.i(c.posv(4, "patch_size"))
		bb.Stem = e.i(c.posv(96, "embed_dim"))
		if bb.Depths, err = c.stageList("depths", []int64{2, 2, 6, 2}); err != nil {
			return err
		}
		if bb.Heads, err = c.stageList("num_heads", []int64{3, 6, 12, 24}); err != nil {
			return err
		}
		if e.err == nil && len(bb.Heads) != len(bb.Depths) {
			return gpumem.Errorf(c.field("num_heads"), len(bb.Heads), gpumem.ErrInvalid, "depths lists %d stages", len(bb.Depths))
		}
		bb.Window = e.i(c.posv(7, "window_size"))
		bb.MLPRatio = e.i(c.posv(4, "mlp_ratio"))
		bb.QKVBias = e.b(c.boolv(true, "qkv_bias"))
		bb.AbsolutePositions = e.b(c.boolv(false, "use_absolute_embeddings"))
		if act := e.s(c.str("hidden_act", "gelu")); act != "gelu" && e.err == nil {
			e.err = gpumem.Errorf(c.field("hidden_act"), act, gpumem.ErrUnsupported, "only gelu is modelled")
		}
		dp, err := c.floatv("drop_path_rate", 0.1)
		if err != nil {
			return err
		}
		bb.DropPath = dp > 0
		if e.err != nil {
			return e.err
		}
		bb.Widths = make([]int64, len(bb.Depths))
		w := bb.Stem
		for i := range bb.Widths {
			bb.Widths[i] = w
			if w%bb.Heads[i] != 0 {
				return gpumem.Errorf(c.field("num_heads")+"["+strconv.Itoa(i)+"]", bb.Heads[i], gpumem.ErrInvalid, "does not divide the stage's %d channels", w)
			}
			if w > maxDim/2 {
				return gpumem.Errorf(c.field("embed_dim"), bb.Stem, gpumem.ErrRange, "stage widths exceed 2^40")
			}
			w *= 2
		}
	}
	if e.err != nil {
		return e.err
	}
	if len(bb.Widths) != len(bb.Depths) {
		return gpumem.Errorf(c.field("depths"), len(bb.Depths), gpumem.ErrInvalid, "hidden_sizes lists %d stages", len(bb.Widths))
	}
	s.Hidden = bb.Widths[len(bb.Widths)-1]
	if s.Family == "efficientnet" {
		s.Hidden = bb.Top
	}
	for _, d := range bb.Depths {
		s.Layers += d
	}
	if s.Family == "swin" {
		s.Heads = bb.Heads[len(bb.Heads)-1]
		s.KVHeads, s.HeadDim = s.Heads, s.Hidden/s.Heads
		s.Norm = LayerNorm
	}
	return nil
}

// roundFilters is transformers' round_filters: channels·width rounded to
// a multiple of the divisor, not below 90% of it.
func roundFilters(ch int64, width float64, divisor int64) int64 {
	x := float64(ch) * width
	d := float64(divisor)
	n := max(divisor, int64(x+d/2)/divisor*divisor)
	if float64(n) < 0.9*x {
		n += divisor
	}
	return n
}

// efficientnet reads EfficientNetConfig (configuration_efficientnet.py;
// its defaults are EfficientNet-B7's), with the channels and repeats
// rounded as EfficientNetEncoder rounds them (round_filters,
// round_repeats).
func (c *config) efficientnet(s *Spec, bb *Backbone) error {
	var e errs
	s.Image.Size = e.i(c.posv(600, "image_size"))
	width, err := c.floatv("width_coefficient", 2.0)
	if err != nil {
		return err
	}
	depth, err := c.floatv("depth_coefficient", 3.1)
	if err != nil {
		return err
	}
	if width <= 0 || width > 64 || depth <= 0 || depth > 64 {
		return gpumem.Errorf(c.field("width_coefficient"), width, gpumem.ErrInvalid, "width and depth coefficients must be in (0, 64]")
	}
	div := e.i(c.posv(8, "depth_divisor"))
	lists := []struct {
		key string
		def []int64
		dst *[]int64
	}{
		{"in_channels", []int64{32, 16, 24, 40, 80, 112, 192}, &bb.Inputs},
		{"out_channels", []int64{16, 24, 40, 80, 112, 192, 320}, &bb.Widths},
		{"kernel_sizes", []int64{3, 3, 5, 3, 5, 5, 3}, &bb.Kernels},
		{"strides", []int64{1, 2, 2, 2, 1, 2, 1}, &bb.Strides},
		{"num_block_repeats", []int64{1, 2, 2, 3, 3, 4, 1}, &bb.Depths},
		{"expand_ratios", []int64{1, 6, 6, 6, 6, 6, 6}, &bb.Expand},
	}
	for _, l := range lists {
		v, err := c.stageList(l.key, l.def)
		if err != nil {
			return err
		}
		if l.key != "in_channels" && len(v) != len(bb.Inputs) {
			return gpumem.Errorf(c.field(l.key), len(v), gpumem.ErrInvalid, "in_channels lists %d stages", len(bb.Inputs))
		}
		*l.dst = v
	}
	for i, st := range bb.Strides {
		if st > 2 {
			return gpumem.Errorf(c.field("strides")+"["+strconv.Itoa(i)+"]", st, gpumem.ErrUnsupported, "strides of 1 or 2 are modelled")
		}
		if bb.Kernels[i]%2 == 0 {
			return gpumem.Errorf(c.field("kernel_sizes")+"["+strconv.Itoa(i)+"]", bb.Kernels[i], gpumem.ErrInvalid, "must be odd")
		}
	}
	if e.err != nil {
		return e.err
	}
	for i := range bb.Inputs {
		if bb.Inputs[i] > 1<<20 || bb.Widths[i] > 1<<20 {
			return gpumem.Errorf(c.field("out_channels"), bb.Widths[i], gpumem.ErrRange, "channels above 2^20")
		}
		bb.Inputs[i] = roundFilters(bb.Inputs[i], width, div)
		bb.Widths[i] = roundFilters(bb.Widths[i], width, div)
		bb.Depths[i] = int64(math.Ceil(depth * float64(bb.Depths[i])))
	}
	bb.Stem = roundFilters(32, width, div)
	bb.Top = roundFilters(1280, width, div)
	if hd := e.i(c.posv(2560, "hidden_dim")); e.err == nil && hd != bb.Top {
		return gpumem.Errorf(c.field("hidden_dim"), hd, gpumem.ErrInvalid, "top_bn's %d channels must equal top_conv's round_filters(1280) = %d", hd, bb.Top)
	}
	if bb.SERatio, err = c.floatv("squeeze_expansion_ratio", 0.25); err != nil {
		return err
	}
	if bb.NoAdjust, err = c.intsOrEmpty("depthwise_padding"); err != nil {
		return err
	}
	if act := e.s(c.str("hidden_act", "swish")); act != "swish" && act != "silu" && e.err == nil {
		e.err = gpumem.Errorf(c.field("hidden_act"), act, gpumem.ErrUnsupported, "only swish (SiLU) is modelled")
	}
	if pt := e.s(c.str("pooling_type", "mean")); pt != "mean" && e.err == nil {
		e.err = gpumem.Errorf(c.field("pooling_type"), pt, gpumem.ErrUnsupported, "only mean pooling is modelled")
	}
	dc, err := c.floatv("drop_connect_rate", 0.2)
	if err != nil {
		return err
	}
	bb.DropPath = dc > 0
	dr, err := c.floatv("dropout_rate", 0.5)
	if err != nil {
		return err
	}
	bb.HeadDropout = dr > 0
	return e.err
}

// intsOrEmpty reads a list of non-negative integers that may be empty
// (EfficientNet's depthwise_padding).
func (c *config) intsOrEmpty(key string) ([]int64, error) {
	_, v, ok := c.lookup(key)
	if !ok {
		return nil, nil
	}
	l, isList := v.([]any)
	if !isList {
		return nil, gpumem.Errorf(c.field(key), v, gpumem.ErrSyntax, "not a list")
	}
	if len(l) > 1<<10 {
		return nil, gpumem.Errorf(c.field(key), len(l), gpumem.ErrRange, "more than 1024 entries")
	}
	out := make([]int64, len(l))
	for i, x := range l {
		n, err := toInt(c.field(key)+"["+strconv.Itoa(i)+"]", x)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}
