package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
)

// actFigures are the activation terms Estimate composes, taken from
// model.Spec.Activations.
type actFigures struct {
	// saved is every activation resident at the end of forward
	// (Activations.Total): blocks under the policy, embedding, token
	// ids, shared tables, final norm, head, logits.
	saved gpumem.Bytes
	// blocks is the blocks' part of saved; firstBlock is one block's.
	blocks, firstBlock gpumem.Bytes
	// outside is saved minus the blocks (embedding ... logits).
	outside gpumem.Bytes
	// forward and backward are the largest block transients.
	forward, backward gpumem.Bytes
	// lossForward is the fp32 upcast of the logits; lossBackward the
	// loss gradient's transient.
	lossForward, lossBackward gpumem.Bytes
	// logits is the logits tensor, part of saved.
	logits gpumem.Bytes
	// host is what the activation offloading policy moves to host
	// memory (model.OffloadActivations, Job.OffloadActivations).
	host gpumem.Bytes
	// lossLogits is the logits the loss backward sees: the logits when
	// the loop holds the model's output (Job.KeepLogits), else 0: the
	// Trainer's compute_loss drops the output, and a chunked loss frees
	// its chunks (model.Activations.LogitsReleased). kept is the logits
	// the loop still holds after the loss backward, in the blocks'
	// backward and the optimizer step (Job.KeepLogits).
	lossLogits, kept gpumem.Bytes
	// headGrad is the head weight's gradient that a fused loss keeps
	// from forward (part of saved); it becomes the head's gradient.
	headGrad gpumem.Bytes
	// encBlocks is an encoder–decoder's encoder blocks' part of blocks,
	// and encForward, encBackward their largest transients; decForward
	// is the largest transient of the other blocks. The encoder runs
	// first in forward and last in backward.
	encBlocks, encForward, encBackward, decForward, decBackward gpumem.Bytes
	// encoder says the model has an encoder (an encoder–decoder);
	// encNorm is what its final norm saved (model.Activations.
	// EncoderNorm), alive until the encoder's backward begins.
	encoder bool
	encNorm gpumem.Bytes
	// crossIn is the part of front the decoder's cross-attention
	// projections saved (model.Activations.CrossInputs): released by
	// the decoder's backward, and not yet made at the encoder's forward.
	crossIn gpumem.Bytes
	// encOutGrad is the encoder output's gradient
	// (model.Activations.EncoderOutputGrad), alive from the decoder's
	// backward to the encoder's final norm's.
	encOutGrad gpumem.Bytes
	// headSaved is what the final norm, the head and the loss saved
	// (part of saved): released by their backward, before any block's.
	headSaved gpumem.Bytes
	// front is what the first pipeline stage keeps outside the blocks
	// (embedding, token ids, shared tables); back what the last keeps
	// (shared tables, final norm, head, logits, labels).
	front, back gpumem.Bytes
	// shared is the tables every block reads (model.Activations.Shared:
	// the eager 4-D mask, rotary cos and sin), locals of the base
	// model's forward; headIn is what a pass without a graph holds
	// beside the logits as the head makes them (see activations).
	shared, headIn gpumem.Bytes
	// ids is the inputs the loop holds (token ids, labels:
	// model.Activations.TokenIDs; pixel values, log-mel features:
	// model.Activations.Inputs), alive from before forward to after the
	// optimizer step.
	ids gpumem.Bytes
}

