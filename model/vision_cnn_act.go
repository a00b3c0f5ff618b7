package model

// # Activations of the hierarchical vision backbones
//
// Op by op, as activations.go does for transformer blocks: what autograd
// saves for backward in a training forward pass (PyTorch 2.x on CUDA,
// tools/autograd/derivatives.yaml), counted by storage, each storage in
// the first part of the model that saves it. N is the batch, e the
// compute dtype's bytes, a feature map of C channels and side H holds
// N·C·H² elements.
//
// ResNet (torchvision resnet.py and transformers modeling_resnet.py, see
// vision_cnn.go for the commits):
//
//   - a convolution saves its input (convolution_backward needs input and
//     weight); the weight is a parameter;
//   - BatchNorm in training (cudnn_batch_norm, or native_batch_norm) saves
//     its input and the per-channel save_mean and save_invstd, fp32 for
//     every input dtype (cuDNN keeps BN statistics in fp32), 8·C bytes;
//     its reserve space is empty for plain BN (no fused activation);
//   - ReLU saves its result (relu: threshold_backward(grad, result, 0)),
//     the in-place relu_ of torchvision (nn.ReLU(inplace=True)) the same
//     storage it overwrote, the BN output, which BN's backward does not
//     need. transformers' nn.ReLU() is out of place: it saves its own
//     result and the BN output is freed, so both save the same bytes;
//     only a forward transient of one feature map differs, which gpumem
//     does not count (torchvision's order is modelled);
//   - the residual add (out += identity, in place) saves nothing; the
//     shortcut's 1×1 convolution saves the block input, already saved by
//     the first convolution;
//   - max_pool2d_with_indices saves its input (the stem ReLU's result)
//     and the int64 indices, 8·N·C·H² bytes at the pooled side;
//   - adaptive_avg_pool2d to 1×1 runs as mean over the two spatial
//     dimensions (aten adaptive_avg_pool2d), which saves no input in
//     torch 2.x; the classifier saves the pooled N·C.
//
// A bottleneck block (input Cin at side H, width m = Cout/4, output Cout
// at side H' after the stride) saves e·N·(2·m·H² + 2·m·H'² + 2·Cout·H'²)
// plus e·N·Cout·H'² for the shortcut's BatchNorm input, and 8 bytes per
// BN channel; a basic block e·N·Cout·H'²·(4 + shortcut). The model's
// first block also saves its input, the max-pool output (no earlier op
// saves it).
//
// ConvNeXt (transformers modeling_convnext.py): the depthwise 7×7
// convolution saves the block input; LayerNorm (native_layer_norm) its
// input and fp32 mean and rstd per position (8 bytes); pwconv1 the
// LayerNorm output; GELU its input (N·4C·H²); pwconv2 the GELU output;
// the layer scale's mul the pwconv2 output (for the scale's gradient);
// the residual add nothing: e·N·H²·C·(11 + layer scale) + 8·N·H². The
// channels-first LayerNorm of the stem and of each downsampling layer is
// written in Python ops: pow saves x−u, sqrt its result (N·H²), div the
// second x−u, the weight's mul the normalised x: 3·e·N·C·H² + e·N·H²,
// and the 2×2 downsampling convolution its input. Mean pooling saves no
// input in torch 2.x (mean_backward needs sizes only), the final
// LayerNorm the pooled N·C.
//
// Swin (transformers modeling_swin.py, eager attention): layernorm_before
// saves the block input; the window partition (permute + contiguous, a
// copy when the windows are not the whole map, after torch.roll on
// shifted blocks) gives the tensor the query, key and value projections
// save; torch.matmul's reshape copies the transposed query and key views,
// and the value view, which bmm saves (3 copies); softmax saves the
// probabilities (windows·heads·w⁴ elements, w the window side, the
// relative position bias and the shifted-window mask added by ops that
// save nothing); the output projection saves the contiguous context;
// layernorm_after, intermediate.dense, GELU and output.dense save as
// in ViT; the final LayerNorm saves its input and statistics, the
// average pool (a mean) nothing. Padding to a multiple of the window follows maybe_pad, and a
// stage whose side is at most the window attends over the whole map
// without shift (set_shift_and_window_size). Patch merging saves the
// concatenated 4C map (LayerNorm input, 8 bytes per position) and the
// LayerNorm output. Drop path saves its per-sample mask (N elements)
// when drop_path_rate > 0.
//
// EfficientNet (transformers modeling_efficientnet.py): see mbconv. SiLU
// saves its input (silu_backward needs self), so each SiLU keeps the
// BatchNorm output beside the BatchNorm input; the stem's ZeroPad2d and
// each stride-2 depthwise convolution's padding make copies, which the
// convolutions save; the top's average pool (an avg_pool2d of kernel
// hidden_dim, not a mean) saves its input; training's nn.Dropout layers
// save 1-byte masks (native_dropout), per element of a later block's
// output and of the pooled features before the classifier.
//
// Inference (no graph) keeps a block's input and the largest set of maps
// alive at one op, following the Python variables of the forward (the
// block input stays referenced as the identity). Backward transients are
// two gradients of the block's largest map and the block input's
// gradient. Neither transient is measured by the oracle.
//
// Workspaces: cuDNN's convolution algorithms ask for a workspace that
// depends on the algorithm the benchmark or heuristic picks (PyTorch
// caps it by the free memory, aten/src/ATen/native/cudnn/Conv_v7.cpp);
// gpumem counts no convolution workspace beyond the job's cuBLAS
// workspace, since it is released after each call and its size is not
// determined by the shapes alone.
//
// What is verified: the per-block saved bytes, the stem, the final
// pooling and norm, and the head, against the CPU oracle
// (tools/oracle/backbones.py, the resnet, convnext, swin and
// efficientnet cases of testdata/oracle/backbones.json: 18 cases, 160
// figures, every one exact; TestBackboneOracle).
//
// FLOPs count the convolutions' and linear layers' multiply-adds (2 each)
// and Swin's two attention products; norms, activations and pooling are
// left out. Not modelled: tensor, sequence and
// context parallelism (refused), dropout inside Swin (its configs' 0).

