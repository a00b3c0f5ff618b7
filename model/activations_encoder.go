package model

// Activations of encoders, encoder-decoders and multimodal models: vision
// towers, the multimodal projector, T5 and Whisper.

import (
	"github.com/gpumem/gpumem"
)

// vision adds a ViT/CLIP/SigLIP encoder over n images to a: patch tokens
// plus CLS, the patch convolution's pixel input (e·n·C·size²), CLIP's
// pre-LayerNorm, and the final LayerNorm. It returns the tokens per image.
func (c *actCalc) vision(a *Activations, s Spec, w Workload, e int64, part string, n int64, frozen bool) int64 {
	tokens := s.Image.Patches() + actB2i(s.ClassToken)
	sh := actShape{b: n, s: tokens, e: e, k: w.Attention, hc: w.HeadChunk, drop: w.Dropout, mask: w.dropMask(e), cpu: w.Backend == CPU, gqa: w.NoAttentionMask, autocast: w.Autocast, softmax: w.Softmax, half: w.computeDType(&s) == gpumem.FP16}
	bl := actFamily(&s)
	bl.qkvIn, bl.mlpIn = autocastNormReaders(&s, &bl) // ViT's fp32 residual stream (autocastNorms)
	if w.Train && w.FrozenBase.Input {
		sh.fz = w.FrozenBase
	}
	c.stack(a, w, part, "encoder", &bl, sh, s.Layers, w.Train && !frozen)
	pixels := c.m(e, n, s.Image.Channels, s.Image.Size, s.Image.Size)
	if !w.Train {
		// A pass without a graph saves nothing, but the caller holds
		// the pixel values it passed (pixel_values, in the compute
		// dtype) until the pass returns, as a training step's patch
		// convolution saves them; measured on the CPU
		// (testdata/measured/cpu, ViT prefill rows: the level before
		// the pass holds the parameters and the inputs).
		a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), pixels))
	}
	if !w.Train || frozen {
		return tokens
	}
	T := c.m(n, tokens)
	// pixels: saved by the patch convolution, frozen or not (FrozenInput).
	in := autocastInputs(c, w, e, c.m(n, s.Image.Channels, s.Image.Size, s.Image.Size))
	emb := c.a(pixels, in)
	if part == "" {
		a.Inputs = gpumem.Bytes(actMax(pixels, in))
	}
	if layoutOf(&s) == layoutCLIPVision {
		pe := e
		if sh.autocast && bl.qkvIn > 0 {
			pe = 4 // pre_layrnorm reads the fp32 embeddings (autocastNorms)
		}
		emb = c.a(emb, c.normSaved(actLN, T, s.Hidden, pe)) // pre_layrnorm
	}
	if w.Dropout && layoutOf(&s) == layoutVision {
		emb = c.a(emb, c.m(w.dropMask(e), T, s.Hidden))
	}
	a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), emb))
	if part == "" {
		fe := e
		if sh.autocast && bl.qkvIn > 0 && e != 4 {
			fe = 4 // the final LayerNorm reads the fp32 residual stream (autocastNorms)
		}
		a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), c.normSaved(actLN, T, s.Hidden, fe)))
		a.Tokens = tokens
	}
	return tokens
}

// multimodal fills a for a LLaVA-style model: the vision tower over
// Batch·Images images (LLaVA takes the features of the second-to-last
// block, vision_feature_layer -2, so the last block saves nothing that
// survives the tower), the projector (Linear, GELU, Linear: it saves the
// selected features, the GELU input and output), then the language model
// over SeqLen + Images·ImageTokens tokens. Hugging Face scatters the image
// features into the embeddings with masked_scatter, which saves a 1-byte
// mask per position (counted in TokenIDs).
func (c *actCalc) multimodal(a *Activations, s Spec, w Workload, e int64) {
	v, t := *s.Vision, *s.Text
	n := c.m(w.Batch, w.Images)
	per := w.ImageTokens
	if per == 0 {
		per = v.Image.Patches() // LLaVA drops CLS ("default" feature strategy)
	}
	if n > 0 {
		if s.Family == "llava" && v.Layers > 1 {
			// vision_feature_layer -2 (LLaVA-1.5): the last block's output
			// is unused, so its graph is released with it.
			v.Layers--
		}
		c.vision(a, v, w, e, "vision", n, w.FreezeVision)
		ph := t.Hidden
		T := c.m(n, per)
		saved := c.a(c.m(e, T, v.Hidden), c.m(2, e, T, ph))
		l := LayerActivations{Part: "projector", Kind: "projector", Count: 1, Tokens: per, Input: gpumem.Bytes(c.m(e, T, v.Hidden)),
			FLOPs: c.m(2, T, c.a(c.m(v.Hidden, ph), c.m(ph, ph))), Backward: gpumem.Bytes(c.m(2, e, T, ph))}
		if w.Train {
			l.Saved = gpumem.Bytes(saved)
			l.Kept, l.KeptTotal = l.Saved, l.Saved
			if w.Checkpointing == OffloadActivations {
				l.Kept, l.KeptTotal = 0, 0
				a.Offloaded = gpumem.Bytes(c.a(int64(a.Offloaded), saved))
			}
		} else {
			l.Forward = gpumem.Bytes(c.m(2, e, T, ph))
		}
		c.push(l)
	}
	seq := c.a(w.SeqLen, c.m(w.Images, per))
	c.decoderOnly(a, &t, w, e, "language", seq)
	a.ImageTokens = per
	if w.Train && n > 0 {
		a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), c.m(w.Batch, seq)))
	}
}

