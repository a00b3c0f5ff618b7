package model_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

func withHead(t *testing.T, name string, h model.Head, labels int64) model.Spec {
	t.Helper()
	s := mustLookup(t, name)
	s.Head, s.Labels = h, labels
	require.NoError(t, s.Validate())
	return s
}

// TestHeadParams checks the parameter counts of the task classes against
// published counts, and derived by hand where none was found.
func TestHeadParams(t *testing.T) {
	for _, tc := range []struct {
		name   string
		head   model.Head
		labels int64
		want   int64
		source string
	}{
		// BertModel 109,482,240 with its pooler + classifier 768·2+2.
		{"bert-base", model.HeadSeqCls, 2, 109_483_778, "\"JiaqiLee/imdb-finetuned-bert-base-uncased (109,483,778 params)\" (BertForSequenceClassification)"},
		// RobertaModel without pooler 124,055,040 + classifier.dense
		// 768²+768 + out_proj 768·2+2.
		{"roberta-base", model.HeadSeqCls, 2, 124_647_170, "\"aychang/roberta-base-imdb (124,647,170 params)\" (RobertaForSequenceClassification)"},
		// ViTModel without pooler 85,798,656 + classifier 768·1000+1000;
		// the same layout as torchvision's vit_b_16 (conv_proj with bias,
		// class token, 197 positions, heads.head Linear(768, 1000)).
		{"vit-base-patch16-224", model.HeadImageCls, 1000, 86_567_656, "torchvision ViT_B_16_Weights \"num_params\": 86567656"},
		{"vit-large-patch16-224", model.HeadImageCls, 1000, 304_326_632, "torchvision ViT_L_16_Weights \"num_params\": 304326632"},
		// By hand: BertModel without pooler 109,482,240 − 590,592 =
		// 108,891,648; + classifier 768·9+9 = 6,921.
		{"bert-base", model.HeadTokenCls, 9, 108_898_569, "hand: 108,891,648 + 6,921"},
		// + qa_outputs 768·2+2 = 1,538.
		{"bert-base", model.HeadQA, 0, 108_893_186, "hand: 108,891,648 + 1,538"},
		// GPT2LMHeadModel 124,439,808 (tied) + score 768·2, no bias.
		{"gpt2", model.HeadSeqCls, 2, 124_441_344, "hand: 124,439,808 + 1,536"},
		// + classifier 768·5+5 (GPT2ForTokenClassification).
		{"gpt2", model.HeadTokenCls, 5, 124_443_653, "hand: 124,439,808 + 3,845"},
		// OPT-350m 331,196,416 (tied) + score over word_embed_proj_dim 512·3.
		{"opt-350m", model.HeadSeqCls, 3, 331_197_952, "hand: 331,196,416 + 1,536"},
		// + qa_outputs 512·2+2.
		{"opt-350m", model.HeadQA, 0, 331_197_442, "hand: 331,196,416 + 1,026"},
		// Llama-2-7B 6,738,415,616 − untied lm_head 32000·4096 =
		// 6,607,343,616; + score 4096·2, no bias.
		{"llama-2-7b", model.HeadSeqCls, 2, 6_607_351_808, "hand: 6,607,343,616 + 8,192"},
		// + score 4096·3+3 with bias (LlamaForTokenClassification).
		{"llama-2-7b", model.HeadTokenCls, 3, 6_607_355_907, "hand: 6,607,343,616 + 12,291"},
	} {
		t.Run(tc.name+"/"+tc.head.String(), func(t *testing.T) {
			s := withHead(t, tc.name, tc.head, tc.labels)
			require.Equal(t, tc.want, s.Params(), tc.source)
			// The folded inventory stands for the same elements.
			var elems int64
			for _, r := range s.Runs() {
				e, _ := r.Tensor.Elems()
				elems += e * r.Count
			}
			require.Equal(t, tc.want, elems)
			var n int64
			for _, x := range s.Tensors() {
				e, _ := x.Elems()
				n += e
				require.NotContains(t, x.Name, "lm_head")
				if tc.head != model.HeadSeqCls || tc.name != "bert-base" {
					require.NotContains(t, x.Name, "pooler", "only BertForSequenceClassification keeps the pooler")
				}
			}
			require.Equal(t, tc.want, n)
		})
	}
}

