package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/gpumem/gpumem/request"
)

const allowHelp = `changes the planner may make, comma-separated, tried in this order within each kind:
  sdpa, flash, eager                  attention kernels (default: sdpa)
  heads=N                             eager attention N heads at a time
  selective, full, every-k, offload-activations
                                      checkpointing policies (default: full, training only)
  fused-loss, cce, chunked-loss       losses that never hold every logit: Liger's fused linear
                                      cross entropy, cut cross-entropy, torchtune's chunked output
                                      (8 chunks) (training only)
  adamw8bit, paged_adamw_8bit, adafactor, lion, sgd, ...
                                      optimizer substitutes (Hugging Face names)
  bf16, fp16, bf16-mixed, ...         precision substitutes
  offload, offload-optimizer, offload-copies
                                      keep optimizer state / frozen models in host memory
  lora, qlora                         train LoRA adapters (rank --lora-rank or 16), on NF4 weights for qlora
  none                                allow nothing beyond the batch (and --max-seq)`

func runPlan(args []string, _ io.Reader, out, errOut io.Writer) error {
	fs := newFlags("plan", out)
	var jf request.Flags
	jf.Register(fs)
	target := fs.Int("target-batch", 0, "sequences per optimizer step: sets the gradient accumulation")
	minBatch := fs.Int("min-batch", 0, "smallest micro-batch (default 1)")
	maxBatch := fs.Int("max-batch", 0, "largest micro-batch (default the target batch, else 4096)")
	minSeq := fs.Int("min-seq", 0, "with --max-seq: shortest sequence (default 1)")
	maxSeq := fs.Int("max-seq", 0, "let the sequence length vary up to this many tokens (longest first)")
	allow := fs.String("allow", "", allowHelp)
	maximize := fs.String("maximize", "", "what the --allow changes are for: seq (the longest sequence, with --max-seq), batch (the largest micro-batch) or none (the fewest changes that fit the job as given); default seq with --max-seq, else none")
	headroom := fs.String("headroom", "", "memory to leave unused: a fraction of the free memory (0.05) or a size (2GiB); default 5%")
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	dsFile := fs.String("deepspeed", "", "also write the plan's DeepSpeed config JSON to this file (training)")
	hfArgs := fs.Bool("hf-args", false, "also print the Hugging Face TrainingArguments flags of the plan (training)")
	accFile := fs.String("accelerate", "", "also write the plan's accelerate FSDP config YAML to this file (with --fsdp)")
	megatron := fs.Bool("megatron", false, "also print the plan's Megatron-LM flags (tensor/pipeline layouts)")
	concurrency := fs.Float64("concurrency", 0, "with --runtime vllm: requests of --max-model-len vLLM must hold at once; plan prints the least --gpu-memory-utilization for it and the longest --max-model-len at the utilization given")
	statesOnly := fs.Bool("states-only", false, "with --model gpt:largest: count the model states alone (ZeRO paper: 16 bytes per parameter with mixed-precision Adam, sharded by the given layout) against the whole --gpu memory")
	var cf chartFlags
	cf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(fs); err != nil {
		return err
	}
	jf.Layout.SetExplicit(fs)
	if err := jf.CheckGiven(fs); err != nil {
		return err
	}
	if err := checkPlanGiven(fs, &jf, *allow); err != nil {
		return err
	}
	if isOllama(jf.Llama.Runtime) {
		// Ollama's placement: the layers that fit at --ctx-size and the
		// longest context with all of them (budget.OllamaLayers).
		if !jf.Train && !jf.LoadOnly {
			jf.Infer = true
		}
		gpus := jf.GPUs
		jf.GPUs = 1 // the GPUs are Ollama's to fill, not a data-parallel layout
		j, dev, err := jf.Job()
		if err != nil {
			return err
		}
		p, _, err := planOllama(j, dev, gpus, func(s string) string { return "--" + s })
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(out, p.json())
		}
		p.write(out)
		return nil
	}
	if jf.LoadOnly {
		return fmt.Errorf("%w: --load: plan searches the batch and sequence of a run; a load-only job has none (gpumem estimate --load answers whether it loads)", request.ErrUsage)
	}
	largest := request.IsLargest(jf.Name)
	if largest {
		jf.Name = request.LargestPlaceholder
	} else if *statesOnly {
		return fmt.Errorf("%w: --states-only: only with --model %s", request.ErrUsage, request.LargestName)
	}
	if jf.Llama.Runtime == "" && jf.GGUF != "" {
		// plan searches PyTorch's knobs; a GGUF file is planned as
		// transformers would run it unless --runtime llama.cpp is given.
		jf.Llama.Runtime = "pytorch"
	}
	j, dev, err := jf.Job()
	if err != nil {
		return err
	}
	if j.Runtime == budget.LlamaCpp {
		return fmt.Errorf("%w: --runtime %s: plan searches the batch, sequence and memory savers of a PyTorch job; for llama.cpp give gpumem estimate its --n-gpu-layers and --ctx-size", request.ErrUsage, jf.Llama.Runtime)
	}
	if j.Runtime == budget.VLLM && *concurrency != 0 {
		p, err := planVLLM(j, dev, *concurrency)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(out, p.json())
		}
		p.write(out, j)
		return nil
	}
	if *concurrency != 0 {
		return fmt.Errorf("%w: --concurrency %g: only with --runtime vllm", request.ErrUsage, *concurrency)
	}
	if j.Runtime == budget.VLLM || j.Runtime == budget.SGLang {
		return fmt.Errorf("%w: --runtime %s: plan searches the batch, sequence and memory savers of a PyTorch job; for vLLM give --concurrency N (or gpumem estimate its --gpu-memory-utilization and --max-model-len), for SGLang gpumem estimate its --mem-fraction-static", request.ErrUsage, jf.Llama.Runtime)
	}
	if err := checkJob(j); err != nil {
		return err
	}
	if dev.Capacity == 0 {
		return fmt.Errorf("%w: give --gpu NAME or --memory SIZE to plan for", request.ErrUsage)
	}
	lim := budget.Limits{TargetGlobalBatch: *target, MinBatch: *minBatch, MaxBatch: *maxBatch, MinSeqLen: *minSeq, MaxSeqLen: *maxSeq}
	if err := parseAllow(*allow, &jf, &lim); err != nil {
		return err
	}
	if lim.Objective, err = parseObjective(*maximize, &lim); err != nil {
		return err
	}
	if err := parseHeadroom(*headroom, &lim); err != nil {
		return err
	}
	hr := request.HeadroomOf(&lim, dev.Free())
	if largest {
		fixed := j.Parallel.GPUs() <= 1 || jf.Layout.Explicit
		r, err := planLargest(j, dev, jf.Layout.Nodes, jf.GPUs, fixed, *statesOnly, &lim, "--states-only")
		if err != nil {
			return err
		}
		return r.write(out, dev, *asJSON)
	}
	var p budget.Plan
	if j.Parallel.GPUs() > 1 && !jf.Layout.Explicit {
		// GPUs but no layout: choose one, least communication first.
		p, err = budget.AllocateFleet(budget.Fleet{Nodes: jf.Layout.Nodes, GPUsPerNode: jf.GPUs, Free: dev.Free()}, j, &lim)
	} else {
		p, err = budget.Allocate(dev.Free(), j, &lim)
	}
	var short *budget.InsufficientMemoryError
	if errors.As(err, &short) {
		if w := contextWarning(j, seqFlags(j)); w != "" {
			fmt.Fprintf(errOut, "gpumem plan: %s\n", w)
		}
		if err := cf.write(j, dev, "as given", hr); err != nil {
			return err
		}
		if *asJSON {
			if werr := writeJSON(out, planErrorJSON(short, dev)); werr != nil {
				return werr
			}
			return fmt.Errorf("%w on %s with %s: %s short", gpumem.ErrDoesNotFit, request.Clean(dev.Name), hr.Name, short.Shortfall.String())
		}
		fmt.Fprintf(out, "%s does NOT fit on %s (%s free) with %s\n", request.Describe(j), request.Clean(dev.Name), dev.Free().String(), hr)
		fmt.Fprintln(out, short)
		fmt.Fprintln(out)
		fmt.Fprint(out, budget.Plan{Ladder: short.Ladder}.LadderString())
		return fmt.Errorf("%w on %s with %s: %s short", gpumem.ErrDoesNotFit, request.Clean(dev.Name), hr.Name, short.Shortfall.String())
	}
	if err != nil {
		return err
	}
	if w := planContextWarning(p, *maxSeq > 0 || *minSeq > 0); w != "" {
		fmt.Fprintf(errOut, "gpumem plan: %s\n", w)
	}
	if err := cf.write(p.Job, dev, "planned", hr); err != nil {
		return err
	}
	if *dsFile != "" {
		c, err := p.DeepSpeed()
		if err != nil {
			return fmt.Errorf("%w: --deepspeed: %v", request.ErrUsage, err)
		}
		raw, err := c.MarshalIndent()
		if err != nil {
			return err
		}
		if err := os.WriteFile(*dsFile, append(raw, '\n'), 0o644); err != nil {
			return err
		}
	}
	if *accFile != "" {
		c, err := p.Accelerate()
		if err != nil {
			return fmt.Errorf("%w: --accelerate: %v", request.ErrUsage, err)
		}
		y, err := c.YAML()
		if err != nil {
			return err
		}
		if err := os.WriteFile(*accFile, y, 0o644); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(out, planJSON(p, dev))
	}
	fmt.Fprintf(out, "%s on %s (%s free), with %s\n", request.Describe(j), request.Clean(dev.Name), dev.Free().String(), hr)
	fmt.Fprint(out, p)
	if *hfArgs {
		line, err := hfArgsLine(p)
		if err != nil {
			return fmt.Errorf("%w: --hf-args: %v", request.ErrUsage, err)
		}
		fmt.Fprintf(out, "TrainingArguments: %s\n", line)
	}
	if *megatron {
		args, err := p.Megatron()
		if err != nil {
			return fmt.Errorf("%w: --megatron: %v", request.ErrUsage, err)
		}
		fmt.Fprintf(out, "Megatron-LM: %s\n", strings.Join(args, " "))
	}
	return nil
}

