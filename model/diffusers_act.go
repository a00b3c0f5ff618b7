package model

// # Activations of diffusers UNets and VAEs
//
// The op sequences are diffusers 0.40.0.dev0 (commit 58eb52c0):
// ResnetBlock2D.forward (models/resnet.py), Transformer2DModel with
// BasicTransformerBlock (models/transformers/transformer_2d.py,
// models/attention.py), GEGLU (models/activations.py), AttnProcessor2_0
// (torch's scaled_dot_product_attention, the default on torch 2) and
// AttnProcessor (the eager baddbmm/softmax/bmm path, Attention.
// get_attention_scores), Downsample2D and Upsample2D, and the
// UNet2DConditionModel, Encoder and Decoder forwards. As in
// activations.go, a training pass counts what autograd saves, by
// storage: a view counts with its base, and a tensor saved by several
// ops once.
//
// Under torch.autocast (the scripts' accelerate mixed_precision fp16 or
// bf16), group_norm and layer_norm are fp32 ops and linear and conv2d
// 16-bit ops (aten/src/ATen/autocast_mode.cpp): each norm saves an fp32
// copy of its 16-bit input and returns fp32, and each linear or
// convolution fed an fp32 tensor saves its own 16-bit cast of it (only
// leaf weights' casts are cached), so to_q, to_k and to_v of
// self-attention save three copies of the normed hidden states. PEFT's
// LoRA Linear (peft/tuners/lora/layer.py) runs lora_A on its own cast of
// the input and lora_B on the rank-r product.
//
// Gradient checkpointing is diffusers' enable_gradient_checkpointing:
// torch.utils.checkpoint with use_reentrant=False around each
// ResnetBlock2D and each BasicTransformerBlock, which then keep only
// their inputs; group norms, projections, samplers and the stem and
// head convolutions outside them save as usual.
//
// Inference (no gradients) keeps the down path's outputs for the skip
// connections until the up block that concatenates them; the peak is
// that list, the hidden state and the largest module's temporaries
// (the local variables each forward keeps alive, as the code binds
// them).
//
// Not modelled: cuDNN convolution workspaces (chosen per algorithm at
// run time), the time and text-time embeddings (B × 1280 elements), and
// the backward pass's exact order: the backward transient is two
// gradients of the largest tensor of a checkpointed unit (GEGLU's 8·C
// projection, or the eager attention matrix) plus, under checkpointing,
// the recomputed unit's saved tensors. No CPU oracle covers these
// kernels; the figures are checked against published measurements
// (testdata/published, cmd/gpumem/internal/accuracy).

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// DiffusionWorkload is one pass of a diffusers UNet or VAE.
type DiffusionWorkload struct {
	// Batch is the samples in one pass. A classifier-free-guided
	// inference step runs the UNet on twice the images
	// (torch.cat([latents] * 2) in the Stable Diffusion pipelines).
	Batch int64
	// Height and Width are the input in pixels: the latent for a UNet
	// and for a VAE decode, the image for a VAE encode.
	Height, Width int64
	// TextTokens is the cross-attention's key length (77, CLIP's
	// model_max_length); zero means 77.
	TextTokens int64
	// DType is the compute dtype of the activations.
	DType gpumem.DType
	// Autocast runs the pass under torch.autocast (norms in fp32, a
	// fresh 16-bit cast per linear and convolution input).
	Autocast bool
	// Attention is the attention processor: Eager is AttnProcessor,
	// SDPA and Flash AttnProcessor2_0.
	Attention Attention
	// Upcast is the UNet's upcast_attention (SD 2.x): the eager path
	// computes scores and softmax in fp32.
	Upcast bool
	// Train saves tensors for backward; Checkpointing is
	// enable_gradient_checkpointing.
	Train, Checkpointing bool
	// Decode runs a VAE's decoder (Height, Width are the latent's);
	// false runs its encoder (the image's).
	Decode bool
	// LoRARank is the rank of LoRA adapters on to_q, to_k, to_v and
	// to_out.0 (diffusers' LoRA scripts); zero: none.
	LoRARank int64
	// LoRATargets are the adapters' target_modules in an MMDiT
	// transformer, matched as PEFT matches a list; nil: the DreamBooth
	// LoRA scripts' defaults (MMDiTActivations).
	LoRATargets []string

	cpuLSE bool // the CPU oracle: SDPA's logsumexp rows unpadded
}

