package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// The write-up's job: its tool's defaults and printout.
const (
	transformerName = "cogvideox-5b-transformer"
	encoderName     = "cogvideox-5b-text-encoder"
	batch           = 4  // --batch_size
	frames          = 17 // --num_frames
	latentSide      = 32 // the write-up's latent height and width
)

// gpus are the 48 GB-class cards checked; the first is planned for.
var gpus = []string{"l40s", "a40"}

// seedRow is one line of the write-up's tool's summary, in its GB.
type seedRow struct{ name, seed string }

// Report is what the program computes; run prints it.
type Report struct {
	TransformerParams, EncoderParams int64
	TransformerFP16, EncoderFP16     gpumem.Bytes // a frozen copy's weights

	Tokens       int64 // per sample: video patches + text tokens
	TextTokens   int64 // max_text_seq_length
	TextWidth    int64 // the text encoder's width
	Channels     int64 // latent channels
	LatentFrames int64
	Latents      gpumem.Bytes // batch × channels × 32 × 32 × frames in fp16, as the write-up writes it
	TextOutputs  gpumem.Bytes // batch × text tokens × text width in fp16
	Saved        gpumem.Bytes // activations saved for backward at the write-up's batch

	State   budget.Breakdown // model state: one token, every gradient present
	Job     budget.Job       // the write-up's workload
	Need    budget.Breakdown // its estimate
	GPUs    []gpumem.Device
	Short   []gpumem.Bytes // Fits shortfall per GPU (0: fits)
	Offload budget.Plan    // CPU offload only, global batch kept by accumulation
	Both    budget.Plan    // CPU offload and activation checkpointing
}

func frozen(s model.Spec) (budget.Model, error) {
	return budget.NewModel(model.Finetune{Model: s, Train: func(gpumem.Tensor) bool { return false }})
}

func analyze() (*Report, error) {
	tr, ok := model.Lookup(transformerName)
	enc, ok2 := model.Lookup(encoderName)
	if !ok || !ok2 {
		return nil, errors.New("cogvideox-5b: not in the model catalog")
	}
	r := &Report{TransformerParams: tr.Params(), EncoderParams: enc.Params()}
	var err error
	if r.TransformerFP16, err = tr.Bytes(gpumem.FP16); err != nil {
		return nil, err
	}
	if r.EncoderFP16, err = enc.Bytes(gpumem.FP16); err != nil {
		return nil, err
	}

	// CogVideoX's VAE keeps the first frame and compresses the rest
	// TemporalCompression-fold; the transformer cuts each latent frame
	// into Patch × Patch patches and prepends the text tokens.
	tc, p := max(tr.DiT.TemporalCompression, 1), tr.Image.Patch
	if p == 0 || tr.DiT.MaxText == 0 {
		return nil, fmt.Errorf("%s: no patch size or text length in the catalog entry", transformerName)
	}
	r.TextTokens, r.TextWidth, r.Channels = tr.DiT.MaxText, tr.DiT.TextEmbed, tr.Image.Channels
	r.LatentFrames = (frames-1)/tc + 1
	r.Tokens = r.LatentFrames*(latentSide/p)*(latentSide/p) + tr.DiT.MaxText
	if r.Latents, err = gpumem.FP16.Size(batch * tr.Image.Channels * latentSide * latentSide * frames); err != nil {
		return nil, err
	}
	if r.TextOutputs, err = gpumem.FP16.Size(batch * tr.DiT.MaxText * tr.DiT.TextEmbed); err != nil {
		return nil, err
	}
	a, err := tr.Activations(model.Workload{Batch: batch, SeqLen: r.Tokens, DType: gpumem.FP16, Attention: model.SDPA, Train: true})
	if err != nil {
		return nil, err
	}
	r.Saved = a.Total()

	trained, err := budget.ModelOf(tr)
	if err != nil {
		return nil, err
	}
	original, err := frozen(tr)
	if err != nil {
		return nil, err
	}
	text, err := frozen(enc)
	if err != nil {
		return nil, err
	}
	r.Job = budget.Job{
		Model: trained, Mode: budget.Training, Precision: budget.FP16,
		Optimizer: optimizer.AdamW{Impl: optimizer.Fused}, Attention: model.SDPA,
		Batch: batch, SeqLen: int(r.Tokens),
		Copies: []budget.Copy{
			{Name: "original transformer", Model: original},
			{Name: "T5-XXL text encoder", Model: text},
		},
	}
	stateJob := r.Job
	stateJob.Batch, stateJob.SeqLen = 1, 1
	if r.State, err = budget.Estimate(stateJob); err != nil {
		return nil, err
	}
	if r.Need, err = budget.Estimate(r.Job); err != nil {
		return nil, err
	}

	for _, name := range gpus {
		d, ok := gpumem.LookupDevice(name)
		if !ok {
			return nil, fmt.Errorf("%s: not in the device catalog", name)
		}
		short, _ := budget.Fits(r.Need, d)
		r.GPUs, r.Short = append(r.GPUs, d), append(r.Short, short)
	}

	free := r.GPUs[0].Free()
	offload := budget.OffloadCopies | budget.OffloadOptimizer
	if r.Offload, err = budget.Allocate(free, r.Job, &budget.Limits{
		TargetGlobalBatch: batch, Offload: offload,
		Checkpointing: []model.Checkpointing{}, // the write-up's fallback changes nothing else
	}); err != nil {
		return nil, err
	}
	if r.Both, err = budget.Allocate(free, r.Job, &budget.Limits{TargetGlobalBatch: batch, Offload: offload}); err != nil {
		return nil, err
	}
	return r, nil
}

