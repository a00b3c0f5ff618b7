package model

// Activations of decoder-only language models and of the heads on top: the
// LM head's logits and the task heads.

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// decoderOnly fills a for a decoder-only (or BERT-style encoder-only)
// language model with seq tokens per sequence, under part.
func (c *actCalc) decoderOnly(a *Activations, s *Spec, w Workload, e int64, part string, seq int64) {
	sh := actShape{b: w.Batch, s: seq, e: e, k: w.Attention, hc: w.HeadChunk, drop: w.Dropout, mask: w.dropMask(e), cpu: w.Backend == CPU, gqa: w.NoAttentionMask, autocast: w.Autocast, softmax: w.Softmax, half: w.computeDType(s) == gpumem.FP16}
	sh.causal = c.layoutOf(s) != layoutBERT
	if w.Train {
		sh.fz = w.FrozenBase
	}
	shared0 := a.Shared // a vision tower's, before the language model's
	bl := c.decoderBlock(s)
	a.Tokens = seq
	T := c.m(w.Batch, seq)
	layers := s.Layers
	if s.MoE.Experts > 0 {
		step := actMax(1, s.MoE.Step)
		dense := s.MoE.DenseFirst
		if dense > layers {
			dense = layers
		}
		// Layer i >= dense is an MoE layer when (i+1) % step == 0
		// (qwen2_moe decoder_sparse_step, deepseek moe_layer_freq): the
		// multiples of step in (dense, layers].
		moeLayers := layers/step - dense/step
		if dense+moeLayers < layers || dense > 0 {
			c.stack(a, w, part, "dense", &bl, sh, layers-moeLayers, w.Train)
		}
		mb := bl
		m := s.MoE
		if s.Family == "llama4_text" {
			// Llama4TextMoe.forward (transformers v4.51.0
			// modeling_llama4.py) is dropless and dense: it repeats every
			// token for every expert (hidden_states.repeat(num_experts, 1)),
			// scales by the sigmoid router scores, zero for the experts not
			// chosen, and runs all experts in one bmm, so each expert
			// sees every token.
			m.Active = m.Experts
		}
		mb.moe = &m
		c.stack(a, w, part, "moe", &mb, sh, moeLayers, w.Train)
	} else {
		c.stack(a, w, part, "decoder", &bl, sh, layers, w.Train)
		if fb := bl; sh.fz.Rank > 0 && layers > 0 && !bl.post && !bl.parallel && !bl.sandwich && bl.mla == nil && w.Checkpointing == NoCheckpointing && w.tp() == 1 {
			// The first block's input needs no gradient (FrozenBase).
			ls := c.layers()
			l := &ls[len(ls)-1]
			l.KeptTotal -= min(l.Kept, gpumem.Bytes(c.frozenFirst(&fb, sh, sh.math(&fb))))
		}
	}
	l := c.layoutOf(s)
	// Per-token tensors outside the blocks: whole on every tensor-parallel
	// rank, a 1/t slice of the sequence under sequence parallelism.
	Th := T
	if sp := w.sp(); sp > 1 {
		Th, _ = checked.CeilDiv(T, sp)
	}
	eTh := c.m(e, Th, s.Hidden)
	// Rotary tables: cos and sin, batch·seq·head_dim each, computed once
	// (LlamaRotaryEmbedding) and saved by every block's q·cos, k·cos.
	switch l {
	case layoutLlama, layoutPhi3, layoutPhi, layoutFalcon, layoutNeoX:
		if s.Family == "bloom" {
			// BLOOM has no rotary tables: build_alibi_tensor's
			// (batch·heads, 1, seq) bias in the compute dtype
			// (modeling_bloom.py), passed to every block.
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(e, w.Batch, s.Heads, seq)))
		} else {
			// Under autocast the tables take the dtype of the fp32
			// embeddings (LlamaRotaryEmbedding.forward returns
			// cos.to(dtype=x.dtype)), and q·cos promotes (autocastNorms).
			re := e
			if w.Autocast && w.Train && bl.qkvIn > 0 {
				re = 4
			}
			// A training forward is given no position_ids, and
			// LlamaModel.forward makes them cache_position.unsqueeze(0):
			// one row of tables for the whole batch (measured:
			// testdata/measured/cpu/saved); generate() passes each
			// sequence's own.
			rT := T
			if w.Train {
				rT = seq
			}
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(2, re, rT, bl.d)))
		}
		if w.Train && w.Attention == Eager && (w.Checkpointing == FullCheckpointing || w.Checkpointing == EveryKCheckpointing) {
			// A reentrant checkpoint saves the block's tensor arguments:
			// the eager 4-D causal mask too (s·s in the compute dtype,
			// one storage expanded over the batch).
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(e, seq, seq)))
		}
	case layoutOPT:
		if w.Train && w.Attention == Eager && (w.Checkpointing == FullCheckpointing || w.Checkpointing == EveryKCheckpointing) {
			// OPTDecoder (v4.45) makes an attention mask of ones when
			// none is given and _prepare_4d_causal_attention_mask
			// combines it with the causal mask: a [b, 1, s, s] tensor
			// in the compute dtype, which the reentrant checkpoint saves
			// as a block argument.
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(e, w.Batch, seq, seq)))
		}
	}
	// Embedding: the lookup saves the ids (counted in TokenIDs); BERT's
	// embedding LayerNorm saves its input and statistics; embedding
	// dropout saves a mask. OPTDecoder.forward applies none (its
	// config.dropout is used by the layers' two residual dropouts only,
	// modeling_opt.py at transformers v4.57.1, commit 8cb5963c; the CPU
	// rows' drop − nodrop differences hold four noise tensors for two
	// layers, not five).
	emb := int64(0)
	if l == layoutBERT {
		ne := e
		if w.Autocast && w.Train {
			// The sum of the fp32 embedding rows, on no autocast list:
			// the LayerNorm saves it in fp32 (autocastPostSaved).
			ne = 4
		}
		emb = c.normSaved(actLN, Th, s.Hidden, ne)
	}
	if w.Dropout && (l == layoutBERT || l == layoutGPT2 || l == layoutBigCode || l == layoutCLIPText) {
		de := e
		if w.Autocast {
			de = 4 // the fp32 embeddings under autocast: the CPU's noise is fp32 (autocastNorms)
		}
		emb = c.a(emb, c.m(w.dropMask(de), Th, s.Hidden))
	}
	if s.Family == "gemma" || s.Family == "gemma2" || s.Family == "gemma3_text" {
		emb = c.a(emb, e) // the sqrt(hidden) normalizer, a 0-dim device tensor
	}
	if l == layoutGPT2 && w.Train && !w.FrozenBase.Input {
		// wpe saves its indices, the position ids GPT2Model.forward
		// makes once as cache_position.unsqueeze(0): one int64 row
		// (modeling_gpt2.py v4.57.1; testdata/measured/cpu/saved),
		// counted with the tables the model computes once. A frozen
		// wpe (FrozenInput) records nothing.
		a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(8, seq)))
	}
	a.Embedding = gpumem.Bytes(c.a(int64(a.Embedding), emb))
	// The head's class: BERT's default is its masked-LM head, a
	// decoder's a causal LM head.
	kind := s.Head
	if kind == HeadDefault || kind == HeadCausalLM {
		kind = HeadCausalLM
		if l == layoutBERT {
			kind = HeadMaskedLM
		}
	}
	lm := kind == HeadCausalLM || kind == HeadMaskedLM
	// Final norm: the last block's output and the norm's own tensors.
	var fin int64
	switch {
	case l == layoutBERT && !lm:
		// Post-LN: the last block's output LayerNorm saved its input;
		// its output is saved by the task head (taskHead).
	case l == layoutBERT:
		// BertPredictionHeadTransform: dense input, GELU input, LayerNorm.
		fin = c.a(eTh, eTh, c.normSaved(actLN, Th, s.Hidden, e))
		if sh.fz.Input {
			fin -= eTh // a frozen dense saves no input (FrozenInput)
		}
	case bl.post || s.NoFinalNorm:
		fin = eTh // the last block's output, saved by the head
		if bl.post {
			fin = 0
		}
	case w.Autocast && w.Train && w.Compile&CompileHead == 0 && e != 4 && bl.qkvIn > 0 && (bl.norm == actRMS || bl.norm == actLN) && !bl.sandwich && bl.mla == nil:
		fin = c.normSaved(bl.norm, Th, s.Hidden, 4) // the fp32 residual stream (autocastNorms)
		if sh.fz.Input {
			fin -= c.normCopy(bl.norm, Th, s.Hidden, 4) // a frozen weight (FrozenInput)
		}
	default:
		fin = c.normSaved(bl.norm, Th, s.Hidden, e)
		if w.Train && w.Compile&CompileHead != 0 {
			// The final norm in the compiled graph: its input and
			// rsqrt, as a compiled block's norms (compile.go).
			fin -= c.m(4, Th, s.Hidden)
		} else if sh.fz.on() {
			fin -= c.normCopy(bl.norm, Th, s.Hidden, e) // a frozen weight (FrozenBase)
		}
	}
	a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), fin))
	var flops int64
	for _, x := range c.layers() {
		flops = c.a(flops, c.m(x.FLOPs, x.Count))
	}
	if !w.Train {
		// Without a graph nothing is saved, but what the model computes
		// once and hands to every block lives through all of them: the
		// rotary cos/sin tables (or BLOOM's ALiBi bias), and with eager
		// attention the 4-D additive mask. transformers' eager_mask
		// (masking_utils.py, v4.53 on: create_causal_mask and the
		// bidirectional masks of the encoders) turns the boolean
		// [b, 1, s, s] mask, a broadcast view, into a float one with
		// torch.where(mask, 0.0, finfo.min), a dense b·s² tensor in the
		// compute dtype.
		a.FinalNorm, a.Embedding = 0, 0
		a.Shared -= shared0
		if w.Attention == Eager {
			// Under autocast the mask takes the dtype of the input
			// embeddings, fp32 with fp32 weights, and so do the masked
			// scores (a bf16 + fp32 add promotes): the softmax then
			// holds the same 10 bytes per score as a bf16 one
			// converting its input (attention), and the mask 4 per entry.
			me := e
			if w.Autocast {
				me = 4
			}
			a.Shared = gpumem.Bytes(c.a(int64(a.Shared), c.m(me, w.Batch, seq, seq)))
		}
	}
	if !lm {
		a.FLOPs = c.a(a.FLOPs, flops)
		c.taskHead(a, *s, w, kind, e, T, Th, l != layoutBERT && s.NoFinalNorm && !bl.post)
		if sh.fz.Input && part == "" {
			c.frozenEmbeds(a, s, e, T, kind != HeadImageCls)
		}
		c.finish(a, w)
		return
	}
	c.head(a, s, w, e, T, Th, l == layoutBERT || (s.NoFinalNorm && !bl.post))
	if sh.fz.Input && part == "" {
		c.frozenEmbeds(a, s, e, T, true)
	}
	V, _ := checked.CeilDiv(s.Vocab, w.tp())
	a.FLOPs = c.a(a.FLOPs, flops, c.m(2, T, s.Hidden, V))
	c.finish(a, w)
}

