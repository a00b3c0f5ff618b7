package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/leak"
)

// readInput reads FILE, or standard input for "-" or no argument.
func readInput(args []string, in io.Reader) ([]byte, error) {
	switch {
	case len(args) == 0 || args[0] == "-":
		if len(args) > 1 {
			return nil, fmt.Errorf("%w: at most one FILE", errUsage)
		}
		return io.ReadAll(io.LimitReader(in, maxLog))
	case len(args) == 1:
		f, err := os.Open(args[0])
		if err != nil {
			return nil, fileError(args[0], err)
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, maxLog))
	}
	return nil, fmt.Errorf("%w: at most one FILE", errUsage)
}

func runLeak(args []string, in io.Reader, out, _ io.Writer) error {
	fs := newFlags("leak", out)
	capacity := fs.String("capacity", "", "device memory to forecast the OOM against (e.g. 24GiB); default: from the log, if it says")
	gpu := fs.String("gpu", "", "take the capacity from the GPU catalog (e.g. rtx4090)")
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var opts leak.Options
	switch {
	case *capacity != "" && *gpu != "":
		return fmt.Errorf("%w: give one of --capacity and --gpu", errUsage)
	case *capacity != "":
		b, err := parseSize("capacity", *capacity, sizeFlags["capacity"])
		if err != nil {
			return err
		}
		opts.Capacity = b
	case *gpu != "":
		d, ok := gpumem.LookupDevice(*gpu)
		if !ok {
			return fmt.Errorf("%w: --gpu %q: not in the catalog%s (see gpumem devices, or give --capacity)", errUsage, *gpu, suggestGPU(*gpu))
		}
		opts.Capacity = d.Capacity
	}
	text, err := readInput(fs.Args(), in)
	if err != nil {
		return err
	}
	samples, err := leak.ParseSamples(bytes.NewReader(text))
	if err != nil {
		return err
	}
	r, err := leak.Analyze(samples, &opts)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(out, "samples       %d (%d warm-up dropped)\n", r.Samples, r.WarmUp)
	fmt.Fprintf(out, "shape         %s\n", r.Shape)
	fmt.Fprintf(out, "leak          %v", r.Leak)
	if r.Accelerating {
		fmt.Fprint(out, " (accelerating)")
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "growth        %s per step (median of pairwise slopes)\n", gpumem.Bytes(r.BytesPerStep).Human())
	if r.Capacity > 0 {
		fmt.Fprintf(out, "capacity      %s\n", r.Capacity.Human())
		if r.OOM.OK {
			fmt.Fprintf(out, "forecast OOM  at step %.0f (between %.0f and %.0f)\n", r.OOM.Step, r.OOM.Low, r.OOM.High)
		} else {
			fmt.Fprintf(out, "forecast OOM  none: %s\n", r.OOM.Reason)
		}
	}
	if r.ObservedOOM {
		fmt.Fprintf(out, "observed OOM  at step %d\n", r.ObservedOOMStep)
	}
	fmt.Fprintf(out, "\n%s\n", r.Reason)
	return nil
}
