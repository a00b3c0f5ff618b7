package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/cmd/gpumem/internal/accuracy"
	"github.com/gpumem/gpumem/request"
)

// errGate reports an accuracy comparison that misses the gate (exit 1).
var errGate = errors.New("the estimates miss the accuracy gate")

func runAccuracy(args []string, _ io.Reader, out, _ io.Writer) error {
	fs := newFlags("accuracy", out)
	data := fs.String("data", "testdata", "the `DIR` holding measured/ (tools/calibrate's rows), measured/cpu/ (tools/measure's rows and misses.tsv) and published/ (peaks.jsonl, jobs.jsonl)")
	by := fs.String("by", "family", "group the table by family (the model's model_type), gpu or id (one row per case)")
	chart := fs.String("chart", "", "also write a `FILE.png` scatter plot of estimated against measured memory")
	asJSON := fs.Bool("json", false, "print JSON: the groups, every case and the gate's violations (bytes as integers)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var key func(accuracy.Case) string
	switch *by {
	case "family":
		key = func(c accuracy.Case) string { return c.Family }
	case "gpu":
		key = func(c accuracy.Case) string { return shortGPU(c.GPU) }
	case "id":
		key = func(c accuracy.Case) string { return c.ID }
	default:
		return fmt.Errorf("%w: --by %q: want family, gpu or id", request.ErrUsage, *by)
	}
	if *chart != "" && !strings.EqualFold(filepath.Ext(*chart), ".png") {
		return fmt.Errorf("%w: --chart %q: want a file name ending in .png", request.ErrUsage, *chart)
	}
	set, cpu, err := loadAccuracy(*data)
	if err != nil {
		return err
	}
	violations := accuracy.Check(set)
	eng, err := loadEngineLogs(*data)
	if err != nil {
		return err
	}
	violations = append(violations, eng.violations()...)
	if *chart != "" {
		if err := writeAccuracyChart(*chart, set); err != nil {
			return err
		}
	}
	// The CPU rows are their own source, held to their own target
	// (accuracy.CheckCPU); the chart and the GPU gate leave them out.
	violations = append(violations, cpu.violations...)
	set.Cases = append(set.Cases, cpu.set.Cases...)
	set.Failures = append(set.Failures, cpu.set.Failures...)
	if *asJSON {
		if err := writeAccuracyJSON(out, set, accuracy.Summarize(set.Cases, key), eng, violations); err != nil {
			return err
		}
	} else {
		printAccuracy(out, set, cpu, key, *by, eng, violations)
	}
	if len(violations) > 0 {
		return errGate
	}
	return nil
}

// cpuAccuracy is the comparison of the CPU rows (measured/cpu) and what
// it violates of their target.
type cpuAccuracy struct {
	set        accuracy.CPUSet
	rows       int
	misses     int // the cases that miss the target
	listed     int // the rows misses.tsv lists
	violations []string
}

// loadAccuracy reads the data sets under dir and compares them: the GPU
// rows and published figures, and the CPU rows with their list of misses.
func loadAccuracy(dir string) (accuracy.Set, cpuAccuracy, error) {
	var cpu cpuAccuracy
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return accuracy.Set{}, cpu, fmt.Errorf("%w: --data %q: not a folder (run from the repository root, or name its testdata folder)", request.ErrUsage, dir)
	}
	fsys := os.DirFS(dir)
	rows, err := accuracy.ReadMeasured(fsys, "measured")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return accuracy.Set{}, cpu, fmt.Errorf("%w: --data %s: %v", request.ErrUsage, dir, err)
	}
	stated, err := accuracy.ReadPublished(fsys, "published")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return accuracy.Set{}, cpu, fmt.Errorf("%w: --data %s: %v", request.ErrUsage, dir, err)
	}
	cpuRows, err := accuracy.ReadCPU(fsys, "measured/cpu")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return accuracy.Set{}, cpu, fmt.Errorf("%w: --data %s: %v", request.ErrUsage, dir, err)
	}
	if len(cpuRows) > 0 {
		misses, err := accuracy.ReadCPUMisses(fsys, "measured/cpu/misses.tsv")
		if err != nil {
			return accuracy.Set{}, cpu, fmt.Errorf("%w: --data %s: %v", request.ErrUsage, dir, err)
		}
		cpu.set, cpu.rows, cpu.listed = accuracy.CompareCPU(cpuRows), len(cpuRows), len(misses)
		for _, c := range cpu.set.Cases {
			if accuracy.CPUMiss(c) != "" {
				cpu.misses++
			}
		}
		cpu.violations = accuracy.CheckCPU(cpu.set, misses)
	}
	if len(rows) == 0 && len(stated) == 0 && len(cpuRows) == 0 {
		if _, err := fs.Stat(fsys, engineLogDir); err == nil {
			return accuracy.Set{}, cpu, nil // engine logs alone
		}
		return accuracy.Set{}, cpu, fmt.Errorf("%w: --data %q: no measured rows (measured/*.jsonl, measured/cpu/*.jsonl) and no stated figures (published/jobs.jsonl)", request.ErrUsage, dir)
	}
	return accuracy.Compare(rows, stated), cpu, nil
}

