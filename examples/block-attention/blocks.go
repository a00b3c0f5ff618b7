package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// The write-up's job.
const (
	tokens    = 32768 // "32k输入"
	gpuName   = "a100-80gb"
	seedGPUs  = 8 // "8卡A100"
	seedChunk = 8 // head_chunk_size
	nf4Name   = "4-bit NF4 weights"
)

// headChunks are the chunk sizes Allocate may try, largest first.
var headChunks = []int{32, 16, 8, 4, 2, 1}

// Case is one model and layout the program plans.
type Case struct {
	Name   string // catalog name
	Title  string
	Stages int // pipeline stages (device_map="auto" over this many GPUs)

	Heads   int
	Scores  gpumem.Bytes     // one layer's fp32 attention weights
	Given   budget.Breakdown // the job as given: all heads at once, fp16
	Plan    budget.Plan
	NF4     budget.Model
	Job     budget.Job   // the job as given
	Weights gpumem.Bytes // fp16 weights on the busiest GPU
	Total   gpumem.Bytes // fp16 weights in all

	// The write-up's table, per GPU: head chunks of seedChunk, then with
	// checkpointing (no effect without backward), then with 4-bit
	// weights; and with one head at a time and 4-bit weights.
	Chunked, Checkpointed, FourBit, OneHead4Bit budget.Breakdown
}

// Report is what the program computes; run prints it.
type Report struct {
	GPU   gpumem.Device
	Cases []Case
}

func newCase(name, title string, stages int, gpu gpumem.Device) (Case, error) {
	c := Case{Name: name, Title: title, Stages: stages}
	s, ok := model.Lookup(name)
	if !ok {
		return c, fmt.Errorf("%s: not in the model catalog", name)
	}
	c.Heads = int(s.Heads)
	var err error
	sh := attention.Shape{Batch: 1, Heads: c.Heads, KVHeads: int(s.KVHeads), QueryLen: tokens, KeyLen: tokens, HeadDim: int(s.HeadDim), DType: gpumem.FP16, NoGrad: true}
	if c.Scores, err = attention.Scores(sh, gpumem.FP32); err != nil {
		return c, err
	}
	if c.Total, err = s.WeightsBytes(); err != nil {
		return c, err
	}
	fp16, err := budget.ModelOf(s)
	if err != nil {
		return c, err
	}
	// bitsandbytes 4-bit as load_in_4bit loads it for inference: NF4
	// with double quantization, nothing trained.
	if c.NF4, err = budget.NewModel(model.Finetune{
		Model: s, Quant: gpumem.NF4, Blockwise: gpumem.Blockwise{Nested: true},
		Train: func(gpumem.Tensor) bool { return false },
	}); err != nil {
		return c, err
	}
	c.Job = budget.Job{
		Model: fp16, Mode: budget.Prefill, Precision: budget.FP16, Attention: model.Eager,
		Batch: 1, SeqLen: tokens, Parallel: budget.Parallel{PipelineParallel: stages},
	}
	if c.Given, err = budget.Estimate(c.Job); err != nil {
		return c, err
	}
	c.Weights = c.Given.Weights
	if c.Plan, err = budget.Allocate(gpu.Free(), c.Job, &budget.Limits{
		Attention:  []model.Attention{}, // the analysis needs the weights: eager only
		HeadChunks: headChunks,
		Models:     []budget.Alternative{{Name: nf4Name, Model: c.NF4}},
		MaxBatch:   1,
	}); err != nil {
		return c, err
	}

	j := c.Job
	j.HeadChunk = seedChunk
	if c.Chunked, err = budget.Estimate(j); err != nil {
		return c, err
	}
	j.Checkpointing = model.FullCheckpointing
	if c.Checkpointed, err = budget.Estimate(j); err != nil {
		return c, err
	}
	j.Model = c.NF4
	if c.FourBit, err = budget.Estimate(j); err != nil {
		return c, err
	}
	j.HeadChunk = 1
	j.Checkpointing = model.NoCheckpointing
	if c.OneHead4Bit, err = budget.Estimate(j); err != nil {
		return c, err
	}
	return c, nil
}

