package budget

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// FSDP sharding strategies, as PyTorch's ShardingStrategy and
// accelerate's fsdp_sharding_strategy spell them
// (accelerate/utils/constants.py FSDP_SHARDING_STRATEGY).
const (
	FSDPNoShard          = "NO_SHARD"
	FSDPShardGradOp      = "SHARD_GRAD_OP"
	FSDPFullShard        = "FULL_SHARD"
	FSDPHybridShard      = "HYBRID_SHARD"
	FSDPHybridShardZeRO2 = "HYBRID_SHARD_ZERO2"
)

// FSDPStrategy returns the FSDP sharding strategy that shards as p does,
// by the mapping accelerate's FSDP guide gives
// (docs/source/usage_guides/fsdp.md, "Mapping between FSDP sharding
// strategies and DeepSpeed ZeRO Stages"): stage 0 is NO_SHARD, stage 2
// SHARD_GRAD_OP, stage 3 FULL_SHARD. A ShardGroup smaller than
// DataParallel shards within the group and replicates across groups:
// HYBRID_SHARD at stage 3, HYBRID_SHARD_ZERO2 at stage 2 (stage 0 shards
// nothing, so it stays NO_SHARD).
//
// Stage 1 (optimizer state alone partitioned) has no FSDP strategy: it
// fails with ErrUnsupported. An invalid p fails with its validation
// error.
func (p Parallel) FSDPStrategy() (string, error) {
	if err := p.validate(); err != nil {
		return "", err
	}
	hybrid := p.ShardGroup > 0 && p.ShardGroup < max(p.DataParallel, 1)
	switch p.Stage {
	case 0:
		return FSDPNoShard, nil
	case 2:
		if hybrid {
			return FSDPHybridShardZeRO2, nil
		}
		return FSDPShardGradOp, nil
	case 3:
		if hybrid {
			return FSDPHybridShard, nil
		}
		return FSDPFullShard, nil
	}
	return "", gpumem.Errorf("Job.Parallel.Stage", p.Stage, gpumem.ErrUnsupported,
		"FSDP has no stage 1 (optimizer state alone sharded): use stage 2 (SHARD_GRAD_OP) or DeepSpeed ZeRO-1")
}

// fsdpWrapClasses maps a Hugging Face model_type to the transformer
// block classes FSDP wraps one unit each: each model's _no_split_modules
// in transformers (src/transformers/models/<type>/modeling_<type>.py),
// without the embedding classes some encoders list beside the block.
var fsdpWrapClasses = map[string]string{
	"llama":       "LlamaDecoderLayer",
	"mistral":     "MistralDecoderLayer",
	"mixtral":     "MixtralDecoderLayer",
	"qwen2":       "Qwen2DecoderLayer",
	"qwen2_moe":   "Qwen2MoeDecoderLayer",
	"qwen3":       "Qwen3DecoderLayer",
	"qwen3_moe":   "Qwen3MoeDecoderLayer",
	"gemma":       "GemmaDecoderLayer",
	"gemma2":      "Gemma2DecoderLayer",
	"gemma3_text": "Gemma3DecoderLayer",
	"phi":         "PhiDecoderLayer",
	"phi3":        "Phi3DecoderLayer",
	"gpt2":        "GPT2Block",
	"gpt_neox":    "GPTNeoXLayer",
	"gpt_bigcode": "GPTBigCodeBlock",
	"opt":         "OPTDecoderLayer",
	"falcon":      "FalconDecoderLayer",
	"deepseek_v2": "DeepseekV2DecoderLayer",
	"deepseek_v3": "DeepseekV3DecoderLayer",
	"t5":          "T5Block",
	"mt5":         "MT5Block",
	"whisper":     "WhisperEncoderLayer,WhisperDecoderLayer",
	"bert":        "BertLayer",
	"vit":         "ViTLayer",
}