// shortGPU shortens an NVML name for a table ("NVIDIA H100 80GB HBM3" →
// "H100 80GB HBM3"); sources that describe the GPU in a sentence keep
// their first words.
func shortGPU(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "NVIDIA ")
	if i := strings.IndexAny(s, "(,;"); i > 0 {
		s = strings.TrimSpace(s[:i])
	}
	if s == "" {
		return "not stated"
	}
	return s
}

func printAccuracy(out io.Writer, set accuracy.Set, cpu cpuAccuracy, key func(accuracy.Case) string, by string, eng *engineLogs, violations []string) {
	count := map[string]int{}
	for _, c := range set.Cases {
		count[c.Source]++
	}
	if total := sum(set.Statuses); total == 0 {
		fmt.Fprintln(out, "measured:  no rows yet (measured/*.jsonl: no GPU has run tools/calibrate)")
	} else {
		ok := set.Statuses["ok"]
		fmt.Fprintf(out, "measured:  %d rows (%d ok, %d oom, %d unsupported or failed) on %s: %d figures\n", total, ok,
			set.Statuses["oom"], total-ok-set.Statuses["oom"], strings.Join(set.GPUs, ", "), count[accuracy.Measured])
	}
	fmt.Fprintf(out, "published: %d figures with a stated job (testdata/published/jobs.jsonl)\n", count[accuracy.Published])
	if cpu.rows > 0 {
		fmt.Fprintf(out, "cpu:       %d rows of whole jobs on the CPU (torch %s, transformers %s; measured/cpu): %d meet the target, %d miss it (%d listed)\n",
			cpu.rows, strings.Join(cpu.set.Torch, ", "), strings.Join(cpu.set.Transformers, ", "),
			len(cpu.set.Cases)-cpu.misses, cpu.misses, cpu.listed)
	}
	fmt.Fprintln(out)
	if len(set.Cases) > 0 {
		width := len(by)
		groups := accuracy.Summarize(set.Cases, key)
		for _, g := range groups {
			width = max(width, len(g.Key))
		}
		fmt.Fprintf(out, "%-9s  %-*s  %-9s  %3s  %7s  %7s  %7s  %s\n", "source", width, by, "level", "n", "median", "bias", "under", "worst")
		row := func(g accuracy.Group) {
			fmt.Fprintf(out, "%-9s  %-*s  %-9s  %3d  %6.1f%%  %+6.1f%%  %6.0f%%  %5.1f%% %s\n", g.Source, width, g.Key, g.Label, g.N,
				100*g.Median, 100*g.MedianSigned, 100*g.Under, 100*g.Worst, g.WorstID)
		}
		for _, g := range groups {
			row(g)
		}
		fmt.Fprintln(out)
		for _, g := range accuracy.Summarize(set.Cases, nil) {
			row(g) // Summarize names the single group "all"
		}
		printFeatures(out, set.Cases)
	}
	if eng != nil {
		if len(set.Cases) > 0 {
			fmt.Fprintln(out)
		}
		eng.print(out)
	}
	if len(set.Cases) > 0 || (eng != nil && len(eng.res.Rows) > 0) {
		fmt.Fprintln(out, "\nmedian and worst: absolute relative error; bias: median signed error (negative: under-estimates);")
		if eng != nil && len(eng.res.Rows) > 0 {
			fmt.Fprintln(out, "within: engine-log figures inside their tolerance (layer counts exact, KV cache and weights 2%, the rest")
			fmt.Fprintln(out, "5%, plus the log's print rounding), the others listed with their mechanism in testdata/enginelogs/misses.jsonl;")
		}
		fmt.Fprintln(out, "under: the share of cases under-estimated.")
	}
	var exempt []accuracy.Case
	for _, c := range set.Cases {
		if c.Exempt != "" {
			exempt = append(exempt, c)
		}
	}
	if len(exempt) > 0 {
		fmt.Fprintln(out, "\nnot held to the 5% margin (why, from the source):")
		for _, c := range exempt {
			fmt.Fprintf(out, "  %s %+.1f%%: %s\n", c.ID, 100*c.Err(), c.Exempt)
		}
	}
	if len(set.OOMs) > 0 {
		missed := 0
		for _, o := range set.OOMs {
			if o.Fits {
				missed++
			}
		}
		fmt.Fprintf(out, "\nOOM rows: %d, predicted not to fit: %d\n", len(set.OOMs), len(set.OOMs)-missed)
	}
	if cpu.rows > 0 {
		fmt.Fprintf(out, "\ncpu target: within %.0f%%, at most %.0f%% under, the peak's phase named right; the rows that miss it are\n"+
			"those measured/cpu/misses.tsv lists, each with the mechanism believed to explain it.\n", 100*accuracy.CPUTarget, 100*accuracy.CPUMaxUnder)
	}
	if len(violations) == 0 {
		fmt.Fprintf(out, "\ngate: met (no allocated, KV cache or weights estimate more than %.0f%% under, measured medians within %.0f%%, every OOM predicted)\n",
			100*accuracy.MaxUnder, 100*accuracy.MaxMedian)
		return
	}
	fmt.Fprintf(out, "\ngate: missed (%d):\n", len(violations))
	for _, v := range violations {
		fmt.Fprintln(out, "  "+v)
	}
}