// encDec fills a for T5 or Whisper: encoder blocks over the encoder
// length, decoder blocks (self-attention, cross-attention over the encoder
// output, MLP) over SeqLen, the head over SeqLen.
//
// T5: T5LayerNorm (actT5RMS), no attention scaling, fp32 softmax
// (scores.float()), dropout after every sub-block and inside the MLP,
// ReLU or gated-gelu (gelu_new) MLP; the relative-position bucket indices
// (int64 s·s) are saved once per stack by the bias embedding; the decoder
// output is scaled by d_model^-0.5 before a tied head (a new tensor, saved
// by the head).
//
// Whisper: pre-LN blocks with GELU; the encoder front-end is two
// convolutions with GELU over 2×frames mel frames (conv1 saves the mel
// input, e·M·2F; GELU saves conv1's output, conv2 the GELU output, each
// e·h·2F; the second GELU saves conv2's output, e·h·F).
// EncoderInput returns the positions the encoder of an encoder–decoder
// reads for a job of seqLen text tokens, and whether they are that text:
// T5 encodes the text (seqLen, true); Whisper always encodes 30 s of
// audio, its encoder's Positions (1500 frames, false). A model without an
// encoder returns (0, false). Generation starts a T5 decoder from one
// start token and a Whisper decoder from its seqLen-token prompt.
func (s Spec) EncoderInput(seqLen int64) (tokens int64, text bool) {
	switch {
	case s.Encoder == nil:
		return 0, false
	case layoutOf(&s) == layoutWhisper:
		return s.Encoder.Positions, false
	}
	return seqLen, true
}