// FSDPWrapClasses returns the comma-separated transformer block classes
// that FSDP's TRANSFORMER_BASED_WRAP wraps for a model of the given
// Hugging Face model_type ("llama" → "LlamaDecoderLayer"), and false for
// a family it does not know (multimodal models among them): accelerate
// then wraps the model's own _no_split_modules
// (FullyShardedDataParallelPlugin.set_auto_wrap_policy).
func FSDPWrapClasses(family string) (string, bool) {
	c, ok := fsdpWrapClasses[family]
	return c, ok
}

// fsdpJob is what the FSDP configs take from a plan.
type fsdpJob struct {
	strategy      string
	offload       bool   // fsdp_offload_params
	classes       string // "" when the family is unknown
	checkpointing bool   // fsdp_activation_checkpointing
	mixed         string // accelerate's mixed_precision
	processes     int
	machines      int
	pureHalf      bool // weights stored in 16 bits with no fp32 copy
	hybrid        bool // a hybrid strategy
}

// fsdp maps p's job to FSDP settings; see [Plan.Accelerate].
func (p Plan) fsdp() (fsdpJob, error) {
	j := p.Job
	if j.Mode != Training {
		return fsdpJob{}, gpumem.Errorf("Plan.Job.Mode", j.Mode, gpumem.ErrUnsupported, "FSDP configs describe training")
	}
	if j.Parallel.modelParallel() || j.Parallel.ContextParallel > 1 {
		return fsdpJob{}, gpumem.Errorf("Plan.Job.Parallel", j.Parallel, gpumem.ErrUnsupported,
			"an accelerate FSDP config lays out data parallelism only, not tensor, pipeline, context or expert parallelism")
	}
	if err := j.validate(); err != nil {
		return fsdpJob{}, err
	}
	var f fsdpJob
	var err error
	if f.strategy, err = j.Parallel.FSDPStrategy(); err != nil {
		return fsdpJob{}, err
	}
	f.offload = j.Offload&OffloadOptimizer != 0
	if f.offload && f.strategy == FSDPNoShard {
		// CPU offload is documented with the sharded strategies only
		// (transformers TrainingArguments "offload": "only with
		// full_shard or shard_grad_op"); SHARD_GRAD_OP can only lower
		// the rank's memory below what the plan counts.
		f.strategy = FSDPShardGradOp
	}
	f.classes, _ = FSDPWrapClasses(j.Model.Spec().Family)
	switch j.Checkpointing {
	case model.NoCheckpointing:
	case model.FullCheckpointing:
		f.checkpointing = true
	default:
		return fsdpJob{}, gpumem.Errorf("Plan.Job.Checkpointing", j.Checkpointing, gpumem.ErrUnsupported,
			"FSDP's activation checkpointing recomputes every wrapped block (full); %s has no FSDP setting", j.Checkpointing)
	}
	switch j.Precision {
	case FP32:
		f.mixed = "no"
	case BF16Mixed, BF16Master:
		f.mixed = "bf16"
	case FP16Mixed, FP16Master:
		f.mixed = "fp16"
	case BF16, FP16:
		// Under any mixed_precision accelerate upcasts 16-bit trainable
		// parameters to fp32 (accelerator.py prepare_model, "follow
		// DeepSpeed's strategy to hold the parameters in full
		// precision"); pure 16-bit training is "no" with the model
		// loaded in 16 bits.
		f.mixed, f.pureHalf = "no", true
	default:
		return fsdpJob{}, gpumem.Errorf("Plan.Job.Precision", j.Precision, gpumem.ErrUnsupported,
			"accelerate's fp8 needs an fp8_config block (a backend and a recipe) that this config does not write")
	}
	f.processes = max(j.Parallel.DataParallel, 1)
	// Each machine runs as many processes (accelerate launch starts
	// num_processes/num_machines per machine), the ranks per node that
	// the plan assumes.
	perNode := int(j.Parallel.perNode())
	if f.processes%perNode != 0 {
		return fsdpJob{}, gpumem.Errorf("Plan.Job.Parallel.GPUsPerNode", j.Parallel.GPUsPerNode, gpumem.ErrUnsupported,
			"%d processes do not fill machines of %d GPUs alike; set GPUsPerNode to a divisor of DataParallel", f.processes, perNode)
	}
	f.machines = f.processes / perNode
	if f.strategy == FSDPHybridShard || f.strategy == FSDPHybridShardZeRO2 {
		// PyTorch shards a hybrid strategy over one node's GPUs
		// (torch/distributed/fsdp/_init_utils.py: the intra-node group
		// of device_count() ranks), so a shard group is a machine.
		if j.Parallel.ShardGroup != perNode {
			return fsdpJob{}, gpumem.Errorf("Plan.Job.Parallel.ShardGroup", j.Parallel.ShardGroup, gpumem.ErrUnsupported,
				"%s shards over one machine's GPUs, %d here (GPUsPerNode)", f.strategy, perNode)
		}
		f.hybrid = true
	}
	return f, nil
}

