package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// The write-up's job.
const (
	modelName  = "whisper-small"
	pgdBatch   = 8      // batch_size: clips per PGD step
	clipSecs   = 30     // Whisper pads every clip to 30 s
	sampleRate = 16_000 // Whisper's audio sample rate, Hz
	languages  = 99     // language tokens of multilingual Whisper (v1, v2)
)

// gpus are the catalog GPUs the micro-batch is sized for.
var gpus = []string{"tesla t4", "v100-sxm2-16gb", "rtx 4000 ada", "l4", "rtx 3090", "a100-40gb"}

// precisions are the two ways the attack runs: plain fp32, and fp16
// autocast (lang_autocast=True).
var precisions = []budget.Precision{budget.FP32, budget.FP16Mixed}

// Report is what the program computes; run prints it.
type Report struct {
	Params int64 // whisper-small's parameters, all frozen

	// The failed allocation: one layer's fp32 score matrix of the
	// encoder, and the request the caching allocator makes for it.
	Heads, Frames, HeadDim int
	Scores, Request        gpumem.Bytes

	// PGD's own tensors (delta_batch and r_batch), and what
	// language_probs would take on the GPU.
	PGDBuffers, LangProbs gpumem.Bytes

	// Per precision (indexed like precisions): the job at pgdBatch, one
	// clip's graph, and the largest micro-batch per GPU.
	Jobs    []budget.Job
	Whole   []budget.Breakdown
	PerClip []gpumem.Bytes
	GPUs    []gpumem.Device
	Micro   [][]int // Micro[p][g]: micro-batch of precision p on GPU g (0: none fits)
}

// job is the language-identification pass over batch clips: a training
// job (autograd records the graph) whose parameters are all frozen
// (budget.InputGradients: no parameter gradient, no optimizer), so
// backward reaches the input perturbation only. One decoder token per
// clip: language identification reads the logits of the first decoder
// position; the encoder always sees 30 s.
func job(m budget.Model, p budget.Precision, batch int, pgd []budget.Buffer) budget.Job {
	return budget.Job{
		Model: m, Mode: budget.Training, Gradients: budget.InputGradients, Precision: p, Attention: model.Eager,
		Batch: batch, SeqLen: 1, Buffers: pgd,
	}
}

// analyze computes the report.
func analyze() (*Report, error) {
	spec, ok := model.Lookup(modelName)
	if !ok || spec.Encoder == nil {
		return nil, fmt.Errorf("%s: not in the catalog as an encoder-decoder", modelName)
	}
	// The model as loaded; Job.Gradients freezes it.
	frozen, err := budget.ModelOf(spec)
	if err != nil {
		return nil, err
	}
	r := &Report{Heads: int(spec.Encoder.Heads), Frames: int(spec.Encoder.Positions), HeadDim: int(spec.Encoder.HeadDim)}
	if r.HeadDim == 0 {
		r.HeadDim = int(spec.HeadDim)
	}
	r.Params, _ = frozen.Params()

	s := attention.Shape{Batch: 1, Heads: r.Heads, QueryLen: r.Frames, KeyLen: r.Frames, HeadDim: r.HeadDim, DType: gpumem.FP32}
	if r.Scores, err = attention.Scores(s, gpumem.FP32); err != nil {
		return nil, err
	}
	r.Request = budget.AllocationRequest(r.Scores)

	// delta_batch and r_batch: one fp32 waveform per clip each.
	wave, err := gpumem.FP32.Size(pgdBatch * clipSecs * sampleRate)
	if err != nil {
		return nil, err
	}
	r.PGDBuffers = 2 * wave
	pgd := []budget.Buffer{{Name: "delta_batch", Bytes: wave}, {Name: "r_batch", Bytes: wave}}
	if r.LangProbs, err = gpumem.FP32.Size(pgdBatch * languages); err != nil {
		return nil, err
	}

	for _, name := range gpus {
		d, ok := gpumem.LookupDevice(name)
		if !ok {
			return nil, fmt.Errorf("%s: not in the device catalog", name)
		}
		r.GPUs = append(r.GPUs, d)
	}
	for _, p := range precisions {
		whole, err := budget.Estimate(job(frozen, p, pgdBatch, pgd))
		if err != nil {
			return nil, err
		}
		one, err := budget.Estimate(job(frozen, p, 1, pgd))
		if err != nil {
			return nil, err
		}
		r.Jobs = append(r.Jobs, job(frozen, p, pgdBatch, pgd))
		r.Whole = append(r.Whole, whole)
		r.PerClip = append(r.PerClip, (whole.Allocated()-one.Allocated())/(pgdBatch-1))
		micro := make([]int, len(r.GPUs))
		for g, d := range r.GPUs {
			n, err := budget.LargestBatch(job(frozen, p, 1, pgd), d.Free())
			if err != nil && !errors.Is(err, gpumem.ErrDoesNotFit) {
				return nil, err
			}
			micro[g] = n
		}
		r.Micro = append(r.Micro, micro)
	}
	return r, nil
}

