package model

// Tensor inventories of encoders and encoder-decoders: BERT, T5 and
// Whisper.

// buildBERT is BertModel / RobertaModel (with the pooler when Pooler) and
// the task classes of modeling_bert.py / modeling_roberta.py: the base
// model (pooler only for BertForSequenceClassification) and the head:
// BertForMaskedLM cls.predictions (transform dense + LayerNorm, the
// decoder tied to the word embeddings, its bias), RobertaForMaskedLM
// lm_head (dense, layer_norm, bias), BertForSequenceClassification
// classifier, RobertaForSequenceClassification classifier.dense and
// classifier.out_proj, *ForTokenClassification classifier,
// *ForQuestionAnswering qa_outputs.
func (s Spec) buildBERT(b *builder) {
	H, I := s.Hidden, s.Intermediate
	p0 := s.Family + "."
	b.addP(p0, "embeddings.word_embeddings.weight", s.Vocab, H)
	b.addP(p0, "embeddings.position_embeddings.weight", s.Positions, H)
	if s.TypeVocab > 0 {
		b.addP(p0, "embeddings.token_type_embeddings.weight", s.TypeVocab, H)
	}
	b.normP(p0, "embeddings.LayerNorm", H, LayerNorm)
	b.stack(s.Layers, nil, func(i int64) {
		p := p0 + "encoder.layer." + itoa(i) + "."
		b.linearP(p, "attention.self.query", s.Heads*s.HeadDim, H, true)
		b.linearP(p, "attention.self.key", s.Heads*s.HeadDim, H, true)
		b.linearP(p, "attention.self.value", s.Heads*s.HeadDim, H, true)
		b.linearP(p, "attention.output.dense", H, s.Heads*s.HeadDim, true)
		b.normP(p, "attention.output.LayerNorm", H, LayerNorm)
		b.linearP(p, "intermediate.dense", I, H, true)
		b.linearP(p, "output.dense", H, I, true)
		b.normP(p, "output.LayerNorm", H, LayerNorm)
	})
	pooler := s.Pooler
	if s.Head != HeadDefault {
		pooler = s.Head == HeadSeqCls && s.Family == "bert"
	}
	if pooler {
		b.linearP(p0, "pooler.dense", H, H, true)
	}
	switch s.Head {
	case HeadMaskedLM:
		q := "cls.predictions."
		if s.Family == "roberta" {
			q = "lm_head."
			b.linear(q+"dense", H, H, true)
			b.norm(q+"layer_norm", H, LayerNorm)
		} else {
			b.linear(q+"transform.dense", H, H, true)
			b.norm(q+"transform.LayerNorm", H, LayerNorm)
		}
		b.add(q+"bias", s.Vocab)
		if !s.TiedEmbeddings {
			b.add(q+"decoder.weight", s.Vocab, H)
		}
	case HeadSeqCls:
		if s.Family == "roberta" {
			b.linear("classifier.dense", H, H, true)
			b.linear("classifier.out_proj", s.labels(), H, true)
		} else {
			b.linear("classifier", s.labels(), H, true)
		}
	case HeadTokenCls:
		b.linear("classifier", s.labels(), H, true)
	case HeadQA:
		b.linear("qa_outputs", 2, H, true)
	}
}