import (
	"github.com/gpumem/gpumem"
)

// stageKinds names each stage's LayerActivations.Kind: its blocks
// ("stage1"), its first block when that differs ("stage1.first") and
// Swin's patch merging after it ("stage1.merge"); constants, so that
// Estimate allocates nothing for them.
var stageKinds = func() (k [16][3]string) {
	for i := range k {
		n := "stage" + itoa(int64(i+1))
		k[i] = [3]string{n, n + ".first", n + ".merge"}
	}
	return k
}()

// backboneSides returns the feature-map side after the stem and the
// side after each stage.
func (s Spec) backboneSides() (stem int64, sides [16]int64) {
	bb := s.Backbone
	S := s.Image.Size
	switch s.Family {
	case "resnet":
		stem = convOut(convOut(S, 7, 2, 3), 3, 2, 1)
		h := stem
		for i := range bb.Depths {
			if i > 0 || bb.DownsampleFirst {
				h = convOut(h, 3, 2, 1)
			}
			sides[i] = h
		}
	case "convnext":
		stem = S / s.Image.Patch
		h := stem
		for i := range bb.Depths {
			if i > 0 {
				h /= 2
			}
			sides[i] = h
		}
	case "efficientnet":
		stem = convOut(S+1, 3, 2, 0) // ZeroPad2d((0, 1, 0, 1)), then a valid 3×3/2
		h, k := stem, int64(0)
		for i := range bb.Depths {
			if bb.Strides[i] == 2 {
				h = convOut(h+bb.dwPad(k, bb.Kernels[i]), bb.Kernels[i], 2, 0)
			}
			sides[i] = h
			k += bb.Depths[i]
		}
	case "swin":
		stem = (S + s.Image.Patch - 1) / s.Image.Patch
		h := stem
		for i := range bb.Depths {
			if i > 0 {
				h = (h + 1) / 2
			}
			sides[i] = h
		}
	}
	return stem, sides
}