// DiffusionActivations are the activation figures of one pass.
type DiffusionActivations struct {
	// Saved is what a training pass keeps for backward at the end of
	// forward.
	Saved gpumem.Bytes
	// Forward is the pass's forward peak of activations: in training,
	// everything saved so far plus the live temporaries; in inference,
	// the skip connections, the hidden state and the temporaries.
	Forward gpumem.Bytes
	// Backward is the largest backward transient on top of the saved
	// tensors (training only).
	Backward gpumem.Bytes
	// Output is the pass's output (the noise prediction, or the
	// decoded images), alive after the pass.
	Output gpumem.Bytes
}

// diffWalk accumulates one pass; sizes are in elements times bytes.
type diffWalk struct {
	w          DiffusionWorkload
	e, f       int64 // compute and norm-output element sizes
	saved      int64
	live       int64 // inference: skip connections held
	peak       int64 // the forward peak
	bwd        int64
	ok         bool
	groups     int64
	crossSaved bool
}

func (d *diffWalk) m(xs ...int64) int64 {
	p, ok := checked.MulAll(xs...)
	if !ok || p > 1<<62 {
		d.ok = false
		return 0
	}
	return p
}

// note records a forward moment: saved so far (training) or the skip
// list (inference) plus extra live bytes.
func (d *diffWalk) note(extra int64) {
	base := d.live
	if d.w.Train {
		base = d.saved
	}
	if v, ok := checked.Add(base, extra); ok {
		d.peak = max(d.peak, v)
	} else {
		d.ok = false
	}
}

func (d *diffWalk) save(b int64) {
	if v, ok := checked.Add(d.saved, b); ok {
		d.saved = v
	} else {
		d.ok = false
	}
}

// unitBackward records a checkpointable unit's backward transient:
// its recomputed saved bytes under checkpointing and two gradients of
// its largest tensor.
func (d *diffWalk) unitBackward(unitSaved, largest int64) {
	t := 2 * largest
	if d.w.Checkpointing {
		t += unitSaved
	}
	d.bwd = max(d.bwd, t)
}

// resnet is ResnetBlock2D(ci → co) over n = B·H·W positions; held
// says the input is already counted among the live tensors (inference:
// a skip connection, or the up blocks' concatenation).
func (d *diffWalk) resnet(ci, co, n int64, held bool) {
	e, f := d.e, d.f
	if d.w.Train {
		var s int64
		if d.w.Autocast {
			// norm1's fp32 cast, SiLU's saved input, conv1's 16-bit cast;
			// the same after conv1; conv_shortcut's input.
			s = d.m(2*f+e, ci, n) + d.m(2*f+e, co, n)
			if ci != co {
				s += d.m(e, ci, n)
			}
		} else {
			// norm1 saves the input (shared with conv_shortcut), SiLU the
			// norm's output, conv1 SiLU's; the same after conv1.
			s = d.m(3*e, ci+co, n)
		}
		s += 2 * d.m(16, d.w.Batch, d.groups) // mean and rstd, fp32
		if d.w.Checkpointing {
			d.note(s + d.m(e, co, n))
			d.unitBackward(s, d.m(max(f, e), max(ci, co), n))
			d.save(d.m(e, ci, n)) // the unit's input
			return
		}
		d.note(d.m(e, co, n))
		d.save(s)
		d.unitBackward(s, d.m(max(f, e), max(ci, co), n))
		return
	}
	// Inference: the input stays alive (the caller's hidden_states)
	// beside norm1's and SiLU's outputs, then conv1's input and output,
	// and at the end conv_shortcut's output, the second conv's, their
	// sum and its division by output_scale_factor.
	end := 3 * co
	if ci != co {
		end += co
	}
	x := int64(0)
	if !held {
		x = d.m(e, ci, n)
	}
	d.note(x + d.m(e, n, max(2*ci, ci+co, end)))
}

