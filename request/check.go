package request

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// flagsFrom checks a decoded estimate request and turns it into flags.
func (c *Cache) flagsFrom(req Estimate) (Flags, model.Spec, error) {
	jf := defaults
	switch strings.ToLower(req.Mode) {
	case "":
	case "train", "training":
		jf.Train = true
	case "infer", "inference":
		jf.Infer = true
	case "load":
		jf.LoadOnly = true
	default:
		return jf, model.Spec{}, BadField("mode", "mode %q: want train, infer or load", req.Mode)
	}
	jf.Train = jf.Train || req.Train
	jf.Infer = jf.Infer || req.Infer
	if jf.LoadOnly && (jf.Train || jf.Infer) {
		return jf, model.Spec{}, BadField("mode", "\"mode\": \"load\" runs nothing: leave train and infer out")
	}
	if jf.Train == jf.Infer && !jf.LoadOnly {
		return jf, model.Spec{}, BadField("mode", "give one of \"mode\": \"train\" and \"mode\": \"infer\" (or train: true, infer: true)")
	}
	var spec model.Spec
	config := bytes.TrimSpace(req.Config)
	hasConfig := len(config) > 0 && string(config) != "null"
	switch {
	case len(req.Safetensors) > 0 || len(req.GGUF) > 0:
		var err error
		if spec, err = checkpointSpec(req, hasConfig, &jf); err != nil {
			return jf, spec, err
		}
	case req.Model != "" && hasConfig:
		return jf, spec, BadField("config", "give one of model and config")
	case req.Model != "":
		var ok bool
		if spec, ok = c.specs.get(req.Model); ok {
			jf.Name = req.Model
			break // CheckModelSize passed it
		}
		c.specs.looked.Add(1)
		if IsLargest(req.Model) {
			return jf, spec, BadField("model", "%s: only /v1/plan searches for the largest model", LargestName)
		}
		if _, isGPT, err := model.ParseGPT(req.Model); isGPT && err != nil {
			return jf, spec, BadField("model", "%v", err)
		}
		if spec, ok = model.Lookup(req.Model); !ok {
			return jf, spec, BadField("model", "no model %q in the catalog (see GET /v1/models, or give config)", req.Model)
		}
		jf.Name = req.Model
		if err := CheckModelSize(spec, config); err != nil {
			return jf, spec, err
		}
		c.specs.put(req.Model, spec)
	case hasConfig:
		if config[0] != '{' {
			return jf, spec, BadField("config", "config: want a config.json object, got %s", truncate(config, 40))
		}
		jf.Config = "(inline)"
		sum := sha256.Sum256(config) // the bytes modelSource keys the model by
		var ok bool
		if spec, ok = c.configs.get(sum); ok {
			break // CheckModelSize passed it
		}
		var err error
		if spec, err = model.FromHFConfig(bytes.NewReader(config)); err != nil {
			return jf, spec, LibraryError(err, nil)
		}
		if err := CheckModelSize(spec, config); err != nil {
			return jf, spec, err
		}
		c.configs.put(sum, spec)
	default:
		return jf, spec, BadField("model", "name a model with model (a catalog name) or config (a config.json object)")
	}
	jf.Batch, jf.Seq, jf.Generate, jf.Accum, jf.Images = req.Batch, req.Seq, req.Generate, req.GradAccum, req.Images
	jf.Dropout = req.Dropout
	jf.Head, jf.Labels = req.Head, req.Labels
	headed, herr := WithHead(spec, req.Head)
	if herr != nil {
		return jf, spec, BadField("head", "head %q: %v", req.Head, ForRequest(herr.Error()))
	}
	if _, err := WithLabels(headed, req.Labels); err != nil {
		return jf, spec, BadField("labels", "labels = %d: %v", req.Labels, ForRequest(err.Error()))
	}
	jf.ImageSize = req.ImageSize
	if _, err := WithImageSize(spec, req.ImageSize); err != nil {
		return jf, spec, BadField("image_size", "image_size = %d: %v", req.ImageSize, ForRequest(err.Error()))
	}
	jf.Loss, jf.LogitsToKeep = req.Loss, req.LogitsToKeep
	jf.Precision, jf.Opt, jf.Attn, jf.Ckpt = req.Precision, req.Optimizer, req.Attention, req.Checkpointing
	jf.LoRARank, jf.QLoRA, jf.GPU = req.LoRARank, req.QLoRA, req.GPU
	jf.Quant, jf.GroupSize, jf.KVDType, jf.KVBlock = req.Quant, req.GroupSize, req.KVDType, req.KVBlock
	if err := c.checkQuantFields(req, jf); err != nil {
		return jf, spec, err
	}
	jf.Llama = LlamaFlags{Runtime: req.Runtime, CtxSize: req.CtxSize, Parallel: req.Parallel,
		UBatch: req.UBatchSize, FlashAttn: req.FlashAttn, CacheK: req.CacheTypeK, CacheV: req.CacheTypeV}
	if req.NGPULayers != nil {
		jf.Llama.GPULayers = strconv.Itoa(*req.NGPULayers)
	}
	jf.Llama.SplitMode, jf.Llama.MainGPU, jf.Llama.NoMmap, jf.Llama.SWAFull = req.SplitMode, req.MainGPU, req.NoMmap, req.SWAFull
	jf.Llama.Version = req.LlamaCppVersion
	if req.TensorSplit != nil {
		if len(req.TensorSplit) == 0 {
			return jf, spec, BadField("tensor_split", "tensor_split: an empty list (leave it out for an even split)")
		}
		parts := make([]string, len(req.TensorSplit))
		for i, f := range req.TensorSplit {
			parts[i] = strconv.FormatFloat(f, 'g', -1, 64)
		}
		jf.Llama.TensorSplit = strings.Join(parts, ",")
	}
	jf.VLLM = VLLMFlags{GPUMemUtil: req.GPUMemoryUtilization, MaxModelLen: req.MaxModelLen,
		BatchedTokens: req.MaxNumBatchedTokens, MaxNumSeqs: req.MaxNumSeqs, BlockSize: req.BlockSize,
		KVCacheDType: req.KVCacheDType, TensorParallel: req.TensorParallelSize,
		CUDAGraphMem: req.CUDAGraphMemory, EnforceEager: req.EnforceEager, V0: req.VLLMV0}
	jf.SGLang = SGLangFlags{MemFraction: req.MemFractionStatic, MaxTotalTokens: req.MaxTotalTokens,
		PageSize: req.PageSize, ContextLength: req.ContextLength}
	{
		// The llama.cpp fields are checked here, so that an error names
		// the request's field.
		probe := budget.Job{Mode: budget.Prefill}
		switch {
		case jf.Train:
			probe.Mode = budget.Training
		case jf.LoadOnly:
			probe.Mode = budget.Load
		}
		if name, err := jf.Llama.Apply(&probe, false); err != nil {
			return jf, spec, BadField(strings.ReplaceAll(name, "-", "_"), "%s", ForRequest(err.Error()))
		}
		if name, err := jf.VLLM.Apply(&probe); err != nil {
			return jf, spec, BadField(strings.ReplaceAll(name, "-", "_"), "%s", ForRequest(err.Error()))
		}
		if name, err := jf.SGLang.Apply(&probe); err != nil {
			return jf, spec, BadField(strings.ReplaceAll(name, "-", "_"), "%s", ForRequest(err.Error()))
		}
		if (probe.Runtime == budget.VLLM || probe.Runtime == budget.SGLang) && req.GPU == "" && len(req.Memory) == 0 {
			return jf, spec, BadField("gpu", "runtime %q: %s sizes its KV cache from the GPU's memory: give gpu or memory", req.Runtime, probe.Runtime)
		}
	}
	if err := layoutFrom(req, &jf); err != nil {
		return jf, spec, err
	}
	var err error
	if jf.Memory, err = SizeText("memory", req.Memory); err != nil {
		return jf, spec, err
	}
	if jf.LoRARank < 0 {
		return jf, spec, BadField("lora_rank", "lora_rank = %d: must not be negative", jf.LoRARank)
	}
	if req.LoRATargets != nil {
		if len(req.LoRATargets) == 0 {
			return jf, spec, BadField("lora_targets", "lora_targets: an empty list (leave it out for PEFT's default)")
		}
		for _, t := range req.LoRATargets {
			if strings.TrimSpace(t) == "" || strings.Contains(t, ",") {
				return jf, spec, BadField("lora_targets", "lora_targets: %q is not a module name", t)
			}
		}
		if jf.LoRARank == 0 && !jf.QLoRA {
			return jf, spec, BadField("lora_targets", "lora_targets: give lora_rank or qlora too")
		}
		jf.LoRATargets = strings.Join(req.LoRATargets, ",")
	}
	jf.LoRACode, jf.LoRADropout = req.LoRACode, req.LoRADropout
	if !(jf.LoRADropout >= 0 && jf.LoRADropout < 1) {
		return jf, spec, BadField("lora_dropout", "lora_dropout = %g: want a probability in [0, 1)", jf.LoRADropout)
	}
	if jf.LoRADropout != 0 && jf.LoRARank == 0 && !jf.QLoRA {
		return jf, spec, BadField("lora_dropout", "lora_dropout = %g: give lora_rank or qlora too", jf.LoRADropout)
	}
	if _, err := budget.ParseLoRACode(jf.LoRACode); err != nil {
		return jf, spec, BadField("lora_code", "lora_code %q: want peft, torchtune or litgpt", jf.LoRACode)
	}
	if jf.LoRACode != "" && jf.LoRACode != "peft" && jf.LoRARank == 0 && !jf.QLoRA {
		return jf, spec, BadField("lora_code", "lora_code %q: give lora_rank or qlora too", jf.LoRACode)
	}
	if jf.Precision != "" {
		if _, err := budget.ParsePrecision(jf.Precision); err != nil {
			return jf, spec, BadField("precision", "precision %q: want fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8", jf.Precision)
		}
	}
	jf.OptImpl, jf.Momentum, jf.Nesterov = req.OptimizerImpl, req.Momentum, req.Nesterov
	jf.InBwd, jf.Frozen, jf.OffloadActs = req.OptimizerInBackward, req.Frozen, req.OffloadActivations
	jf.KeepLogits, jf.EvalLoss = req.KeepLogits, req.EvalLoss
	if req.Backend != "" {
		if _, err := model.ParseBackend(req.Backend); err != nil {
			return jf, spec, BadField("backend", "backend %q: want cuda or cpu", req.Backend)
		}
		jf.Backend = req.Backend
	}
	if req.SSMKernel != "" {
		if _, err := model.ParseSSMKernel(req.SSMKernel); err != nil {
			return jf, spec, BadField("ssm_kernel", "ssm_kernel %q: want fused or sequential", req.SSMKernel)
		}
		jf.SSMKernel = req.SSMKernel
	}
	if req.Compile != "" {
		jf.Compile = req.Compile
	}
	if c, err := model.ParseCompile(jf.Compile); err != nil {
		return jf, spec, BadField("compile", "compile %q: want none, layers, loss, layers+loss or model", jf.Compile)
	} else if c != 0 && !jf.Train {
		return jf, spec, BadField("compile", "compile %q: compilation is modelled for training steps (give \"mode\": \"train\", or leave compile out)", jf.Compile)
	}
	if jf.Train {
		if jf.Frozen && req.Optimizer != defaults.Opt {
			return jf, spec, BadField("optimizer", "optimizer %q: frozen: every parameter is frozen, so there is nothing to step (leave one out)", req.Optimizer)
		}
		if _, _, flagName, err := jf.OptimizerFor(); err != nil {
			return jf, spec, BadField(strings.ReplaceAll(flagName, "-", "_"), "%s", ForRequest(err.Error()))
		}
	} else {
		for _, c := range []struct {
			field string
			set   bool
		}{{"optimizer_impl", jf.OptImpl != ""}, {"momentum", jf.Momentum != 0}, {"nesterov", jf.Nesterov},
			{"optimizer_in_backward", jf.InBwd}, {"frozen", jf.Frozen}, {"offload_activations", jf.OffloadActs},
			{"keep_logits", jf.KeepLogits}} {
			if c.set {
				return jf, spec, BadField(c.field, "%s: an inference job runs no backward pass and no optimizer (give \"mode\": \"train\", or leave %s out)", c.field, c.field)
			}
		}
	}
	if _, err := ParseAttention(jf.Attn); err != nil {
		return jf, spec, BadField("attention", "attention %q: want eager, sdpa or flash", jf.Attn)
	}
	if _, err := ParseCheckpointing(jf.Ckpt); err != nil {
		return jf, spec, BadField("checkpointing", "checkpointing %q: want none, selective, full or offload", jf.Ckpt)
	}
	jf.CUDA = req.CUDA
	if jf.CUDA != "" {
		if _, err := budget.ParseCUDAVersion(jf.CUDA); err != nil {
			return jf, spec, BadField("cuda", "cuda %q: want a CUDA version such as 12.1 (or a wheel tag such as cu121)", jf.CUDA)
		}
	}
	if req.LazyLoading != nil {
		jf.Lazy = OptBool{Given: true, Value: *req.LazyLoading}
	}
	if len(req.Profile) > 0 && string(req.Profile) != "null" {
		p, err := ParseProfile(req.Profile)
		if err != nil {
			return jf, spec, BadField("profile", "profile: %v", err)
		}
		jf.ProfileData = &p
	}
	if l, err := model.ParseLoss(jf.Loss); err != nil {
		var fe *gpumem.FieldError
		msg := err.Error()
		if errors.As(err, &fe) {
			msg = fe.Err.Error()
		}
		return jf, spec, BadField("loss", "loss %q: %s", jf.Loss, msg)
	} else if l.Kind != model.FullLoss && !jf.Train {
		return jf, spec, BadField("loss", "loss %q: an inference job computes no loss (give \"mode\": \"train\", or leave loss out)", jf.Loss)
	}
	switch {
	case jf.LogitsToKeep < 0:
		return jf, spec, BadField("logits_to_keep", "logits_to_keep = %d: must not be negative (0: every position)", jf.LogitsToKeep)
	case jf.LogitsToKeep > 0 && jf.Train:
		return jf, spec, BadField("logits_to_keep", "logits_to_keep = %d: a training step's loss needs the logits of every position", jf.LogitsToKeep)
	case jf.LogitsToKeep > 0 && jf.Generate > 0:
		return jf, spec, BadField("logits_to_keep", "logits_to_keep = %d: generation's prompt pass keeps the last position's logits already", jf.LogitsToKeep)
	}
	switch {
	case jf.GPU != "" && jf.Memory != "":
		return jf, spec, BadField("memory", "give one of gpu and memory")
	case jf.GPU != "":
		if _, ok := gpumem.LookupDevice(jf.GPU); !ok {
			return jf, spec, BadField("gpu", "unknown GPU %q (see GET /v1/devices, or give memory)", jf.GPU)
		}
	case jf.Memory != "":
		if err := CheckTarget("memory", jf.Memory); err != nil {
			return jf, spec, err
		}
	}
	return jf, spec, nil
}

