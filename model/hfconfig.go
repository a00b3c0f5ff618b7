package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// maxConfigBytes caps what FromHFConfig reads. Real config.json files are
// a few KB (id2label tables can reach a few hundred KB).
const maxConfigBytes = 16 << 20

// Families lists the model_type values FromHFConfig reads, in the order of
// its error message. "cogvideox" stands for diffusers configs whose
// "_class_name" is CogVideoXTransformer3DModel.
func Families() []string {
	return slices.Clone(supportedFamilies[:])
}

var supportedFamilies = [...]string{
	"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
	"gemma", "gemma2", "gemma3", "gemma3_text", "phi", "phi3", "falcon",
	"gpt2", "gpt_bigcode", "gpt_neox", "opt", "bert", "roberta", "t5", "mt5",
	"whisper", "vit", "clip", "clip_vision_model", "clip_text_model",
	"siglip", "siglip_vision_model", "llava", "deepseek_v2", "deepseek_v3",
	"cogvideox", "gpt_oss", "llama4_text", "bloom", "qwen2_vl", "qwen2_5_vl",
	FamilyUNet, FamilyVAE, FamilyFlux, "mamba", FamilyMamba2, FamilyJamba, FamilySD3, FamilyZamba, FamilyZamba2,
	"resnet", "convnext", "swin", "efficientnet",
}

// FromHFConfig reads a Hugging Face config.json and returns the
// architecture it describes.
//
// Keys are read under each family's names and attribute_map aliases
// (gpt2 n_embd, t5 d_model, whisper d_model, mixtral num_experts, ...).
// Absent keys take the defaults of the family's transformers
// configuration class (configuration_<family>.py): qwen2's
// num_key_value_heads defaults to 32, llama's to num_attention_heads,
// mistral's and mixtral's to 8. "dtype" wins over the older
// "torch_dtype"; with neither, the weights are FP32, transformers'
// default. Multimodal configs read "text_config" and "vision_config".
// "architectures" naming a T5EncoderModel gives an encoder-only T5; a
// diffusers config whose "_class_name" is CogVideoXTransformer3DModel
// reads as family "cogvideox". "quantization_config" is recorded in
// Spec.Quantization.
//
// An unknown model_type that has hidden_size, num_hidden_layers,
// num_attention_heads, intermediate_size and vocab_size is read as a
// llama-style decoder with Spec.Generic set. With only some of those keys
// the error names the first missing one (it has no class default); with
// none it wraps gpumem.ErrUnsupported and names the type and the
// supported list.
//
// Every error is a *gpumem.FieldError naming the JSON field
// ("config.text_config.hidden_size") and its value; a nil r is an error
// of field "config".
func FromHFConfig(r io.Reader) (Spec, error) {
	if r == nil {
		return Spec{}, gpumem.Errorf("config", nil, gpumem.ErrInvalid, "nil reader")
	}
	data, err := io.ReadAll(io.LimitReader(r, maxConfigBytes+1))
	if err != nil {
		return Spec{}, gpumem.Errorf("config", "", gpumem.ErrSyntax, "reading: %v", err)
	}
	if len(data) > maxConfigBytes {
		return Spec{}, gpumem.Errorf("config", len(data), gpumem.ErrRange, "larger than %d bytes", maxConfigBytes)
	}
	obj, err := decodeObject(data)
	if err != nil {
		return Spec{}, err
	}
	c := &config{m: obj, path: "config"}
	s, err := c.spec(gpumem.Invalid)
	if err != nil {
		return Spec{}, err
	}
	if s.Name == "" {
		s.Name, _ = c.str("_name_or_path", "")
	}
	if s.Quantization, err = c.quantization(); err != nil {
		return Spec{}, err
	}
	if err := c.head(&s); err != nil {
		return Spec{}, err
	}
	if err := s.Validate(); err != nil {
		return Spec{}, configField(err)
	}
	return s, nil
}

// specKeys maps Spec fields to the config.json keys they come from, so
// that a validation error names the field the user wrote.
var specKeys = map[string]string{
	"Hidden": "hidden_size", "Layers": "num_hidden_layers", "Heads": "num_attention_heads",
	"KVHeads": "num_key_value_heads", "HeadDim": "head_dim", "Vocab": "vocab_size",
	"Intermediate": "intermediate_size", "LayerTypes": "layer_types", "SlidingWindow": "sliding_window",
	"MoE.Experts": "num_experts", "MoE.Active": "num_experts_per_tok", "MoE.Intermediate": "moe_intermediate_size",
	"MoE.SharedIntermediate": "shared_expert_intermediate_size", "MoE.DenseFirst": "first_k_dense_replace",
	"MLA.KVLoRARank": "kv_lora_rank", "MLA.QLoRARank": "q_lora_rank", "MLA.VHeadDim": "v_head_dim",
	"MLA.QKNopeHeadDim": "qk_nope_head_dim", "Image.Size": "image_size", "Image.Patch": "patch_size",
	"Image.Channels": "num_channels", "Positions": "max_position_embeddings", "MelBins": "num_mel_bins",
	"Encoder.Layers": "encoder_layers", "Encoder.Heads": "encoder_attention_heads",
	"Encoder.Intermediate": "encoder_ffn_dim", "Encoder.Positions": "max_source_positions",
	"ProjectionDim": "projection_dim",
}