func (c *actCalc) encDec(a *Activations, s Spec, w Workload, e int64) {
	enc := *s.Encoder
	l := layoutOf(&s)
	encLen := w.EncoderLen
	if encLen == 0 {
		encLen, _ = s.EncoderInput(w.SeqLen)
	}
	eb := actBlock{h: s.Hidden, H: enc.Heads, KV: actMax(1, enc.KVHeads), d: actMax(1, enc.HeadDim), I: enc.Intermediate,
		norm: actLN, act: actGELU, attnDrop: true, residDrop: 2}
	if enc.KVHeads == 0 {
		eb.KV = enc.Heads
	}
	if enc.HeadDim == 0 {
		eb.d = s.HeadDim
	}
	eb.dv = eb.d
	db := actBlock{h: s.Hidden, H: s.Heads, KV: s.KVHeads, d: s.HeadDim, dv: s.HeadDim, I: s.Intermediate,
		norm: actLN, act: actGELU, attnDrop: true, residDrop: 3, cross: true}
	eb.mlpDrop, db.mlpDrop = true, true                       // whisper activation_dropout, T5's dropout after the activation
	t5amp := l == layoutT5 && w.Autocast && w.Train && e != 4 // t5Autocast
	whamp := l == layoutWhisper && w.Autocast && w.Train && e != 4
	if whamp {
		// Whisper's pre-norm blocks under autocast keep the fp32
		// residual stream of a decoder-only model (autocastNorms): q, k
		// and v each cast self_attn_layer_norm's fp32 output, fc1 casts
		// final_layer_norm's.
		eb.qkvIn, eb.mlpIn = 3, 1
		db.qkvIn, db.mlpIn = 3, 1
	}
	if l == layoutT5 {
		for _, b := range []*actBlock{&eb, &db} {
			b.norm, b.upcast, b.act = actT5RMS, true, actReLU
			if s.Gated {
				b.act = actGatedNew
			}
			if t5amp {
				b.qkvIn = 3
			}
		}
	}
	esh := actShape{b: w.Batch, s: encLen, e: e, k: w.Attention, hc: w.HeadChunk, drop: w.Dropout, mask: w.dropMask(e), cpu: w.Backend == CPU, gqa: w.NoAttentionMask, autocast: w.Autocast, softmax: w.Softmax, half: w.computeDType(&s) == gpumem.FP16}
	dsh := actShape{b: w.Batch, s: w.SeqLen, sk: encLen, e: e, k: w.Attention, hc: w.HeadChunk, drop: w.Dropout, mask: w.dropMask(e), cpu: w.Backend == CPU, gqa: w.NoAttentionMask, autocast: w.Autocast, softmax: w.Softmax, half: w.computeDType(&s) == gpumem.FP16}
	if w.Train && w.FrozenBase.Input {
		esh.fz, dsh.fz = w.FrozenBase, w.FrozenBase
	}
	if l == layoutT5 && !w.Train {
		// T5Stack.forward (modeling_t5.py at v4.57.1, commit 8cb5963c)
		// keeps the position_bias its first layer's attention returns,
		// the relative bias plus the mask, batch × heads × query × key
		// in the compute dtype, for every later layer: the encoder's
		// self-attention bias. The decoder keeps its own (t5HeldDecoder).
		eb.heldBias = c.m(e, w.Batch, eb.H, encLen, encLen)
		db.heldBias = t5HeldDecoder(c, &db, dsh)
		t5Held(&eb, &db)
		eb.firstMoment = t5FirstMoment(c, &eb, esh, s.Hidden, true, 0)
		db.firstMoment = t5FirstMoment(c, &db, dsh, s.Hidden, false, c.a(c.m(e, w.Batch, encLen, s.Hidden), c.m(e, w.Batch, w.SeqLen, w.SeqLen)))
	}
	if !w.Train {
		// The decoder runs beside the encoder's output, which the
		// encoder–decoder's forward holds (encoder_outputs) and every
		// cross-attention reads.
		db.heldBias = c.a(db.heldBias, c.m(e, w.Batch, encLen, s.Hidden))
	}
	if l == layoutWhisper && !w.Train {
		whisperHeld(c, &eb, w, esh, enc.Layers)
	}
	if l == layoutWhisper {
		whisperOutCopy(&eb, &db)
	}
	c.stack(a, w, "encoder", "encoder", &eb, esh, enc.Layers, w.Train)
	c.stack(a, w, "decoder", "cross", &db, dsh, s.Layers, w.Train)
	if dsh.fz.Input && s.Layers > 0 && w.Checkpointing == NoCheckpointing && w.tp() == 1 {
		// The decoder's first block reads token embeddings that need no
		// gradient (FrozenInput).
		ls := c.layers()
		l := &ls[len(ls)-1]
		l.KeptTotal -= min(l.Kept, gpumem.Bytes(c.frozenFirstCross(&db, dsh)))
	}
	a.Tokens = w.SeqLen
	eT := c.m(w.Batch, encLen)
	dT := c.m(w.Batch, w.SeqLen)
	if w.Train {
		// The encoder's final norm, and its output read by every
		// decoder block's cross k/v projections (saved once).
		ne := e
		if t5amp || whamp {
			ne = 4 // the final norms read the fp32 residual stream
		}
		encNorm := c.normSaved(eb.norm, eT, s.Hidden, ne)
		decNorm := c.normSaved(db.norm, dT, s.Hidden, ne)
		if esh.fz.Input {
			// Frozen norm weights save no normalized copy (FrozenInput).
			encNorm -= c.normCopy(eb.norm, eT, s.Hidden, e)
			decNorm -= c.normCopy(db.norm, dT, s.Hidden, e)
		}
		a.FinalNorm = gpumem.Bytes(c.a(encNorm, decNorm))
		// The dtype of the tensors T5Stack drops out around the blocks:
		// the embeddings and the final norms' outputs, fp32 under
		// autocast (t5Autocast).
		de := e
		if t5amp {
			de = 4
		}
		if l == layoutT5 && w.Dropout {
			// T5Stack applies dropout after each final norm.
			encNorm = c.a(encNorm, c.m(w.dropMask(de), eT, s.Hidden))
			a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), c.m(w.dropMask(de), eT, s.Hidden), c.m(w.dropMask(de), dT, s.Hidden)))
		}
		a.EncoderNorm = gpumem.Bytes(encNorm)
		a.Shared = gpumem.Bytes(c.m(e, eT, s.Hidden))
		if t5amp || whamp {
			// Every decoder block's cross k and v cast the encoder's
			// fp32 output for themselves (t5Autocast).
			a.Shared = gpumem.Bytes(c.m(2, s.Layers, e, eT, s.Hidden))
		}
		if esh.fz.Input {
			a.Shared = 0 // frozen cross k/v projections save no input (FrozenInput)
		}
		a.CrossInputs = a.Shared
		a.EncoderOutputGrad = gpumem.Bytes(c.m(ne, eT, s.Hidden))
		if l == layoutT5 && !esh.fz.Input {
			// The relative-position buckets the bias embedding's lookup
			// saves; a frozen one (FrozenInput) records nothing.
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(8, encLen, encLen), c.m(8, w.SeqLen, w.SeqLen)))
		}
		emb := int64(0)
		if l == layoutWhisper {
			F := encLen
			emb = c.a(c.m(e, w.Batch, s.MelBins, 2, F), c.m(2, e, w.Batch, s.Hidden, 2, F), c.m(e, w.Batch, s.Hidden, F))
			in := autocastInputs(c, w, e, c.m(w.Batch, s.MelBins, 2, F))
			emb = c.a(emb, in)
			a.Inputs = gpumem.Bytes(actMax(c.m(e, w.Batch, s.MelBins, 2, F), in))
		}
		if w.Dropout {
			emb = c.a(emb, c.m(w.dropMask(de), eT, s.Hidden), c.m(w.dropMask(de), dT, s.Hidden))
		}
		a.Embedding = gpumem.Bytes(emb)
		if l == layoutT5 {
			a.TokenIDs = gpumem.Bytes(c.m(8, eT)) // encoder ids; head adds decoder ids and labels
			if esh.fz.Input {
				// The encoder's inputs_embeds, which its first block
				// reads as they are (eval dropout), instead of ids.
				a.TokenIDs = 0
			}
		}
	} else if l == layoutWhisper {
		// A pass without a graph saves nothing, but the caller holds the
		// log-mel features it passed (input_features, B·M·2F in the
		// compute dtype) until the pass returns, as a training step's
		// conv1 saves them; measured on the CPU (testdata/measured/cpu,
		// Whisper prefill rows: the level before the pass holds the
		// parameters and the inputs).
		a.Embedding = gpumem.Bytes(c.m(e, w.Batch, s.MelBins, 2, encLen))
	}
	c.head(a, &s, w, e, dT, dT, false)
	var flops int64
	for _, x := range c.layers() {
		flops = c.a(flops, c.m(x.FLOPs, x.Count))
	}
	a.FLOPs = c.a(flops, c.m(2, dT, s.Hidden, s.Vocab))
	c.finish(a, w)
}

