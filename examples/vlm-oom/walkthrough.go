package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/leak"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// The chapter's set-up.
const (
	seqLen         = 2048 // text tokens per sequence (the chapter's activation section, its 13B and budget-allocator exercises)
	targetBatch    = 32   // the budget-allocator exercise's target batch
	startBatch     = 4    // the budget-allocator exercise's micro-batch as first tried
	gpuName        = "rtx 3090"
	hiResImage     = 1024 // the chapter's high-resolution input, pixels
	loraRank       = 16
	loraName       = "LoRA r=16"
	rtx3090Message = "RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB \n(GPU 0; 23.69 GiB total capacity; 21.45 GiB already allocated; \n1.89 GiB free; 21.50 GiB reserved in total by PyTorch)"
	leakingLog     = `Step 100: Loss=2.34, Memory=18.2GB
Step 200: Loss=2.11, Memory=18.5GB  
Step 300: Loss=1.98, Memory=18.9GB
Step 400: Loss=1.87, Memory=19.4GB
Step 500: Loss=1.76, Memory=20.1GB
Step 600: Loss=1.65, Memory=20.9GB
Step 700: Loss=1.54, Memory=21.8GB
Step 800: Loss=1.43, Memory=22.9GB
Step 900: Loss=1.32, Memory=24.2GB
Step 1000: CUDA OOM
`
)

// Footprint is the chapter's footprint section and its 13B exercise: where LLaVA-1.5's memory goes.
type Footprint struct {
	Parts       []string // vision, projector, language
	Params      []int64
	Weights     []gpumem.Bytes // fp16, per part
	TotalParams int64
	Total       gpumem.Bytes // fp16

	// 7B, pure fp16 with Adam: weights, gradients and moments.
	W, G, O gpumem.Bytes

	Scores                  gpumem.Bytes // one layer's fp32 attention matrix, 2048 tokens
	Image                   model.Image  // the vision tower's input geometry
	ImageTokens, HiResToken int64        // tokens of an Image.Size-px and a 1024-px image

	// The 13B exercise: LLaVA-1.5-13B, AdamW, batch 1, fp16.
	State13     gpumem.Bytes
	Kernels     []model.Attention
	Saved13     []gpumem.Bytes // saved activations per kernel
	Peak13      []gpumem.Bytes // allocated peak per kernel
	Weights13   gpumem.Bytes
	PeakPhase13 []budget.Phase
}

// Fit is the budget-allocator exercise (LLaVA-1.5-7B on a 24 GB RTX 3090
// with a global batch of 32): a 7B full fine-tune on an RTX 3090.
type Fit struct {
	GPU     gpumem.Device
	Default *budget.InsufficientMemoryError // with the default limits
	Plan    budget.Plan                     // with 8-bit AdamW, bf16, offload and LoRA allowed
}

// Message is an out-of-memory message read back and diagnosed.
type Message struct {
	Title string
	Text  string
	OOM   leak.OOM
	Diag  leak.Diagnosis
}

// Overrun is the plan run at the smallest larger micro-batch whose
// estimate overruns the GPU: its estimate and the OOM message PyTorch
// 2.2+ would print for it.
type Overrun struct {
	Batch   int
	Need    budget.Breakdown
	Request gpumem.Bytes // the failing allocation: one fp32 logits-sized tensor
	Message Message
}

// Leak is the leaking-log exercise: the log's analysis.
type Leak struct {
	Capacity gpumem.Bytes
	Report   leak.Report
	// SeedRates are the log's own growth per step between consecutive
	// samples, in bytes, as the chapter's answer lists them.
	SeedRates []float64
}

// Walkthrough is everything the program computes.
type Walkthrough struct {
	Footprint      Footprint
	Fit            Fit
	RTX3090Message Message
	Overrun        Overrun
	Leak           Leak
}

func lookup(name string, adapt func(*model.Finetune)) (model.Spec, budget.Model, error) {
	s, ok := model.Lookup(name)
	if !ok {
		return s, budget.Model{}, fmt.Errorf("%s: not in the model catalog", name)
	}
	f := model.Finetune{Model: s}
	if adapt != nil {
		adapt(&f)
	}
	m, err := budget.NewModel(f)
	return s, m, err
}

