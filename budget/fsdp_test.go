package budget

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// Where every key and value the FSDP configs write comes from. Sources
// read for these tests:
//
//   - huggingface/accelerate at 16cb6eb80dd9aa8b4df1a63ef57863e455d53b83:
//     src/accelerate/commands/config/config_args.py (BaseConfig and
//     ClusterConfig fields: the top-level keys a config file may have;
//     others are rejected as "unknown keys"),
//     src/accelerate/commands/launch.py (the --fsdp_* arguments, which
//     the launcher fills from the fsdp_config block key by key),
//     src/accelerate/utils/constants.py (FSDP_SHARDING_STRATEGY,
//     FSDP_AUTO_WRAP_POLICY, FSDP_BACKWARD_PREFETCH,
//     FSDP_STATE_DICT_TYPE), src/accelerate/utils/dataclasses.py
//     (PrecisionType, FullyShardedDataParallelPlugin),
//     tests/test_configs/latest_fsdp.yaml (a config accelerate's tests
//     load), docs/source/usage_guides/fsdp.md (the options and the
//     stage mapping; its example still spells the prefetch key
//     fsdp_backward_prefetch_policy, which the current launcher has no
//     argument for: `accelerate config` writes fsdp_backward_prefetch).
//   - huggingface/transformers src/transformers/training_args.py at
//     00349ae87eddc872ffa21a8a54f264375a0056a8 (the fsdp and fsdp_config
//     docstring and _process_fsdp_args) and src/transformers/trainer_utils.py
//     at 007360d654f36b1f4bc0c701c7b1b69273a7c4ed (FSDPOption).
var (
	accelerateTopKeys = set("compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug",
		"num_processes", "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port",
		"rdzv_backend", "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config",
		"deepspeed_config", "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config",
		"downcast_bf16", "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands",
		"tpu_vm", "tpu_env", "dynamo_config")
	accelerateFSDPKeys = set("fsdp_version", "fsdp_offload_params", "fsdp_min_num_params", "fsdp_sharding_strategy",
		"fsdp_reshard_after_forward", "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap",
		"fsdp_backward_prefetch", "fsdp_state_dict_type", "fsdp_forward_prefetch", "fsdp_use_orig_params",
		"fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states", "fsdp_activation_checkpointing")
	accelerateValues = map[string]map[string]bool{
		"compute_environment":    set("LOCAL_MACHINE", "AMAZON_SAGEMAKER"),
		"distributed_type":       set("FSDP"),
		"mixed_precision":        set("no", "fp8", "fp16", "bf16"),
		"fsdp_sharding_strategy": set("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"),
		"fsdp_auto_wrap_policy":  set("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"),
		"fsdp_backward_prefetch": set("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"),
		"fsdp_state_dict_type":   set("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"),
	}
	// The fsdp_config keys of TrainingArguments' docstring ("fsdp_" may
	// prefix each), and the FSDPOption values of "fsdp".
	hfFSDPConfigKeys = set("fsdp_version", "min_num_params", "transformer_layer_cls_to_wrap", "backward_prefetch",
		"forward_prefetch", "limit_all_gathers", "use_orig_params", "sync_module_states", "cpu_ram_efficient_loading",
		"activation_checkpointing", "xla", "xla_fsdp_settings", "xla_fsdp_grad_ckpt")
	hfFSDPOptions = set("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2", "offload", "auto_wrap")
)

func set(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// TestFSDPStrategy checks the stage → strategy mapping of accelerate's
// FSDP guide ("Mapping between FSDP sharding strategies and DeepSpeed
// ZeRO Stages") and HYBRID_SHARD as stage 3 within a shard group.
func TestFSDPStrategy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Parallel
		want string
		err  error
	}{
		{Parallel{}, FSDPNoShard, nil},
		{Parallel{DataParallel: 8}, FSDPNoShard, nil},
		{Parallel{DataParallel: 8, ShardGroup: 4}, FSDPNoShard, nil},
		{Parallel{DataParallel: 8, Stage: 2}, FSDPShardGradOp, nil},
		{Parallel{DataParallel: 8, Stage: 2, ShardGroup: 8}, FSDPShardGradOp, nil},
		{Parallel{DataParallel: 16, Stage: 2, ShardGroup: 8}, FSDPHybridShardZeRO2, nil},
		{Parallel{DataParallel: 8, Stage: 3}, FSDPFullShard, nil},
		{Parallel{DataParallel: 1, Stage: 3}, FSDPFullShard, nil},
		{Parallel{DataParallel: 16, Stage: 3, ShardGroup: 8}, FSDPHybridShard, nil},
		{Parallel{DataParallel: 16, Stage: 3, ShardGroup: 16}, FSDPFullShard, nil},
		{Parallel{DataParallel: 8, Stage: 1}, "", gpumem.ErrUnsupported},
		{Parallel{DataParallel: 8, Stage: 4}, "", gpumem.ErrInvalid},
		{Parallel{DataParallel: 8, Stage: 3, ShardGroup: 3}, "", gpumem.ErrInvalid},
	} {
		t.Run(strconv.Itoa(tc.p.DataParallel)+"/"+strconv.Itoa(tc.p.Stage)+"/"+strconv.Itoa(tc.p.ShardGroup), func(t *testing.T) {
			t.Parallel()
			got, err := tc.p.FSDPStrategy()
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("%+v.FSDPStrategy() = %q, %v; want %q, %v", tc.p, got, err, tc.want, tc.err)
			}
		})
	}
}