// attention adds one attention over sq queries and sk keys per sample
// (self: sk = sq) of c channels, and returns its saved bytes (training)
// and its live temporaries (inference) beyond its q/k/v inputs.
func (d *diffWalk) attention(c, sq, sk, heads int64, self bool) (saved, live int64) {
	e, B := d.e, d.w.Batch
	nq, nk := d.m(B, sq, c), d.m(B, sk, c)
	eager := d.w.Attention == Eager
	scores := d.m(B, heads, sq, sk)
	if d.w.Train {
		if eager {
			// head_to_batch_dim copies of q, k, v (fp32 q and k when
			// upcast), probabilities saved by softmax and bmm, the
			// output's batch_to_head_dim copy.
			qk := e
			if d.w.Upcast {
				qk = 4
			}
			saved = d.m(qk, nq) + d.m(qk, nk) + d.m(e, nk) + d.m(e, nq)
			if d.w.Upcast {
				saved += d.m(4+e, scores)
			} else {
				saved += d.m(e, scores)
			}
			return saved, 0
		}
		// q, k, v and the output of SDPA, its fp32 logsumexp (rows
		// padded to 32), and the output's transpose-reshape copy.
		lse := d.m(4, B, heads, (sq+31)/32*32)
		saved = d.m(e, nq) + 2*d.m(e, nk) + d.m(e, nq) + lse + d.m(e, nq)
		return saved, 0
	}
	// Inference: q, k, v, the output and its copy alive together.
	live = d.m(e, nq) + 2*d.m(e, nk) + 2*d.m(e, nq)
	if eager {
		se := e
		if d.w.Upcast {
			se = 4
		}
		// baddbmm's empty input and its output, then the scores and
		// softmax's output (and its 16-bit cast when upcast).
		live = d.m(e, nq) + 2*d.m(e, nk) + d.m(2*se, scores)
		if d.w.Upcast {
			live += d.m(2*se, nq+nk)
		}
	}
	return 0, live
}