// AccelerateConfig is an accelerate config file (the YAML that
// `accelerate config` writes and `accelerate launch --config_file`
// reads; a .json file with the same keys is read as well) for a plan run
// with FSDP. Top-level keys are fields of accelerate's ClusterConfig
// (commands/config/config_args.py); fsdp_config keys are the launcher's
// --fsdp_* arguments (commands/launch.py), which the launcher fills from
// that block.
type AccelerateConfig struct {
	// ComputeEnvironment is "LOCAL_MACHINE".
	ComputeEnvironment string `json:"compute_environment"`
	// DistributedType is "FSDP".
	DistributedType string `json:"distributed_type"`
	// MixedPrecision is "no", "fp16" or "bf16".
	MixedPrecision string `json:"mixed_precision"`
	// NumMachines is the number of nodes; NumProcesses the number of
	// processes (GPUs) over all of them, the data-parallel degree
	// (launch.py: "The total number of processes to be launched in
	// parallel").
	NumMachines  int `json:"num_machines"`
	NumProcesses int `json:"num_processes"`
	// MachineRank is this node's rank, 0; each node of a multi-node run
	// sets its own (and main_process_ip, main_process_port).
	MachineRank int `json:"machine_rank"`
	// FSDP is the fsdp_config block.
	FSDP AccelerateFSDP `json:"fsdp_config"`
}

// AccelerateFSDP is the fsdp_config block of an accelerate config, for
// FSDP version 1 (the launcher's default, --fsdp_version 1), whose
// strategies cover every stage but 1.
type AccelerateFSDP struct {
	// Version is 1.
	Version int `json:"fsdp_version"`
	// ShardingStrategy is one of the FSDP* strategy constants.
	ShardingStrategy string `json:"fsdp_sharding_strategy"`
	// OffloadParams keeps parameters and gradients in host memory and
	// steps the optimizer there (set when the plan offloads the
	// optimizer: FSDP has no optimizer-only offload).
	OffloadParams bool `json:"fsdp_offload_params"`
	// AutoWrapPolicy is "TRANSFORMER_BASED_WRAP".
	AutoWrapPolicy string `json:"fsdp_auto_wrap_policy"`
	// TransformerLayerClsToWrap is the comma-separated block classes
	// ([FSDPWrapClasses]); empty (omitted) for a family without an
	// entry, and accelerate wraps the model's _no_split_modules.
	TransformerLayerClsToWrap string `json:"fsdp_transformer_layer_cls_to_wrap,omitempty"`
	// BackwardPrefetch is "BACKWARD_PRE": the unit computed and the next
	// one are gathered at once, as Estimate counts for stage 3.
	BackwardPrefetch string `json:"fsdp_backward_prefetch"`
	// ForwardPrefetch is false: no further unit is gathered ahead in
	// forward.
	ForwardPrefetch bool `json:"fsdp_forward_prefetch"`
	// StateDictType is "SHARDED_STATE_DICT": each rank saves its shard,
	// with no full copy gathered at save time.
	StateDictType string `json:"fsdp_state_dict_type"`
	// UseOrigParams is true: frozen and trainable parameters may share
	// a unit (LoRA, QLoRA).
	UseOrigParams bool `json:"fsdp_use_orig_params"`
	// SyncModuleStates and CPURAMEfficientLoading are true: rank 0
	// loads the checkpoint and broadcasts it (the second needs the
	// first).
	SyncModuleStates       bool `json:"fsdp_sync_module_states"`
	CPURAMEfficientLoading bool `json:"fsdp_cpu_ram_efficient_loading"`
	// ActivationCheckpointing is the plan's full checkpointing.
	ActivationCheckpointing bool `json:"fsdp_activation_checkpointing"`
}

