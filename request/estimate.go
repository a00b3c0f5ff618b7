package request

import (
	"encoding/json"
	"flag"
)

// Estimate is the body of POST /v1/estimate: the estimate flags
// as JSON fields. Fields left out take the flags' defaults.
type Estimate struct {
	Model         string          `json:"model"`
	Config        json.RawMessage `json:"config"`
	Mode          string          `json:"mode"`
	Train         bool            `json:"train"`
	Infer         bool            `json:"infer"`
	Batch         int             `json:"batch"`
	Seq           int             `json:"seq"`
	Generate      int             `json:"generate"`
	GradAccum     int             `json:"grad_accum"`
	Precision     string          `json:"precision"`
	Optimizer     string          `json:"optimizer"`
	Attention     string          `json:"attention"`
	Checkpointing string          `json:"checkpointing"`
	LoRARank      int64           `json:"lora_rank"`
	LoRATargets   []string        `json:"lora_targets"`
	QLoRA         bool            `json:"qlora"`
	LoRACode      string          `json:"lora_code"`    // --lora-code: peft, torchtune or litgpt
	LoRADropout   float64         `json:"lora_dropout"` // --lora-dropout
	Images        int             `json:"images"`
	Dropout       bool            `json:"dropout"`
	Head          string          `json:"head"`       // --head: the task head
	Labels        int             `json:"labels"`     // --labels: a classification head's num_labels
	ImageSize     int             `json:"image_size"` // --image-size: a vision backbone's image side in pixels
	Loss          string          `json:"loss"`
	LogitsToKeep  int             `json:"logits_to_keep"`
	GPU           string          `json:"gpu"`
	Memory        json.RawMessage `json:"memory"`

	// OptimizerImpl, Momentum, Nesterov, OptimizerInBackward and Frozen
	// are --optimizer-impl, --momentum, --nesterov,
	// --optimizer-in-backward and --frozen.
	OptimizerImpl       string  `json:"optimizer_impl"`
	Momentum            float64 `json:"momentum"`
	Nesterov            bool    `json:"nesterov"`
	OptimizerInBackward bool    `json:"optimizer_in_backward"`
	Frozen              bool    `json:"frozen"`
	// OffloadActivations is --offload-activations.
	OffloadActivations bool `json:"offload_activations"`
	KeepLogits         bool `json:"keep_logits"`
	// EvalLoss is --eval.
	EvalLoss bool `json:"eval"`
	// Backend is --backend: "cuda" (the default) or "cpu".
	Backend string `json:"backend"`
	// Compile is --compile: none, layers, loss, layers+loss or model.
	Compile string `json:"compile"`
	// SSMKernel is --ssm-kernel: fused (the default) or sequential.
	SSMKernel string `json:"ssm_kernel"`

	// Quant, GroupSize, KVDType and KVBlock are --quant, --group-size,
	// --kv-dtype and --kv-block.
	Quant     string `json:"quant"`
	GroupSize int64  `json:"group_size"`
	KVDType   string `json:"kv_dtype"`
	KVBlock   int    `json:"kv_block"`

	// CUDA and LazyLoading are --cuda and --lazy-loading.
	CUDA        string `json:"cuda"`
	LazyLoading *bool  `json:"lazy_loading"`

	// Profile is --profile's content: the overhead profile object gpumem
	// calibrate writes (schema, context, fragmentation, workspace,
	// workspaces, fit), inline; a file name is not read.
	Profile json.RawMessage `json:"profile"`

	// Runtime is --runtime (pytorch or llama.cpp); NGPULayers, CtxSize,
	// Parallel, UBatchSize, FlashAttn, CacheTypeK and CacheTypeV are
	// llama.cpp's --n-gpu-layers (left out: all), --ctx-size,
	// --parallel, --ubatch-size, --flash-attn, --cache-type-k and
	// --cache-type-v.
	Runtime    string `json:"runtime"`
	NGPULayers *int   `json:"n_gpu_layers"`
	CtxSize    int    `json:"ctx_size"`
	Parallel   int    `json:"parallel"`
	UBatchSize int    `json:"ubatch_size"`
	FlashAttn  bool   `json:"flash_attn"`
	CacheTypeK string `json:"cache_type_k"`
	CacheTypeV string `json:"cache_type_v"`
	// SplitMode, TensorSplit and MainGPU are llama.cpp's --split-mode,
	// --tensor-split (one share per GPU: their count is the GPUs) and
	// --main-gpu.
	// NoMmap is llama.cpp's --no-mmap.
	NoMmap bool `json:"no_mmap"`
	// SWAFull is llama.cpp's --swa-full: a sliding-window model's SWA
	// layers cache the whole context.
	SWAFull bool `json:"swa_full"`
	// LlamaCppVersion is --llamacpp-version: the llama.cpp build's date,
	// YYYY-MM-DD or YYYY-MM, which sets how n_gpu_layers places the layers.
	LlamaCppVersion string    `json:"llamacpp_version"`
	SplitMode       string    `json:"split_mode"`
	TensorSplit     []float64 `json:"tensor_split"`
	MainGPU         int       `json:"main_gpu"`

	// GPUMemoryUtilization, MaxModelLen, MaxNumBatchedTokens,
	// MaxNumSeqs, BlockSize, KVCacheDType and TensorParallelSize are
	// vLLM's flags with runtime "vllm" (--gpu-memory-utilization and so
	// on); the job needs gpu or memory.
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
	MaxModelLen          int     `json:"max_model_len"`
	MaxNumBatchedTokens  int     `json:"max_num_batched_tokens"`
	MaxNumSeqs           int     `json:"max_num_seqs"`
	BlockSize            int     `json:"block_size"`
	KVCacheDType         string  `json:"kv_cache_dtype"`
	TensorParallelSize   int     `json:"tensor_parallel_size"`
	// CUDAGraphMemory and EnforceEager are vLLM's --cuda-graph-memory
	// (a size, "1.58GiB") and --enforce-eager; VLLMV0 is --vllm-v0.
	CUDAGraphMemory string `json:"cuda_graph_memory"`
	EnforceEager    bool   `json:"enforce_eager"`
	VLLMV0          bool   `json:"vllm_v0"`

	// MemFractionStatic, MaxTotalTokens, PageSize and ContextLength are
	// SGLang's flags with runtime "sglang" (--mem-fraction-static and so
	// on; kv_cache_dtype and tensor_parallel_size apply too); the job
	// needs gpu or memory.
	MemFractionStatic float64 `json:"mem_fraction_static"`
	MaxTotalTokens    int     `json:"max_total_tokens"`
	PageSize          int     `json:"page_size"`
	ContextLength     int     `json:"context_length"`

	// GPUs, Nodes, ZeRO, FSDP, TP, SP, PP, VPP, CP, EP and Offload are
	// the layout flags --gpus, --nodes, --zero, --fsdp, --tp, --sp,
	// --pp, --vpp, --cp, --ep and --offload (layoutFrom); the estimate
	// is per GPU.
	GPUs    int    `json:"gpus"`
	Nodes   int    `json:"nodes"`
	ZeRO    int    `json:"zero"`
	FSDP    string `json:"fsdp"`
	TP      int    `json:"tp"`
	SP      bool   `json:"sp"`
	PP      int    `json:"pp"`
	VPP     int    `json:"vpp"`
	CP      int    `json:"cp"`
	EP      int    `json:"ep"`
	Offload string `json:"offload"`

	// Safetensors is the header of a .safetensors file (its first
	// 8 + N bytes, base64 in JSON), SafetensorsSize the file's size:
	// what --safetensors reads, without the tensors' data
	// (checkpointSpec).
	Safetensors     []byte `json:"safetensors"`
	SafetensorsSize int64  `json:"safetensors_size"`
	// GGUF and GGUFSize are the same for a .gguf file: its header up to
	// the end of the tensor infos, and the file's size (--gguf).
	GGUF     []byte `json:"gguf"`
	GGUFSize int64  `json:"gguf_size"`
}

