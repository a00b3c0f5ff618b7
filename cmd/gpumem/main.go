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
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/request"
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
	fmt.Fprintf(errOut, "gpumem: unknown command %q%s\n\n", args[0], request.DidYouMean(args[0], names, strconv.Quote))
	usage(errOut, cmds)
	return exitBadInput
}

// exit reports err on errOut and returns the command's exit status.
func exit(out, errOut io.Writer, name string, err error) int {
	var list request.CatalogList
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
	msg := strings.TrimPrefix(err.Error(), request.ErrUsage.Error()+": ")
	var fe *gpumem.FieldError
	if errors.As(err, &fe) {
		if name, ok := request.FlagFor(fe.Field); ok {
			msg = strings.Replace(msg, fe.Error(), fmt.Sprintf("%s %v: %v", name, fe.Value, fe.Err), 1)
		}
	}
	// One line, whatever the input held: a newline or carriage return
	// in a flag, a value or a file name is written as its escape.
	return strings.NewReplacer("\n", "\\n", "\r", "\\r").Replace(msg)
}
