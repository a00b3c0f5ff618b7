package model

// The activation calculator's building blocks: a block's shape, its norms
// and MLP activation functions, the per-layer accumulator, and how layers
// are placed over pipeline stages.

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// split returns bl as one of t tensor-parallel ranks holds it (Megatron's
// column/row split of attention and MLP): heads, key/value heads (one,
// replicated, below t), MLP and expert inner sizes divided by t.
func (bl actBlock) split(t int64) actBlock {
	if t <= 1 {
		return bl
	}
	bl.H /= t
	if bl.KV >= t {
		bl.KV /= t
	} else {
		bl.KV = 1
	}
	bl.I, _ = checked.CeilDiv(bl.I, t)
	if bl.moe != nil {
		m := *bl.moe
		m.Intermediate, _ = checked.CeilDiv(m.Intermediate, t)
		m.SharedIntermediate, _ = checked.CeilDiv(m.SharedIntermediate, t)
		bl.moe = &m
	}
	return bl
}

// actCalc does checked int64 arithmetic; any overflow sets bad, and the
// caller reports one ErrRange.
type actCalc struct {
	bad bool
	// The per-block figures, in order: the first eight in buf (n of
	// them), all of them in more once there are more. A fixed array keeps
	// AppendActivations allocation-free: a slice grown through a pointer
	// would escape to the heap.
	buf  [8]LayerActivations
	n    int
	more []LayerActivations
	// prep, when not nil, holds the layout and block description of
	// its Spec (see ActivationModel).
	prep *ActivationModel
}

// push appends a block's figures.
func (c *actCalc) push(l LayerActivations) {
	switch {
	case c.more != nil:
		c.more = append(c.more, l)
	case c.n < len(c.buf):
		c.buf[c.n] = l
		c.n++
	default:
		c.more = make([]LayerActivations, 0, 2*len(c.buf))
		c.more = append(append(c.more, c.buf[:]...), l)
	}
}

// layers returns the blocks' figures pushed so far.
func (c *actCalc) layers() []LayerActivations {
	if c.more != nil {
		return c.more
	}
	return c.buf[:c.n]
}

// m returns the product of xs.
func (c *actCalc) m(xs ...int64) int64 {
	v, ok := checked.MulAll(xs...)
	if !ok {
		c.bad = true
		return 0
	}
	return v
}

// a returns the sum of xs.
func (c *actCalc) a(xs ...int64) int64 {
	var s int64
	for _, x := range xs {
		var ok bool
		if s, ok = checked.Add(s, x); !ok {
			c.bad = true
			return 0
		}
	}
	return s
}

func actMax(xs ...int64) int64 {
	var m int64
	for _, x := range xs {
		if x > m {
			m = x
		}
	}
	return m
}

func actB2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// actNorm is how a block's norm saves its input.
type actNorm uint8

const (
	// actLN is nn.LayerNorm (native_layer_norm): it saves its input and
	// the per-row mean and rstd, kept in fp32 on CUDA for 16-bit inputs:
	// e·T·h + 8·T bytes.
	actLN actNorm = iota
	// actRMS is LlamaRMSNorm: x.to(fp32) (the fp32 copy is saved by pow
	// and by the multiply: 4·T·h), rsqrt(mean(x²)+eps) (saved: 4·T), the
	// normalized fp32 tensor cast back to the compute dtype (saved by
	// weight*x: e·T·h). mean.dim saves only sizes in torch 2.x.
	actRMS
	// actGemmaRMS is GemmaRMSNorm: like actRMS, but the weight multiply
	// runs in fp32, x_norm*(1+weight.float()), saving the fp32 normalized
	// tensor (4·T·h) and the fp32 1+weight (4·h); the output is cast back.
	actGemmaRMS
	// actT5RMS is T5LayerNorm: pow saves the fp32 copy (4·T·h), the
	// multiply hidden*rsqrt saves the input in its own dtype (e·T·h, the
	// same storage as the copy in fp32) and rsqrt (4·T), and weight*x
	// saves the cast-back copy (e·T·h, 16-bit only).
	actT5RMS
)

// mlpAct is an MLP's activation as Hugging Face implements it; its count is
// the number of batch·seq·intermediate tensors the MLP saves, including
// the input of the down projection.
type mlpAct uint8

