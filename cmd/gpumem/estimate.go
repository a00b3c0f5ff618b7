package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/internal/checked"
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
	cuda              string
	lazy              optBool
}

// optBool is a boolean flag that remembers whether it was given:
// --lazy-loading, --lazy-loading=false, or neither (the default).
type optBool struct{ set, v bool }

func (b *optBool) String() string {
	if b == nil || !b.set {
		return ""
	}
	return strconv.FormatBool(b.v)
}

func (b *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	b.set, b.v = true, v
	return nil
}

func (b *optBool) IsBoolFlag() bool { return true }

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
	fs.StringVar(&f.cuda, "cuda", "", "the CUDA version of the PyTorch build (torch.version.cuda: 12.1, or the wheel's cu121), which sizes the CUDA context (default: a current CUDA 12)")
	fs.Var(&f.lazy, "lazy-loading", "CUDA lazy module loading (CUDA_MODULE_LOADING=LAZY); --lazy-loading=false for EAGER, whose context holds every kernel (default: lazy from CUDA 11.7, eager before)")
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
	if f.cuda != "" {
		if j.Overhead.CUDA, err = budget.ParseCUDAVersion(f.cuda); err != nil {
			return j, dev, fmt.Errorf("%w: --cuda %q: want a CUDA version such as 12.1 (or a wheel tag such as cu121)", errUsage, f.cuda)
		}
	}
	if f.lazy.set {
		j.Overhead.Loading = budget.LoadingEager
		if f.lazy.v {
			j.Overhead.Loading = budget.LoadingLazy
		}
	}
	switch {
	case f.gpu != "" && f.memory != "":
		return j, dev, fmt.Errorf("%w: give one of --gpu and --memory", errUsage)
	case f.gpu != "":
		d, ok := gpumem.LookupDevice(f.gpu)
		if !ok {
			return j, dev, fmt.Errorf("%w: --gpu %q: not in the catalog%s (see gpumem devices, or give --memory)", errUsage, f.gpu, suggestGPU(f.gpu))
		}
		dev, j.Device = d, d
	case f.memory != "":
		b, err := gpumem.ParseBytes(f.memory)
		if err != nil {
			return j, dev, fmt.Errorf("%w: --memory: %v", errUsage, err)
		}
		if b < 1 {
			// Zero is not "no GPU named": that would pass any job.
			return j, dev, fmt.Errorf("%w: --memory %q: want a size of at least 1B, such as 80GiB", errUsage, f.memory)
		}
		dev = gpumem.Device{Name: f.memory + " of free memory", Capacity: b}
	}
	return j, dev, nil
}

// maxCount is the largest --gpus, --nodes, --tp, --pp, --vpp, --cp and
// --ep layoutFlags.layout accepts.
const maxCount = 1 << 16

// checkGiven refuses, before any work, flags given on the command line
// that cannot change the answer for the mode asked for (an optimizer for
// an inference job), and layout counts out of range. A flag set to the
// value that does nothing in every mode (--dropout=false, --grad-accum 1,
// --generate 0, --zero 0, --checkpointing none) passes. gpumem serve
// does not call it: a request's fields are not "given" flags.
func (f *jobFlags) checkGiven(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, c := range []struct {
		name string
		v    int
	}{{"gpus", f.gpus}, {"nodes", f.layout.nodes}, {"tp", f.layout.tp}, {"pp", f.layout.pp}, {"vpp", f.layout.vpp},
		{"cp", f.layout.cp}, {"ep", f.layout.ep}} {
		if given[c.name] && (c.v < 1 || c.v > maxCount) {
			return fmt.Errorf("%w: --%s %d: want 1 to %d", errUsage, c.name, c.v, maxCount)
		}
	}
	if f.train == f.infer {
		return nil // jobFor asks for one of them
	}
	if f.train {
		if given["generate"] && f.generate != 0 {
			return fmt.Errorf("%w: --generate %d: a training job generates no tokens (give --infer, or leave --generate out)", errUsage, f.generate)
		}
		return nil
	}
	const leave = "give --train, or leave %s out"
	switch {
	case given["optimizer"]:
		return fmt.Errorf("%w: --optimizer %s: an inference job keeps no optimizer state ("+leave+")", errUsage, f.opt, "--optimizer")
	case given["grad-accum"] && f.accum != 1:
		return fmt.Errorf("%w: --grad-accum %d: an inference job accumulates no gradients ("+leave+")", errUsage, f.accum, "--grad-accum")
	case given["dropout"] && f.dropout:
		return fmt.Errorf("%w: --dropout: dropout masks are kept for the backward pass of a training job only ("+leave+")", errUsage, "--dropout")
	case given["checkpointing"] && f.ckpt != "none":
		return fmt.Errorf("%w: --checkpointing %s: an inference job saves no activations for a backward pass ("+leave+")", errUsage, f.ckpt, "--checkpointing")
	case given["offload"] && (strings.Contains(f.layout.offload, "optimizer") || f.layout.offload == "all"):
		return fmt.Errorf("%w: --offload %s: an inference job has no optimizer state to offload ("+leave+")", errUsage, f.layout.offload, "--offload")
	case given["zero"] && (f.zero == 1 || f.zero == 2):
		return fmt.Errorf("%w: --zero %d: stages 1 and 2 shard optimizer state and gradients, which an inference job does not have (--zero 3 or --tp shard the weights)", errUsage, f.zero)
	case given["fsdp"] && strings.EqualFold(f.layout.fsdp, "shard_grad_op"):
		return fmt.Errorf("%w: --fsdp %s: it shards optimizer state and gradients, which an inference job does not have (full_shard or --tp shard the weights)", errUsage, f.layout.fsdp)
	}
	return nil
}