// transformer is Transformer2DModel over c channels at s positions per
// sample, with layers BasicTransformerBlocks and cross-attention to the
// text (cross features).
func (d *diffWalk) transformer(c, s, layers, heads, cross int64) {
	e, f, B := d.e, d.f, d.w.Batch
	n := d.m(B, s)
	cn := d.m(c, n)
	L := d.w.TextTokens
	nt := d.m(B, L)
	r := d.w.LoRARank
	if d.w.Train {
		// GroupNorm (its fp32 cast, or its input) and proj_in's input.
		gn := d.m(f, cn) + d.m(16, B, d.groups)
		d.save(gn + d.m(e, cn))
		castIn := int64(1)
		if d.w.Autocast {
			castIn = 3 // to_q, to_k, to_v each cast the normed states
		}
		selfSaved, _ := d.attention(c, s, s, heads, true)
		crossSaved, _ := d.attention(c, s, L, heads, false)
		// Three LayerNorms (the fp32 cast or the input, and the fp32
		// mean and rstd per token); self-attention's inputs and saved
		// tensors; cross-attention's to_q input and saved tensors; GEGLU:
		// proj's input, its 8c output (the halves gelu and mul save),
		// gelu's output, net.2's input.
		blk := 3*(d.m(f, cn)+d.m(8, n)) + d.m(e*castIn, cn) + selfSaved +
			d.m(e, cn) + crossSaved +
			d.m(e, cn) + d.m(8*e, cn) + d.m(4*e, cn) + d.m(4*e, cn)
		if r > 0 {
			// LoRA on to_q, to_k, to_v, to_out.0 of both attentions:
			// lora_A's input cast and lora_B's rank-r input.
			self := 4 * (d.m(e, cn) + d.m(e, r, n))
			crossq := 2 * (d.m(e, cn) + d.m(e, r, n))
			crosskv := 2 * (d.m(e, cross, nt) + d.m(e, r, nt))
			blk += self + crossq + crosskv
		}
		largest := d.m(8*e, cn)
		if d.w.Attention == Eager {
			largest = max(largest, d.m(max(e, 4), B, heads, s, s))
		}
		for i := int64(0); i < layers; i++ {
			if d.w.Checkpointing {
				d.note(blk)
				d.unitBackward(blk, largest)
				d.save(d.m(e, cn))
				continue
			}
			d.note(d.m(e, cn))
			d.save(blk)
			d.unitBackward(blk, largest)
		}
		if !d.crossSaved {
			d.save(d.m(e, cross, nt)) // the text states, shared by every block
			d.crossSaved = true
		}
		d.save(d.m(e, cn)) // proj_out's input
		return
	}
	// Inference: the Transformer2DModel's residual input is in d.live's
	// caller; the hidden state, the block's norm output and the largest
	// of self-attention, cross-attention and the GEGLU (8c projection,
	// 4c gelu, 4c product).
	_, sa := d.attention(c, s, s, heads, true)
	_, ca := d.attention(c, s, L, heads, false)
	ff := d.m(16*e, cn)
	d.note(2*d.m(e, cn) + d.m(e, cn) + max(sa, ca, ff))
}

// hold adds b to the skip connections held (inference).
func (d *diffWalk) hold(b int64) {
	if v, ok := checked.Add(d.live, b); ok {
		d.live = v
	} else {
		d.ok = false
	}
}

// UNetActivations returns the activations of one UNet2DConditionModel
// pass of w over a UNet Spec.
func (s Spec) UNetActivations(w DiffusionWorkload) (DiffusionActivations, error) {
	if layoutOf(&s) != layoutUNet || s.UNet == nil {
		return DiffusionActivations{}, gpumem.Errorf("Spec.Family", s.Family, gpumem.ErrInvalid, "not a %s", FamilyUNet)
	}
	d, err := newDiffWalk(s, w)
	if err != nil {
		return DiffusionActivations{}, err
	}
	u := s.UNet
	n := len(u.Channels)
	H, W, B := w.Height, w.Width, w.Batch
	e := d.e
	c0 := u.Channels[0]
	d.stem(u.In, c0, d.m(B, H, W))
	// The skip connections: conv_in's output, then every resnet or
	// attention output and every downsampler output.
	var skips []int64 // bytes of each, in order
	hold := func(b int64) {
		skips = append(skips, b)
		if !w.Train {
			d.hold(b)
		}
	}
	hold(d.m(e, c0, B, H, W))
	out := c0
	h, wd := H, W
	for i := 0; i < n; i++ {
		in := out
		out = u.Channels[i]
		np := d.m(B, h, wd)
		for j := int64(0); j < u.LayersPerBlock[i]; j++ {
			ci := out
			if j == 0 {
				ci = in
			}
			d.resnet(ci, out, np, true)
			if u.Cross[i] {
				d.transformer(out, d.m(h, wd), u.TransformerLayers[i], u.Heads[i], u.CrossDim[i])
			}
			hold(d.m(e, out, np))
		}
		if i < n-1 {
			if w.Train {
				d.save(d.m(e, out, np)) // Downsample2D's conv input
			} else {
				d.note(d.m(e, out, np) + d.m(e, out, (h+1)/2, (wd+1)/2))
			}
			h, wd = (h+1)/2, (wd+1)/2
			hold(d.m(e, out, B, h, wd))
		}
	}
	cl := u.Channels[n-1]
	if u.MidBlock {
		np := d.m(B, h, wd)
		d.resnet(cl, cl, np, true)
		d.transformer(cl, d.m(h, wd), u.TransformerLayers[n-1], u.Heads[n-1], u.CrossDim[n-1])
		d.resnet(cl, cl, np, false)
	}
	out = cl
	for i := 0; i < n; i++ {
		prev := out
		lv := u.upLevel(i)
		out = u.Channels[lv]
		layers := u.LayersPerBlock[lv] + 1
		np := d.m(B, h, wd)
		for j := int64(0); j < layers; j++ {
			cs := int64(0)
			if len(skips) > 0 {
				last := skips[len(skips)-1]
				skips = skips[:len(skips)-1]
				cs = last / max(d.m(e, np), 1)
				if !w.Train {
					// torch.cat of the hidden state and the popped skip,
					// which stays bound (res_hidden_states) beside the
					// concatenation during the resnet.
					d.live -= last
					cat := d.m(e, prev+cs, np)
					d.note(d.m(e, prev, np) + last + cat)
					d.hold(last + cat)
					d.resnet(prev+cs, out, np, true)
					d.live -= last + cat
				} else {
					d.resnet(prev+cs, out, np, true)
				}
			}
			prev = out
			if u.UpCross[i] {
				d.transformer(out, d.m(h, wd), u.UpTransformerLayers[i], u.Heads[lv], u.CrossDim[lv])
			}
		}
		if i < n-1 {
			h, wd = h*2, wd*2
			up := d.m(e, out, B, h, wd)
			if w.Train {
				d.save(up) // the interpolated input of Upsample2D's conv
			} else {
				d.note(2 * up)
			}
		}
	}
	d.head(c0, u.Out, d.m(B, H, W))
	return d.result(d.m(e, u.Out, B, H, W))
}

