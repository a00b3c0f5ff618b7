package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// Seed is the fixed seed of the fleet and the queue: the same seed gives
// the same fleet, queue and output on every machine.
const Seed = 2024

// Margin is the memory the scheduler withholds on every GPU (Device.Reserved):
// a safety margin for what a job's estimate leaves out. It covers the
// one device-specific term that an estimate made once per job without a
// device cannot know: Hopper GPUs use 32 MiB cuBLAS workspaces instead of
// 8,519,680 bytes, up to 2 × 24 MiB more for a training job
// (budget.DefaultOverhead).
const Margin = 256 * gpumem.MiB

// fleetWeights makes some catalog GPUs commoner than others, as in a
// real fleet; every catalog entry not named here has weight 1.
var fleetWeights = map[string]int{
	"NVIDIA H100 80GB HBM3": 8, "NVIDIA A100-SXM4-80GB": 8, "NVIDIA A100-SXM4-40GB": 4,
	"NVIDIA L4": 5, "NVIDIA A10G": 5, "Tesla T4": 4, "NVIDIA L40S": 4, "NVIDIA H200": 3,
	"NVIDIA GeForce RTX 4090": 3, "NVIDIA B200": 2, "AMD Instinct MI300X": 2,
}

// NewFleet returns nodes nodes of 1, 2, 4 or 8 GPUs each, every node of
// one catalog GPU drawn by fleetWeights. A third of the GPUs are partly
// used by other work (10% to 90% of their capacity, in whole MiB); every
// GPU withholds Margin.
func NewFleet(seed uint64, nodes int) []GPU {
	rng := rand.New(rand.NewPCG(seed, 1))
	catalog := gpumem.Devices()
	total := 0
	for _, d := range catalog {
		total += weight(d.Name)
	}
	var fleet []GPU
	for n := range nodes {
		pick := rng.IntN(total)
		var dev gpumem.Device
		for _, d := range catalog {
			if pick -= weight(d.Name); pick < 0 {
				dev = d
				break
			}
		}
		dev.Reserved = Margin
		count := 1 << rng.IntN(4)
		for i := range count {
			d := dev
			if rng.IntN(3) == 0 {
				frac := 0.1 + 0.8*rng.Float64()
				d.Used = gpumem.Bytes(frac*float64(d.Capacity)) / gpumem.MiB * gpumem.MiB
			}
			fleet = append(fleet, GPU{Node: fmt.Sprintf("node-%03d", n), Index: i, Device: d})
		}
	}
	return fleet
}

func weight(name string) int {
	if w, ok := fleetWeights[name]; ok {
		return w
	}
	return 1
}

// Pending is a job in the queue.
type Pending struct {
	Name string // "job-0042"
	Desc string // what the job is, for the report
	Job  budget.Job
}

// recipe is a kind of job and the catalog models it runs on.
type recipe struct {
	kind    string // "qlora", "lora", "full" (fine-tune), "serve"
	weight  int
	models  []string
	batches []int
	seqs    []int
	gens    []int // tokens generated per sequence (serve)
}