// unetKeys maps UNet fields to the diffusers config keys they come from.
var unetKeys = map[string]string{
	"Channels": "block_out_channels", "LayersPerBlock": "layers_per_block", "Heads": "attention_head_dim",
	"TransformerLayers": "transformer_layers_per_block", "UpTransformerLayers": "reverse_transformer_layers_per_block",
	"CrossDim": "cross_attention_dim", "In": "in_channels", "Out": "out_channels", "Groups": "norm_num_groups",
	"TimeEmbed": "time_embedding_dim", "Latent": "latent_channels", "AddEmbedIn": "projection_class_embeddings_input_dim",
}

// configField renames a Spec validation error's field to the config key
// ("Spec.Text.KVHeads" → "config.text_config.num_key_value_heads (Spec.Text.KVHeads)").
func configField(err error) error {
	var fe *gpumem.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	rest, ok := strings.CutPrefix(fe.Field, "Spec")
	if !ok {
		return err
	}
	rest = strings.TrimPrefix(rest, ".")
	path := "config"
	for _, part := range []struct{ spec, key string }{{"Text.", "text_config"}, {"Vision.", "vision_config"}} {
		if r, ok := strings.CutPrefix(rest, part.spec); ok {
			rest, path = r, path+"."+part.key
		}
	}
	key, ok := specKeys[rest]
	if u, isUNet := strings.CutPrefix(rest, "UNet."); isUNet {
		base, index, _ := strings.Cut(u, "[")
		if key, ok = unetKeys[base]; ok && index != "" {
			key += "[" + index
		}
	}
	if !ok {
		return err
	}
	return &gpumem.FieldError{Field: path + "." + key + " (" + fe.Field + ")", Value: fe.Value, Err: fe.Err}
}

func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, gpumem.Errorf("config", truncate(string(data)), gpumem.ErrSyntax, "not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, gpumem.Errorf("config", truncate(string(data)), gpumem.ErrSyntax, "data after the JSON object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, gpumem.Errorf("config", truncate(string(data)), gpumem.ErrSyntax, "not a JSON object")
	}
	return m, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// config reads typed values from one JSON object of a config.
type config struct {
	m    map[string]any
	path string
}

func (c *config) field(key string) string { return c.path + "." + key }

// lookup returns the first present, non-null key of keys.
func (c *config) lookup(keys ...string) (string, any, bool) {
	for _, k := range keys {
		if v, ok := c.m[k]; ok && v != nil {
			return k, v, true
		}
	}
	return keys[0], nil, false
}

// has reports whether any of keys is present and not null.
func (c *config) has(keys ...string) bool {
	_, _, ok := c.lookup(keys...)
	return ok
}

// intv reads a non-negative integer under the first present key of keys,
// or returns def when none is present. def < 0 means required.
func (c *config) intv(def int64, keys ...string) (int64, error) {
	k, v, ok := c.lookup(keys...)
	if !ok {
		if def < 0 {
			return 0, gpumem.Errorf(c.field(k), nil, gpumem.ErrInvalid, "missing, and %s has no default", c.family())
		}
		return def, nil
	}
	return toInt(c.field(k), v)
}

// toInt reads a non-negative integer JSON value (4096 or 4096.0) no
// larger than 2^40, naming field in errors.
func toInt(field string, v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, gpumem.Errorf(field, v, gpumem.ErrSyntax, "not a number")
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(n), 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange):
			return 0, gpumem.Errorf(field, string(n), gpumem.ErrSyntax, "not a number")
		case math.IsInf(f, 0) || math.Abs(f) > maxDim:
			return 0, gpumem.Errorf(field, string(n), gpumem.ErrRange, "exceeds 2^40")
		case f != math.Trunc(f):
			return 0, gpumem.Errorf(field, string(n), gpumem.ErrInvalid, "not an integer")
		}
		i = int64(f)
	}
	if i < 0 {
		return 0, gpumem.Errorf(field, i, gpumem.ErrInvalid, "must not be negative")
	}
	if i > maxDim {
		return 0, gpumem.Errorf(field, i, gpumem.ErrRange, "exceeds 2^40")
	}
	return i, nil
}

// posv is intv for a value that must be positive.
func (c *config) posv(def int64, keys ...string) (int64, error) {
	v, err := c.intv(def, keys...)
	if err == nil && v == 0 {
		k, _, _ := c.lookup(keys...)
		return 0, gpumem.Errorf(c.field(k), 0, gpumem.ErrInvalid, "must be positive")
	}
	return v, err
}

