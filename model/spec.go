package model

import (
	"strconv"

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
