// Command gpumem tells how much GPU memory a deep-learning job needs,
// where it goes, and what to change so that it fits; and it reads
// out-of-memory messages and memory logs.
//
// Usage:
//
//	gpumem inspect  --model NAME | --config config.json   [--json]
//	gpumem estimate --model NAME --train|--infer [--batch B --seq S ...] [--gpu NAME | --memory 80GiB] [--json] [--chart F.png]
//	gpumem plan     --model NAME --train|--infer --gpu NAME | --memory 24GiB [--target-batch N --max-seq S --allow ...] [--json] [--chart F.png]
//	gpumem oom      [FILE|-]                               [--json]
//	gpumem leak     [--capacity 24GiB | --gpu NAME] [--unit MiB] [--run N] [--json] FILE|-
//	gpumem devices                                         [--json]
//	gpumem accuracy [--data testdata] [--by family|gpu|id]  [--json] [--chart F.png]
//	gpumem serve    [--addr 127.0.0.1:8080] [--max-body 1MiB] [--json]  (HTTP JSON; see README.md)
//
// Run "gpumem COMMAND -h" for a command's flags and examples. Every size
// is printed in binary units (GiB = 2^30 bytes); --json prints integers
// of bytes. The exit status is 0 when the job fits (or the command did
// what was asked), 1 when it does not fit (estimate, plan) or the input
// holds no out-of-memory message (oom) or the estimates miss the accuracy
// gate (accuracy), and 2 for bad flags or input.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gpumem/gpumem"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command args name, with its output escaped (see
// escapeWriter): names, values and lines from input files or the
// command line never reach the terminal as control characters.
func run(args []string, in io.Reader, out, errOut io.Writer) int {
	o, e := &escapeWriter{w: out}, &escapeWriter{w: errOut}
	code := runCommand(args, in, o, e)
	o.Flush()
	e.Flush()
	return code
}

// Exit statuses, the same for every subcommand.
const (
	exitOK         = 0 // the job fits, or the command did what was asked
	exitDoesNotFit = 1 // the answer is no: the job does not fit (estimate, plan), no OOM message in the input (oom), no memory figure in the log (leak), the gate is missed (accuracy)
	exitBadInput   = 2 // bad flags, arguments or input files; the message names the flag or field
)

// command is one subcommand.
type command struct {
	name, summary string
	run           func(args []string, in io.Reader, out, errOut io.Writer) error
	help          help
}

// help is what "gpumem COMMAND -h" prints besides the flags.
type help struct {
	usage    string   // the synopsis, after "usage: "
	about    string   // what the command does, in a paragraph
	examples []string // command lines, each with an optional "  # comment"
	exit     string   // what the exit statuses mean for this command
	args     bool     // the command takes a FILE argument (else arguments are refused)
}

func commands() []command {
	return []command{
		{"inspect", "read a model and print its parameters and memory by dtype and part", runInspect, inspectHelp()},
		{"estimate", "estimate the peak memory of a training or inference job, and whether it fits", runEstimate, estimateHelp()},
		{"plan", "choose batch, sequence, checkpointing, kernel, optimizer and offload so a job fits; print the ladder", runPlan, planHelp()},
		{"oom", "read an out-of-memory message (or a whole log) and diagnose it", runOOM, oomHelp()},
		{"leak", "read a memory log, detect a leak and forecast the OOM", runLeak, leakHelp()},
		{"devices", "list the GPU catalog with the capacity each driver reports", runDevices, devicesHelp()},
		{"calibrate", "fit an overhead profile (CUDA context, fragmentation) to rows measured on your GPUs", runCalibrate, calibrateHelp()},
		{"accuracy", "compare the estimates with measured and published GPU memory; print the error table", runAccuracy, accuracyHelp()},
		{"serve", "serve estimate, plan, oom, leak, models and devices as an HTTP JSON service", runServe, serveHelp()},
	}
}

// errUsage marks an error whose message is a usage problem (exit 2).
var errUsage = errors.New("usage")

// errNoOOM reports input without an out-of-memory message (exit 1).
var errNoOOM = errors.New("no out-of-memory message found in the input")

