package budget_test

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// Serving Qwen2.5-7B with vLLM on a 24 GB L4 at its defaults
// (gpu_memory_utilization 0.9, 16-token blocks, the cache in bf16): a
// serving job is a Generation job whose Runtime is VLLM, on a Device with
// a Capacity. Its SeqLen and Generate are one request's prompt and
// completion: together they are max_model_len unless VLLMOptions gives
// one. VLLMBuffers reports the cache vLLM allocates at start-up and how
// many requests of max_model_len it holds at once; VLLMMaxModelLenFor is
// the inverse, the longest max_model_len at which a given number of
// requests fit, up to the model's max_position_embeddings (131,072 in the
// base model's config.json, which the catalog holds; the Instruct model's
// says 32,768: read its config.json with model.FromHFConfig to be held to
// that).
func ExampleVLLMBuffers() {
	spec, ok := model.Lookup("Qwen/Qwen2.5-7B")
	if !ok {
		fmt.Println("Qwen2.5-7B is not in the catalog")
		return
	}
	m, err := budget.ModelOf(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	l4, _ := gpumem.LookupDevice("l4")
	job := budget.Job{
		Model: m, Mode: budget.Generation, Precision: budget.BF16,
		Runtime: budget.VLLM, Device: l4,
		Batch: 1, SeqLen: 4096, Generate: 512,
	}
	r, err := budget.VLLMBuffers(job)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(l4)
	fmt.Printf("weights %v, profile peak %v, KV cache %v: %d blocks, %d tokens\n", r.Weights, r.Activations, r.KVMemory, r.Blocks, r.Tokens)
	fmt.Printf("max_model_len %d: %.2f requests at once\n", r.MaxModelLen, r.Concurrency)
	for _, n := range []float64{1, 8, 32} {
		length, _, err := budget.VLLMMaxModelLenFor(job, n)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%2.0f requests at once: max_model_len up to %d\n", n, length)
	}
	// Output:
	// NVIDIA L4: 21.95 GiB
	// weights 14.19 GiB, profile peak 297.00 MiB, KV cache 5.28 GiB: 6180 blocks, 98880 tokens
	// max_model_len 4608: 21.46 requests at once
	//  1 requests at once: max_model_len up to 98880
	//  8 requests at once: max_model_len up to 12360
	// 32 requests at once: max_model_len up to 3090
}