// backbone fills a for a ResNet, ConvNeXt or Swin over w.Batch images.
func (c *actCalc) backbone(a *Activations, s Spec, w Workload, e int64) {
	bb := s.Backbone
	N := w.Batch
	train := w.Train
	stem, sides := s.backboneSides()
	a.Tokens = 1
	in, h := bb.Stem, stem
	blockNo := int64(0) // EfficientNet's running block index
	if train {
		a.Embedding = gpumem.Bytes(c.m(e, N, s.Image.Channels, s.Image.Size, s.Image.Size)) // the stem convolution's input
	}
	var stemMap int64
	switch s.Family {
	case "resnet":
		h1 := convOut(s.Image.Size, 7, 2, 3)
		m1 := c.m(N, bb.Stem, h1, h1)
		stemMap = c.m(2, e, m1)
		if train {
			// BN input, ReLU result (the max-pool's input), BN
			// statistics, max-pool indices.
			a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), c.m(2, e, m1), c.m(8, bb.Stem), c.m(8, N, bb.Stem, h, h)))
		}
	case "efficientnet":
		m1 := c.m(N, bb.Stem, h, h)
		stemMap = c.m(2, e, m1)
		if train {
			// The padded pixels (the convolution's input), BN input and
			// statistics, SiLU's input.
			a.Embedding = gpumem.Bytes(c.a(c.m(e, N, s.Image.Channels, s.Image.Size+1, s.Image.Size+1), c.m(2, e, m1), c.m(8, bb.Stem)))
		}
	case "convnext", "swin":
		m0 := c.m(N, bb.Stem, h, h)
		stemMap = c.m(2, e, m0)
		if train {
			if s.Family == "convnext" {
				a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), c.cfNorm(e, N, bb.Stem, h)))
			} else {
				a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), c.m(e, m0), c.m(8, N, h, h)))
			}
		}
	}
	for i, out := range bb.Widths {
		d := bb.Depths[i]
		h2 := sides[i]
		kind, first, merge := stageKinds[i][0], stageKinds[i][1], stageKinds[i][2]
		switch s.Family {
		case "resnet":
			c.place(a, w, "", first, h2*h2, c.resnetBlock(s, e, N, in, out, h, h2, i == 0), 1, train)
			if d > 1 {
				rest := c.resnetBlock(s, e, N, out, out, h2, h2, false)
				c.place(a, w, "", kind, h2*h2, rest, d-1, train)
			}
		case "convnext":
			if i > 0 {
				// The downsampling layer (channels-first LayerNorm and
				// the 2×2 convolution's input) opens the stage's first
				// block.
				b0 := c.convnextBlock(s, w, e, N, out, h2)
				down := c.a(c.cfNorm(e, N, in, h), c.m(e, N, in, h, h))
				b0.saved = c.a(b0.saved, down)
				b0.input = c.m(e, N, in, h, h)
				b0.flops = c.a(b0.flops, c.m(2, N, 4, in, out, h2, h2))
				b0.noGrad = actMax(b0.noGrad, c.m(3, e, N, in, h, h))
				c.place(a, w, "", first, h2*h2, b0, 1, train)
				if d > 1 {
					c.place(a, w, "", kind, h2*h2, c.convnextBlock(s, w, e, N, out, h2), d-1, train)
				}
			} else {
				c.place(a, w, "", kind, h2*h2, c.convnextBlock(s, w, e, N, out, h2), d, train)
			}
		case "swin":
			c.swinStage(a, s, w, e, N, i, h2, kind, merge)
		case "efficientnet":
			c.place(a, w, "", first, h2*h2, c.mbconv(s, e, N, bb.Inputs[i], out, i, h, h2, blockNo, false), 1, train)
			if d > 1 {
				c.place(a, w, "", kind, h2*h2, c.mbconv(s, e, N, out, out, i, h2, h2, blockNo+1, true), d-1, train)
			}
			blockNo += d
		}
		in, h = out, h2
	}
	C := bb.Widths[len(bb.Widths)-1]
	if s.Family == "efficientnet" {
		// top_conv saves the last block's output; top_bn its input and
		// statistics; SiLU its input; the average pool its input.
		if train {
			a.FinalNorm = gpumem.Bytes(c.a(c.m(e, N, C, h, h), c.m(3, e, N, bb.Top, h, h), c.m(8, bb.Top)))
		}
		C = bb.Top
	}
	// Forward FLOPs (2 per multiply-add of the convolutions and linear
	// layers): the stem and classifier, then the blocks.
	var flops int64
	switch s.Family {
	case "resnet":
		h1 := convOut(s.Image.Size, 7, 2, 3)
		flops = c.m(2, N, bb.Stem, s.Image.Channels, 49, h1, h1)
	case "efficientnet":
		last := bb.Widths[len(bb.Widths)-1]
		flops = c.a(c.m(2, N, bb.Stem, s.Image.Channels, 9, stem, stem), c.m(2, N, last, bb.Top, h, h))
	default:
		P := s.Image.Patch
		flops = c.m(2, N, bb.Stem, s.Image.Channels, P, P, stem, stem)
	}
	if s.Head == HeadImageCls {
		flops = c.a(flops, c.m(2, N, C, s.labels()))
	}
	for _, l := range c.layers() {
		flops = c.a(flops, c.m(l.FLOPs, l.Count))
	}
	a.FLOPs = flops
	if train {
		switch s.Family {
		case "convnext":
			// Mean pooling saves nothing; LayerNorm saves the pooled N·C.
			a.FinalNorm = gpumem.Bytes(c.a(c.m(e, N, C), c.m(8, N)))
		case "swin":
			// swin.layernorm (input, statistics); the average pool to
			// one position is a mean, which saves no input.
			a.FinalNorm = gpumem.Bytes(c.a(c.m(e, N, C, h, h), c.m(8, N, h, h)))
		}
	}
	if s.Head == HeadImageCls {
		// The classifier saves its input, the pooled N·C (ResNet) or the
		// final LayerNorm's output; CrossEntropyLoss on the logits as
		// they are (the classes' own loss, no upcast): log_softmax saves
		// its N·L result, nll_loss the labels and its 0-dim total_weight
		// in the logits' dtype.
		L := s.labels()
		a.Logits = gpumem.Bytes(c.m(e, N, L))
		if train {
			a.Head = gpumem.Bytes(c.a(c.m(e, N, C), c.m(e, N, L), e))
			if bb.HeadDropout {
				a.Head = gpumem.Bytes(c.a(int64(a.Head), c.m(N, C))) // native_dropout's 1-byte mask
			}
			a.TokenIDs = gpumem.Bytes(c.m(8, N))
			a.LossGrad = gpumem.Bytes(c.m(2, e, N, L))
		}
	}
	c.finish(a, w)
	if !train {
		a.Forward = gpumem.Bytes(actMax(int64(a.Forward), stemMap))
	}
}

