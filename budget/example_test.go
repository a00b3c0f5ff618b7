package budget_test

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// Unlearning in CogVideoX-5b (docs/scenarios.md) keeps a frozen original
// model beside the trained one. The write-up's table gives 52.2 GB of model state in fp16
// (10.44 GB original + 10.44 weights + 10.44 gradients + 20.88 AdamW
// states, from "5B" transformer parameters and a "220M" T5 encoder); its
// tool printed 63.78 GB because it counted the trained copy twice.
// Estimate counts each copy once, from the real inventories: the
// transformer has 5.57B parameters and the text encoder is T5-XXL's
// encoder (4.76B), which the write-up's table undercounts by 9 GB.
func ExampleEstimate_unlearning() {
	transformer, _ := model.Lookup("cogvideox-5b-transformer")
	encoder, _ := model.Lookup("cogvideox-5b-text-encoder")
	trained, err := budget.ModelOf(transformer)
	if err != nil {
		fmt.Println(err)
		return
	}
	frozen := func(s model.Spec) budget.Model {
		m, _ := budget.NewModel(model.Finetune{Model: s, Train: func(gpumem.Tensor) bool { return false }})
		return m
	}
	// One token per sequence makes activations negligible, so the peak is
	// the end of backward, where every gradient is present: the model
	// state the write-up's table adds up.
	j := budget.Job{
		Model: trained, Mode: budget.Training, Precision: budget.FP16, Batch: 1, SeqLen: 1,
		Optimizer: optimizer.AdamW{Impl: optimizer.Fused},
		Copies: []budget.Copy{
			{Name: "original transformer", Model: frozen(transformer)},
			{Name: "T5-XXL text encoder", Model: frozen(encoder)},
		},
	}
	b, err := budget.Estimate(j)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("peak phase        ", b.Phase)
	fmt.Println("trained weights   ", b.Weights.HumanSI())
	fmt.Println("gradients         ", b.Gradients.HumanSI())
	fmt.Println("AdamW states      ", b.Optimizer.HumanSI())
	fmt.Println("frozen copies     ", b.ExtraModels.HumanSI())
	fmt.Println("model state       ", (b.Weights + b.Gradients + b.Optimizer + b.ExtraModels).HumanSI())
	// Output:
	// peak phase         backward
	// trained weights    11.14 GB
	// gradients          11.14 GB
	// AdamW states       22.28 GB
	// frozen copies      20.67 GB
	// model state        65.23 GB
}
