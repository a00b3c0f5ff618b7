package model

// LoRA adapters: PEFT's target modules and the A and B tensors each adapted
// linear gets.

import (
	"strings"

	"github.com/gpumem/gpumem"
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
