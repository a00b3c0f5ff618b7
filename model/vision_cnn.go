package model

// # Hierarchical vision backbones: ResNet, ConvNeXt, Swin
//
// The tensors follow Hugging Face transformers' image classification
// classes, whose parameters are those of torchvision's models of the same
// name (the counts of torchvision's weights metadata, num_params, are the
// tests' published figures):
//
//   - resnet: modeling_resnet.py at commit 00cbbe53b2f70d551ce82a1f6b43a2e4a4debe42
//     (ResNetEmbeddings: 7×7/2 convolution, BatchNorm, ReLU, 3×3/2
//     max-pool; stages of ResNetBasicLayer or ResNetBottleNeckLayer with
//     a 1×1 shortcut convolution and BatchNorm where the channels or the
//     stride change; AdaptiveAvgPool2d; classifier.1 Linear), the layout
//     of torchvision/models/resnet.py (pytorch/vision commit
//     054e54c573ba46e5b9c63f1eea3ad4d103afbea2: BasicBlock, Bottleneck,
//     stride on the 3×3 convolution, "ResNet v1.5");
//   - convnext: modeling_convnext.py at commit 00fea5de3f39d68bacc08b65261aa60eda7df10d
//     (4×4/4 patch convolution and a channels-first LayerNorm written in
//     Python ops; stages opened by a channels-first LayerNorm and a 2×2/2
//     convolution; ConvNextLayer: 7×7 depthwise convolution, permute,
//     LayerNorm, Linear 4×, GELU, Linear, layer scale, residual add;
//     global mean, LayerNorm, classifier);
//   - swin: modeling_swin.py at commit 0004a3c206a354820edc45954e80b6657f10a7c7
//     (patch convolution and LayerNorm; stages of SwinLayer with
//     query/key/value/output projections, a relative position bias table
//     of (2·window−1)² rows per head, LayerNorms and a 4× MLP; a
//     SwinPatchMerging (LayerNorm over 4C, Linear 4C→2C without bias)
//     after every stage but the last; final LayerNorm, mean pooling,
//     classifier);
//   - efficientnet: modeling_efficientnet.py at commit 03569cc9f4a87c3337cac6e33d3cbb086f5165e3
//     (zero-padded 3×3/2 stem, BatchNorm, SiLU; EfficientNetBlock: 1×1
//     expansion unless the ratio is 1, depthwise k×k with transformers'
//     asymmetric padding at stride 2, squeeze-excite of
//     max(1, in·squeeze_expansion_ratio) channels, 1×1 projection, the
//     residual after nn.Dropout in a stage's later blocks; 1×1 top
//     convolution to round_filters(1280); average pool, dropout,
//     classifier), with round_filters and round_repeats applied to the
//     config's lists; the parameters equal torchvision's efficientnet_b0.
//
// BatchNorm's running_mean, running_var and num_batches_tracked are
// buffers, not parameters: they are not in the inventory (ResNet-50 has
// 53,120 running-statistics values, 212 KB in fp32), nor Swin's
// relative_position_index buffer.

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// Backbone describes a hierarchical vision backbone (resnet, convnext,
// swin, efficientnet): its stages' widths and depths and the block design. The image
// geometry is in [Spec.Image] (Size, Channels, and the patch size of
// convnext and swin).
type Backbone struct {
	// Stem is the stem's output channels: ResNet's embedding_size;
	// Widths[0] for ConvNeXt, EmbedDim for Swin.
	Stem int64
	// Widths is each stage's output channels (hidden_sizes; Swin:
	// embed_dim·2^i).
	Widths []int64
	// Depths is each stage's number of blocks (depths).
	Depths []int64
	// Bottleneck selects ResNet's bottleneck block (layer_type
	// "bottleneck": 1×1, 3×3, 1×1 with a 4× reduction) over the basic
	// block (two 3×3 convolutions).
	Bottleneck bool
	// DownsampleFirst makes ResNet's first stage downsample too
	// (downsample_in_first_stage).
	DownsampleFirst bool
	// LayerScale adds ConvNeXt's per-channel layer scale
	// (layer_scale_init_value > 0).
	LayerScale bool
	// DropPath says that stochastic depth is active in training
	// (drop_path_rate > 0): each ConvNeXt or Swin block multiplies its
	// branch by a per-sample mask, which mul saves.
	DropPath bool
	// Heads is each Swin stage's attention heads (num_heads).
	Heads []int64
	// Window is Swin's window_size.
	Window int64
	// MLPRatio is Swin's mlp_ratio (4).
	MLPRatio int64
	// QKVBias is Swin's qkv_bias.
	QKVBias bool
	// AbsolutePositions adds Swin's learned absolute position embeddings
	// (use_absolute_embeddings).
	AbsolutePositions bool

	// EfficientNet's stages (efficientnet): Inputs is each stage's first
	// block's input channels (round_filters of in_channels), Kernels the
	// depthwise kernel sizes, Strides the first block's stride, Expand
	// the expand ratios; Widths and Depths hold the rounded out_channels
	// and round_repeats(num_block_repeats).
	Inputs, Kernels, Strides, Expand []int64
	// SERatio is squeeze_expansion_ratio: the squeeze-excite width is
	// max(1, ⌊in·SERatio⌋) of the block's input channels.
	SERatio float64
	// NoAdjust lists the blocks (depthwise_padding) whose stride-2
	// padding is symmetric.
	NoAdjust []int64
	// Top is the 1×1 top convolution's channels (round_filters(1280),
	// which must equal hidden_dim).
	Top int64
	// HeadDropout says the classifier's input goes through dropout
	// (dropout_rate > 0), which saves a 1-byte mask in training.
	HeadDropout bool
}