// activations returns the activation figures of j in the compute dtype
// dt. A Generation job runs its prompt pass without gradients and keeps
// the logits of the last position only (generate() passes
// logits_to_keep=1, transformers ≥ 4.45), unless the model's forward
// takes no logits_to_keep (noLogitsToKeep).
func activations(j *Job, dt gpumem.DType) (actFigures, error) {
	w := workload(j, dt)
	// Few kinds of block: a stack buffer keeps Estimate allocation-free
	// (AppendActivations grows it on the heap only beyond eight kinds).
	var buf [8]model.LayerActivations
	// The architecture's checks were made once, by NewModel.
	if j.Model.actErr != nil {
		return actFigures{}, j.Model.actErr
	}
	var a model.Activations
	var err error
	if j.Model.act != nil {
		a, err = j.Model.act.AppendActivations(buf[:0], w)
	} else {
		a, err = j.Model.spec.AppendActivationsChecked(buf[:0], w)
	}
	if err != nil {
		return actFigures{}, err
	}
	f := actFigures{
		saved: a.Total(), blocks: a.LayersTotal(), forward: a.Forward, backward: a.Backward,
		lossForward: a.LogitsFP32, lossBackward: a.LossGrad, logits: a.Logits,
		lossLogits: a.Logits, headGrad: a.HeadWeightGrad,
	}
	if j.Mode == Training && j.KeepLogits {
		f.kept = a.Logits
	} else if (j.Mode == Training && !a.LogitsSaved) || a.LogitsReleased {
		// A compiled loss saves the logits (LogitsSaved): its backward
		// sees them whatever the loop holds.
		f.lossLogits = 0
	}
	for _, l := range a.Layers {
		if l.Part == "encoder" {
			f.encoder = true
			f.encBlocks += l.KeptTotal
			f.encForward, f.encBackward = max(f.encForward, l.Forward), max(f.encBackward, l.Backward)
		} else {
			f.decForward, f.decBackward = max(f.decForward, l.Forward), max(f.decBackward, l.Backward)
		}
	}
	if len(a.Layers) > 0 && a.Layers[0].Count > 0 {
		f.firstBlock = a.Layers[0].KeptTotal / gpumem.Bytes(a.Layers[0].Count)
	}
	if j.Mode == Generation && a.Tokens > 0 && !j.Model.lm.noLogitsToKeep {
		last := (a.Logits + gpumem.Bytes(a.Tokens) - 1) / gpumem.Bytes(a.Tokens)
		f.saved -= a.Logits - last
		f.logits, f.lossLogits = last, last
		f.lossForward = 0
	}
	f.outside = f.saved - f.blocks
	f.front = a.Embedding + a.TokenIDs + a.Shared
	// The loop holds its float inputs (pixel values, log-mel features)
	// as it holds its ids, to the end of the step.
	f.ids = a.TokenIDs + a.Inputs
	f.shared = a.Shared
	if lm := &j.Model.lm; j.Mode != Training && lm.vocab > 0 && a.Logits > 0 {
		// A pass without a graph makes the logits from the final
		// hidden states, which the CausalLM's forward holds
		// (hidden_states = outputs.last_hidden_state; a logits_to_keep
		// slice is a view of it), all positions of them: B·S·h in the
		// logits' dtype. The base model's forward has returned, and
		// with it the tables its blocks read. BERT's masked-LM head
		// also holds its transform's output (dense, GELU, LayerNorm:
		// BertLMPredictionHead.forward) beside the sequence output.
		// (transformers modeling_llama.py, modeling_gpt2.py,
		// modeling_bert.py at v4.57.1.) Measured on the CPU
		// (testdata/measured/cpu, prefill rows): the logits moment
		// holds the logits and these, to 8 KiB.
		in := a.Logits / gpumem.Bytes(lm.vocab) * gpumem.Bytes(lm.hidden)
		if lm.family == "bert" || lm.family == "roberta" {
			in *= 2
		}
		if f.encoder {
			var ok bool
			if in, ok = encDecHeadIn(j, in, a.Logits/gpumem.Bytes(lm.vocab)/gpumem.Bytes(max(a.Tokens, 1))); !ok {
				return actFigures{}, errOverflow("encoder output")
			}
		}
		if sp := &j.Model.spec; sp.Family == "llava" && sp.Vision != nil && sp.Text != nil && j.Images > 0 && a.ImageTokens > 0 {
			// LlavaModel.forward returns the projected image features
			// (image_hidden_states: torch.cat of the per-image features,
			// modeling_llava.py at v4.57.1), so they outlive the language
			// model, and the caller holds its pixel values through the
			// pass. Measured on the CPU (testdata/measured/cpu, llava
			// prefill rows).
			n := int64(j.Batch) * int64(j.Images)
			v := sp.Vision.Image
			e := int64(dt.Bits() / 8)
			in += gpumem.Bytes(e * n * (v.Channels*v.Size*v.Size + a.ImageTokens*sp.Text.Hidden))
		}
		f.headIn = in
	}
	if j.Mode == Training {
		// The encoder's final norm is released by the encoder's
		// backward, after every decoder block's.
		f.headSaved = a.FinalNorm - a.EncoderNorm + a.Head
		f.encNorm = a.EncoderNorm
		f.crossIn = a.CrossInputs
		f.encOutGrad = a.EncoderOutputGrad
	}
	f.back = f.outside - a.Embedding
	f.host = a.Offloaded
	if j.OffloadActivations && j.Checkpointing == model.FullCheckpointing {
		f.offloadInputs(a.Layers)
	}
	return f, nil
}