func analyze() (*Report, error) {
	gpu, ok := gpumem.LookupDevice(gpuName)
	if !ok {
		return nil, fmt.Errorf("%s: not in the device catalog", gpuName)
	}
	r := &Report{GPU: gpu}
	for _, c := range []struct {
		name, title string
		stages      int
	}{
		{"llama-3.1-8b", "Llama-3.1-8B (32 heads, the write-up's arithmetic) on one A100", 1},
		{"llama-3.1-70b", fmt.Sprintf("Llama-3.1-70B (the write-up's \"70B\") over %d A100s, device_map=\"auto\"", seedGPUs), seedGPUs},
	} {
		cs, err := newCase(c.name, c.title, c.stages, gpu)
		if err != nil {
			return nil, err
		}
		r.Cases = append(r.Cases, cs)
	}
	return r, nil
}

// run computes the report and writes it to w.
func run(w io.Writer) error {
	r, err := analyze()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Block attention over a %d-token input on %s (%s each)\n\n", tokens, r.GPU.Name, r.GPU.Free().String())

	fmt.Fprintln(w, "One layer's attention weights in fp32 (eager attention, which output_attentions needs)")
	for _, c := range r.Cases {
		fmt.Fprintf(w, "  %2d heads x %d x %d x 4 B = %s  (%s)\n", c.Heads, tokens, tokens, c.Scores.String(), c.Name)
	}
	fmt.Fprintln(w, "  write-up: 32 x 32k x 32k x 4 / 1024^3 = 128GB")
	small, big := r.Cases[0], r.Cases[1]
	fmt.Fprintf(w, "fp16 weights: %s for %s; %s for %s, %s on the busiest of %d GPUs\n",
		small.Weights.String(), small.Name, big.Total.String(), big.Name, big.Weights.String(), big.Stages)
	fmt.Fprintln(w, "  (write-up: ~40GB for a 70B model in fp16; 70B parameters take 2 bytes each)")
	fmt.Fprintln(w)

	for _, c := range r.Cases {
		fmt.Fprintf(w, "%s:\n", c.Title)
		for _, l := range strings.Split(strings.TrimRight(c.Plan.String(), "\n"), "\n") {
			fmt.Fprintln(w, "  "+l)
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "The write-up's table beside the library's device peak per GPU")
	fmt.Fprintf(w, "  %-34s %12s %14s %14s\n", "configuration", "write-up", small.Name, big.Name+"/GPU")
	rows := []struct {
		name, seed string
		get        func(Case) gpumem.Bytes
	}{
		{"as written (all heads at once)", "~80GB+ OOM", func(c Case) gpumem.Bytes { return c.Given.Device() }},
		{fmt.Sprintf("+ %d heads at a time", seedChunk), "~40GB", func(c Case) gpumem.Bytes { return c.Chunked.Device() }},
		{"+ gradient checkpointing", "~25GB", func(c Case) gpumem.Bytes { return c.Checkpointed.Device() }},
		{"+ 4-bit weights", "~15GB", func(c Case) gpumem.Bytes { return c.FourBit.Device() }},
		{"1 head at a time + 4-bit weights", "", func(c Case) gpumem.Bytes { return c.OneHead4Bit.Device() }},
	}
	for _, row := range rows {
		fmt.Fprintf(w, "  %-34s %12s %14s %14s\n", row.name, row.seed, row.get(small).String(), row.get(big).String())
	}
	fmt.Fprintf(w, "  at %d heads a chunk's attention transient is %s (write-up: ~8GB)\n\n",
		seedChunk, small.Chunked.Attention.String())

	fmt.Fprintln(w, "What to change")
	fmt.Fprintf(w, "  - chunk the heads inside the attention forward (a custom attention that loops over\n")
	fmt.Fprintf(w, "    head slices): %d heads at a time fit here. The write-up's _compute_block_attention_chunked_gpu\n", small.Plan.HeadChunk)
	fmt.Fprintln(w, "    receives attn_weights for all heads from the hook, after the forward has made them,")
	fmt.Fprintln(w, "    so chunking there does not lower this peak.")
	fmt.Fprintln(w, "  - drop --use-gradient-checkpointing: under torch.no_grad nothing is saved for backward,")
	fmt.Fprintf(w, "    so it changes nothing (%s with and without).\n", small.Checkpointed.Device().String())
	fmt.Fprintf(w, "  - 4-bit weights save %s on one GPU; the attention chunk dominates what is left,\n",
		(small.Chunked.Device() - small.FourBit.Device()).String())
	fmt.Fprintln(w, "    so fewer heads per chunk buy more than quantization.")
	return nil
}