// Accelerate returns the accelerate config that runs p with PyTorch FSDP
// (version 1) on p.Job.Parallel.DataParallel GPUs:
//
//   - the strategy of [Parallel.FSDPStrategy]; a plan that offloads the
//     optimizer gets fsdp_offload_params, which also moves the sharded
//     parameters and gradients to the host, so the GPU holds no more than
//     Estimate counts and the host more than Breakdown.Host; at stage 0
//     the strategy becomes SHARD_GRAD_OP, with which offload is
//     documented;
//   - TRANSFORMER_BASED_WRAP of the model family's blocks
//     ([FSDPWrapClasses]; an unknown family leaves the class out and
//     accelerate falls back on the model's _no_split_modules);
//   - mixed_precision "bf16" or "fp16" for the mixed and autocast
//     policies, "no" for fp32 and for pure bf16/fp16, which the training
//     script must load in that dtype;
//   - fsdp_activation_checkpointing for full checkpointing (the Trainer
//     then needs gradient_checkpointing off);
//   - DataParallel processes on machines of Job.Parallel.GPUsPerNode
//     GPUs (zero: up to 8); the hybrid strategies shard over one
//     machine's GPUs, so ShardGroup must be GPUsPerNode.
//
// Estimate counts FSDP's gathering (one wrapped unit and the prefetched
// next) rather than DeepSpeed's when Job.Parallel.FSDP is set; the config
// is the same either way.
//
// Batch sizes are not part of an accelerate config: they go to the
// training script ([Plan.HFTrainingArgumentsFSDP]). OffloadCopies in
// Job.Offload is the script's business and is not reflected.
//
// It fails with ErrUnsupported for what FSDP through accelerate cannot
// express: a job that is not training, tensor, pipeline, context or
// expert parallelism, ZeRO stage 1, selective, every-k or offloaded
// activation checkpointing, fp8, a DataParallel that is not a whole
// number of machines, a hybrid ShardGroup other than a machine; and with
// the job's own validation error for an invalid job.
func (p Plan) Accelerate() (AccelerateConfig, error) {
	f, err := p.fsdp()
	if err != nil {
		return AccelerateConfig{}, err
	}
	return AccelerateConfig{
		ComputeEnvironment: "LOCAL_MACHINE",
		DistributedType:    "FSDP",
		MixedPrecision:     f.mixed,
		NumMachines:        f.machines,
		NumProcesses:       f.processes,
		FSDP: AccelerateFSDP{
			Version:                   1,
			ShardingStrategy:          f.strategy,
			OffloadParams:             f.offload,
			AutoWrapPolicy:            "TRANSFORMER_BASED_WRAP",
			TransformerLayerClsToWrap: f.classes,
			BackwardPrefetch:          "BACKWARD_PRE",
			StateDictType:             "SHARDED_STATE_DICT",
			UseOrigParams:             true,
			SyncModuleStates:          true,
			CPURAMEfficientLoading:    true,
			ActivationCheckpointing:   f.checkpointing,
		},
	}, nil
}

// MarshalIndent is json.MarshalIndent of c with two spaces: accelerate
// reads a config file ending in .json as well as YAML.
func (c AccelerateConfig) MarshalIndent() ([]byte, error) { return json.MarshalIndent(c, "", "  ") }