// taskHead sets the head, logits and loss of a classification or
// question-answering head (see [Head]) over T tokens of which Th are this
// rank's (sequence parallelism), with the loss CrossEntropyLoss computes
// on the logits in the compute dtype:
//
//   - the head's input, the last hidden state (e·Th·h; counted in
//     FinalNorm when inputCounted): the classifier's or score's input,
//     or the storage of the first-token slice that BERT's pooler,
//     RoBERTa's classification head and ViT's classifier read;
//   - BERT/RoBERTa sequence classification: the pooler's (or the
//     classification head's) tanh output, e·B·h, with dropout a 1-byte
//     mask and the dropped copy (B·h + e·B·h); decoders' sequence
//     classification: score runs at every position (T·labels, a
//     transient) and the logits of the last non-pad token are gathered,
//     saving two int64 index vectors (16·B); token classification with
//     dropout: the mask (Th·h);
//   - logits of rows × labels: B rows for sequence and image
//     classification, T for token classification, T × 2 (start, end)
//     for question answering; log-softmax (e per logit), its 0-dim fp32
//     total weight (two for question answering: start and end losses),
//     the loss gradient (2·e per logit);
//   - ids (8·T, none for images) and labels (8·B; 8·T for token
//     classification; 16·B for start and end positions).
func (c *actCalc) taskHead(a *Activations, s Spec, w Workload, kind Head, e, T, Th int64, inputCounted bool) {
	B, H, L := w.Batch, s.Hidden, s.labels()
	bert := layoutOf(&s) == layoutBERT
	rows, flopRows, labels, losses := T, T, c.m(8, T), int64(1)
	switch kind {
	case HeadSeqCls, HeadImageCls:
		rows, labels = B, c.m(8, B)
		if bert || kind == HeadImageCls {
			flopRows = B
		}
	case HeadQA:
		labels, losses = c.m(16, B), 2
	}
	elems := c.m(rows, L)
	a.Logits = gpumem.Bytes(c.a(int64(a.Logits), c.m(e, elems)))
	flops := c.m(2, flopRows, H, L)
	if bert && kind == HeadSeqCls {
		flops = c.a(flops, c.m(2, B, H, H)) // pooler, or RoBERTa's classifier.dense
	}
	a.FLOPs = c.a(a.FLOPs, flops)
	if !w.Train {
		return
	}
	h := int64(0)
	if !inputCounted {
		h = c.m(e, Th, H)
	}
	switch {
	case kind == HeadSeqCls && bert:
		h = c.a(h, c.m(e, B, H))
		if w.Dropout {
			h = c.a(h, c.m(w.dropMask(e), B, H), c.m(e, B, H))
		}
	case kind == HeadSeqCls:
		h = c.a(h, c.m(16, B))
	case kind == HeadTokenCls && w.Dropout:
		h = c.a(h, c.m(w.dropMask(e), Th, H))
	}
	a.Head = gpumem.Bytes(c.a(int64(a.Head), h, c.m(e, elems), c.m(4, losses)))
	ids := c.m(8, T)
	if kind == HeadImageCls {
		ids = 0
	}
	a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), ids, labels))
	a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), c.m(2, e, elems)))
}