// lmFacts are the fields of a Model's language model (model.Spec.LM)
// that activations reads, and whether its family is in noLogitsToKeep.
type lmFacts struct {
	family         string
	vocab, hidden  int64
	noLogitsToKeep bool
}

// noLogitsToKeep are the model types whose ForCausalLM forward takes no
// logits_to_keep argument in transformers v4.57.1 (commit 8cb5963c,
// modeling_<type>.py): generate() passes logits_to_keep=1 only when the
// forward's signature has it (GenerationMixin._supports_logits_to_keep,
// generation/utils.py), so their prompt pass computes every position's
// logits. Measured on the CPU (testdata/measured/cpu, OPT generate rows).
var noLogitsToKeep = map[string]bool{
	"opt": true, "gpt_bigcode": true, "bloom": true, "mpt": true, "gptj": true, "codegen": true,
}

// Activation offloading under full checkpointing (Job.OffloadActivations):
// torchtune's OffloadActivations defaults.
const (
	// offloadStash is max_fwd_stash_size: forward keeps the last 5
	// offloaded tensors alive until their copies to the host are done.
	offloadStash = 5
	// offloadBack is backward's bwd_tensor_stash: the tensor brought back
	// for the node being computed, and the previous node's, freed once
	// that node's event is waited on.
	offloadBack = 2
	// offloadMin is min_offload_size: smaller tensors stay on the GPU.
	offloadMin = 1024
)

// offloadInputs moves the blocks' checkpointed inputs (ls, under full
// checkpointing) to pinned host buffers: the host holds each input
// rounded up to a power of two by the CUDA host caching allocator, and
// the GPU the tensors in flight, the forward stash (f.blocks, part of
// saved) and backward's two (f.firstBlock, what the last block's
// backward keeps). Inputs under 1024 bytes stay on the GPU.
func (f *actFigures) offloadInputs(ls []model.LayerActivations) {
	var largest, blocks, small gpumem.Bytes
	for _, l := range ls {
		if l.Count < 1 {
			continue
		}
		blocks += gpumem.Bytes(l.Count)
		if l.Kept < offloadMin {
			small += l.KeptTotal
			continue
		}
		largest = max(largest, l.Kept)
		f.host += gpumem.Bytes(pow2Ceil(int64(l.Kept))) * gpumem.Bytes(l.Count)
	}
	fwd := gpumem.Bytes(min(offloadStash, int64(blocks)))*largest + small
	back := gpumem.Bytes(min(offloadBack, int64(blocks)))*largest + small
	f.saved = f.saved - f.blocks + fwd
	f.blocks, f.firstBlock = fwd, back
}

// pow2Ceil is the smallest power of two at least n (n ≥ 1), as
// c10::llvm::PowerOf2Ceil rounds a host allocation; n itself beyond
// 2^62.
func pow2Ceil(n int64) int64 {
	p := int64(1)
	for p < n && p < 1<<62 {
		p <<= 1
	}
	return max(p, n)
}