// buildT5 is T5ForConditionalGeneration / MT5ForConditionalGeneration
// (or T5EncoderModel when EncoderOnly):
// shared embedding (the encoder's and decoder's embed_tokens are the same
// parameter), relative attention bias in the first block of each stack
// only, RMS-style T5LayerNorm without bias, relu (wi, wo) or gated-gelu
// (wi_0, wi_1, wo) FFN, lm_head untied for t5 v1.1 and mt5.
func (s Spec) buildT5(b *builder) {
	d, inner, ff := s.Hidden, s.Heads*s.HeadDim, s.Intermediate
	b.add("shared.weight", s.Vocab, d)
	attn := func(p string, rel bool) {
		b.addP(p, "q.weight", inner, d)
		b.addP(p, "k.weight", inner, d)
		b.addP(p, "v.weight", inner, d)
		b.addP(p, "o.weight", d, inner)
		if rel {
			b.addP(p, "relative_attention_bias.weight", s.RelativeBuckets, s.Heads)
		}
	}
	ffn := func(p string) {
		if s.Gated {
			b.addP(p, "DenseReluDense.wi_0.weight", ff, d)
			b.addP(p, "DenseReluDense.wi_1.weight", ff, d)
		} else {
			b.addP(p, "DenseReluDense.wi.weight", ff, d)
		}
		b.addP(p, "DenseReluDense.wo.weight", d, ff)
		b.addP(p, "layer_norm.weight", d)
	}
	encLayers := s.Layers
	if !s.EncoderOnly {
		encLayers = s.Encoder.Layers
	}
	b.stack(encLayers, firstLayer, func(i int64) {
		p := "encoder.block." + itoa(i) + ".layer."
		attn(p+"0.SelfAttention.", i == 0)
		b.addP(p, "0.layer_norm.weight", d)
		ffn(p + "1.")
	})
	b.add("encoder.final_layer_norm.weight", d)
	if s.EncoderOnly {
		return
	}
	b.stack(s.Layers, firstLayer, func(i int64) {
		p := "decoder.block." + itoa(i) + ".layer."
		attn(p+"0.SelfAttention.", i == 0)
		b.addP(p, "0.layer_norm.weight", d)
		attn(p+"1.EncDecAttention.", false)
		b.addP(p, "1.layer_norm.weight", d)
		ffn(p + "2.")
	})
	b.add("decoder.final_layer_norm.weight", d)
	if !s.TiedEmbeddings {
		b.add("lm_head.weight", s.Vocab, d)
	}
}

// buildWhisper is WhisperForConditionalGeneration: conv stem (two
// Conv1d, kernel 3), sinusoidal-initialised but stored position tables,
// k_proj without bias, LayerNorms with bias, proj_out tied to the
// decoder's embed_tokens.
func (s Spec) buildWhisper(b *builder) {
	d := s.Hidden
	e := s.Encoder
	attn := func(p string) {
		b.linearP(p, "k_proj", d, d, false)
		b.linearP(p, "v_proj", d, d, true)
		b.linearP(p, "q_proj", d, d, true)
		b.linearP(p, "out_proj", d, d, true)
	}
	b.add("model.encoder.conv1.weight", d, s.MelBins, 3)
	b.add("model.encoder.conv1.bias", d)
	b.add("model.encoder.conv2.weight", d, d, 3)
	b.add("model.encoder.conv2.bias", d)
	b.add("model.encoder.embed_positions.weight", e.Positions, d)
	b.stack(e.Layers, nil, func(i int64) {
		p := "model.encoder.layers." + itoa(i) + "."
		attn(p + "self_attn.")
		b.normP(p, "self_attn_layer_norm", d, LayerNorm)
		b.linearP(p, "fc1", e.Intermediate, d, true)
		b.linearP(p, "fc2", d, e.Intermediate, true)
		b.normP(p, "final_layer_norm", d, LayerNorm)
	})
	b.norm("model.encoder.layer_norm", d, LayerNorm)
	b.add("model.decoder.embed_tokens.weight", s.Vocab, d)
	b.add("model.decoder.embed_positions.weight", s.Positions, d)
	b.stack(s.Layers, nil, func(i int64) {
		p := "model.decoder.layers." + itoa(i) + "."
		attn(p + "self_attn.")
		b.normP(p, "self_attn_layer_norm", d, LayerNorm)
		attn(p + "encoder_attn.")
		b.normP(p, "encoder_attn_layer_norm", d, LayerNorm)
		b.linearP(p, "fc1", s.Intermediate, d, true)
		b.linearP(p, "fc2", d, s.Intermediate, true)
		b.normP(p, "final_layer_norm", d, LayerNorm)
	})
	b.norm("model.decoder.layer_norm", d, LayerNorm)
	if !s.TiedEmbeddings {
		b.add("proj_out.weight", s.Vocab, d)
	}
}