const (
	actGated     mlpAct = iota // SiLU/GELU(gate)·up: act input, act output, up, product (4)
	actGELU                    // F.gelu, exact or tanh: input, output (2)
	actGELUNew                 // NewGELUActivation in Python ops: x (pow), tanh, 0.5·x, 1+tanh, output (5)
	actQuickGELU               // x·sigmoid(1.702x): x, sigmoid, output (3)
	actReLU                    // ReLU saves its result, also the down projection's input (1)
	actGatedNew                // T5 gated-gelu: gelu_new on wi_0 (5), wi_1 output, product (7)
)

func (a mlpAct) tensors() int64 {
	return [...]int64{actGated: 4, actGELU: 2, actGELUNew: 5, actQuickGELU: 3, actReLU: 1, actGatedNew: 7}[a]
}

// gated reports whether the MLP has three matrices (for FLOPs).
func (a mlpAct) gated() bool { return a == actGated || a == actGatedNew }

// actBlock describes one kind of transformer block for the derivation.
type actBlock struct {
	h, H, KV, d, dv, I int64 // hidden, heads, KV heads, q/k head dim, v head dim, MLP inner
	norm               actNorm
	post               bool  // post-LN (BERT): the input is saved by the q/k/v projections
	parallel           bool  // attention and MLP read the same normed input (falcon, phi, neox)
	pnorms             int64 // norms of a parallel block (1 or 2)
	sandwich           bool  // gemma2/3: norms after attention and after the MLP too
	qkNorm             bool  // per-head RMSNorm on q and k (qwen3, gemma3)
	upcast             bool  // eager softmax in fp32
	sinks              bool  // gpt_oss eager attention: sink logits concatenated to the scores
	softcap            bool  // gemma2 attention logit soft-capping: tanh saves its result
	scalar             bool  // GPT-2 divides scores by a 0-dim device tensor, saved (1 element)
	act                mlpAct
	attnDrop           bool  // dropout on the attention probabilities
	residDrop          int64 // dropout sites on batch·seq·hidden tensors
	mlpDrop            bool  // dropout inside the MLP (T5)
	cross              bool  // a cross-attention sub-block (T5, Whisper decoders)
	// floatMask: the eager core adds the model's float mask to the
	// scores and takes a plain softmax of the sum (BertSelfAttention,
	// GPT-2's eager_attention_forward at transformers v4.57.1); castBack:
	// it then casts the probabilities to the value's dtype
	// (attn_weights.type(value.dtype), GPT-2) before their dropout.
	floatMask, castBack bool
	// fusedQKV: q, k and v are views of one fused projection's output
	// (GPT-2's c_attn), which a fused kernel's saved q keeps whole.
	fusedQKV bool
	// qkvIn and mlpIn: the linears that read the attention's and the
	// MLP's norm output, each casting it for itself under autocast
	// (zero: the autocast residual stream is not modelled; see
	// autocastNorms).
	qkvIn, mlpIn int64
	// heldWeights: the layer keeps the attention weights its attention
	// returns in a local until it returns, so an eager pass without a
	// graph holds the probabilities through the MLP (heldWeightsFamilies).
	heldWeights bool
	// heldHidden and heldAttn: the hidden-size tensors a pass without a
	// graph holds beside the MLP's own and beside the attention's (zero:
	// one, the block's input).
	heldHidden, heldAttn int64
	// heldBias: bytes a pass without a graph holds through every block
	// of the stack beside them (T5's position biases).
	heldBias int64
	// keepsScores: the attention binds the scores and the probabilities
	// to two locals (T5Attention), so without a graph both are alive at
	// probs@v, beside matmul's contiguous copy of v and its output.
	keepsScores bool
	// outCopy: the fused kernel's output, which it saves, is not the
	// output projection's input: sdpa_attention_forward's
	// transpose(1, 2).contiguous() copies it (Whisper: whisperOutCopy).
	outCopy bool
	// firstMoment: bytes the stack's first block holds, without a graph,
	// at a moment of its own beyond the per-block figure (T5's
	// relative-position buckets: t5FirstMoment), everything counted.
	firstMoment int64
	moe         *MoE // routed experts replace the MLP
	noRenorm    bool // the top-k routing weights are used as they are (Jamba)
	mla         *MLA // DeepSeek latent attention projections
}