// cfNorm is what ConvNeXt's channels-first LayerNorm saves over an N·C·H²
// map: x−u (pow), x−u again (div), the normalised map (the weight's mul),
// and sqrt's N·H² result.
func (c *actCalc) cfNorm(e, N, C, H int64) int64 {
	return c.a(c.m(3, e, N, C, H, H), c.m(e, N, H, H))
}

// resnetBlock is one ResNet block from cin channels at side h to cout at
// side h2; withInput adds the block input (the model's first block,
// whose input the max-pool does not save).
func (c *actCalc) resnetBlock(s Spec, e, N, cin, cout, h, h2 int64, withInput bool) actCost {
	bb := s.Backbone
	shortcut := cin != cout || h != h2
	x := c.m(e, N, cin, h, h)
	o := c.m(e, N, cout, h2, h2)
	var x2 actCost
	if bb.Bottleneck {
		m := cout / 4
		a1 := c.m(e, N, m, h, h)   // conv1 output at the input side
		a2 := c.m(e, N, m, h2, h2) // conv2 output after the stride
		x2.saved = c.a(c.m(2, a1), c.m(2, a2), c.m(2, o), c.m(8, c.a(m, m, cout)))
		x2.flops = c.m(2, N, c.a(c.m(cin, m, h, h), c.m(9, m, m, h2, h2), c.m(m, cout, h2, h2)))
		// Inference: the block input (the identity) and the largest
		// adjacent pair of maps, the shortcut's pair beside the main
		// branch's output.
		x2.noGrad = c.a(x, actMax(c.m(2, a1), c.a(a1, a2), c.m(2, a2), c.a(a2, o), c.m(2, o)))
		x2.bwd = c.a(x, c.m(2, actMax(a1, o)))
	} else {
		x2.saved = c.a(c.m(4, o), c.m(16, cout))
		x2.flops = c.m(2, N, 9, c.a(c.m(cin, cout, h2, h2), c.m(cout, cout, h2, h2)))
		x2.noGrad = c.a(x, c.m(2, o))
		x2.bwd = c.a(x, c.m(2, o))
	}
	if shortcut {
		x2.saved = c.a(x2.saved, o, c.m(8, cout))
		x2.flops = c.a(x2.flops, c.m(2, N, cin, cout, h2, h2))
		x2.noGrad = actMax(x2.noGrad, c.a(x, c.m(3, o)))
	}
	if withInput {
		x2.saved = c.a(x2.saved, x)
	}
	x2.input = x
	return x2
}

