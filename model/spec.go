package model

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Norm is the kind of normalization layer a family uses; it decides
// whether a norm carries a bias vector.
type Norm uint8

const (
	// RMSNorm has one weight vector (llama, mistral, qwen, gemma, t5).
	RMSNorm Norm = iota + 1
	// LayerNorm has a weight and a bias vector (gpt2, bert, opt, whisper,
	// vit, clip, phi, falcon, gpt_neox).
	LayerNorm
)

// String returns "rmsnorm" or "layernorm".
func (n Norm) String() string {
	switch n {
	case RMSNorm:
		return "rmsnorm"
	case LayerNorm:
		return "layernorm"
	}
	return "Norm(" + strconv.Itoa(int(n)) + ")"
}

// Bias says which linear layers of a decoder carry a bias vector. Each
// family's layout fixes most of them; the flags matter for the
// llama-style layout, where configs switch them (llama attention_bias and
// mlp_bias, qwen2's fixed q/k/v biases).
type Bias struct {
	QKV    bool // q, k and v projections (qwen2: true)
	Out    bool // attention output projection (llama attention_bias: with QKV)
	MLP    bool // feed-forward projections (llama mlp_bias)
	LMHead bool // output head (phi: true)
}

// MoE describes mixture-of-experts feed-forward layers. The zero value
// means a dense model.
type MoE struct {
	// Experts is the number of routed experts per MoE layer
	// (mixtral num_local_experts, deepseek n_routed_experts,
	// qwen2_moe num_experts).
	Experts int64
	// Active is the number of routed experts per token
	// (num_experts_per_tok).
	Active int64
	// Intermediate is the inner size of one routed expert
	// (moe_intermediate_size); mixtral's experts use the model's
	// Intermediate, which FromHFConfig copies here.
	Intermediate int64
	// Shared is the number of shared experts (deepseek n_shared_experts:
	// one MLP of Shared×Intermediate; qwen2_moe: 1 when
	// shared_expert_intermediate_size is set).
	Shared int64
	// SharedIntermediate is the inner size of the shared-expert MLP
	// (qwen2_moe shared_expert_intermediate_size; deepseek
	// n_shared_experts×moe_intermediate_size).
	SharedIntermediate int64
	// DenseFirst is the number of leading layers with a dense MLP of the
	// model's Intermediate size (deepseek first_k_dense_replace).
	DenseFirst int64
	// Step makes every Step-th layer an MoE layer (qwen2_moe
	// decoder_sparse_step, deepseek moe_layer_freq). Zero means 1.
	Step int64
}

// MLA describes DeepSeek's multi-head latent attention. The zero value
// means ordinary multi-head attention.
type MLA struct {
	QLoRARank     int64 // q_lora_rank; 0 means a full q_proj (DeepSeek-V2-Lite)
	KVLoRARank    int64 // kv_lora_rank (512 in V2/V3)
	QKNopeHeadDim int64 // qk_nope_head_dim (128)
	QKRopeHeadDim int64 // qk_rope_head_dim (64)
	VHeadDim      int64 // v_head_dim (128)
}

// Enabled reports whether m describes MLA attention.
func (m MLA) Enabled() bool { return m.KVLoRARank > 0 }

// Image is the input geometry of a ViT-style encoder.
type Image struct {
	Size     int64 // image_size in pixels (square)
	Patch    int64 // patch_size in pixels
	Channels int64 // num_channels (3)
	// Temporal is the frames per patch of a video-capable patch
	// embedding (Qwen2-VL temporal_patch_size: 2); 0 means 1.
	Temporal int64
	// Merge is the side of the patch square a patch merger folds into
	// one token (Qwen2-VL spatial_merge_size: 2); 0 means none.
	Merge int64
}

// Patches returns the number of patches per image, (Size/Patch)², as
// Hugging Face ViT, CLIP and SigLIP compute it (integer division).
func (im Image) Patches() int64 {
	if im.Patch <= 0 {
		return 0
	}
	n := im.Size / im.Patch
	p, _ := checked.Mul(n, n)
	return p
}

// Quantization is a checkpoint's declared quantization_config.
type Quantization struct {
	// Method is quant_method: "fp8", "bitsandbytes", "gptq", "awq", ...
	Method string
	// DType is the storage of the quantized weights when the config
	// says: FP8E4M3/FP8E5M2 (fp8 fmt), NF4/FP4 (bnb_4bit_quant_type),
	// INT8 (load_in_8bit), INT4 (gptq/awq bits 4), MXFP4 (mxfp4: the
	// gpt-oss experts); Invalid otherwise
	// (omitted from JSON, where Invalid has no name).
	DType gpumem.DType `json:",omitempty"`
	// Block is fp8's weight_block_size (rows, columns); zero: per tensor.
	Block [2]int64
	// Group is gptq/awq group_size (0: none or per channel).
	Group int64
	// Nested is bitsandbytes' bnb_4bit_use_double_quant.
	Nested bool
}