// fsdpJob returns a bf16-master AdamW training job of name on dp GPUs.
func fsdpTrainJob(t *testing.T, name string, par Parallel) Job {
	t.Helper()
	return Job{Model: lookupModel(t, name, nil), Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{},
		Attention: model.Flash, Batch: 2, SeqLen: 1024, GradAccum: 4, Parallel: par}
}

// TestPlanAccelerate checks a plan's accelerate config field by field,
// that its keys and values are documented ones, and that it survives a
// round trip through JSON into the Go struct.
func TestPlanAccelerate(t *testing.T) {
	t.Parallel()
	j := fsdpTrainJob(t, "llama-3.2-1b", Parallel{DataParallel: 8, Stage: 3})
	p, err := Allocate(40<<30, j, &Limits{TargetGlobalBatch: 64, Checkpointing: []model.Checkpointing{model.FullCheckpointing}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Accelerate()
	if err != nil {
		t.Fatal(err)
	}
	want := AccelerateConfig{ComputeEnvironment: "LOCAL_MACHINE", DistributedType: "FSDP", MixedPrecision: "bf16",
		NumMachines: 1, NumProcesses: 8,
		FSDP: AccelerateFSDP{Version: 1, ShardingStrategy: "FULL_SHARD", AutoWrapPolicy: "TRANSFORMER_BASED_WRAP",
			TransformerLayerClsToWrap: "LlamaDecoderLayer", BackwardPrefetch: "BACKWARD_PRE", StateDictType: "SHARDED_STATE_DICT",
			UseOrigParams: true, SyncModuleStates: true, CPURAMEfficientLoading: true,
			ActivationCheckpointing: p.Checkpointing == model.FullCheckpointing}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Accelerate() mismatch (-want +got):\n%s", diff)
	}

	raw, err := c.MarshalIndent()
	if err != nil {
		t.Fatal(err)
	}
	var back AccelerateConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	if diff := cmp.Diff(c, back); diff != "" {
		t.Errorf("JSON round trip (-sent +back):\n%s", diff)
	}
	checkAccelerateKeys(t, raw)
}

// checkAccelerateKeys fails on a key or a value accelerate does not
// document (see the sources above).
func checkAccelerateKeys(t *testing.T, raw []byte) {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	check := func(k string, v any, known map[string]bool) {
		if !known[k] {
			t.Errorf("undocumented key %q", k)
		}
		if vals, ok := accelerateValues[k]; ok && !vals[v.(string)] {
			t.Errorf("%s = %q, not a documented value", k, v)
		}
	}
	for k, v := range top {
		check(k, v, accelerateTopKeys)
	}
	fsdp, _ := top["fsdp_config"].(map[string]any)
	if len(fsdp) == 0 {
		t.Fatalf("no fsdp_config block in %s", raw)
	}
	for k, v := range fsdp {
		check(k, v, accelerateFSDPKeys)
	}
}

// TestAccelerateMapping checks each plan setting's effect on the config.
func TestAccelerateMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		model string
		edit  func(*Job)
		check func(AccelerateConfig) bool
	}{
		{"qwen2 class", "qwen2.5-0.5b", nil, func(c AccelerateConfig) bool {
			return c.FSDP.TransformerLayerClsToWrap == "Qwen2DecoderLayer"
		}},
		{"gpt2 class", "gpt2", nil, func(c AccelerateConfig) bool { return c.FSDP.TransformerLayerClsToWrap == "GPT2Block" }},
		{"unknown family wraps _no_split_modules", "llava-1.5-7b", nil, func(c AccelerateConfig) bool {
			return c.FSDP.AutoWrapPolicy == "TRANSFORMER_BASED_WRAP" && c.FSDP.TransformerLayerClsToWrap == ""
		}},
		{"hybrid: one machine per shard group", "llama-3.2-1b",
			func(j *Job) { j.Parallel = Parallel{DataParallel: 32, Stage: 3, ShardGroup: 8} },
			func(c AccelerateConfig) bool {
				return c.FSDP.ShardingStrategy == "HYBRID_SHARD" && c.NumMachines == 4 && c.NumProcesses == 32
			}},
		{"hybrid zero2", "llama-3.2-1b",
			func(j *Job) { j.Parallel = Parallel{DataParallel: 16, Stage: 2, ShardGroup: 8} },
			func(c AccelerateConfig) bool {
				return c.FSDP.ShardingStrategy == "HYBRID_SHARD_ZERO2" && c.NumMachines == 2
			}},
		{"optimizer offload: params offload", "llama-3.2-1b", func(j *Job) { j.Offload = OffloadOptimizer },
			func(c AccelerateConfig) bool { return c.FSDP.OffloadParams && c.FSDP.ShardingStrategy == "FULL_SHARD" }},
		{"offload at stage 0 shards gradients", "llama-3.2-1b",
			func(j *Job) { j.Offload, j.Parallel.Stage = OffloadOptimizer, 0 },
			func(c AccelerateConfig) bool {
				return c.FSDP.OffloadParams && c.FSDP.ShardingStrategy == "SHARD_GRAD_OP"
			}},
		{"full checkpointing", "llama-3.2-1b", func(j *Job) { j.Checkpointing = model.FullCheckpointing },
			func(c AccelerateConfig) bool { return c.FSDP.ActivationCheckpointing }},
		{"fp32", "llama-3.2-1b", func(j *Job) { j.Precision = FP32 },
			func(c AccelerateConfig) bool { return c.MixedPrecision == "no" }},
		{"autocast fp16", "llama-3.2-1b", func(j *Job) { j.Precision = FP16Mixed },
			func(c AccelerateConfig) bool { return c.MixedPrecision == "fp16" }},
		{"pure bf16 is no mixed precision", "llama-3.2-1b", func(j *Job) { j.Precision = BF16 },
			func(c AccelerateConfig) bool { return c.MixedPrecision == "no" }},
		{"two machines of 8", "llama-3.2-1b", func(j *Job) { j.Parallel = Parallel{DataParallel: 16, Stage: 3, FSDP: true} },
			func(c AccelerateConfig) bool {
				return c.NumMachines == 2 && c.NumProcesses == 16 && c.FSDP.ShardingStrategy == "FULL_SHARD"
			}},
		{"machines of GPUsPerNode", "llama-3.2-1b",
			func(j *Job) { j.Parallel = Parallel{DataParallel: 16, Stage: 3, ShardGroup: 4, GPUsPerNode: 4} },
			func(c AccelerateConfig) bool { return c.NumMachines == 4 && c.FSDP.ShardingStrategy == "HYBRID_SHARD" }},
		{"one GPU", "llama-3.2-1b", func(j *Job) { j.Parallel = Parallel{} },
			func(c AccelerateConfig) bool { return c.NumProcesses == 1 && c.FSDP.ShardingStrategy == "NO_SHARD" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := fsdpTrainJob(t, tc.model, Parallel{DataParallel: 8, Stage: 3})
			if tc.edit != nil {
				tc.edit(&j)
			}
			c, err := Plan{Job: j}.Accelerate()
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("Accelerate() = %+v", c)
			}
			raw, _ := c.MarshalIndent()
			checkAccelerateKeys(t, raw)
		})
	}
}