// hfArgsLine is what plan --hf-args prints after "TrainingArguments: ":
// the plan's Hugging Face TrainingArguments as flags, sorted by name.
func hfArgsLine(p budget.Plan) (string, error) {
	a, err := p.HFTrainingArguments()
	if err != nil {
		return "", err
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	flags := make([]string, 0, len(keys))
	for _, k := range keys {
		flags = append(flags, fmt.Sprintf("--%s %v", k, a[k]))
	}
	return strings.Join(flags, " "), nil
}

// planContextWarning is contextWarning for the plan p; with the
// sequence length varied (--max-seq, --min-seq), it names the --max-seq
// that keeps within the model's context.
func planContextWarning(p budget.Plan, varied bool) string {
	if !varied {
		return contextWarning(p.Job, seqFlags(p.Job))
	}
	w := contextWarning(p.Job, "the plan's sequence length")
	if w == "" {
		return ""
	}
	limit := p.Job.Model.Spec().LM().MaxPositions - int64(p.Job.Generate)
	if limit < 1 {
		return w
	}
	return w + fmt.Sprintf("; give --max-seq %d to stay within them", limit)
}

// checkPlanGiven refuses plan flags that cannot change the plan for the
// mode asked for (see Flags.checkGiven): for an inference job a
// target batch (it sets gradient accumulation), --allow items that only
// training uses (optimizers, checkpointing, optimizer offload), and the
// training configs (--deepspeed, --hf-args, --accelerate, --megatron);
// for training, --grad-accum with --target-batch, which sets it.
func checkPlanGiven(fs *flag.FlagSet, jf *request.Flags, allow string) error {
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	if jf.Train == jf.Infer {
		return nil
	}
	if jf.Train {
		if v, ok := given["grad-accum"]; ok && jf.Accum != 1 && given["target-batch"] != "" && given["target-batch"] != "0" {
			return fmt.Errorf("%w: --grad-accum %s: --target-batch %s sets the accumulation steps (give one of them)", request.ErrUsage, v, given["target-batch"])
		}
		return nil
	}
	if v, ok := given["target-batch"]; ok && v != "0" {
		return fmt.Errorf("%w: --target-batch %s: it sets gradient accumulation, which an inference job does not have (give --train, or leave --target-batch out)", request.ErrUsage, v)
	}
	for _, name := range []string{"deepspeed", "hf-args", "accelerate", "megatron"} {
		if v, ok := given[name]; ok && v != "false" {
			return fmt.Errorf("%w: --%s: it describes a training job (give --train, or leave --%s out)", request.ErrUsage, name, name)
		}
	}
	for _, item := range strings.Split(allow, ",") {
		item = strings.ToLower(strings.TrimSpace(item))
		training := false
		switch {
		case item == "offload" || item == "offload-optimizer":
			training = true
		case allowLoss(item) != nil:
			training = true
		case item == "" || item == "none" || item == "offload-copies" || item == "lora" || item == "qlora" || strings.HasPrefix(item, "heads="):
		default:
			if _, err := request.ParseAttention(item); err == nil {
				continue
			}
			if _, err := request.ParseCheckpointing(strings.TrimSuffix(item, "-activations")); err == nil {
				training = true
			} else if _, err := budget.ParsePrecision(item); err == nil {
				continue
			} else if _, ok := optimizer.Lookup(item); ok {
				training = true
			}
		}
		if training {
			return fmt.Errorf("%w: --allow %q: only a training job has optimizer state or saved activations to change (give --train, or leave it out)", request.ErrUsage, item)
		}
	}
	return nil
}

// parseAllow reads --allow into lim.
func parseAllow(s string, jf *request.Flags, lim *budget.Limits) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.ToLower(strings.TrimSpace(item))
		switch {
		case item == "":
		case item == "none":
			lim.Attention = []model.Attention{}
			lim.Checkpointing = []model.Checkpointing{}
		case item == "offload":
			lim.Offload |= budget.OffloadCopies | budget.OffloadOptimizer
		case item == "offload-optimizer":
			lim.Offload |= budget.OffloadOptimizer
		case item == "offload-copies":
			lim.Offload |= budget.OffloadCopies
		case strings.HasPrefix(item, "heads="):
			n, err := strconv.Atoi(strings.TrimPrefix(item, "heads="))
			if err != nil || n < 1 {
				return fmt.Errorf("%w: --allow %q: want heads=N with N ≥ 1", request.ErrUsage, item)
			}
			lim.HeadChunks = append(lim.HeadChunks, n)
		case allowLoss(item) != nil:
			lim.Losses = append(lim.Losses, *allowLoss(item))
		case item == "lora" || item == "qlora":
			alt, err := loraAlternative(jf, item == "qlora")
			if err != nil {
				return err
			}
			lim.Models = append(lim.Models, alt)
		default:
			if k, err := request.ParseAttention(item); err == nil {
				lim.Attention = append(nonNil(lim.Attention), k)
				continue
			}
			if c, err := request.ParseCheckpointing(strings.TrimSuffix(item, "-activations")); err == nil && item != "none" {
				lim.Checkpointing = append(nonNil(lim.Checkpointing), c)
				continue
			}
			if p, err := budget.ParsePrecision(item); err == nil {
				lim.Precisions = append(lim.Precisions, p)
				continue
			}
			if o, ok := optimizer.Lookup(item); ok {
				lim.Optimizers = append(lim.Optimizers, o)
				continue
			}
			return fmt.Errorf("%w: --allow %q is not a change gpumem knows (see gpumem plan -h)", request.ErrUsage, item)
		}
	}
	return nil
}

