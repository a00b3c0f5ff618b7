package budget_test

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// LLaVA on a 24 GB card (docs/scenarios.md), the footprint: the
// parameters of LLaVA-1.5-7B in fp16, "about 14.6 GB" by the guide's
// arithmetic (304M vision + "7B" language + 20M
// projector, × 2 bytes). The real inventory has 6.74B language-model
// parameters (Vicuna-7B is Llama-2-7B's shape), so the weights are
// 14.13 GB; the guide's round "7B" adds 0.5 GB.
func ExampleNewModel_llavaWeights() {
	s, _ := model.Lookup("llava-1.5-7b")
	m, err := budget.ModelOf(s)
	if err != nil {
		fmt.Println(err)
		return
	}
	groups, err := s.Groups()
	if err != nil {
		fmt.Println(err)
		return
	}
	params := map[string]int64{}
	for _, g := range groups {
		params[g.Part] += g.Params
	}
	fp16 := func(n int64) string { b, _ := gpumem.FP16.Size(n); return b.HumanSI() }
	for _, part := range []string{"vision", "projector", "language"} {
		fmt.Printf("%-9s %5.0fM params  %9s in fp16\n", part, float64(params[part])/1e6, fp16(params[part]))
	}
	total, _ := m.Params()
	fmt.Printf("total     %5.0fM params  %9s in fp16 (seed: about 14.6 GB)\n", float64(total)/1e6, fp16(total))
	// Output:
	// vision      304M params  607.01 MB in fp16
	// projector    21M params   41.96 MB in fp16
	// language   6739M params   13.48 GB in fp16
	// total      7063M params   14.13 GB in fp16 (seed: about 14.6 GB)
}

// modelState is the guide's "model state": weights, gradients and optimizer
// state, read at the end of backward of a one-token step, where every
// gradient is present and activations are negligible.
func modelState(m budget.Model, p budget.Precision, o optimizer.Optimizer) (w, g, opt gpumem.Bytes, err error) {
	b, err := budget.Estimate(budget.Job{Model: m, Mode: budget.Training, Precision: p, Optimizer: o, Batch: 1, SeqLen: 1})
	return b.Weights, b.Gradients, b.Optimizer, err
}

// LLaVA on a 24 GB card, the guide's optimizer arithmetic: "7B with Adam: 14.6 (parameters) + 14.6 (gradients)
// + 28 (optimizer) GB + activations". In pure fp16 (no master copy)
// PyTorch's Adam keeps both moments in the parameters' dtype, so the
// library's model state is 14.13 + 14.13 + 28.25 GB. On top of it come
// the activations of the library's per-op model, here for one
// 2048-token sequence with one 336-px image (576 vision tokens) and SDPA
// attention; their peak is at the start of backward, before most
// gradients exist, so the step's peak is less than state + activations.
func ExampleEstimate_llava7bAdam() {
	s, _ := model.Lookup("llava-1.5-7b")
	m, _ := budget.ModelOf(s)
	adam := optimizer.Adam{Impl: optimizer.Fused}
	w, g, o, err := modelState(m, budget.FP16, adam)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("parameters ", w.HumanSI())
	fmt.Println("gradients  ", g.HumanSI())
	fmt.Println("Adam states", o.HumanSI())
	fmt.Println("model state", (w + g + o).HumanSI(), "(seed: 57.2 GB + activations)")
	b, err := budget.Estimate(budget.Job{
		Model: m, Mode: budget.Training, Precision: budget.FP16, Optimizer: adam,
		Batch: 1, SeqLen: 2048, Images: 1, Attention: model.SDPA,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("activations", b.Activations.HumanSI(), "at", b.Phase, "start")
	fmt.Println("allocated  ", b.Allocated().HumanSI())
	// Output:
	// parameters  14.13 GB
	// gradients   14.10 GB
	// Adam states 28.20 GB
	// model state 56.43 GB (seed: 57.2 GB + activations)
	// activations 16.64 GB at backward start
	// allocated   59.66 GB
}

// LLaVA on a 24 GB card, the 13B footprint exercise: LLaVA-1.5-13B,
// AdamW, batch 1, 2048 tokens, fp16. The guide's answer is 173.62 GB: 26.71 GB of fp16 weights, as much
// in gradients, 53.42 GB of AdamW states, and activations "about 2.5× the
// parameters" (66.78 GB), all summed as if they peaked together. The
// library's model state agrees within 0.03 GB. It replaces the rule of
// thumb with its per-op activation model (2048 text tokens plus the 576
// tokens of one 336-px image) and the sum with the phase peak. With eager
// attention, as LLaVA's Llama layers run it, the saved activations are
// larger than the guide's guess and the peak is at the start of backward,
// before the gradients exist; with FlashAttention the activations are
// about the size of the weights, and the peak is the end of backward,
// when every gradient is present and most activations are released. The 2.5× rule is thus right for neither kernel:
// activations depend on the kernel and the sequence, not on the weights.
func ExampleEstimate_llava13bExercise() {
	s, _ := model.Lookup("llava-1.5-13b")
	m, _ := budget.ModelOf(s)
	adamw := optimizer.AdamW{Impl: optimizer.Fused}
	w, g, o, err := modelState(m, budget.FP16, adamw)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("model state %s = %s weights + %s gradients + %s AdamW (seed: 106.84 GB)\n",
		(w + g + o).HumanSI(), w.HumanSI(), g.HumanSI(), o.HumanSI())
	for _, attn := range []model.Attention{model.Eager, model.Flash} {
		a, err := s.Activations(model.Workload{
			Batch: 1, SeqLen: 2048, Images: 1, DType: gpumem.FP16, Attention: attn, Train: true,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		b, err := budget.Estimate(budget.Job{
			Model: m, Mode: budget.Training, Precision: budget.FP16, Optimizer: adamw,
			Batch: 1, SeqLen: 2048, Images: 1, Attention: attn,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-5s saved activations %8s (%.2f× the weights), peak %s at %s\n",
			attn, a.Total().HumanSI(), float64(a.Total())/float64(w), b.Allocated().HumanSI(), b.Phase)
	}
	fmt.Println("seed  saved activations 66.78 GB (2.50× the weights), peak 173.62 GB")
	// Output:
	// model state 106.74 GB = 26.70 GB weights + 26.68 GB gradients + 53.36 GB AdamW (seed: 106.84 GB)
	// eager saved activations 92.51 GB (3.46× the weights), peak 174.22 GB at backward
	// flash saved activations 25.70 GB (0.96× the weights), peak 106.75 GB at backward
	// seed  saved activations 66.78 GB (2.50× the weights), peak 173.62 GB
}