// convnextBlock is one ConvNextLayer of C channels at side h.
func (c *actCalc) convnextBlock(s Spec, w Workload, e, N, C, h int64) actCost {
	bb := s.Backbone
	T := c.m(N, h, h)
	x := c.m(e, T, C)
	k := int64(11)
	if bb.LayerScale {
		k++
	}
	var r actCost
	r.saved = c.a(c.m(k, x), c.m(8, T))
	if bb.DropPath {
		r.saved = c.a(r.saved, c.m(e, N))
	}
	r.input = x
	r.flops = c.m(2, T, c.a(c.m(49, C), c.m(8, C, C)))
	r.noGrad = c.m(9, x) // the input, pwconv1's output and GELU's
	r.bwd = c.m(9, x)    // GELU's two 4C gradients and the input's
	return r
}

// swinStage places the blocks of Swin stage i (side h) and the patch
// merging after it.
func (c *actCalc) swinStage(a *Activations, s Spec, w Workload, e, N int64, i int, h int64, kind, merge string) {
	bb := s.Backbone
	C, heads, r := bb.Widths[i], bb.Heads[i], bb.MLPRatio
	win, shift := bb.Window, bb.Window/2
	if h <= win {
		win, shift = h, 0
	}
	hp := (h + win - 1) / win * win // maybe_pad
	nW := c.m(N, hp/win, hp/win)    // windows
	T := c.m(N, h, h)
	Tw := c.m(nW, win, win)
	S := c.m(nW, heads, win, win, win, win) // scores per block
	x := c.m(e, T, C)
	xw := c.m(e, Tw, C)
	block := func() actCost {
		var b actCost
		attn := c.a(c.m(3, xw), c.m(e, S)) // q, k, v copies and the probabilities
		b.saved = c.a(x, c.m(8, T), xw, attn, xw, x, c.m(8, T), x, c.m(2, r, x))
		if bb.DropPath {
			b.saved = c.a(b.saved, c.m(e, N))
		}
		b.attn = attn
		b.input = x
		b.attnFlops = c.m(4, Tw, win, win, C) // q·kᵀ and p·v
		b.flops = c.a(c.m(2, T, C, C, 4+2*r), b.attnFlops)
		// Forward transients beside the saved tensors: the q/k/v
		// projections' outputs (held by the attention's locals) and the
		// scaled and biased scores before softmax.
		b.fwd = c.a(c.m(3, xw), c.m(2, e, S))
		b.noGrad = actMax(c.a(x, x, xw, xw, c.m(3, xw), c.m(2, e, S)), c.m(2, c.a(x, c.m(r, x))))
		b.bwd = c.a(c.m(2, e, S), c.m(3, xw))
		return b
	}
	_ = shift // a shifted block's roll copy is a transient of the same size as the windows
	c.place(a, w, "", kind, h*h, block(), bb.Depths[i], w.Train)
	if i < len(bb.Widths)-1 {
		h2 := (h + 1) / 2
		T2 := c.m(N, h2, h2)
		var m actCost
		m.saved = c.a(c.m(2, e, T2, 4*C), c.m(8, T2))
		m.input = x
		m.flops = c.m(2, T2, 4*C, 2*C)
		m.noGrad = c.a(x, c.m(2, e, T2, 4*C))
		m.bwd = c.m(2, e, T2, 4*C)
		c.place(a, w, "", merge, h2*h2, m, 1, w.Train)
	}
}