// head sets the LM head, logits and loss of a language model with T
// tokens: the head's input (e·T·h; counted in FinalNorm when it is the
// last block's output), cross_entropy's log-softmax (T·V) and its 0-dim
// fp32 total weight, the logits (e·T·V), the loss gradient (8·T·V); ids
// and labels are int64 (16·T). Causal LMs compute the loss through
// transformers' ForCausalLMLoss, which upcasts the logits to fp32 first
// (logits.float(): LogitsFP32, and an fp32 log-softmax); BERT's MLM loss,
// T5 and Whisper call CrossEntropyLoss on the logits as they are.
//
// Under tensor parallelism the head is vocab-parallel (Megatron's
// VocabParallelEmbedding and vocab-parallel cross entropy): each rank
// holds Vocab/t columns of the logits, their fp32 copy, log-softmax and
// gradient. Th is the head input's tokens (T, or T/t under sequence
// parallelism).
func (c *actCalc) head(a *Activations, s *Spec, w Workload, e, T, Th int64, inputCounted bool) {
	V, _ := checked.CeilDiv(s.Vocab, w.tp())
	if w.Train && w.Loss.Kind != FullLoss {
		c.lossHead(a, *s, w, e, T, V, inputCounted)
		return
	}
	if k := w.LogitsToKeep; k > 0 && !w.Train && k < T/w.Batch {
		// logits_to_keep: the head projects the last k positions.
		a.Logits = gpumem.Bytes(c.a(int64(a.Logits), c.m(e, w.Batch, k, V)))
		return
	}
	TV := c.m(T, V)
	a.Logits = gpumem.Bytes(c.a(int64(a.Logits), c.m(e, TV)))
	if !w.Train && !w.Labels {
		return
	}
	h := int64(0)
	if !inputCounted && (!w.Train || !w.FrozenBase.on()) {
		h = c.m(e, Th, s.Hidden) // a frozen head saves no input (FrozenBase)
	}
	if c.layoutOf(s) == layoutBERT && !w.FrozenBase.Input {
		h = c.m(e, Th, s.Hidden) // the transform's LayerNorm output
	}
	if s.Family == "gemma2" {
		h = c.a(h, c.m(e, TV)) // final_logit_softcapping: tanh saves its result
	}
	if w.Train && w.Compile&CompileLoss != 0 {
		// Compiled loss (compile.go): the max and log-sum-exp of each
		// row (4·T each) are saved and the log-probabilities recomputed;
		// the 0-dim fp32 total weight too, as in eager.
		ids := c.m(16, T)
		if w.Batch == 1 {
			ids = c.a(ids, 8) // as below: a view of the padded labels
		}
		a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), ids))
		if w.Compile&CompileHead == 0 && e != 4 {
			// The loss alone compiled (torchtune's compile_loss): it is
			// given the logits upcast outside it (TransformerDecoder.
			// unembed: output(h).float(), torchtune/modules/
			// transformer.py), so it saves that fp32 copy, and its
			// backward makes the fp32 gradient beside it (4 per logit);
			// the upcast's backward casts it back once the compiled
			// backward has freed the copy (validation-compile rows:
			// eager 8, compiled 4 bytes per logit at the backward). The
			// copy is made in forward beside the logits, and it is the
			// saved copy (in Head): no other fp32 tensor of the logits.
			a.Head = gpumem.Bytes(c.a(int64(a.Head), h, c.m(4, TV), c.m(8, T), 4))
			a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), c.m(4, TV)))
			return
		}
		// With the head in the graph (the whole model compiled, whose
		// ForCausalLMLoss upcasts inside it): the logits (an mm output)
		// are saved in their dtype, no fp32 copy is made in forward,
		// and the backward writes the logits' gradient in their dtype.
		// The model also returns the logits, an output of the compiled
		// graph that the loss does not use: autograd hands the compiled
		// backward a zero gradient for it, materialized (a tangent of
		// AOTAutograd's backward graph, added into the logits'
		// gradient by the fused loss backward in Inductor's code), e
		// per logit more (measured on the CPU, compile-model rows).
		// Without checkpointing, transformers' decoder also returns its
		// DynamicCache in training (LlamaModel.forward makes one when
		// use_cache, the config's default, which only gradient
		// checkpointing turns off): every layer's roped k and v (KV
		// heads), outputs of the graph too, whose zero gradients are
		// materialized as well: k in fp32 under autocast (the fp32 cos
		// and sin promote it), v in e.
		grad := c.m(2*e, TV)
		if w.Checkpointing == NoCheckpointing {
			ke := e
			if w.Autocast {
				ke = 4
			}
			grad = c.a(grad, c.m(ke+e, s.Layers, T, s.KVHeads, s.HeadDim))
		}
		a.LogitsSaved = true
		a.Head = gpumem.Bytes(c.a(int64(a.Head), h, c.m(8, T), 4))
		a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), grad))
		return
	}
	lsm, causal := int64(4), true
	halfGrad := int64(0)
	switch c.layoutOf(s) {
	case layoutBERT, layoutT5, layoutWhisper:
		// CrossEntropyLoss on the logits as they are. (OPTForCausalLM
		// computed its own loss so up to v4.45; at v4.57.1 it calls
		// self.loss_function, ForCausalLMLoss of loss/loss_utils.py,
		// which upcasts the logits to fp32 and pads the labels: the
		// default case.)
		// Under autocast, cross_entropy's log_softmax is on the fp32
		// list (fp32_set_opt_dtype: log_softmax(x, dtype=float32)),
		// which on CUDA converts bf16 logits to an fp32 copy first
		// (fp16 ones are read directly, half_to_float; SoftMax.cpp):
		// an fp32 log-softmax, and for bf16 a transient fp32 copy.
		lsm, causal = e, false
		if w.Autocast && e != 4 {
			lsm = 4
			if w.computeDType(s) != gpumem.FP16 {
				a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(4, TV)))
			} else {
				// half_to_float's backward gives the gradient in fp16
				// (_log_softmax_backward_data to the input dtype): the
				// loss's fp32 gradient and that one.
				halfGrad = c.m(4+e, TV)
			}
		}
	default:
		if e != 4 {
			a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(4, TV)))
		}
	}
	if !w.Train {
		// Evaluation: nothing is saved, but cross_entropy's log-softmax
		// (lsm per logit) is made beside the upcast, both freed once
		// nll_loss has reduced them.
		a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(lsm, TV)))
		return
	}
	rows := TV
	if c.layoutOf(s) == layoutMamba {
		// MambaForCausalLM (transformers v4.57.1) computes its own loss:
		// logits[..., :-1, :].contiguous(), an fp32 copy of T − b rows
		// alive until the forward returns, whose CrossEntropyLoss saves
		// the log-softmax of those rows (testdata/oracle/mamba.json).
		rows = c.m(T-w.Batch, V)
		a.LogitsFP32 = gpumem.Bytes(c.a(int64(a.LogitsFP32), c.m(4, rows)))
	}
	a.Head = gpumem.Bytes(c.a(int64(a.Head), h, c.m(lsm, rows), 4))
	ids := c.m(16, T)
	if causal && w.Batch == 1 {
		// ForCausalLMLoss pads the labels by one and slices them:
		// with one sequence the slice is already contiguous, so the loss
		// saves a view of the padded (s+1)-long tensor.
		ids = c.a(ids, 8)
	}
	a.TokenIDs = gpumem.Bytes(c.a(int64(a.TokenIDs), ids))
	lossGrad := c.m(2*lsm, TV)
	if halfGrad > 0 {
		lossGrad = halfGrad
	}
	a.LossGrad = gpumem.Bytes(c.a(int64(a.LossGrad), lossGrad))
}