// t5Autocast documents what a T5 training step saves under autocast over
// fp32 weights beyond a 16-bit pass; Whisper's pre-norm blocks follow
// autocastNorms (their LayerNorms save fp32 inputs, q, k and v and fc1
// their own casts) and share the cross-attention and final-norm points
// below (modeling_whisper.py, v4.57.1). T5LayerNorm (modeling_t5.py,
// transformers v4.57.1, commit 8cb5963c) casts its output to the
// weight's dtype only when that is fp16 or bf16, so over fp32 weights
// every norm's output is fp32, and the embeddings (on no autocast list)
// are fp32 too (autocastNorms). So:
//
//   - query, key and value each save their own 16-bit cast of the
//     self-attention norm's output (cached_cast caches weights only):
//     2·e·T·h more a block, in both stacks;
//   - every decoder block's cross-attention key and value cast the
//     encoder's fp32 output for themselves: 2·e·T_enc·h a decoder block
//     where a 16-bit pass saves the encoder's output once;
//   - the dropouts T5Stack applies to the embeddings and after each final
//     norm act on fp32 tensors: on the CPU their noise is fp32
//     (Workload.dropMask).
//
// The norms themselves save what a 16-bit pass saves (T5LayerNorm's fp32
// copy of its input is then the input itself). Measured on the CPU
// (saved_tensors_hooks, t5-small-2l bf16-mixed eager b4 s64, torch 2.6.0:
// testdata/measured/cpu/saved, equal to the model to the byte in
// TestCPUSaved): 983,040 bytes (30·T·h with 2 blocks a stack) more than
// the 16-bit pattern.
