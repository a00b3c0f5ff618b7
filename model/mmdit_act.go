package model

// # Activations of the MMDiT transformers (Flux, SD3)
//
// The op sequences are diffusers 0.40.0.dev0 (commit 58eb52c0):
// FluxTransformer2DModel.forward, FluxTransformerBlock (the
// double-stream block: AdaLayerNormZero on each stream, one joint
// attention over the text and image tokens, a tanh-GELU feed-forward of
// 4·D per stream), FluxSingleTransformerBlock (AdaLayerNormZeroSingle,
// proj_mlp beside the attention, proj_out over their concatenation),
// FluxAttnProcessor (to_q/k/v per stream, torch.nn.RMSNorm on q and k,
// the text tokens first, apply_rotary_emb with the fp32 cos/sin tables
// of FluxPosEmbed, dispatch_attention_fn's native backend, i.e. torch's
// scaled_dot_product_attention) in models/transformers/
// transformer_flux.py; SD3Transformer2DModel, JointTransformerBlock
// (models/attention.py; SD35AdaLayerNormZeroX and the second
// self-attention in a dual-attention layer, context_pre_only in the last
// block) and JointAttnProcessor2_0 (the streams' q/k/v concatenated
// along the sequence, the output's transpose-reshape copy) in
// models/transformers/transformer_sd3.py and models/attention_processor.py;
// AdaLayerNormZero, AdaLayerNormContinuous and RMSNorm in
// models/normalization.py. A LoRA adapter is PEFT's lora.Linear
// (peft/tuners/lora/layer.py at 5d602fdbf: the frozen base, the input
// cast to the adapter's dtype, lora_B(lora_A(x)) added).
//
// A training pass counts what autograd saves, by storage, from each
// op's derivative formula: a linear saves its input when its weight
// needs a gradient, a product saves each factor whose partner needs
// one, layer_norm its input and fp32 mean and rstd, GELU and SiLU their
// input, torch.nn.RMSNorm (composite in torch 2.6) its fp32 input, the
// fp32 rstd and the normed tensor, SDPA q, k, v, its output and the
// fp32 logsumexp (rows padded to 32 by the memory-efficient kernel that
// runs fp32; the flash kernel of 16-bit inputs does not pad). With LoRA
// the base weights, norms and embeddings are frozen, so only what a
// gradient flowing to the adapters needs is kept: the gates and
// modulations of AdaLN (which do not require grad) keep the other
// factor only, the frozen projections nothing. testdata/oracle/mmdit.json
// (tools/oracle/mmdit.py: diffusers' own modules on the CPU, full and
// LoRA, fp32 and bf16, 16 cases) holds every block, the embeddings,
// norm_out and the head to these figures exactly (TestMMDiTOracle), and
// the forward peaks below to the CPU profiler's peak of live bytes
// within 5% (training) and 10% (no gradients).
//
// Under torch.autocast (the training scripts' accelerate
// mixed_precision) the walk follows the CUDA casts of
// aten/src/ATen/autocast_mode.cpp (torch 2.6): linear and SDPA run in
// the 16-bit dtype, each call casting an fp32 input afresh; layer_norm,
// pow and rsqrt run in fp32, so an AdaLN's modulated output is fp32. The
// CPU's autocast lists differ (layer_norm stays in the input dtype), so
// no CPU oracle checks this path.
//
// Gradient checkpointing is diffusers' _gradient_checkpointing_func
// (torch.utils.checkpoint, use_reentrant=False) around each block,
// which then keeps its inputs only. The forward peak adds the largest
// block's output to what is saved; the backward transient is two
// gradients of a block's largest tensor plus, under checkpointing, the
// recomputed block's saved tensors. Inference holds the hidden states
// and one block's temporaries at its widest moment (named below).

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// MMDiT text lengths the pipelines use by default: FluxPipeline's
// max_sequence_length 512 T5 tokens; StableDiffusion3Pipeline's 77 CLIP
// tokens followed by max_sequence_length 256 T5 tokens.
const (
	fluxTextTokens = 512
	sd3TextTokens  = 77 + 256
)