// footprint computes the footprint section and the 13B exercise.
func footprint() (Footprint, error) {
	var f Footprint
	s, m7, err := lookup("llava-1.5-7b", nil)
	if err != nil {
		return f, err
	}
	groups, err := s.Groups()
	if err != nil {
		return f, err
	}
	f.Parts = []string{"vision", "projector", "language"}
	f.Params = make([]int64, len(f.Parts))
	for _, g := range groups {
		for i, p := range f.Parts {
			if g.Part == p {
				f.Params[i] += g.Params
			}
		}
	}
	for _, n := range f.Params {
		b, err := gpumem.FP16.Size(n)
		if err != nil {
			return f, err
		}
		f.Weights = append(f.Weights, b)
	}
	f.TotalParams, _ = m7.Params()
	if f.Total, err = gpumem.FP16.Size(f.TotalParams); err != nil {
		return f, err
	}

	// The model state is read at the end of backward of a one-token
	// step, where every gradient exists and activations are negligible.
	state := func(m budget.Model, o optimizer.Optimizer) (budget.Breakdown, error) {
		return budget.Estimate(budget.Job{Model: m, Mode: budget.Training, Precision: budget.FP16, Optimizer: o, Batch: 1, SeqLen: 1})
	}
	b, err := state(m7, optimizer.Adam{Impl: optimizer.Fused})
	if err != nil {
		return f, err
	}
	f.W, f.G, f.O = b.Weights, b.Gradients, b.Optimizer

	lm := s.LM()
	sh := attention.Shape{Batch: 1, Heads: int(lm.Heads), QueryLen: seqLen, KeyLen: seqLen, HeadDim: int(lm.HeadDim), DType: gpumem.FP16}
	if f.Scores, err = attention.Scores(sh, gpumem.FP32); err != nil {
		return f, err
	}
	if s.Vision == nil {
		return f, errors.New("llava-1.5-7b: no vision tower in the catalog entry")
	}
	f.Image = s.Vision.Image
	f.ImageTokens = f.Image.Patches()
	hi := s.Vision.Image
	hi.Size = hiResImage
	f.HiResToken = hi.Patches()

	s13, m13, err := lookup("llava-1.5-13b", nil)
	if err != nil {
		return f, err
	}
	adamw := optimizer.AdamW{Impl: optimizer.Fused}
	if b, err = state(m13, adamw); err != nil {
		return f, err
	}
	f.State13, f.Weights13 = b.Weights+b.Gradients+b.Optimizer, b.Weights
	for _, k := range []model.Attention{model.Eager, model.Flash} {
		a, err := s13.Activations(model.Workload{Batch: 1, SeqLen: seqLen, Images: 1, DType: gpumem.FP16, Attention: k, Train: true})
		if err != nil {
			return f, err
		}
		b, err := budget.Estimate(budget.Job{
			Model: m13, Mode: budget.Training, Precision: budget.FP16, Optimizer: adamw,
			Batch: 1, SeqLen: seqLen, Images: 1, Attention: k,
		})
		if err != nil {
			return f, err
		}
		f.Kernels = append(f.Kernels, k)
		f.Saved13 = append(f.Saved13, a.Total())
		f.Peak13 = append(f.Peak13, b.Allocated())
		f.PeakPhase13 = append(f.PeakPhase13, b.Phase)
	}
	return f, nil
}

// jobAsFirstWritten is the budget-allocator exercise's job as first written: full fine-tuning with
// AdamW under bf16 autocast, FlashAttention, 4 sequences of 2048 tokens
// and one 336-px image each.
func jobAsFirstWritten(m budget.Model) budget.Job {
	return budget.Job{
		Model: m, Mode: budget.Training, Precision: budget.BF16Mixed, Optimizer: optimizer.AdamW{},
		Attention: model.Flash, Batch: startBatch, SeqLen: seqLen, Images: 1,
	}
}