// isBackbone reports whether family is a hierarchical backbone.
func isBackbone(family string) bool {
	switch family {
	case "resnet", "convnext", "swin", "efficientnet":
		return true
	}
	return false
}

// validateBackbone checks the fields a backbone's layout reads.
func (s Spec) validateBackbone(path string) error {
	bb := s.Backbone
	if bb == nil {
		return gpumem.Errorf(path+".Backbone", nil, gpumem.ErrInvalid, "%s needs its stages (Backbone)", s.Family)
	}
	n := len(bb.Depths)
	if n == 0 || n > 16 || len(bb.Widths) != n {
		return gpumem.Errorf(path+".Backbone.Depths", n, gpumem.ErrInvalid, "want 1 to 16 stages, one width each (%d widths)", len(bb.Widths))
	}
	var layers int64
	for i := range n {
		if bb.Depths[i] <= 0 || bb.Depths[i] > maxLayers {
			return gpumem.Errorf(path+".Backbone.Depths["+strconv.Itoa(i)+"]", bb.Depths[i], gpumem.ErrInvalid, "must be in [1, %d]", maxLayers)
		}
		if bb.Widths[i] <= 0 || bb.Widths[i] > 1<<24 {
			return gpumem.Errorf(path+".Backbone.Widths["+strconv.Itoa(i)+"]", bb.Widths[i], gpumem.ErrInvalid, "must be in [1, 2^24]")
		}
		layers += bb.Depths[i]
	}
	if layers > maxLayers {
		return gpumem.Errorf(path+".Backbone.Depths", layers, gpumem.ErrRange, "more than %d blocks", maxLayers)
	}
	if bb.Stem <= 0 || bb.Stem > 1<<24 {
		return gpumem.Errorf(path+".Backbone.Stem", bb.Stem, gpumem.ErrInvalid, "must be in [1, 2^24]")
	}
	if s.Image.Channels <= 0 || s.Image.Channels > 1<<16 {
		return gpumem.Errorf(path+".Image.Channels", s.Image.Channels, gpumem.ErrInvalid, "must be in [1, 65536]")
	}
	if s.Image.Size <= 0 || s.Image.Size > 1<<16 {
		return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrInvalid, "must be in [1, 65536] pixels")
	}
	switch s.Family {
	case "resnet":
		if bb.Bottleneck {
			for i, w := range bb.Widths {
				if w%4 != 0 {
					return gpumem.Errorf(path+".Backbone.Widths["+strconv.Itoa(i)+"]", w, gpumem.ErrInvalid, "a bottleneck stage's width must be a multiple of 4")
				}
			}
		}
		if s.Image.Size < 32 {
			return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrInvalid, "a ResNet needs at least 32 pixels")
		}
	case "convnext", "swin":
		if s.Image.Patch <= 0 || s.Image.Patch > 64 {
			return gpumem.Errorf(path+".Image.Patch", s.Image.Patch, gpumem.ErrInvalid, "must be in [1, 64]")
		}
		if s.Image.Size < s.Image.Patch<<(n-1) {
			return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrInvalid, "smaller than the %d pixels the %d stages need", s.Image.Patch<<(n-1), n)
		}
	}
	if s.Family == "efficientnet" {
		for _, l := range []struct {
			name string
			v    []int64
			max  int64
		}{{"Inputs", bb.Inputs, 1 << 24}, {"Kernels", bb.Kernels, 31}, {"Strides", bb.Strides, 2}, {"Expand", bb.Expand, 64}} {
			if len(l.v) != n {
				return gpumem.Errorf(path+".Backbone."+l.name, len(l.v), gpumem.ErrInvalid, "want one per stage (%d)", n)
			}
			for i, v := range l.v {
				if v <= 0 || v > l.max {
					return gpumem.Errorf(path+".Backbone."+l.name+"["+strconv.Itoa(i)+"]", v, gpumem.ErrInvalid, "must be in [1, %d]", l.max)
				}
			}
		}
		if bb.Top <= 0 || bb.Top > 1<<24 {
			return gpumem.Errorf(path+".Backbone.Top", bb.Top, gpumem.ErrInvalid, "must be in [1, 2^24]")
		}
		if !(bb.SERatio > 0 && bb.SERatio <= 1) {
			return gpumem.Errorf(path+".Backbone.SERatio", bb.SERatio, gpumem.ErrInvalid, "must be in (0, 1]")
		}
		if s.Image.Size < 32 {
			return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrInvalid, "an EfficientNet needs at least 32 pixels")
		}
	}
	if s.Family == "swin" {
		if len(bb.Heads) != n {
			return gpumem.Errorf(path+".Backbone.Heads", len(bb.Heads), gpumem.ErrInvalid, "want one per stage (%d)", n)
		}
		for i, h := range bb.Heads {
			if h <= 0 || bb.Widths[i]%h != 0 {
				return gpumem.Errorf(path+".Backbone.Heads["+strconv.Itoa(i)+"]", h, gpumem.ErrInvalid, "must divide the stage's %d channels", bb.Widths[i])
			}
		}
		if bb.Window <= 0 || bb.Window > 1<<10 {
			return gpumem.Errorf(path+".Backbone.Window", bb.Window, gpumem.ErrInvalid, "must be in [1, 1024]")
		}
		if bb.MLPRatio <= 0 || bb.MLPRatio > 64 {
			return gpumem.Errorf(path+".Backbone.MLPRatio", bb.MLPRatio, gpumem.ErrInvalid, "must be in [1, 64]")
		}
	}
	return nil
}

