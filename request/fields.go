package request

import (
	"reflect"
	"regexp"
	"strings"
)

// FlagFor returns the flag that sets a field the library names in its
// errors (budget.Job, model.Workload, budget.Limits, leak.Options).
func FlagFor(field string) (string, bool) {
	switch field {
	case "Job.Batch", "Workload.Batch":
		return "--batch", true
	case "Job.SeqLen", "Workload.SeqLen":
		return "--seq", true
	case "Job.Generate":
		return "--generate", true
	case "Job.GradAccum":
		return "--grad-accum", true
	case "Job.Images", "Workload.Images":
		return "--images", true
	case "Job.Loss", "Job.Loss.Chunks", "Workload.Loss", "Workload.Loss.Chunks", "loss":
		return "--loss", true
	case "Job.LogitsToKeep", "Workload.LogitsToKeep":
		return "--logits-to-keep", true
	case "Job.KeepLogits":
		return "--keep-logits", true
	case "Job.EvalLoss", "Workload.Labels":
		return "--eval", true
	case "Job.Compile", "Workload.Compile":
		return "--compile", true
	case "Job.Backend", "Workload.Backend":
		return "--backend", true
	case "Job.Precision", "Plan.Job.Precision":
		return "--precision", true
	case "Job.Optimizer", "Job.Gradients":
		return "--optimizer", true
	case "Job.OptimizerInBackward":
		return "--optimizer-in-backward", true
	case "Job.OffloadActivations":
		return "--offload-activations", true
	case "Job.Attention", "Workload.Attention":
		return "--attention", true
	case "Job.SSMKernel", "Workload.SSMKernel":
		return "--ssm-kernel", true
	case "Job.Checkpointing", "Workload.Checkpointing":
		return "--checkpointing", true
	case "Job.Device":
		return "--gpu", true
	case "Job.Runtime":
		return "--runtime", true
	case "Job.LlamaCpp.GPULayers":
		return "--n-gpu-layers", true
	case "Job.LlamaCpp.Context":
		return "--ctx-size", true
	case "Job.LlamaCpp.Parallel":
		return "--parallel", true
	case "Job.LlamaCpp.UBatch":
		return "--ubatch-size", true
	case "Job.LlamaCpp.Version":
		return "--llamacpp-version", true
	case "Job.LlamaCpp.SWAFull":
		return "--swa-full", true
	case "Job.LlamaCpp.CacheK", "Ollama.KVCacheType":
		return "--cache-type-k", true
	case "Ollama.NumCtx":
		return "--ctx-size", true
	case "Ollama.NumBatch":
		return "--ubatch-size", true
	case "Ollama.NumParallel":
		return "--parallel", true
	case "Ollama.NumGPU":
		return "--n-gpu-layers", true
	case "free", "free[0]":
		return "--memory", true
	case "Job.LlamaCpp.CacheV":
		return "--cache-type-v", true
	case "Job.VLLM.GPUMemoryUtilization":
		return "--gpu-memory-utilization", true
	case "Job.VLLM.MaxModelLen":
		return "--max-model-len", true
	case "Job.VLLM.MaxNumBatchedTokens":
		return "--max-num-batched-tokens", true
	case "Job.VLLM.MaxNumSeqs":
		return "--max-num-seqs", true
	case "Job.VLLM.BlockSize":
		return "--block-size", true
	case "Job.VLLM.CUDAGraphMemory":
		return "--cuda-graph-memory", true
	case "Job.VLLM.KVCacheDType":
		return "--kv-cache-dtype", true
	case "Job.SGLang.MemFractionStatic":
		return "--mem-fraction-static", true
	case "Job.SGLang.MaxTotalTokens":
		return "--max-total-tokens", true
	case "Job.SGLang.PageSize":
		return "--page-size", true
	case "Job.SGLang.ContextLength":
		return "--context-length", true
	case "Job.SGLang.KVCacheDType":
		return "--kv-cache-dtype", true
	case "Job.SGLang.TensorParallel", "Job.VLLM.TensorParallel":
		return "--tensor-parallel-size", true
	case "Job.VLLM", "Job.SGLang", "Job.Device.Capacity":
		return "--runtime", true
	case "Job.Overhead.CUDA":
		return "--cuda", true
	case "Job.Overhead.Loading":
		return "--lazy-loading", true
	case "Job.Parallel.DataParallel":
		return "--gpus", true
	case "Job.Parallel.Stage":
		return "--zero", true
	case "Job.Parallel.TensorParallel", "Workload.TensorParallel":
		return "--tp", true
	case "Job.Parallel.SequenceParallel", "Workload.SequenceParallel":
		return "--sp", true
	case "Job.Parallel.PipelineParallel":
		return "--pp", true
	case "Job.Parallel.VirtualStages":
		return "--vpp", true
	case "Job.Parallel.ContextParallel", "Workload.ContextParallel":
		return "--cp", true
	case "Job.Parallel.ExpertParallel":
		return "--ep", true
	case "Job.Parallel.FSDP", "Job.Parallel.ShardGroup":
		return "--fsdp", true
	case "Job.Offload":
		return "--offload", true
	case "LoRA.Rank":
		return "--lora-rank", true
	case "LoRA.Targets":
		return "--lora-targets", true
	case "Finetune.Quant", "Finetune.Method":
		return "--quant", true
	case "Finetune.GroupSize":
		return "--group-size", true
	case "Job.KVDType":
		return "--kv-dtype", true
	case "Job.KVBlock":
		return "--kv-block", true
	case "Limits.TargetGlobalBatch":
		return "--target-batch", true
	case "Limits.MinBatch":
		return "--min-batch", true
	case "Limits.MaxBatch":
		return "--max-batch", true
	case "Limits.MinSeqLen":
		return "--min-seq", true
	case "Limits.MaxSeqLen":
		return "--max-seq", true
	case "Limits.HeadroomFraction":
		return "--headroom", true
	case "Limits.Objective":
		return "--maximize", true
	case "Options.Capacity":
		return "--capacity", true
	}
	return "", false
}