// checkBackboneWorkload refuses what the backbones' activation model does
// not cover.
func (w Workload) checkBackbone(s Spec) error {
	switch {
	case w.TensorParallel > 1:
		return gpumem.Errorf("Workload.TensorParallel", w.TensorParallel, gpumem.ErrUnsupported, "%s has no tensor-parallel layout modelled", s.Family)
	case w.SequenceParallel:
		return gpumem.Errorf("Workload.SequenceParallel", true, gpumem.ErrUnsupported, "%s has no sequence parallelism", s.Family)
	case w.ContextParallel > 1:
		return gpumem.Errorf("Workload.ContextParallel", w.ContextParallel, gpumem.ErrUnsupported, "%s has no context parallelism", s.Family)
	case w.Dropout:
		return gpumem.Errorf("Workload.Dropout", true, gpumem.ErrUnsupported, "%s's dropout is not modelled (its published configs use none)", s.Family)
	case w.Images > 0:
		return gpumem.Errorf("Workload.Images", w.Images, gpumem.ErrUnsupported, "%s takes Batch images, not images per sequence", s.Family)
	case w.Attention != Eager && s.Family == "swin":
		return gpumem.Errorf("Workload.Attention", w.Attention.String(), gpumem.ErrUnsupported, "transformers' Swin runs eager attention only")
	case w.Loss.Kind != FullLoss:
		return gpumem.Errorf("Workload.Loss", w.Loss.Kind, gpumem.ErrUnsupported, "%s's classifier takes the plain loss", s.Family)
	case w.LogitsToKeep > 0:
		return gpumem.Errorf("Workload.LogitsToKeep", w.LogitsToKeep, gpumem.ErrUnsupported, "%s has one logit row per image", s.Family)
	}
	return nil
}

// dwPad is the total padding EfficientNet puts around a stride-2
// depthwise convolution of kernel k in block number blk (correct_pad:
// k/2−1 and k/2 with adjust_padding, k/2 on both sides for the blocks
// depthwise_padding lists).
func (bb *Backbone) dwPad(blk, k int64) int64 {
	for _, n := range bb.NoAdjust {
		if n == blk {
			return 2 * (k / 2)
		}
	}
	return 2*(k/2) - 1
}

// mbconv is one EfficientNetBlock of stage i from in channels at side h
// to out at side h2 (transformers modeling_efficientnet.py at commit
// 03569cc9f4a87c3337cac6e33d3cbb086f5165e3): the expansion's 1×1
// convolution saves the block input, its BatchNorm its input and
// statistics, SiLU its input; the depthwise convolution its input (the
// zero-padded copy at stride 2), its BatchNorm and SiLU as before; the
// squeeze-excite's mean saves nothing, its convolutions their N·C and
// N·se inputs, SiLU its input, sigmoid its result, the multiply the
// depthwise SiLU's output; the projection's convolution the product, its
// BatchNorm its input and statistics. Blocks after a stage's first add
// the residual after nn.Dropout(drop_connect_rate·k/n), whose CUDA kernel
// (native_dropout) saves a 1-byte mask.
func (c *actCalc) mbconv(s Spec, e, N, in, out int64, i int, h, h2, blk int64, rest bool) actCost {
	bb := s.Backbone
	r, k := bb.Expand[i], bb.Kernels[i]
	x := in * r
	se := bb.se(in)
	var m actCost
	var saved, stats int64
	if r != 1 {
		saved = c.a(c.m(in, h, h), c.m(2, x, h, h))
		stats = c.a(stats, x)
	}
	if h2 != h || (bb.Strides[i] == 2 && !rest) {
		hp := h + bb.dwPad(blk, k)
		saved = c.a(saved, c.m(x, hp, hp))
	} else {
		saved = c.a(saved, c.m(x, h, h))
	}
	saved = c.a(saved, c.m(4, x, h2, h2), c.m(out, h2, h2), c.m(2, c.a(x, se)))
	stats = c.a(stats, x, out)
	m.saved = c.a(c.m(e, N, saved), c.m(8, stats))
	if rest && bb.DropPath {
		m.saved = c.a(m.saved, c.m(N, out, h2, h2))
	}
	m.input = c.m(e, N, in, h, h)
	m.flops = c.m(2, N, c.a(c.m(in, x, h, h)*actB2i(r != 1), c.m(x, k, k, h2, h2), c.m(2, x, se), c.m(x, out, h2, h2)))
	m.noGrad = c.a(m.input, c.m(2, e, N, x, h, h), c.m(e, N, x, h2, h2))
	m.bwd = c.a(m.input, c.m(2, e, N, x, h, h))
	return m
}
