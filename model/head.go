package model

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// Head is the task head of a model: the Hugging Face class on top of the
// base model, which decides the output layer's parameters and the size of
// the logits and loss. [FromHFConfig] reads it from the config's
// "architectures" (BertForSequenceClassification is [HeadSeqCls]).
type Head uint8

const (
	// HeadDefault is the family's layout without a named class: a causal
	// LM head for decoders (untied lm_head unless TiedEmbeddings), the base
	// model with its pooler for BERT, RoBERTa and ViT (BertModel,
	// ViTModel), whose activations count BERT's masked-LM head.
	HeadDefault Head = iota
	// HeadCausalLM is *ForCausalLM / GPT2LMHeadModel: logits over the
	// vocabulary at every position.
	HeadCausalLM
	// HeadMaskedLM is BertForMaskedLM / RobertaForMaskedLM: no pooler; a
	// transform (dense, GELU, LayerNorm) and a decoder tied to the word
	// embeddings with its own bias, over every position.
	HeadMaskedLM
	// HeadSeqCls is *ForSequenceClassification: Labels logits per
	// sequence. BERT: pooler then classifier Linear(hidden, labels);
	// RoBERTa: RobertaClassificationHead (dense, out_proj) on the first
	// token, no pooler; decoders: score Linear(hidden, labels, bias=False)
	// at every position, pooled at the last non-pad token.
	HeadSeqCls
	// HeadTokenCls is *ForTokenClassification: classifier
	// Linear(hidden, labels) at every position, no pooler.
	HeadTokenCls
	// HeadImageCls is ViTForImageClassification: classifier
	// Linear(hidden, labels) on the class token after the final
	// LayerNorm, no pooler.
	HeadImageCls
	// HeadQA is *ForQuestionAnswering: qa_outputs Linear(hidden, 2) at
	// every position (start and end logits), no pooler.
	HeadQA

	numHeads
)

var headNames = [numHeads]string{"", "causal-lm", "masked-lm", "seq-cls", "token-cls", "image-cls", "qa"}

// String returns the head's flag name ("seq-cls"), or "default".
func (h Head) String() string {
	switch {
	case h == HeadDefault:
		return "default"
	case h < numHeads:
		return headNames[h]
	}
	return "Head(" + strconv.Itoa(int(h)) + ")"
}

// HeadNames lists the names ParseHead accepts.
func HeadNames() []string { return append([]string(nil), headNames[1:]...) }

// ParseHead reads a head name: causal-lm, masked-lm, seq-cls, token-cls,
// image-cls or qa.
func ParseHead(s string) (Head, error) {
	for i, n := range headNames {
		if i > 0 && strings.EqualFold(s, n) {
			return Head(i), nil
		}
	}
	return 0, gpumem.Errorf("head", s, gpumem.ErrInvalid, "want %s", strings.Join(headNames[1:], ", "))
}

// headOfClass maps a transformers class name to its head by the class's
// suffix; ok is false for a class that names no head (BertModel).
func headOfClass(class string) (Head, bool) {
	for _, c := range []struct {
		suffix string
		h      Head
	}{
		{"ForCausalLM", HeadCausalLM}, {"LMHeadModel", HeadCausalLM}, {"ForMaskedLM", HeadMaskedLM},
		{"ForSequenceClassification", HeadSeqCls}, {"ForTokenClassification", HeadTokenCls},
		{"ForImageClassification", HeadImageCls}, {"ForQuestionAnswering", HeadQA},
	} {
		if strings.HasSuffix(class, c.suffix) {
			return c.h, true
		}
	}
	return HeadDefault, false
}

// headSupported reports whether s's layout has the class of head h.
func (s Spec) headSupported(h Head) bool {
	switch h {
	case HeadDefault:
		return true
	case HeadCausalLM:
		switch layoutOf(&s) {
		case layoutBERT, layoutVision, layoutBackbone, layoutCLIPVision, layoutSiglipVision, layoutCLIPText, layoutCogVideoX, layoutUNet, layoutVAE, layoutFlux, layoutMamba, layoutMamba2, layoutJamba, layoutZamba, layoutSD3, layoutMultimodal, layoutT5, layoutWhisper:
			return false
		}
		return !s.EncoderOnly
	}
	switch layoutOf(&s) {
	case layoutBERT:
		return h == HeadMaskedLM || h == HeadSeqCls || h == HeadTokenCls || h == HeadQA
	case layoutVision, layoutBackbone, layoutCLIPVision, layoutSiglipVision:
		// CLIPForImageClassification and SiglipForImageClassification
		// (transformers v4.57.1): the tower and a classifier.
		return h == HeadImageCls
	case layoutLlama, layoutGPT2:
		return h == HeadSeqCls || h == HeadTokenCls || h == HeadQA
	case layoutOPT:
		return h == HeadSeqCls || h == HeadQA
	}
	return false
}

// labels returns the classifier's outputs: 2 for question answering
// (start, end), else Labels, or transformers' default num_labels 2.
func (s Spec) labels() int64 {
	if s.Head == HeadQA || s.Labels == 0 {
		return 2
	}
	return s.Labels
}

// classHead adds the output layer of a decoder's task head (seq-cls,
// token-cls, qa) over in features: score (no bias) for sequence
// classification, classifier for GPT-2's token classification, score
// with bias for llama's, qa_outputs for question answering; or, for a
// causal LM, the untied lm_head of vocab rows via lm.
func (s Spec) classHead(b *builder, in int64, lm func()) {
	switch s.Head {
	case HeadSeqCls:
		b.linear("score", s.labels(), in, false)
	case HeadTokenCls:
		name := "score" // LlamaForTokenClassification
		if layoutOf(&s) == layoutGPT2 {
			name = "classifier"
		}
		b.linear(name, s.labels(), in, true)
	case HeadQA:
		b.linear("qa_outputs", 2, in, true)
	default:
		lm()
	}
}

// TiedHead reports whether s's output layer reuses its input embedding:
// TiedEmbeddings with a head over the vocabulary (a causal or masked LM
// head, or the family's default); a task head (classification, QA) has
// its own small output layer and ties nothing.
func (s Spec) TiedHead() bool {
	return s.TiedEmbeddings && (s.Head == HeadDefault || s.Head == HeadCausalLM || s.Head == HeadMaskedLM)
}