// DiT describes the conditioning and latent input of a diffusion
// transformer (diffusers CogVideoXTransformer3DModel). The zero value
// means not a diffusion transformer.
type DiT struct {
	TimeEmbed   int64 // time_embed_dim
	TextEmbed   int64 // text_embed_dim, the text encoder's width
	OfsEmbed    int64 // ofs_embed_dim (CogVideoX 1.5 I2V); 0: none
	OutChannels int64 // out_channels
	PatchT      int64 // patch_size_t (CogVideoX 1.5); 0: 2-D patches
	MaxText     int64 // max_text_seq_length
	Frames      int64 // sample_frames
	Height      int64 // sample_height (latent pixels)
	Width       int64 // sample_width (latent pixels)
	// TemporalCompression is temporal_compression_ratio.
	TemporalCompression int64
	// NoPatchBias drops the patch embedding's bias (patch_bias false).
	NoPatchBias bool
	// SingleLayers is Flux's num_single_layers (single-stream blocks
	// after the Layers double-stream ones).
	SingleLayers int64
	// PooledDim is Flux's pooled_projection_dim (the CLIP pooled text
	// embedding); Guidance its guidance_embeds (FLUX.1-dev's distilled
	// guidance embedder).
	PooledDim int64
	Guidance  bool
}

// Spec is a model architecture in the terms that decide its memory: the
// shape of every parameter tensor, the attention geometry that sizes the
// KV cache, and the parts of a composite model.
//
// For a decoder-only model the top-level fields describe the whole model.
// An encoder–decoder (t5, whisper) describes the decoder at the top level
// and the encoder in Encoder. A vision encoder (vit, clip_vision_model,
// siglip_vision_model) describes its transformer at the top level and its
// input in Image. A multimodal model (llava, clip) has Vision and Text
// parts and a Projector; [Spec.LM] returns its language model.
//
// The zero value is not a valid Spec; build one with [FromHFConfig],
// [FromSafetensors], [FromGGUF] or [Lookup], or fill the fields and call
// [Spec.Validate].
type Spec struct {
	// Name is the model's name when known (catalog key, or the config's
	// _name_or_path); it is informational.
	Name string
	// Family is the Hugging Face model_type ("llama", "t5", "llava").
	Family string
	// Generic is true when Family is not a known model_type and the
	// model was read as a llama-style decoder from the standard keys.
	Generic bool
	// DType is the storage type of the weights (config "dtype" or
	// "torch_dtype"; FP32 when absent, transformers' default).
	DType gpumem.DType

	Layers       int64 // transformer blocks (decoder blocks for encoder–decoders)
	Hidden       int64 // model width (hidden_size, n_embd, d_model)
	Intermediate int64 // feed-forward inner size of dense layers
	Heads        int64 // query heads
	KVHeads      int64 // key/value heads (GQA/MQA); equals Heads for MHA
	HeadDim      int64 // per-head size; heads×HeadDim may differ from Hidden (gemma, t5 d_kv)
	Vocab        int64 // vocabulary rows of the embedding (0 for vision encoders)

	// TiedEmbeddings shares the output head with the input embedding,
	// so the head adds no parameters.
	TiedEmbeddings bool
	// Norm is the normalization kind (decides norm biases).
	Norm Norm
	// Gated is a gated feed-forward with three matrices (SwiGLU, GeGLU,
	// T5 gated-gelu) instead of two.
	Gated bool
	// Activation is the feed-forward activation where a family's config
	// chooses it (GPT-2's activation_function): "gelu_new" (written in
	// Python ops), "gelu" and "gelu_pytorch_tanh" (one fused kernel),
	// "relu" or "quick_gelu". Empty means the family's default. It
	// changes what the MLP saves for backward, not the parameters.
	Activation string
	// Bias says which linear layers carry biases, where the family's
	// layout leaves it open.
	Bias Bias
	// QKNorm adds per-head RMSNorm on queries and keys (qwen3, gemma3).
	QKNorm bool
	// SandwichNorm adds norms after attention and around the MLP
	// (gemma2, gemma3: four norms per layer).
	SandwichNorm bool

	// Positions is the number of rows of a learned absolute position
	// table (gpt2 n_positions, bert max_position_embeddings, opt
	// max_position_embeddings+2, whisper max_target_positions); 0 for
	// rotary or relative positions.
	Positions int64
	// TypeVocab is BERT's token-type vocabulary (type_vocab_size).
	TypeVocab int64
	// RelativeBuckets is T5's relative_attention_num_buckets.
	RelativeBuckets int64
	// EmbedDim is OPT's word_embed_proj_dim when it differs from Hidden
	// (opt-350m: 512 with project_in/project_out); 0 otherwise.
	EmbedDim int64
	// NoFinalNorm drops OPT's final LayerNorm (do_layer_norm_before
	// false, as opt-350m, or _remove_final_layer_norm).
	NoFinalNorm bool
	// Pooler adds the pooler dense layer of BertModel / ViTModel.
	// Head, when set, decides it instead: BertForSequenceClassification
	// keeps it, the other BERT, RoBERTa and ViT heads drop it
	// (add_pooling_layer=False).
	Pooler bool
	// Head is the task head (zero: the family's default; see [Head]),
	// read from the config's "architectures".
	Head Head
	// Labels is the classifier's num_labels for HeadSeqCls, HeadTokenCls
	// and HeadImageCls (config num_labels, or the length of id2label);
	// zero means transformers' default of 2.
	Labels int64
	// ParallelNorms is Falcon's count of layer norms in a parallel block
	// (1 for falcon-7b, 2 for new_decoder_architecture).
	ParallelNorms int64

	// SlidingWindow is the attention window in tokens (0: full
	// attention everywhere).
	SlidingWindow int64
	// LayerTypes lists each layer's attention ("full_attention",
	// "sliding_attention") when the config gives it or a pattern
	// implies it (gemma2 alternation, gemma3 sliding_window_pattern,
	// qwen2 max_window_layers); nil means all layers use the same
	// attention: sliding when SlidingWindow > 0 (mistral), else full.
	LayerTypes []string
	// MaxPositions is the context length the model was configured for
	// (max_position_embeddings); it sizes nothing by itself.
	MaxPositions int64

	MoE MoE // mixture of experts (zero: dense)
	MLA MLA // latent attention (zero: ordinary)

	// Encoder is the encoder half of an encoder–decoder model (t5,
	// whisper): its Layers, Heads, Intermediate and Positions.
	Encoder *Spec
	// EncoderOnly is a T5 encoder without its decoder (T5EncoderModel, the
	// text encoder of many diffusion models): Layers counts encoder
	// blocks and Encoder is nil.
	EncoderOnly bool
	// MelBins is whisper's num_mel_bins (the encoder's conv stem input).
	MelBins int64

	// Image is the input geometry of a vision encoder.
	Image Image
	// ClassToken adds a learned class embedding (vit, clip); siglip has
	// none.
	ClassToken bool
	// ProjectionDim is CLIP's projection_dim (text and visual
	// projections of a full clip model).
	ProjectionDim int64

	// DiT holds a diffusion transformer's conditioning sizes (cogvideox).
	DiT DiT
	// SSM is a Mamba model's selective state-space mixer (family
	// "mamba").
	SSM SSM
	// UNet is the architecture of a diffusers UNet2DConditionModel
	// (Family FamilyUNet) or AutoencoderKL (FamilyVAE); nil otherwise.
	UNet *UNet
	// Zamba holds a Zamba or Zamba2 model's shared blocks (Family
	// FamilyZamba, FamilyZamba2); nil otherwise. Its Mamba layers are
	// in SSM, the hybrid ones named in LayerTypes.
	Zamba *Zamba

	// Backbone holds the stages of a hierarchical vision backbone
	// (resnet, convnext, swin); see vision_cnn.go.
	Backbone *Backbone

	// Vision is the vision tower of a multimodal model.
	Vision *Spec
	// Text is the language model of a multimodal model.
	Text *Spec
	// ProjectorLayers is the number of linear layers of llava's
	// multi-modal projector (2 for "gelu" mlp2x).
	ProjectorLayers int64

	// Quantization is the config's quantization_config as declared
	// (zero: none). It does not change Tensors; apply it with
	// [Finetune.Quant], or read the exact stored dtypes from the
	// checkpoint's header.
	Quantization Quantization

	// Inventory is the exact tensor list read from a checkpoint
	// (safetensors, GGUF). When set, [Spec.Tensors] returns it instead of
	// deriving tensors from the fields above.
	Inventory []gpumem.Tensor
}

