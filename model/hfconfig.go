package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
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
