package model

// What one transformer block saves for backward: the attention core per
// kernel, the MLP, and mixture-of-experts layers.

import (
	"github.com/gpumem/gpumem/internal/checked"
)

// attention returns what the attention core of one (self or cross)
// attention saves, with sq queries over sk keys:
//
//   - q: batch·H·sq·d (eager: the post-RoPE query, or the contiguous copy
//     that torch.matmul's reshape makes of a transposed view; fused
//     kernels: the query they are given);
//   - k, v: batch·H·sk·d with eager and SDPA, which expand GQA heads with
//     repeat_kv (a copy), batch·KV·sk·d with Flash (and for a single KV
//     head, whose expansion is a view: see below);
//   - out: batch·sq·H·dv, the input of the output projection (eager: the
//     contiguous transpose of probs@v; fused: the kernel's output itself,
//     which the kernel also saves);
//   - eager: the probabilities P = batch·H·sq·sk: softmax saves its result
//     (4·P with the fp32 upcast, else e·P); probs@v saves the probabilities
//     it multiplies: the cast copy (e·P) after an upcast, or with dropout
//     the 1-byte mask plus the dropped copy ((1+e)·P);
//   - SDPA: an fp32 log-sum-exp of batch·H·ceil32(sq); Flash: of batch·H·sq.
//
// part is the portion selective recomputation drops.
func (c *actCalc) attention(bl *actBlock, sh actShape, sq, sk int64) (saved, part, fwd, bwd, attnFlops, live int64) {
	if sh.math(bl) {
		return c.mathAttention(bl, sh, sq, sk)
	}
	b, e := sh.b, sh.e
	kvH := bl.H
	switch {
	case sh.k == Flash:
		kvH = bl.KV
	case bl.KV == 1 && (sh.k == SDPA || b == 1):
		// MQA: repeat_kv's expand+reshape of a single KV head is a
		// stride-0 view, not a copy; SDPA saves that view, and eager's
		// matmul reshapes it without a copy when batch is 1.
		kvH = 1
	}
	q := c.m(e, b, bl.H, sq, bl.d)
	k := c.m(e, b, kvH, sk, bl.d)
	v := c.m(e, b, kvH, sk, bl.dv)
	out := c.m(e, b, sq, bl.H, bl.dv)
	P := c.m(b, bl.H, sq, sk)
	switch sh.k {
	case Eager:
		sm := e // softmax saves its result, in fp32 after an upcast
		if (bl.upcast && sh.softmax != SoftmaxNative) || sh.softmax == SoftmaxFP32 {
			sm = 4
		}
		// The dropout's input: the probabilities in the compute dtype
		// (after an upcast, its cast back: eager_attention_forward's
		// .to(query.dtype)).
		dropIn := e
		if sm == e && sh.autocast && sh.softmax == SoftmaxDefault && (bl.floatMask || !sh.cpu) {
			// CUDA autocast lists softmax as fp32_set_opt_dtype
			// (aten/src/ATen/autocast_mode.cpp, v2.6.0: KERNEL_CUDA
			// softmax): an fp32 result from 16-bit scores in every
			// family; the CPU's lists do not, which leaves the fp32
			// result to the float-mask families below.
			// CPU autocast: the float mask, fp32 as the embeddings
			// (see decoderOnly), promotes the 16-bit scores to fp32,
			// and the CPU's softmax, on no autocast list
			// (autocast_mode.cpp, v2.6.0; validation row
			// autocast-cpu-dtypes), keeps its input's dtype: an fp32
			// result. (CUDA autocast lists softmax as fp32 too.)
			sm, dropIn = 4, 4
			if bl.castBack {
				dropIn = e
			}
		}
		part = c.m(sm, P)
		switch {
		case sh.drop && bl.attnDrop:
			// The mask (the CPU's noise, in the dropout input's dtype)
			// and the dropped copy saved by probs@v (a 16-bit cast of it
			// under autocast).
			noise := sh.mask
			if sh.cpu {
				noise = dropIn
			}
			part = c.a(part, c.m(noise+e, P))
		case sm != e:
			part = c.a(part, c.m(e, P)) // the cast copy, saved by probs@v
		}
		if bl.softcap {
			part = c.a(part, c.m(e, P))
		}
		if bl.sinks {
			// gpt_oss eager_attention_forward (transformers v4.55.0
			// modeling_gpt_oss.py): softmax over [scores, sink] saves its
			// b·H·sq·(sk+1) result (the sink column: e·b·H·sq more), the
			// max for the shift saves int64 indices (8·b·H·sq), and
			// probs[..., :-1] is a strided view that matmul copies to
			// contiguous for the bmm, which saves the copy (e·P).
			part = c.a(part, c.m(e, P), c.m(8+e, b, bl.H, sq))
		}
		if bl.scalar {
			part = c.a(part, e)
		}
		// Forward: q@kᵀ and its scaled/masked copy live together (2·e·P),
		// for one chunk of heads when the heads are chunked. An fp32
		// softmax of 16-bit scores (softmax(x, dtype=torch.float32),
		// aten/src/ATen/native/SoftMax.cpp): on CUDA an fp16 input goes
		// to _softmax(x, half_to_float=true), any other is first
		// converted (input_.toType(Float), a 4-byte copy), so a bf16
		// softmax holds its input (e), that copy (4) and its fp32
		// result (4) at once, then the input, the result and the
		// .to(query.dtype) copy (e + 4 + e).
		conv := int64(0)
		if sm == 4 && e != 4 && !sh.half {
			conv = 4
		}
		Pc := P
		if sh.hc > 0 && sh.hc < bl.H {
			Pc = c.m(b, sh.hc, sq, sk)
		}
		// With a graph the result (and the cast copy) are saved: the
		// transient is the input and the conversion's copy.
		fwd = c.m(actMax(2*e, e+conv), Pc)
		// Without a graph: q, k, v and the largest of those two copies,
		// the softmax's input, conversion and result, or its input,
		// result and cast copy.
		live = c.a(q, k, v, c.m(actMax(2*e, e+conv+sm, sm+2*e*actB2i(sm != e)), Pc))
		if bl.keepsScores {
			live = actMax(live, c.a(q, k, c.m(2, v), out, c.m(2*e, Pc)))
		}
		// Backward: the gradient of the probabilities, its fp32 copy
		// after an upcast, and softmax's input gradient.
		if sm != e {
			bwd = c.m(4+2*e, P)
		} else {
			bwd = c.m(2*e, P)
		}
	case SDPA:
		rows, _ := checked.CeilDiv(sq, 32)
		part = c.m(4, b, bl.H, rows, 32)
		// Backward: fp32 gradient accumulators for q and the gradients of
		// q, k, v.
		bwd = c.a(c.m(4, b, bl.H, sq, bl.d), q, k, v)
	default: // Flash
		part = c.m(4, b, bl.H, sq)
		// Backward: dq accumulated in fp32, dq, dk and dv at all heads
		// before the GQA reduction, and the fp32 rowwise dot(dO, O).
		bwd = c.a(c.m(4, b, bl.H, sq, bl.d), q, c.m(e, b, bl.H, sk, bl.d), c.m(e, b, bl.H, sk, bl.dv), c.m(4, b, bl.H, sq))
	}
	saved = c.a(q, k, v, out, part)
	if bl.fusedQKV && sh.k != Eager && sh.gqa {
		// A forward that holds a cache (Workload.NoAttentionMask: a
		// training forward without checkpointing, whose use_cache
		// defaults to true) hands the kernel the cache's k and v:
		// DynamicLayer.update (cache_utils.py, transformers v4.57.1)
		// returns torch.cat([self.keys, key_states], dim=-2), new
		// tensors, while q stays a view of c_attn's output
		// (GPT2Attention.forward splits it), whose whole storage the
		// kernel's saved q keeps: k and v once more (recorded,
		// testdata/measured/cpu/saved).
		saved = c.a(saved, k, v)
	}
	if sh.k != Eager {
		live = saved
	}
	attnFlops = c.m(2, b, bl.H, sq, sk, bl.d+bl.dv)
	return saved, part, fwd, bwd, attnFlops, live
}