// actShape is the workload as one block sees it.
type actShape struct {
	b, s, sk int64 // batch, sequence, cross-attention key length
	e        int64 // compute dtype bytes
	k        Attention
	hc       int64 // eager head chunk; 0: all heads
	drop     bool
	// mask is the bytes a dropout site saves per element (Workload.dropMask).
	mask    int64
	softmax Softmax
	// cpu says the CPU's kernels run the block (Workload.Backend): an
	// SDPA core runs the math kernel under attention dropout, or for
	// grouped-query heads called without a mask (gqa). causal says the
	// core is a causal self-attention, which transformers calls with
	// is_causal. autocast says the 16-bit compute dtype comes from
	// torch.autocast (Workload.Autocast).
	cpu, gqa, causal, autocast bool
	sp                         int64 // divisor of the replicated per-token tensors (sequence parallelism); 0 or 1: none
	// compiled says the block runs under torch.compile (Workload.Compile
	// CompileLayers): it saves the partitioner's set (compile.go).
	compiled bool
	// half says the compute dtype is fp16, whose softmax(dtype=float32)
	// CUDA computes from the fp16 scores directly (half_to_float); a
	// bf16 one converts them to an fp32 copy first.
	half bool
	// fz is the workload's frozen base (Workload.FrozenBase).
	fz FrozenBase
}

// actCost is one block's figures.
type actCost struct {
	saved, attn, input, fwd, bwd, flops, attnFlops int64
	// tail is the part of saved the block makes after its last attention
	// core's scores: the probabilities (part), the core's output and the
	// MLP's tensors, which do not exist yet at the moment of fwd.
	tail int64
	// noGrad is the block's largest live set when it runs without
	// recording (inference, or the first forward of a checkpointed
	// block): its input plus the attention core's or the MLP's
	// temporaries.
	noGrad int64
}

// normSaved returns what a norm over rows of width w saves, without its
// output (which the next projection saves, or the residual add does not).
func (c *actCalc) normSaved(k actNorm, T, w, e int64) int64 {
	switch k {
	case actRMS:
		return c.a(c.m(4, T, w), c.m(4, T), c.m(e, T, w))
	case actGemmaRMS:
		return c.a(c.m(8, T, w), c.m(4, T), c.m(4, w))
	case actT5RMS:
		x := c.a(c.m(4, T, w), c.m(4, T), c.m(e, T, w))
		if e != 4 {
			x = c.a(x, c.m(e, T, w))
		}
		return x
	}
	return c.a(c.m(e, T, w), c.m(8, T))
}

// flops returns the forward FLOPs of one block's projections and MLP
// (2 per multiply-add), without the attention core.
func (c *actCalc) flops(bl *actBlock, T int64, sh actShape) int64 {
	proj := c.a(c.m(bl.h, bl.H, bl.d), c.m(bl.h, bl.KV, bl.d+bl.dv), c.m(bl.H, bl.dv, bl.h))
	var mlp int64
	if bl.moe != nil {
		m := bl.moe
		mlp = c.a(c.m(bl.h, m.Experts), c.m(m.Active, 3, bl.h, m.Intermediate))
		if m.Shared > 0 {
			mlp = c.a(mlp, c.m(3, bl.h, m.SharedIntermediate))
		}
	} else {
		n := int64(2)
		if bl.act.gated() {
			n = 3
		}
		mlp = c.m(n, bl.h, bl.I)
	}
	return c.m(2, T, c.a(proj, mlp))
}

// stack adds blocks to a: Count blocks of one kind, computed once.
func (c *actCalc) stack(a *Activations, w Workload, part, kind string, bl *actBlock, sh actShape, count int64, train bool) LayerActivations {
	rank := bl.split(w.tp())
	sh.sp = w.sp()
	sh.compiled = w.Compile&CompileLayers != 0
	x := c.block(&rank, sh)
	return c.place(a, w, part, kind, sh.s, x, count, train)
}