// checkJob refuses flags the model cannot take: --images for a model
// without a vision tower (it would be ignored).
func checkJob(j budget.Job) error {
	if s := j.Model.Spec(); j.Images > 0 && s.Vision == nil {
		return fmt.Errorf("%w: --images %d: %s has no vision tower (a multimodal model such as llava-1.5-7b takes images)", errUsage, j.Images, describe(j))
	}
	return nil
}

// tokensPerSequence is what a sequence of j holds at its longest: the
// prompt and the generated tokens.
func tokensPerSequence(j budget.Job) int64 { return int64(j.SeqLen) + int64(j.Generate) }

// contextWarning returns a warning when j's sequences hold more tokens
// than its model's max_position_embeddings, or "". what names the flags
// that set them. The estimate stands (memory does not depend on the
// model having been trained at that length); the warning says the model
// was not configured for it, or, with a learned position table (GPT-2,
// OPT, BERT), cannot take it.
func contextWarning(j budget.Job, what string) string {
	lm := j.Model.Spec().LM()
	n := tokensPerSequence(j)
	if lm.MaxPositions <= 0 || n <= lm.MaxPositions {
		return ""
	}
	msg := fmt.Sprintf("warning: %d tokens per sequence (%s) exceed the %d positions %s was configured for (max_position_embeddings)",
		n, what, lm.MaxPositions, describe(j))
	if lm.Positions > 0 {
		return msg + fmt.Sprintf("; its learned position table has %d rows, so the model cannot take them", lm.Positions)
	}
	return msg + "; the estimate is for the tokens given, but the model may not work at that length without RoPE scaling"
}

// seqFlags names the flags that set j's tokens per sequence.
func seqFlags(j budget.Job) string {
	if j.Generate > 0 {
		return fmt.Sprintf("--seq %d + --generate %d", j.SeqLen, j.Generate)
	}
	return fmt.Sprintf("--seq %d", j.SeqLen)
}

// headroom is the memory a fit leaves unused, the same for estimate's
// verdict, the chart's largest value and plan: budget.Limits.HeadroomFor,
// DefaultHeadroom (5% of the free memory) unless --headroom says
// otherwise.
type headroom struct {
	bytes gpumem.Bytes
	name  string // "5% headroom", "2.00 GiB headroom", "2.00 GiB + 5% headroom", "no headroom"
}

// headroomOf returns the headroom lim asks for out of free bytes (nil:
// the default).
func headroomOf(lim *budget.Limits, free gpumem.Bytes) headroom {
	frac, fixed := budget.DefaultHeadroomFraction, gpumem.Bytes(0)
	if lim != nil {
		fixed = max(lim.Headroom, 0)
		switch f := lim.HeadroomFraction; {
		case f < 0:
			frac = 0
		case f > 0:
			frac = f
		}
	}
	hr := headroom{bytes: lim.HeadroomFor(free)}
	pct := strconv.FormatFloat(100*frac, 'g', 4, 64) + "%"
	switch {
	case fixed > 0 && frac > 0:
		hr.name = fixed.Human() + " + " + pct + " headroom"
	case fixed > 0:
		hr.name = fixed.Human() + " headroom"
	case frac > 0:
		hr.name = pct + " headroom"
	default:
		hr.name = "no headroom"
	}
	return hr
}

// defaultHeadroom is budget.DefaultHeadroom(free), named.
func defaultHeadroom(free gpumem.Bytes) headroom { return headroomOf(nil, free) }

// String is the headroom's name with its bytes: "5% headroom (3.96 GiB)".
func (h headroom) String() string {
	if h.bytes == 0 || !strings.Contains(h.name, "%") {
		return h.name
	}
	return h.name + " (" + h.bytes.Human() + ")"
}