func (c *config) boolv(def bool, keys ...string) (bool, error) {
	k, v, ok := c.lookup(keys...)
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, gpumem.Errorf(c.field(k), v, gpumem.ErrSyntax, "not a boolean")
	}
	return b, nil
}

func (c *config) str(key, def string) (string, error) {
	v, ok := c.m[key]
	if !ok || v == nil {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", gpumem.Errorf(c.field(key), v, gpumem.ErrSyntax, "not a string")
	}
	return s, nil
}

func (c *config) sub(key string) (*config, bool, error) {
	v, ok := c.m[key]
	if !ok || v == nil {
		return &config{m: map[string]any{}, path: c.field(key)}, false, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false, gpumem.Errorf(c.field(key), v, gpumem.ErrSyntax, "not an object")
	}
	return &config{m: m, path: c.field(key)}, true, nil
}

func (c *config) family() string {
	s, _ := c.m["model_type"].(string)
	if s == "" {
		return "this config"
	}
	return s
}

// dtype reads "dtype", then "torch_dtype" (transformers PR #39782), or
// returns def. "auto" and absent mean def.
func (c *config) dtype(def gpumem.DType) (gpumem.DType, error) {
	k, v, ok := c.lookup("dtype", "torch_dtype")
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return 0, gpumem.Errorf(c.field(k), v, gpumem.ErrSyntax, "not a string")
	}
	if s == "auto" {
		return def, nil
	}
	d, err := gpumem.ParseDType(s)
	if err != nil {
		return 0, &gpumem.FieldError{Field: c.field(k), Value: s, Err: err}
	}
	return d, nil
}

// errs accumulates the first error of a sequence of reads.
type errs struct{ err error }

func (e *errs) i(v int64, err error) int64 {
	if e.err == nil && err != nil {
		e.err = err
	}
	return v
}

func (e *errs) b(v bool, err error) bool {
	if e.err == nil && err != nil {
		e.err = err
	}
	return v
}

func (e *errs) s(v string, err error) string {
	if e.err == nil && err != nil {
		e.err = err
	}
	return v
}