// printFeatures prints the errors by the real-stack feature each case's
// job exercises (accuracy.Features): a case counts under each of its
// features, so the rows overlap; exempt cases are counted apart.
func printFeatures(out io.Writer, cases []accuracy.Case) {
	var held []accuracy.Case
	exempt := map[string]int{}
	for _, c := range cases {
		if c.Exempt != "" {
			for _, f := range c.Features {
				exempt[c.Source+" "+f]++
			}
			continue
		}
		held = append(held, c)
	}
	groups := accuracy.SummarizeFeatures(held)
	if len(groups) == 0 {
		return
	}
	width := len("feature")
	for _, g := range groups {
		width = max(width, len(g.Key))
	}
	fmt.Fprintf(out, "\nby feature (from the job's fields; a case counts under each of its features; exempt cases apart):\n")
	fmt.Fprintf(out, "%-9s  %-*s  %-9s  %3s  %7s  %7s  %7s  %s\n", "source", width, "feature", "level", "n", "median", "bias", "under", "worst")
	for _, g := range groups {
		fmt.Fprintf(out, "%-9s  %-*s  %-9s  %3d  %6.1f%%  %+6.1f%%  %6.0f%%  %5.1f%% %s\n", g.Source, width, g.Key, g.Label, g.N,
			100*g.Median, 100*g.MedianSigned, 100*g.Under, 100*g.Worst, g.WorstID)
	}
	var keys []string
	for k := range exempt {
		keys = append(keys, k)
	}
	if len(keys) > 0 {
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, exempt[k])
		}
		fmt.Fprintf(out, "exempt, by feature: %s\n", strings.Join(parts, ", "))
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