// fit computes the budget-allocator exercise.
func fit() (Fit, error) {
	var f Fit
	_, full, err := lookup("llava-1.5-7b", nil)
	if err != nil {
		return f, err
	}
	_, lora, err := lookup("llava-1.5-7b", func(ft *model.Finetune) {
		ft.LoRA = model.LoRA{Rank: loraRank, Targets: []string{model.AllLinear}}
	})
	if err != nil {
		return f, err
	}
	var ok bool
	if f.GPU, ok = gpumem.LookupDevice(gpuName); !ok {
		return f, fmt.Errorf("%s: not in the device catalog", gpuName)
	}
	j := jobAsFirstWritten(full)
	_, err = budget.Allocate(f.GPU.Free(), j, &budget.Limits{TargetGlobalBatch: targetBatch})
	if !errors.As(err, &f.Default) {
		return f, fmt.Errorf("the budget-allocator exercise with the default limits: want a does-not-fit error, got %v", err)
	}
	f.Plan, err = budget.Allocate(f.GPU.Free(), j, &budget.Limits{
		TargetGlobalBatch: targetBatch,
		Optimizers:        []optimizer.Optimizer{optimizer.AdamW8bit{}},
		Precisions:        []budget.Precision{budget.BF16},
		Offload:           budget.OffloadOptimizer,
		Models:            []budget.Alternative{{Name: loraName, Model: lora}},
	})
	return f, err
}

// formatSize prints a size as PyTorch's CUDA allocator does in its
// messages (c10/cuda/CUDACachingAllocator.cpp, format_size: bytes up to
// 1 KiB, then KiB, MiB and GiB with two decimals; docs/reference.md#oom-formats).
func formatSize(b gpumem.Bytes) string {
	switch {
	case b <= gpumem.KiB:
		return fmt.Sprintf("%d bytes", int64(b))
	case b <= gpumem.MiB:
		return fmt.Sprintf("%.2f KiB", float64(b)/float64(gpumem.KiB))
	case b <= gpumem.GiB:
		return fmt.Sprintf("%.2f MiB", b.MiB())
	}
	return fmt.Sprintf("%.2f GiB", b.GiB())
}

// oom22 builds the message PyTorch 2.2+ prints (docs/reference.md#oom-formats, PR
// #113481) when this process alone holds the GPU.
func oom22(request, capacity, allocated, reserved, context gpumem.Bytes) string {
	inUse := reserved + context
	return "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " + formatSize(request) +
		". GPU 0 has a total capacity of " + formatSize(capacity) +
		" of which " + formatSize(capacity-inUse) + " is free. " +
		"Including non-PyTorch memory, this process has " + formatSize(inUse) + " memory in use. " +
		"Of the allocated memory " + formatSize(allocated) + " is allocated by PyTorch, and " +
		formatSize(reserved-allocated) + " is reserved by PyTorch but unallocated." +
		" If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" +
		" to avoid fragmentation.  See documentation for Memory Management " +
		" (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
}

func read(title, text string) (Message, error) {
	o, ok := leak.ParseOOM(text)
	if !ok {
		return Message{}, fmt.Errorf("%s: not read as an out-of-memory message", title)
	}
	return Message{Title: title, Text: text, OOM: o, Diag: o.Diagnose()}, nil
}

// overrun runs the plan at the smallest micro-batch above its own (up to
// 8 more sequences) whose estimate overruns the GPU. At the
// peak, the allocation that fails is modelled as one fp32 tensor of
// batch × tokens × vocab (the logits upcast for the loss, or their
// gradient), the largest single tensor of the step; everything else of
// the estimate is already allocated.
func overrun(plan budget.Plan, gpu gpumem.Device, imageTokens int64) (Overrun, error) {
	var v Overrun
	var allocated, reserved gpumem.Bytes
	for v.Batch = plan.Batch + 1; ; v.Batch++ {
		if v.Batch > plan.Batch+8 {
			return v, fmt.Errorf("batch %d: the estimate does not overrun %s at its last allocation", plan.Batch+8, gpu.Name)
		}
		j := plan.Job
		j.Batch = v.Batch
		var err error
		if v.Need, err = budget.Estimate(j); err != nil {
			return v, err
		}
		vocab := j.Model.Spec().LM().Vocab
		logits, err := gpumem.FP32.Size(int64(v.Batch) * (int64(j.SeqLen) + int64(j.Images)*imageTokens) * vocab)
		if err != nil {
			return v, err
		}
		v.Request = budget.AllocationRequest(logits)
		allocated = v.Need.Allocated() - v.Request
		reserved = allocated + v.Need.Fragmentation
		if reserved+v.Need.Context+v.Request > gpu.Capacity {
			if reserved+v.Need.Context > gpu.Capacity {
				return v, fmt.Errorf("batch %d: the estimate overruns %s before its last allocation", v.Batch, gpu.Name)
			}
			break
		}
	}
	var err error
	text := oom22(v.Request, gpu.Capacity, allocated, reserved, v.Need.Context)
	v.Message, err = read(fmt.Sprintf("the plan at micro-batch %d, built from the estimate in PyTorch 2.2+'s format", v.Batch), text)
	return v, err
}