func runEstimate(args []string, _ io.Reader, out, errOut io.Writer) error {
	fs := newFlags("estimate", out)
	var jf jobFlags
	jf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	headroomFlag := fs.String("headroom", "", "memory to leave unused when checking the fit: a fraction of the free memory (0.05) or a size (2GiB); 0 for none; default 5%, as plan")
	var cf chartFlags
	cf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(fs); err != nil {
		return err
	}
	if err := jf.checkGiven(fs); err != nil {
		return err
	}
	var lim budget.Limits
	if err := parseHeadroom(*headroomFlag, &lim); err != nil {
		return err
	}
	j, dev, err := jf.job()
	if err != nil {
		return err
	}
	if err := checkJob(j); err != nil {
		return err
	}
	if *headroomFlag != "" && dev.Capacity == 0 {
		return fmt.Errorf("%w: --headroom %s: it applies to the fit on --gpu or --memory (give one, or leave --headroom out)", errUsage, *headroomFlag)
	}
	hr := headroomOf(&lim, dev.Free())
	e, err := estimateWith(j, dev, hr)
	if err != nil {
		return err
	}
	if w := contextWarning(j, seqFlags(j)); w != "" {
		fmt.Fprintf(errOut, "gpumem estimate: %s\n", w)
	}
	if err := cf.write(j, dev, "as given", hr); err != nil {
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
	fmt.Fprintf(out, "CUDA context for %s\n", contextNote(j))
	if dev.Capacity > 0 {
		if fits {
			fmt.Fprintf(out, "fits on %s with %s: %s free, %s left (%.0f%% used)\n", clean(dev.Name), e.headroom, dev.Free().Human(),
				(dev.Free() - need.Device()).Human(), 100*budget.Utilization(need, dev))
		} else {
			d := need.Dominant()
			fmt.Fprintf(out, "does NOT fit on %s with %s: %s free, %s short; the largest component is %s (%s)\n", clean(dev.Name),
				e.headroom, dev.Free().Human(), shortfall.Human(), d.Name, d.Bytes.Human())
		}
	}
	return e.verdict()
}

// contextNote says what the CUDA context was sized for: the GPU's
// compute capability, the CUDA version (assumed 12 without --cuda) and
// the module loading.
func contextNote(j budget.Job) string {
	gpu := "a GPU of unknown generation"
	if c := j.Device.Compute; !c.IsZero() {
		gpu = "compute capability " + c.String()
	}
	cuda := "CUDA 12 (assumed; --cuda)"
	if v := j.Overhead.CUDA; !v.IsZero() {
		cuda = "CUDA " + v.String()
	}
	loading := "eager"
	if j.Overhead.Loading.Lazy(j.Overhead.CUDA) {
		loading = "lazy"
	}
	return fmt.Sprintf("%s, %s, %s module loading", gpu, cuda, loading)
}

// verdict is nil when the job fits (or no device was named), else an
// error wrapping gpumem.ErrDoesNotFit: the command exits 1.
func (e estimation) verdict() error {
	if e.fits {
		return nil
	}
	return fmt.Errorf("%w on %s with %s: %s short", gpumem.ErrDoesNotFit, clean(e.dev.Name), e.headroom.name, e.shortfall.Human())
}

// estimation is an estimate and its fit on a device: what gpumem estimate
// prints, and what gpumem serve's /v1/estimate returns.
type estimation struct {
	need      budget.Breakdown
	dev       gpumem.Device // Capacity zero: no device named
	headroom  headroom      // left unused by a fit
	fits      bool          // true when no device was named
	shortfall gpumem.Bytes  // headroom included
}

// estimate estimates j and checks the fit on dev when it has a capacity,
// with the default headroom (budget.FitsWithHeadroom: the fit plan and
// budget.MaxBatch and MaxSeqLen answer for).
func estimate(j budget.Job, dev gpumem.Device) (estimation, error) {
	return estimateWith(j, dev, defaultHeadroom(dev.Free()))
}

// estimateWith is estimate with the headroom hr: the job fits when its
// device peak plus hr is within the free memory.
func estimateWith(j budget.Job, dev gpumem.Device, hr headroom) (estimation, error) {
	need, err := budget.Estimate(j)
	if err != nil {
		return estimation{}, err
	}
	e := estimation{need: need, dev: dev, headroom: hr, fits: true}
	if dev.Capacity > 0 {
		usable := checked.SatSub(int64(dev.Free()), int64(hr.bytes))
		if short := gpumem.Bytes(checked.SatSub(int64(need.Device()), usable)); short > 0 {
			e.shortfall, e.fits = short, false
		}
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
		r["min_headroom"] = int64(e.headroom.bytes)
		r["fits"] = e.fits
		r["shortfall"] = int64(e.shortfall)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// describe names j's model for people: its name, else its family, with
// anything unprintable escaped (a name comes from a config.json).
func describe(j budget.Job) string {
	s := j.Model.Spec()
	if s.Name != "" {
		return clean(s.Name)
	}
	return clean(s.Family)
}

// clean returns s for printing: unchanged when every rune is printable,
// else with the unprintable ones (control and format characters, line
// breaks, bytes that are not UTF-8) escaped as strconv.Quote does.
func clean(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			q := strconv.Quote(s)
			return q[1 : len(q)-1]
		}
	}
	return s
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