// stage returns the figures of the pipeline stage v (first or last) of a
// job j: its ceil(L/p) blocks, and on the first stage the activations of
// the micro-batches in flight under 1F1B, min(p, micro-batches), or
// p + (p−1)/m for the interleaved schedule with m virtual stages
// (Korthikanti et al. 2022, §4.2.3: L·(1 + (p−1)/(p·m)) layers' worth
// over p stages). The last stage holds one micro-batch and the loss.
func (f actFigures) stage(j *Job, v *rankView) actFigures {
	layers := j.Model.layers
	if layers <= 0 || v.pp <= 1 {
		return f
	}
	per := (layers + v.pp - 1) / v.pp
	blocks := f.blocks / gpumem.Bytes(layers) * gpumem.Bytes(per)
	out := f
	// Offloaded blocks (model.OffloadActivations) leave their share of
	// host memory per stage, like the blocks themselves.
	out.host = f.host / gpumem.Bytes(layers) * gpumem.Bytes(per)
	if v.last {
		out.blocks = blocks
		out.saved = blocks + f.back
		out.outside = f.back
		return out
	}
	micro := int64(max(j.GradAccum, 1))
	inflight := min(v.pp, micro)
	scaled := blocks * gpumem.Bytes(inflight)
	if m := int64(j.Parallel.VirtualStages); m > 1 && j.Mode == Training {
		// p + (p−1)/m micro-batches' worth of a stage's blocks.
		scaled = blocks * gpumem.Bytes(v.pp*m+v.pp-1) / gpumem.Bytes(m)
	}
	if j.Mode != Training {
		inflight, scaled = 1, blocks
	}
	out.host *= gpumem.Bytes(inflight)
	out.blocks = scaled
	out.outside = f.front * gpumem.Bytes(inflight)
	out.saved = out.blocks + out.outside
	out.logits, out.lossForward, out.lossBackward, out.lossLogits, out.headGrad, out.kept = 0, 0, 0, 0, 0, 0
	out.headSaved = 0
	return out
}

// workload is the activation model's view of j in the compute dtype dt.
func workload(j *Job, dt gpumem.DType) model.Workload {
	seq, encLen := int64(j.SeqLen), int64(0)
	if j.Mode == Generation {
		// generate() runs a text encoder–decoder's encoder over the
		// prompt and its decoder's prompt pass over the one decoder
		// start token (Spec.EncoderInput; GenerationMixin.
		// _prepare_decoder_input_ids_for_generation, generation/utils.py
		// at transformers v4.57.1), as the KV cache counts them.
		if n, text := j.Model.spec.EncoderInput(seq); text {
			seq, encLen = 1, n
		}
	}
	return model.Workload{
		SeqLen: seq, EncoderLen: encLen,
		Batch: int64(j.Batch), DType: dt, Attention: j.Attention, HeadChunk: int64(j.HeadChunk),
		Checkpointing: offloadPolicy(j), CheckpointEvery: int64(j.CheckpointEvery),
		Dropout: j.Dropout, Train: j.Mode == Training, Images: int64(j.Images), Autocast: j.Precision.autocast(),
		TensorParallel: int64(j.Parallel.TensorParallel), SequenceParallel: j.Parallel.SequenceParallel,
		ContextParallel: int64(j.Parallel.ContextParallel),
		Loss:            j.Loss, HeadGrad: j.headGrad(), LogitsToKeep: int64(j.LogitsToKeep), Labels: j.EvalLoss,
		SSMKernel: j.SSMKernel, Backend: j.Backend, NoAttentionMask: j.noAttentionMask(), Compile: j.Compile,
		FrozenBase: j.frozenBase(), FreezeVision: j.Model.visionFrozen && j.Gradients != InputGradients,
	}
}