// LM returns the language model of s: s.Text for a multimodal model,
// otherwise s itself.
func (s Spec) LM() Spec {
	if s.Text != nil {
		return *s.Text
	}
	return s
}

// maxTensors bounds the inventory a Spec may describe, so that a config
// with 10^9 layers or experts fails validation instead of exhausting
// memory. DeepSeek-V3 has about 92,000 checkpoint tensors.
const maxTensors = 1 << 20

// maxDim bounds every size field; no real model comes near it and it keeps
// every product of two fields far from overflow checks' edge.
const maxDim = 1 << 40

// maxLayers bounds the layers of one stack; the deepest published models
// have a few hundred.
const maxLayers = 1 << 16

// Validate reports the first field of s that makes it unusable, as a
// *gpumem.FieldError naming the field ("Spec.KVHeads") and value. A nil
// error guarantees that Tensors and Params succeed, and Bytes,
// WeightsBytes and Groups too unless the total bytes exceed int64.
func (s Spec) Validate() error {
	return s.validate("Spec")
}

func (s Spec) validate(path string) error {
	if err := s.validateFields(path); err != nil {
		return err
	}
	if s.Inventory != nil {
		return nil
	}
	return s.checkCount(path)
}

// validateFields checks every field but the total tensor count, which
// checkCount bounds by building the inventory in counting mode.
func (s Spec) validateFields(path string) error {
	if s.Inventory != nil {
		var total int64
		for i, t := range s.Inventory {
			n, err := t.Elems()
			if err != nil {
				return err
			}
			if !t.DType.Valid() {
				return gpumem.Errorf(path+".Inventory["+strconv.Itoa(i)+"].DType", t.DType, gpumem.ErrInvalid, "not a storage format")
			}
			if _, err := t.Bytes(); err != nil {
				return err
			}
			var ok bool
			if total, ok = checked.Add(total, n); !ok {
				return gpumem.Errorf(path+".Inventory", len(s.Inventory), gpumem.ErrRange, "parameter count overflows int64")
			}
		}
		return nil
	}
	if s.Family == "" {
		return gpumem.Errorf(path+".Family", s.Family, gpumem.ErrInvalid, "empty model family")
	}
	switch s.Activation {
	case "", "gelu_new", "gelu", "gelu_pytorch_tanh", "relu", "quick_gelu":
	default:
		return gpumem.Errorf(path+".Activation", s.Activation, gpumem.ErrUnsupported, "want gelu_new, gelu, gelu_pytorch_tanh, relu or quick_gelu")
	}
	if !s.DType.Valid() {
		return gpumem.Errorf(path+".DType", s.DType, gpumem.ErrInvalid, "not a storage format")
	}
	if s.Head >= numHeads {
		return gpumem.Errorf(path+".Head", s.Head, gpumem.ErrInvalid, "unknown head")
	}
	if !s.headSupported(s.Head) {
		return gpumem.Errorf(path+".Head", s.Head.String(), gpumem.ErrUnsupported, "%s has no %s head modelled", s.Family, s.Head)
	}
	if s.Labels < 0 || s.Labels > 1<<24 {
		return gpumem.Errorf(path+".Labels", s.Labels, gpumem.ErrInvalid, "must be in [0, 2^24]")
	}
	l := layoutOf(&s)
	if l == layoutBackbone {
		return s.validateBackbone(path)
	}
	if l == layoutMultimodal {
		if s.Vision == nil {
			return gpumem.Errorf(path+".Vision", nil, gpumem.ErrInvalid, "%s needs a vision tower", s.Family)
		}
		if s.Text == nil {
			return gpumem.Errorf(path+".Text", nil, gpumem.ErrInvalid, "%s needs a language model", s.Family)
		}
		if err := s.Vision.validate(path + ".Vision"); err != nil {
			return err
		}
		if err := s.Text.validate(path + ".Text"); err != nil {
			return err
		}
		if s.Family == "llava" && (s.ProjectorLayers < 1 || s.ProjectorLayers > 16) {
			return gpumem.Errorf(path+".ProjectorLayers", s.ProjectorLayers, gpumem.ErrInvalid, "must be in [1, 16]")
		}
		if s.Family == "clip" && s.ProjectionDim <= 0 {
			return gpumem.Errorf(path+".ProjectionDim", s.ProjectionDim, gpumem.ErrInvalid, "must be positive")
		}
		return nil
	}
	if l == layoutUNet || l == layoutVAE {
		return s.validateUNet(path)
	}
	if l == layoutMamba {
		return s.validateMamba(path)
	}
	if l == layoutMamba2 {
		return s.validateMamba2(path)
	}
	if l == layoutJamba {
		return s.validateJamba(path)
	}
	if l == layoutZamba {
		return s.validateZamba(path)
	}
	pos := func(name string, v int64) error {
		if v <= 0 {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrInvalid, "must be positive")
		}
		if v > maxDim {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrRange, "exceeds 2^40")
		}
		return nil
	}
	nonneg := func(name string, v int64) error {
		if v < 0 {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrInvalid, "must not be negative")
		}
		if v > maxDim {
			return gpumem.Errorf(path+"."+name, v, gpumem.ErrRange, "exceeds 2^40")
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Layers", s.Layers}, {"Hidden", s.Hidden}, {"Heads", s.Heads}, {"KVHeads", s.KVHeads}, {"HeadDim", s.HeadDim}} {
		if err := pos(f.name, f.v); err != nil {
			return err
		}
	}
	if s.Layers > maxLayers {
		return gpumem.Errorf(path+".Layers", s.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
	}
	if s.KVHeads > s.Heads {
		return gpumem.Errorf(path+".KVHeads", s.KVHeads, gpumem.ErrInvalid, "more KV heads than the %d query heads", s.Heads)
	}
	if s.Heads%s.KVHeads != 0 {
		return gpumem.Errorf(path+".KVHeads", s.KVHeads, gpumem.ErrInvalid, "does not divide the %d query heads", s.Heads)
	}
	needsFFN := !(s.MoE.Experts > 0 && s.MoE.DenseFirst == 0 && s.MoE.Step <= 1)
	if needsFFN || s.Family == "mixtral" {
		if err := pos("Intermediate", s.Intermediate); err != nil {
			return err
		}
	} else if err := nonneg("Intermediate", s.Intermediate); err != nil {
		return err
	}
	if l.hasVocab() {
		if err := pos("Vocab", s.Vocab); err != nil {
			return err
		}
	} else if err := nonneg("Vocab", s.Vocab); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Positions", s.Positions}, {"TypeVocab", s.TypeVocab}, {"RelativeBuckets", s.RelativeBuckets},
		{"EmbedDim", s.EmbedDim}, {"SlidingWindow", s.SlidingWindow}, {"MaxPositions", s.MaxPositions},
		{"MelBins", s.MelBins}, {"ProjectionDim", s.ProjectionDim}, {"ParallelNorms", s.ParallelNorms},
		{"MoE.Experts", s.MoE.Experts}, {"MoE.Active", s.MoE.Active}, {"MoE.Intermediate", s.MoE.Intermediate},
		{"MoE.Shared", s.MoE.Shared}, {"MoE.SharedIntermediate", s.MoE.SharedIntermediate},
		{"MoE.DenseFirst", s.MoE.DenseFirst}, {"MoE.Step", s.MoE.Step},
		{"MLA.QLoRARank", s.MLA.QLoRARank}, {"MLA.KVLoRARank", s.MLA.KVLoRARank},
		{"MLA.QKNopeHeadDim", s.MLA.QKNopeHeadDim}, {"MLA.QKRopeHeadDim", s.MLA.QKRopeHeadDim},
		{"MLA.VHeadDim", s.MLA.VHeadDim}, {"Image.Size", s.Image.Size}, {"Image.Patch", s.Image.Patch},
		{"Image.Channels", s.Image.Channels}} {
		if err := nonneg(f.name, f.v); err != nil {
			return err
		}
	}
	if s.MoE.Experts > 0 {
		if s.MoE.Active <= 0 || s.MoE.Active > s.MoE.Experts {
			return gpumem.Errorf(path+".MoE.Active", s.MoE.Active, gpumem.ErrInvalid, "must be in [1, %d experts]", s.MoE.Experts)
		}
		if err := pos("MoE.Intermediate", s.MoE.Intermediate); err != nil {
			return err
		}
		if s.MoE.Shared > 0 && s.MoE.SharedIntermediate <= 0 {
			return gpumem.Errorf(path+".MoE.SharedIntermediate", s.MoE.SharedIntermediate, gpumem.ErrInvalid, "must be positive with %d shared experts", s.MoE.Shared)
		}
	}
	if s.MLA.Enabled() {
		if s.MLA.QKNopeHeadDim+s.MLA.QKRopeHeadDim <= 0 {
			return gpumem.Errorf(path+".MLA.QKNopeHeadDim", s.MLA.QKNopeHeadDim, gpumem.ErrInvalid, "query/key head size must be positive")
		}
		if err := pos("MLA.VHeadDim", s.MLA.VHeadDim); err != nil {
			return err
		}
	}
	// Products of two fields size projections; bound them so that the
	// layouts' sums of a few such products cannot overflow.
	ps := max(s.Image.Patch, 1)
	pt := max(s.DiT.PatchT, 1)
	for _, p := range []struct {
		name string
		xs   []int64
	}{
		{"HeadDim", []int64{s.Heads + 2*s.KVHeads, s.HeadDim}},
		{"MLA.QKNopeHeadDim", []int64{s.Heads, s.MLA.QKNopeHeadDim + max(s.MLA.QKRopeHeadDim, s.MLA.VHeadDim)}},
		{"Image.Patch", []int64{ps, ps, max(s.Image.Channels, s.DiT.OutChannels, 1), pt}},
	} {
		if n, ok := checked.MulAll(p.xs...); !ok || n > maxDim {
			return gpumem.Errorf(path+"."+p.name, p.xs[len(p.xs)-1], gpumem.ErrRange, "projection size %v exceeds 2^40", p.xs)
		}
	}
	if s.LayerTypes != nil && int64(len(s.LayerTypes)) != s.Layers {
		return gpumem.Errorf(path+".LayerTypes", len(s.LayerTypes), gpumem.ErrInvalid, "lists %d layers, want %d", len(s.LayerTypes), s.Layers)
	}
	switch l {
	case layoutVision, layoutCLIPVision, layoutSiglipVision:
		if err := pos("Image.Patch", s.Image.Patch); err != nil {
			return err
		}
		if err := pos("Image.Channels", s.Image.Channels); err != nil {
			return err
		}
		if s.Image.Size < s.Image.Patch {
			return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrInvalid, "smaller than the %d-pixel patch", s.Image.Patch)
		}
		if s.Image.Size > 1<<20 {
			return gpumem.Errorf(path+".Image.Size", s.Image.Size, gpumem.ErrRange, "exceeds 2^20 pixels")
		}
	case layoutT5, layoutWhisper:
		if s.EncoderOnly && l == layoutT5 {
			if s.Encoder != nil {
				return gpumem.Errorf(path+".Encoder", s.Encoder.Layers, gpumem.ErrInvalid, "an encoder-only model has no separate encoder half")
			}
			break
		}
		if s.Encoder == nil {
			return gpumem.Errorf(path+".Encoder", nil, gpumem.ErrInvalid, "%s needs an encoder", s.Family)
		}
		e := *s.Encoder
		for _, f := range []struct {
			name string
			v    int64
		}{{"Encoder.Layers", e.Layers}, {"Encoder.Heads", e.Heads}, {"Encoder.Intermediate", e.Intermediate}} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		if e.Layers > maxLayers {
			return gpumem.Errorf(path+".Encoder.Layers", e.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
		}
		if l == layoutWhisper {
			if err := pos("MelBins", s.MelBins); err != nil {
				return err
			}
			if err := pos("Encoder.Positions", e.Positions); err != nil {
				return err
			}
			if err := pos("Positions", s.Positions); err != nil {
				return err
			}
		}
	case layoutFlux, layoutSD3:
		for _, f := range []struct {
			name string
			v    int64
		}{{"Image.Patch", s.Image.Patch}, {"Image.Channels", s.Image.Channels}, {"DiT.TextEmbed", s.DiT.TextEmbed},
			{"DiT.OutChannels", s.DiT.OutChannels}, {"DiT.PooledDim", s.DiT.PooledDim}} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		if err := nonneg("DiT.SingleLayers", s.DiT.SingleLayers); err != nil {
			return err
		}
		if s.DiT.SingleLayers > maxLayers {
			return gpumem.Errorf(path+".DiT.SingleLayers", s.DiT.SingleLayers, gpumem.ErrRange, "more than %d layers", maxLayers)
		}
	case layoutCogVideoX:
		for _, f := range []struct {
			name string
			v    int64
		}{{"Image.Patch", s.Image.Patch}, {"Image.Channels", s.Image.Channels}, {"DiT.TimeEmbed", s.DiT.TimeEmbed},
			{"DiT.TextEmbed", s.DiT.TextEmbed}, {"DiT.OutChannels", s.DiT.OutChannels}} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			name string
			v    int64
		}{{"DiT.OfsEmbed", s.DiT.OfsEmbed}, {"DiT.PatchT", s.DiT.PatchT}, {"DiT.MaxText", s.DiT.MaxText},
			{"DiT.Frames", s.DiT.Frames}, {"DiT.Height", s.DiT.Height}, {"DiT.Width", s.DiT.Width},
			{"DiT.TemporalCompression", s.DiT.TemporalCompression}} {
			if err := nonneg(f.name, f.v); err != nil {
				return err
			}
		}
	case layoutGPT2, layoutBigCode, layoutOPT, layoutBERT:
		if err := pos("Positions", s.Positions); err != nil {
			return err
		}
	}
	return nil
}