// place records count blocks of one kind, each costing x, under the
// workload's checkpointing policy (or, without train, as inference).
func (c *actCalc) place(a *Activations, w Workload, part, kind string, tokens int64, x actCost, count int64, train bool) LayerActivations {
	l := LayerActivations{Part: part, Kind: kind, Count: count, Tokens: tokens,
		Saved: gpumem.Bytes(x.saved), Attention: gpumem.Bytes(x.attn), Input: gpumem.Bytes(x.input),
		Forward: gpumem.Bytes(x.fwd), Backward: gpumem.Bytes(x.bwd), FLOPs: x.flops, AttentionFLOPs: x.attnFlops}
	if !train {
		// Inference: nothing is saved; a block's live set is about its
		// saved tensors, freed as the block proceeds.
		l.Saved, l.Attention, l.Input = 0, 0, 0
		l.Forward = gpumem.Bytes(x.noGrad)
		l.Backward = 0
		c.push(l)
		return l
	}
	kept := x.saved
	total := c.m(kept, count)
	if w.Checkpointing == NoCheckpointing {
		// The transient comes before the block has saved its tail
		// (actCost.tail): on top of what the block saves by the end of
		// forward, it is the excess over that tail. Measured on the CPU
		// (testdata/measured/cpu, ViT eager fp32 training rows: the
		// forward's peak is its end, the last block's eager scores and
		// their scaled copy beside its q, k and v only).
		l.Forward = gpumem.Bytes(x.fwd - min(x.fwd, x.tail))
	}
	switch w.Checkpointing {
	case FullCheckpointing:
		// The recomputed block's saved tensors include its input, which
		// the checkpoint kept: torch.utils.checkpoint hands the recompute
		// the saved input itself (detached, the same storage), so the
		// recompute's backward holds the block's saved tensors once, the
		// input among them, plus the transient. Measured on the CPU
		// (testdata/measured/cpu, ViT and Whisper full-checkpointing
		// rows).
		kept, total = x.input, c.m(x.input, count)
		l.Forward = gpumem.Bytes(x.noGrad) // the first forward runs without a graph
		if sh := w.Compile & CompileLayers; sh != 0 {
			// A compiled block under a non-reentrant checkpoint runs its
			// compiled forward, which returns every tensor it saves
			// before the checkpoint's hooks drop them.
			l.Forward = gpumem.Bytes(actMax(x.noGrad, x.saved))
		}
		l.Backward = gpumem.Bytes(c.a(x.saved-min(x.saved, x.input), x.bwd))
	case SelectiveCheckpointing:
		kept = x.saved - x.attn
		total = c.m(kept, count)
		l.Backward = gpumem.Bytes(c.a(x.attn, x.bwd))
	case EveryKCheckpointing:
		k := actMax(1, w.CheckpointEvery)
		n, _ := checked.CeilDiv(count, k)
		total = c.a(c.m(n, x.input), c.m(count-n, x.saved))
		kept, _ = checked.CeilDiv(total, count)
		if n > 0 {
			l.Forward = gpumem.Bytes(actMax(x.fwd, x.noGrad))
			l.Backward = gpumem.Bytes(c.a(x.saved-min(x.saved, x.input), x.bwd))
		}
	case OffloadActivations:
		a.Offloaded = gpumem.Bytes(c.a(int64(a.Offloaded), c.m(x.saved, count)))
		kept, total = 0, 0
		// The block being computed holds its saved tensors until they
		// are copied out.
		l.Forward = gpumem.Bytes(c.a(x.fwd, x.saved))
		l.Backward = gpumem.Bytes(c.a(x.saved, x.bwd))
	}
	l.Kept, l.KeptTotal = gpumem.Bytes(kept), gpumem.Bytes(total)
	c.push(l)
	return l
}

// finish computes the peaks and the recompute fraction from a.Layers.
func (c *actCalc) finish(a *Activations, w Workload) {
	var f, b gpumem.Bytes
	var flops, recompute int64
	for _, l := range c.layers() {
		f = max(f, l.Forward)
		b = max(b, l.Backward)
		flops = c.a(flops, c.m(l.FLOPs, l.Count))
		if !w.Train || l.Count == 0 {
			continue
		}
		switch w.Checkpointing {
		case FullCheckpointing:
			recompute = c.a(recompute, c.m(l.FLOPs, l.Count))
		case SelectiveCheckpointing:
			recompute = c.a(recompute, c.m(l.AttentionFLOPs, l.Count))
		case EveryKCheckpointing:
			n, _ := checked.CeilDiv(l.Count, actMax(1, w.CheckpointEvery))
			recompute = c.a(recompute, c.m(l.FLOPs, n))
		}
	}
	a.Forward, a.Backward = f, b
	if a.FLOPs < flops {
		a.FLOPs = flops
	}
	if a.FLOPs > 0 {
		a.Recompute = float64(recompute) / float64(a.FLOPs)
	}
	if !w.Train {
		a.Recompute = 0
	}
}
