package accuracy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// Job is a job in the vocabulary of tools/calibrate (the "job" object of
// testdata/measured/README.md), which testdata/published/jobs.jsonl
// shares, with four fields of its own for published runs: Quant,
// LoRADType, Parallel and Offload.
type Job struct {
	// Model is the grid's name for the model; Catalog names
	// model/configs/<Catalog>.json. Config is the Hugging Face config the
	// model was built from; it is read instead of the catalog when
	// ConfigOverrides is set or Catalog is empty.
	Model           string          `json:"model"`
	Catalog         string          `json:"catalog"`
	Config          json.RawMessage `json:"config"`
	ConfigOverrides json.RawMessage `json:"config_overrides"`
	// Kind is how the harness built the inputs: causal, masked, seq2seq,
	// speech, vision or llava.
	Kind string `json:"kind"`
	// Mode is train, prefill or generate.
	Mode      string `json:"mode"`
	Batch     int    `json:"batch"`
	Seq       *int   `json:"seq"`
	Generate  int    `json:"generate"`
	GradAccum int    `json:"grad_accum"`
	Images    int    `json:"images"`
	// EncoderSeq and DecoderSeq are the encoder–decoders' lengths, which
	// budget.Job derives (T5: the encoder reads Seq; Whisper: 1500
	// frames); they are checked, not used.
	EncoderSeq *int `json:"encoder_seq"`
	DecoderSeq *int `json:"decoder_seq"`
	// Precision is a budget.ParsePrecision name; Optimizer an
	// optimizer.Lookup name (null for inference).
	Precision string  `json:"precision"`
	Optimizer *string `json:"optimizer"`
	// OptimizerImpl selects a torch optimizer's implementation: foreach
	// (empty: the default on CUDA since torch 2.0), forloop (torch ≤ 1.13's
	// default) or fused; published runs only.
	OptimizerImpl string `json:"optimizer_impl"`
	Attention     string `json:"attention"`
	Checkpointing string `json:"checkpointing"`
	LoRARank      int64  `json:"lora_rank"`
	// LoRATargets are PEFT's target_modules; null means PEFT's default for
	// the family.
	LoRATargets []string `json:"lora_targets"`
	// LoRADType is the adapters' dtype (empty: fp32, PEFT's
	// autocast_adapter_dtype); published runs only.
	LoRADType string `json:"lora_dtype"`
	// LoRACode is the model code the adapters train in
	// (budget.ParseLoRACode: empty or "peft" for PEFT on transformers'
	// code and "torchtune" for its LoRALinear, both on a frozen base;
	// "litgpt" for litgpt's own GPT and LoRAQKVLinear, estimated as a
	// trained base). Published runs state it.
	LoRACode string `json:"lora_code"`
	// LoRADropout is the adapters' lora_dropout
	// (budget.Job.LoRADropout); published runs state it.
	LoRADropout float64 `json:"lora_dropout"`
	// Quant stores the base linear weights quantized: "nf4" (QLoRA,
	// bitsandbytes 4-bit with double quantization), "nf4-single" and
	// "fp4-single" (bitsandbytes 4-bit without it), "fp4", "int8"
	// (LLM.int8), "gptq" and "awq" (4-bit, GroupSize), "fp8" (128×128
	// block scales); published runs only.
	Quant string `json:"quant"`
	// GroupSize is gptq's and awq's group_size (0: 128).
	GroupSize int64 `json:"group_size"`
	// Unquantized is the dtype the loader keeps the frozen
	// unquantized weights of a quantized model in (model.Finetune.
	// Unquantized; empty: the precision policy's).
	Unquantized string `json:"unquantized"`
	// BnbComputeDType is bnb_4bit_compute_dtype (model.Finetune.
	// ComputeDType; empty: the job's compute dtype), and BnbUnfused
	// selects bitsandbytes before 0.50.0, which dequantizes 4-bit weights
	// in forward (model.Finetune.Unfused).
	BnbComputeDType string `json:"bnb_compute_dtype"`
	BnbUnfused      bool   `json:"bnb_unfused"`
	// BnbKeepsInputs selects bitsandbytes before 0.43.2, whose 4-bit
	// layers keep their inputs until the graph is freed
	// (model.Finetune.KeepsInputs), and HoldsPreviousStep says that the
	// training loop references the previous step's logits and loss
	// during the next forward (budget.Job.HoldsPreviousStep).
	BnbKeepsInputs bool `json:"bnb_keeps_inputs"`
	// BnbQuantFrom is the dtype the 4-bit weights were quantized from
	// (model.Finetune.QuantFrom; empty: unquantized, else the compute
	// dtype).
	BnbQuantFrom      string `json:"bnb_quant_from"`
	HoldsPreviousStep bool   `json:"holds_previous_step"`
	// KVDType and KVBlock are budget.Job's KV cache options (a generate
	// job's cache dtype, and its page size in tokens).
	KVDType string `json:"kv_dtype"`
	KVBlock int    `json:"kv_block"`
	// ContextBytes is the CUDA context measured in the same process,
	// when the source states it (budget.Overhead.Context); 0: the
	// default.
	ContextBytes int64 `json:"context_bytes"`
	// Dropout says whether the model trains with dropout > 0.
	Dropout bool `json:"dropout"`
	// KeepLogits says that the training loop holds the logits through
	// backward and the optimizer step (budget.Job.KeepLogits: litgpt's
	// loops keep `logits` in a local variable); published runs only, the
	// calibration harness deletes the output before backward.
	KeepLogits bool `json:"keep_logits"`
	// Head is the task head the run loaded (a model.ParseHead name:
	// "seq-cls" for AutoModelForSequenceClassification); empty: the
	// class the config's architectures name.
	Head string `json:"head"`
	// Parallel is the multi-GPU layout, with budget.Parallel's field
	// names; Offload is "optimizer", "params" or "optimizer,params".
	// Published runs only.
	Parallel *budget.Parallel `json:"parallel"`
	Offload  string           `json:"offload"`

	// Pipeline makes the job a diffusers pipeline (budget.Pipeline;
	// see PipelineJob); published runs only.
	Pipeline *PipelineJob `json:"pipeline"`

	// OptimizerInBackward is torchtune's optimizer_in_bwd, Momentum and
	// Nesterov torch.optim.SGD's settings, OffloadActivations torchtune's
	// enable_activation_offloading (budget.Job's fields of the same
	// names). Published runs only.
	OptimizerInBackward bool    `json:"optimizer_in_backward"`
	Momentum            float64 `json:"momentum"`
	Nesterov            bool    `json:"nesterov"`
	OffloadActivations  bool    `json:"offload_activations"`

	// Loss is the training step's loss, a model.ParseLoss name (full,
	// chunked, chunked:N, liger, cce; empty: full); LogitsToKeep is a
	// prefill job's logits_to_keep; Frozen freezes every parameter and
	// differentiates to the input only (budget.InputGradients). A
	// training job whose optimizer is "none" computes the gradients and
	// steps nothing (budget.NoStep). Published runs only.
	Loss         string `json:"loss"`
	LogitsToKeep int    `json:"logits_to_keep"`
	Frozen       bool   `json:"frozen"`
	// FreezeVision freezes a multimodal model's vision tower and trains
	// the rest (LLaVA-1.5's fine-tuning: model.FreezeParts("vision")).
	FreezeVision bool `json:"freeze_vision"`
	// Compile is what the run compiled with torch.compile (budget.Job.
	// Compile): true is torchtune's compile=True, which compiles each
	// decoder layer and the loss (layers+loss); a string is a
	// model.ParseCompile name (tools/measure's rows: "layers", "model").
	Compile CompileField `json:"compile"`
	// QuantHead quantizes the untied output head with the other linears
	// (model.Finetune.QuantizeHead: Lightning's BitsandbytesPrecision and
	// lit-gpt's quantization() replace every nn.Linear).
	QuantHead bool `json:"quant_head"`
	// WithLoad says that the figure's window opens before the weights are
	// loaded (a script that loads and then runs, printing
	// max_memory_allocated at the end, with no reset between): the peak
	// is the larger of the load's (the same job in mode load) and the
	// run's.
	WithLoad bool `json:"with_load"`

	// Runtime is the engine (a budget.ParseRuntime name: "llama.cpp";
	// empty: PyTorch), and LlamaCpp llama.cpp's context parameters
	// (budget.LlamaCppOptions) for a llama.cpp job.
	Runtime  string        `json:"runtime"`
	LlamaCpp *LlamaCppArgs `json:"llamacpp"`
}