// checkCount bounds the number of tensors and checks that every tensor
// and the total parameter count fit in int64.
func (s Spec) checkCount(path string) error {
	b := builder{count: true, limit: maxTensors}
	s.build(&b)
	if b.err != nil {
		return gpumem.Errorf(path, s.Family, gpumem.ErrRange, "%v", b.err)
	}
	return nil
}

// Tensors returns the parameter inventory of s: every tensor of the
// standard Hugging Face class with its checkpoint name, row-major shape
// and storage type. Tied weights appear once. Buffers that checkpoints
// store (deepseek_v3's e_score_correction_bias) are included; the
// non-persistent ones (rotary tables, causal masks, position ids) are
// not. It returns nil for a Spec that fails [Spec.Validate].
func (s Spec) Tensors() []gpumem.Tensor {
	if s.Validate() != nil {
		return nil
	}
	if s.Inventory != nil {
		out := make([]gpumem.Tensor, len(s.Inventory))
		for i, t := range s.Inventory {
			t.Shape = slices.Clone(t.Shape)
			out[i] = t
		}
		return out
	}
	var b builder
	s.build(&b)
	return b.out
}

// Run is Count tensors of one shape and storage whose names differ only
// in a layer or expert index; Tensor is the first of them (its names
// carry the indices of the first layer of its kind and of expert 0).
// Layers is how many layers of a stack the run spans, 1 outside a stack:
// each of those layers holds Count/Layers of the tensors.
type Run struct {
	Tensor gpumem.Tensor
	Count  int64
	Layers int64
}

