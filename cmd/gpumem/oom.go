package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/leak"
)

func runOOM(args []string, in io.Reader, out, errOut io.Writer) error {
	fs := newFlags("oom", errOut)
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	fs.Usage = func() {
		fmt.Fprintln(errOut, "usage: gpumem oom [--json] [FILE]   (reads standard input without FILE)")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	var text []byte
	var err error
	switch fs.NArg() {
	case 0:
		text, err = io.ReadAll(io.LimitReader(in, maxLog))
	case 1:
		var f *os.File
		if f, err = os.Open(fs.Arg(0)); err == nil {
			text, err = io.ReadAll(io.LimitReader(f, maxLog))
			f.Close()
		}
	default:
		return fmt.Errorf("%w: at most one FILE", errUsage)
	}
	if err != nil {
		return err
	}
	o, ok := leak.ParseOOM(string(text))
	if !ok {
		return fmt.Errorf("no out-of-memory message found in the input")
	}
	d := o.Diagnose()
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(oomJSON(o, d))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "message\t%s %s (%s)\n", o.Framework, o.Backend, o.Era)
	row := func(name string, b gpumem.Bytes, stated bool) {
		if stated {
			fmt.Fprintf(tw, "%s\t%s\n", name, b.Human())
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
	return nil
}

// maxLog bounds what oom and leak read from a file or standard input.
const maxLog = 256 << 20

func oomJSON(o leak.OOM, d leak.Diagnosis) map[string]any {
	return map[string]any{
		"framework":            fmt.Sprint(o.Framework),
		"backend":              fmt.Sprint(o.Backend),
		"era":                  fmt.Sprint(o.Era),
		"device":               o.Device,
		"requested":            int64(d.Requested),
		"capacity":             int64(d.Capacity),
		"free":                 int64(d.Free),
		"allocated":            int64(d.Allocated),
		"reserved":             int64(d.Reserved),
		"reserved_unallocated": int64(d.ReservedUnallocated),
		"outside":              int64(d.Outside),
		"other_processes":      int64(d.OtherProcesses),
		"allowed":              int64(d.Allowed),
		"fragmentation":        d.Fragmentation,
		"cause":                fmt.Sprint(d.Cause),
		"reason":               d.Reason,
		"advice":               adviceTexts(d.Advice),
	}
}

func adviceTexts(as []leak.Advice) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Text
	}
	return out
}