// TestAccelerateUnsupported checks that what FSDP cannot express is an
// error naming the field.
func TestAccelerateUnsupported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field string
		edit  func(*Job)
		err   error
	}{
		{"Job.Parallel.Stage", func(j *Job) { j.Parallel.Stage = 1 }, gpumem.ErrUnsupported},
		{"Plan.Job.Mode", func(j *Job) { j.Mode, j.Optimizer, j.GradAccum = Prefill, nil, 0 }, gpumem.ErrUnsupported},
		{"Plan.Job.Precision", func(j *Job) { j.Precision = FP8 }, gpumem.ErrUnsupported},
		{"Plan.Job.Checkpointing", func(j *Job) { j.Checkpointing = model.SelectiveCheckpointing }, gpumem.ErrUnsupported},
		{"Plan.Job.Checkpointing", func(j *Job) { j.Checkpointing = model.OffloadActivations }, gpumem.ErrUnsupported},
		{"Plan.Job.Checkpointing", func(j *Job) { j.Checkpointing, j.CheckpointEvery = model.EveryKCheckpointing, 2 }, gpumem.ErrUnsupported},
		{"Plan.Job.Parallel", func(j *Job) { j.Parallel.TensorParallel = 2 }, gpumem.ErrUnsupported},
		{"Plan.Job.Parallel", func(j *Job) { j.Parallel.PipelineParallel = 2 }, gpumem.ErrUnsupported},
		{"Plan.Job.Parallel", func(j *Job) { j.Parallel.ContextParallel = 2 }, gpumem.ErrUnsupported},
		{"Plan.Job.Parallel.GPUsPerNode", func(j *Job) { j.Parallel.DataParallel = 12 }, gpumem.ErrUnsupported},
		{"Plan.Job.Parallel.ShardGroup", func(j *Job) { j.Parallel = Parallel{DataParallel: 16, Stage: 3, ShardGroup: 4} },
			gpumem.ErrUnsupported},
		{"Job.Batch", func(j *Job) { j.Batch = 0 }, gpumem.ErrInvalid},
	} {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			j := fsdpTrainJob(t, "llama-3.2-1b", Parallel{DataParallel: 8, Stage: 3, FSDP: true})
			tc.edit(&j)
			for name, call := range map[string]func() error{
				"Accelerate":              func() error { _, err := (Plan{Job: j}).Accelerate(); return err },
				"HFTrainingArgumentsFSDP": func() error { _, err := (Plan{Job: j}).HFTrainingArgumentsFSDP(); return err },
			} {
				err := call()
				var fe *gpumem.FieldError
				if !errors.Is(err, tc.err) || !errors.As(err, &fe) {
					t.Errorf("%s() = %v, want %v", name, err, tc.err)
					continue
				}
				if fe.Field != tc.field {
					t.Errorf("%s() names %s, want %s", name, fe.Field, tc.field)
				}
			}
		})
	}
}