// allowLoss returns the loss an --allow item names (fused-loss or
// liger, cce, chunked-loss), or nil.
func allowLoss(item string) *model.Loss {
	switch item {
	case "fused-loss", "liger":
		return &model.Loss{Kind: model.FusedLinearLoss}
	case "cce":
		return &model.Loss{Kind: model.CutCrossEntropyLoss}
	case "chunked-loss":
		return &model.Loss{Kind: model.ChunkedLoss, Chunks: model.DefaultLossChunks}
	}
	return nil
}

// parseObjective reads --maximize for the limits lim: seq (which needs
// --max-seq or --min-seq), batch, none, or "" for the default (seq with
// --max-seq).
func parseObjective(s string, lim *budget.Limits) (budget.Objective, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return budget.ObjectiveDefault, nil
	case "seq", "seq-len", "max-seq":
		if lim.MaxSeqLen == 0 && lim.MinSeqLen == 0 {
			return 0, fmt.Errorf("%w: --maximize %s: give --max-seq, the longest sequence to try", request.ErrUsage, s)
		}
		return budget.MaximizeSeqLen, nil
	case "batch", "max-batch":
		return budget.MaximizeBatch, nil
	case "none", "fit":
		return budget.FitAsGiven, nil
	}
	return 0, fmt.Errorf("%w: --maximize %q: want seq, batch or none", request.ErrUsage, s)
}

