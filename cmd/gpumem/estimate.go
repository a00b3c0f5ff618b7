package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// jobFlags are the flags that describe a job, shared by estimate and
// (later) plan.
type jobFlags struct {
	modelFlags
	train, infer      bool
	generate          int
	batch, seq, accum int
	precision         string
	opt, attn, ckpt   string
	loraRank          int64
	loraTargets       string
	qlora             bool
	gpu, memory       string
	images            int
	dropout           bool
	gpus, zero        int
	layout            layoutFlags
}

func (f *jobFlags) register(fs *flag.FlagSet) {
	f.modelFlags.register(fs)
	fs.BoolVar(&f.train, "train", false, "a training job (forward, backward, optimizer step)")
	fs.BoolVar(&f.infer, "infer", false, "an inference job (one forward pass without gradients)")
	fs.IntVar(&f.generate, "generate", 0, "with --infer: generate N tokens per sequence with a KV cache")
	fs.IntVar(&f.batch, "batch", 1, "micro-batch size in sequences")
	fs.IntVar(&f.seq, "seq", 2048, "sequence length in tokens (the prompt with --generate)")
	fs.IntVar(&f.accum, "grad-accum", 1, "gradient accumulation steps")
	fs.StringVar(&f.precision, "precision", "", "fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8 (default bf16-mixed to train, bf16 to infer)")
	fs.StringVar(&f.opt, "optimizer", "adamw", "adamw, adam, adamw8bit, paged_adamw_8bit, adafactor, sgd, lion, ... (Hugging Face names)")
	fs.StringVar(&f.attn, "attention", "sdpa", "eager, sdpa or flash")
	fs.StringVar(&f.ckpt, "checkpointing", "none", "none, selective, full or offload")
	fs.Int64Var(&f.loraRank, "lora-rank", 0, "train LoRA adapters of this rank (base frozen)")
	fs.StringVar(&f.loraTargets, "lora-targets", "", "with --lora-rank or --qlora: PEFT's target_modules, comma-separated (q_proj,v_proj; all-linear); default: PEFT's for the family")
	fs.BoolVar(&f.qlora, "qlora", false, "store the base linear weights in NF4 with double quantization (QLoRA)")
	fs.IntVar(&f.images, "images", 0, "images per sequence (multimodal models)")
	fs.BoolVar(&f.dropout, "dropout", false, "with --train: the model trains with dropout > 0 (BERT, T5, OPT, GPT-2 by their configs); CUDA keeps a 1-byte mask per dropped element")
	fs.IntVar(&f.gpus, "gpus", 1, "GPUs per node (data-parallel ranks, with --zero the ranks state is sharded over); the estimate is per GPU")
	fs.IntVar(&f.zero, "zero", 0, "DeepSpeed ZeRO stage 0-3 (see --fsdp for PyTorch FSDP)")
	f.layout.register(fs)
	fs.StringVar(&f.gpu, "gpu", "", "check the fit on this GPU (e.g. h100, a100-80gb, \"NVIDIA GeForce RTX 4090\"; see gpumem devices)")
	fs.StringVar(&f.memory, "memory", "", "check the fit in this much free memory (e.g. 80GiB, 24GB)")
}

// job builds the budget.Job the flags describe, and the device to check
// it against (Capacity zero when none was named).
func (f *jobFlags) job() (budget.Job, gpumem.Device, error) {
	s, err := f.load()
	if err != nil {
		return budget.Job{}, gpumem.Device{}, err
	}
	return f.jobFor(s)
}

