package model

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestQuantizeHead: an untied head joins the bitsandbytes-quantized
// linears (lit-gpt and Lightning convert every nn.Linear); it is refused
// for a tied head and for a method that is not bitsandbytes.
func TestQuantizeHead(t *testing.T) {
	s, err := FromHFConfig(strings.NewReader(`{"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
		"num_attention_heads": 71, "vocab_size": 65024, "multi_query": true, "parallel_attn": true, "bias": false,
		"torch_dtype": "bfloat16", "tie_word_embeddings": false}`))
	require.NoError(t, err)
	head := func(f Finetune) gpumem.Tensor {
		ts, err := f.Tensors()
		require.NoError(t, err)
		for _, t := range ts {
			if strings.HasSuffix(t.Name, "lm_head.weight") {
				return t
			}
		}
		t.Fatal("no lm_head.weight")
		return gpumem.Tensor{}
	}
	require.Equal(t, gpumem.BF16, head(Finetune{Model: s, Quant: gpumem.NF4}).DType)
	require.Equal(t, gpumem.NF4, head(Finetune{Model: s, Quant: gpumem.NF4, QuantizeHead: true}).DType)
	require.Equal(t, gpumem.INT8, head(Finetune{Model: s, Quant: gpumem.INT8, QuantizeHead: true}).DType)

	for _, f := range []Finetune{
		{Model: s, QuantizeHead: true},
		{Model: s, Quant: gpumem.INT4, Method: "gptq", QuantizeHead: true},
	} {
		_, err := f.Tensors()
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "Finetune.QuantizeHead", fe.Field)
	}
	tied := s
	tied.TiedEmbeddings = true
	_, err = Finetune{Model: tied, Quant: gpumem.NF4, QuantizeHead: true}.Tensors()
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Finetune.QuantizeHead", fe.Field)
}
