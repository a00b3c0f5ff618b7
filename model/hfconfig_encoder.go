package model

// Encoder and encoder-decoder configs: BERT-style encoders, T5 and Whisper.

import (
	"slices"
	"strings"

	"github.com/gpumem/gpumem"
)

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
