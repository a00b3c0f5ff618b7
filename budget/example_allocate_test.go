package budget_test

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// mustModel prepares a catalog model, optionally adapted.
func mustModel(name string, adapt func(*model.Finetune)) budget.Model {
	s, ok := model.Lookup(name)
	if !ok {
		panic("not in the catalog: " + name)
	}
	f := model.Finetune{Model: s}
	if adapt != nil {
		adapt(&f)
	}
	m, err := budget.NewModel(f)
	if err != nil {
		panic(err)
	}
	return m
}

// LLaVA-1.5-7B on a 24 GB RTX 3090 with a global batch of 32
// (docs/scenarios.md): a budget allocator for a 7B vision-language
// model on a 24 GB card, full fine-tuning with Adam, a
// target batch of 32. With the default limits full training cannot fit:
// Allocate returns the typed error with the ladder it tried and what to
// allow. Allowing 8-bit AdamW, bf16 weights, optimizer offload and LoRA
// reaches a plan, and the ladder shows what each change buys.
func ExampleAllocate_llavaOn3090() {
	full := mustModel("llava-1.5-7b", nil)
	lora := mustModel("llava-1.5-7b", func(f *model.Finetune) {
		f.LoRA = model.LoRA{Rank: 16, Targets: []string{"all-linear"}}
	})
	j := budget.Job{
		Model: full, Mode: budget.Training, Precision: budget.BF16Mixed, Optimizer: optimizer.AdamW{},
		Attention: model.Flash, Batch: 4, SeqLen: 2048, Images: 1,
	}
	rtx3090, _ := gpumem.LookupDevice("rtx 3090")
	_, err := budget.Allocate(rtx3090.Free(), j, &budget.Limits{TargetGlobalBatch: 32})
	var short *budget.InsufficientMemoryError
	if errors.As(err, &short) {
		fmt.Println("default limits:", errors.Is(err, gpumem.ErrDoesNotFit))
		fmt.Println(short)
	}
	p, err := budget.Allocate(rtx3090.Free(), j, &budget.Limits{
		TargetGlobalBatch: 32,
		Optimizers:        []optimizer.Optimizer{optimizer.AdamW8bit{}},
		Precisions:        []budget.Precision{budget.BF16},
		Offload:           budget.OffloadOptimizer,
		Models:            []budget.Alternative{{Name: "LoRA r=16", Model: lora}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p)
	// Output:
	// default limits: true
	// does not fit: needs 115.97 GiB more than the 23.59 GiB free (at least 138.38 GiB on the device; the largest part is optimizer, 78.80 GiB); allow an 8-bit optimizer; allow optimizer offload; allow LoRA or QLoRA
	// batch 4 × 2048 tokens, 8 accumulation steps, attention flash, checkpointing full, torch.optim.AdamW, bf16, LoRA r=16
	// needs 21.75 GiB of 23.59 GiB free (1.84 GiB left); stopped by memory (activations)
	//   change                                        device peak       saving  fits  cost
	// * as given                                       206.31 GiB            —  no    —
	// * checkpointing → full                           138.38 GiB   −67.93 GiB  no    recomputes 98% of a forward pass
	//   optimizer → bnb.optim.AdamW8bit                 90.69 GiB   −47.69 GiB  no    a different optimizer state
	// * precision → bf16                                49.18 GiB   −41.51 GiB  no    lower-precision weights or state
	//   offload optimizer state to the CPU              35.17 GiB   −14.01 GiB  no    gradients to the host and weights back every step; the step runs on the CPU
	// * model → LoRA r=16                               21.56 GiB   −13.60 GiB  yes   weights 13.16 GiB → 13.24 GiB; trains 47,267,840 parameters instead of 7,050,828,800
}

// Block attention over 32k tokens (docs/scenarios.md): 32k tokens through a Llama-style model with 32 heads in fp16
// and eager attention (output_attentions needs it) on an 80 GB A100. One
// layer's fp32 attention probabilities are 32 × 32k × 32k × 4 B =
// 128 GiB; at the softmax Hugging Face's eager code holds the fp16
// scores, the fp32 result and the fp16 cast copy (8 bytes per score), so
// 8 heads at a time (64 GiB) no longer fit beside the weights and 4 do;
// 4-bit weights save most of the rest. The write-up's gradient checkpointing saves nothing
// in a forward pass without gradients, so the ladder does not list it.
func ExampleAllocate_blockAttention() {
	fp16 := mustModel("llama-3.1-8b", nil)
	nf4 := mustModel("llama-3.1-8b", func(f *model.Finetune) {
		f.Quant, f.Blockwise = gpumem.NF4, gpumem.Blockwise{Nested: true}
		f.Train = func(gpumem.Tensor) bool { return false }
	})
	j := budget.Job{Model: fp16, Mode: budget.Prefill, Precision: budget.FP16, Attention: model.Eager, Batch: 1, SeqLen: 32768}
	a100, _ := gpumem.LookupDevice("a100-80gb")
	p, err := budget.Allocate(a100.Free(), j, &budget.Limits{
		Attention:  []model.Attention{}, // the analysis needs the probabilities: eager only
		HeadChunks: []int{16, 8, 4, 2, 1},
		Models:     []budget.Alternative{{Name: "4-bit NF4 weights", Model: nf4}},
		MaxBatch:   1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p)
	// Output:
	// batch 1 × 32768 tokens, attention eager (4 heads at a time), fp16
	// needs 53.42 GiB of 79.15 GiB free (25.73 GiB left); stopped by batch limit
	//   change                                        device peak       saving  fits  cost
	// * as given                                       288.62 GiB            —  no    —
	// * eager attention 16 head(s) at a time           154.22 GiB  −134.40 GiB  no    a loop over head slices
	// * eager attention 8 head(s) at a time             87.02 GiB   −67.20 GiB  no    a loop over head slices
	// * eager attention 4 head(s) at a time             53.42 GiB   −33.60 GiB  yes   a loop over head slices
	//   eager attention 2 head(s) at a time             36.62 GiB   −16.80 GiB  yes   a loop over head slices
	//   eager attention 1 head(s) at a time             28.22 GiB    −8.40 GiB  yes   a loop over head slices
	//   model → 4-bit NF4 weights                       18.09 GiB   −10.13 GiB  yes   weights 14.96 GiB → 5.31 GiB
}

// The Whisper language attack (docs/scenarios.md): a PGD attack on
// Whisper-small's language identification
// backpropagates to the input through a frozen model, holding every
// sample's graph of a 30 s clip (1500 encoder frames, fp32, eager
// attention with its fp32 softmax) until backward. Each clip's graph
// costs the same, so the language micro-batch (lang_microbatch_size) is
// what the memory left beside the rest of the attack holds: LargestBatch of
// that job in that memory.
func ExampleLargestBatch_whisperAttack() {
	frozen := mustModel("whisper-small", func(f *model.Finetune) { f.Train = func(gpumem.Tensor) bool { return false } })
	j := budget.Job{Model: frozen, Mode: budget.Training, Precision: budget.FP32, Attention: model.Eager, Batch: 1, SeqLen: 1}
	one, _ := budget.Estimate(j)
	j.Batch = 8
	eight, err := budget.Estimate(j)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("each clip's graph:", ((eight.Allocated() - one.Allocated()) / 7).String())
	fmt.Println("batch 8 needs     ", eight.Device().String())
	for _, free := range []string{"24GiB", "12GiB", "6GiB"} {
		b, _ := gpumem.ParseBytes(free)
		n, err := budget.LargestBatch(j, b)
		fmt.Printf("micro-batch in %-5s %d %v\n", free+":", n, err)
	}
	// Output:
	// each clip's graph: 1.86 GiB
	// batch 8 needs      17.04 GiB
	// micro-batch in 24GiB: 10 <nil>
	// micro-batch in 12GiB: 5 <nil>
	// micro-batch in 6GiB: 2 <nil>
}

// The distribution compensator cache (docs/scenarios.md): the
// compensator's cache of fp32 feature vectors
// (cached_Z, 50000 × feature_dim) sized from memory instead of a fixed
// cap: CacheEntries gives the count a budget holds, and Allocate grows an
// elastic buffer as far as the rest of the job leaves room.
func ExampleCacheEntries_compensatorCache() {
	for _, featureDim := range []gpumem.Bytes{4096, 1 << 20} {
		entry := 4 * featureDim
		// The write-up's rule: min(2000, ⌊1 GiB / (4·feature_dim)⌋).
		n, _ := budget.CacheEntries(entry, 1<<30, 0, 2000)
		m, _ := budget.CacheEntries(entry, 1<<30, 0, 0)
		fmt.Printf("feature_dim %7d: write-up's 1 GiB rule %4d entries, 1 GiB holds %5d\n", featureDim, n, m)
	}
	const featureDim = 32768
	entry := gpumem.Bytes(4 * featureDim)

	// The cache beside a Qwen2.5-7B bf16 inference job on a 24 GB card.
	j := budget.Job{
		Model: mustModel("qwen2.5-7b", nil), Mode: budget.Prefill, Precision: budget.BF16, Attention: model.SDPA,
		Batch: 1, SeqLen: 2048,
		Buffers: []budget.Buffer{{Name: "cached_Z", Entries: 50000, EntryBytes: entry, Elastic: true}},
	}
	p, err := budget.Allocate(24e9, j, &budget.Limits{MaxBatch: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("cached_Z entries on a 24 GB card:", p.Buffers[0].Entries, "stopped by", p.Reason)
	// Output:
	// feature_dim    4096: write-up's 1 GiB rule 2000 entries, 1 GiB holds 65536
	// feature_dim 1048576: write-up's 1 GiB rule  256 entries, 1 GiB holds   256
	// cached_Z entries on a 24 GB card: 41287 stopped by memory
}

// Unlearning in CogVideoX-5b (docs/scenarios.md) needs 65 GB of model
// state, more than the 46.07 GiB the write-up's card had free. Allowing CPU offload, the
// plan moves the frozen models to the host (each loaded when it runs) and
// then the AdamW state, as the write-up's tool falls back to --use_cpu_offload.
func ExampleAllocate_videoUnlearning() {
	frozen := func(name string) budget.Model {
		return mustModel(name, func(f *model.Finetune) { f.Train = func(gpumem.Tensor) bool { return false } })
	}
	j := budget.Job{
		Model: mustModel("cogvideox-5b-transformer", nil), Mode: budget.Training, Precision: budget.FP16,
		Optimizer: optimizer.AdamW{Impl: optimizer.Fused}, Attention: model.SDPA, Batch: 1, SeqLen: 1,
		Copies: []budget.Copy{
			{Name: "original transformer", Model: frozen("cogvideox-5b-transformer")},
			{Name: "T5-XXL text encoder", Model: frozen("cogvideox-5b-text-encoder")},
		},
	}
	free, _ := gpumem.ParseBytes("46.07GiB") // the write-up's tool divides by 1024³
	p, err := budget.Allocate(free, j, &budget.Limits{Offload: budget.OffloadCopies | budget.OffloadOptimizer, MaxBatch: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p)
	fmt.Println("host memory:", p.Need.Host.HumanSI())
	// Output:
	// batch 1 × 1 tokens, attention sdpa, checkpointing none, torch.optim.AdamW, fp16, offload optimizer
	// needs 42.43 GiB of 46.07 GiB free (3.64 GiB left); stopped by batch limit
	//   change                                        device peak       saving  fits  cost
	// * as given                                        64.22 GiB            —  no    —
	//   offload frozen models to the CPU                54.90 GiB    −9.31 GiB  no    each frozen model is copied to the GPU when it runs
	// * offload optimizer state to the CPU              33.12 GiB   −21.79 GiB  yes   gradients to the host and weights back every step; the step runs on the CPU
	// host memory: 22.28 GB
}

// Issue 18: asked for the longest sequence that fits, the planner tries
// each allowed change for how far it pushes that maximum. Llama-3.1-8B
// QLoRA fits a 40 GB A100 as given at 2048 tokens without checkpointing,
// which stops at about 3,500 tokens (the frozen base saving nothing for
// its weights); checkpointing takes it past 15,000,
// so the plan takes it, and the ladder shows what each rung reaches.
func ExampleAllocate_maximizeSeqLen() {
	m := mustModel("llama-3.1-8b", func(f *model.Finetune) {
		f.LoRA = model.LoRA{Rank: 16}
		f.Quant, f.Blockwise = gpumem.NF4, gpumem.Blockwise{Nested: true}
	})
	a100, _ := gpumem.LookupDevice("a100-40gb")
	j := budget.Job{Model: m, Mode: budget.Training, Precision: budget.BF16Mixed, Optimizer: optimizer.AdamW{},
		Attention: model.SDPA, Batch: 1, SeqLen: 2048, Device: a100}
	p, err := budget.Allocate(a100.Free(), j, &budget.Limits{MaxSeqLen: 32768})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p)
	// Output:
	// batch 1 × 15163 tokens, attention sdpa, checkpointing full, torch.optim.AdamW, bf16-mixed
	// needs 37.42 GiB of 39.39 GiB free (1.97 GiB left); stopped by memory (logits)
	// objective: the longest sequence, 15,163 tokens with the changes marked * (3,484 without them)
	//   change                                        device peak       saving  fits    longest seq  cost
	// * as given                                        26.21 GiB            —  yes           3,484  —
	// * checkpointing → full                            13.89 GiB   −12.32 GiB  yes          15,163  recomputes 93% of a forward pass
}
