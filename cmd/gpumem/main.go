// Command gpumem tells how much GPU memory a deep-learning job needs,
// where it goes, and what to change so that it fits; and it reads
// out-of-memory messages and memory logs.
//
// Usage:
//
//	gpumem inspect  --model NAME | --config config.json   [--json]
//	gpumem estimate --model NAME --train|--infer [--batch B --seq S ...] [--gpu NAME | --memory 80GiB] [--json]
//	gpumem plan     --model NAME --train|--infer --gpu NAME | --memory 24GiB [--target-batch N --max-seq S --allow ...] [--json]
//	gpumem oom      [FILE|-]                               [--json]
//	gpumem leak     [--capacity 24GiB | --gpu NAME]        [--json] FILE|-
//	gpumem devices
//	gpumem serve    [--addr 127.0.0.1:8080] [--max-body 1MiB]  (HTTP JSON; see README.md)
//
// Run "gpumem COMMAND -h" for a command's flags. Every size is printed in
// binary units (GiB = 2^30 bytes); --json prints integers of bytes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// command is one subcommand.
type command struct {
	name, summary string
	run           func(args []string, in io.Reader, out, errOut io.Writer) error
}

func commands() []command {
	return []command{
		{"inspect", "read a model and print its parameters and memory by dtype and part", runInspect},
		{"estimate", "estimate the peak memory of a training or inference job, and whether it fits", runEstimate},
		{"plan", "choose batch, sequence, checkpointing, kernel, optimizer and offload so a job fits; print the ladder", runPlan},
		{"oom", "read an out-of-memory message (or a whole log) and diagnose it", runOOM},
		{"leak", "read a memory log, detect a leak and forecast the OOM", runLeak},
		{"devices", "list the GPU catalog with the capacity each driver reports", runDevices},
		{"serve", "serve estimate, oom, leak, models and devices as an HTTP JSON service", runServe},
	}
}

// errUsage marks an error whose message is a usage problem (exit 2).
var errUsage = errors.New("usage")

func run(args []string, in io.Reader, out, errOut io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(errOut, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range cmds {
		if c.name == args[0] {
			err := c.run(args[1:], in, out, errOut)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				fmt.Fprintf(errOut, "gpumem %s: %v\n", c.name, err)
				return 2
			default:
				fmt.Fprintf(errOut, "gpumem %s: %v\n", c.name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(errOut, "gpumem: unknown command %q\n", args[0])
	usage(errOut, cmds)
	return 2
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "usage: gpumem COMMAND [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(cmds))
	for _, c := range cmds {
		names = append(names, fmt.Sprintf("  %-9s %s", c.name, c.summary))
	}
	sort.Strings(names)
	fmt.Fprintln(w, strings.Join(names, "\n"))
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "gpumem COMMAND -h" for the flags of a command.`)
}

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name string, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gpumem "+name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	return fs
}

// parse parses flags, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}