// jobFor builds the budget.Job the flags describe for the model s, which
// the caller has loaded (gpumem serve reads an inline config.json).
func (f *jobFlags) jobFor(s model.Spec) (budget.Job, gpumem.Device, error) {
	var j budget.Job
	var dev gpumem.Device
	var err error
	switch {
	case f.train == f.infer:
		return j, dev, fmt.Errorf("%w: give one of --train and --infer", errUsage)
	case f.train:
		j.Mode = budget.Training
	case f.generate > 0:
		j.Mode = budget.Generation
	default:
		j.Mode = budget.Prefill
	}
	prec := f.precision
	if prec == "" {
		prec = "bf16"
		if f.train {
			prec = "bf16-mixed"
		}
	}
	if j.Precision, err = budget.ParsePrecision(prec); err != nil {
		return j, dev, fmt.Errorf("%w: --precision %q: want fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8", errUsage, prec)
	}
	if f.train {
		o, ok := optimizer.Lookup(f.opt)
		if !ok {
			return j, dev, fmt.Errorf("%w: --optimizer %q is not modelled (try adamw, adamw8bit, adafactor, sgd, lion)", errUsage, f.opt)
		}
		j.Optimizer = o
	}
	if j.Attention, err = parseAttention(f.attn); err != nil {
		return j, dev, err
	}
	if j.Checkpointing, err = parseCheckpointing(f.ckpt); err != nil {
		return j, dev, err
	}
	ft := model.Finetune{Model: s}
	if f.loraRank < 0 {
		return j, dev, fmt.Errorf("%w: --lora-rank %d: must not be negative", errUsage, f.loraRank)
	}
	if f.loraRank > 0 || f.qlora {
		rank := f.loraRank
		if rank == 0 {
			rank = 64 // the QLoRA paper's rank for its Guanaco runs
		}
		ft.LoRA = model.LoRA{Rank: rank}
		if f.loraTargets != "" {
			if ft.LoRA.Targets, err = splitTargets(f.loraTargets); err != nil {
				return j, dev, err
			}
		}
	} else if f.loraTargets != "" {
		return j, dev, fmt.Errorf("%w: --lora-targets %s: give --lora-rank or --qlora too", errUsage, f.loraTargets)
	}
	if f.qlora {
		ft.Quant = gpumem.NF4
		ft.Blockwise = gpumem.Blockwise{Nested: true}
	}
	if j.Model, err = budget.NewModel(ft); err != nil {
		return j, dev, err
	}
	j.Batch, j.SeqLen, j.Generate, j.GradAccum, j.Images = f.batch, f.seq, f.generate, f.accum, f.images
	j.Dropout = f.dropout && f.train
	par, off, err := f.layout.layout(f.gpus, f.zero)
	if err != nil {
		return j, dev, err
	}
	j.Parallel, j.Offload = par, j.Offload|off
	switch {
	case f.gpu != "" && f.memory != "":
		return j, dev, fmt.Errorf("%w: give one of --gpu and --memory", errUsage)
	case f.gpu != "":
		d, ok := gpumem.LookupDevice(f.gpu)
		if !ok {
			return j, dev, fmt.Errorf("%w: --gpu %q: not in the catalog (see gpumem devices, or give --memory)", errUsage, f.gpu)
		}
		dev, j.Device = d, d
	case f.memory != "":
		b, err := gpumem.ParseBytes(f.memory)
		if err != nil {
			return j, dev, fmt.Errorf("%w: --memory: %v", errUsage, err)
		}
		dev = gpumem.Device{Name: f.memory + " of free memory", Capacity: b}
	}
	return j, dev, nil
}

