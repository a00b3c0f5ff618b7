package model_test

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

func ExampleLookup() {
	s, _ := model.Lookup("llama-3-8b")
	b, _ := s.Bytes(gpumem.BF16)
	fmt.Println(s.Params(), s.KVHeads, s.HeadDim, b.String())
	// Output: 8030261248 8 128 14.96 GiB
}

func ExampleFromHFConfig() {
	config := `{"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
		"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
		"vocab_size": 151936, "tie_word_embeddings": true, "torch_dtype": "bfloat16"}`
	s, err := model.FromHFConfig(strings.NewReader(config))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.Family, s.DType, s.Params())

	_, err = model.FromHFConfig(strings.NewReader(`{"model_type": "llama", "hidden_size": -1}`))
	fmt.Println(err)
	// Output:
	// qwen2 bf16 494032768
	// config.hidden_size = -1: invalid value: must not be negative
}

func ExampleFinetune() {
	s, _ := model.Lookup("llama-2-7b")
	qlora := model.Finetune{
		Model:     s,
		LoRA:      model.LoRA{Rank: 64, Targets: []string{model.AllLinear}},
		Quant:     gpumem.NF4,
		Blockwise: gpumem.Blockwise{Block: 64, Nested: true},
	}
	trainable := qlora.TrainableParams()
	weights, _ := qlora.WeightsBytes()
	fmt.Println(trainable, weights.String())
	// Output: 159907840 4.20 GiB
}

func ExampleTrainParts() {
	s, _ := model.Lookup("llava-1.5-7b")
	stage1 := model.Finetune{Model: s, Train: model.TrainParts("projector")}
	n := stage1.TrainableParams()
	fmt.Println(n)
	// Output: 20979712
}