// noAttentionMask says that transformers calls the job's attention
// without a mask (model.Workload.NoAttentionMask): when the model holds
// a cache, in generate() and in a training forward without
// checkpointing (use_cache defaults to true; gradient checkpointing turns
// it off). A Prefill job runs without a cache. A model compiled whole
// (model.CompileModel: its head in the graph too) builds its mask under Dynamo, where
// masking_utils.py's _ignore_causal_mask_sdpa never skips it
// (is_torchdynamo_compiling, transformers v4.57.1), so its attention has
// one: measured, the compiled model runs the CPU's flash kernel where the
// same job eager, or with its layers compiled (the mask made outside
// them), runs the math kernel (testdata/measured/cpu/compile-*.jsonl,
// sdpa_kernels).
func (j *Job) noAttentionMask() bool {
	if j.Compile&model.CompileHead != 0 {
		return false
	}
	return j.Mode == Generation || (j.Mode == Training && j.Checkpointing == model.NoCheckpointing)
}

// offloadPolicy is the activation model's policy for j: torchtune's
// offloading without checkpointing moves every saved tensor of the
// blocks, which model.OffloadActivations models.
func offloadPolicy(j *Job) model.Checkpointing {
	if j.OffloadActivations && j.Checkpointing == model.NoCheckpointing {
		return model.OffloadActivations
	}
	return j.Checkpointing
}

// headGrad is the dtype of the LM head weight's gradient, which the
// fused losses allocate themselves (model.Workload.HeadGrad): the
// weights' dtype (zeros_like the weight) when the head is trained,
// Invalid when it is frozen (LoRA, Job.Gradients InputGradients) or
// under the full loss.
func (j *Job) headGrad() gpumem.DType {
	if j.Mode != Training || j.Loss.Kind == model.FullLoss || !j.Model.headTrained || j.Gradients == InputGradients {
		return gpumem.Invalid
	}
	w, _, _, _ := j.Precision.dtypes()
	return w
}

// encDecHeadIn is what an encoder–decoder's pass without a graph holds
// beside the logits as its head makes them, given in, the decoder's final
// hidden states (B·S·h), and per, one position's logits bytes over the
// vocabulary (B in the logits' dtype): the encoder's output, which the
// forward keeps in encoder_outputs (B·Senc·h), and T5's rescaled copy of
// the decoder output before a tied head (sequence_output *
// model_dim**-0.5, a new tensor: T5ForConditionalGeneration.forward,
// modeling_t5.py at transformers v4.57.1, commit 8cb5963c). Whisper's
// proj_out reads the decoder output as it is (modeling_whisper.py).
// Measured on the CPU (testdata/measured/cpu, T5 eager prefill rows at
// sequence 64: the logits moment holds the logits and these three, to
// the ids).
// It reports false when the sum overflows int64.
func encDecHeadIn(j *Job, in, per gpumem.Bytes) (gpumem.Bytes, bool) {
	s := j.Model.spec
	enc, _ := s.EncoderInput(int64(j.SeqLen))
	out, ok1 := checked.Mul(int64(per), enc)
	out, ok2 := checked.Mul(out, s.Hidden)
	out, ok3 := checked.Add(out, int64(in))
	ok := ok1 && ok2 && ok3
	if s.Family == "t5" && s.TiedEmbeddings {
		var ok4 bool
		out, ok4 = checked.Add(out, int64(in))
		ok = ok && ok4
	}
	return gpumem.Bytes(out), ok
}

// frozenBase is the frozen base LoRA adapters train on
// (model.Workload.FrozenBase): the Model's, for a job that computes
// parameter gradients on FrozenBaseLoRA code (Job.LoRACode); model.FrozenInput for an InputGradients job, which
// freezes every parameter and the adapters too, and for the training of a
// model with nothing trainable.
func (j *Job) frozenBase() model.FrozenBase {
	if j.Mode == Training && (j.Gradients == InputGradients || j.Model.trainableParams == 0) {
		// Every parameter frozen, the input differentiated (a model
		// frozen by hand trains nothing else).
		return model.FrozenInput
	}
	if j.LoRACode != FrozenBaseLoRA || j.Mode != Training || j.Gradients == InputGradients {
		return model.FrozenBase{}
	}
	f := j.Model.frozen
	f.Dropout = f.Rank > 0 && j.LoRADropout > 0
	return f
}