// LlamaCppArgs are llama.cpp's flags that size its buffers, named after
// them (budget.LlamaCppOptions).
type LlamaCppArgs struct {
	GPULayers      int    `json:"n_gpu_layers"`
	Context        int    `json:"ctx_size"`
	Parallel       int    `json:"parallel"`
	UBatch         int    `json:"ubatch_size"`
	FlashAttention bool   `json:"flash_attn"`
	CacheK         string `json:"cache_type_k"`
	CacheV         string `json:"cache_type_v"`
}

// Load returns the job that loads j's model and runs nothing: what the
// window of a WithLoad figure holds before the run.
func (j *Job) Load() Job {
	l := Job{Model: j.Model, Catalog: j.Catalog, Config: j.Config, ConfigOverrides: j.ConfigOverrides, Kind: j.Kind,
		Mode: "load", Precision: j.Precision, Attention: j.Attention, Checkpointing: j.Checkpointing,
		LoRARank: j.LoRARank, LoRATargets: j.LoRATargets, LoRADType: j.LoRADType, Quant: j.Quant, GroupSize: j.GroupSize,
		Unquantized: j.Unquantized, BnbComputeDType: j.BnbComputeDType, BnbUnfused: j.BnbUnfused, BnbKeepsInputs: j.BnbKeepsInputs, BnbQuantFrom: j.BnbQuantFrom, ContextBytes: j.ContextBytes,
		Head: j.Head, QuantHead: j.QuantHead}
	if j.Mode == "train" {
		l.Optimizer = j.Optimizer
	}
	return l
}