// spec reads c as one model. parent is the dtype of an enclosing config.
func (c *config) spec(parent gpumem.DType) (Spec, error) {
	mt, err := c.str("model_type", "")
	if err != nil {
		return Spec{}, err
	}
	def := parent
	if def == gpumem.Invalid {
		def = gpumem.FP32
	}
	dt, err := c.dtype(def)
	if err != nil {
		return Spec{}, err
	}
	if mt == "" {
		// diffusers configs name a class instead of a model_type.
		switch cls, _ := c.str("_class_name", ""); cls {
		case "CogVideoXTransformer3DModel":
			mt = "cogvideox"
		case "UNet2DConditionModel":
			mt = FamilyUNet
		case "AutoencoderKL":
			mt = FamilyVAE
		case "FluxTransformer2DModel":
			mt = FamilyFlux
		case "SD3Transformer2DModel":
			mt = FamilySD3
		}
	}
	s := Spec{Family: mt, DType: dt}
	var e errs
	switch mt {
	case "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
		"gemma", "gemma2", "gemma3_text", "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4_text":
		e.err = c.decoder(&s)
	case "llama4":
		// Llama4ForConditionalGeneration: the text model plus a vision
		// encoder and projector, which are not modelled.
		return Spec{}, gpumem.Errorf(c.field("vision_config"), "llama4", gpumem.ErrUnsupported,
			"the Llama 4 vision encoder is not modelled; read text_config alone (model_type llama4_text)")
	case "gemma3":
		return c.gemma3(s)
	case "phi", "phi3":
		e.err = c.phi(&s)
	case "falcon":
		e.err = c.falcon(&s)
	case "bloom":
		e.err = c.bloom(&s)
	case "qwen2_vl", "qwen2_5_vl":
		return c.qwen2vl(s)
	case "gpt2", "gpt_bigcode":
		e.err = c.gpt2(&s)
	case "gpt_neox":
		d := familyDefaults["gpt_neox"]
		s.Hidden = e.i(c.posv(d.hidden, "hidden_size"))
		s.Layers = e.i(c.posv(d.layers, "num_hidden_layers"))
		s.Heads = e.i(c.posv(d.heads, "num_attention_heads"))
		s.KVHeads = s.Heads
		s.Intermediate = e.i(c.posv(d.inter, "intermediate_size"))
		s.Vocab = e.i(c.posv(d.vocab, "vocab_size"))
		s.MaxPositions = e.i(c.intv(2048, "max_position_embeddings"))
		s.TiedEmbeddings = e.b(c.boolv(false, "tie_word_embeddings"))
		s.Bias.QKV = e.b(c.boolv(true, "attention_bias"))
		s.Norm = LayerNorm
		s.HeadDim = headDim(s.Hidden, s.Heads)
	case "opt":
		s.Hidden = e.i(c.posv(768, "hidden_size"))
		s.Layers = e.i(c.posv(12, "num_hidden_layers"))
		s.Heads = e.i(c.posv(12, "num_attention_heads"))
		s.KVHeads = s.Heads
		s.Intermediate = e.i(c.posv(3072, "ffn_dim"))
		s.Vocab = e.i(c.posv(50272, "vocab_size"))
		s.MaxPositions = e.i(c.posv(2048, "max_position_embeddings"))
		s.Positions = s.MaxPositions + 2 // OPTLearnedPositionalEmbedding offset
		s.EmbedDim = e.i(c.intv(0, "word_embed_proj_dim"))
		if s.EmbedDim == s.Hidden {
			s.EmbedDim = 0
		}
		before := e.b(c.boolv(true, "do_layer_norm_before"))
		removed := e.b(c.boolv(false, "_remove_final_layer_norm"))
		s.NoFinalNorm = !before || removed
		s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
		s.Norm = LayerNorm
		s.HeadDim = headDim(s.Hidden, s.Heads)
	case "bert", "roberta":
		vocab, pos := int64(30522), int64(512)
		if mt == "roberta" {
			vocab = 50265
		}
		s.Hidden = e.i(c.posv(768, "hidden_size"))
		s.Layers = e.i(c.posv(12, "num_hidden_layers"))
		s.Heads = e.i(c.posv(12, "num_attention_heads"))
		s.KVHeads = s.Heads
		s.Intermediate = e.i(c.posv(3072, "intermediate_size"))
		s.Vocab = e.i(c.posv(vocab, "vocab_size"))
		s.Positions = e.i(c.posv(pos, "max_position_embeddings"))
		s.MaxPositions = s.Positions
		s.TypeVocab = e.i(c.intv(2, "type_vocab_size"))
		s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
		s.Norm = LayerNorm
		s.Pooler = true
		s.HeadDim = headDim(s.Hidden, s.Heads)
	case "t5", "mt5":
		e.err = c.t5(&s)
	case "whisper":
		e.err = c.whisper(&s)
	case "vit", "clip_vision_model", "siglip_vision_model", "clip_text_model":
		e.err = c.encoder(&s)
	case "llava":
		return c.llava(s)
	case "cogvideox":
		e.err = c.cogvideox(&s)
	case FamilyUNet:
		e.err = c.unet(&s)
	case FamilyVAE:
		e.err = c.vae(&s)
	case FamilyFlux:
		e.err = c.flux(&s)
	case "mamba":
		e.err = c.mamba(&s)
	case FamilyMamba2:
		e.err = c.mamba2(&s)
	case FamilyJamba:
		e.err = c.jamba(&s)
	case FamilySD3:
		e.err = c.sd3(&s)
	case FamilyZamba:
		e.err = c.zamba(&s)
	case FamilyZamba2:
		e.err = c.zamba2(&s)
	case "resnet", "convnext", "swin", "efficientnet":
		e.err = c.backbone(&s)
	case "clip", "siglip":
		return c.clip(s)
	default:
		std := []string{"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"}
		var missing []string
		for _, k := range std {
			if !c.has(k) {
				missing = append(missing, k)
			}
		}
		switch {
		case len(missing) == len(std) && mt == "":
			return Spec{}, gpumem.Errorf(c.field("model_type"), nil, gpumem.ErrUnsupported,
				"missing, and the standard decoder keys are absent; supported: %s", strings.Join(supportedFamilies[:], ", "))
		case len(missing) == len(std):
			return Spec{}, gpumem.Errorf(c.field("model_type"), mt, gpumem.ErrUnsupported,
				"unknown model type without the standard decoder keys (%s); supported: %s",
				strings.Join(std, ", "), strings.Join(supportedFamilies[:], ", "))
		case len(missing) > 0:
			// Some decoder keys: a generic decoder missing a key that has
			// no default.
			return Spec{}, gpumem.Errorf(c.field(missing[0]), nil, gpumem.ErrInvalid,
				"missing, and model type %q has no class defaults (supported: %s)", mt, strings.Join(supportedFamilies[:], ", "))
		}
		s.Generic = true
		if s.Family == "" {
			s.Family = "generic"
		}
		e.err = c.decoder(&s)
	}
	if e.err != nil {
		return Spec{}, e.err
	}
	return s, nil
}

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