// JobFields maps the library's names for a budget.Job's fields to the
// request's.
func JobFields(jf Flags) map[string]string {
	// The fields a flag sets are named after it (RequestField asks
	// FlagFor); these are the ones named otherwise, or by the request
	// as a whole.
	m := map[string]string{
		"Job.Mode": "mode", "Job.Model": "model", "Job.Device": "gpu", "Job.Device.Capacity": "gpu",
		"Job.LlamaCpp": "runtime",
	}
	if jf.Frozen {
		m["Job.Gradients"] = "frozen"
	}
	if jf.QLoRA {
		m["Finetune.Quant"] = "qlora"
	}
	if jf.Config != "" {
		m["Job.Model"] = "config"
	}
	if jf.Safetensors != "" {
		m["Job.Model"] = "safetensors"
	}
	if jf.GGUF != "" {
		m["Job.Model"] = "gguf"
	}
	if jf.Memory != "" {
		m["Job.Device"] = "memory"
	}
	return m
}

// requestFields are the fields of every request body, by their JSON
// names: an error's field is one of them, or a key of an inline config
// ("config.num_hidden_layers"), or none.
var requestFields = func() map[string]bool {
	m := map[string]bool{}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				add(f.Type)
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" {
				m[name] = true
			}
		}
	}
	for _, v := range []any{Plan{}, OOM{}, Leak{}, Pipeline{}} {
		add(reflect.TypeOf(v))
	}
	return m
}()