// OOM is the JSON body of POST /v1/oom.
type OOM struct {
	Message string `json:"message"`
}

// Leak is the JSON body of POST /v1/leak.
type Leak struct {
	Log      string          `json:"log"`
	Capacity json.RawMessage `json:"capacity"`
	GPU      string          `json:"gpu"`
	// Unit is the unit of unit-less values in bare columns and CSV
	// columns ("MiB", "GB", "B"), as gpumem leak --unit.
	Unit string `json:"unit"`
	// Series adds the points fitted and the fitted line to the reply
	// (leakSeries).
	Series bool `json:"series"`
	// Run is the run to analyze when a narrative's steps restart (1 =
	// the first), as gpumem leak --run.
	Run *int `json:"run"`
}

// Plan is the body of POST /v1/plan: an estimate request plus
// the plan flags.
type Plan struct {
	Estimate
	TargetBatch int    `json:"target_batch"`
	MinBatch    int    `json:"min_batch"`
	MaxBatch    int    `json:"max_batch"`
	MinSeq      int    `json:"min_seq"`
	MaxSeq      int    `json:"max_seq"`
	Allow       string `json:"allow"`
	Headroom    string `json:"headroom"`
	Maximize    string `json:"maximize"`
	// StatesOnly is plan --states-only: with "model": "gpt:largest",
	// count the ZeRO paper's model states alone.
	StatesOnly bool `json:"states_only"`
	// Concurrency is plan --concurrency: with "runtime": "vllm", the
	// requests of max_model_len vLLM must hold at once.
	Concurrency float64 `json:"concurrency"`
	// Configs adds "configs" to a plan that fits: what plan's
	// --deepspeed, --accelerate, --hf-args and --megatron write
	// (planConfigs).
	Configs bool `json:"configs"`
}

