package model

import (
	"slices"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Finetune is a model set up for training: which base parameters train,
// optional LoRA adapters, and optional 4-bit storage of the base linear
// weights (QLoRA). The zero value besides Model trains every parameter.
type Finetune struct {
	// Model is the base model.
	Model Spec
	// LoRA adds adapters when LoRA.Rank > 0; the base is then frozen
	// unless Train says otherwise.
	LoRA LoRA
	// Quant stores the base linear weights quantized; Invalid (zero)
	// keeps the model's dtypes. gpumem.NF4 or gpumem.FP4 is bitsandbytes
	// 4-bit storage (QLoRA), with constants sized by Blockwise.
	// gpumem.FP8E4M3 or FP8E5M2 is block-scaled FP8 as DeepSeek-V3 ships
	// and transformers' FP8 quantizer loads it: one fp32
	// "weight_scale_inv" per FP8Block tile. Embeddings, norms, biases,
	// routers and the output head stay as they are (transformers
	// get_keys_to_not_convert).
	Quant gpumem.DType
	// QuantizeHead stores an untied output head quantized too, as
	// bitsandbytes NF4, FP4 or INT8 weights: Lightning's
	// BitsandbytesPrecision (lightning/fabric/plugins/precision/
	// bitsandbytes.py, convert_module with no ignore_modules) and lit-gpt's
	// quantization() context (lit_gpt/utils.py at 6ba8a51e), which litgpt's
	// generate and finetune scripts use, replace every torch.nn.Linear,
	// lm_head included. It needs Quant NF4, FP4 or INT8 and a model whose
	// head is not tied to its embedding (an embedding is never
	// quantized).
	QuantizeHead bool
	// Method is the library whose layout stores Quant, as
	// quantization_config's quant_method names it ([Quantization.Method]):
	//   - "bitsandbytes" (the default for NF4, FP4 and INT8): NF4/FP4 as
	//     above; INT8 is LLM.int8 (Linear8bitLt): the weight in int8
	//     [out, in] and "<module>.SCB", one fp32 absmax per output row
	//     (bitsandbytes nn/modules.py Int8Params, 0.50.2.dev0 at 95f9af3);
	//   - "gptq" (INT4, AutoGPTQ's QuantLinear as the exllamav2 kernel
	//     registers it, auto_gptq/nn_modules/qlinear/qlinear_exllamav2.py
	//     at 9f7d370): qweight int32 [in·4/32, out], qzeros int32
	//     [ceil(in/g), out·4/32], scales fp16 [ceil(in/g), out] and g_idx
	//     int32 [in], out padded to a multiple of 32;
	//   - "awq" (INT4, AutoAWQ's WQLinear_GEMM, awq/modules/linear/gemm.py
	//     at 88e4c76): qweight int32 [in, out/8], qzeros int32 [in/g,
	//     out/8], scales fp16 [in/g, out];
	//   - "fp8" (the default for FP8E4M3 and FP8E5M2): block-scaled, as
	//     above.
	// The packed qweight is listed as "<module>.qweight" in INT4 with the
	// weight's [out, in] shape: the same bytes as the int32 packing
	// (in·out/2) and the parameter count of the weight it stores.
	Method string
	// GroupSize is GPTQ's and AWQ's group_size: input features per scale
	// and zero. Zero means 128, both libraries' default; -1 means one
	// group per row (per channel). It must divide every quantized
	// layer's in_features (both kernels assert it).
	GroupSize int64
	// Unquantized is the storage of the frozen floating-point base
	// tensors that Quant leaves alone (embeddings, norms, biases, the
	// output head): from_pretrained loads them in torch_dtype (float16
	// when none is given, transformers' bitsandbytes quantizer
	// update_torch_dtype), which a QLoRA recipe sets to its
	// bnb_4bit_compute_dtype (bf16), and keeps them there whatever the
	// training precision. PEFT's prepare_model_for_kbit_training upcasts
	// every fp16/bf16 parameter to fp32 (peft/utils/other.py at
	// 5d602fd); TRL's SFTTrainer then casts embed_tokens and lm_head back
	// to bf16 (peft_module_casting_to_bf16, trl/trainer/utils.py), and so
	// does the QLoRA repository's qlora.py. Both keep the norms in fp32,
	// which this field does not tell apart (65·4096 elements for a
	// Llama-3-8B: 0.5 MB). Invalid (zero) leaves them to the job's
	// precision policy, as for a model that is not quantized: fp32 under
	// AMP is what prepare_model_for_kbit_training alone leaves. It needs
	// Quant.
	Unquantized gpumem.DType
	// ComputeDType is bitsandbytes' bnb_4bit_compute_dtype: the dtype a
	// 4-bit layer computes in (Linear4bit.forward casts its input to it
	// and its output back). transformers' BitsAndBytesConfig defaults to
	// float32 when it is not given; QLoRA recipes give bf16. Invalid
	// (zero) means the job's compute dtype. It needs Quant NF4 or FP4.
	ComputeDType gpumem.DType
	// Unfused selects bitsandbytes before 0.50.0, whose 4-bit forward
	// (MatMul4Bit.forward at 0.49.2) dequantizes the whole weight for
	// any input of more than one token, to its stored dtype and then to
	// ComputeDType; 0.50.0 and later run a fused gemm_4bit kernel
	// instead. It needs Quant NF4 or FP4.
	Unfused bool
	// KeepsInputs selects bitsandbytes before 0.43.2, whose MatMul4Bit
	// keeps its input as an attribute of the autograd context,
	// ctx.tensors = (A, B) (bitsandbytes/autograd/_functions.py at
	// 0.42.0), not through ctx.save_for_backward: backward never releases
	// it, so every 4-bit layer's input (after Linear4bit.forward's cast
	// to ComputeDType) lives as long as the step's autograd graph does.
	// Within a step the activation model already counts those inputs;
	// what changes is after backward, when a training loop that still
	// references the step's loss or logits keeps them all
	// (budget.Job.HoldsPreviousStep). 0.43.2 keeps no input at all
	// (ctx.tensors = (None, B), bitsandbytes PR #1270, commit 9e75374,
	// "fix QLoRA mem bug: delete useless buffered activation"). It needs
	// Unfused (0.43.2 predates 0.50.0) and a dense sequential decoder
	// (llama-style blocks) whose linear inputs [Finetune.KeptInputs]
	// counts.
	KeepsInputs bool
	// QuantFrom is the dtype bitsandbytes quantized the 4-bit weights
	// from (QuantState.dtype), which dequantize_4bit returns before
	// MatMul4Bit casts the weight to the compute dtype. Invalid (zero)
	// means Unquantized when it is set (transformers quantizes the
	// weights as it loads them in that dtype), else the compute dtype.
	// Lightning's BitsandbytesPrecision quantizes
	// weight.contiguous().to(device, dtype=torch.half) whatever the
	// precision (_Linear4bit.quantize, lightning/fabric/plugins/
	// precision/bitsandbytes.py at 2.4.0): fp16, so a bf16 job holds the
	// fp16 copy and its bf16 cast at once. It needs Quant NF4 or FP4.
	QuantFrom gpumem.DType
	// Blockwise sizes the 4-bit quantization constants. QLoRA uses
	// {Block: 64, Nested: true} (bnb_4bit_use_double_quant).
	Blockwise gpumem.Blockwise
	// FP8Block is the FP8 scale tile (weight_block_size, rows × columns);
	// zero means one scale per tensor. DeepSeek-V3 uses {128, 128}.
	FP8Block [2]int64
	// Train reports whether a base tensor trains. Nil means every base
	// tensor without LoRA and none with it. See [TrainParts] and
	// [FreezeParts].
	Train func(gpumem.Tensor) bool
}

// FrozenByModel reports whether the model's own code freezes the tensor
// name (requires_grad_(False) at construction), so that it gets no
// gradient and no optimizer state whatever the fine-tuning setup says:
// Whisper's encoder position table, a fixed sinusoid
// (WhisperEncoder.__init__: self.embed_positions.requires_grad_(False),
// transformers modeling_whisper.py, v4.27 to v4.57 and later).
//
// It also reports the tensors a classifier's forward runs but its loss
// does not read, which backward therefore leaves without a gradient and
// torch.optim's step without state (it skips a parameter whose grad is
// None): CLIPForImageClassification's and SiglipForImageClassification's
// loss reads the mean of the tower's last_hidden_state
// (modeling_clip.py, modeling_siglip.py at v4.57.1), not its pooler
// output, which is CLIP's post_layernorm (applied to the class token
// only) and SigLIP's attention-pooling head (vision_use_head); LLaVA's
// language model reads the vision tower's second-to-last hidden state
// (vision_feature_layer -2, LlavaModel.get_image_features in
// modeling_llava.py at v4.57.1), so the tower's last layer and its
// post_layernorm get no gradient either.
func (s Spec) FrozenByModel(name string) bool {
	switch l := layoutOf(&s); {
	case l == layoutWhisper:
		return name == "model.encoder.embed_positions.weight"
	case s.llavaUnusedLayer():
		return strings.HasPrefix(name, "vision_tower.vision_model.post_layernorm.") ||
			strings.HasPrefix(name, "vision_tower.vision_model.encoder.layers."+itoa(s.Vision.Layers-1)+".")
	case s.Head != HeadImageCls:
		return false
	case l == layoutCLIPVision:
		return strings.HasPrefix(name, "vision_model.post_layernorm.")
	case l == layoutSiglipVision:
		return strings.HasPrefix(name, "vision_model.head.")
	}
	return false
}

// llavaUnusedLayer says that s is a LLaVA model whose vision tower's last
// layer computes a hidden state the language model does not read
// (vision_feature_layer -2, which activations.go's multimodal assumes).
func (s Spec) llavaUnusedLayer() bool {
	return s.Family == "llava" && s.Vision != nil && s.Vision.Layers > 1
}

// BufferBytes returns the bytes of the tensors the model's modules
// register as buffers (not parameters: no gradient, no optimizer state,
// not in the checkpoint when non-persistent) that move to the GPU with
// the model, each rounded to the caching allocator's 512 bytes:
//
//   - gpt_bigcode: the causal mask GPTBigCodeModel keeps whole,
//     torch.tril(torch.ones((n_positions, n_positions), dtype=bool)),
//     1 byte per entry (64 MiB for StarCoder's 8192 positions);
//   - gpt2: every GPT2Attention's own causal mask "bias",
//     torch.tril(torch.ones((n_positions, n_positions), dtype=bool)),
//     n_positions² bytes a layer, and its "masked_bias", a 4-byte fp32
//     scalar (GPT2Attention.__init__, modeling_gpt2.py at v4.57.1,
//     commit 8cb5963c: both register_buffer(..., persistent=False), so
//     from_pretrained builds them and model.to() moves them); measured on
//     the CPU (testdata/measured/cpu, model_info.buffer_bytes): two layers
//     of 1,024 positions hold 2,097,160 bytes;
//   - bert, roberta: the embeddings' position_ids (an arange expanded to
//     one row) and token_type_ids (zeros of its size), int64 each.
//
// Other buffers of a few hundred bytes (rotary inv_freq) are left out.
// (transformers modeling_gpt_bigcode.py and modeling_bert.py /
// modeling_roberta.py, v4.30 to v4.57 and later: register_buffer, or
// nn.Buffer in the newest releases.)
func (s Spec) BufferBytes() gpumem.Bytes {
	round := func(b int64) int64 { return (b + 511) / 512 * 512 }
	switch s.Family {
	case "gpt_bigcode":
		if n, ok := checked.Mul(s.Positions, s.Positions); ok && s.Positions > 0 {
			return gpumem.Bytes(round(n))
		}
	case "gpt2":
		n, ok := checked.Mul(s.Positions, s.Positions)
		if !ok || s.Positions <= 0 || s.Layers <= 0 {
			return 0
		}
		if b, ok := checked.Mul(round(n)+round(4), s.Layers); ok {
			return gpumem.Bytes(b)
		}
	case "bert", "roberta":
		if s.Positions > 0 && s.Positions <= actMaxTokens {
			return gpumem.Bytes(2 * round(8*s.Positions))
		}
	}
	return 0
}

// TrainParts returns a Train predicate that trains the base tensors of
// the given parts or components only, as [Component] names them:
// "vision", "projector", "language", "encoder", "decoder" (parts) or
// "embeddings", "layer", "head" (components). TrainParts("projector") is
// LLaVA's first stage.
func TrainParts(parts ...string) func(gpumem.Tensor) bool {
	parts = slices.Clone(parts)
	return func(t gpumem.Tensor) bool {
		part, comp, _ := Component(t.Name)
		return slices.Contains(parts, part) || slices.Contains(parts, comp)
	}
}

// FreezeParts returns a Train predicate that trains every base tensor but
// those of the given parts or components (FreezeParts("vision"): vision
// tower frozen).
func FreezeParts(parts ...string) func(gpumem.Tensor) bool {
	train := TrainParts(parts...)
	return func(t gpumem.Tensor) bool { return !train(t) }
}

func (f Finetune) trains(t gpumem.Tensor) bool {
	if f.Model.FrozenByModel(t.Name) {
		return false
	}
	if f.Train != nil {
		return f.Train(t)
	}
	return f.LoRA.Rank == 0
}

// Tensors returns every tensor the fine-tuning setup holds: the base
// weights (quantized ones in f.Quant, each followed by its constants: a
// UINT8 "<name>.quant_state" holding the bitsandbytes constants sized by
// gpumem.Blockwise, or an fp32 "<module>.weight_scale_inv" for FP8),
// then the adapters.
func (f Finetune) Tensors() ([]gpumem.Tensor, error) {
	rs, err := f.runs(false)
	if err != nil {
		return nil, err
	}
	return tensorsOf(rs), nil
}

// Runs returns [Finetune.Tensors] and [Finetune.Trainable] folded into
// runs as [Spec.Runs] folds a model: its cost follows the distinct layer
// kinds, not the layer count. A Train predicate may tell layers apart,
// and so may a LoRA target naming a layer ("layers.3.q_proj"): then
// every tensor is a run of 1.
func (f Finetune) Runs() (all, trainable []Run, err error) {
	// LLaVA's last vision layer trains apart from the others
	// (FrozenByModel): its tensors are read one by one.
	fold := f.Train == nil && !f.Model.llavaUnusedLayer()
	for _, t := range f.LoRA.Targets {
		for _, seg := range strings.Split(t, ".") {
			if seg != "" && strings.Trim(seg, "0123456789") == "" {
				fold = false
			}
		}
	}
	if all, err = f.runs(fold); err != nil {
		return nil, nil, err
	}
	if trainable, err = f.trainable(all); err != nil {
		return nil, nil, err
	}
	return all, trainable, nil
}

// runs builds the inventory of Tensors as runs, folded or of 1.
func (f Finetune) runs(fold bool) ([]Run, error) {
	if err := f.Model.Validate(); err != nil {
		return nil, err
	}
	method, err := f.method()
	if err != nil {
		return nil, err
	}
	group := f.GroupSize
	if group == 0 {
		group = defaultGroup
	}
	if f.GroupSize != 0 && method != "gptq" && method != "awq" {
		return nil, gpumem.Errorf("Finetune.GroupSize", f.GroupSize, gpumem.ErrInvalid, "group_size applies to gptq and awq, not %s", methodName(method))
	}
	if group < -1 || group == 0 || group > maxDim {
		return nil, gpumem.Errorf("Finetune.GroupSize", f.GroupSize, gpumem.ErrInvalid, "want a positive group size, or -1 for one group per row")
	}
	if u := f.Unquantized; u != gpumem.Invalid && (f.Quant == gpumem.Invalid || !u.IsFloat() || u.IsQuantized() || u.Bits() < 16) {
		if f.Quant == gpumem.Invalid {
			return nil, gpumem.Errorf("Finetune.Unquantized", u, gpumem.ErrInvalid, "it sets the storage of what Quant leaves alone; set Quant too")
		}
		return nil, gpumem.Errorf("Finetune.Unquantized", u, gpumem.ErrInvalid, "want fp32, bf16 or fp16 (torch_dtype)")
	}
	bnb4 := f.Quant == gpumem.NF4 || f.Quant == gpumem.FP4
	if c := f.ComputeDType; c != gpumem.Invalid && (!bnb4 || (c != gpumem.FP32 && c != gpumem.BF16 && c != gpumem.FP16)) {
		if !bnb4 {
			return nil, gpumem.Errorf("Finetune.ComputeDType", c, gpumem.ErrInvalid, "bnb_4bit_compute_dtype applies to nf4 and fp4 weights")
		}
		return nil, gpumem.Errorf("Finetune.ComputeDType", c, gpumem.ErrInvalid, "want fp32, bf16 or fp16")
	}
	if f.Unfused && !bnb4 {
		return nil, gpumem.Errorf("Finetune.Unfused", f.Unfused, gpumem.ErrInvalid, "it selects bitsandbytes' 4-bit kernels; set Quant nf4 or fp4")
	}
	if q := f.QuantFrom; q != gpumem.Invalid && (!bnb4 || (q != gpumem.FP32 && q != gpumem.BF16 && q != gpumem.FP16)) {
		if !bnb4 {
			return nil, gpumem.Errorf("Finetune.QuantFrom", q, gpumem.ErrInvalid, "it is the dtype bitsandbytes quantized nf4 or fp4 weights from; set Quant nf4 or fp4")
		}
		return nil, gpumem.Errorf("Finetune.QuantFrom", q, gpumem.ErrInvalid, "want fp32, bf16 or fp16")
	}
	if f.KeepsInputs {
		if err := f.checkKeepsInputs(); err != nil {
			return nil, err
		}
	}
	if f.QuantizeHead && (method != "bitsandbytes" || f.Model.TiedEmbeddings) {
		if method != "bitsandbytes" {
			return nil, gpumem.Errorf("Finetune.QuantizeHead", true, gpumem.ErrInvalid, "it quantizes the head as bitsandbytes does; set Quant nf4, fp4 or int8")
		}
		return nil, gpumem.Errorf("Finetune.QuantizeHead", true, gpumem.ErrInvalid, "%s ties its head to the embedding, which is not quantized", f.Model.Family)
	}
	fp8 := f.Quant == gpumem.FP8E4M3 || f.Quant == gpumem.FP8E5M2
	if b := f.FP8Block; b[0] < 0 || b[1] < 0 || (b[0] == 0) != (b[1] == 0) {
		return nil, gpumem.Errorf("Finetune.FP8Block", b, gpumem.ErrInvalid, "both sizes positive, or both zero for per-tensor scales")
	}
	var base []Run
	if fold {
		base = f.Model.Runs()
	} else {
		base = runsOf(f.Model.Tensors())
	}
	out := make([]Run, 0, len(base))
	for _, r := range base {
		t := r.Tensor
		if t.DType != gpumem.FP32 && t.DType != gpumem.BF16 && t.DType != gpumem.FP16 {
			// Already quantized (a GGUF or FP8 checkpoint) or integer:
			// stored as it is.
			out = append(out, r)
			continue
		}
		if module, in, o, ok := linearModule(f.Model, t); ok && fp8 && !isHead(module) {
			// transformers FP8Linear: weight [out, in] in FP8 and
			// weight_scale_inv [ceil(out/b0), ceil(in/b1)] in fp32.
			scale := []int64{}
			if b := f.FP8Block; b[0] > 0 {
				r, _ := checked.CeilDiv(o, b[0])
				c, _ := checked.CeilDiv(in, b[1])
				scale = []int64{r, c}
			}
			t.DType = f.Quant
			out = append(out, Run{t, r.Count, r.Layers},
				Run{gpumem.Tensor{Name: module + ".weight_scale_inv", Shape: scale, DType: gpumem.FP32}, r.Count, r.Layers})
			continue
		}
		if module, in, o, ok := linearModule(f.Model, t); ok && (method == "gptq" || method == "awq") && !isHead(module) {
			rs, err := packedInt4(method, module, in, o, group)
			if err != nil {
				return nil, err
			}
			for _, q := range rs {
				out = append(out, Run{q, r.Count, r.Layers})
			}
			continue
		}
		if module, _, o, ok := linearModule(f.Model, t); ok && f.Quant == gpumem.INT8 && (!isHead(module) || f.QuantizeHead) {
			// Linear8bitLt: int8 weight, one fp32 absmax per output row.
			t.DType = gpumem.INT8
			out = append(out, Run{t, r.Count, r.Layers},
				Run{gpumem.Tensor{Name: module + ".SCB", Shape: []int64{o}, DType: gpumem.FP32}, r.Count, r.Layers})
			continue
		}
		if module, _, _, ok := linearModule(f.Model, t); ok && f.Quant != gpumem.Invalid && (!isHead(module) || (f.QuantizeHead && bnb4)) {
			n, err := t.Elems()
			if err != nil {
				return nil, err
			}
			c, err := f.Blockwise.Constants(n)
			if err != nil {
				return nil, err
			}
			t.DType = f.Quant
			out = append(out, Run{t, r.Count, r.Layers},
				Run{gpumem.Tensor{Name: t.Name + ".quant_state", Shape: []int64{int64(c)}, DType: gpumem.UINT8}, r.Count, r.Layers})
			continue
		}
		if f.Unquantized != gpumem.Invalid {
			t.DType = f.Unquantized
			r.Tensor = t
		}
		out = append(out, r)
	}
	if f.LoRA.Rank != 0 || f.LoRA.Targets != nil {
		ad, err := f.LoRA.adaptersFor(f.Model, base)
		if err != nil {
			return nil, err
		}
		out = append(out, ad...)
	}
	return out, nil
}

// Trainable returns the tensors the optimizer updates: the adapters and
// the base tensors Train selects. A quantized base tensor cannot train:
// without a Train predicate it is frozen; a predicate selecting one is an
// error naming it.
func (f Finetune) Trainable() ([]gpumem.Tensor, error) {
	all, err := f.runs(false)
	if err != nil {
		return nil, err
	}
	tr, err := f.trainable(all)
	if err != nil {
		return nil, err
	}
	return tensorsOf(tr), nil
}

// trainable selects the runs of all that train.
func (f Finetune) trainable(all []Run) ([]Run, error) {
	var out []Run
	for _, r := range all {
		t := r.Tensor
		switch {
		case strings.HasSuffix(t.Name, ".lora_A.weight") || strings.HasSuffix(t.Name, ".lora_B.weight"):
			out = append(out, r)
		case isQuantConstant(t.Name) || strings.HasSuffix(t.Name, "e_score_correction_bias") || t.Name == "pos_embed.pos_embed":
			// Quantization constants and buffers never train.
		case f.Train == nil && f.Quant != gpumem.Invalid && (t.DType == f.Quant || strings.HasSuffix(t.Name, ".qweight")):
			// Without a Train predicate a quantized weight is frozen: an
			// inference model, or the base under adapters.
		case f.trains(t):
			if f.Quant != gpumem.Invalid && (t.DType == f.Quant || strings.HasSuffix(t.Name, ".qweight")) {
				return nil, gpumem.Errorf("Finetune.Train("+t.Name+")", t.DType, gpumem.ErrInvalid, "a quantized weight cannot train")
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// Validate reports why f cannot be built, with the errors [Finetune.Runs]
// returns: those of [Spec.Validate], then of the adapters, the
// quantization and the Train predicate. Nil means [Finetune.Params] and
// [Finetune.TrainableParams] are the counts.
func (f Finetune) Validate() error {
	_, _, err := f.Runs()
	return err
}

// TrainableParams returns the element count of [Finetune.Trainable], or 0
// when f fails [Finetune.Validate].
//
// Counts take the shape of [Spec.Params]: a plain number, 0 for a setup
// that cannot be built, whose reason Validate gives. A count is a
// property asked for again and again (tables, logs, JSON) of a setup
// checked once, and NewModel, which every estimate goes through, returns
// the same errors.
func (f Finetune) TrainableParams() int64 {
	ts, err := f.Trainable()
	if err != nil {
		return 0
	}
	n, err := sumElems(ts)
	if err != nil {
		return 0
	}
	return n
}

// Params returns the element count of the base model plus the adapters
// (quantization constants are not parameters), or 0 when f fails
// [Finetune.Validate]. See [Finetune.TrainableParams] for the shape.
func (f Finetune) Params() int64 {
	all, err := f.Tensors()
	if err != nil {
		return 0
	}
	kept := all[:0:0]
	for _, t := range all {
		if !isQuantConstant(t.Name) {
			kept = append(kept, t)
		}
	}
	n, err := sumElems(kept)
	if err != nil {
		return 0
	}
	return n
}

// WeightsBytes returns the storage of [Finetune.Tensors]: base weights in
// their storage types, 4-bit constants and adapters.
func (f Finetune) WeightsBytes() (gpumem.Bytes, error) {
	all, err := f.Tensors()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range all {
		b, err := t.Bytes()
		if err != nil {
			return 0, err
		}
		var ok bool
		if total, ok = checked.Add(total, int64(b)); !ok {
			return 0, gpumem.Errorf("Finetune", f.Model.Family, gpumem.ErrRange, "bytes overflow int64")
		}
	}
	return gpumem.Bytes(total), nil
}

// checkKeepsInputs validates KeepsInputs: bitsandbytes' unfused 4-bit
// kernels, and blocks whose linear inputs KeptInputs counts.
func (f Finetune) checkKeepsInputs() error {
	if !f.Unfused {
		return gpumem.Errorf("Finetune.KeepsInputs", true, gpumem.ErrInvalid, "it selects bitsandbytes before 0.43.2, whose 4-bit matmul is unfused; set Unfused too")
	}
	s := f.Model
	l := layoutOf(&s)
	if (l != layoutLlama && l != layoutPhi3) || s.MoE.Experts > 0 || s.MLA.Enabled() || s.Encoder != nil || s.Vision != nil || s.Text != nil || s.EncoderOnly {
		return gpumem.Errorf("Finetune.KeepsInputs", true, gpumem.ErrInvalid, "the kept inputs are modelled for dense decoder-only models with llama-style blocks, not %s", s.Family)
	}
	if _, ok := f.keptInputs(); !ok {
		return gpumem.Errorf("Finetune.KeepsInputs", true, gpumem.ErrRange, "the kept inputs of %d layers of width %d overflow int64", s.Layers, s.Hidden)
	}
	return nil
}

// KeptInputs returns the elements per token of the inputs that the 4-bit
// layers of bitsandbytes before 0.43.2 keep (KeepsInputs; zero without
// it), counted by storage: in each llama-style block the attention's
// input (the first norm's output, read by q, k and v, or a fused qkv),
// the output projection's input (heads × head_dim), the MLP's input
// (the second norm's output, read by gate and up) and the down
// projection's input (Intermediate), and the head's input (Hidden) when
// QuantizeHead quantizes it. The first block's attention input needs no
// gradient when the embeddings are frozen, and MatMul4Bit then keeps
// nothing (any(ctx.needs_input_grad[:2]) is false): counted all the
// same, an upper bound by Hidden elements per token.
//
// A Finetune that [Finetune.Runs] accepts does not overflow it.
func (f Finetune) KeptInputs() int64 {
	if !f.KeepsInputs {
		return 0
	}
	per, _ := f.keptInputs()
	return per
}

func (f Finetune) keptInputs() (int64, bool) {
	s := f.Model
	attnOut, ok := checked.Mul(s.Heads, s.HeadDim)
	block := attnOut
	for _, x := range []int64{s.Hidden, s.Hidden, s.Intermediate} {
		var ok2 bool
		block, ok2 = checked.Add(block, x)
		ok = ok && ok2
	}
	per, ok2 := checked.Mul(s.Layers, block)
	ok = ok && ok2
	if f.QuantizeHead {
		per, ok2 = checked.Add(per, s.Hidden)
		ok = ok && ok2
	}
	return per, ok
}
