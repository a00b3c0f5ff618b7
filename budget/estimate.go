package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Estimate returns the per-GPU memory j needs at its peak, component by
// component, and the phase that sets the peak.
//
// The peak is persistent state plus the largest transient of the phases
// (docs/architecture.md#the-peak-by-phase):
//
//   - persistent: weights (with autocast's 16-bit copies under AMP),
//     master weights, optimizer state, KV cache, buffers, frozen copies,
//     cuBLAS workspaces, and gradients when accumulation keeps them
//     between micro-batches;
//   - forward (training): every layer's saved activations, the logits
//     and the fp32 loss on top, and the last layer's attention
//     transient (Job.Loss replaces the logits and the fp32 loss by what
//     the chunked, Liger or cut cross-entropy loss holds: model/loss.go);
//   - backward: starting from all saved activations plus the logits'
//     gradient, each layer's activations are released as its gradients
//     appear; identical layers make the live bytes linear in the layer
//     index, so the peak is at the first or the last layer;
//   - optimizer step: every gradient plus the step's temporaries; no
//     such phase with OptimizerInBackward, whose per-parameter steps
//     run inside backward with one gradient at a time, nor with
//     Gradients NoStep or InputGradients;
//   - inference: weights and KV cache plus the largest layer's
//     temporaries and the logits.
//
// Allocator rounding is applied per tensor for weights, gradients and
// master copies (512 bytes); fragmentation and the CUDA context are the
// Overhead model's.
//
// Estimate is pure and deterministic, safe for concurrent use, and
// does not allocate. Invalid jobs return a *gpumem.FieldError naming the
// field, wrapping gpumem.ErrInvalid or gpumem.ErrRange.
func Estimate(j Job) (Breakdown, error) {
	if err := j.validate(); err != nil {
		return Breakdown{}, err
	}
	if j.Runtime == LlamaCpp {
		return estimateLlamaCpp(&j)
	}
	if j.Runtime == VLLM {
		return estimateVLLM(&j)
	}
	if j.Runtime == SGLang {
		return estimateSGLang(&j)
	}
	if err := j.Parallel.validateFor(&j); err != nil {
		return Breakdown{}, err
	}
	// The activation model's figures do not depend on the rank's
	// view: a pipeline's two stages compute them once.
	var act rankActs
	if !j.Parallel.modelParallel() {
		return estimateRank(&j, nil, &act, false)
	}
	first := j.Parallel.view(&j.Model, false)
	b, err := estimateRank(&j, &first, &act, false)
	if err != nil || j.Parallel.PipelineParallel < 2 {
		return b, err
	}
	// The first stage holds the most micro-batches of activations and the
	// embedding; the last holds the head, the logits and the loss.
	last := j.Parallel.view(&j.Model, true)
	bl, err := estimateRank(&j, &last, &act, false)
	if err != nil {
		return Breakdown{}, err
	}
	if bl.device() > b.device() {
		bl.Stage = j.Parallel.PipelineParallel - 1
		return bl, nil
	}
	return b, nil
}

// ZeRO-3 defaults, deepspeed/runtime/zero/config.py: parameters kept
// gathered (stage3_max_live_parameters), the prefetch bucket
// (stage3_prefetch_bucket_size) and the size under which a parameter is
// kept whole on every rank (stage3_param_persistence_threshold), in
// elements.
const (
	zero3MaxLive     = 1_000_000_000
	zero3Prefetch    = 50_000_000
	zero3Persistence = 100_000
)

// rankActs is the activation figures of a job, computed by the first
// rank that needs them.
type rankActs struct {
	done bool
	f    actFigures
	err  error
}