// TestHeadFromConfig: "architectures" names the head, num_labels (or
// id2label) its size.
func TestHeadFromConfig(t *testing.T) {
	read := func(js string) (model.Spec, error) { return model.FromHFConfig(strings.NewReader(js)) }
	s, err := read(`{"model_type": "bert", "architectures": ["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b", "2": "c"}}`)
	require.NoError(t, err)
	require.Equal(t, model.HeadSeqCls, s.Head)
	require.EqualValues(t, 3, s.Labels)
	require.EqualValues(t, 109_482_240+768*3+3, s.Params())

	s, err = read(`{"model_type": "vit", "architectures": ["ViTForImageClassification"], "num_labels": 1000, "id2label": {"0": "a"}}`)
	require.NoError(t, err)
	require.Equal(t, model.HeadImageCls, s.Head)
	require.EqualValues(t, 1000, s.Labels) // num_labels wins
	require.EqualValues(t, 86_567_656, s.Params())

	s, err = read(`{"model_type": "vit", "architectures": ["ViTModel"]}`)
	require.NoError(t, err)
	require.Equal(t, model.HeadDefault, s.Head)
	require.EqualValues(t, 86_389_248, s.Params()) // ViTModel with its pooler

	s, err = read(`{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "architectures": ["LlamaForSequenceClassification"]}`)
	require.NoError(t, err)
	require.Equal(t, model.HeadSeqCls, s.Head)
	require.Zero(t, s.Labels) // transformers' default num_labels 2

	_, err = read(`{"model_type": "phi", "architectures": ["PhiForSequenceClassification"]}`)
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "config.architectures[0]", fe.Field)
	require.ErrorIs(t, err, gpumem.ErrUnsupported)

	_, err = read(`{"model_type": "bert", "architectures": ["BertForTokenClassification"], "num_labels": 0}`)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "config.num_labels", fe.Field)

	// T5's and Whisper's generation classes keep their own layouts.
	_, err = read(`{"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}`)
	require.NoError(t, err)
}

// TestHeadActivations: a BERT classification job's logits are
// batch × labels, not batch × seq × vocab, computed by hand.
func TestHeadActivations(t *testing.T) {
	// bert-base, fp32 (e = 4), batch 8, seq 128, 2 labels, no dropout.
	s := withHead(t, "bert-base", model.HeadSeqCls, 2)
	w := model.Workload{Batch: 8, SeqLen: 128, DType: gpumem.FP32, Train: true}
	a, err := s.Activations(w)
	require.NoError(t, err)
	// Logits 4·8·2 = 64; log-softmax 64 and the total weight 4; the
	// pooler reads the last hidden state (4·8·128·768 = 3,145,728) and
	// tanh saves 4·8·768 = 24,576: Head 3,170,372.
	require.Equal(t, gpumem.Bytes(64), a.Logits)
	require.Equal(t, gpumem.Bytes(3_145_728+24_576+64+4), a.Head)
	require.Equal(t, gpumem.Bytes(128), a.LossGrad)
	require.Zero(t, a.FinalNorm) // no MLM transform
	require.Zero(t, a.LogitsFP32)
	// ids 8·1024 + labels 8·8.
	require.Equal(t, gpumem.Bytes(8*1024+8*8), a.TokenIDs)

	// The default BERT (masked LM) holds 4·8·128·30522 logits.
	mlm, err := mustLookup(t, "bert-base").Activations(w)
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(4*8*128*30522), mlm.Logits)

	// Token classification: every position, 9 labels: 4·1024·9 = 36,864.
	tok, err := withHead(t, "bert-base", model.HeadTokenCls, 9).Activations(w)
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(36_864), tok.Logits)
	require.Equal(t, gpumem.Bytes(3_145_728+36_864+4), tok.Head)
	// Question answering: start and end, two losses: 4·1024·2 = 8,192.
	qa, err := withHead(t, "bert-base", model.HeadQA, 0).Activations(w)
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(8_192), qa.Logits)
	require.Equal(t, gpumem.Bytes(3_145_728+8_192+8), qa.Head)
	require.Equal(t, gpumem.Bytes(8*1024+16*8), qa.TokenIDs)

	// ViT image classification, fp32, 4 images: 197 tokens each; the
	// classifier reads the final LayerNorm's output 4·4·197·768 =
	// 2,420,736; logits 4·4·1000 = 16,000.
	v := withHead(t, "vit-base-patch16-224", model.HeadImageCls, 1000)
	va, err := v.Activations(model.Workload{Batch: 4, DType: gpumem.FP32, Train: true})
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(16_000), va.Logits)
	require.Equal(t, gpumem.Bytes(2_420_736+16_000+4), va.Head)
	require.Equal(t, gpumem.Bytes(32), va.TokenIDs) // labels 8·4
	base, err := mustLookup(t, "vit-base-patch16-224").Activations(model.Workload{Batch: 4, DType: gpumem.FP32, Train: true})
	require.NoError(t, err)
	require.Zero(t, base.Logits)

	// Llama sequence classification (bf16): score at every position,
	// pooled: logits 2·2·2 = 8, not 2·2·512·32000.
	l := withHead(t, "llama-2-7b", model.HeadSeqCls, 2)
	la, err := l.Activations(model.Workload{Batch: 2, SeqLen: 512, DType: gpumem.BF16, Train: true})
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(8), la.Logits)
	require.Zero(t, la.LogitsFP32)

	// A head the family lacks is refused by name.
	bad := mustLookup(t, "t5-small")
	bad.Head = model.HeadSeqCls
	_, err = bad.Activations(w)
	require.ErrorIs(t, err, gpumem.ErrUnsupported)
	require.ErrorContains(t, bad.Validate(), "Spec.Head")
}

func TestParseHead(t *testing.T) {
	for _, n := range model.HeadNames() {
		h, err := model.ParseHead(n)
		require.NoError(t, err)
		require.Equal(t, n, h.String())
	}
	_, err := model.ParseHead("classifier")
	require.ErrorIs(t, err, gpumem.ErrInvalid)
}