// mmTensor is one storage of the walk.
type mmTensor struct {
	bytes int64
	e     int64 // element size
	grad  bool  // requires grad
	saved bool
}

// mmdit walks one pass.
type mmdit struct {
	s        *Spec
	w        DiffusionWorkload
	e        int64 // compute dtype size
	pe       int64 // trainable parameters' dtype size under autocast
	lora     bool
	train    bool  // parameters require grad (full training)
	cur      int64 // the part being counted
	ok       bool
	cpuLSE   bool // no padding of the logsumexp's rows (the CPU oracle)
	maxOut   int64
	maxGrad  int64 // largest tensor of a block (bytes)
	blockMax int64 // largest block's saved bytes
	infer    int64 // inference: the widest block moment
	targets  []string
}

func (d *mmdit) mul(xs ...int64) int64 {
	p, ok := checked.MulAll(xs...)
	if !ok || p > 1<<61 {
		d.ok = false
		return 0
	}
	return p
}

func (d *mmdit) t(elems, e int64, grad bool) *mmTensor {
	return &mmTensor{bytes: d.mul(elems, e), e: e, grad: grad}
}

func (d *mmdit) save(t *mmTensor) {
	if t == nil || t.saved {
		return
	}
	t.saved = true
	if v, ok := checked.Add(d.cur, t.bytes); ok {
		d.cur = v
	} else {
		d.ok = false
	}
}

func (d *mmdit) saveNew(b int64) {
	if v, ok := checked.Add(d.cur, b); ok {
		d.cur = v
	} else {
		d.ok = false
	}
}

// elems returns t's elements.
func (t *mmTensor) elems() int64 { return t.bytes / t.e }

// cast returns t in e bytes per element (t itself when it already is).
func (d *mmdit) cast(t *mmTensor, e int64) *mmTensor {
	if t.e == e {
		return t
	}
	return d.t(t.elems(), e, t.grad)
}

// target reports whether a LoRA adapter sits on the module.
func (d *mmdit) target(name string) bool {
	if !d.lora {
		return false
	}
	for _, t := range d.targets {
		if name == t || len(name) > len(t) && name[len(name)-len(t)-1:] == "."+t {
			return true
		}
	}
	return false
}

// linear is nn.Linear over rows × in → rows × out named name (its
// name in the block: "attn.to_q").
func (d *mmdit) linear(name string, x *mmTensor, rows, out int64) *mmTensor {
	xin, oe := x, x.e
	if d.w.Autocast {
		xin, oe = d.cast(x, 2), 2
	}
	grad := x.grad || d.train
	if d.train {
		d.save(xin)
	}
	if d.target(name) {
		// PEFT: x cast to the adapter's fp32, lora_A (saves its input;
		// under autocast its own 16-bit cast), lora_B (saves the rank-r
		// product).
		xa := d.cast(x, 4)
		he := int64(4)
		if d.w.Autocast {
			xa, he = d.cast(xa, oe), oe
		}
		d.save(xa)
		d.save(d.t(d.mul(rows, d.w.LoRARank), he, true))
		grad = true
	}
	return d.t(d.mul(rows, out), oe, grad)
}

// product is a*b: each factor is saved when the other needs a gradient.
func (d *mmdit) product(a, b *mmTensor) *mmTensor {
	if b.grad {
		d.save(a)
	}
	if a.grad {
		d.save(b)
	}
	return d.t(max(a.elems(), b.elems()), max(a.e, b.e), a.grad || b.grad)
}

// layerNorm is an affine-free nn.LayerNorm over rows of D.
func (d *mmdit) layerNorm(x *mmTensor, rows int64) *mmTensor {
	if d.w.Autocast {
		x = d.cast(x, 4)
	}
	if x.grad {
		d.save(x)
		d.saveNew(d.mul(8, rows)) // mean and rstd, fp32 on CUDA
	}
	return d.t(d.mul(rows, d.s.Hidden), x.e, x.grad)
}

// pointwise is GELU or SiLU: the input saved.
func (d *mmdit) pointwise(x *mmTensor) *mmTensor {
	if x.grad {
		d.save(x)
	}
	return d.t(x.elems(), x.e, x.grad)
}

