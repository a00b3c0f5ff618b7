package request

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/model"
)

// Model size limits of the service: a model read from a request (a
// catalog name or an inline config) may have at most maxServeLayers
// blocks in any stack and maxServeTensors tensors. The deepest published
// models have a few hundred blocks (DeepNet, 1,000 over encoder and
// decoder); DeepSeek-V3 has about 92,000 checkpoint tensors. Preparing a
// model costs its distinct layer kinds, not its size (model.Spec.Runs),
// so these bound what a request may claim, not the work it causes.
const (
	maxServeLayers  = 4096
	maxServeTensors = 1 << 18
)

// CheckModelSize refuses a model larger than the service reads
// (maxServeLayers blocks in a stack, maxServeTensors tensors) with a 422
// that names the config key at fault ("config.num_hidden_layers",
// "config.text_config.num_local_experts"), or "model" for a catalog
// model.
func CheckModelSize(spec model.Spec, config json.RawMessage) *Error {
	var stacks []int64
	var walk func(s *model.Spec)
	walk = func(s *model.Spec) {
		if s == nil {
			return
		}
		stacks = append(stacks, s.Layers)
		walk(s.Encoder)
		walk(s.Vision)
		walk(s.Text)
	}
	walk(&spec)
	for _, n := range stacks {
		if n > maxServeLayers {
			return &Error{Status: http.StatusUnprocessableEntity, Field: configKey(config, n, layerKeys),
				Msg: fmt.Sprintf("a stack of %d layers: the service reads models of at most %d layers a stack", n, maxServeLayers)}
		}
	}
	var tensors int64
	for _, r := range spec.Runs() {
		tensors += r.Count // Validate bounds the sum far below overflow
	}
	if tensors > maxServeTensors {
		field := "model"
		if len(config) > 0 {
			field = configKey(config, spec.LM().MoE.Experts, expertKeys)
			if field == "config" {
				field = configKey(config, spec.LM().Layers, layerKeys)
			}
		}
		return &Error{Status: http.StatusUnprocessableEntity, Field: field,
			Msg: fmt.Sprintf("%d tensors: the service reads models of at most %d tensors (DeepSeek-V3 has about 92,000)", tensors, maxServeTensors)}
	}
	return nil
}

// The config keys that give a stack's layers and a block's experts.
var (
	layerKeys  = []string{"num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "decoder_layers", "encoder_layers"}
	expertKeys = []string{"num_local_experts", "num_experts", "n_routed_experts"}
)

// configKey finds the key of config (or of its text_config,
// vision_config) among keys whose value is n, as "config.KEY"; "config"
// when none is, and "model" without a config.
func configKey(config json.RawMessage, n int64, keys []string) string {
	if len(config) == 0 {
		return "model"
	}
	if n <= 0 {
		return "config"
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(config, &top) != nil {
		return "config"
	}
	want := strconv.FormatInt(n, 10)
	find := func(m map[string]json.RawMessage, prefix string) string {
		for _, k := range keys {
			if v, ok := m[k]; ok && strings.TrimSpace(string(v)) == want {
				return prefix + k
			}
		}
		return ""
	}
	if k := find(top, "config."); k != "" {
		return k
	}
	for _, sub := range []string{"text_config", "vision_config"} {
		var m map[string]json.RawMessage
		if json.Unmarshal(top[sub], &m) == nil {
			if k := find(m, "config."+sub+"."); k != "" {
				return k
			}
		}
	}
	return "config"
}
