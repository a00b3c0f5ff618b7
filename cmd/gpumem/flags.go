package main

// Command-line flags: parsing, sizes with units, help, and the messages
// that name a bad flag.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/gpumem/gpumem/request"
)

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
			return fmt.Errorf("%w: %s (see gpumem %s -h)", request.ErrUsage, flagMessage(fs, err), name)
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
		return fmt.Errorf("%w: unexpected argument %q (gpumem %s takes flags only; see gpumem %s -h)", request.ErrUsage, pos[0], name, name)
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
			err = fmt.Errorf("%w: --%s %q: an empty value (an unset variable?); give one or leave --%s out", request.ErrUsage, f.Name, v, f.Name)
			return
		}
		if example, ok := sizeFlags[f.Name]; ok {
			_, err = request.ParseSize(f.Name, v, example)
		}
	})
	return err
}

// flagMessage rewrites the flag package's errors to name flags with the
// two dashes the documentation uses, and to say what a value should be.
func flagMessage(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		return fmt.Sprintf("unknown flag --%s%s", name, request.DidYouMean(name, names, func(s string) string { return "--" + s }))
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