// rmsNorm normalizes q or k over each head of rows tokens. Flux's
// torch.nn.RMSNorm saves the fp32 input (pow and mul), the fp32 rstd
// and the normed tensor cast back (the weight's product, when the
// weight trains). SD3's diffusers RMSNorm (models/normalization.py)
// multiplies the input in its own dtype by the fp32 rstd, so a 16-bit
// input is saved beside its fp32 copy.
func (d *mmdit) rmsNorm(x *mmTensor, rows int64) *mmTensor {
	xf := d.cast(x, 4)
	if x.grad {
		d.save(xf)
		if d.s.Family == FamilySD3 {
			d.save(x)
		}
		d.saveNew(d.mul(4, rows, d.s.Heads))
	}
	normed := d.t(x.elems(), x.e, x.grad)
	if d.train {
		d.save(normed)
	}
	e := x.e
	if d.train && d.w.Autocast {
		e = max(e, d.pe)
	}
	return d.t(x.elems(), e, x.grad || d.train)
}

// adaLN is AdaLayerNormZero (chunks 6), AdaLayerNormZeroSingle (3),
// SD35AdaLayerNormZeroX (9, two modulations) or AdaLayerNormContinuous
// (2, whose emb is not saved): linear(silu(temb)), then for each
// modulation norm(x)·(1 + scale) + shift. It returns the emb (the
// gates' storage) and the modulated outputs.
func (d *mmdit) adaLN(name string, x, temb *mmTensor, rows int64, chunks, mods int) (emb *mmTensor, out []*mmTensor) {
	B, D := d.w.Batch, d.s.Hidden
	silu := d.pointwise(temb)
	emb = d.linear(name, silu, B, int64(chunks)*D)
	normed := d.layerNorm(x, rows)
	for range mods {
		scale1 := d.t(d.mul(B, D), emb.e, emb.grad)
		m := d.product(normed, scale1)
		out = append(out, d.t(m.elems(), m.e, m.grad)) // + shift
	}
	return emb, out
}

// feedForward is diffusers' FeedForward with gelu-approximate.
func (d *mmdit) feedForward(p string, x *mmTensor, rows int64) *mmTensor {
	h := d.linear(p+".net.0.proj", x, rows, d.s.Intermediate)
	g := d.pointwise(h)
	d.maxGrad = max(d.maxGrad, h.bytes)
	return d.linear(p+".net.2", g, rows, d.s.Hidden)
}

// sdpa is scaled_dot_product_attention over rows = B·S tokens.
func (d *mmdit) sdpa(q, k, v *mmTensor, S int64) *mmTensor {
	if d.w.Autocast {
		q, k, v = d.cast(q, 2), d.cast(k, 2), d.cast(v, 2)
	}
	out := d.t(q.elems(), q.e, q.grad || k.grad || v.grad)
	if out.grad {
		d.save(q)
		d.save(k)
		d.save(v)
		d.save(out)
		rows := S
		if !d.cpuLSE && q.e == 4 {
			rows = (S + 31) / 32 * 32
		}
		d.saveNew(d.mul(4, d.w.Batch, d.s.Heads, rows))
	}
	return out
}

// rope is apply_rotary_emb: fp32 products with the shared cos and sin
// tables (saved once), the result cast back.
func (d *mmdit) rope(x, cos, sin *mmTensor) *mmTensor {
	if x.grad {
		d.save(cos)
		d.save(sin)
	}
	return d.t(x.elems(), x.e, x.grad)
}

// cat concatenates.
func (d *mmdit) cat(a, b *mmTensor) *mmTensor {
	e := max(a.e, b.e)
	return d.t(a.elems()+b.elems(), e, a.grad || b.grad)
}

// slice is a token range of t's storage: a view when B is 1, a copy
// (.contiguous() in Flux, the matmul's reshape in SD3) otherwise.
func (d *mmdit) slice(t *mmTensor, rows, width int64) *mmTensor {
	if d.w.Batch == 1 {
		return t
	}
	return d.t(d.mul(rows, width), t.e, t.grad)
}