// leakLog computes the leaking-log exercise.
func leakLog(capacity gpumem.Bytes) (Leak, error) {
	l := Leak{Capacity: capacity}
	samples, err := leak.ParseSamples(strings.NewReader(leakingLog))
	if err != nil {
		return l, err
	}
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if a.OOM || b.OOM {
			continue
		}
		l.SeedRates = append(l.SeedRates, float64(b.Used-a.Used)/float64(b.Step-a.Step))
	}
	l.Report, err = leak.Analyze(samples, &leak.Options{Capacity: capacity})
	return l, err
}

func walkthrough() (*Walkthrough, error) {
	var w Walkthrough
	var err error
	if w.Footprint, err = footprint(); err != nil {
		return nil, err
	}
	if w.Fit, err = fit(); err != nil {
		return nil, err
	}
	if w.RTX3090Message, err = read("the RTX 3090 message", rtx3090Message); err != nil {
		return nil, err
	}
	if w.Overrun, err = overrun(w.Fit.Plan, w.Fit.GPU, w.Footprint.ImageTokens); err != nil {
		return nil, err
	}
	if w.Leak, err = leakLog(w.Fit.GPU.Capacity); err != nil {
		return nil, err
	}
	return &w, nil
}

// run computes the walk-through and writes it to w.
func run(out io.Writer) error {
	w, err := walkthrough()
	if err != nil {
		return err
	}
	f := w.Footprint
	fmt.Fprintln(out, "LLaVA on a 24 GB card: a CUDA OOM walk-through for LLaVA-1.5 (ours, then the chapter's figure)")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "1. Where the memory goes")
	for i, p := range f.Parts {
		fmt.Fprintf(out, "   %-9s %6.0fM params  %9s in fp16\n", p, float64(f.Params[i])/1e6, f.Weights[i].HumanSI())
	}
	fmt.Fprintf(out, "   total     %6.0fM params  %9s        chapter: about 14.6 GB (it rounds Vicuna to 7B; it has %.2fB)\n",
		float64(f.TotalParams)/1e6, f.Total.HumanSI(), float64(f.Params[2])/1e9)
	fmt.Fprintf(out, "   fp16 Adam: %s weights + %s gradients + %s moments = %s   chapter: 57.2 GB\n",
		f.W.HumanSI(), f.G.HumanSI(), f.O.HumanSI(), (f.W + f.G + f.O).HumanSI())
	fmt.Fprintln(out, "     (the chapter's 57.2 GB starts from its 14.6 GB of weights)")
	fmt.Fprintf(out, "   attention matrix, %d tokens, fp32, one layer: %.2f GiB            chapter: 0.50 GB\n", seqLen, f.Scores.GiB())
	fmt.Fprintf(out, "   image tokens: %d at %d px (chapter: 576); %d at %d px, %d patches a side\n",
		f.ImageTokens, f.Image.Size, f.HiResToken, hiResImage, hiResImage/f.Image.Patch)
	fmt.Fprintln(out, "     (chapter: about 5184, which is 72 a side)")
	fmt.Fprintf(out, "   13B exercise, AdamW, batch 1: model state %s (chapter: 106.84 GB)\n", f.State13.HumanSI())
	for i, k := range f.Kernels {
		fmt.Fprintf(out, "     %-5s activations %9s (%.2fx the weights), peak %s at %s\n",
			k, f.Saved13[i].HumanSI(), float64(f.Saved13[i])/float64(f.Weights13), f.Peak13[i].HumanSI(), f.PeakPhase13[i])
	}
	fmt.Fprintln(out, "     chapter: activations 2.5x the weights = 66.78 GB, sum 173.62 GB; activations")
	fmt.Fprintln(out, "     depend on the kernel, and the peak is not the sum (it is at one phase)")
	fmt.Fprintln(out)

	ft := w.Fit
	fmt.Fprintf(out, "2. A 7B full fine-tune on an %s (%s), target batch %d (the budget-allocator exercise)\n", ft.GPU.Name, ft.GPU.Free().String(), targetBatch)
	fmt.Fprintln(out, "   with the default limits:")
	for _, l := range wrap(ft.Default.Error(), 88) {
		fmt.Fprintln(out, "     "+l)
	}
	fmt.Fprintln(out, "   allowing 8-bit AdamW, bf16 weights, optimizer offload and LoRA:")
	for _, l := range strings.Split(strings.TrimRight(ft.Plan.String(), "\n"), "\n") {
		fmt.Fprintln(out, "   "+l)
	}
	fmt.Fprintln(out)

	fmt.Fprintln(out, "3. Reading the OOM message")
	printMessage(out, w.RTX3090Message)
	fmt.Fprintln(out, "     chapter: fragmentation 0.23%, memory used up; lower the batch, checkpointing, flash")
	v := w.Overrun
	printMessage(out, v.Message)
	fmt.Fprintf(out, "     the estimate at micro-batch %d needs %s on the device; Allocate's answer is the\n",
		v.Batch, v.Need.Device().String())
	fmt.Fprintf(out, "     plan above: micro-batch %d with %d accumulation steps\n", ft.Plan.Batch, ft.Plan.GradAccum)
	fmt.Fprintln(out)

	l := w.Leak
	r := l.Report
	fmt.Fprintf(out, "4. Reading the leaking memory log, against the %s's %s\n", ft.GPU.Name, l.Capacity.String())
	fmt.Fprintf(out, "   %s (leak: %v); growth %.1f MB/step in the first half, %.1f MB/step in the second\n",
		r.Shape, r.Leak, r.FirstSlope/1e6, r.SecondSlope/1e6)
	fmt.Fprintf(out, "   chapter: %s MB/step between samples, \"accelerating\", 6-13 MB/step leaked\n", rates(l.SeedRates))
	fmt.Fprintf(out, "   OOM forecast at step %.0f (range %.0f-%.0f); the log died at step %d\n",
		r.OOM.Step, r.OOM.Low, r.OOM.High, r.ObservedOOMStep)
	fmt.Fprintln(out, "   what to change: find the reference that grows (loss kept with its graph, tensors")
	fmt.Fprintln(out, "   appended to a list, hooks never removed); no batch size fixes a leak")
	return nil
}