var recipes = []recipe{
	{kind: "qlora", weight: 25, batches: []int{1, 2, 4}, seqs: []int{512, 1024, 2048},
		models: []string{"llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "llama-2-13b", "qwen2.5-14b", "qwen2.5-32b", "llama-3.1-70b"}},
	{kind: "lora", weight: 25, batches: []int{1, 2, 4, 8}, seqs: []int{512, 1024, 2048},
		models: []string{"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "mistral-7b", "gemma-2-9b", "phi-3-mini", "qwen2.5-7b"}},
	{kind: "full", weight: 20, batches: []int{4, 8, 16}, seqs: []int{256, 512, 1024},
		models: []string{"gpt2", "gpt2-medium", "opt-350m", "pythia-1b", "qwen2.5-0.5b", "llama-3.2-1b", "qwen2.5-1.5b", "phi-2"}},
	{kind: "serve", weight: 25, batches: []int{1, 4, 8, 16, 32}, seqs: []int{1024, 2048, 4096, 8192}, gens: []int{256, 512, 1024},
		models: []string{"llama-2-7b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "gemma-2-9b", "llama-2-13b", "qwen2.5-14b", "qwen2.5-32b"}},
	{kind: "serve", weight: 8, batches: []int{1, 4, 8, 16}, seqs: []int{2048, 4096, 8192}, gens: []int{256, 512},
		models: []string{"llama-3.1-70b", "qwen2.5-72b", "llama-2-70b"}},
	// Jobs that fit no single GPU: serving a 405B model, fully
	// fine-tuning a 70B model with AdamW.
	{kind: "serve", weight: 1, batches: []int{1, 8}, seqs: []int{4096}, gens: []int{512},
		models: []string{"llama-3.1-405b"}},
	{kind: "full", weight: 1, batches: []int{1, 4}, seqs: []int{2048},
		models: []string{"llama-3.1-70b"}},
}

// NewQueue returns n jobs drawn from recipes, plus two invalid jobs (at
// positions 7 and 19 when n is larger) that PreFilter rejects. Models are
// prepared once per (model, recipe kind) and shared by the jobs.
func NewQueue(seed uint64, n int) ([]Pending, error) {
	rng := rand.New(rand.NewPCG(seed, 2))
	total := 0
	for _, r := range recipes {
		total += r.weight
	}
	cache := map[string]budget.Model{}
	prepare := func(name, kind string) (budget.Model, error) {
		key := name + "/" + kind
		if m, ok := cache[key]; ok {
			return m, nil
		}
		s, ok := model.Lookup(name)
		if !ok {
			return budget.Model{}, fmt.Errorf("scheduler: %s is not in the model catalog", name)
		}
		f := model.Finetune{Model: s}
		switch kind {
		case "qlora": // the QLoRA paper's setup: NF4, double quantization, r=64 on every linear layer
			f.LoRA = model.LoRA{Rank: 64, Targets: []string{model.AllLinear}}
			f.Quant = gpumem.NF4
			f.Blockwise = gpumem.Blockwise{Nested: true}
		case "lora":
			f.LoRA = model.LoRA{Rank: 16}
		}
		m, err := budget.NewModel(f)
		if err != nil {
			return budget.Model{}, err
		}
		cache[key] = m
		return m, nil
	}
	pickInt := func(xs []int) int { return xs[rng.IntN(len(xs))] }

	queue := make([]Pending, 0, n)
	for k := range n {
		pick := rng.IntN(total)
		var r recipe
		for _, r = range recipes {
			if pick -= r.weight; pick < 0 {
				break
			}
		}
		name := r.models[rng.IntN(len(r.models))]
		m, err := prepare(name, r.kind)
		if err != nil {
			return nil, err
		}
		j := budget.Job{Model: m, Batch: pickInt(r.batches), SeqLen: pickInt(r.seqs)}
		var desc string
		switch r.kind {
		case "serve":
			j.Mode, j.Precision, j.Attention, j.Generate = budget.Generation, budget.BF16, model.Flash, pickInt(r.gens)
			desc = fmt.Sprintf("%s serve %d×(%d+%d)", name, j.Batch, j.SeqLen, j.Generate)
		case "qlora":
			// Pure bf16 around the NF4 base, as torchtune's QLoRA recipes run.
			j.Mode, j.Precision, j.Attention = budget.Training, budget.BF16, model.SDPA
			j.Optimizer = optimizer.AdamW8bit{Paged: true}
			j.Checkpointing = model.FullCheckpointing
			desc = fmt.Sprintf("%s QLoRA r64 %d×%d", name, j.Batch, j.SeqLen)
		case "lora":
			j.Mode, j.Precision, j.Attention = budget.Training, budget.BF16, model.Flash
			j.Optimizer = optimizer.AdamW{}
			if rng.IntN(2) == 0 {
				j.Checkpointing = model.FullCheckpointing
			}
			desc = fmt.Sprintf("%s LoRA r16 %d×%d", name, j.Batch, j.SeqLen)
		case "full":
			j.Mode, j.Precision, j.Attention = budget.Training, budget.BF16Mixed, model.SDPA
			j.Optimizer = optimizer.AdamW{}
			desc = fmt.Sprintf("%s full fine-tune %d×%d", name, j.Batch, j.SeqLen)
		}
		if j.Checkpointing == model.FullCheckpointing {
			desc += " ckpt"
		}
		queue = append(queue, Pending{Name: fmt.Sprintf("job-%04d", k+1), Desc: desc, Job: j})
	}

	// Two jobs with a mistake in their spec: a training job that names
	// no optimizer, and a generation job that generates nothing.
	if n > 19 {
		noOpt := queue[6]
		noOpt.Job.Mode, noOpt.Job.Optimizer = budget.Training, nil
		noOpt.Desc = noOpt.Job.Model.Spec().Name + " train, optimizer missing"
		queue[6] = noOpt
		noGen := queue[18]
		noGen.Job.Mode, noGen.Job.Generate = budget.Generation, 0
		noGen.Desc = noGen.Job.Model.Spec().Name + " generate 0 tokens"
		queue[18] = noGen
	}
	return queue, nil
}