// MMDiTActivations returns the activations of one pass of a Flux or SD3
// transformer over w: Height and Width are the latent's (1/8 of the
// image), its tokens (Height/2)·(Width/2) (Flux packs 2×2 latent
// pixels, SD3's patch is 2); TextTokens the joint attention's text
// tokens (zero: 512 for Flux, 333 for SD3). With LoRARank the adapters
// sit on LoRATargets (nil: the DreamBooth LoRA scripts' defaults).
func (s Spec) MMDiTActivations(w DiffusionWorkload) (DiffusionActivations, error) {
	p, err := s.mmditParts(w)
	if err != nil {
		return DiffusionActivations{}, err
	}
	return p.acts, nil
}

// mmditParts are a pass's figures and, for the oracle, its parts.
type mmditParts struct {
	acts                   DiffusionActivations
	embed, normOut, head   int64
	double, single         []int64
	shared                 int64 // temb and the rope tables, in double[0]
	checkpointed, inferred bool
}

func (s Spec) mmditParts(w DiffusionWorkload) (mmditParts, error) {
	if s.Family != FamilyFlux && s.Family != FamilySD3 {
		return mmditParts{}, gpumem.Errorf("Spec.Family", s.Family, gpumem.ErrInvalid, "not a %s or %s transformer", FamilyFlux, FamilySD3)
	}
	if err := s.Validate(); err != nil {
		return mmditParts{}, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Batch", w.Batch}, {"Height", w.Height}, {"Width", w.Width}} {
		if f.v < 1 || f.v > 1<<20 {
			return mmditParts{}, gpumem.Errorf("DiffusionWorkload."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, 2^20]")
		}
	}
	P := s.Image.Patch
	if s.Family == FamilyFlux {
		P = 2 // FluxPipeline._pack_latents
	}
	if w.Height%P != 0 || w.Width%P != 0 {
		return mmditParts{}, gpumem.Errorf("DiffusionWorkload.Height", w.Height, gpumem.ErrInvalid,
			"the latent's height and width (%d×%d) must be multiples of %d (the image's of %d)", w.Height, w.Width, P, 8*P)
	}
	if w.TextTokens < 0 || w.TextTokens > 1<<20 {
		return mmditParts{}, gpumem.Errorf("DiffusionWorkload.TextTokens", w.TextTokens, gpumem.ErrInvalid, "must be in [0, 2^20]")
	}
	if w.TextTokens == 0 {
		w.TextTokens = sd3TextTokens
		if s.Family == FamilyFlux {
			w.TextTokens = fluxTextTokens
		}
	}
	if w.LoRARank < 0 || w.LoRARank > 1<<20 {
		return mmditParts{}, gpumem.Errorf("DiffusionWorkload.LoRARank", w.LoRARank, gpumem.ErrInvalid, "must be in [0, 2^20]")
	}
	if !w.DType.IsFloat() || w.DType.Bits() < 16 {
		return mmditParts{}, gpumem.Errorf("DiffusionWorkload.DType", w.DType, gpumem.ErrInvalid, "want a 16- or 32-bit float compute dtype")
	}
	d := &mmdit{s: &s, w: w, e: int64(w.DType.Bits() / 8), ok: true, cpuLSE: w.cpuLSE}
	d.lora = w.Train && w.LoRARank > 0
	d.train = w.Train && !d.lora
	d.pe = d.e
	if d.train && w.Autocast {
		d.pe = 4 // a full fine-tune's fp32 weights under autocast
	}
	if d.w.Autocast && d.e == 4 {
		d.w.Autocast = false // autocast to fp32 changes nothing
	}
	d.targets = w.LoRATargets
	if d.lora && d.targets == nil {
		d.targets = sd3LoRATargets
		if s.Family == FamilyFlux {
			d.targets = fluxLoRATargets
		}
	}
	var p mmditParts
	N := d.mul(w.Height/P, w.Width/P)
	if !w.Train {
		return d.inference(N)
	}
	p = d.train1(N)
	if !d.ok {
		return mmditParts{}, gpumem.Errorf("DiffusionWorkload", w.Batch, gpumem.ErrRange, "activation bytes overflow int64")
	}
	return p, nil
}