// checkQuantFields checks the quantization, KV cache and load fields of
// a request as JobFor and CheckGiven check their flags, naming the
// request's fields.
func (c *Cache) checkQuantFields(req Estimate, jf Flags) error {
	if jf.LoadOnly {
		def := defaults
		for _, c := range []struct {
			name  string
			given bool
		}{{"generate", req.Generate != 0}, {"batch", req.Batch != def.Batch}, {"seq", req.Seq != def.Seq},
			{"grad_accum", req.GradAccum > 1}, {"checkpointing", req.Checkpointing != def.Ckpt}, {"dropout", req.Dropout},
			{"images", req.Images != 0}, {"kv_dtype", req.KVDType != ""}, {"kv_block", req.KVBlock != 0}} {
			if c.given {
				return BadField(c.name, "%s: a load-only job runs nothing (leave it out, or give \"mode\": \"train\" or \"infer\")", c.name)
			}
		}
	}
	if jf.Quant != "" {
		if jf.QLoRA {
			return BadField("quant", "quant %q: qlora stores the weights in nf4 already (give one of them)", jf.Quant)
		}
		if _, method, _, err := ParseQuant(jf.Quant); err != nil {
			return BadField("quant", "quant %q: want int8, nf4, fp4, gptq, awq or fp8", jf.Quant)
		} else if jf.GroupSize != 0 && method != "gptq" && method != "awq" {
			return BadField("group_size", "group_size %d: it applies to quant gptq or awq", jf.GroupSize)
		}
		if jf.Train && jf.LoRARank == 0 && !req.Frozen {
			return BadField("quant", "quant %q: quantized weights cannot train; give lora_rank to train adapters on them (or frozen for gradients to the input only)", jf.Quant)
		}
	} else if jf.GroupSize != 0 {
		return BadField("group_size", "group_size %d: it applies to quant gptq or awq", jf.GroupSize)
	}
	if jf.KVDType != "" {
		if _, err := gpumem.ParseDType(jf.KVDType); err != nil {
			return BadField("kv_dtype", "kv_dtype %q: want fp8, fp8_e5m2, int8, fp16, bf16, Q8_0, Q4_0, ...", jf.KVDType)
		}
	}
	if (jf.KVDType != "" || jf.KVBlock != 0) && (!jf.Infer || req.Generate == 0) {
		name := "kv_dtype"
		if jf.KVDType == "" {
			name = "kv_block"
		}
		return BadField(name, "%s: only a generating job keeps a KV cache (give \"mode\": \"infer\" with generate)", name)
	}
	return nil
}