// convOut is a convolution's or pooling's output side:
// ⌊(in + 2·pad − kernel)/stride⌋ + 1 (nn.Conv2d, nn.MaxPool2d).
func convOut(in, kernel, stride, pad int64) int64 {
	return (in+2*pad-kernel)/stride + 1
}

// bn adds a BatchNorm2d's weight and bias.
func (b *builder) bn(prefix string, c int64) {
	b.addP(prefix, ".weight", c)
	b.addP(prefix, ".bias", c)
}

// buildBackbone emits a backbone's parameters in the order of the
// Hugging Face class's named_parameters.
func (s Spec) buildBackbone(b *builder) {
	bb := s.Backbone
	cls := s.Head == HeadImageCls
	switch s.Family {
	case "resnet":
		p0 := "resnet."
		b.addP(p0, "embedder.embedder.convolution.weight", bb.Stem, s.Image.Channels, 7, 7)
		b.bn(p0+"embedder.embedder.normalization", bb.Stem)
		in := bb.Stem
		for i, out := range bb.Widths {
			// The stage's first block (its input width and stride) and
			// the others, identical: folded by stack.
			class := firstLayer
			if in == out && !(i > 0 || bb.DownsampleFirst) {
				class = nil // no shortcut: the first block is like the others
			}
			b.stack(bb.Depths[i], class, func(j int64) {
				in := in
				if j > 0 {
					in = out
				}
				p := p0 + "encoder.stages." + itoa(int64(i)) + ".layers." + itoa(j) + "."
				stride := j == 0 && (i > 0 || bb.DownsampleFirst)
				if j == 0 && (in != out || stride) {
					b.addP(p, "shortcut.convolution.weight", out, in, 1, 1)
					b.bn(p+"shortcut.normalization", out)
				}
				if bb.Bottleneck {
					m := out / 4
					b.addP(p, "layer.0.convolution.weight", m, in, 1, 1)
					b.bn(p+"layer.0.normalization", m)
					b.addP(p, "layer.1.convolution.weight", m, m, 3, 3)
					b.bn(p+"layer.1.normalization", m)
					b.addP(p, "layer.2.convolution.weight", out, m, 1, 1)
					b.bn(p+"layer.2.normalization", out)
				} else {
					b.addP(p, "layer.0.convolution.weight", out, in, 3, 3)
					b.bn(p+"layer.0.normalization", out)
					b.addP(p, "layer.1.convolution.weight", out, out, 3, 3)
					b.bn(p+"layer.1.normalization", out)
				}
			})
			in = out
		}
		if cls {
			b.linear("classifier.1", s.labels(), in, true)
		}
	case "convnext":
		p0 := "convnext."
		P := s.Image.Patch
		b.addP(p0, "embeddings.patch_embeddings.weight", bb.Stem, s.Image.Channels, P, P)
		b.addP(p0, "embeddings.patch_embeddings.bias", bb.Stem)
		b.normP(p0, "embeddings.layernorm", bb.Stem, LayerNorm)
		in := bb.Stem
		for i, out := range bb.Widths {
			p := p0 + "encoder.stages." + itoa(int64(i)) + "."
			if in != out || i > 0 {
				b.normP(p, "downsampling_layer.0", in, LayerNorm)
				b.addP(p, "downsampling_layer.1.weight", out, in, 2, 2)
				b.addP(p, "downsampling_layer.1.bias", out)
			}
			b.stack(bb.Depths[i], nil, func(j int64) {
				q := p + "layers." + itoa(j) + "."
				b.addP(q, "dwconv.weight", out, 1, 7, 7)
				b.addP(q, "dwconv.bias", out)
				b.normP(q, "layernorm", out, LayerNorm)
				b.linearP(q, "pwconv1", 4*out, out, true)
				b.linearP(q, "pwconv2", out, 4*out, true)
				if bb.LayerScale {
					b.addP(q, "layer_scale_parameter", out)
				}
			})
			in = out
		}
		b.normP(p0, "layernorm", in, LayerNorm)
		if cls {
			b.linear("classifier", s.labels(), in, true)
		}
	case "efficientnet":
		p0 := "efficientnet."
		b.addP(p0, "embeddings.convolution.weight", bb.Stem, s.Image.Channels, 3, 3)
		b.bn(p0+"embeddings.batchnorm", bb.Stem)
		k := int64(0)
		for i, out := range bb.Widths {
			first := k
			b.stack(bb.Depths[i], firstLayer, func(j int64) {
				in := bb.Inputs[i]
				if j > 0 {
					in = out
				}
				p := p0 + "encoder.blocks." + itoa(first+j) + "."
				x := in * bb.Expand[i]
				if bb.Expand[i] != 1 {
					b.addP(p, "expansion.expand_conv.weight", x, in, 1, 1)
					b.bn(p+"expansion.expand_bn", x)
				}
				b.addP(p, "depthwise_conv.depthwise_conv.weight", x, 1, bb.Kernels[i], bb.Kernels[i])
				b.bn(p+"depthwise_conv.depthwise_norm", x)
				se := bb.se(in)
				b.addP(p, "squeeze_excite.reduce.weight", se, x, 1, 1)
				b.addP(p, "squeeze_excite.reduce.bias", se)
				b.addP(p, "squeeze_excite.expand.weight", x, se, 1, 1)
				b.addP(p, "squeeze_excite.expand.bias", x)
				b.addP(p, "projection.project_conv.weight", out, x, 1, 1)
				b.bn(p+"projection.project_bn", out)
			})
			k += bb.Depths[i]
		}
		b.addP(p0, "encoder.top_conv.weight", bb.Top, bb.Widths[len(bb.Widths)-1], 1, 1)
		b.bn(p0+"encoder.top_bn", bb.Top)
		if cls {
			b.linear("classifier", s.labels(), bb.Top, true)
		}
	case "swin":
		p0 := "swin."
		P, C := s.Image.Patch, bb.Stem
		if bb.AbsolutePositions {
			g := s.Image.Size / P
			b.addP(p0, "embeddings.position_embeddings", 1, g*g+1, C)
		}
		b.addP(p0, "embeddings.patch_embeddings.projection.weight", C, s.Image.Channels, P, P)
		b.addP(p0, "embeddings.patch_embeddings.projection.bias", C)
		b.normP(p0, "embeddings.norm", C, LayerNorm)
		rel := (2*bb.Window - 1) * (2*bb.Window - 1)
		for i, d := range bb.Widths {
			p := p0 + "encoder.layers." + itoa(int64(i)) + "."
			b.stack(bb.Depths[i], nil, func(j int64) {
				q := p + "blocks." + itoa(j) + "."
				b.normP(q, "layernorm_before", d, LayerNorm)
				b.addP(q, "attention.self.relative_position_bias_table", rel, bb.Heads[i])
				b.linearP(q, "attention.self.query", d, d, bb.QKVBias)
				b.linearP(q, "attention.self.key", d, d, bb.QKVBias)
				b.linearP(q, "attention.self.value", d, d, bb.QKVBias)
				b.linearP(q, "attention.output.dense", d, d, true)
				b.normP(q, "layernorm_after", d, LayerNorm)
				b.linearP(q, "intermediate.dense", bb.MLPRatio*d, d, true)
				b.linearP(q, "output.dense", d, bb.MLPRatio*d, true)
			})
			if i < len(bb.Widths)-1 {
				b.addP(p, "downsample.reduction.weight", 2*d, 4*d)
				b.normP(p, "downsample.norm", 4*d, LayerNorm)
			}
		}
		last := bb.Widths[len(bb.Widths)-1]
		b.normP(p0, "layernorm", last, LayerNorm)
		if cls {
			b.linear("classifier", s.labels(), last, true)
		}
	}
}

