package model

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// peftDefaultTargets is PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
// (peft/utils/constants.py) for the families gpumem reads. PEFT raises an
// error for a model_type it does not list, and so does [LoRA.Adapters].
var peftDefaultTargets = map[string][]string{
	"t5": {"q", "v"}, "mt5": {"q", "v"}, "gpt2": {"c_attn"}, "opt": {"q_proj", "v_proj"},
	"gpt_neox": {"query_key_value"}, "bert": {"query", "value"}, "roberta": {"query", "value"},
	"llama": {"q_proj", "v_proj"}, "gpt_bigcode": {"c_attn"}, "falcon": {"query_key_value"}, "bloom": {"query_key_value"},
	"mistral": {"q_proj", "v_proj"}, "mixtral": {"q_proj", "v_proj"},
	"phi": {"q_proj", "v_proj", "fc1", "fc2"}, "phi3": {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"},
	"gemma": {"q_proj", "v_proj"}, "gemma2": {"q_proj", "v_proj"},
	"qwen2": {"q_proj", "v_proj"}, "qwen2_moe": {"q_proj", "v_proj"},
	"qwen3": {"q_proj", "v_proj"}, "qwen3_moe": {"q_proj", "v_proj"},
}

// diffusersUNetTargets are the UNet modules the diffusers LoRA scripts
// adapt.
var diffusersUNetTargets = []string{"to_k", "to_q", "to_v", "to_out.0"}

// AllLinear is the LoRA target that selects every linear layer but the
// output head, as PEFT's target_modules="all-linear".
const AllLinear = "all-linear"

// LoRA describes low-rank adapters (Hu et al. 2021) on linear layers:
// for a targeted layer with weight [out, in] it adds lora_A [Rank, in]
// and lora_B [out, Rank]. The scaling alpha does not change memory.
type LoRA struct {
	// Rank is r, the adapters' inner size; it must be positive.
	Rank int64
	// Targets are module names matched as PEFT matches target_modules
	// given as a list: a module matches when its name equals a target or
	// ends with "." + target ("q_proj", "self_attn.v_proj"). [AllLinear]
	// selects every linear layer but the output head. Nil means PEFT's
	// default for the model's family.
	Targets []string
	// DType is the adapters' storage. Invalid (zero) means FP32: PEFT's
	// get_peft_model(autocast_adapter_dtype=True) keeps adapter weights in
	// float32 even on a 16-bit base.
	DType gpumem.DType
}

// linearModule reports whether t is the weight of a linear layer (the
// modules LoRA and bitsandbytes act on) and returns the module name with
// its in and out features. GPT-2's Conv1D stores [in, out].
func linearModule(s Spec, t gpumem.Tensor) (module string, in, out int64, ok bool) {
	if len(t.Shape) != 2 {
		return "", 0, 0, false
	}
	module, ok = strings.CutSuffix(t.Name, ".weight")
	if !ok {
		return "", 0, 0, false
	}
	last := module[strings.LastIndex(module, ".")+1:]
	switch {
	case strings.Contains(last, "embed") || strings.Contains(t.Name, "embeddings.") || last == "wte" || last == "wpe" ||
		last == "shared" || last == "relative_attention_bias" || last == "token_embd" || last == "shared_expert_gate":
		return "", 0, 0, false
	case (s.Family == "deepseek_v2" || s.Family == "deepseek_v3") && strings.HasSuffix(module, "mlp.gate"):
		return "", 0, 0, false // DeepseekV3TopkRouter.weight is an nn.Parameter, not a Linear
	}
	out, in = t.Shape[0], t.Shape[1]
	if s.Family == "gpt2" && (last == "c_attn" || last == "c_proj" || last == "c_fc") {
		in, out = out, in
	}
	return module, in, out, true
}

// isHead reports whether a module is the model's output head, which
// "all-linear" and bitsandbytes quantization leave alone
// (transformers get_keys_to_not_convert).
func isHead(module string) bool {
	last := module[strings.LastIndex(module, ".")+1:]
	return last == "lm_head" || last == "embed_out" || last == "proj_out" || module == "output"
}

func (l LoRA) targets(s Spec) ([]string, error) {
	if l.Targets != nil {
		if len(l.Targets) == 0 {
			return nil, gpumem.Errorf("LoRA.Targets", l.Targets, gpumem.ErrInvalid, "empty target list")
		}
		return l.Targets, nil
	}
	if s.Family == FamilyUNet {
		// diffusers' LoRA training scripts (examples/text_to_image/
		// train_text_to_image_lora.py, examples/dreambooth/
		// train_dreambooth_lora.py and _sdxl.py) adapt the UNet's
		// attention projections: LoraConfig(target_modules=["to_k",
		// "to_q", "to_v", "to_out.0"]).
		return diffusersUNetTargets, nil
	}
	switch s.Family {
	case FamilyFlux:
		// examples/dreambooth/train_dreambooth_lora_flux.py: the joint
		// attention's projections of both streams and the feed-forwards.
		return fluxLoRATargets, nil
	case FamilySD3:
		// examples/dreambooth/train_dreambooth_lora_sd3.py: the joint
		// attention's projections of both streams.
		return sd3LoRATargets, nil
	}
	t, ok := peftDefaultTargets[s.Family]
	if !ok {
		return nil, gpumem.Errorf("LoRA.Targets", nil, gpumem.ErrInvalid,
			"PEFT has no default target modules for %q; name them (or use %q)", s.Family, AllLinear)
	}
	return t, nil
}

func matchTarget(module string, targets []string) bool {
	for _, t := range targets {
		if t == AllLinear {
			if !isHead(module) {
				return true
			}
			continue
		}
		if module == t || strings.HasSuffix(module, "."+t) {
			return true
		}
	}
	return false
}

// Adapters returns the LoRA tensors for s: "<module>.lora_A.weight"
// [Rank, in] and "<module>.lora_B.weight" [out, Rank] for every targeted
// linear layer, in inventory order. It fails if Rank is not positive or
// no module matches.
func (l LoRA) Adapters(s Spec) ([]gpumem.Tensor, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	rs, err := l.adaptersFor(s, runsOf(s.Tensors()))
	if err != nil {
		return nil, err
	}
	return tensorsOf(rs), nil
}

// adaptersFor checks l and returns the adapter runs for the base runs of
// s (folded or not).
func (l LoRA) adaptersFor(s Spec, base []Run) ([]Run, error) {
	if l.Rank <= 0 || l.Rank > maxDim {
		return nil, gpumem.Errorf("LoRA.Rank", l.Rank, gpumem.ErrInvalid, "must be in [1, 2^40]")
	}
	dt := l.DType
	if dt == gpumem.Invalid {
		dt = gpumem.FP32
	}
	if !dt.Valid() {
		return nil, gpumem.Errorf("LoRA.DType", l.DType, gpumem.ErrInvalid, "not a storage format")
	}
	targets, err := l.targets(s)
	if err != nil {
		return nil, err
	}
	return l.adapters(s, base, targets, dt)
}

// adapters returns the adapter runs for the base runs of s.
func (l LoRA) adapters(s Spec, base []Run, targets []string, dt gpumem.DType) ([]Run, error) {
	var out []Run
	for _, r := range base {
		module, in, o, ok := linearModule(s, r.Tensor)
		if !ok || !matchTarget(module, targets) {
			continue
		}
		out = append(out,
			Run{gpumem.Tensor{Name: module + ".lora_A.weight", Shape: []int64{l.Rank, in}, DType: dt}, r.Count, r.Layers},
			Run{gpumem.Tensor{Name: module + ".lora_B.weight", Shape: []int64{o, l.Rank}, DType: dt}, r.Count, r.Layers})
	}
	if len(out) == 0 {
		return nil, gpumem.Errorf("LoRA.Targets", targets, gpumem.ErrInvalid, "no linear layer of %s matches", s.Family)
	}
	return out, nil
}

// runsOf makes each tensor a run of 1.
func runsOf(ts []gpumem.Tensor) []Run {
	out := make([]Run, len(ts))
	for i, t := range ts {
		out[i] = Run{Tensor: t, Count: 1, Layers: 1}
	}
	return out
}

// tensorsOf lists the tensors of runs of 1.
func tensorsOf(rs []Run) []gpumem.Tensor {
	out := make([]gpumem.Tensor, len(rs))
	for i, r := range rs {
		out[i] = r.Tensor
	}
	return out
}

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
func (s Spec) FrozenByModel(name string) bool {
	return name == "model.encoder.embed_positions.weight" && layoutOf(&s) == layoutWhisper
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
	fold := f.Train == nil
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

// isQuantConstant reports whether a tensor holds quantization constants
// (bitsandbytes quant_state, FP8 weight_scale_inv), not parameters.
func isQuantConstant(name string) bool {
	for _, suffix := range [...]string{".quant_state", ".weight_scale_inv", ".SCB", ".qzeros", ".scales", ".g_idx"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// IsQuantConstant reports whether a tensor of [Finetune.Tensors] holds
// quantization constants (bitsandbytes quant_state and SCB, FP8
// weight_scale_inv, GPTQ/AWQ qzeros, scales and g_idx): stored as the
// quantization library keeps them, whatever a job's precision.
func IsQuantConstant(name string) bool { return isQuantConstant(name) }

// defaultGroup is GPTQ's and AWQ's default group_size (AutoGPTQ
// BaseQuantizeConfig.group_size, AutoAWQ quant_config "q_group_size").
const defaultGroup = 128

// QuantMethod returns the library whose layout stores f.Quant:
// "bitsandbytes", "gptq", "awq" or "fp8", or "" when f quantizes
// nothing. It fails for a method that cannot store f.Quant.
func (f Finetune) QuantMethod() (string, error) { return f.method() }

// method checks Quant against Method and returns the method.
func (f Finetune) method() (string, error) {
	m := strings.ToLower(f.Method)
	switch f.Quant {
	case gpumem.Invalid:
		if m != "" {
			return "", gpumem.Errorf("Finetune.Method", f.Method, gpumem.ErrInvalid, "a quantization method needs Quant")
		}
		return "", nil
	case gpumem.NF4, gpumem.FP4:
		if m == "" || m == "bitsandbytes" {
			return "bitsandbytes", nil
		}
	case gpumem.INT8:
		if m == "" || m == "bitsandbytes" {
			return "bitsandbytes", nil
		}
	case gpumem.INT4:
		if m == "gptq" || m == "awq" {
			return m, nil
		}
		if m == "" {
			return "", gpumem.Errorf("Finetune.Method", f.Method, gpumem.ErrInvalid, "int4 weights are stored by gptq or awq; name the method")
		}
	case gpumem.FP8E4M3, gpumem.FP8E5M2:
		if m == "" || m == "fp8" {
			return "fp8", nil
		}
	default:
		return "", gpumem.Errorf("Finetune.Quant", f.Quant, gpumem.ErrUnsupported,
			"quantized storage is nf4, fp4, int8 (bitsandbytes), int4 (gptq, awq) or block-scaled fp8_e4m3/fp8_e5m2")
	}
	switch m {
	case "bitsandbytes", "gptq", "awq", "fp8":
		return "", gpumem.Errorf("Finetune.Method", f.Method, gpumem.ErrInvalid, "%s does not store %s weights", m, f.Quant)
	}
	return "", gpumem.Errorf("Finetune.Method", f.Method, gpumem.ErrUnsupported, "want bitsandbytes, gptq, awq or fp8")
}

func methodName(m string) string {
	if m == "" {
		return "an unquantized model"
	}
	return m
}

// packedInt4 returns the tensors GPTQ (exllamav2 layout) or AWQ (GEMM
// layout) store for a linear layer of in × out features with group size
// g (-1: per row): qweight (as INT4 [out, in], the bytes of the int32
// packing), qzeros (int32, 8 zeros per int32), scales (fp16) and, for
// GPTQ, g_idx (int32 per input feature).
func packedInt4(method, module string, in, out, g int64) ([]gpumem.Tensor, error) {
	if g == -1 {
		g = in
	}
	field := "Finetune.GroupSize"
	if in%g != 0 {
		return nil, gpumem.Errorf(field, g, gpumem.ErrInvalid, "%s: it does not divide %s's %d input features", method, module, in)
	}
	if method == "gptq" && in%32 != 0 {
		return nil, gpumem.Errorf("Finetune.Quant", gpumem.INT4, gpumem.ErrUnsupported,
			"gptq (exllamav2) needs in_features divisible by 32; %s has %d", module, in)
	}
	if method == "awq" && out%8 != 0 {
		return nil, gpumem.Errorf("Finetune.Quant", gpumem.INT4, gpumem.ErrUnsupported,
			"awq needs out_features divisible by 8; %s has %d", module, out)
	}
	groups := in / g
	if method == "gptq" {
		out += -out & 31 // exllamav2 pads out_features to a multiple of 32
	}
	q := gpumem.Tensor{Name: module + ".qweight", Shape: []int64{out, in}, DType: gpumem.INT4}
	ts := []gpumem.Tensor{q,
		{Name: module + ".qzeros", Shape: []int64{groups, out / 8}, DType: gpumem.INT32},
		{Name: module + ".scales", Shape: []int64{groups, out}, DType: gpumem.FP16}}
	if method == "gptq" {
		ts = append(ts, gpumem.Tensor{Name: module + ".g_idx", Shape: []int64{in}, DType: gpumem.INT32})
	}
	return ts, nil
}

func sumElems(ts []gpumem.Tensor) (int64, error) {
	var n int64
	for i, t := range ts {
		e, err := t.Elems()
		if err != nil {
			return 0, err
		}
		var ok bool
		if n, ok = checked.Add(n, e); !ok {
			return 0, gpumem.Errorf("tensors["+strconv.Itoa(i)+"]", t.Name, gpumem.ErrRange, "element count overflows int64")
		}
	}
	return n, nil
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
