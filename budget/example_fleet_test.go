package budget_test

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// Full fine-tuning of Llama-3-70B on one node of 8 H100s: the model
// states alone are 16 bytes per parameter (1.13 TB), so no sharding
// stage fits on 80 GB cards; ZeRO-3 with the optimizer on the host does.
// The plan becomes a DeepSpeed config.
func ExampleAllocateFleet_llama70bFullFinetune() {
	spec, _ := model.Lookup("llama-3-70b")
	m, err := budget.ModelOf(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	h100, _ := gpumem.LookupDevice("h100-sxm")
	job := budget.Job{Model: m, Mode: budget.Training, Precision: budget.BF16Master,
		Optimizer: optimizer.AdamW{Impl: optimizer.Fused}, Batch: 1, SeqLen: 4096, Attention: model.Flash}
	plan, err := budget.AllocateFleet(budget.Fleet{Nodes: 1, GPUsPerNode: 8, Free: h100.Free()}, job,
		&budget.Limits{TargetGlobalBatch: 64, Offload: budget.OffloadOptimizer})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(plan)
	fmt.Printf("host memory per node: %s\n", plan.Need.HostNode.String())
	ds, err := plan.DeepSpeed()
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := ds.MarshalIndent()
	fmt.Println(string(out))
	// Output:
	// layout DP 8, ZeRO-3; batch 3 × 4096 tokens, 3 accumulation steps, attention flash, checkpointing full, torch.optim.AdamW, bf16-master, offload optimizer
	// needs 73.00 GiB of 79.21 GiB free (6.21 GiB left); stopped by memory (activations)
	//   change                                        device peak       saving  fits  cost
	//   layout DP 8, no sharding                         1.21 TiB            —  no    gradient all-reduce (2Ψ per step)
	//   layout DP 8, ZeRO-1                            513.72 GiB  −724.43 GiB  no    reduce-scatter + all-gather (2Ψ, as all-reduce)
	//   layout DP 8, ZeRO-2                            393.96 GiB  −119.76 GiB  no    reduce-scatter + all-gather (2Ψ, as all-reduce)
	// * layout DP 8, ZeRO-3                            275.28 GiB  −118.68 GiB  no    parameter all-gathers in forward and backward (3Ψ, 1.5×)
	//   layout TP 2 (SP) × DP 4, ZeRO-1                308.83 GiB            —  no    reduce-scatter + all-gather (2Ψ, as all-reduce); activation all-reduces in every block (within a node)
	//   layout TP 4 (SP) × DP 2, ZeRO-1                206.38 GiB  −102.44 GiB  no    reduce-scatter + all-gather (2Ψ, as all-reduce); activation all-reduces in every block (within a node)
	//   layout TP 8 (SP) × DP 1, ZeRO-1                155.17 GiB   −51.22 GiB  no    reduce-scatter + all-gather (2Ψ, as all-reduce); activation all-reduces in every block (within a node)
	// * checkpointing → full                           153.13 GiB  −122.15 GiB  no    recomputes 99% of a forward pass
	// * offload optimizer state to the CPU              49.64 GiB  −103.49 GiB  yes   gradients to the host and weights back every step; the step runs on the CPU
	//
	// host memory per node: 788.50 GiB
	// {
	//   "train_batch_size": 72,
	//   "train_micro_batch_size_per_gpu": 3,
	//   "gradient_accumulation_steps": 3,
	//   "gradient_clipping": 1,
	//   "bf16": {
	//     "enabled": true
	//   },
	//   "zero_optimization": {
	//     "stage": 3,
	//     "offload_optimizer": {
	//       "device": "cpu",
	//       "pin_memory": true
	//     }
	//   },
	//   "activation_checkpointing": {
	//     "partition_activations": false,
	//     "cpu_checkpointing": false
	//   },
	//   "wall_clock_breakdown": false
	// }
}
