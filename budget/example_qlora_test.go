package budget_test

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// QLoRA fine-tuning of Llama-3.1-8B on a 24 GB RTX 4090, set up as the
// QLoRA recipes do: the base linear weights in NF4 with double
// quantization (bnb_4bit_use_double_quant, 64-element blocks), computing
// in bf16 (bnb_4bit_compute_dtype), the rest of the base in bf16, rank-16
// adapters in fp32 (PEFT's default) on PEFT's default targets for Llama
// (q_proj, v_proj), AdamW under bf16 autocast (the Trainer's bf16=True:
// BF16Mixed), flash attention and full checkpointing, one 2048-token
// sequence per step. Printing the Breakdown gives its three levels and its
// non-zero components; Fits and Utilization are what a scheduler asks;
// LargestBatch is how far the micro-batch may grow on that card (its
// Batch is what it searches).
func ExampleEstimate_qlora() {
	spec, ok := model.Lookup("llama-3.1-8b")
	if !ok {
		fmt.Println("llama-3.1-8b is not in the catalog")
		return
	}
	qlora, err := budget.NewModel(model.Finetune{
		Model:        spec,
		LoRA:         model.LoRA{Rank: 16},
		Quant:        gpumem.NF4,
		Blockwise:    gpumem.Blockwise{Block: 64, Nested: true},
		ComputeDType: gpumem.BF16,
		Unquantized:  gpumem.BF16,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	rtx4090, _ := gpumem.LookupDevice("rtx 4090")
	job := budget.Job{
		Model: qlora, Mode: budget.Training, Precision: budget.BF16Mixed,
		Optimizer: optimizer.AdamW{}, Attention: model.Flash,
		Checkpointing: model.FullCheckpointing, Batch: 1, SeqLen: 2048,
		Device: rtx4090,
	}
	need, err := budget.Estimate(job)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(need)
	fmt.Println("largest:", need.Dominant())
	short, fits := budget.Fits(need, rtx4090)
	fmt.Println(rtx4090)
	fmt.Printf("fits: %v (short %v), %.0f%% of the free memory used\n", fits, short, 100*budget.Utilization(need, rtx4090))
	batch, err := budget.LargestBatch(job, rtx4090.Free())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("largest micro-batch:", batch)
	// Output:
	// device 9.78 GiB (reserved 9.36 GiB, allocated 8.92 GiB) at backward: weights 5.35 GiB, optimizer 52.00 MiB, activations 1.54 GiB, logits 1.96 GiB, workspace 16.25 MiB, fragmentation 456.48 MiB, context 426.00 MiB
	// largest: weights 5.35 GiB
	// NVIDIA GeForce RTX 4090: 23.64 GiB
	// fits: true (short 0 B), 41% of the free memory used
	// largest micro-batch: 4
}