// YAML returns c as the YAML file accelerate reads, keys sorted as
// accelerate's own writer (yaml.safe_dump) sorts them, the fsdp_config
// block indented two spaces. Strings YAML would read as something else
// ("no" is a boolean in YAML 1.1) are single-quoted.
func (c AccelerateConfig) YAML() ([]byte, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := writeYAML(&b, m, ""); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeYAML writes m as a YAML block mapping, one level of nesting at
// most.
func writeYAML(b *bytes.Buffer, m map[string]any, indent string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(indent + yamlString(k) + ":")
		switch v := m[k].(type) {
		case map[string]any:
			if indent != "" {
				return fmt.Errorf("budget: %s: nested more than one level", k)
			}
			b.WriteByte('\n')
			if err := writeYAML(b, v, "  "); err != nil {
				return err
			}
			continue
		case bool:
			fmt.Fprintf(b, " %t", v)
		case json.Number:
			b.WriteString(" " + v.String())
		case string:
			b.WriteString(" " + yamlString(v))
		default:
			return fmt.Errorf("budget: %s: no YAML form for %T", k, v)
		}
		b.WriteByte('\n')
	}
	return nil
}

// yamlString returns s as a plain YAML scalar when YAML 1.1 reads it back
// as the same string (letters, digits, '_', '.', ',' and '-', starting
// with a letter or '_', not a boolean or null word), else single-quoted
// with quotes doubled.
func yamlString(s string) string {
	plain := s != ""
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '.' || r == ',' || r == '-')) {
			plain = false
			break
		}
	}
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
		plain = false
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// HFTrainingArgumentsFSDP returns [Plan.HFTrainingArguments] for a run
// under FSDP through the Hugging Face Trainer (transformers
// training_args.py): "fsdp" is the options string ("full_shard
// auto_wrap", "shard_grad_op offload auto_wrap", ...) and "fsdp_config"
// the block of FSDP settings [Plan.Accelerate] writes, in the Trainer's
// key names (transformer_layer_cls_to_wrap a list). Full checkpointing
// moves to fsdp_config's activation_checkpointing and
// gradient_checkpointing is false: the Trainer refuses both at once.
// Pure bf16/fp16 drops the bf16/fp16 flag, for the reason given at
// [Plan.Accelerate]. The number of processes comes from the launcher
// (torchrun or accelerate launch), not from these arguments.
//
// It fails as Accelerate does, and for a hybrid strategy with offload:
// the Trainer documents offload only with full_shard and shard_grad_op.
func (p Plan) HFTrainingArgumentsFSDP() (map[string]any, error) {
	f, err := p.fsdp()
	if err != nil {
		return nil, err
	}
	if f.offload && f.hybrid {
		return nil, gpumem.Errorf("Plan.Job.Offload", p.Job.Offload, gpumem.ErrUnsupported,
			"the Trainer's fsdp offload goes with full_shard or shard_grad_op, not %s", strings.ToLower(f.strategy))
	}
	a, err := p.HFTrainingArguments()
	if err != nil {
		return nil, err
	}
	opts := []string{strings.ToLower(f.strategy)}
	if f.offload {
		opts = append(opts, "offload")
	}
	a["fsdp"] = strings.Join(append(opts, "auto_wrap"), " ")
	cfg := map[string]any{
		"fsdp_version":              1,
		"backward_prefetch":         "backward_pre",
		"forward_prefetch":          false,
		"use_orig_params":           true,
		"sync_module_states":        true,
		"cpu_ram_efficient_loading": true,
		"activation_checkpointing":  f.checkpointing,
	}
	if f.classes != "" {
		cfg["transformer_layer_cls_to_wrap"] = strings.Split(f.classes, ",")
	}
	a["fsdp_config"] = cfg
	if f.checkpointing {
		a["gradient_checkpointing"] = false
	}
	if f.pureHalf {
		delete(a, "bf16")
		delete(a, "fp16")
	}
	return a, nil
}