func runEstimate(args []string, _ io.Reader, out, _ io.Writer) error {
	fs := newFlags("estimate", out)
	var jf jobFlags
	jf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	var cf chartFlags
	cf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(fs); err != nil {
		return err
	}
	j, dev, err := jf.job()
	if err != nil {
		return err
	}
	e, err := estimate(j, dev)
	if err != nil {
		return err
	}
	if err := cf.write(j, dev, "as given"); err != nil {
		return err
	}
	if *asJSON {
		if err := e.writeJSON(out); err != nil {
			return err
		}
		return e.verdict()
	}
	need, fits, shortfall := e.need, e.fits, e.shortfall
	total, trainable := j.Model.Params()
	fmt.Fprintf(out, "%s: %s, batch %d × %d tokens, %s precision", describe(j), j.Mode, j.Batch, j.SeqLen, j.Precision)
	if j.Optimizer != nil {
		fmt.Fprintf(out, ", %s", j.Optimizer)
	}
	fmt.Fprintf(out, "\nparameters %s, trainable %s\n", group3(total), group3(trainable))
	if j.Parallel.GPUs() > 1 {
		fmt.Fprintf(out, "layout %s over %d GPUs; figures for one GPU", j.Parallel.Describe(), j.Parallel.GPUs())
		if j.Parallel.PipelineParallel > 1 {
			fmt.Fprintf(out, " (pipeline stage %d, the most loaded)", need.Stage)
		}
		fmt.Fprintln(out)
	}
	if need.Host > 0 {
		fmt.Fprintf(out, "host memory: %s per GPU, %s per node\n", need.Host.Human(), need.HostNode.Human())
	}
	fmt.Fprintln(out)
	row := func(name string, b gpumem.Bytes) { fmt.Fprintf(out, "  %-38s %12s\n", name, b.Human()) }
	for _, c := range need.Components() {
		if c.Bytes != 0 {
			row(c.Name, c.Bytes)
		}
	}
	fmt.Fprintln(out)
	row("allocated peak (max_memory_allocated)", need.Allocated())
	row("reserved peak (max_memory_reserved)", need.Reserved())
	row("device peak (nvidia-smi)", need.Device())
	fmt.Fprintf(out, "peak phase: %s\n", need.Phase)
	if dev.Capacity > 0 {
		if fits {
			fmt.Fprintf(out, "fits on %s: %s free, %s left (%.0f%% used)\n", dev.Name, dev.Free().Human(),
				(dev.Free() - need.Device()).Human(), 100*budget.Utilization(need, dev))
		} else {
			d := need.Dominant()
			fmt.Fprintf(out, "does NOT fit on %s: %s free, %s short; the largest component is %s (%s)\n", dev.Name,
				dev.Free().Human(), shortfall.Human(), d.Name, d.Bytes.Human())
		}
	}
	return e.verdict()
}

// verdict is nil when the job fits (or no device was named), else an
// error wrapping gpumem.ErrDoesNotFit: the command exits 1.
func (e estimation) verdict() error {
	if e.fits {
		return nil
	}
	return fmt.Errorf("%w on %s: %s short", gpumem.ErrDoesNotFit, e.dev.Name, e.shortfall.Human())
}

// estimation is an estimate and its fit on a device: what gpumem estimate
// prints, and what gpumem serve's /v1/estimate returns.
type estimation struct {
	need      budget.Breakdown
	dev       gpumem.Device // Capacity zero: no device named
	fits      bool          // true when no device was named
	shortfall gpumem.Bytes
}

// estimate estimates j and checks the fit on dev when it has a capacity.
func estimate(j budget.Job, dev gpumem.Device) (estimation, error) {
	need, err := budget.Estimate(j)
	if err != nil {
		return estimation{}, err
	}
	e := estimation{need: need, dev: dev, fits: true}
	if dev.Capacity > 0 {
		e.shortfall, e.fits = budget.Fits(need, dev)
	}
	return e, nil
}

// writeJSON writes the --json form of e (bytes as integers), the same
// bytes for gpumem estimate --json and gpumem serve.
func (e estimation) writeJSON(out io.Writer) error {
	r := map[string]any{
		"allocated_peak": int64(e.need.Allocated()), "reserved_peak": int64(e.need.Reserved()),
		"device_peak": int64(e.need.Device()), "phase": e.need.Phase.String(), "components": components(e.need),
	}
	if e.dev.Capacity > 0 {
		r["device"] = e.dev.Name
		r["free"] = int64(e.dev.Free())
		r["fits"] = e.fits
		r["shortfall"] = int64(e.shortfall)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func describe(j budget.Job) string {
	s := j.Model.Spec()
	if s.Name != "" {
		return s.Name
	}
	return s.Family
}

// splitTargets reads --lora-targets: module names separated by commas.
func splitTargets(s string) ([]string, error) {
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, fmt.Errorf("%w: --lora-targets %q: an empty module name", errUsage, s)
		}
		out = append(out, t)
	}
	return out, nil
}