// errNoSamples reports a memory log without a memory figure (exit 1):
// nothing was checked, so there is no verdict to print.
var errNoSamples = errors.New("no memory samples found in the input")

func runCommand(args []string, in io.Reader, out, errOut io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(errOut, cmds)
		return exitBadInput
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return runCommand([]string{args[1], "-h"}, in, out, errOut)
		}
		usage(out, cmds)
		return exitOK
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return exit(out, errOut, c.name, c.run(args[1:], in, out, errOut))
		}
	}
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	fmt.Fprintf(errOut, "gpumem: unknown command %q%s\n\n", args[0], didYouMean(args[0], names, strconv.Quote))
	usage(errOut, cmds)
	return exitBadInput
}

// exit reports err on errOut and returns the command's exit status.
func exit(out, errOut io.Writer, name string, err error) int {
	var list catalogList
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &list):
		fmt.Fprintln(out, strings.Join(list, "\n"))
		return exitOK
	}
	fmt.Fprintf(errOut, "gpumem %s: %s\n", name, message(err))
	if errors.Is(err, gpumem.ErrDoesNotFit) || errors.Is(err, errNoOOM) || errors.Is(err, errNoSamples) || errors.Is(err, errGate) {
		return exitDoesNotFit
	}
	return exitBadInput
}

// message is err's text for the command line: without the usage marker,
// and with a library field that a flag sets named by the flag, as it was
// typed ("--batch 0: invalid value: must be at least 1", not
// "Job.Batch = 0: ...").
func message(err error) string {
	msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
	var fe *gpumem.FieldError
	if errors.As(err, &fe) {
		if name, ok := flagFor(fe.Field); ok {
			msg = strings.Replace(msg, fe.Error(), fmt.Sprintf("%s %v: %v", name, fe.Value, fe.Err), 1)
		}
	}
	// One line, whatever the input held: a newline or carriage return
	// in a flag, a value or a file name is written as its escape.
	return strings.NewReplacer("\n", "\\n", "\r", "\\r").Replace(msg)
}

