package model

// Decoder-only language models' config.json: the shared keys, per-family
// defaults and the families' own spellings (Phi, Falcon, BLOOM, GPT-2,
// Gemma 3).

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// mulField returns a·b for a size derived from two config values, or a
// range error naming field.
func mulField(field string, a, b int64) (int64, error) {
	n, ok := checked.Mul(a, b)
	if !ok || n > maxDim {
		return 0, gpumem.Errorf(field, a, gpumem.ErrRange, "%d × %d exceeds 2^40", a, b)
	}
	return n, nil
}

func headDim(hidden, heads int64) int64 {
	if heads <= 0 {
		return 0
	}
	return hidden / heads
}

// defaults are the class defaults of a configuration_<family>.py.
type defaults struct {
	vocab, hidden, inter, layers, heads int64
	kv                                  int64 // 0: = heads
	headDim                             int64 // 0: hidden/heads
	tied                                bool
	window                              int64 // sliding_window default
}

// familyDefaults are the __init__ defaults of transformers'
// configuration classes (configuration_llama.py, configuration_qwen2.py,
// ...). Generic decoders have none: every key is required.
var familyDefaults = map[string]defaults{
	"llama":       {vocab: 32000, hidden: 4096, inter: 11008, layers: 32, heads: 32},
	"mistral":     {vocab: 32000, hidden: 4096, inter: 14336, layers: 32, heads: 32, kv: 8, window: 4096},
	"mixtral":     {vocab: 32000, hidden: 4096, inter: 14336, layers: 32, heads: 32, kv: 8},
	"qwen2":       {vocab: 151936, hidden: 4096, inter: 22016, layers: 32, heads: 32, kv: 32},
	"qwen2_moe":   {vocab: 151936, hidden: 2048, inter: 5632, layers: 24, heads: 16, kv: 16},
	"qwen3":       {vocab: 151936, hidden: 4096, inter: 22016, layers: 32, heads: 32, kv: 32, headDim: 128},
	"qwen3_moe":   {vocab: 151936, hidden: 2048, inter: 6144, layers: 24, heads: 32, kv: 4, headDim: 128},
	"gemma":       {vocab: 256000, hidden: 3072, inter: 24576, layers: 28, heads: 16, kv: 16, headDim: 256, tied: true},
	"gemma2":      {vocab: 256000, hidden: 2304, inter: 9216, layers: 26, heads: 8, kv: 4, headDim: 256, tied: true, window: 4096},
	"gemma3_text": {vocab: 262208, hidden: 2304, inter: 9216, layers: 26, heads: 8, kv: 4, headDim: 256, tied: true, window: 4096},
	"deepseek_v2": {vocab: 102400, hidden: 5120, inter: 12288, layers: 30, heads: 32, kv: 32},
	"deepseek_v3": {vocab: 129280, hidden: 7168, inter: 18432, layers: 61, heads: 128, kv: 128},
	"phi":         {vocab: 51200, hidden: 2048, inter: 8192, layers: 24, heads: 32},
	"phi3":        {vocab: 32064, hidden: 3072, inter: 8192, layers: 32, heads: 32},
	"gpt_neox":    {vocab: 50432, hidden: 6144, inter: 24576, layers: 44, heads: 64},
	// GptOssConfig (transformers v4.55.0 configuration_gpt_oss.py): the
	// gpt-oss-120b shape.
	// Llama4TextConfig (transformers v4.51.0 configuration_llama4.py):
	// inter is intermediate_size_mlp, the dense layers' width.
	"llama4_text": {vocab: 202048, hidden: 5120, inter: 16384, layers: 48, heads: 40, kv: 8, headDim: 128},
	"gpt_oss":     {vocab: 201088, hidden: 2880, inter: 2880, layers: 36, heads: 64, kv: 8, headDim: 64, window: 128},
}