// block returns one block's figures. For example, one LlamaDecoderLayer
// in bf16 (e = 2) with eager attention, T = b·s tokens, op by op:
//
//	input_layernorm  x.to(fp32): pow and the multiply save this copy   4·T·h
//	                 rsqrt(mean(x²)+eps): the multiply saves it         4·T
//	                 (x·rsqrt).to(bf16): weight·x saves it              2·T·h
//	q/k/v_proj       their input, the norm output (one storage)         2·T·h
//	RoPE             q·cos, rotate_half(q)·sin save cos and sin only
//	                 (they need no grad): counted once in Shared
//	q @ kᵀ           the roped q, and k expanded by repeat_kv (a copy)  2·b·H·s·d each
//	softmax(fp32)    its fp32 result                                    4·b·H·s²
//	.to(bf16)        the cast copy, saved by probs @ v                  2·b·H·s²
//	probs @ v        v expanded by repeat_kv                            2·b·H·s·d
//	o_proj           its input, the contiguous transpose of probs @ v   2·T·H·d
//	post_attention_layernorm, as input_layernorm                        4·T·h + 4·T + 2·T·h
//	gate/up_proj     their input, the norm output                       2·T·h
//	SiLU             its input, the gate output                         2·T·I
//	silu(g) · up     both factors: SiLU's output and up's output        2·2·T·I
//	down_proj        its input, the product                             2·T·I
//
// GPT-2 instead: LayerNorm saves its input and fp32 mean and rstd
// (e·T·h + 8·T), c_attn its input; torch.matmul copies q, k and v out of
// the fused c_attn output (the fused storage itself is not saved); the
// scores are divided by a 0-dim device tensor (saved: e bytes); softmax
// saves its result in the compute dtype; gelu_new, written in Python ops,
// saves x (pow), tanh's result, 0.5·x and 1+tanh, and c_proj saves their
// product: 5·e·T·I where a fused GELU keeps 2·e·T·I. Dropout saves a
// 1-byte mask per element and, on the probabilities, the dropped copy
// that probs @ v then saves instead of the softmax output.
//
// In general, a pre-norm block (llama, GPT-2):
//
//	norm1 (normSaved) → its output, saved by q/k/v (e·T·h)
//	[q/k norms] → attention core (see attention) → [post-attention norm]
//	→ residual dropout mask (T·h) → norm2 → its output, saved by the
//	MLP's input projections (e·T·h) → MLP (act.tensors()·e·T·I) →
//	[post-MLP norm] → residual dropout mask (T·h).
//
// A post-norm block (BERT) saves its input (by q/k/v), the attention core,
// norm1's input and output and norm2's input; its output is the next
// block's input. A parallel block (falcon, phi, neox) normalizes the input
// once or twice (the input is saved once), then runs attention and MLP on
// the normed input. A decoder block with cross-attention adds a norm, the
// query projection's input and a core over sk encoder positions; the
// encoder output that its k/v projections save is shared by all blocks
// ([Activations.Shared]).
func (c *actCalc) block(bl *actBlock, sh actShape) actCost {
	b, s, e := sh.b, sh.s, sh.e
	T := c.m(b, s)
	// Th is the tokens of the per-token tensors tensor parallelism
	// leaves whole (norms, dropout masks, block input, projection
	// inputs): all T, or T/t of them under sequence parallelism.
	Th := T
	if sh.sp > 1 {
		Th, _ = checked.CeilDiv(T, sh.sp)
	}
	eTh := c.m(e, Th, bl.h)
	var x actCost
	x.input = eTh
	norm := c.normSaved(bl.norm, Th, bl.h, e)
	var saved int64
	switch {
	case bl.post && sh.autocast && !sh.compiled && e != 4 && bl.qkvIn > 0:
		saved = c.autocastPostSaved(bl, Th, eTh) // the fp32 residual stream (autocastPostSaved)
	case bl.post:
		saved = c.a(eTh, norm, eTh, norm) // input; norm1 input+stats; norm1 output; norm2 input+stats
	case bl.parallel && sh.autocast && e != 4 && bl.qkvIn > 0 && bl.norm == actLN:
		// One fp32 LayerNorm read by every projection (autocastNorms).
		saved = c.a(c.normSaved(bl.norm, Th, bl.h, 4), c.m(bl.qkvIn+bl.mlpIn, eTh))
	case bl.parallel:
		saved = c.a(norm, eTh)
		if bl.pnorms > 1 {
			// The second norm reads the same input storage: only its
			// statistics (and normalized copy for RMS) are new.
			saved = c.a(saved, c.normSaved(bl.norm, Th, bl.h, e)-eTh, eTh)
		}
	case sh.autocast && !sh.compiled && e != 4 && bl.qkvIn > 0 && (bl.norm == actRMS || bl.norm == actLN) && !bl.sandwich && bl.mla == nil:
		// The fp32 residual stream under autocast (autocastNorms). A
		// compiled block fuses the casts (the partitioner's set below,
		// measured: testdata/measured/cpu/compile-*.jsonl).
		an := c.normSaved(bl.norm, Th, bl.h, 4)
		saved = c.a(an, c.m(bl.qkvIn, eTh), an, c.m(bl.mlpIn, eTh))
	default:
		if sh.compiled {
			// Compiled (compile.go): each RMSNorm saves its input in its
			// own dtype and rsqrt; the fp32 upcast and the normalized
			// rows are recomputed in backward: 4·T·h less.
			norm -= c.m(4, Th, bl.h)
		}
		saved = c.a(norm, eTh, norm, eTh)
		if bl.sandwich {
			saved = c.a(saved, norm, norm)
		}
		if bl.norm == actT5RMS && sh.autocast && !sh.compiled && e != 4 && bl.qkvIn > 1 {
			// T5's fp32 LayerNorm output under autocast: q, k and v
			// each save their own 16-bit cast of it (t5Autocast).
			saved = c.a(saved, c.m(bl.qkvIn-1, eTh))
		}
	}
	if bl.qkNorm {
		// Per-head norms of q and k before RoPE (qwen3: llama-style;
		// gemma3: Gemma's). RoPE saves only cos and sin, so the norms'
		// outputs are not saved; the roped q and k are, in the core.
		qk := actRMS
		if bl.norm == actGemmaRMS {
			qk = actGemmaRMS
		}
		saved = c.a(saved, c.normSaved(qk, c.m(T, bl.H), bl.d, e), c.normSaved(qk, c.m(T, bl.KV), bl.d, e))
	}
	if bl.mla != nil {
		// DeepSeek MLA: the latent projections and their RMSNorms save the
		// q and kv latents (q_a_layernorm, kv_a_layernorm) and their
		// normalized outputs; the decompressed q, k, v enter the core.
		m := bl.mla
		if m.QLoRARank > 0 {
			saved = c.a(saved, c.normSaved(actRMS, T, m.QLoRARank, e), c.m(e, T, m.QLoRARank))
		}
		saved = c.a(saved, c.normSaved(actRMS, T, m.KVLoRARank, e), c.m(e, T, m.KVLoRARank))
	}
	as, ap, af, ab, aflops, alive := c.attention(bl, sh, s, s)
	saved = c.a(saved, as)
	if bl.outCopy && sh.k != Eager {
		saved = c.a(saved, c.m(e, T, bl.H, bl.dv))
	}
	x.attn = ap
	x.fwd, x.bwd = af, ab
	x.attnFlops = aflops
	if sh.drop {
		saved = c.a(saved, c.m(bl.residDrop, sh.mask, Th, bl.h))
	}
	if bl.cross {
		cs, cp, cf, cb, cflops, clive := c.attention(bl, sh, s, sh.sk)
		alive = actMax(alive, clive)
		// The cross core's k and v are projections of the encoder output
		// and are this block's own; the query's input is norm3's output.
		cn := norm
		if sh.autocast && !sh.compiled && e != 4 && bl.qkvIn > 0 && bl.norm == actLN {
			cn = c.normSaved(bl.norm, Th, bl.h, 4) // the fp32 residual stream (autocastNorms)
		}
		saved = c.a(saved, cn, eTh, cs)
		x.attn = c.a(x.attn, cp)
		x.fwd, x.bwd = actMax(x.fwd, cf), actMax(x.bwd, cb)
		x.attnFlops = c.a(x.attnFlops, cflops)
	}
	// MLP.
	var mlp, mlpBwd int64
	if bl.moe != nil {
		mlp, mlpBwd = c.moe(bl, T, e)
	} else {
		eTI := c.m(e, T, bl.I)
		n := bl.act.tensors()
		if sh.compiled && bl.act == actGated {
			// Compiled (compile.go): SiLU(gate) is recomputed from the
			// saved gate; gate, up and their product are saved.
			n--
		}
		mlp = c.m(n, eTI)
		if sh.drop && bl.mlpDrop {
			mlp = c.a(mlp, c.m(sh.mask, T, bl.I))
			if bl.act == actReLU {
				mlp = c.a(mlp, eTI)
			}
		}
		// Backward: the gradient of the down projection's input
		// replaces that input (saved by the projection, released once
		// its node has run), and the activation's backward makes the
		// gradients of its inputs (gated: of act(gate) and up, with
		// the product's gradient): two T·I tensors more than saved at
		// most (measured, tools/oracle/step.py block_backward). A
		// plain activation's backward makes one, its input's gradient,
		// beside the gradient of the down projection's input (which
		// replaced that saved input) and the gradient of the block's
		// output, which the residual branch still holds: one T·I and
		// one T·h more than saved (measured on the CPU,
		// testdata/measured/cpu, ViT fp32 training rows: GeluBackward0
		// is the peak, at the last block's saved tensors less fc2's
		// input, plus its gradient, GELU's and the block output's).
		mlpBwd = c.m(2, eTI)
		if !bl.act.gated() {
			mlpBwd = c.a(eTI, c.m(e, T, bl.h))
		}
		if bl.act == actQuickGELU {
			// input * sigmoid(1.702 * input) runs as three autograd
			// nodes: MulBackward0 makes the gradients of both factors
			// (grad·sigmoid and grad·input) before SigmoidBackward0
			// reads the second: one T·I more than a fused GELU's
			// backward (measured on the CPU, testdata/measured/cpu,
			// CLIP fp32 training rows).
			mlpBwd = c.a(mlpBwd, eTI)
		}
	}
	saved = c.a(saved, mlp)
	if sh.fz.on() && ((!bl.post && !bl.parallel && !bl.sandwich && !bl.cross && bl.mla == nil) || sh.fz.inputOnly(bl)) {
		less, more := c.frozenSavings(bl, sh, sh.k == Eager || sh.math(bl))
		if sh.fz.Input {
			less = c.frozenInputSavings(bl, sh, less) // FrozenInput
		}
		saved = c.a(actMax(0, saved-less), more)
		mlpBwd = c.a(mlpBwd, c.frozenMLPBackward(bl, sh))
	}
	x.saved = saved
	lastPart := ap
	if bl.cross {
		lastPart = x.attn - ap
	}
	x.tail = c.a(lastPart, c.m(e, T, bl.H, bl.dv), mlp)
	// Rotary and head-splitting temporaries in forward: about three
	// copies of q.
	x.fwd = actMax(x.fwd, c.m(3, e, T, bl.H, bl.d))
	// Without a graph the MLP holds about three T·I tensors at once
	// (gated: act(gate), up and their product), two for a plain
	// activation; an MoE block one expert's worth, bounded by all tokens
	// going to one expert. gelu_new holds four: NewGELUActivation.forward
	// (transformers src/transformers/activations.py at v4.57.1) is
	// 0.5 * input * (1.0 + torch.tanh(c * (input + 0.044715 *
	// torch.pow(input, 3.0)))), which Python evaluates left first, so
	// 0.5·input stays alive beside the caller's input while each step of
	// the right operand makes its result from the previous one: input,
	// 0.5·input and two temporaries at every step.
	inner, n := bl.I, int64(2)
	if bl.moe != nil {
		inner = bl.moe.Intermediate
	}
	if bl.act.gated() || bl.moe != nil {
		n = 3
	}
	if bl.act == actQuickGELU {
		// QuickGELUActivation.forward (activations.py at v4.57.1):
		// input * torch.sigmoid(1.702 * input), the input and the
		// sigmoid alive while the product is made. Measured on the CPU
		// (testdata/measured/cpu, CLIP prefill rows).
		n = 3
	}
	if bl.act == actGELUNew {
		n = 4
	}
	mlpLive := c.m(n, e, T, inner)
	if sh.k == Eager && bl.heldWeights {
		// The probabilities the layer holds (heldWeightsFamilies), in
		// the compute dtype eager_attention_forward returns them in;
		// a loop over head slices (Workload.HeadChunk) returns its
		// last slice's.
		heads := bl.H
		if sh.hc > 0 && sh.hc < bl.H {
			heads = sh.hc
		}
		mlpLive = c.a(mlpLive, c.m(e, sh.b, heads, sh.s, sh.s))
	}
	held, heldAttn := eTh, eTh
	if bl.heldHidden > 1 {
		held, heldAttn = c.m(bl.heldHidden, eTh), c.m(bl.heldAttn, eTh)
	}
	x.noGrad = actMax(c.a(actMax(c.a(heldAttn, alive), c.a(held, mlpLive)), bl.heldBias), bl.firstMoment)
	// Backward runs the block in reverse: the MLP's backward first,
	// with every tensor the block saved still alive, then the
	// attention's, once the MLP's saved tensors are released (autograd
	// frees a node's saved tensors when it has run). So the attention
	// core's transient sits on the block's saved bytes without the
	// MLP's. A parallel block (falcon, phi, neox) runs both branches on
	// one input and has no such order.
	attnBwd := x.bwd
	if !bl.parallel {
		attnBwd = actMax(0, attnBwd-mlp)
	}
	x.bwd = actMax(attnBwd, mlpBwd)
	x.flops = c.a(c.flops(bl, T, sh), aflops)
	if bl.cross {
		x.flops = c.a(x.flops, x.attnFlops-aflops, c.m(2, T, bl.h, bl.H, bl.d), c.m(2, T, bl.H, bl.dv, bl.h), c.m(2, sh.b, sh.sk, bl.h, bl.KV, bl.d+bl.dv))
	}
	return x
}