// flagFor returns the flag that sets a field the library names in its
// errors (budget.Job, model.Workload, budget.Limits, leak.Options).
func flagFor(field string) (string, bool) {
	switch field {
	case "Job.Batch", "Workload.Batch":
		return "--batch", true
	case "Job.SeqLen", "Workload.SeqLen":
		return "--seq", true
	case "Job.Generate":
		return "--generate", true
	case "Job.GradAccum":
		return "--grad-accum", true
	case "Job.Images", "Workload.Images":
		return "--images", true
	case "Job.Loss", "Job.Loss.Chunks", "Workload.Loss", "Workload.Loss.Chunks", "loss":
		return "--loss", true
	case "Job.LogitsToKeep", "Workload.LogitsToKeep":
		return "--logits-to-keep", true
	case "Job.KeepLogits":
		return "--keep-logits", true
	case "Job.Compile", "Workload.Compile":
		return "--compile", true
	case "Job.EvalLoss", "Workload.Labels":
		return "--eval", true
	case "Job.Precision", "Plan.Job.Precision":
		return "--precision", true
	case "Job.Optimizer", "Job.Gradients":
		return "--optimizer", true
	case "Job.OptimizerInBackward":
		return "--optimizer-in-backward", true
	case "Job.OffloadActivations":
		return "--offload-activations", true
	case "Job.Attention", "Workload.Attention":
		return "--attention", true
	case "Job.SSMKernel", "Workload.SSMKernel":
		return "--ssm-kernel", true
	case "Job.Checkpointing", "Workload.Checkpointing":
		return "--checkpointing", true
	case "Job.Device":
		return "--gpu", true
	case "Job.Runtime":
		return "--runtime", true
	case "Job.LlamaCpp.GPULayers":
		return "--n-gpu-layers", true
	case "Job.LlamaCpp.Context":
		return "--ctx-size", true
	case "Job.LlamaCpp.Parallel":
		return "--parallel", true
	case "Job.LlamaCpp.UBatch":
		return "--ubatch-size", true
	case "Job.LlamaCpp.Version":
		return "--llamacpp-version", true
	case "Job.LlamaCpp.SWAFull":
		return "--swa-full", true
	case "Job.LlamaCpp.CacheK", "Ollama.KVCacheType":
		return "--cache-type-k", true
	case "Ollama.NumCtx":
		return "--ctx-size", true
	case "Ollama.NumBatch":
		return "--ubatch-size", true
	case "Ollama.NumParallel":
		return "--parallel", true
	case "Ollama.NumGPU":
		return "--n-gpu-layers", true
	case "free", "free[0]":
		return "--memory", true
	case "Job.LlamaCpp.CacheV":
		return "--cache-type-v", true
	case "Job.VLLM.GPUMemoryUtilization":
		return "--gpu-memory-utilization", true
	case "Job.VLLM.MaxModelLen":
		return "--max-model-len", true
	case "Job.VLLM.MaxNumBatchedTokens":
		return "--max-num-batched-tokens", true
	case "Job.VLLM.MaxNumSeqs":
		return "--max-num-seqs", true
	case "Job.VLLM.BlockSize":
		return "--block-size", true
	case "Job.VLLM.CUDAGraphMemory":
		return "--cuda-graph-memory", true
	case "Job.VLLM.KVCacheDType":
		return "--kv-cache-dtype", true
	case "Job.SGLang.MemFractionStatic":
		return "--mem-fraction-static", true
	case "Job.SGLang.MaxTotalTokens":
		return "--max-total-tokens", true
	case "Job.SGLang.PageSize":
		return "--page-size", true
	case "Job.SGLang.ContextLength":
		return "--context-length", true
	case "Job.SGLang.KVCacheDType":
		return "--kv-cache-dtype", true
	case "Job.SGLang.TensorParallel", "Job.VLLM.TensorParallel":
		return "--tensor-parallel-size", true
	case "Job.VLLM", "Job.SGLang", "Job.Device.Capacity":
		return "--runtime", true
	case "Job.Overhead.CUDA":
		return "--cuda", true
	case "Job.Overhead.Loading":
		return "--lazy-loading", true
	case "Job.Parallel.DataParallel":
		return "--gpus", true
	case "Job.Parallel.Stage":
		return "--zero", true
	case "Job.Parallel.TensorParallel", "Workload.TensorParallel":
		return "--tp", true
	case "Job.Parallel.SequenceParallel", "Workload.SequenceParallel":
		return "--sp", true
	case "Job.Parallel.PipelineParallel":
		return "--pp", true
	case "Job.Parallel.VirtualStages":
		return "--vpp", true
	case "Job.Parallel.ContextParallel", "Workload.ContextParallel":
		return "--cp", true
	case "Job.Parallel.ExpertParallel":
		return "--ep", true
	case "Job.Parallel.FSDP", "Job.Parallel.ShardGroup":
		return "--fsdp", true
	case "Job.Offload":
		return "--offload", true
	case "LoRA.Rank":
		return "--lora-rank", true
	case "LoRA.Targets":
		return "--lora-targets", true
	case "Finetune.Quant", "Finetune.Method":
		return "--quant", true
	case "Finetune.GroupSize":
		return "--group-size", true
	case "Job.KVDType":
		return "--kv-dtype", true
	case "Job.KVBlock":
		return "--kv-block", true
	case "Limits.TargetGlobalBatch":
		return "--target-batch", true
	case "Limits.MinBatch":
		return "--min-batch", true
	case "Limits.MaxBatch":
		return "--max-batch", true
	case "Limits.MinSeqLen":
		return "--min-seq", true
	case "Limits.MaxSeqLen":
		return "--max-seq", true
	case "Limits.HeadroomFraction":
		return "--headroom", true
	case "Limits.Objective":
		return "--maximize", true
	case "Options.Capacity":
		return "--capacity", true
	}
	return "", false
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprint(w, `gpumem tells how much GPU memory a deep-learning job needs, where it goes and
what to change so that it fits; it reads out-of-memory messages and memory logs.

usage: gpumem COMMAND [flags]

commands:
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
examples:
  gpumem estimate --model llama-3-8b --train --batch 4 --seq 4096 --gpu h100
  gpumem plan --model llava-1.5-7b --train --gpu "rtx 3090" --target-batch 32 --allow adamw8bit,lora
  gpumem estimate --model llama-2-7b --infer --generate 512 --gpu a100-80gb --chart mem.png
  gpumem oom < train.log
  gpumem devices --json

Every command takes --json (sizes as integers of bytes; the schemas are in
cmd/gpumem/README.md) and -h (its flags and examples); "gpumem help COMMAND"
is "gpumem COMMAND -h". Sizes print in binary units (GiB = 2^30 bytes).

exit status: 0 fits or done, 1 does not fit (estimate, plan), no OOM
message in the input (oom) or no memory figure in the log (leak), 2 bad
flags or input (the message names the flag).
`)
}