// Runs returns [Spec.Tensors] folded into runs: one layer of each kind
// (dense or with experts; T5's first block) and one expert of each
// block, with how many each stands for. Its cost follows the number of
// distinct layer kinds, not the layer count: a 65,536-layer stack of one
// kind is one layer's tensors. An Inventory (a checkpoint's tensor list)
// is not folded: each tensor is a run of 1. It returns nil for a Spec
// that fails [Spec.Validate].
func (s Spec) Runs() []Run {
	if s.Validate() != nil {
		return nil
	}
	if s.Inventory != nil {
		out := make([]Run, len(s.Inventory))
		for i, t := range s.Inventory {
			t.Shape = slices.Clone(t.Shape)
			out[i] = Run{Tensor: t, Count: 1, Layers: 1}
		}
		return out
	}
	b := builder{fold: true}
	s.build(&b)
	return b.runs
}

// Params returns the number of parameters of s: the sum of the element
// counts of [Spec.Tensors]. It returns 0 for a Spec that fails
// [Spec.Validate], which says why. Every parameter count of the module
// takes this shape ([Finetune.Params], [Finetune.TrainableParams],
// [DiffusionPipeline.Params]): a count is asked for again and again of a
// value checked once.
func (s Spec) Params() int64 {
	if s.Inventory != nil {
		if s.Validate() != nil {
			return 0
		}
		var n int64
		for _, t := range s.Inventory {
			e, _ := t.Elems()
			n += e
		}
		return n
	}
	// validate ends by counting (checkCount) only after the field checks
	// pass; count once here with the same limits.
	if err := s.validateFields("Spec"); err != nil {
		return 0
	}
	b := builder{count: true, limit: maxTensors}
	s.build(&b)
	if b.err != nil {
		return 0
	}
	return b.n
}