// nonNil returns s, or an empty non-nil slice for nil: a listed change
// replaces the Limits' defaults, which a nil list means.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// loraAlternative prepares the job's model with LoRA adapters (QLoRA:
// on NF4 base weights).
func loraAlternative(jf *request.Flags, quant bool) (budget.Alternative, error) {
	s, err := jf.Load()
	if err != nil {
		return budget.Alternative{}, err
	}
	rank := jf.LoRARank
	if rank == 0 {
		rank = 16
	}
	ft := model.Finetune{Model: s, LoRA: model.LoRA{Rank: rank}}
	if jf.LoRATargets != "" {
		if ft.LoRA.Targets, err = request.SplitTargets(jf.LoRATargets); err != nil {
			return budget.Alternative{}, err
		}
	}
	name := "LoRA r=" + strconv.FormatInt(rank, 10)
	if quant {
		ft.Quant, ft.Blockwise = gpumem.NF4, gpumem.Blockwise{Nested: true}
		ft.Unquantized = gpumem.BF16 // the QLoRA recipe's torch_dtype (Finetune.Unquantized)
		if p, err := budget.ParsePrecision(jf.Precision); err == nil {
			_, _, _, ft.Unquantized = p.DTypes()
		}
		name = "QLoRA r=" + strconv.FormatInt(rank, 10)
	}
	m, err := budget.NewModel(ft)
	if err != nil && jf.LoRATargets == "" && strings.Contains(err.Error(), "target modules") {
		ft.LoRA.Targets = []string{"all-linear"}
		m, err = budget.NewModel(ft)
	}
	if err != nil {
		return budget.Alternative{}, err
	}
	return budget.Alternative{Name: name, Model: m}, nil
}