// The target_modules of diffusers' train_dreambooth_lora_flux.py and
// train_dreambooth_lora_sd3.py (58eb52c0).
var (
	fluxLoRATargets = []string{"attn.to_k", "attn.to_q", "attn.to_v", "attn.to_out.0", "attn.add_k_proj",
		"attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out", "ff.net.0.proj", "ff.net.2",
		"ff_context.net.0.proj", "ff_context.net.2"}
	sd3LoRATargets = []string{"attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out",
		"attn.to_k", "attn.to_out.0", "attn.to_q", "attn.to_v"}
)

// part ends the current part and returns its bytes.
func (d *mmdit) part() int64 {
	b := d.cur
	d.cur = 0
	return b
}

// train1 walks a training pass.
func (d *mmdit) train1(N int64) mmditParts {
	s, w := d.s, d.w
	B, T, D, e := w.Batch, w.TextTokens, s.Hidden, d.e
	S := N + T
	flux := s.Family == FamilyFlux
	var p mmditParts
	in := func(elems int64) *mmTensor { return d.t(d.mul(B, elems), e, false) }
	// The embeddings: sinusoidal timestep (and guidance) projections of
	// 256 channels through linear, SiLU, linear; the pooled text through
	// linear, SiLU, linear; context_embedder over the text; x_embedder
	// (Flux) or pos_embed's convolution (SD3) over the latent.
	lat := in(d.mul(N, s.Image.Channels, s.Image.Patch, s.Image.Patch))
	hidden := d.linear("x_embedder", lat, d.mul(B, N), D)
	embMLP := func(name string, x *mmTensor) *mmTensor {
		h := d.linear(name+".linear_1", x, B, D)
		return d.linear(name+".linear_2", d.pointwise(h), B, D)
	}
	temb := embMLP("time_text_embed.timestep_embedder", in(256))
	if flux && s.DiT.Guidance {
		g := embMLP("time_text_embed.guidance_embedder", in(256))
		temb = d.t(temb.elems(), e, temb.grad || g.grad)
	}
	pooled := embMLP("time_text_embed.text_embedder", in(s.DiT.PooledDim))
	temb = d.t(temb.elems(), e, temb.grad || pooled.grad)
	enc := d.linear("context_embedder", in(d.mul(T, s.DiT.TextEmbed)), d.mul(B, T), D)
	p.embed = d.part()

	cos, sin := d.t(d.mul(S, s.HeadDim), 4, false), d.t(d.mul(S, s.HeadDim), 4, false)
	blockOut := d.mul(B, S, D, e)
	ckpt := w.Checkpointing
	// stream is one stream's AdaLN, projections and q/k norms.
	type qkv struct{ q, k, v *mmTensor }
	streamQKV := func(pre string, x *mmTensor, rows int64, chunks, mods int, added bool) (emb *mmTensor, mod []*mmTensor, r qkv) {
		emb, mod = d.adaLN(pre, x, temb, rows, chunks, mods)
		names := [3]string{"attn.to_q", "attn.to_k", "attn.to_v"}
		if added {
			names = [3]string{"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}
		}
		r.q = d.linear(names[0], mod[0], rows, D)
		r.k = d.linear(names[1], mod[0], rows, D)
		r.v = d.linear(names[2], mod[0], rows, D)
		if flux || s.QKNorm {
			r.q = d.rmsNorm(r.q, rows)
			r.k = d.rmsNorm(r.k, rows)
		}
		return emb, mod, r
	}
	finish := func(x *mmTensor, emb *mmTensor, attnOut *mmTensor, rows int64, ffName string, mods []*mmTensor) *mmTensor {
		// gate_msa·attn, residual, norm2 modulated, the feed-forward,
		// gate_mlp·ff, residual.
		gate := emb
		g := d.product(gate, attnOut)
		x = d.t(x.elems(), max(x.e, g.e), x.grad || g.grad)
		n2 := d.layerNorm(x, rows)
		scale1 := d.t(d.mul(B, D), emb.e, emb.grad)
		m := d.product(n2, scale1)
		m = d.t(m.elems(), m.e, m.grad)
		ff := d.feedForward(ffName, m, rows)
		g2 := d.product(gate, ff)
		return d.t(x.elems(), max(x.e, g2.e), x.grad || g2.grad)
	}
	// The checkpointed blocks keep their inputs: the hidden states (the
	// text and image tokens) once per block, and the shared temb and
	// rope tables once.
	for i := int64(0); i < s.Layers; i++ {
		last := !flux && i == s.Layers-1
		dual := !flux && s.LayerTypes != nil && s.LayerTypes[i] == "dual"
		start := d.cur
		var embI, embT *mmTensor
		var modI, modT []*mmTensor
		var ri, rt qkv
		if dual {
			embI, modI, ri = streamQKV("norm1.linear", hidden, d.mul(B, N), 9, 2, false)
		} else {
			embI, modI, ri = streamQKV("norm1.linear", hidden, d.mul(B, N), 6, 1, false)
		}
		if last {
			embT, modT, rt = streamQKV("norm1_context.linear", enc, d.mul(B, T), 2, 1, true)
		} else {
			embT, modT, rt = streamQKV("norm1_context.linear", enc, d.mul(B, T), 6, 1, true)
		}
		q, k, v := d.cat(rt.q, ri.q), d.cat(rt.k, ri.k), d.cat(rt.v, ri.v)
		if flux {
			q, k = d.rope(q, cos, sin), d.rope(k, cos, sin)
		}
		o := d.sdpa(q, k, v, S)
		if !flux {
			o = d.t(o.elems(), o.e, o.grad) // transpose(1, 2).reshape copy
		}
		attnI := d.linear("attn.to_out.0", d.slice(o, d.mul(B, N), D), d.mul(B, N), D)
		var attnT *mmTensor
		if !last {
			attnT = d.linear("attn.to_add_out", d.slice(o, d.mul(B, T), D), d.mul(B, T), D)
		}
		if dual {
			// attn2 over the image tokens alone on the second modulation;
			// its output gated by gate_msa2.
			q2 := d.linear("attn2.to_q", modI[1], d.mul(B, N), D)
			k2 := d.linear("attn2.to_k", modI[1], d.mul(B, N), D)
			v2 := d.linear("attn2.to_v", modI[1], d.mul(B, N), D)
			if s.QKNorm {
				q2, k2 = d.rmsNorm(q2, d.mul(B, N)), d.rmsNorm(k2, d.mul(B, N))
			}
			o2 := d.sdpa(q2, k2, v2, N)
			a2 := d.linear("attn2.to_out.0", o2, d.mul(B, N), D)
			d.product(embI, a2)
		}
		hidden = finish(hidden, embI, attnI, d.mul(B, N), "ff", modI)
		if !last {
			enc = finish(enc, embT, attnT, d.mul(B, T), "ff_context", modT)
		}
		_ = modT
		blk := d.cur - start
		d.blockMax = max(d.blockMax, blk)
		p.double = append(p.double, d.part())
	}
	if flux {
		x := d.cat(enc, hidden)
		for i := int64(0); i < s.DiT.SingleLayers; i++ {
			// cat(text, image), AdaLayerNormZeroSingle, proj_mlp and GELU,
			// the attention without an output projection, cat(attn, mlp),
			// proj_out, gate·, residual.
			rows := d.mul(B, S)
			emb, mod := d.adaLN("norm.linear", x, temb, rows, 3, 1)
			mlp := d.pointwise(d.linear("proj_mlp", mod[0], rows, s.Intermediate))
			q := d.rmsNorm(d.linear("attn.to_q", mod[0], rows, D), rows)
			k := d.rmsNorm(d.linear("attn.to_k", mod[0], rows, D), rows)
			v := d.linear("attn.to_v", mod[0], rows, D)
			o := d.sdpa(d.rope(q, cos, sin), d.rope(k, cos, sin), v, S)
			c := d.cat(o, mlp)
			d.maxGrad = max(d.maxGrad, c.bytes)
			po := d.linear("proj_out", c, rows, D)
			g := d.product(emb, po)
			x = d.t(x.elems(), max(x.e, g.e), x.grad || g.grad)
			d.blockMax = max(d.blockMax, d.cur)
			p.single = append(p.single, d.part())
		}
		hidden = x // norm_out reads the image tokens' view of it
	}
	// norm_out: AdaLayerNormContinuous (linear(silu(temb)), then the
	// modulated LayerNorm), proj_out, the scripts' fp32 MSE against the
	// target.
	_, mod := d.adaLN("norm_out.linear", hidden, temb, d.mul(B, N), 2, 1)
	p.normOut = d.part()
	cOut := s.DiT.OutChannels * s.Image.Patch * s.Image.Patch
	if flux {
		cOut = s.DiT.OutChannels
	}
	out := d.linear("proj_out", mod[0], d.mul(B, N), cOut)
	if out.grad {
		d.saveNew(2 * d.mul(4, out.elems())) // model_pred.float() and target.float()
	}
	p.head = d.part()
	d.maxOut = out.bytes

	// Shared tensors first saved in block 0 (temb by the first SiLU, the
	// rope tables by the first rotary products) count there.
	var saved int64
	for _, b := range append(append([]int64{p.embed, p.normOut, p.head}, p.double...), p.single...) {
		saved += b
	}
	a := DiffusionActivations{Output: gpumem.Bytes(d.mul(4, out.elems()))}
	grad2 := 2 * d.maxGrad
	if ckpt {
		// Each block keeps its inputs (the S tokens' hidden states, once
		// per block) instead of its saved tensors; temb and the rope
		// tables once.
		nb := s.Layers + s.DiT.SingleLayers
		shared := d.mul(B, D, e)
		if flux {
			shared += 2 * cos.bytes
		}
		saved = p.embed + p.normOut + p.head + d.mul(nb, blockOut) + shared
		a.Backward = gpumem.Bytes(grad2 + d.blockMax)
	} else {
		a.Backward = gpumem.Bytes(grad2)
	}
	a.Saved = gpumem.Bytes(saved)
	a.Forward = gpumem.Bytes(saved + blockOut)
	p.acts = a
	return p
}

// inference is a pass without gradients: the hidden states of both
// streams and the widest block moment. A double-stream block at its
// attention holds its input streams, their modulated copies, q, k, v
// (concatenated, and Flux's rotated q and k in fp32 before their cast),
// the output and SD3's reshape copy; at its feed-forward the streams,
// the attention outputs, the modulated input and the 4·D projection
// with its GELU. A Flux single block at proj_out holds its input, the
// modulated copy, the MLP's projection and GELU, the attention output,
// their concatenation and proj_out's result.
func (d *mmdit) inference(N int64) (mmditParts, error) {
	s, w := d.s, d.w
	B, T, D, e, ff := w.Batch, w.TextTokens, s.Hidden, d.e, s.Intermediate
	S := N + T
	rowsS := d.mul(B, S)
	x := d.mul(e, rowsS, D)
	attn := 2*x + 3*x + x
	if s.Family == FamilyFlux {
		attn += 2 * d.mul(4, rowsS, D)
	} else {
		attn += x
	}
	ffm := 2*x + x + d.mul(e, B, N, D) + 2*d.mul(e, B, N, ff)
	peak := max(attn, ffm)
	if s.Family == FamilyFlux && s.DiT.SingleLayers > 0 {
		single := 2*x + 2*d.mul(e, rowsS, ff) + x + d.mul(e, rowsS, D+ff) + x
		peak = max(peak, single)
	}
	out := d.mul(e, B, N, s.Image.Channels*s.Image.Patch*s.Image.Patch)
	if !d.ok {
		return mmditParts{}, gpumem.Errorf("DiffusionWorkload", w.Batch, gpumem.ErrRange, "activation bytes overflow int64")
	}
	return mmditParts{acts: DiffusionActivations{Forward: gpumem.Bytes(peak), Output: gpumem.Bytes(out)}, inferred: true}, nil
}