// defaults are the estimate flags' registered defaults: the defaults of
// a request's fields.
var defaults = func() Flags {
	var f Flags
	f.Register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return f
}()

// Default is an estimate request with every field at its default: the
// estimate flags' defaults (batch 1, seq 2048, grad_accum 1, optimizer
// adamw, attention sdpa, checkpointing none, loss full).
func Default() Estimate {
	d := defaults
	return Estimate{Batch: d.Batch, Seq: d.Seq, Generate: d.Generate, GradAccum: d.Accum,
		Precision: d.Precision, Optimizer: d.Opt, Attention: d.Attn, Checkpointing: d.Ckpt,
		LoRARank: d.LoRARank, QLoRA: d.QLoRA, LoRACode: d.LoRACode, Images: d.Images, Loss: d.Loss}
}

// Decode decodes an estimate request's JSON body strictly: one object,
// no unknown field, no trailing data, each field of its JSON type; the
// fields left out take their defaults (Default). An error is an *Error
// naming the field. Decode checks the JSON only: Cache.Check checks the
// values.
func Decode(body []byte) (Estimate, error) {
	req := Default()
	if err := DecodeStrict(body, &req); err != nil {
		return req, err
	}
	return req, nil
}

// Pipeline is the JSON body of POST /v1/pipeline: gpumem
// estimate --pipeline's flags, each named after its flag (--lora-rank is
// lora_rank, --guidance-scale guidance_scale).
type Pipeline struct {
	Pipeline       string          `json:"pipeline"`
	Mode           string          `json:"mode"` // train or infer
	Batch          int             `json:"batch"`
	Resolution     int             `json:"resolution"`
	Height         int             `json:"height"`
	Width          int             `json:"width"`
	GradAccum      int             `json:"grad_accum"`
	Precision      string          `json:"precision"`
	Optimizer      string          `json:"optimizer"`
	Attention      string          `json:"attention"`
	Checkpointing  string          `json:"checkpointing"`
	LoRARank       int64           `json:"lora_rank"`
	LoRATargets    []string        `json:"lora_targets"`
	GuidanceScale  *float64        `json:"guidance_scale"`
	CPUOffload     bool            `json:"cpu_offload"`
	VAESlicing     bool            `json:"vae_slicing"`
	VAETiling      bool            `json:"vae_tiling"`
	CacheLatents   bool            `json:"cache_latents"`
	PrecomputeText bool            `json:"precompute_text"`
	FrozenDType    string          `json:"frozen_dtype"`
	VAEDType       string          `json:"vae_dtype"`
	MaxSeqLen      int             `json:"max_sequence_length"`
	GPU            string          `json:"gpu"`
	Memory         json.RawMessage `json:"memory"`
}