// VAEActivations returns the activations of an AutoencoderKL's decoder
// (w.Decode) or encoder pass without gradients: the VAEs are frozen in
// every pipeline and script gpumem models.
func (s Spec) VAEActivations(w DiffusionWorkload) (DiffusionActivations, error) {
	if layoutOf(&s) != layoutVAE || s.UNet == nil {
		return DiffusionActivations{}, gpumem.Errorf("Spec.Family", s.Family, gpumem.ErrInvalid, "not a %s", FamilyVAE)
	}
	w.Train, w.Checkpointing, w.LoRARank = false, false, 0
	d, err := newDiffWalk(s, w)
	if err != nil {
		return DiffusionActivations{}, err
	}
	u := s.UNet
	n := len(u.Channels)
	e, B := d.e, w.Batch
	c0, cl := u.Channels[0], u.Channels[n-1]
	h, wd := w.Height, w.Width
	mid := func(np int64) {
		d.resnet(cl, cl, np, false)
		if u.MidBlock {
			// Attention(cl, heads=1) with its group_norm, the residual
			// kept, over h·w tokens.
			// The residual input and the group_norm's output beside
			// q, k, v, the output and its copy.
			_, l := d.attention(cl, d.m(h, wd), d.m(h, wd), 1, true)
			d.note(2*d.m(e, cl, np) + l)
		}
		d.resnet(cl, cl, np, false)
	}
	if w.Decode {
		np := d.m(B, h, wd)
		d.note(d.m(e, u.Latent, np) + d.m(e, cl, np))
		mid(np)
		out := cl
		for i := 0; i < n; i++ {
			prev := out
			out = u.Channels[u.upLevel(i)]
			np = d.m(B, h, wd)
			for j := int64(0); j <= u.LayersPerBlock[u.upLevel(i)]; j++ {
				ci := out
				if j == 0 {
					ci = prev
				}
				d.resnet(ci, out, np, false)
			}
			if i < n-1 {
				h, wd = h*2, wd*2
				d.note(d.m(e, out, np) + 2*d.m(e, out, B, h, wd))
			}
		}
		np = d.m(B, h, wd)
		d.note(d.m(e, c0, np) * 3)
		return d.result(d.m(e, u.Out, np))
	}
	np := d.m(B, h, wd)
	d.note(d.m(e, u.In, np) + d.m(e, c0, np))
	out := c0
	for i := 0; i < n; i++ {
		in := out
		out = u.Channels[i]
		np = d.m(B, h, wd)
		for j := int64(0); j < u.LayersPerBlock[i]; j++ {
			ci := out
			if j == 0 {
				ci = in
			}
			d.resnet(ci, out, np, false)
		}
		if i < n-1 {
			// Downsample2D pads (0, 1, 0, 1) before its stride-2 conv.
			d.note(2*d.m(e, out, np) + d.m(e, out, B, (h+1)/2, (wd+1)/2))
			h, wd = (h+1)/2, (wd+1)/2
		}
	}
	np = d.m(B, h, wd)
	mid(np)
	d.note(d.m(e, cl, np)*3 + d.m(e, 2*u.Latent, np))
	return d.result(d.m(e, 2*u.Latent, np))
}