// checkpointSpec reads the model of a request that gives a checkpoint's
// header (safetensors or gguf) with the file's size, as --safetensors
// and --gguf read the file: model.FromSafetensors and model.FromGGUF
// read the header only, and check the tensors' offsets against the size.
// The header must be complete; the bytes after it are never read (a
// read there is an error, not zeros). It marks jf as the flag would.
func checkpointSpec(req Estimate, hasConfig bool, jf *Flags) (model.Spec, error) {
	field, header, size, read := "safetensors", req.Safetensors, req.SafetensorsSize, model.FromSafetensors
	if len(req.GGUF) > 0 {
		field, header, size, read = "gguf", req.GGUF, req.GGUFSize, model.FromGGUF
	}
	if req.Model != "" || hasConfig || (len(req.Safetensors) > 0 && len(req.GGUF) > 0) {
		return model.Spec{}, BadField(field, "give one of model, config, safetensors and gguf")
	}
	if size < int64(len(header)) {
		return model.Spec{}, BadField(field+"_size", "%s_size %d: the file's size in bytes, at least the %d bytes of the header sent", field, size, len(header))
	}
	spec, err := read(headerReader(header), size)
	if err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			return spec, BadField(field, "%s", ForRequest(err.Error()))
		}
		return spec, LibraryError(err, nil)
	}
	if spec.LM().Heads == 0 {
		// What --safetensors then fails on (Spec.Heads = 0), said of
		// the file.
		return spec, BadField(field, "the tensor names of this %s checkpoint do not give its attention heads (only a per-head norm does, as in qwen3 and gemma3): give its config.json instead", Clean(spec.Family))
	}
	if err := CheckModelSize(spec, nil); err != nil {
		err.Field = field
		return spec, err
	}
	if field == "gguf" {
		jf.GGUF = "(inline)"
	} else {
		jf.Safetensors = "(inline)"
	}
	return spec, nil
}

// headerReader is an io.ReaderAt over the first bytes of a file: reads
// past them fail, saying that only the header was sent.
type headerReader []byte

func (h headerReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= int64(len(h)) {
		return 0, fmt.Errorf("offset %d: only the %d-byte header was sent", off, len(h))
	}
	n := copy(p, h[off:])
	if n < len(p) {
		return n, fmt.Errorf("offset %d: only the %d-byte header was sent", off+int64(n), len(h))
	}
	return n, nil
}