// decoder reads a llama-style decoder (llama, mistral, mixtral, qwen2,
// qwen2_moe, qwen3, gemma*, deepseek_v2/v3, generic).
func (c *config) decoder(s *Spec) error {
	d, known := familyDefaults[s.Family]
	if !known {
		d = defaults{vocab: -1, hidden: -1, inter: -1, layers: -1, heads: -1, tied: true}
	}
	var e errs
	s.Hidden = e.i(c.posv(d.hidden, "hidden_size"))
	s.Layers = e.i(c.posv(d.layers, "num_hidden_layers"))
	s.Heads = e.i(c.posv(d.heads, "num_attention_heads"))
	kvDef := d.kv
	if kvDef == 0 {
		kvDef = s.Heads
	}
	s.KVHeads = e.i(c.posv(kvDef, "num_key_value_heads"))
	s.Vocab = e.i(c.posv(d.vocab, "vocab_size"))
	hd := d.headDim
	if hd == 0 {
		hd = headDim(s.Hidden, s.Heads)
	}
	s.HeadDim = e.i(c.posv(hd, "head_dim"))
	s.TiedEmbeddings = e.b(c.boolv(d.tied, "tie_word_embeddings"))
	s.MaxPositions = e.i(c.intv(0, "max_position_embeddings"))
	s.Norm = RMSNorm
	s.Gated = true
	if e.err != nil {
		return e.err
	}
	moe := c.has("num_local_experts", "num_experts", "n_routed_experts")
	if s.Family == "llama4_text" {
		// Llama4TextMLP of the dense layers: intermediate_size_mlp.
		s.Intermediate = e.i(c.posv(d.inter, "intermediate_size_mlp"))
	} else if moe || s.Family == "mixtral" || s.Family == "gpt_oss" || s.Family == "qwen2_moe" || s.Family == "qwen3_moe" || strings.HasPrefix(s.Family, "deepseek") {
		s.Intermediate = e.i(c.intv(max(d.inter, 0), "intermediate_size"))
	} else {
		s.Intermediate = e.i(c.posv(d.inter, "intermediate_size"))
	}
	switch s.Family {
	case "llama", "mistral", "mixtral", "generic":
		attnBias := e.b(c.boolv(false, "attention_bias"))
		s.Bias.QKV, s.Bias.Out = attnBias, attnBias
		s.Bias.MLP = e.b(c.boolv(false, "mlp_bias"))
	case "qwen2", "qwen2_moe":
		s.Bias.QKV = true // Qwen2Attention: q/k/v bias=True, o_proj bias=False
	case "qwen3", "qwen3_moe":
		attnBias := e.b(c.boolv(false, "attention_bias"))
		s.Bias.QKV, s.Bias.Out = attnBias, attnBias
		s.QKNorm = true
	case "gemma2":
		s.SandwichNorm = true
	case "gemma3_text":
		s.SandwichNorm, s.QKNorm = true, true
	case "llama4_text":
		// Llama4TextAttention: q/k/v/o bias=config.attention_bias; its
		// qk norm (use_qk_norm) is Llama4TextL2Norm, without weights.
		attnBias := e.b(c.boolv(false, "attention_bias"))
		s.Bias.QKV, s.Bias.Out = attnBias, attnBias
	case "gpt_oss":
		// GptOssAttention: q/k/v/o bias=config.attention_bias (True).
		attnBias := e.b(c.boolv(true, "attention_bias"))
		s.Bias.QKV, s.Bias.Out = attnBias, attnBias
	default:
		if s.Generic {
			attnBias := e.b(c.boolv(false, "attention_bias"))
			s.Bias.QKV, s.Bias.Out = attnBias, attnBias
			s.Bias.MLP = e.b(c.boolv(false, "mlp_bias"))
		}
	}
	// Attention window.
	window := e.i(c.intv(d.window, "sliding_window"))
	if v, present := c.m["sliding_window"]; present && v == nil {
		window = 0 // explicit null: full attention (mixtral, mistral v0.2+)
	}
	switch s.Family {
	case "qwen2", "qwen2_moe", "qwen3", "qwen3_moe":
		if !e.b(c.boolv(false, "use_sliding_window")) {
			window = 0
		}
	}
	s.SlidingWindow = window
	if e.err != nil {
		return e.err
	}
	if s.Layers > maxLayers {
		return gpumem.Errorf(c.field("num_hidden_layers"), s.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
	}
	types, err := c.layerTypes(s.Layers)
	if err != nil {
		return err
	}
	if types == nil && window > 0 {
		switch s.Family {
		case "qwen2", "qwen2_moe", "qwen3", "qwen3_moe":
			// Qwen2Config: layers from max_window_layers on slide
			// (i >= max_window_layers), the ones before are global.
			from := e.i(c.intv(28, "max_window_layers"))
			types = make([]string, s.Layers)
			for i := range types {
				types[i] = "full_attention"
				if int64(i) >= from {
					types[i] = "sliding_attention"
				}
			}
		case "gemma2":
			// Gemma2: even layers slide, odd layers are global
			// (modeling_gemma2: is_sliding = not bool(layer_idx % 2)).
			types = make([]string, s.Layers)
			for i := range types {
				types[i] = "full_attention"
				if i%2 == 0 {
					types[i] = "sliding_attention"
				}
			}
		case "gpt_oss":
			// GptOssConfig: layer_types defaults to "sliding_attention"
			// for even layers ((i+1) % 2 != 0), "full_attention" for odd.
			types = make([]string, s.Layers)
			for i := range types {
				types[i] = "full_attention"
				if i%2 == 0 {
					types[i] = "sliding_attention"
				}
			}
		case "gemma3_text":
			pattern := e.i(c.posv(6, "sliding_window_pattern"))
			types = make([]string, s.Layers)
			for i := range types {
				types[i] = "sliding_attention"
				if pattern > 0 && int64(i+1)%pattern == 0 {
					types[i] = "full_attention"
				}
			}
		}
	}
	s.LayerTypes = types
	// MoE.
	if moe || s.Family == "mixtral" || s.Family == "gpt_oss" || s.Family == "llama4_text" {
		switch {
		case s.Family == "llama4_text":
			// Llama4TextMoe: num_local_experts routed experts of
			// intermediate_size (Llama4TextExperts) and one shared
			// Llama4TextMLP of intermediate_size; layer i is an MoE layer
			// when it is in moe_layers, by default
			// range(step-1, layers, step) for interleave_moe_layer_step.
			s.MoE.Experts = e.i(c.posv(16, "num_local_experts"))
			s.MoE.Active = e.i(c.posv(1, "num_experts_per_tok"))
			s.MoE.Intermediate = e.i(c.posv(8192, "intermediate_size"))
			s.MoE.Shared, s.MoE.SharedIntermediate = 1, s.MoE.Intermediate
			s.MoE.Step = e.i(c.posv(1, "interleave_moe_layer_step"))
			if k, v, ok := c.lookup("moe_layers"); ok && e.err == nil {
				l, isList := v.([]any)
				if !isList {
					e.err = gpumem.Errorf(c.field(k), v, gpumem.ErrSyntax, "not a list")
				} else {
					var want []int64
					for i := s.MoE.Step - 1; i < s.Layers; i += s.MoE.Step {
						want = append(want, i)
					}
					same := len(l) == len(want)
					for i := 0; same && i < len(l); i++ {
						n, err := toInt(c.field(k)+"["+strconv.Itoa(i)+"]", l[i])
						if err != nil {
							e.err = err
						}
						same = err == nil && n == want[i]
					}
					if !same && e.err == nil {
						e.err = gpumem.Errorf(c.field(k), v, gpumem.ErrUnsupported,
							"only the default layers of interleave_moe_layer_step = %d are modelled", s.MoE.Step)
					}
				}
			}
		case s.Family == "gpt_oss":
			// GptOssConfig: num_local_experts 128, num_experts_per_tok 4
			// ("experts_per_token" in OpenAI's own config); each expert is
			// a biased gated MLP of intermediate_size (GptOssExperts).
			s.MoE.Experts = e.i(c.posv(128, "num_local_experts", "num_experts"))
			s.MoE.Active = e.i(c.posv(4, "num_experts_per_tok", "experts_per_token"))
			s.MoE.Intermediate = s.Intermediate
		case s.Family == "mixtral":
			s.MoE.Experts = e.i(c.posv(8, "num_local_experts", "num_experts"))
			s.MoE.Active = e.i(c.posv(2, "num_experts_per_tok"))
			s.MoE.Intermediate = s.Intermediate
		case s.Family == "qwen2_moe" || s.Family == "qwen3_moe":
			experts, active, moeInter := int64(60), int64(4), int64(1408)
			if s.Family == "qwen3_moe" {
				experts, active, moeInter = 128, 8, 768
			}
			s.MoE.Experts = e.i(c.intv(experts, "num_experts"))
			s.MoE.Active = e.i(c.posv(active, "num_experts_per_tok"))
			s.MoE.Intermediate = e.i(c.posv(moeInter, "moe_intermediate_size"))
			s.MoE.Step = e.i(c.posv(1, "decoder_sparse_step"))
			if s.Family == "qwen2_moe" {
				s.MoE.SharedIntermediate = e.i(c.intv(5632, "shared_expert_intermediate_size"))
				if s.MoE.SharedIntermediate > 0 {
					s.MoE.Shared = 1
				}
			}
			if k, v, ok := c.lookup("mlp_only_layers"); ok {
				if l, isList := v.([]any); !isList || len(l) > 0 {
					e.err = gpumem.Errorf(c.field(k), v, gpumem.ErrUnsupported, "dense-only layers are not modelled")
				}
			}
		case strings.HasPrefix(s.Family, "deepseek"):
			experts, shared, active, moeInter := int64(160), int64(2), int64(6), int64(1408)
			if s.Family == "deepseek_v3" {
				experts, shared, active, moeInter = 256, 1, 8, 2048
			}
			s.MoE.Experts = e.i(c.intv(experts, "n_routed_experts", "num_local_experts"))
			s.MoE.Shared = e.i(c.intv(shared, "n_shared_experts"))
			s.MoE.Active = e.i(c.posv(active, "num_experts_per_tok"))
			s.MoE.Intermediate = e.i(c.posv(moeInter, "moe_intermediate_size"))
			s.MoE.SharedIntermediate = e.i(mulField(c.field("n_shared_experts"), s.MoE.Shared, s.MoE.Intermediate))
			first := int64(0)
			if s.Family == "deepseek_v3" {
				first = 3
			}
			s.MoE.DenseFirst = e.i(c.intv(first, "first_k_dense_replace"))
			s.MoE.Step = e.i(c.posv(1, "moe_layer_freq"))
		default:
			s.MoE.Experts = e.i(c.intv(0, "num_local_experts", "num_experts", "n_routed_experts"))
			s.MoE.Active = e.i(c.posv(2, "num_experts_per_tok"))
			s.MoE.Intermediate = e.i(c.posv(s.Intermediate, "moe_intermediate_size"))
			s.MoE.Shared = e.i(c.intv(0, "n_shared_experts"))
			s.MoE.SharedIntermediate = e.i(mulField(c.field("n_shared_experts"), s.MoE.Shared, s.MoE.Intermediate))
			s.MoE.DenseFirst = e.i(c.intv(0, "first_k_dense_replace"))
		}
		if s.MoE.Experts == 0 {
			s.MoE = MoE{}
		}
	}
	// MLA.
	if strings.HasPrefix(s.Family, "deepseek") || (s.Generic && c.has("kv_lora_rank")) {
		s.MLA.KVLoRARank = e.i(c.posv(512, "kv_lora_rank"))
		s.MLA.QLoRARank = e.i(c.intv(1536, "q_lora_rank"))
		if _, present := c.m["q_lora_rank"]; present && c.m["q_lora_rank"] == nil {
			s.MLA.QLoRARank = 0 // null: full q_proj (DeepSeek-V2-Lite)
		}
		s.MLA.QKNopeHeadDim = e.i(c.posv(128, "qk_nope_head_dim"))
		s.MLA.QKRopeHeadDim = e.i(c.posv(64, "qk_rope_head_dim"))
		s.MLA.VHeadDim = e.i(c.posv(128, "v_head_dim"))
		s.HeadDim = s.MLA.QKNopeHeadDim + s.MLA.QKRopeHeadDim
		attnBias := e.b(c.boolv(false, "attention_bias"))
		s.Bias.QKV, s.Bias.Out = attnBias, attnBias
	}
	return e.err
}

// layerTypes reads "layer_types" when present.
func (c *config) layerTypes(layers int64) ([]string, error) {
	k, v, ok := c.lookup("layer_types")
	if !ok {
		return nil, nil
	}
	l, isList := v.([]any)
	if !isList {
		return nil, gpumem.Errorf(c.field(k), v, gpumem.ErrSyntax, "not a list")
	}
	if int64(len(l)) != layers {
		return nil, gpumem.Errorf(c.field(k), len(l), gpumem.ErrInvalid, "lists %d layers, want num_hidden_layers = %d", len(l), layers)
	}
	out := make([]string, len(l))
	for i, x := range l {
		str, ok := x.(string)
		if !ok {
			return nil, gpumem.Errorf(c.field(k)+"["+strconv.Itoa(i)+"]", x, gpumem.ErrSyntax, "not a string")
		}
		out[i] = str
	}
	return out, nil
}

// phi reads phi (PhiConfig) and phi3 (Phi3Config).
func (c *config) phi(s *Spec) error {
	d := familyDefaults[s.Family]
	var e errs
	s.Hidden = e.i(c.posv(d.hidden, "hidden_size"))
	s.Layers = e.i(c.posv(d.layers, "num_hidden_layers"))
	s.Heads = e.i(c.posv(d.heads, "num_attention_heads"))
	s.KVHeads = e.i(c.posv(s.Heads, "num_key_value_heads"))
	s.Intermediate = e.i(c.posv(d.inter, "intermediate_size"))
	s.Vocab = e.i(c.posv(d.vocab, "vocab_size"))
	s.HeadDim = headDim(s.Hidden, s.Heads)
	s.MaxPositions = e.i(c.intv(0, "max_position_embeddings"))
	s.TiedEmbeddings = e.b(c.boolv(false, "tie_word_embeddings"))
	s.SlidingWindow = e.i(c.intv(0, "sliding_window"))
	if s.Family == "phi" {
		s.Norm = LayerNorm
		s.QKNorm = e.b(c.boolv(false, "qk_layernorm"))
		s.Bias = Bias{QKV: true, Out: true, MLP: true, LMHead: true}
	} else {
		s.Norm = RMSNorm
		s.Gated = true
	}
	return e.err
}

// falcon reads FalconConfig (configuration_falcon.py): multi_query uses
// one KV head; new_decoder_architecture uses num_kv_heads and two
// parallel norms.
func (c *config) falcon(s *Spec) error {
	var e errs
	s.Hidden = e.i(c.posv(4544, "hidden_size"))
	s.Layers = e.i(c.posv(32, "num_hidden_layers"))
	s.Heads = e.i(c.posv(71, "num_attention_heads"))
	s.Vocab = e.i(c.posv(65024, "vocab_size"))
	s.HeadDim = headDim(s.Hidden, s.Heads)
	newArch := e.b(c.boolv(false, "new_decoder_architecture"))
	mq := e.b(c.boolv(true, "multi_query"))
	parallel := e.b(c.boolv(true, "parallel_attn"))
	bias := e.b(c.boolv(false, "bias"))
	s.Bias = Bias{QKV: bias, Out: bias, MLP: bias}
	s.Intermediate = e.i(c.posv(4*s.Hidden, "ffn_hidden_size"))
	s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
	s.MaxPositions = e.i(c.intv(2048, "max_position_embeddings"))
	s.Norm = LayerNorm
	switch {
	case newArch:
		s.KVHeads = e.i(c.posv(s.Heads, "num_kv_heads"))
		s.ParallelNorms = e.i(c.posv(2, "num_ln_in_parallel_attn"))
	case mq:
		s.KVHeads = 1
		s.ParallelNorms = 1
	default:
		s.KVHeads = s.Heads
		s.ParallelNorms = 1
	}
	if !newArch && !parallel {
		s.ParallelNorms = 0
	}
	return e.err
}

// bloom reads BloomConfig (transformers configuration_bloom.py, v4.55.0):
// n_embed (legacy) wins over hidden_size, n_layer and n_head with their
// attribute_map aliases. BloomMLP is always 4·hidden_size wide (n_inner
// is ignored); every linear is biased; the embedding is followed by
// word_embeddings_layernorm and tied to lm_head; positions come from
// ALiBi, which has no parameters.
func (c *config) bloom(s *Spec) error {
	var e errs
	s.Hidden = e.i(c.posv(64, "n_embed", "hidden_size"))
	s.Layers = e.i(c.posv(2, "n_layer", "num_hidden_layers"))
	s.Heads = e.i(c.posv(8, "n_head", "num_attention_heads"))
	s.Vocab = e.i(c.posv(250880, "vocab_size"))
	s.KVHeads = s.Heads
	s.HeadDim = headDim(s.Hidden, s.Heads)
	s.Intermediate = e.i(mulField(c.field("hidden_size"), 4, s.Hidden))
	s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
	s.Bias = Bias{QKV: true, Out: true, MLP: true}
	s.Norm = LayerNorm
	s.Activation = "gelu_pytorch_tanh" // bloom_gelu_forward: the tanh approximation
	if e.err == nil && s.Hidden%s.Heads != 0 {
		k, _, _ := c.lookup("n_head", "num_attention_heads")
		return gpumem.Errorf(c.field(k), s.Heads, gpumem.ErrInvalid, "does not divide hidden_size = %d", s.Hidden)
	}
	return e.err
}

// gpt2 reads GPT2Config and GPTBigCodeConfig (n_embd, n_layer, n_head,
// n_positions, n_inner; attribute_map aliases accepted).
func (c *config) gpt2(s *Spec) error {
	var e errs
	s.Hidden = e.i(c.posv(768, "n_embd", "hidden_size"))
	s.Layers = e.i(c.posv(12, "n_layer", "num_hidden_layers"))
	s.Heads = e.i(c.posv(12, "n_head", "num_attention_heads"))
	s.Positions = e.i(c.posv(1024, "n_positions", "max_position_embeddings"))
	s.MaxPositions = s.Positions
	s.Vocab = e.i(c.posv(50257, "vocab_size"))
	s.Intermediate = e.i(c.posv(4*s.Hidden, "n_inner"))
	s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
	s.HeadDim = headDim(s.Hidden, s.Heads)
	s.KVHeads = s.Heads
	s.Norm = LayerNorm
	if s.Family == "gpt_bigcode" && e.b(c.boolv(true, "multi_query")) {
		s.KVHeads = 1
	}
	if s.Family == "gpt2" {
		act, err := c.str("activation_function", "gelu_new")
		if err != nil && e.err == nil {
			e.err = err
		}
		switch act {
		case "gelu_new", "gelu", "gelu_pytorch_tanh", "relu", "quick_gelu":
			s.Activation = act
		default:
			if e.err == nil {
				e.err = gpumem.Errorf(c.field("activation_function"), act, gpumem.ErrUnsupported,
					"want gelu_new, gelu, gelu_pytorch_tanh, relu or quick_gelu")
			}
		}
	}
	if e.err == nil && s.Heads > 0 && s.Hidden%s.Heads != 0 {
		return gpumem.Errorf(c.field("n_head"), s.Heads, gpumem.ErrInvalid, "does not divide n_embd = %d", s.Hidden)
	}
	return e.err
}

// gemma3 reads Gemma3Config: text_config (Gemma3TextConfig) and
// vision_config (SiglipVisionConfig of the released checkpoints: 1152
// hidden, 27 layers, 896 px, patch 14, no pooling head).
func (c *config) gemma3(s Spec) (Spec, error) {
	tc, _, err := c.sub("text_config")
	if err != nil {
		return Spec{}, err
	}
	if _, has := tc.m["model_type"]; !has {
		tc.m = maps(tc.m, "model_type", "gemma3_text")
	}
	t, err := tc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	vc, _, err := c.sub("vision_config")
	if err != nil {
		return Spec{}, err
	}
	vd := map[string]any{"model_type": "siglip_vision_model", "hidden_size": json.Number("1152"),
		"intermediate_size": json.Number("4304"), "num_hidden_layers": json.Number("27"),
		"num_attention_heads": json.Number("16"), "image_size": json.Number("896"), "patch_size": json.Number("14"),
		"vision_use_head": false}
	for k, v := range vc.m {
		vd[k] = v
	}
	vc.m = vd
	v, err := vc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	s.Vision, s.Text = &v, &t
	return s, nil
}

func maps(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}