// se is an EfficientNet block's squeeze-excite width for in input
// channels: max(1, int(in·squeeze_expansion_ratio)).
func (bb *Backbone) se(in int64) int64 {
	return max(1, int64(float64(in)*bb.SERatio))
}

// backboneBlock numbers the blocks of a ResNet or ConvNeXt
// ("resnet.encoder.stages.S.layers.B.…") and of Swin
// ("swin.encoder.layers.S.blocks.B.…") across their stages, so that
// [Component] counts each block as one layer (stage·2^16 + block, from
// 2^16 on, apart from the numbers of single-index layers); Swin's patch
// merging after stage S ("swin.encoder.layers.S.downsample…") counts in
// the stage's first block. ok is false for any other name.
func backboneBlock(name string) (int, bool) {
	var rest, inner string
	switch {
	case strings.HasPrefix(name, "resnet.encoder.stages."):
		rest, inner = name[len("resnet.encoder.stages."):], "layers"
	case strings.HasPrefix(name, "convnext.encoder.stages."):
		rest, inner = name[len("convnext.encoder.stages."):], "layers"
	case strings.HasPrefix(name, "swin.encoder.layers."):
		rest, inner = name[len("swin.encoder.layers."):], "blocks"
	default:
		return 0, false
	}
	st, rest, _ := strings.Cut(rest, ".")
	stage, err := strconv.Atoi(st)
	if err != nil || stage < 0 || stage >= 1<<10 {
		return 0, false
	}
	block := 0
	if seg, after, _ := strings.Cut(rest, "."); seg == inner {
		b, _, _ := strings.Cut(after, ".")
		if block, err = strconv.Atoi(b); err != nil || block < 0 || block >= 1<<16 {
			return 0, false
		}
	}
	return (stage+1)<<16 | block, true
}