// newFlags returns a FlagSet that reports errors instead of exiting, and
// prints the command's help to out for -h.
func newFlags(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gpumem "+name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { writeHelp(fs.Output(), name, fs) }
	return fs
}

// writeHelp prints a command's help: synopsis, what it does, examples,
// flags and exit statuses.
func writeHelp(w io.Writer, name string, fs *flag.FlagSet) {
	var h help
	for _, c := range commands() {
		if c.name == name {
			h = c.help
		}
	}
	fmt.Fprintf(w, "usage: %s\n\n%s\n", h.usage, h.about)
	if len(h.examples) > 0 {
		fmt.Fprintln(w, "\nexamples:")
		for _, e := range h.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprintln(w, "\nflags:")
	fs.VisitAll(func(f *flag.Flag) {
		kind, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		switch f.DefValue {
		case "", "0", "false":
		default:
			text += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, strings.ReplaceAll(text, "\n", "\n      "))
	})
	if h.exit != "" {
		fmt.Fprintf(w, "\nexit status: %s\n", h.exit)
	}
}

// badFlagValue matches the flag package's error for a value it cannot
// parse.
var badFlagValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-(\S+): (.*)$`)

// parse parses flags, turning flag errors into usage errors that name
// the flag as typed. Flags may follow arguments ("gpumem oom log.txt
// --json"); after "--" everything is an argument. Commands that take no
// argument refuse one.
func parse(fs *flag.FlagSet, args []string) error {
	out, help := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard) // run reports errors; help goes to out for -h only
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = help }()
	name := strings.TrimPrefix(fs.Name(), "gpumem ")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				help()
				return err
			}
			return fmt.Errorf("%w: %s (see gpumem %s -h)", errUsage, flagMessage(fs, err), name)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	takesArgs := false
	for _, c := range commands() {
		if c.name == name {
			takesArgs = c.help.args
		}
	}
	if len(pos) > 0 && !takesArgs {
		return fmt.Errorf("%w: unexpected argument %q (gpumem %s takes flags only; see gpumem %s -h)", errUsage, pos[0], name, name)
	}
	if err := checkValues(fs); err != nil {
		return err
	}
	return fs.Parse(append([]string{"--"}, pos...)) // fs.Args() is now pos
}

// sizeFlags are the flags that take a size, with an example for their
// errors.
var sizeFlags = map[string]string{"memory": "80GiB", "capacity": "24GiB", "max-body": "1MiB"}

// checkValues refuses, for the flags given on the command line, what a
// job script with an unset variable or a forgotten unit would pass: an
// empty value of a string flag (which would mean "not given": --gpu ""
// would check the fit on no GPU and exit 0), and a size that is zero or a
// bare number (--memory 80 is not 80 bytes).
func checkValues(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err != nil {
			return
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		v, ok := g.Get().(string)
		if !ok {
			return
		}
		if strings.TrimSpace(v) == "" {
			err = fmt.Errorf("%w: --%s %q: an empty value (an unset variable?); give one or leave --%s out", errUsage, f.Name, v, f.Name)
			return
		}
		if example, ok := sizeFlags[f.Name]; ok {
			_, err = parseSize(f.Name, v, example)
		}
	})
	return err
}

// minBareBytes is the smallest number without a unit a size flag takes,
// as bytes (1 MiB): below it a bare number is refused, since it is almost
// surely GiB or GB (--memory 80) and no GPU has less memory; from it up
// it is unambiguous bytes (--memory 85899345920, as the service's
// integer sizes).
const minBareBytes = 1 << 20

// unitHint suggests the units a bare number t (f) may have meant: GiB or
// GB, and first MiB for a number of thousands (nvidia-smi's unit:
// --memory 81920 is an 80 GiB card).
func unitHint(t string, f float64) string {
	if f >= 1024 {
		return fmt.Sprintf("give %sMiB (nvidia-smi's unit), %sGiB (2^30 bytes) or %sGB (10^9 bytes)", t, t, t)
	}
	return fmt.Sprintf("give %sGiB (2^30 bytes) or %sGB (10^9 bytes)", t, t)
}

// parseSize reads the size flag --name: a positive amount with a unit
// ("80GiB", "24GB", "512B"), or an integer of bytes from minBareBytes up.
// A smaller bare number is refused with the units it may have meant, and
// zero with an example.
func parseSize(name, v, example string) (gpumem.Bytes, error) {
	t := strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(t, 64); err == nil && strings.Trim(t, "0123456789.") == "" {
		switch {
		case f == 0:
			return 0, fmt.Errorf("%w: --%s %q: want a size of at least 1B, such as %s", errUsage, name, v, example)
		case f < minBareBytes || strings.Contains(t, "."):
			return 0, fmt.Errorf("%w: --%s %q: a number without a unit; %s", errUsage, name, v, unitHint(t, f))
		}
	}
	b, err := gpumem.ParseBytes(v)
	if err != nil {
		return 0, fmt.Errorf("%w: --%s: %v", errUsage, name, err)
	}
	if b < 1 {
		return 0, fmt.Errorf("%w: --%s %q: want a size of at least 1B, such as %s", errUsage, name, v, example)
	}
	return b, nil
}

// escapeWriter writes what it is given with control characters escaped:
// C0 controls but newline and tab, DEL and C1 controls as \xNN or \u00NN,
// bytes that are not UTF-8 as \xNN. Escape sequences from a config.json,
// a log or a file name are then printed, not obeyed; JSON output, whose
// encoder already escapes C0 controls, stays valid JSON (a C1 control in
// a string becomes its \u00NN escape). A rune split between two writes is
// held until the next write or Flush.
type escapeWriter struct {
	mu   sync.Mutex // gpumem serve may log from several goroutines
	w    io.Writer
	held []byte // the start of a rune the last write ended in
	buf  []byte
	err  error
}

func (e *escapeWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return 0, e.err
	}
	data := p
	if len(e.held) > 0 {
		data = append(e.held, p...)
		e.held = nil
	}
	out := e.buf[:0]
	for i := 0; i < len(data); {
		c := data[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				out = fmt.Appendf(out, "\\x%02x", c)
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		if !utf8.FullRune(data[i:]) {
			e.held = append([]byte(nil), data[i:]...)
			break
		}
		r, n := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = fmt.Appendf(out, "\\x%02x", c)
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, "\\u%04x", r)
		default:
			out = append(out, data[i:i+n]...)
		}
		i += n
	}
	e.buf = out
	if _, err := e.w.Write(out); err != nil {
		e.err = err
		return 0, err
	}
	return len(p), nil
}

// Flush writes a rune the last write left incomplete, escaped.
func (e *escapeWriter) Flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.held) == 0 || e.err != nil {
		return
	}
	var out []byte
	for _, c := range e.held {
		out = fmt.Appendf(out, "\\x%02x", c)
	}
	e.held = nil
	_, e.err = e.w.Write(out)
}

// flagMessage rewrites the flag package's errors to name flags with the
// two dashes the documentation uses, and to say what a value should be.
func flagMessage(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		return fmt.Sprintf("unknown flag --%s%s", name, didYouMean(name, names, func(s string) string { return "--" + s }))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value", name)
	}
	m := badFlagValue.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	want := m[3]
	if f := fs.Lookup(m[2]); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case int, int64:
				want = "want an integer"
			case bool:
				want = "want true or false"
			}
		}
	}
	return fmt.Sprintf("--%s %q: %s", m[2], m[1], want)
}