// quantization reads quantization_config (transformers
// quantizer configs: FineGrainedFP8Config, BitsAndBytesConfig,
// GPTQConfig, AwqConfig). Unknown methods are kept by name.
func (c *config) quantization() (Quantization, error) {
	qc, ok, err := c.sub("quantization_config")
	if err != nil || !ok {
		return Quantization{}, err
	}
	var q Quantization
	var e errs
	q.Method = e.s(qc.str("quant_method", ""))
	switch q.Method {
	case "fp8":
		q.DType = gpumem.FP8E4M3
		if f := e.s(qc.str("fmt", "e4m3")); f == "e5m2" {
			q.DType = gpumem.FP8E5M2
		}
		if k, v, ok := qc.lookup("weight_block_size"); ok {
			l, isList := v.([]any)
			if !isList || len(l) != 2 {
				return Quantization{}, gpumem.Errorf(qc.field(k), v, gpumem.ErrSyntax, "want [rows, columns]")
			}
			for i, x := range l {
				f := qc.field(k) + "[" + strconv.Itoa(i) + "]"
				q.Block[i] = e.i(toInt(f, x))
				if e.err == nil && q.Block[i] == 0 {
					e.err = gpumem.Errorf(f, 0, gpumem.ErrInvalid, "must be positive")
				}
			}
		}
	case "bitsandbytes":
		switch {
		case e.b(qc.boolv(false, "load_in_4bit")):
			q.DType = gpumem.NF4
			if t := e.s(qc.str("bnb_4bit_quant_type", "fp4")); t == "fp4" {
				q.DType = gpumem.FP4
			}
			q.Nested = e.b(qc.boolv(false, "bnb_4bit_use_double_quant"))
		case e.b(qc.boolv(false, "load_in_8bit")):
			q.DType = gpumem.INT8
		}
	case "mxfp4":
		// Mxfp4Config (gpt-oss): the MoE experts' projections as OCP MX
		// FP4 blocks and E8M0 scales.
		q.DType = gpumem.MXFP4
	case "gptq", "awq":
		if e.i(qc.intv(4, "bits", "w_bit")) == 4 {
			q.DType = gpumem.INT4
		}
		q.Group = e.i(qc.intv(0, "group_size", "q_group_size"))
	}
	return q, e.err
}

// architectures reads the "architectures" list of class names.
func (c *config) architectures() ([]string, error) {
	k, v, ok := c.lookup("architectures")
	if !ok {
		return nil, nil
	}
	l, isList := v.([]any)
	if !isList {
		return nil, gpumem.Errorf(c.field(k), v, gpumem.ErrSyntax, "not a list")
	}
	out := make([]string, 0, len(l))
	for i, x := range l {
		str, ok := x.(string)
		if !ok {
			return nil, gpumem.Errorf(c.field(k)+"["+strconv.Itoa(i)+"]", x, gpumem.ErrSyntax, "not a string")
		}
		out = append(out, str)
	}
	return out, nil
}