// statesBound returns a lower bound of Estimate(j).Required() that
// holds at any workload (batch, sequence, accumulation, buffers),
// attention kernel, loss and checkpointing policy: the model states of
// the rank — weights as stored, master copies, optimizer state, after
// sharding and offload, without autocast's copies, gradients or the
// step's temporaries — and the CUDA context; of a pipeline, the smaller
// of its two stages'. ok is false for a job Estimate refuses or that
// another runtime serves.
func statesBound(j *Job) (bound gpumem.Bytes, ok bool) {
	if j.Runtime != PyTorch || j.Mode == Load || j.validate() != nil || j.Parallel.validateFor(j) != nil {
		return 0, false
	}
	if !j.Parallel.modelParallel() {
		b, err := estimateRank(j, nil, nil, true)
		return b.Required(), err == nil
	}
	first := j.Parallel.view(&j.Model, false)
	b, err := estimateRank(j, &first, nil, true)
	if err != nil || j.Parallel.PipelineParallel < 2 {
		return b.Required(), err == nil
	}
	last := j.Parallel.view(&j.Model, true)
	bl, err := estimateRank(j, &last, nil, true)
	return min(b.Required(), bl.Required()), err == nil
}

// estimateRank is Estimate for the rank v (nil: a rank holding the whole
// model); ra keeps the activation figures for the next rank. With
// statesOnly it returns the rank's model states and context only
// (statesBound).
func estimateRank(j *Job, v *rankView, ra *rankActs, statesOnly bool) (Breakdown, error) {
	train := j.Mode == Training
	ov := j.Overhead.resolve(train, j.Device)
	wDT, gDT, sDT, cDT := j.Precision.dtypes()
	m := &j.Model

	var b Breakdown
	var err error
	acc := accumulator{}
	// The model's figures for this precision and rank (memo.go).
	fig := m.figures(j.Precision, v)
	add := func(s sized) gpumem.Bytes { return acc.add(s.b, s.err) }

	// Persistent state.
	b.Weights = add(fig.weights)
	// Weight copies that live from forward to the end of backward:
	// autocast's 16-bit casts of the fp32 weights, saved by the matmuls
	// that use them, or Transformer Engine's fp8 weights.
	var casts gpumem.Bytes
	if train && j.Precision.autocast() {
		casts = add(fig.casts)
	}
	if !train && j.Mode != Load && j.Precision.autocast() {
		// Inference under autocast: cached_cast (aten/src/ATen/
		// autocast_mode.cpp) caches the 16-bit cast of every fp32 leaf
		// that requires grad (can_try_cache tests arg.requires_grad(),
		// not the grad mode), so under torch.no_grad the casts of the
		// parameters that still require grad (a loaded model's, by
		// default: the Model's trainable set) accumulate until the
		// autocast context exits; a frozen weight's cast is a transient
		// of its own op.
		casts = add(fig.trainableCasts)
	}
	if train && j.Precision == FP8 {
		casts = add(fig.fp8)
	}
	var grads, optState, optStep gpumem.Bytes
	// paged: the part of optState in CUDA unified memory (bitsandbytes'
	// paged optimizers), and pagedOne its largest single tensor's.
	var paged pagedFigures
	// paramGrads: backward computes the trainable parameters' gradients
	// (not with InputGradients, which freezes every parameter).
	paramGrads := train && j.Gradients != InputGradients
	// inBwd: each gradient is stepped and freed inside backward.
	var inBwd inBwdFigures
	if paramGrads {
		grads = add(fig.grads)
		if j.Precision.master() {
			b.Master = add(fig.master)
		}
		if j.Optimizer != nil {
			// optimizerInBackward's or optimizer's figures (memo.go).
			of := acc.optimizerFigures(j, v, gDT, sDT)
			optState, optStep, inBwd, paged = of.state, of.step, of.inBwd, of.paged
		}
	}
	// ZeRO / FSDP sharding over the data-parallel ranks.
	par := &j.Parallel
	shards := par.shards()
	paramsOff := j.Offload&OffloadParams != 0
	if train && shards > 1 && par.Stage >= 1 {
		optState, b.Master, optStep = partition(optState, shards), partition(b.Master, shards), partition(optStep, shards)
		paged.all = partition(paged.all, shards)
		paged.one = min(paged.one, paged.all)
	}
	// Gradients in flight during backward once they are sharded: a
	// DeepSpeed reduce bucket (reduce_bucket_size, 5e8 elements) or FSDP's
	// reduce-scatter of one unit's gradients.
	var inflight gpumem.Bytes
	if paramGrads && ((shards > 1 && par.Stage >= 2) || paramsOff) {
		inflight = fig.bucket
		if par.FSDP {
			inflight = add(fig.layerG)
		}
	}
	var hostParams gpumem.Bytes
	switch {
	case par.Stage == 3 && (shards > 1 || paramsOff):
		// The weights are partitioned; gathered in full are FSDP's unit
		// computing and the one prefetched (BACKWARD_PRE), or DeepSpeed's
		// live parameters and prefetch bucket, with the tensors under
		// DeepSpeed's persistence threshold kept whole on every rank.
		var kept, live gpumem.Bytes
		if par.FSDP {
			live = 2 * add(fig.layerW)
		} else {
			kept = add(fig.kept)
			live, _ = wDT.Size(zero3MaxLive + zero3Prefetch)
		}
		shard, gathered := partition(b.Weights-kept, shards), min(b.Weights-kept, live)
		if paramsOff {
			// ZeRO-Infinity / FSDP CPU offload: the weight and gradient
			// partitions live on the host.
			hostParams = acc.sum(shard, partition(grads, shards))
			b.Weights, grads = acc.sum(kept, gathered), min(grads, inflight)
		} else {
			b.Weights = acc.sum(acc.sum(shard, kept), gathered)
			grads = acc.sum(partition(grads, shards), min(grads, inflight))
		}
		casts = partition(casts, shards)
	case shards > 1 && par.Stage == 2:
		grads = acc.sum(partition(grads, shards), min(grads, inflight))
		if par.FSDP {
			// SHARD_GRAD_OP: the gathered parameters stay from forward to
			// the end of backward, beside the rank's shard.
			b.Weights = acc.sum(partition(b.Weights, shards), b.Weights)
			casts = partition(casts, shards)
		}
	}
	// The paged state is out of PyTorch's allocator: a component of its
	// own, at the device level only (Breakdown.Paged).
	b.Optimizer, b.Paged, b.PagedResident = optState-paged.all, paged.all, paged.one
	if j.Offload&OffloadOptimizer != 0 {
		// State and master copy live on the host; the step runs there.
		b.Host = acc.sum(acc.sum(b.Optimizer, b.Paged), b.Master)
		b.Optimizer, b.Master, optStep, b.Paged, b.PagedResident = 0, 0, 0, 0, 0
	}
	b.Host = acc.sum(b.Host, hostParams)
	if statesOnly {
		// Every later term adds to these three (casts to Weights, the
		// step's temporaries to Optimizer) or is a component of its own.
		if acc.err != nil {
			return Breakdown{}, acc.err
		}
		return Breakdown{Weights: b.Weights, Master: b.Master, Optimizer: b.Optimizer, Context: ov.Context}, nil
	}
	var largestCopy gpumem.Bytes
	for i := range j.Copies {
		c := &j.Copies[i]
		dt := c.DType
		if dt == gpumem.Invalid {
			dt = wDT
		}
		// Frozen copies are split over the ranks like the trained model.
		w := acc.add(c.Model.weightsOf(dt, false, false, v, 0))
		largestCopy = max(largestCopy, w)
		b.ExtraModels = acc.sum(b.ExtraModels, w)
	}
	if j.Offload&OffloadCopies != 0 {
		b.Host = acc.sum(b.Host, b.ExtraModels)
		b.ExtraModels = largestCopy
	}
	for i := range j.Buffers {
		b.Buffers = acc.sum(b.Buffers, acc.add(j.Buffers[i].size()))
	}
	// The model's registered buffers (model.Spec.BufferBytes: BigCode's
	// causal mask, BERT's position and token-type ids) move to the GPU
	// with it.
	b.Buffers = acc.sum(b.Buffers, m.bufferBytes)
	if j.Mode == Generation {
		b.KVCache = acc.add(kvCache(j, cDT, v))
	}
	if w, ok := checked.Mul(int64(ov.Workspace), int64(ov.Workspaces)); ok {
		b.Workspace = gpumem.Bytes(w)
	} else {
		acc.add(0, errOverflow("workspaces"))
	}
	// A quantized kernel's persistent scratch (GPTQ's exllamav2).
	scratch := m.quant.scratch(train)
	if j.Mode == Load {
		// Loaded, nothing run: no cuBLAS workspace yet, no activations;
		// bitsandbytes' quantization of the largest weight as it loads.
		b.Workspace = acc.sum(scratch, m.quant.loading(wDT))
		if acc.err != nil {
			return Breakdown{}, acc.err
		}
		return loaded(b, ov.Context), nil
	}
	b.Workspace = acc.sum(b.Workspace, scratch)
	if acc.err != nil {
		return Breakdown{}, acc.err
	}

	if !ra.done {
		ra.f, ra.err = activations(j, cDT)
		ra.done = true
	}
	act, err := ra.f, ra.err
	if err != nil {
		return Breakdown{}, err
	}
	if v != nil && v.pp > 1 {
		act = act.stage(j, v)
	}
	// Offloaded activations live in host memory.
	b.Host = acc.sum(b.Host, act.host)

	base := acc.sum(acc.sum(acc.sum(b.Weights, b.Master), acc.sum(b.Optimizer, b.ExtraModels)),
		acc.sum(acc.sum(b.Buffers, b.KVCache), b.Workspace))
	persistentGrads := gpumem.Bytes(0)
	if train && j.GradAccum > 1 {
		persistentGrads = grads
	}

	type candidate struct {
		phase                            Phase
		casts, grads, acts, attn, logits gpumem.Bytes
		optimizerExtra                   gpumem.Bytes
		kernel                           gpumem.Bytes // a quantized matmul's transient
		// noKV: the moment precedes the KV cache (an encoder–decoder's
		// encoder pass in generation).
		noKV bool
		// castsLeft: how much of autocast's weight casts a backward
		// moment still holds (castsAll, castsBlock, castsNone).
		castsLeft uint8
	}
	var kFwd, kBwd gpumem.Bytes
	if len(m.quant.shapes) > 0 {
		kFwd, kBwd = m.quant.transients(int64(j.Batch)*int64(j.SeqLen), cDT, train)
	}
	var cands [12]candidate
	n := 0
	addCand := func(c candidate) { cands[n] = c; n++ }
	body := act.saved - act.logits // everything saved but the logits
	// An encoder–decoder runs its encoder first in forward and last in
	// backward: the encoder's transients sit on what the encoder side
	// has saved (its blocks, the embeddings, the shared tables), not on
	// the decoder's, and the decoder's on everything.
	encDec := act.encoder
	fwdAttn, bwdAttn := act.forward, act.backward
	if encDec {
		fwdAttn, bwdAttn = act.decForward, act.decBackward
	}
	if train {
		kept, ok := m.quant.keptInputs(int64(j.Batch)*int64(j.SeqLen), cDT)
		if !ok {
			acc.add(0, errOverflow("kept inputs"))
		}
		// The forward's two moments: the last block's transient, then the
		// logits with the loss's fp32 upcast. A loop that holds its step
		// (HoldsPreviousStep) still has the previous step's logits until
		// the new ones are assigned (the forward, the head's output
		// included), and the inputs its graph kept until the new loss is.
		fwdActs, fwdLogits := body, gpumem.Bytes(0)
		headLogits := act.logits + act.lossForward
		if j.HoldsPreviousStep {
			fwdActs, fwdLogits = acc.sum(body, kept), act.logits
			headLogits = acc.sum(act.logits, max(act.logits, act.lossForward))
		}
		addCand(candidate{phase: Forward, grads: persistentGrads, acts: fwdActs, logits: fwdLogits, attn: fwdAttn, kernel: kFwd})
		if encDec {
			// The encoder's moments come before the decoder's cross
			// k/v projections save their inputs in forward and after
			// their backward has released them (act.crossIn); in
			// backward the encoder output's gradient is there instead
			// (act.encOutGrad).
			encFront := act.front - min(act.front, act.crossIn)
			addCand(candidate{phase: Forward, grads: persistentGrads, acts: act.encBlocks + encFront, attn: act.encForward, kernel: kFwd})
			encFront += act.encOutGrad
			// Backward reaches the encoder once the decoder's, the
			// head's and the shared embedding's gradients exist, with
			// every encoder block's activations still saved.
			decGrads := fig.outsideEncoder
			if !paramGrads {
				decGrads = 0
			}
			addCand(candidate{phase: Backward, grads: max(persistentGrads, decGrads), acts: act.encBlocks + encFront, attn: act.encBackward, kernel: kBwd, logits: act.kept, castsLeft: castsEncoder})
		}
		addCand(candidate{phase: Forward, grads: persistentGrads, acts: fwdActs, logits: headLogits})
		// Backward: the loss gradient on everything saved; the first
		// block's backward transient; the last block's, with every
		// gradient present and only the first block's activations left.
		// Identical blocks make the live bytes linear in between.
		addCand(candidate{phase: Backward, grads: persistentGrads, acts: body, logits: act.lossLogits + act.lossBackward})
		iBlocks := n // the blocks' backward candidates: the first and the last block
		// The first block's backward (the last block of forward): the
		// loss, the head and the final norm have run theirs, releasing
		// what they saved and making their gradients.
		firstGrads := persistentGrads
		if paramGrads && persistentGrads == 0 && !j.OptimizerInBackward {
			firstGrads = fig.headGrads
		}
		firstActs := body - act.headSaved
		if j.OptimizerInBackward {
			// As the head's step below, counted as an upper bound.
			firstActs = body
		}
		addCand(candidate{phase: Backward, grads: firstGrads, acts: firstActs, attn: bwdAttn, kernel: kBwd, logits: act.kept})
		lastAttn := act.backward
		if encDec {
			lastAttn = act.encBackward // the encoder's first block ends backward
		}
		// At the first block's backward, the loss, the head and the
		// final norm have run theirs long before, and autograd has
		// released what they saved (the log-softmax, the head's input,
		// the norm's tensors): what is left outside the blocks is the
		// embeddings', the token ids and the tables every block reads.
		// (A pipeline stage keeps its own split of the outside.)
		lastActs := act.firstBlock + act.front - min(act.front, act.crossIn) + act.encOutGrad
		if v != nil && v.pp > 1 {
			lastActs = act.firstBlock + act.outside - act.logits - act.headGrad
		}
		// The embeddings' own gradients come after the first block's
		// backward (a tied one's began with the head's).
		lastGrads := grads
		if paramGrads && persistentGrads == 0 && !j.OptimizerInBackward {
			lastGrads = grads - min(grads, fig.embedGrads)
		}
		// bitsandbytes' kept inputs (model.Finetune.KeepsInputs) outlive
		// the blocks' saved tensors: from here to the end of backward
		// they are all still there.
		addCand(candidate{phase: Backward, grads: lastGrads, acts: acc.sum(lastActs, kept), attn: lastAttn, kernel: kBwd, logits: act.kept, castsLeft: castsBlock})
		// At the embeddings' backward, the last of backward, what the
		// embeddings saved beyond the ids (BERT's embedding LayerNorm,
		// the embedding dropout's mask) has been released by the
		// backward of the norm and dropout that follow the lookup in
		// forward, and the tables every block reads (rotary cos and sin,
		// position bias) by the first block's: what is left is the ids
		// embedding_dense_backward reads (torch 2.6,
		// aten/src/ATen/native/Embedding.cpp), which the loop holds
		// anyway. An encoder–decoder's decoder embedding is summed
		// before the encoder's backward (below), beside everything the
		// encoder saved.
		endActs := acc.sum(act.ids, kept)
		if v != nil && v.pp > 1 {
			endActs = acc.sum(act.front, kept)
		}
		if paramGrads && !j.OptimizerInBackward {
			// The end of backward: every gradient, the embeddings' just
			// made, beside the ids.
			addCand(candidate{phase: Backward, grads: grads, acts: endActs, logits: act.kept, castsLeft: castsNone})
		}
		if tied, dec := fig.tied, fig.tiedDecoder; tied > 0 && paramGrads && !j.OptimizerInBackward {
			// Under autocast the head reads the weight's cached 16-bit
			// cast, and the head's contribution reaches the leaf through
			// the cast's ToCopyBackward: a fresh dense fp32 tensor that
			// only the input buffer holds, so InputBuffer's accumulate
			// (torch/csrc/autograd/input_buffer.cpp, torch 2.6: old_var.
			// add_(var) when can_accumulate_inplace(old_var)) adds the
			// embedding's gradient into it in place: one tied gradient
			// beyond the rest, not two. Measured on the CPU
			// (testdata/measured/cpu, bf16-mixed b1 rows): the backward
			// peak holds every gradient and less than one more embedding.
			extra := 2 * tied
			if j.Precision.autocast() {
				extra = tied
			}
			// A tied embedding's gradient when its last use's arrives:
			// the head's contribution, the embedding's dense gradient and
			// their sum at once (Model.tiedGrad), beside every other
			// gradient and what the embedding saved at the end of
			// backward, or, for a decoder's embedding, beside the
			// decoder's gradients and every encoder block's activations.
			//
			// A table the encoder also reads (T5's shared embedding) gets
			// three contributions: the head's and the decoder
			// embedding's are summed when the decoder's arrives, before
			// the encoder's backward, as a decoder's own embedding is;
			// their sum is a fresh tensor only the input buffer holds, so
			// the encoder embedding's gradient, at the very end, is added
			// into it in place (InputBuffer's accumulate, as above): one
			// tied gradient beyond the rest there.
			if dec || encDec {
				// The encoder's final norm runs its backward after this
				// sum: what it saved is still there.
				addCand(candidate{phase: Backward, grads: acc.sum(max(persistentGrads, fig.outsideEncoder), extra), acts: act.encBlocks + act.front - min(act.front, act.crossIn) + act.encOutGrad + act.encNorm, logits: act.kept, castsLeft: castsEncoder})
			}
			if !dec {
				end := extra
				if encDec {
					end = tied
				}
				addCand(candidate{phase: Backward, grads: acc.sum(grads, end), acts: endActs, logits: act.kept, castsLeft: castsNone})
			}
		}
		if j.OptimizerInBackward {
			// The step runs inside backward, one parameter at a time
			// (torchtune's OptimizerInBackward: step() then zero_grad(),
			// which sets .grad to None, from the post-accumulate-grad
			// hook): a moment of backward holds one gradient of the kind
			// being produced and its step's temporaries, and a tied
			// embedding's gradient from the head's backward to the end;
			// the full set of gradients never exists. The loss backward
			// precedes every parameter's gradient.
			for i := iBlocks; i <= iBlocks+1; i++ {
				cands[i].grads, cands[i].optimizerExtra = acc.sum(inBwd.held, inBwd.layerGrad), inBwd.layerStep
			}
			// The head's weights (untied) and the final norm step right
			// after the loss backward, every block's activations saved.
			// What the head and the loss saved is counted as still
			// alive, an upper bound: the loss's saved log-softmax is
			// released by its backward, and the head's input is
			// replaced by its gradient of the same size.
			addCand(candidate{phase: Backward, acts: body, grads: acc.sum(inBwd.held, inBwd.headGrad), optimizerExtra: inBwd.headStep})
			// The embeddings step last, once the blocks are released.
			addCand(candidate{phase: Backward, acts: act.outside - act.logits, grads: max(inBwd.held, inBwd.embedGrad), optimizerExtra: inBwd.embedStep})
		} else if j.Optimizer != nil {
			// Optimizer step: every gradient and the step's temporaries,
			// beside the logits where the loop keeps them (KeepLogits); a
			// loop that holds its step (HoldsPreviousStep) still holds
			// the logits and the graph's kept inputs.
			// The loop holds its batch (token ids, labels) through the
			// step, as through backward.
			c := candidate{phase: Step, grads: grads, optimizerExtra: optStep, logits: act.kept, acts: act.ids}
			if j.HoldsPreviousStep {
				c.acts, c.logits = acc.sum(act.ids, kept), max(act.kept, act.logits)
			}
			addCand(c)
		}
	} else {
		ph := Forward
		if j.Mode == Generation {
			ph = Decode
		}
		addCand(candidate{phase: ph, acts: body, attn: fwdAttn, kernel: kFwd})
		if encDec {
			// The encoder's pass: before any decoder step, so before
			// any KV cache in generation.
			addCand(candidate{phase: ph, acts: body, attn: act.encForward, kernel: kFwd, noKV: j.Mode == Generation})
		}
		// The logits, with an evaluation's loss transient (EvalLoss),
		// beside the head's input once the base model has returned.
		headActs := body
		if act.headIn > 0 {
			headActs = body - min(body, act.shared) + act.headIn
		}
		addCand(candidate{phase: ph, acts: headActs, logits: act.logits + act.lossForward})
	}
	// Autocast's 16-bit casts of the trained weights: cached_cast
	// (aten/src/ATen/autocast_mode.cpp, torch 2.6) caches the cast of an
	// fp32 leaf that requires grad until the autocast context exits after
	// forward; what keeps each cast alive in backward is the matmul that
	// saved it (MmBackward's mat2, for the input's gradient), released
	// when that node runs. Backward runs the blocks in reverse, so the
	// last block's backward holds the first block's casts only, and the
	// end of backward (the embeddings', which F.embedding reads in fp32:
	// embedding is on no autocast list) none. Measured on the CPU
	// (testdata/measured/cpu, bf16-mixed b1 rows): the backward peak at
	// the tied embedding's gradient holds every gradient, the two tied
	// gradients and no cast. Transformer Engine's fp8 weights are kept
	// whole.
	// An encoder–decoder's backward reaches the encoder with the
	// decoder's and the head's casts released: what is left is the
	// encoder's.
	blockCasts, encCasts := casts, casts
	if train && j.Precision.autocast() {
		if l, err := fig.layerC.b, fig.layerC.err; err == nil && m.layers > 1 {
			blockCasts = min(casts, l)
		}
		encCasts = casts - min(casts, fig.outsideEncoderC)
	}
	for i := 0; i < n; i++ {
		if cands[i].phase == Forward || cands[i].phase == Backward || cands[i].phase == Decode {
			switch {
			case cands[i].castsLeft == castsNone && j.Precision.autocast():
				cands[i].casts = 0
			case cands[i].castsLeft == castsBlock:
				cands[i].casts = blockCasts
			case cands[i].castsLeft == castsEncoder:
				cands[i].casts = encCasts
			default:
				cands[i].casts = casts
			}
		}
	}
	best := -1
	var bestTotal gpumem.Bytes
	for i := 0; i < n; i++ {
		c := &cands[i]
		t := acc.sum(acc.sum(acc.sum(base, c.casts), acc.sum(c.grads, c.kernel)), acc.sum(acc.sum(c.acts, c.attn), acc.sum(c.logits, c.optimizerExtra)))
		if c.noKV {
			t -= b.KVCache
		}
		b.Phases[c.phase] = max(b.Phases[c.phase], t)
		if best < 0 || t > bestTotal {
			best, bestTotal = i, t
		}
	}
	if acc.err != nil {
		return Breakdown{}, acc.err
	}
	c := cands[best]
	if c.noKV {
		b.KVCache = 0
	}
	b.Phase = c.phase
	b.Gradients = c.grads
	b.Activations = c.acts
	if convolutional(&m.spec) {
		b.Transient = c.attn
	} else {
		b.Attention = c.attn
	}
	b.Logits = c.logits
	b.Optimizer += c.optimizerExtra
	b.Weights += c.casts
	b.Workspace += c.kernel
	alloc := b.Allocated()
	frag, ok := checked.Scale(int64(alloc), ov.Fragmentation)
	if !ok {
		return Breakdown{}, errOverflow("fragmentation")
	}
	b.Fragmentation = gpumem.Bytes(frag)
	b.Context = ov.Context
	node, ok := checked.Mul(int64(b.Host), int64(par.perNode()))
	if !ok {
		return Breakdown{}, errOverflow("host memory per node")
	}
	b.HostNode = gpumem.Bytes(node)
	return b, nil
}

// How much of autocast's weight casts a backward moment holds.
const (
	castsAll     = iota // forward to the first block's backward
	castsBlock          // the last block's backward: one block's casts
	castsNone           // the end of backward: none
	castsEncoder        // an encoder–decoder's encoder backward: the encoder's
)

// loaded completes the Breakdown of a Load job: the persistent state as
// b holds it, the context, no fragmentation.
func loaded(b Breakdown, context gpumem.Bytes) Breakdown {
	b.Context = context
	b.Phase = Loaded
	b.Phases[Loaded] = b.Allocated()
	return b
}
