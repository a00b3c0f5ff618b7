package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/leak"
	"github.com/gpumem/gpumem/request"
)

// readInput reads FILE, or standard input for "-" or no argument.
func readInput(args []string, in io.Reader) ([]byte, error) {
	switch {
	case len(args) == 0 || args[0] == "-":
		if len(args) > 1 {
			return nil, fmt.Errorf("%w: at most one FILE", request.ErrUsage)
		}
		return io.ReadAll(io.LimitReader(in, maxLog))
	case len(args) == 1:
		f, err := os.Open(args[0])
		if err != nil {
			return nil, request.FileError(args[0], err)
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, maxLog))
	}
	return nil, fmt.Errorf("%w: at most one FILE", request.ErrUsage)
}

// noSamplesError is input without a memory figure: exit status 1, as for
// gpumem oom's input without an OOM message — nothing was checked, so
// there is no verdict to print.
type noSamplesError struct{ err error }

func (e noSamplesError) Error() string        { return e.err.Error() }
func (e noSamplesError) Unwrap() error        { return e.err }
func (e noSamplesError) Is(target error) bool { return target == errNoSamples }

// parseUnit reads --unit (request field "unit"): a size unit such as MiB,
// GB or B, or a size such as 1MiB.
func parseUnit(v string) (gpumem.Bytes, error) {
	t := v
	if t != "" && (t[0] < '0' || t[0] > '9') {
		t = "1" + t
	}
	b, err := gpumem.ParseBytes(t)
	if err != nil || b <= 0 {
		return 0, fmt.Errorf("want a size unit such as MiB, GiB, MB, GB or B, got %q", v)
	}
	return b, nil
}

// leakJSON is the JSON reply of gpumem leak --json and POST /v1/leak: the
// report's fields and "input", what was read ([leak.ReadReport]).
func leakJSON(r leak.Report, rr leak.ReadReport) (json.RawMessage, error) {
	rep, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(rr)
	if err != nil {
		return nil, err
	}
	out := append(rep[:len(rep)-1:len(rep)-1], `,"input":`...)
	out = append(out, in...)
	return append(out, '}'), nil
}

// readLog reads the samples for gpumem leak and POST /v1/leak, and gives
// the analysis the steps' unit.
func readLog(text []byte, unit gpumem.Bytes, opts *leak.Options) ([]leak.Sample, leak.ReadReport, error) {
	samples, rr, err := leak.ReadSamples(bytes.NewReader(text), &leak.ReadOptions{Unit: unit, Capacity: opts.Capacity})
	if err != nil {
		return nil, rr, err
	}
	if rr.StepUnit != "" {
		opts.StepUnit = rr.StepUnit
	}
	return samples, rr, nil
}