func rates(r []float64) string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmt.Sprintf("%.0f", v/1e6)
	}
	return strings.Join(s, ", ")
}

func printMessage(out io.Writer, m Message) {
	o, d := m.OOM, m.Diag
	fmt.Fprintf(out, "   %s (%s):\n", m.Title, o.Era)
	for _, l := range wrap(strings.Join(strings.Fields(m.Text), " "), 88) {
		fmt.Fprintln(out, "     | "+l)
	}
	frag := "unknown"
	if d.Fragmentation >= 0 {
		frag = fmt.Sprintf("%.2f%%", 100*d.Fragmentation)
	}
	fmt.Fprintf(out, "     cause: %s; request %s, free %s, short by %s; fragmentation %s\n",
		d.Cause, d.Requested.String(), d.Free.String(), d.Shortfall.String(), frag)
	if len(d.Advice) > 0 {
		fmt.Fprintf(out, "     first advice: %s\n", d.Advice[0].Text)
	}
}

// wrap splits s into lines of at most width bytes at spaces.
func wrap(s string, width int) []string {
	var lines []string
	for len(s) > width {
		i := strings.LastIndexByte(s[:width+1], ' ')
		if i <= 0 {
			i = width
		}
		lines = append(lines, s[:i])
		s = strings.TrimLeft(s[i:], " ")
	}
	return append(lines, s)
}