// ActiveParams returns the parameters one token passes through in a
// mixture-of-experts model: all parameters but the routed experts, plus
// MoE.Active of every MoE.Experts routed experts, the convention of the
// "A3B"/"37B active" figures. It equals Params for a dense model and
// returns 0 for a Spec that fails [Spec.Validate].
func (s Spec) ActiveParams() int64 {
	total := s.Params()
	if total == 0 || s.MoE.Experts <= 0 || s.MoE.Active <= 0 {
		return total
	}
	var routed int64
	for _, t := range s.Tensors() {
		if IsExpert(t.Name) {
			n, _ := t.Elems()
			routed += n
		}
	}
	return total - routed + routed/s.MoE.Experts*s.MoE.Active
}

// Bytes returns the storage of all parameters of s held in d, as
// [gpumem.DType.Size] of the total element count (block formats round
// per tensor, as ggml stores them).
func (s Spec) Bytes(d gpumem.DType) (gpumem.Bytes, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if !d.Valid() {
		return 0, gpumem.Errorf("dtype", d, gpumem.ErrInvalid, "not a storage format")
	}
	var total gpumem.Bytes
	for _, t := range s.Tensors() {
		t.DType = d
		n, err := t.Elems()
		if err != nil {
			return 0, err
		}
		b, err := d.Size(n)
		if err != nil {
			return 0, err
		}
		sum, ok := checked.Add(int64(total), int64(b))
		if !ok {
			return 0, gpumem.Errorf("Spec", s.Family, gpumem.ErrRange, "bytes overflow int64")
		}
		total = gpumem.Bytes(sum)
	}
	return total, nil
}