// libraryFields maps the last part of a library field name ("Job.SeqLen",
// "Workload.SeqLen", "Limits.HeadChunks[0]") to the request field that
// sets it.
var libraryFields = map[string]string{
	"Batch": "batch", "MicroBatch": "batch", "SeqLen": "seq", "QueryLen": "seq", "KeyLen": "seq", "Generate": "generate",
	"GradAccum": "grad_accum", "Images": "images", "ImageTokens": "images", "Precision": "precision", "DType": "precision",
	"Optimizer": "optimizer", "Optimizers": "allow", "Attention": "attention", "Kernel": "attention", "Softmax": "attention",
	"Checkpointing": "checkpointing", "CheckpointEvery": "checkpointing", "Mode": "mode", "Dropout": "dropout",
	"Rank": "lora_rank", "Targets": "lora_targets", "Quant": "qlora", "MinBatch": "min_batch", "MaxBatch": "max_batch",
	"TargetGlobalBatch": "target_batch", "MinSeqLen": "min_seq", "MaxSeqLen": "max_seq", "HeadroomFraction": "headroom",
	"HeadChunks": "allow", "HeadChunk": "allow", "Models": "allow", "Offload": "allow", "BufferMin": "allow",
	"Objective": "maximize", "CUDA": "cuda", "Loading": "lazy_loading",
	"Capacity": "capacity", "Device": "gpu",
	"Loss": "loss", "Compile": "compile", "SSMKernel": "ssm_kernel", "Chunks": "loss", "LogitsToKeep": "logits_to_keep", "Losses": "allow",
}

// RequestField names a library field as the request does: fields maps
// the request's own names first ("Job.Model" is "config" for an inline
// config); then the last part of the name ("Workload.SeqLen" is "seq");
// a config key keeps its name without the library's ("config.n_embd
// (Spec.Hidden)" is "config.n_embd"); a whole workload is its larger
// dimension; anything else names no field rather than a library one.
func RequestField(field string, fields map[string]string) string {
	if f, ok := fields[field]; ok {
		return f
	}
	if k, _, ok := strings.Cut(field, " ("); ok && strings.HasPrefix(k, "config.") {
		return k
	}
	if strings.HasPrefix(field, "config.") || field == "config" {
		return field
	}
	base := field
	if i := strings.IndexByte(base, '['); i >= 0 {
		base = base[:i]
	}
	if f, ok := fields[base]; ok {
		return f
	}
	if fl, ok := FlagFor(base); ok {
		// The request field is the flag's name: --grad-accum, grad_accum.
		if f := strings.ReplaceAll(strings.TrimPrefix(fl, "--"), "-", "_"); requestFields[f] {
			return f
		}
	}
	last := base[strings.LastIndexByte(base, '.')+1:]
	if first, _, _ := strings.Cut(base, "."); first == "Spec" || first == "Finetune" {
		last = first // the model as a whole
	}
	switch last {
	case "Workload", "Shape":
		return "seq" // the sequence, which a pasted job overflows first
	case "Spec", "Finetune", "Model", "Inventory":
		if f, ok := fields["Job.Model"]; ok {
			return f
		}
	}
	if f, ok := libraryFields[last]; ok && requestFields[f] {
		if f == "capacity" && fields["Job.Device"] != "" {
			return fields["Job.Device"]
		}
		return f
	}
	if requestFields[field] {
		return field
	}
	return ""
}

// cliWords are the library's and the command line's names that messages
// of the shared code may carry, with the request's names for them.
var cliWords = strings.NewReplacer(
	"Batch × (SeqLen + Generate)", "batch × (seq + generate)",
	"TargetGlobalBatch", "target_batch", "MinSeqLen", "min_seq", "MaxSeqLen", "max_seq",
	"MinBatch", "min_batch", "MaxBatch", "max_batch", "HeadroomFraction", "headroom", "GradAccum", "grad_accum",
)

// CLIFlag matches a command-line flag in a message of the shared code.
var CLIFlag = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)

// ForRequest rewrites a message of the code the CLI and the service
// share in the request's terms: no "usage: " prefix, request fields
// ("max_seq") for the flags ("--max-seq") and library names
// ("MaxSeqLen") that set them.
func ForRequest(msg string) string {
	msg = strings.TrimPrefix(msg, ErrUsage.Error()+": ")
	msg = CLIFlag.ReplaceAllStringFunc(msg, func(f string) string {
		name := strings.ReplaceAll(f[2:], "-", "_")
		if requestFields[name] {
			return name
		}
		return f
	})
	return cliWords.Replace(msg)
}

// IsField reports whether name is a field of a request body (Estimate,
// Plan, Pipeline, OOM, Leak), by its JSON name.
func IsField(name string) bool { return requestFields[name] }