// parseHeadroom reads --headroom: a fraction below 1, or a size.
func parseHeadroom(s string, lim *budget.Limits) error {
	if s == "" {
		return nil
	}
	if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
		if !(f >= 0 && f < 1) {
			return fmt.Errorf("%w: --headroom %q: a fraction must be in [0, 1) (for a size, give a unit: %sGiB)", request.ErrUsage, s, strings.TrimSpace(s))
		}
		lim.HeadroomFraction = f
		if f == 0 {
			lim.HeadroomFraction = -1
		}
		return nil
	}
	b, err := gpumem.ParseBytes(s)
	if err != nil || b < 0 {
		return fmt.Errorf("%w: --headroom %q: want a fraction (0.05) or a size (2GiB)", request.ErrUsage, s)
	}
	lim.Headroom, lim.HeadroomFraction = b, -1
	return nil
}

// rungJSON is one ladder rung on the wire.
type rungJSON struct {
	Change        string      `json:"change"`
	AllocatedPeak int64       `json:"allocated_peak"`
	DevicePeak    int64       `json:"device_peak"`
	Saving        int64       `json:"saving"`
	Cost          budget.Cost `json:"cost"`
	Fits          bool        `json:"fits"`
	Applied       bool        `json:"applied"`
	MaxSeqLen     int         `json:"max_seq_len,omitempty"`
	MaxBatch      int         `json:"max_batch,omitempty"`
}

func ladderJSON(rs []budget.Rung) []rungJSON {
	out := make([]rungJSON, len(rs))
	for i, r := range rs {
		out[i] = rungJSON{r.Change, int64(r.Allocated), int64(r.Device), int64(r.Saving), r.Cost, r.Fits, r.Applied, r.LongestSeqLen, r.LargestBatch}
	}
	return out
}

// components maps each component's JSON name to its bytes.
func components(b budget.Breakdown) map[string]int64 {
	m := map[string]int64{}
	for _, c := range b.Components() {
		m[c.Name] = int64(c.Bytes)
	}
	return m
}

func planJSON(p budget.Plan, dev gpumem.Device) map[string]any {
	opt := ""
	if p.Optimizer != nil {
		opt = p.Optimizer.String()
	}
	r := map[string]any{
		"fits": true, "device": dev.Name, "free": int64(dev.Free()),
		"batch": p.Batch, "seq_len": p.SeqLen, "grad_accum": p.GradAccum, "global_batch": p.Batch * p.GradAccum,
		"checkpointing": p.Checkpointing.String(), "attention": p.Attention.String(), "head_chunk": p.HeadChunk,
		"optimizer": opt, "precision": p.Precision.String(), "offload": p.Offload.String(), "model": p.ModelName, "loss": p.Job.Loss.String(),
		"need": components(p.Need), "allocated_peak": int64(p.Need.Allocated()), "reserved_peak": int64(p.Need.Reserved()),
		"device_peak": int64(p.Need.Device()), "host": int64(p.Need.Host), "phase": p.Need.Phase.String(),
		"headroom": int64(p.Headroom), "min_headroom": int64(p.MinHeadroom), "reason": p.Reason.String(), "limiting": p.Limiting, "ladder": ladderJSON(p.Ladder),
		"objective": p.Objective.String(),
	}
	var bufs []map[string]any
	for _, b := range p.Buffers {
		bufs = append(bufs, map[string]any{"name": b.Name, "entries": b.Entries, "entry_bytes": int64(b.EntryBytes), "bytes": int64(b.Bytes)})
	}
	if bufs != nil {
		r["buffers"] = bufs
	}
	return r
}

func planErrorJSON(e *budget.InsufficientMemoryError, dev gpumem.Device) map[string]any {
	return map[string]any{
		"fits": false, "device": dev.Name, "free": int64(dev.Free()), "shortfall": int64(e.Shortfall),
		"dominant": e.Dominant.Name, "need": components(e.Need), "device_peak": int64(e.Need.Device()),
		"hints": e.Hints, "ladder": ladderJSON(e.Ladder), "error": e.Error(),
	}
}