// WeightsBytes returns the storage of all parameters of s in their own
// dtypes ([Spec.DType], or each checkpoint tensor's dtype).
func (s Spec) WeightsBytes() (gpumem.Bytes, error) {
	m, err := s.BytesByDType()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, b := range m {
		var ok bool
		if total, ok = checked.Add(total, int64(b)); !ok {
			return 0, gpumem.Errorf("Spec", s.Family, gpumem.ErrRange, "bytes overflow int64")
		}
	}
	return gpumem.Bytes(total), nil
}

// BytesByDType returns the storage of s's parameters grouped by their
// storage type.
func (s Spec) BytesByDType() (map[gpumem.DType]gpumem.Bytes, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	m := make(map[gpumem.DType]gpumem.Bytes)
	for _, t := range s.Tensors() {
		b, err := t.Bytes()
		if err != nil {
			return nil, err
		}
		sum, ok := checked.Add(int64(m[t.DType]), int64(b))
		if !ok {
			return nil, gpumem.Errorf("Spec", s.Family, gpumem.ErrRange, "bytes overflow int64")
		}
		m[t.DType] = gpumem.Bytes(sum)
	}
	return m, nil
}

// Group is one component of a model's inventory: the embeddings, one
// transformer layer, the final norm and head, or a part of a composite
// model, so that later estimates can size per-layer and per-stage
// shards.
type Group struct {
	// Part is the sub-model: "" for a single model, "encoder",
	// "decoder", "vision", "projector" or "language".
	Part string
	// Name is "embeddings", "layer", "head" (final norm and output
	// head), or "other".
	Name string
	// Layer is the layer index for Name "layer", -1 otherwise.
	Layer int
	// Params is the number of elements of the group's tensors.
	Params int64
	// Bytes is their storage in their own dtypes.
	Bytes gpumem.Bytes
	// Experts is the number of those parameters in routed experts.
	Experts int64
	// Tensors are the group's tensors, in inventory order.
	Tensors []gpumem.Tensor
}

// Groups partitions [Spec.Tensors] by component, in first-appearance
// order. Grouping is by tensor name, so it works for checkpoint
// inventories too.
func (s Spec) Groups() ([]Group, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var groups []Group
	index := map[string]int{}
	for _, t := range s.Tensors() {
		part, name, layer := Component(t.Name)
		key := part + "/" + name + "/" + strconv.Itoa(layer)
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, Group{Part: part, Name: name, Layer: layer})
		}
		g := &groups[i]
		n, _ := t.Elems()
		b, err := t.Bytes()
		if err != nil {
			return nil, err
		}
		g.Params += n
		g.Bytes += b
		if IsExpert(t.Name) {
			g.Experts += n
		}
		g.Tensors = append(g.Tensors, t)
	}
	return groups, nil
}