// TestAccelerateYAML checks the YAML text against a known file and that
// it carries the same data as the JSON form.
func TestAccelerateYAML(t *testing.T) {
	t.Parallel()
	j := fsdpTrainJob(t, "whisper-small", Parallel{DataParallel: 16, Stage: 3, ShardGroup: 8})
	j.Precision = FP32
	c, err := Plan{Job: j}.Accelerate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	// Key order and quoting as accelerate's yaml.safe_dump writes them
	// (tests/test_configs/latest_fsdp.yaml: mixed_precision: 'no').
	const want = `compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_sharding_strategy: HYBRID_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: WhisperEncoderLayer,WhisperDecoderLayer
  fsdp_use_orig_params: true
  fsdp_version: 1
machine_rank: 0
mixed_precision: 'no'
num_machines: 2
num_processes: 16
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("YAML() mismatch (-want +got):\n%s", diff)
	}
	raw, err := c.MarshalIndent()
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON map[string]any
	if err := json.Unmarshal(raw, &fromJSON); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromJSON, readYAML(t, got)); diff != "" {
		t.Errorf("YAML and JSON differ (-json +yaml):\n%s", diff)
	}
}

// readYAML reads the subset of YAML that AccelerateConfig.YAML writes
// (a block mapping, one nested level, plain or single-quoted scalars)
// into the values encoding/json would give.
func readYAML(t *testing.T, text []byte) map[string]any {
	t.Helper()
	top := map[string]any{}
	var block map[string]any
	for line := range strings.Lines(string(text)) {
		line = strings.TrimSuffix(line, "\n")
		nested := strings.HasPrefix(line, "  ")
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "  "), ":")
		if !ok {
			t.Fatalf("YAML line %q has no key", line)
		}
		if !nested && v == "" {
			block = map[string]any{}
			top[k] = block
			continue
		}
		v = strings.TrimPrefix(v, " ")
		var val any
		switch {
		case v == "true" || v == "false":
			val = v == "true"
		case strings.HasPrefix(v, "'"):
			val = strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'"), "''", "'")
		default:
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				val = n
			} else {
				val = v
			}
		}
		if nested {
			block[k] = val
		} else {
			top[k] = val
		}
	}
	return top
}

// TestYAMLString checks the quoting of strings YAML 1.1 would read as
// booleans, nulls or numbers.
func TestYAMLString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"FULL_SHARD": "FULL_SHARD", "no": "'no'", "No": "'No'", "off": "'off'", "y": "'y'", "null": "'null'",
		"": "''", "1": "'1'", "1e3": "'1e3'", "a b": "'a b'", "it's": "'it''s'", "A,B": "A,B", "-x": "'-x'",
	} {
		if got := yamlString(in); got != want {
			t.Errorf("yamlString(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestHFTrainingArgumentsFSDP checks the Trainer's fsdp options and
// fsdp_config block.
func TestHFTrainingArgumentsFSDP(t *testing.T) {
	t.Parallel()
	j := fsdpTrainJob(t, "llama-3.2-1b", Parallel{DataParallel: 8, Stage: 2})
	j.Checkpointing, j.Offload = model.FullCheckpointing, OffloadOptimizer
	a, err := Plan{Job: j}.HFTrainingArgumentsFSDP()
	if err != nil {
		t.Fatal(err)
	}
	if a["fsdp"] != "shard_grad_op offload auto_wrap" || a["gradient_checkpointing"] != false || a["bf16"] != true ||
		a["per_device_train_batch_size"] != 2 || a["gradient_accumulation_steps"] != 4 {
		t.Errorf("HFTrainingArgumentsFSDP() = %v", a)
	}
	for _, opt := range strings.Fields(a["fsdp"].(string)) {
		if !hfFSDPOptions[opt] {
			t.Errorf("fsdp option %q is not an FSDPOption", opt)
		}
	}
	cfg := a["fsdp_config"].(map[string]any)
	for k := range cfg {
		if !hfFSDPConfigKeys[k] {
			t.Errorf("undocumented fsdp_config key %q", k)
		}
	}
	if cfg["activation_checkpointing"] != true || cfg["backward_prefetch"] != "backward_pre" ||
		!cmp.Equal(cfg["transformer_layer_cls_to_wrap"], []string{"LlamaDecoderLayer"}) {
		t.Errorf("fsdp_config = %v", cfg)
	}
	if _, err := json.Marshal(a); err != nil {
		t.Errorf("json.Marshal: %v", err)
	}

	j.Precision = BF16
	if a, err := (Plan{Job: j}).HFTrainingArgumentsFSDP(); err != nil || a["bf16"] != nil {
		t.Errorf("pure bf16: bf16 = %v, %v; want the flag left out", a["bf16"], err)
	}
	j.Parallel = Parallel{DataParallel: 16, Stage: 3, ShardGroup: 8}
	if _, err := (Plan{Job: j}).HFTrainingArgumentsFSDP(); !errors.Is(err, gpumem.ErrUnsupported) {
		t.Errorf("hybrid_shard with offload: %v, want ErrUnsupported", err)
	}
	j.Offload = 0
	if a, err := (Plan{Job: j}).HFTrainingArgumentsFSDP(); err != nil || a["fsdp"] != "hybrid_shard auto_wrap" {
		t.Errorf("hybrid_shard: fsdp = %v, %v", a["fsdp"], err)
	}
}

// TestFSDPWrapClasses checks the table against the families of the
// model catalog it names.
func TestFSDPWrapClasses(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"llama-3.1-8b": "LlamaDecoderLayer", "mistral-7b": "MistralDecoderLayer", "mixtral-8x7b": "MixtralDecoderLayer",
		"qwen3-8b": "Qwen3DecoderLayer", "gemma-2-9b": "Gemma2DecoderLayer", "phi-3-mini": "Phi3DecoderLayer",
		"pythia-1b": "GPTNeoXLayer", "opt-350m": "OPTDecoderLayer", "t5-small": "T5Block", "bert-base": "BertLayer",
	} {
		s, ok := model.Lookup(name)
		if !ok {
			t.Fatalf("model.Lookup(%q) failed", name)
		}
		if got, ok := FSDPWrapClasses(s.Family); got != want || !ok {
			t.Errorf("FSDPWrapClasses(%q) (%s) = %q, %v; want %q", s.Family, name, got, ok, want)
		}
	}
	if got, ok := FSDPWrapClasses("llava"); ok || got != "" {
		t.Errorf(`FSDPWrapClasses("llava") = %q, %v; want "", false`, got, ok)
	}
}