func runLeak(args []string, in io.Reader, out, _ io.Writer) error {
	fs := newFlags("leak", out)
	capacity := fs.String("capacity", "", "device memory to forecast the OOM against (e.g. 24GiB); default: from the log, if it says")
	gpu := fs.String("gpu", "", "take the capacity from the GPU catalog (e.g. rtx4090)")
	unitFlag := fs.String("unit", "", "unit of memory values that carry none in bare columns of numbers and CSV columns (e.g. MiB, GB, B); default: MiB (integers of at least 2^20: bytes), and the output says it was assumed")
	run := fs.Int("run", 1, "the run to analyze when a narrative's steps restart (1 = the first)")
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *run < 1 {
		return fmt.Errorf("%w: --run %d: want 1 or more (runs are numbered from 1)", request.ErrUsage, *run)
	}
	var opts leak.Options
	opts.Run = *run - 1
	switch {
	case *capacity != "" && *gpu != "":
		return fmt.Errorf("%w: give one of --capacity and --gpu", request.ErrUsage)
	case *capacity != "":
		b, err := request.ParseSize("capacity", *capacity, sizeFlags["capacity"])
		if err != nil {
			return err
		}
		opts.Capacity = b
	case *gpu != "":
		d, ok := gpumem.LookupDevice(*gpu)
		if !ok {
			return fmt.Errorf("%w: --gpu %q: not in the catalog%s (see gpumem devices, or give --capacity)", request.ErrUsage, *gpu, request.SuggestGPU(*gpu))
		}
		opts.Capacity = d.Capacity
	}
	var unit gpumem.Bytes
	if *unitFlag != "" {
		u, err := parseUnit(*unitFlag)
		if err != nil {
			return fmt.Errorf("%w: --unit: %v", request.ErrUsage, err)
		}
		unit = u
	}
	text, err := readInput(fs.Args(), in)
	if err != nil {
		return err
	}
	samples, rr, err := readLog(text, unit, &opts)
	if errors.Is(err, leak.ErrNoSamples) {
		return noSamplesError{err}
	}
	if err != nil {
		return err
	}
	r, err := leak.Analyze(samples, &opts)
	if err != nil {
		return err
	}
	if r.Run >= r.Runs {
		return fmt.Errorf("%w: --run %d: the log has %d run(s)", request.ErrUsage, *run, r.Runs)
	}
	if *asJSON {
		j, err := leakJSON(r, rr)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := json.Indent(&b, j, "", "  "); err != nil {
			return err
		}
		b.WriteByte('\n')
		_, err = out.Write(b.Bytes())
		return err
	}
	plural := func(n int, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return strconv.Itoa(n) + " " + one + "s"
	}
	fmt.Fprintf(out, "read          %s: %s, %s skipped", plural(rr.Lines, "line"), plural(rr.Samples, "sample"), plural(rr.Skipped, "line"))
	if rr.Skipped > 0 {
		sep := " ("
		for i, c := range rr.ByReason {
			if c > 0 {
				fmt.Fprintf(out, "%s%d %s", sep, c, strings.ReplaceAll(leak.SkipReason(i).String(), "_", " "))
				sep = ", "
			}
		}
		fmt.Fprint(out, ")")
	}
	fmt.Fprintln(out)
	for _, e := range rr.Examples {
		if e.Reason == leak.SkipNoMemory && rr.ByReason[leak.SkipMalformed]+rr.ByReason[leak.SkipTooLong] > 0 {
			continue // the malformed lines are the ones to look at
		}
		fmt.Fprintf(out, "  line %-7d %s: %s", e.Line, strings.ReplaceAll(e.Reason.String(), "_", " "), strconv.QuoteToASCII(e.Text))
		if e.Detail != "" {
			fmt.Fprintf(out, " (%s)", strconv.QuoteToASCII(e.Detail))
		}
		fmt.Fprintln(out)
	}
	if rr.Assumed != "" {
		fmt.Fprintf(out, "unit          %s (--unit)\n", rr.Assumed)
	}
	if rr.Confidence != leak.ConfidenceHigh {
		fmt.Fprintf(out, "reading       confidence %s: %s\n", rr.Confidence, strings.Join(rr.ConfidenceWhy, "; "))
	}
	if sn := rr.Snapshot; sn != nil {
		level := "relative to its lowest point (no segments)"
		if sn.Absolute {
			level = "absolute (the segments' allocated blocks at the snapshot)"
		}
		fmt.Fprintf(out, "snapshot      device %d: %d trace entries (%d allocs, %d frees, %d of blocks allocated before the trace), %d segments, %s reserved, %s allocated; history %s",
			sn.Device, sn.Entries, sn.Allocs, sn.Frees, sn.UnknownFrees, sn.Segments, sn.Reserved.String(), sn.Allocated.String(), level)
		if sn.Window > 1 {
			fmt.Fprintf(out, ", the lowest level of every %d entries", sn.Window)
		}
		fmt.Fprintf(out, "\nsurvivors     %d allocations of the trace never freed, %s\n", sn.Survivors, sn.SurvivorBytes.String())
		for _, h := range sn.Holders {
			g := ""
			if h.Growing {
				g = ", growing"
			}
			fmt.Fprintf(out, "  held by     %s: %d allocations, %s, in %d/10 of the trace%s\n", strconv.QuoteToASCII(h.Frame), h.Count, h.Bytes.String(), h.Spread, g)
		}
	}
	fmt.Fprintf(out, "samples       %d (%d warm-up dropped)\n", r.Samples, r.WarmUp)
	axis := r.Unit()
	if r.Axis == leak.AxisTime {
		axis = "seconds since the first sample"
	}
	fmt.Fprintf(out, "axis          %s\n", axis)
	fmt.Fprintf(out, "shape         %s\n", r.Shape)
	if r.Runs > 1 {
		fmt.Fprintf(out, "runs          %d (the steps restart; run %d analyzed, --run)\n", r.Runs, r.Run+1)
	}
	if r.Short {
		fmt.Fprintf(out, "verdict       none: %d samples, %d needed; growth between samples %s to %s per %s\n",
			r.Samples, r.MinSamples, gpumem.Bytes(r.SlopeLow).String(), gpumem.Bytes(r.SlopeHigh).String(), r.Unit())
	}
	fmt.Fprintf(out, "leak          %v", r.Leak)
	if r.Accelerating {
		fmt.Fprint(out, " (accelerating)")
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "growth        %s per %s (median of pairwise slopes)", gpumem.Bytes(r.BytesPerStep).String(), r.Unit())
	if r.Axis != leak.AxisTime && r.BytesPerHour != 0 {
		fmt.Fprintf(out, ", %s per hour", gpumem.Bytes(r.BytesPerHour).String())
	}
	fmt.Fprintln(out)
	if r.Capacity > 0 {
		fmt.Fprintf(out, "capacity      %s\n", r.Capacity.String())
		if r.OOM.OK {
			fmt.Fprintf(out, "forecast OOM  at %s (between %.0f and %.0f)", r.At(r.OOM.Step), r.OOM.Low, r.OOM.High)
			if r.OOM.HasTime && !r.OOM.Time.IsZero() && r.Axis != leak.AxisTime {
				fmt.Fprintf(out, ", about %s", r.OOM.Time.Format("2006-01-02 15:04"))
			}
			fmt.Fprintln(out)
		} else {
			fmt.Fprintf(out, "forecast OOM  none: %s\n", r.OOM.Reason)
		}
	}
	if r.ObservedOOM {
		u := r.Unit()
		if r.Axis != leak.AxisStep {
			u = "step"
		}
		fmt.Fprintf(out, "observed OOM  at %s %d\n", u, r.ObservedOOMStep)
	}
	fmt.Fprintf(out, "\n%s\n", r.Reason)
	return nil
}