func newDiffWalk(s Spec, w DiffusionWorkload) (*diffWalk, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Batch", w.Batch}, {"Height", w.Height}, {"Width", w.Width}} {
		if f.v < 1 || f.v > 1<<20 {
			return nil, gpumem.Errorf("DiffusionWorkload."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, 2^20]")
		}
	}
	if w.TextTokens < 0 || w.TextTokens > 1<<20 {
		return nil, gpumem.Errorf("DiffusionWorkload.TextTokens", w.TextTokens, gpumem.ErrInvalid, "must be in [0, 2^20]")
	}
	if w.TextTokens == 0 {
		w.TextTokens = 77
	}
	if w.LoRARank < 0 || w.LoRARank > 1<<20 {
		return nil, gpumem.Errorf("DiffusionWorkload.LoRARank", w.LoRARank, gpumem.ErrInvalid, "must be in [0, 2^20]")
	}
	if !w.DType.IsFloat() || w.DType.Bits() < 16 {
		return nil, gpumem.Errorf("DiffusionWorkload.DType", w.DType, gpumem.ErrInvalid, "want a 16- or 32-bit float compute dtype")
	}
	e := int64(w.DType.Bits() / 8)
	d := &diffWalk{w: w, e: e, f: e, ok: true, groups: s.UNet.Groups}
	if w.Autocast {
		d.f = 4
	}
	return d, nil
}

// stem is conv_in over the latent (saved input in training).
func (d *diffWalk) stem(in, c0, n int64) {
	if d.w.Train {
		d.save(d.m(d.e, in, n))
		return
	}
	d.note(d.m(d.e, in+c0, n))
}

// head is conv_norm_out, SiLU and conv_out.
func (d *diffWalk) head(c0, out, n int64) {
	e, f := d.e, d.f
	if d.w.Train {
		if d.w.Autocast {
			d.save(d.m(2*f+e, c0, n))
		} else {
			d.save(d.m(3*e, c0, n))
		}
		d.note(d.m(e, out, n))
		return
	}
	d.note(d.m(e, n, 3*c0+out))
}

func (d *diffWalk) result(output int64) (DiffusionActivations, error) {
	if !d.ok {
		return DiffusionActivations{}, gpumem.Errorf("DiffusionWorkload", d.w.Batch, gpumem.ErrRange, "activation bytes overflow int64")
	}
	a := DiffusionActivations{Saved: gpumem.Bytes(d.saved), Forward: gpumem.Bytes(max(d.peak, d.saved)), Output: gpumem.Bytes(output)}
	if d.w.Train {
		a.Backward = gpumem.Bytes(d.bwd)
	} else {
		a.Saved = 0
	}
	return a, nil
}