// IsExpert reports whether a tensor name belongs to a routed expert
// ("...experts.N...", "...ffn_*_exps..."), not a shared expert or router.
func IsExpert(name string) bool {
	return strings.Contains(name, ".experts.") || strings.Contains(name, "_exps.")
}

// Component classifies a tensor name into a part, a component name and a
// layer index, for [Spec.Groups]: "model.layers.3.mlp.up_proj.weight" is
// ("", "layer", 3); "vision_tower.vision_model.encoder.layers.0..." is
// ("vision", "layer", 0); "lm_head.weight" is ("", "head", -1).
func Component(name string) (part, comp string, layer int) {
	switch {
	case strings.HasPrefix(name, "vision_tower.") || strings.HasPrefix(name, "vision_model.") ||
		strings.HasPrefix(name, "model.vision_tower.") || strings.HasPrefix(name, "visual_projection."):
		part = "vision"
	case strings.HasPrefix(name, "multi_modal_projector.") || strings.HasPrefix(name, "model.multi_modal_projector.") ||
		strings.HasPrefix(name, "visual.merger."):
		part = "projector"
	case strings.HasPrefix(name, "visual."):
		part = "vision" // Qwen2-VL's tower
	case strings.HasPrefix(name, "language_model.") || strings.HasPrefix(name, "model.language_model.") ||
		strings.HasPrefix(name, "text_model.") || strings.HasPrefix(name, "text_projection."):
		part = "language"
	case strings.Contains(name, "encoder."):
		part = "encoder"
	case strings.Contains(name, "decoder."):
		part = "decoder"
	}
	if l, ok := backboneBlock(name); ok {
		return part, "layer", l
	}
	if p, l, ok := diffusersBlock(name); ok {
		// A diffusers UNet's or VAE's resolution blocks: part "down",
		// "mid" or "up" (inside the VAE's encoder or decoder).
		if part == "" {
			part = p
		}
		return part, "layer", l
	}
	if l, ok := layerIndex(name); ok {
		return part, "layer", l
	}
	if part == "projector" {
		return part, "projector", -1
	}
	switch {
	case strings.Contains(name, "embed") || strings.Contains(name, "wte.") || strings.Contains(name, "wpe.") ||
		strings.HasPrefix(name, "shared.") || strings.Contains(name, "conv1.") || strings.Contains(name, "conv2.") ||
		strings.Contains(name, "cls_token") || strings.Contains(name, "class_embedding") ||
		strings.Contains(name, "pre_layrnorm") || strings.HasPrefix(name, "token_embd") || strings.Contains(name, "project_in"):
		return part, "embeddings", -1
	case strings.Contains(name, "lm_head") || strings.Contains(name, "norm") || strings.Contains(name, "ln_f") ||
		strings.Contains(name, "embed_out") || strings.Contains(name, "proj_out") || strings.Contains(name, "pooler") ||
		strings.Contains(name, "output") || strings.Contains(name, "project_out") || strings.Contains(name, "head") ||
		strings.Contains(name, "projection") || strings.Contains(name, "logit_scale") ||
		strings.HasPrefix(name, "classifier"):
		// A classification head (ViTForImageClassification's and the
		// *ForSequenceClassification and *ForTokenClassification
		// classifiers, transformers v4.57.1) runs after the final norm:
		// its backward, and its gradients, come right after the loss's.
		return part, "head", -1
	}
	return part, "other", -1
}

// diffusersBlock finds a diffusers block segment ("down_blocks.N",
// "up_blocks.N", "mid_block") of a tensor name.
func diffusersBlock(name string) (part string, index int, ok bool) {
	prev := ""
	for len(name) > 0 {
		seg, rest, _ := strings.Cut(name, ".")
		switch {
		case seg == "mid_block":
			return "mid", 0, true
		case prev == "down_blocks" || prev == "up_blocks":
			if n, err := strconv.Atoi(seg); err == nil && n >= 0 && len(seg) <= 4 {
				return strings.TrimSuffix(prev, "_blocks"), n, true
			}
		}
		prev, name = seg, rest
	}
	return "", 0, false
}

// layerIndex finds the number after the first "layers", "layer", "h",
// "block", "blk" or "transformer_blocks" segment of a dotted tensor name.
func layerIndex(name string) (int, bool) {
	prev := ""
	for len(name) > 0 {
		seg, rest, _ := strings.Cut(name, ".")
		switch prev {
		case "layers", "layer", "h", "block", "blk", "transformer_blocks", "blocks":
			if len(seg) > 0 && len(seg) <= 9 && strings.Trim(seg, "0123456789") == "" {
				n, err := strconv.Atoi(seg)
				if err == nil {
					return n, true
				}
			}
		}
		prev, name = seg, rest
	}
	return 0, false
}
