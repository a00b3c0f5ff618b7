package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/leak"
)

func runOOM(args []string, in io.Reader, out, _ io.Writer) error {
	fs := newFlags("oom", out)
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	if err := parse(fs, args); err != nil {
		return err
	}
	text, err := readInput(fs.Args(), in)
	if err != nil {
		return err
	}
	o, ok := leak.ParseOOM(string(text))
	if !ok && !o.Warning {
		return errNoOOM
	}
	// An allocator warning ("this is not a failure") is printed like a
	// message, marked as a warning, and exits 1 as input without an
	// out-of-memory error does: nothing failed there.
	d := o.Diagnose()
	if *asJSON {
		if err := writeOOMJSON(out, o, d); err != nil {
			return err
		}
		return warningErr(o)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "message\t%s %s (%s)\n", o.Framework, o.Backend, o.Era)
	if o.Warning {
		fmt.Fprintf(tw, "kind\twarning, not an out-of-memory error\n")
	}
	row := func(name string, b gpumem.Bytes, stated bool) {
		if stated {
			fmt.Fprintf(tw, "%s\t%s\n", name, b.String())
		}
	}
	row("requested", d.Requested, d.Requested > 0)
	row("capacity", d.Capacity, d.Capacity > 0)
	row("free", d.Free, d.Capacity > 0 || d.Free > 0)
	row("allocated", d.Allocated, d.Allocated > 0)
	row("reserved", d.Reserved, d.Reserved > 0)
	row("reserved, unallocated", d.ReservedUnallocated, d.Reserved > 0)
	row("outside the allocator", d.Outside, d.Outside > 0)
	row("other processes", d.OtherProcesses, d.OtherProcesses > 0)
	row("allowed cap", d.Allowed, d.Allowed > 0)
	fmt.Fprintf(tw, "\ncause\t%s\n", d.Cause)
	fmt.Fprintf(tw, "why\t%s\n", d.Reason)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Advice) > 0 {
		fmt.Fprintln(out, "\nwhat to change:")
		for _, a := range d.Advice {
			fmt.Fprintf(out, "  - %s\n", strings.TrimSpace(a.Text))
		}
	}
	return warningErr(o)
}

// oomWarning is the exit-1 error of input whose only out-of-memory line is
// an allocator warning (leak.OOM.Warning): errors.Is(err, errNoOOM) holds,
// and the message says what the warning was.
type oomWarning struct{ o leak.OOM }

func (w oomWarning) Error() string {
	return fmt.Sprintf("a warning, not an out-of-memory error: %s's allocator could not get %s at once and went on (\"this is not a failure\")",
		w.o.Framework, w.o.Requested.String())
}

func (w oomWarning) Is(target error) bool { return target == errNoOOM }

// warningErr returns oomWarning for a warning and nil for a failure.
func warningErr(o leak.OOM) error {
	if o.Warning {
		return oomWarning{o}
	}
	return nil
}

// maxLog bounds what oom and leak read from a file or standard input.
const maxLog = 256 << 20

// writeOOMJSON writes the message's fields (leak.OOM's JSON: sizes as
// integers, null when the message does not state them) with the
// diagnosis's cause, reason and advice at the top level, and "warning":
// true, with "found": false, for an allocator warning.
func writeOOMJSON(out io.Writer, o leak.OOM, d leak.Diagnosis) error {
	var top, diag map[string]json.RawMessage
	ob, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(ob, &top); err != nil {
		return err
	}
	db, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(db, &diag); err != nil {
		return err
	}
	for _, k := range []string{"cause", "reason", "shortfall", "outside", "fragmentation", "advice"} {
		if v, ok := diag[k]; ok {
			top[k] = v
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(top)
}

func adviceTexts(as []leak.Advice) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Text
	}
	return out
}