// head sets s.Head from the first class of "architectures" that names a
// task head (BertForSequenceClassification: HeadSeqCls; BertModel names
// none), and s.Labels from "num_labels", else the length of "id2label"
// (PretrainedConfig's default is 2). A class whose head s's family has
// not modelled is an error naming "architectures".
func (c *config) head(s *Spec) error {
	archs, err := c.architectures()
	if err != nil {
		return err
	}
	for i, a := range archs {
		h, ok := headOfClass(a)
		if !ok {
			continue
		}
		if !s.headSupported(h) {
			if h == HeadCausalLM {
				return nil // the family's own layout (T5, Whisper: their LM heads)
			}
			return gpumem.Errorf(c.field("architectures")+"["+strconv.Itoa(i)+"]", a, gpumem.ErrUnsupported,
				"the %s head of a %s model is not modelled", h, s.Family)
		}
		s.Head = h
		break
	}
	switch s.Head {
	case HeadSeqCls, HeadTokenCls, HeadImageCls:
	default:
		return nil
	}
	if c.has("num_labels") {
		n, err := c.intv(0, "num_labels")
		if err != nil {
			return err
		}
		if n == 0 || n > 1<<24 {
			return gpumem.Errorf(c.field("num_labels"), n, gpumem.ErrInvalid, "must be in [1, 2^24]")
		}
		s.Labels = n
		return nil
	}
	if _, v, ok := c.lookup("id2label"); ok {
		m, isMap := v.(map[string]any)
		if !isMap {
			return gpumem.Errorf(c.field("id2label"), v, gpumem.ErrSyntax, "not an object")
		}
		if len(m) > 0 {
			s.Labels = int64(len(m))
		}
	}
	return nil
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

// qwen2vl reads Qwen2VLConfig and Qwen2_5_VLConfig (transformers
// v4.57.1 configuration_qwen2_vl.py, configuration_qwen2_5_vl.py): the
// language model is a qwen2 decoder under the top-level keys (or
// text_config, in newer files), with the classes' defaults (the 72B
// shape); vision_config is the tower read into s.Vision, which
// [Spec.Tensors] emits as "visual.*": Qwen2-VL embed_dim, depth,
// num_heads, mlp_ratio (LayerNorm, fc1/fc2 MLP); Qwen2.5-VL hidden_size,
// depth, num_heads, intermediate_size (RMSNorm, gated MLP), both with
// patch_size, temporal_patch_size, spatial_merge_size and the merger's
// output width (hidden_size, out_hidden_size).
func (c *config) qwen2vl(s Spec) (Spec, error) {
	tc, has, err := c.sub("text_config")
	if err != nil {
		return Spec{}, err
	}
	if !has {
		tc = &config{m: c.m, path: c.path}
	}
	td := map[string]any{"vocab_size": json.Number("152064"), "hidden_size": json.Number("8192"),
		"intermediate_size": json.Number("29568"), "num_hidden_layers": json.Number("80"),
		"num_attention_heads": json.Number("64"), "num_key_value_heads": json.Number("8"),
		"tie_word_embeddings": false}
	for k, v := range tc.m {
		td[k] = v
	}
	td["model_type"] = "qwen2"
	t, err := (&config{m: td, path: tc.path}).spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	vc, _, err := c.sub("vision_config")
	if err != nil {
		return Spec{}, err
	}
	v := Spec{Family: s.Family + "_vision", DType: t.DType}
	var e errs
	if s.Family == "qwen2_vl" {
		// Qwen2VLVisionConfig: depth 32, embed_dim 1280, hidden_size
		// 3584 (the merger's output), mlp_ratio 4, num_heads 16.
		v.Hidden = e.i(vc.posv(1280, "embed_dim"))
		ratio := e.i(vc.posv(4, "mlp_ratio"))
		v.Intermediate = e.i(mulField(vc.field("mlp_ratio"), ratio, v.Hidden))
		v.ProjectionDim = e.i(vc.posv(3584, "hidden_size"))
		v.Norm = LayerNorm
	} else {
		// Qwen2_5_VLVisionConfig: depth 32, hidden_size 3584,
		// intermediate_size 3420, num_heads 16, out_hidden_size 3584.
		v.Hidden = e.i(vc.posv(3584, "hidden_size"))
		v.Intermediate = e.i(vc.posv(3420, "intermediate_size"))
		v.ProjectionDim = e.i(vc.posv(3584, "out_hidden_size"))
		v.Norm, v.Gated = RMSNorm, true
	}
	v.Layers = e.i(vc.posv(32, "depth"))
	v.Heads = e.i(vc.posv(16, "num_heads"))
	v.KVHeads = v.Heads
	v.Image.Patch = e.i(vc.posv(14, "patch_size"))
	v.Image.Channels = e.i(vc.posv(3, "in_channels", "in_chans"))
	v.Image.Temporal = e.i(vc.posv(2, "temporal_patch_size"))
	v.Image.Merge = e.i(vc.posv(2, "spatial_merge_size"))
	if e.err != nil {
		return Spec{}, e.err
	}
	if v.Hidden%v.Heads != 0 {
		return Spec{}, gpumem.Errorf(vc.field("num_heads"), v.Heads, gpumem.ErrInvalid, "does not divide the tower width %d", v.Hidden)
	}
	if v.Layers > maxLayers {
		return Spec{}, gpumem.Errorf(vc.field("depth"), v.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
	}
	v.HeadDim = v.Hidden / v.Heads
	if _, err := mulField(vc.field("spatial_merge_size"), v.Image.Merge*v.Image.Merge, v.Hidden); err != nil {
		return Spec{}, err
	}
	t.Family, t.Vision = s.Family, &v
	return t, nil
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

// t5 reads T5Config / MT5Config. The layer norm is T5LayerNorm (weight
// only); "gated-gelu" (and any "gated-*") makes wi_0/wi_1.
func (c *config) t5(s *Spec) error {
	vocab, dff, layers, heads, proj, tied := int64(32128), int64(2048), int64(6), int64(8), "relu", true
	if s.Family == "mt5" {
		vocab, dff, layers, heads, proj, tied = 250112, 1024, 8, 6, "gated-gelu", false
	}
	var e errs
	s.Vocab = e.i(c.posv(vocab, "vocab_size"))
	s.Hidden = e.i(c.posv(512, "d_model", "hidden_size"))
	s.HeadDim = e.i(c.posv(64, "d_kv"))
	s.Intermediate = e.i(c.posv(dff, "d_ff"))
	enc := e.i(c.posv(layers, "num_layers", "num_hidden_layers"))
	s.Layers = e.i(c.posv(enc, "num_decoder_layers"))
	s.Heads = e.i(c.posv(heads, "num_heads", "num_attention_heads"))
	s.KVHeads = s.Heads
	s.RelativeBuckets = e.i(c.posv(32, "relative_attention_num_buckets"))
	ff := e.s(c.str("feed_forward_proj", proj))
	s.Gated = strings.HasPrefix(ff, "gated-")
	s.TiedEmbeddings = e.b(c.boolv(tied, "tie_word_embeddings"))
	s.Norm = RMSNorm
	if e.err != nil {
		return e.err
	}
	archs, err := c.architectures()
	if err != nil {
		return err
	}
	for _, a := range archs {
		if strings.HasSuffix(a, "EncoderModel") { // T5EncoderModel, MT5EncoderModel
			s.EncoderOnly = true
			s.Layers = enc
			s.TiedEmbeddings = true // no head
			return nil
		}
	}
	s.Encoder = &Spec{Family: s.Family, DType: s.DType, Layers: enc, Hidden: s.Hidden, Heads: s.Heads,
		KVHeads: s.Heads, HeadDim: s.HeadDim, Intermediate: s.Intermediate}
	return nil
}

// whisper reads WhisperConfig: separate encoder/decoder layers, heads
// and FFN sizes, d_model, mel bins and the two position tables.
func (c *config) whisper(s *Spec) error {
	var e errs
	s.Vocab = e.i(c.posv(51865, "vocab_size"))
	s.Hidden = e.i(c.posv(384, "d_model", "hidden_size"))
	s.MelBins = e.i(c.posv(80, "num_mel_bins"))
	s.Layers = e.i(c.posv(4, "decoder_layers"))
	s.Heads = e.i(c.posv(6, "decoder_attention_heads"))
	s.KVHeads = s.Heads
	s.Intermediate = e.i(c.posv(1536, "decoder_ffn_dim"))
	s.Positions = e.i(c.posv(448, "max_target_positions"))
	s.MaxPositions = s.Positions
	s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
	s.Norm = LayerNorm
	enc := &Spec{Family: s.Family, DType: s.DType, Hidden: s.Hidden}
	enc.Layers = e.i(c.posv(4, "encoder_layers"))
	enc.Heads = e.i(c.posv(6, "encoder_attention_heads", "num_attention_heads"))
	enc.KVHeads = enc.Heads
	enc.Intermediate = e.i(c.posv(1536, "encoder_ffn_dim"))
	enc.Positions = e.i(c.posv(1500, "max_source_positions"))
	enc.MaxPositions = enc.Positions
	enc.Norm = LayerNorm
	if e.err != nil {
		return e.err
	}
	s.HeadDim = headDim(s.Hidden, s.Heads)
	enc.HeadDim = headDim(s.Hidden, enc.Heads)
	if s.HeadDim == 0 || s.Hidden%s.Heads != 0 {
		return gpumem.Errorf(c.field("decoder_attention_heads"), s.Heads, gpumem.ErrInvalid, "does not divide d_model = %d", s.Hidden)
	}
	if enc.HeadDim == 0 || s.Hidden%enc.Heads != 0 {
		return gpumem.Errorf(c.field("encoder_attention_heads"), enc.Heads, gpumem.ErrInvalid, "does not divide d_model = %d", s.Hidden)
	}
	s.Encoder = enc
	return nil
}

// cogvideox reads the diffusers config of CogVideoXTransformer3DModel
// (register_to_config defaults of cogvideox_transformer_3d.py).
func (c *config) cogvideox(s *Spec) error {
	var e errs
	s.Heads = e.i(c.posv(30, "num_attention_heads"))
	s.HeadDim = e.i(c.posv(64, "attention_head_dim"))
	s.KVHeads = s.Heads
	s.Layers = e.i(c.posv(30, "num_layers"))
	s.Image.Channels = e.i(c.posv(16, "in_channels"))
	s.DiT.OutChannels = e.i(c.posv(16, "out_channels"))
	s.DiT.TimeEmbed = e.i(c.posv(512, "time_embed_dim"))
	s.DiT.OfsEmbed = e.i(c.intv(0, "ofs_embed_dim"))
	s.DiT.TextEmbed = e.i(c.posv(4096, "text_embed_dim"))
	s.Image.Patch = e.i(c.posv(2, "patch_size"))
	s.DiT.PatchT = e.i(c.intv(0, "patch_size_t"))
	s.DiT.MaxText = e.i(c.intv(226, "max_text_seq_length"))
	s.DiT.Frames = e.i(c.intv(49, "sample_frames"))
	s.DiT.Height = e.i(c.intv(60, "sample_height"))
	s.DiT.Width = e.i(c.intv(90, "sample_width"))
	s.DiT.TemporalCompression = e.i(c.intv(4, "temporal_compression_ratio"))
	s.Bias.QKV = e.b(c.boolv(true, "attention_bias"))
	s.DiT.NoPatchBias = !e.b(c.boolv(true, "patch_bias"))
	if e.b(c.boolv(false, "use_learned_positional_embeddings")) {
		e.err = gpumem.Errorf(c.field("use_learned_positional_embeddings"), true, gpumem.ErrUnsupported, "no CogVideoX checkpoint uses learned positions")
	}
	if !e.b(c.boolv(true, "norm_elementwise_affine")) {
		e.err = gpumem.Errorf(c.field("norm_elementwise_affine"), false, gpumem.ErrUnsupported, "norms without affine parameters are not modelled")
	}
	s.Hidden = e.i(mulField(c.field("attention_head_dim"), s.Heads, s.HeadDim))
	s.Intermediate = 4 * s.Hidden // FeedForward(inner_dim=None) = 4·dim
	s.Norm = LayerNorm
	return e.err
}

// encoder reads ViTConfig, CLIPVisionConfig, SiglipVisionConfig and
// CLIPTextConfig.
func (c *config) encoder(s *Spec) error {
	type def struct{ hidden, inter, layers, heads, image, patch int64 }
	d := map[string]def{
		"vit":                 {768, 3072, 12, 12, 224, 16},
		"clip_vision_model":   {768, 3072, 12, 12, 224, 32},
		"siglip_vision_model": {768, 3072, 12, 12, 224, 16},
		"clip_text_model":     {512, 2048, 12, 8, 0, 0},
	}[s.Family]
	var e errs
	s.Hidden = e.i(c.posv(d.hidden, "hidden_size"))
	s.Intermediate = e.i(c.posv(d.inter, "intermediate_size"))
	s.Layers = e.i(c.posv(d.layers, "num_hidden_layers"))
	s.Heads = e.i(c.posv(d.heads, "num_attention_heads"))
	s.KVHeads = s.Heads
	s.Norm = LayerNorm
	if e.err != nil {
		return e.err
	}
	s.HeadDim = headDim(s.Hidden, s.Heads)
	if s.Hidden%s.Heads != 0 {
		return gpumem.Errorf(c.field("num_attention_heads"), s.Heads, gpumem.ErrInvalid, "does not divide hidden_size = %d", s.Hidden)
	}
	if s.Family == "clip_text_model" {
		// CLIPTextModelWithProjection (SDXL's second text encoder) adds
		// text_projection, a bias-free Linear to projection_dim
		// (transformers modeling_clip.py).
		archs, err := c.architectures()
		if err != nil {
			return err
		}
		if slices.Contains(archs, "CLIPTextModelWithProjection") {
			s.ProjectionDim = e.i(c.posv(512, "projection_dim"))
		}
		s.Vocab = e.i(c.posv(49408, "vocab_size"))
		s.Positions = e.i(c.posv(77, "max_position_embeddings"))
		s.MaxPositions = s.Positions
		return e.err
	}
	s.Image.Size = e.i(c.posv(d.image, "image_size"))
	s.Image.Patch = e.i(c.posv(d.patch, "patch_size"))
	s.Image.Channels = e.i(c.posv(3, "num_channels"))
	switch s.Family {
	case "vit":
		s.Bias.QKV = e.b(c.boolv(true, "qkv_bias"))
		s.ClassToken = true
		s.Pooler = true // ViTModel(add_pooling_layer=True)
	case "clip_vision_model":
		s.ClassToken = true
	case "siglip_vision_model":
		s.Pooler = e.b(c.boolv(true, "vision_use_head"))
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

// llava reads LlavaConfig: vision_config (default CLIPVisionConfig of
// llava-1.5: 1024 hidden, 24 layers, 336 px, patch 14), text_config
// (default LlamaConfig), and a 2-layer GELU projector.
func (c *config) llava(s Spec) (Spec, error) {
	vc, _, err := c.sub("vision_config")
	if err != nil {
		return Spec{}, err
	}
	vd := map[string]any{"model_type": "clip_vision_model", "hidden_size": json.Number("1024"),
		"intermediate_size": json.Number("4096"), "num_hidden_layers": json.Number("24"),
		"num_attention_heads": json.Number("16"), "image_size": json.Number("336"), "patch_size": json.Number("14")}
	for k, v := range vc.m {
		vd[k] = v
	}
	vc.m = vd
	v, err := vc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	tc, _, err := c.sub("text_config")
	if err != nil {
		return Spec{}, err
	}
	if _, has := tc.m["model_type"]; !has {
		tc.m = maps(tc.m, "model_type", "llama")
	}
	t, err := tc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	act, err := c.str("projector_hidden_act", "gelu")
	if err != nil {
		return Spec{}, err
	}
	_ = act
	s.Vision, s.Text = &v, &t
	s.ProjectorLayers = 2
	bias, err := c.boolv(true, "multimodal_projector_bias")
	if err != nil {
		return Spec{}, err
	}
	if !bias {
		return Spec{}, gpumem.Errorf(c.field("multimodal_projector_bias"), false, gpumem.ErrUnsupported, "projector without bias is not modelled")
	}
	return s, nil
}

// clip reads CLIPConfig (text_config + vision_config + projection_dim)
// and, for siglip, SiglipConfig read as its vision tower.
func (c *config) clip(s Spec) (Spec, error) {
	vc, _, err := c.sub("vision_config")
	if err != nil {
		return Spec{}, err
	}
	tc, _, err := c.sub("text_config")
	if err != nil {
		return Spec{}, err
	}
	if s.Family == "siglip" {
		if _, has := vc.m["model_type"]; !has {
			vc.m = maps(vc.m, "model_type", "siglip_vision_model")
		}
		return vc.spec(s.DType)
	}
	if _, has := vc.m["model_type"]; !has {
		vc.m = maps(vc.m, "model_type", "clip_vision_model")
	}
	if _, has := tc.m["model_type"]; !has {
		tc.m = maps(tc.m, "model_type", "clip_text_model")
	}
	v, err := vc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	t, err := tc.spec(s.DType)
	if err != nil {
		return Spec{}, err
	}
	s.Vision, s.Text = &v, &t
	s.ProjectionDim, err = c.posv(512, "projection_dim")
	if err != nil {
		return Spec{}, err
	}
	return s, nil
}