// moe returns what a mixture-of-experts MLP saves (Mixtral's
// MixtralSparseMoeBlock, Qwen2-MoE, DeepSeek), for T tokens each routed
// to Active of Experts experts without capacity limits (Hugging Face's
// implementations drop no token):
//
//   - router: the gate's input is the norm output (already counted); the
//     fp32 softmax of T·E logits (4·T·E), top-k indices (8·T·k), the
//     in-place renormalization's fp32 weights and their sum (4·T·k + 4·T;
//     JambaSparseMoeBlock casts the top-k softmax without renormalizing:
//     none);
//   - per routed token: the torch.where indices of the expert mask (top_x
//     and idx, two int64 views of one nonzero() result: 16), the gathered
//     input (e·h, saved by w1 and w3), the expert's SwiGLU (4·e·I_expert),
//     the expert output and its routing weight, both saved by their product
//     (e·h + e), and that product, saved by index_add_ as its source (e·h);
//   - shared experts: one SwiGLU over all tokens (4·e·T·I_shared), with
//     Qwen2-MoE's sigmoid gate (e·T) and gated product (e·T·h).
func (c *actCalc) moe(bl *actBlock, T, e int64) (saved, bwd int64) {
	m := bl.moe
	Tk := c.m(T, m.Active)
	saved = c.a(c.m(4, T, m.Experts), c.m(8, Tk))
	if !bl.noRenorm {
		saved = c.a(saved, c.m(4, Tk), c.m(4, T))
	}
	per := c.a(c.m(3, e, bl.h), c.m(4, e, m.Intermediate), e, 16)
	saved = c.a(saved, c.m(Tk, per))
	if m.Shared > 0 && m.SharedIntermediate > 0 {
		saved = c.a(saved, c.m(4, e, T, m.SharedIntermediate), c.m(e, T), c.m(e, T, bl.h))
	}
	bwd = c.m(3, e, Tk, m.Intermediate)
	return saved, bwd
}