// UnmarshalJSON decodes a job, refusing fields the vocabulary does not
// have: a misspelt field must not silently become its zero value. (The
// rows around a job record more than the comparison reads.)
func (j *Job) UnmarshalJSON(b []byte) error {
	type plain Job
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode((*plain)(j)); err != nil {
		return fmt.Errorf("job: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// field names a field of the job in errors.
func field(name string) string { return "job." + name }

// Spec returns the model the job runs.
func (j *Job) Spec() (model.Spec, error) {
	switch {
	case j.Catalog != "" && !given(j.ConfigOverrides):
		s, ok := model.Lookup(j.Catalog)
		if !ok {
			return model.Spec{}, gpumem.Errorf(field("catalog"), j.Catalog, gpumem.ErrInvalid, "not in gpumem's catalog")
		}
		return s, nil
	case given(j.Config):
		s, err := model.FromHFConfig(bytes.NewReader(j.Config))
		if err != nil {
			return model.Spec{}, fmt.Errorf("%s: %w", field("config"), err)
		}
		if s.Name == "" {
			s.Name = j.Model
		}
		return s, nil
	}
	return model.Spec{}, gpumem.Errorf(field("catalog"), j.Catalog, gpumem.ErrInvalid, "no catalog name and no config")
}

// given reports whether a JSON field was set to something other than null.
func given(raw json.RawMessage) bool {
	v := bytes.TrimSpace(raw)
	return len(v) > 0 && !bytes.Equal(v, []byte("null"))
}

// Budget returns the budget.Job the job describes. Errors name the job
// field (job.precision, job.lora_rank, ...) and its value.
func (j *Job) Budget() (budget.Job, error) {
	var b budget.Job
	s, err := j.Spec()
	if err != nil {
		return b, err
	}
	if j.Head != "" {
		if s.Head, err = model.ParseHead(j.Head); err != nil {
			return b, gpumem.Errorf(field("head"), j.Head, gpumem.ErrInvalid, "want %s", strings.Join(model.HeadNames(), ", "))
		}
		if err := s.Validate(); err != nil {
			return b, gpumem.Errorf(field("head"), j.Head, gpumem.ErrUnsupported, "%v", err)
		}
	}
	switch j.Mode {
	case "train":
		b.Mode = budget.Training
	case "prefill":
		b.Mode = budget.Prefill
	case "generate":
		b.Mode = budget.Generation
		if j.Generate < 1 {
			return b, gpumem.Errorf(field("generate"), j.Generate, gpumem.ErrInvalid, "a generate job generates at least one token")
		}
	case "load":
		b.Mode = budget.Load
	default:
		return b, gpumem.Errorf(field("mode"), j.Mode, gpumem.ErrInvalid, "want train, prefill, generate or load")
	}
	if b.Precision, err = budget.ParsePrecision(j.Precision); err != nil {
		return b, gpumem.Errorf(field("precision"), j.Precision, gpumem.ErrInvalid, "want fp32, bf16-mixed, fp16-mixed, bf16, fp16, ...")
	}
	switch {
	case b.Mode == budget.Training && j.Optimizer == nil:
		return b, gpumem.Errorf(field("optimizer"), nil, gpumem.ErrInvalid, "a training job needs an optimizer (none: no step)")
	case b.Mode != budget.Training && j.Frozen:
		return b, gpumem.Errorf(field("frozen"), true, gpumem.ErrInvalid, "only a training job has a backward pass to freeze")
	case b.Mode == budget.Training && (j.Frozen || strings.EqualFold(*j.Optimizer, "none")):
		if j.Frozen && !strings.EqualFold(*j.Optimizer, "none") {
			return b, gpumem.Errorf(field("optimizer"), *j.Optimizer, gpumem.ErrInvalid, "a frozen job steps nothing: want none")
		}
		if j.OptimizerImpl != "" {
			return b, gpumem.Errorf(field("optimizer_impl"), j.OptimizerImpl, gpumem.ErrInvalid, "a job without an optimizer step has no implementation to choose")
		}
		if j.Frozen && j.LoRARank > 0 {
			return b, gpumem.Errorf(field("frozen"), true, gpumem.ErrInvalid, "every parameter is frozen, LoRA adapters too: leave out lora_rank")
		}
		b.Gradients = budget.NoStep
		if j.Frozen {
			b.Gradients = budget.InputGradients
		}
	case b.Mode == budget.Training:
		o, ok := optimizer.Lookup(*j.Optimizer)
		if !ok {
			return b, gpumem.Errorf(field("optimizer"), *j.Optimizer, gpumem.ErrUnsupported, "not an optimizer gpumem models")
		}
		if b.Optimizer, err = withImpl(o, j.OptimizerImpl); err != nil {
			return b, err
		}
	case j.OptimizerImpl != "":
		return b, gpumem.Errorf(field("optimizer_impl"), j.OptimizerImpl, gpumem.ErrInvalid, "an inference job has no optimizer")
	}
	// A recorded case names its kernel: no default.
	if b.Attention, err = model.ParseAttention(j.Attention); err != nil || j.Attention == "" {
		return b, gpumem.Errorf(field("attention"), j.Attention, gpumem.ErrInvalid, "want eager, sdpa or flash_attention_2")
	}
	switch j.Checkpointing {
	case "none", "":
		b.Checkpointing = model.NoCheckpointing
	case "full":
		b.Checkpointing = model.FullCheckpointing
	case "selective":
		b.Checkpointing = model.SelectiveCheckpointing
	default:
		return b, gpumem.Errorf(field("checkpointing"), j.Checkpointing, gpumem.ErrInvalid, "want none, full or selective")
	}
	ft := model.Finetune{Model: s}
	switch {
	case j.LoRARank < 0:
		return b, gpumem.Errorf(field("lora_rank"), j.LoRARank, gpumem.ErrRange, "must not be negative")
	case j.LoRARank > 0:
		targets, err := scopedTargets(s, j.LoRATargets)
		if err != nil {
			return b, err
		}
		ft.LoRA = model.LoRA{Rank: j.LoRARank, Targets: targets}
		if j.LoRADType != "" {
			if ft.LoRA.DType, err = gpumem.ParseDType(j.LoRADType); err != nil {
				return b, gpumem.Errorf(field("lora_dtype"), j.LoRADType, gpumem.ErrInvalid, "not a dtype")
			}
		}
	case j.LoRATargets != nil || j.LoRADType != "":
		return b, gpumem.Errorf(field("lora_targets"), j.LoRATargets, gpumem.ErrInvalid, "LoRA targets or dtype without lora_rank")
	}
	if j.FreezeVision {
		switch {
		case s.Vision == nil:
			return b, gpumem.Errorf(field("freeze_vision"), true, gpumem.ErrInvalid, "%s has no vision tower", s.Name)
		case b.Mode != budget.Training || j.LoRARank > 0 || j.Frozen:
			return b, gpumem.Errorf(field("freeze_vision"), true, gpumem.ErrInvalid, "a training job without LoRA or frozen freezes the vision tower")
		}
		ft.Train = model.FreezeParts("vision")
	}
	switch j.Quant {
	case "":
	case "nf4", "fp4":
		ft.Quant = gpumem.NF4
		if j.Quant == "fp4" {
			ft.Quant = gpumem.FP4
		}
		ft.Blockwise = gpumem.Blockwise{Nested: true}
	case "nf4-single":
		ft.Quant = gpumem.NF4
	case "fp4-single":
		ft.Quant = gpumem.FP4
	case "int8":
		ft.Quant = gpumem.INT8
	case "gptq", "awq":
		ft.Quant, ft.Method = gpumem.INT4, j.Quant
	case "fp8":
		ft.Quant, ft.FP8Block = gpumem.FP8E4M3, [2]int64{128, 128}
	default:
		return b, gpumem.Errorf(field("quant"), j.Quant, gpumem.ErrUnsupported,
			"want nf4 (QLoRA), nf4-single, fp4, fp4-single, int8, gptq, awq, fp8 or nothing")
	}
	if j.GroupSize != 0 {
		if j.Quant != "gptq" && j.Quant != "awq" {
			return b, gpumem.Errorf(field("group_size"), j.GroupSize, gpumem.ErrInvalid, "group_size applies to gptq and awq")
		}
		ft.GroupSize = j.GroupSize
	}
	if j.Unquantized != "" {
		if ft.Unquantized, err = gpumem.ParseDType(j.Unquantized); err != nil {
			return b, gpumem.Errorf(field("unquantized"), j.Unquantized, gpumem.ErrInvalid, "not a dtype")
		}
	}
	if j.BnbComputeDType != "" {
		if ft.ComputeDType, err = gpumem.ParseDType(j.BnbComputeDType); err != nil {
			return b, gpumem.Errorf(field("bnb_compute_dtype"), j.BnbComputeDType, gpumem.ErrInvalid, "not a dtype")
		}
	}
	ft.Unfused = j.BnbUnfused
	ft.KeepsInputs = j.BnbKeepsInputs
	if j.BnbQuantFrom != "" {
		if ft.QuantFrom, err = gpumem.ParseDType(j.BnbQuantFrom); err != nil {
			return b, gpumem.Errorf(field("bnb_quant_from"), j.BnbQuantFrom, gpumem.ErrInvalid, "not a dtype")
		}
	}
	ft.QuantizeHead = j.QuantHead
	if b.Model, err = budget.NewModel(ft); err != nil {
		return b, err
	}
	if j.KVDType != "" {
		if b.KVDType, err = gpumem.ParseDType(j.KVDType); err != nil {
			return b, gpumem.Errorf(field("kv_dtype"), j.KVDType, gpumem.ErrInvalid, "not a dtype")
		}
	}
	b.KVBlock = j.KVBlock
	if j.ContextBytes < 0 {
		return b, gpumem.Errorf(field("context_bytes"), j.ContextBytes, gpumem.ErrInvalid, "must not be negative")
	}
	b.Overhead.Context = gpumem.Bytes(j.ContextBytes)
	if b.Mode == budget.Load {
		// Nothing runs: the job's batch and sequence are not used.
		if j.Batch != 0 || j.Seq != nil || j.Generate != 0 || j.GradAccum > 1 {
			return b, gpumem.Errorf(field("batch"), j.Batch, gpumem.ErrInvalid, "a load job runs no batch, sequence or generation")
		}
		// The model's split over the ranks applies to its weights.
		if j.Parallel != nil {
			b.Parallel = *j.Parallel
		}
		return b, nil
	}
	if j.Batch < 1 {
		return b, gpumem.Errorf(field("batch"), j.Batch, gpumem.ErrRange, "must be at least 1")
	}
	b.Batch = j.Batch
	switch {
	case j.Seq != nil:
		b.SeqLen = *j.Seq
	case j.Kind != "vision":
		return b, gpumem.Errorf(field("seq"), nil, gpumem.ErrInvalid, "only a vision encoder has no text sequence")
	default:
		// A vision encoder's sequence is its patch count, which the
		// model's image size sets; budget.Job asks for a SeqLen of at
		// least 1 and does not use it.
		b.SeqLen = 1
	}
	if err := j.checkEncoderDecoder(s); err != nil {
		return b, err
	}
	b.Generate, b.GradAccum, b.Images, b.Dropout = j.Generate, j.GradAccum, j.Images, j.Dropout
	b.KeepLogits = j.KeepLogits
	if j.Parallel != nil {
		b.Parallel = *j.Parallel
	}
	switch j.Offload {
	case "":
	case "optimizer":
		b.Offload = budget.OffloadOptimizer
	case "params":
		b.Offload = budget.OffloadParams
	case "optimizer,params", "params,optimizer":
		b.Offload = budget.OffloadOptimizer | budget.OffloadParams
	default:
		return b, gpumem.Errorf(field("offload"), j.Offload, gpumem.ErrInvalid, "want optimizer, params or optimizer,params")
	}
	if j.Momentum != 0 || j.Nesterov {
		sgd, ok := b.Optimizer.(optimizer.SGD)
		if !ok {
			return b, gpumem.Errorf(field("momentum"), j.Momentum, gpumem.ErrInvalid, "momentum and nesterov are torch.optim.SGD's (optimizer sgd)")
		}
		sgd.Momentum, sgd.Nesterov = j.Momentum, j.Nesterov
		b.Optimizer = sgd
	}
	b.OptimizerInBackward, b.OffloadActivations = j.OptimizerInBackward, j.OffloadActivations
	b.HoldsPreviousStep = j.HoldsPreviousStep
	if b.LoRACode, err = budget.ParseLoRACode(j.LoRACode); err != nil {
		return b, gpumem.Errorf(field("lora_code"), j.LoRACode, gpumem.ErrInvalid, "want peft, torchtune or litgpt")
	}
	if !(j.LoRADropout >= 0 && j.LoRADropout < 1) || (j.LoRADropout != 0 && j.LoRARank == 0) {
		return b, gpumem.Errorf(field("lora_dropout"), j.LoRADropout, gpumem.ErrInvalid, "a probability in [0, 1), with lora_rank")
	}
	b.LoRADropout = j.LoRADropout
	if j.LoRACode != "" && j.LoRARank == 0 {
		return b, gpumem.Errorf(field("lora_code"), j.LoRACode, gpumem.ErrInvalid, "the model code of LoRA adapters: give lora_rank too")
	}
	if err := j.runtime(&b); err != nil {
		return b, err
	}
	b.Compile = model.Compile(j.Compile)
	if j.Loss != "" {
		if b.Loss, err = model.ParseLoss(j.Loss); err != nil {
			return b, gpumem.Errorf(field("loss"), j.Loss, gpumem.ErrInvalid, "want full, chunked, chunked:N, liger or cce")
		}
	}
	if j.LogitsToKeep < 0 {
		return b, gpumem.Errorf(field("logits_to_keep"), j.LogitsToKeep, gpumem.ErrRange, "must not be negative")
	}
	b.LogitsToKeep = j.LogitsToKeep
	return b, nil
}

// runtime sets the engine of the job and llama.cpp's options.
func (j *Job) runtime(b *budget.Job) error {
	var err error
	if j.Runtime != "" {
		if b.Runtime, err = budget.ParseRuntime(j.Runtime); err != nil {
			return gpumem.Errorf(field("runtime"), j.Runtime, gpumem.ErrInvalid, "want pytorch, llama.cpp (or ollama), vllm or sglang")
		}
	}
	if j.LlamaCpp == nil {
		return nil
	}
	if b.Runtime != budget.LlamaCpp {
		return gpumem.Errorf(field("llamacpp"), j.Runtime, gpumem.ErrInvalid, "llama.cpp's options need runtime llama.cpp")
	}
	a := j.LlamaCpp
	o := budget.LlamaCppOptions{GPULayers: a.GPULayers, Context: a.Context, Parallel: a.Parallel, UBatch: a.UBatch,
		FlashAttention: a.FlashAttention}
	for _, c := range []struct {
		name, v string
		dt      *gpumem.DType
	}{{"cache_type_k", a.CacheK, &o.CacheK}, {"cache_type_v", a.CacheV, &o.CacheV}} {
		if c.v == "" {
			continue
		}
		if *c.dt, err = gpumem.ParseDType(c.v); err != nil {
			return gpumem.Errorf(field("llamacpp."+c.name), c.v, gpumem.ErrInvalid, "not a dtype")
		}
	}
	b.LlamaCpp = o
	return nil
}

// checkEncoderDecoder checks that the encoder and decoder lengths the
// harness recorded are the ones budget.Job derives from SeqLen.
func (j *Job) checkEncoderDecoder(s model.Spec) error {
	if j.EncoderSeq == nil && j.DecoderSeq == nil {
		return nil
	}
	if s.Encoder == nil {
		return gpumem.Errorf(field("encoder_seq"), *firstSet(j.EncoderSeq, j.DecoderSeq), gpumem.ErrInvalid,
			"%s is not an encoder–decoder", s.Family)
	}
	seq := 0
	if j.Seq != nil {
		seq = *j.Seq
	}
	e, text := s.EncoderInput(int64(seq))
	enc, dec := int(e), seq
	if text && j.Mode == "generate" {
		dec = 1 // T5 generates from one decoder start token
	}
	if j.EncoderSeq != nil && *j.EncoderSeq != enc {
		return gpumem.Errorf(field("encoder_seq"), *j.EncoderSeq, gpumem.ErrUnsupported,
			"budget.Job encodes %d positions for this job", enc)
	}
	if j.DecoderSeq != nil && *j.DecoderSeq != dec {
		return gpumem.Errorf(field("decoder_seq"), *j.DecoderSeq, gpumem.ErrUnsupported,
			"budget.Job decodes %d positions for this job", dec)
	}
	return nil
}

func firstSet(a, b *int) *int {
	if a != nil {
		return a
	}
	return b
}

// withImpl sets the implementation of a torch optimizer.
func withImpl(o optimizer.Optimizer, name string) (optimizer.Optimizer, error) {
	if name == "" {
		return o, nil
	}
	var impl optimizer.Impl
	switch name {
	case "foreach":
		impl = optimizer.Foreach
	case "forloop":
		impl = optimizer.ForLoop
	case "fused":
		impl = optimizer.Fused
	default:
		return nil, gpumem.Errorf(field("optimizer_impl"), name, gpumem.ErrInvalid, "want foreach, forloop or fused")
	}
	switch t := o.(type) {
	case optimizer.Adam:
		t.Impl = impl
		return t, nil
	case optimizer.AdamW:
		t.Impl = impl
		return t, nil
	case optimizer.SGD:
		t.Impl = impl
		return t, nil
	case optimizer.Adagrad:
		t.Impl = impl
		return t, nil
	case optimizer.RMSprop:
		t.Impl = impl
		return t, nil
	}
	return nil, gpumem.Errorf(field("optimizer_impl"), name, gpumem.ErrUnsupported, "%s has no torch implementations to choose from", o)
}

// scopedTargets reads tools/measure's scoped LoRA targets,
// "<prefix>.*.<name>": the modules named <name> under <prefix>
// (language_model.*.q_proj: the language model's q_proj, not the vision
// tower's, as LLaVA's LoRA recipes adapt the language model only). Each
// becomes the full names of the modules it selects, in the model's tensor
// names, which model.LoRA matches exactly; other targets pass as they are.
func scopedTargets(s model.Spec, targets []string) ([]string, error) {
	var out []string
	for _, t := range targets {
		prefix, name, scoped := strings.Cut(t, ".*.")
		if !scoped {
			out = append(out, t)
			continue
		}
		n := len(out)
		for _, x := range s.Tensors() {
			module, ok := strings.CutSuffix(x.Name, ".weight")
			if ok && len(x.Shape) == 2 && strings.HasPrefix(module, prefix+".") && strings.HasSuffix(module, "."+name) {
				out = append(out, module)
			}
		}
		if len(out) == n {
			return nil, gpumem.Errorf(field("lora_targets"), t, gpumem.ErrInvalid, "no linear module of %s matches", s.Name)
		}
	}
	return out, nil
}