// run computes the report and writes it to w.
func run(w io.Writer) error {
	r, err := analyze()
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "Unlearning a concept from CogVideoX-5b in fp16 with AdamW: the trained")
	fmt.Fprintln(w, "transformer, a frozen original and the frozen T5 text encoder on one GPU")
	fmt.Fprintf(w, "workload: batch %d, %d frames -> %d latent frames x %dx%d patches + %d text tokens = %d tokens\n\n",
		batch, frames, r.LatentFrames, latentSide/2, latentSide/2, r.Tokens-r.LatentFrames*(latentSide/2)*(latentSide/2), r.Tokens)

	gb := func(b gpumem.Bytes) string { return fmt.Sprintf("%.2f", b.GB()) }
	s := r.State
	rows := []struct{ name, seed, ours, note string }{
		{"transformer parameters", "5.00B", fmt.Sprintf("%.2fB", float64(r.TransformerParams)/1e9), ""},
		{"text encoder parameters", "0.22B", fmt.Sprintf("%.2fB", float64(r.EncoderParams)/1e9), "T5-XXL's encoder, not a 220M model"},
		{"model_parameters", "10.44", gb(s.Weights), "the trained transformer"},
		{"gradients", "10.44", gb(s.Gradients), ""},
		{"optimizer_states", "20.88", gb(s.Optimizer), "AdamW's two moments in fp16"},
		{"original_model", "10.44", gb(s.ExtraModels), fmt.Sprintf("transformer %s + encoder %s", gb(r.TransformerFP16), gb(r.EncoderFP16))},
		{"unlearned_model", "10.44", "-", "= model_parameters: the write-up counts it twice"},
		{"batch_latents", "0.14", gb(r.Latents), fmt.Sprintf("%dx%dx%dx%dx%d fp16 = %s", batch, r.Channels, latentSide, latentSide, frames, r.Latents.HumanSI())},
		{"text_encoder_outputs", "0.00", gb(r.TextOutputs), fmt.Sprintf("%dx%dx%d fp16 = %s", batch, r.TextTokens, r.TextWidth, r.TextOutputs.HumanSI())},
		{"activations", "1.50", gb(r.Saved), "saved for backward, the library's per-block model"},
		{"total", "63.78", gb(r.Need.Device()), fmt.Sprintf("device peak at %s, %s", r.Need.Phase, r.Need.Device().String())},
	}
	fmt.Fprintln(w, "The write-up's tool beside the library (GB = 10^9 bytes)")
	fmt.Fprintf(w, "  %-24s %8s %8s\n", "", "write-up", "ours")
	for _, row := range rows {
		fmt.Fprintf(w, "  %-24s %8s %8s  %s\n", row.name, row.seed, row.ours, row.note)
	}
	fmt.Fprintf(w, "  model state alone (the write-up's 52.2 GB table): %s GB\n\n",
		gb(s.Weights+s.Gradients+s.Optimizer+s.ExtraModels))

	fmt.Fprintln(w, "Fit check (the write-up's tool saw 46.07 GB, which matches nvidia-smi's 46068 MiB on these cards)")
	for i, d := range r.GPUs {
		verdict := "fits"
		if r.Short[i] > 0 {
			verdict = "does not fit: short by " + r.Short[i].String()
		}
		fmt.Fprintf(w, "  %-12s %s free to CUDA, needs %s: %s\n", d.Name, d.Free().String(), r.Need.Device().String(), verdict)
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "Fallback on the %s: CPU offload allowed, global batch %d kept by accumulation\n", r.GPUs[0].Name, batch)
	printPlan(w, r.Offload)
	fmt.Fprintf(w, "  host memory: %s\n", r.Offload.Need.Host.HumanSI())
	fmt.Fprintln(w, "Allowing activation checkpointing as well:")
	printPlan(w, r.Both)
	fmt.Fprintln(w)

	fmt.Fprintln(w, "What to change")
	fmt.Fprintf(w, "  - count each model once and from its inventory: %s GB of model state. The write-up's\n",
		gb(s.Weights+s.Gradients+s.Optimizer+s.ExtraModels))
	fmt.Fprintf(w, "    table takes the T5-XXL encoder (%s GB) for 0.44 GB, and its printout adds the trained\n", gb(r.EncoderFP16))
	fmt.Fprintf(w, "    copy twice; the activations of batch %d (%s GB) are what its 1.50 GB guess misses;\n", batch, gb(r.Saved))
	fmt.Fprintf(w, "  - with --use_cpu_offload, run micro-batch %d with %d accumulation steps (%s on the GPU),\n",
		r.Offload.Batch, r.Offload.GradAccum, r.Offload.Need.Device().String())
	fmt.Fprintf(w, "    or turn on gradient checkpointing to keep micro-batch %d (%s);\n", r.Both.Batch, r.Both.Need.Device().String())
	fmt.Fprintf(w, "  - the write-up's 15-20 GB with offload needs the trained transformer's weights and gradients\n")
	fmt.Fprintf(w, "    (%s GB) off the GPU too: parameter offload, which this estimate does not model.\n", gb(s.Weights+s.Gradients))
	return nil
}

func printPlan(w io.Writer, p budget.Plan) {
	for _, l := range strings.Split(strings.TrimRight(p.String(), "\n"), "\n") {
		fmt.Fprintln(w, "  "+l)
	}
}