// run computes the report and writes it to w.
func run(w io.Writer) error {
	r, err := analyze()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Whisper language attack: PGD against the language ID of %s, %d clips of %d s per step\n\n", modelName, pgdBatch, clipSecs)

	fmt.Fprintln(w, "The failed allocation (write-up: 104MB at qkv_attention's softmax)")
	fmt.Fprintf(w, "  encoder scores, one layer: %d heads x %d x %d frames in fp32 = %s (%d B)\n",
		r.Heads, r.Frames, r.Frames, r.Scores.String(), int64(r.Scores))
	fmt.Fprintf(w, "  the caching allocator requests %s: the write-up's \"104MB\"\n\n", r.Request.String())

	fmt.Fprintf(w, "Why the whole batch fails: %s's %.1fM parameters are frozen, but every clip's\n", modelName, float64(r.Params)/1e6)
	fmt.Fprintln(w, "encoder graph stays on the GPU until backward reaches the perturbation")
	fmt.Fprintf(w, "  %-28s", "")
	for _, p := range precisions {
		fmt.Fprintf(w, " %14s", p)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-28s", "one clip's graph")
	for i := range precisions {
		fmt.Fprintf(w, " %14s", r.PerClip[i].String())
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-28s", fmt.Sprintf("%d clips at once, device peak", pgdBatch))
	for i := range precisions {
		fmt.Fprintf(w, " %14s", r.Whole[i].Device().String())
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-28s", "largest part")
	for i := range precisions {
		d := r.Whole[i].Dominant()
		fmt.Fprintf(w, " %14s", d.Name)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  (%s is torch.autocast, the write-up's lang_autocast)\n", budget.FP16Mixed)
	fmt.Fprintf(w, "  PGD's delta_batch and r_batch take %s, and language_probs would take %s\n",
		r.PGDBuffers.String(), r.LangProbs.String())
	fmt.Fprintln(w, "  on the GPU: neither is what fills it. nb_iter does not enter the estimate: each")
	fmt.Fprintln(w, "  PGD step's graph is freed by its backward unless the loop keeps a reference to it.")
	fmt.Fprintln(w)

	fmt.Fprintf(w, "lang_microbatch_size: the largest micro-batch that fits, %.0f%% of the memory left free\n",
		100*budget.DefaultHeadroomFraction)
	fmt.Fprintf(w, "  %-31s %10s", "GPU", "free")
	for _, p := range precisions {
		fmt.Fprintf(w, " %12s", p)
	}
	fmt.Fprintln(w)
	for g, d := range r.GPUs {
		fmt.Fprintf(w, "  %-31s %10s", d.Name, d.Free().String())
		for p := range precisions {
			fmt.Fprintf(w, " %12s", microText(r.Micro[p][g]))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  * below the PGD batch of %d: without lang_microbatch_size this GPU runs out of memory.\n", pgdBatch)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "What to change")
	fmt.Fprintln(w, "  set lang_microbatch_size to at most the figure for your GPU; the write-up's 1 or 2")
	fmt.Fprintln(w, "  fits every GPU listed, at the price of more, smaller passes than needed;")
	// CUDA autocast runs softmax in fp32 (fp32_set_opt_dtype,
	// aten/src/ATen/autocast_mode.cpp): the encoder's 1500² attention
	// probabilities, most of a clip's graph, stay fp32 with a 16-bit
	// copy beside them for the value matmul.
	fmt.Fprintf(w, "  lang_autocast does not shrink the graph (%s instead of %s per clip): autocast keeps\n",
		r.PerClip[1].String(), r.PerClip[0].String())
	fmt.Fprintln(w, "  the encoder's attention probabilities in fp32 (its softmax) beside a 16-bit copy.")
	return nil
}

func microText(n int) string {
	if n == 0 {
		return "none fits"
	}
	if n < pgdBatch {
		return fmt.Sprintf("%d *", n)
	}
	return fmt.Sprint(n)
}
