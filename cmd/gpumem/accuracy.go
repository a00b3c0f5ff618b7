package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpumem/gpumem/cmd/gpumem/internal/accuracy"
	"github.com/gpumem/gpumem/enginelog"
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

// engineLogDir is the corpus of serving-engine load logs under --data.
const engineLogDir = "enginelogs"

// engineLogs is the corpus of --data's enginelogs/ compared with budget's
// runtime models (enginelog.Compare); nil when the folder is absent.
type engineLogs struct {
	corpus enginelog.Corpus
	res    enginelog.Result
}

// loadEngineLogs reads and compares --data's enginelogs/, if any.
func loadEngineLogs(dir string) (*engineLogs, error) {
	fsys := os.DirFS(dir)
	if _, err := fs.Stat(fsys, engineLogDir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	c, err := enginelog.ReadCorpus(fsys, engineLogDir)
	if err != nil {
		return nil, fmt.Errorf("%w: --data %s: %v", request.ErrUsage, dir, err)
	}
	res, err := enginelog.Compare(c)
	if err != nil {
		return nil, fmt.Errorf("%w: --data %s: %v", request.ErrUsage, dir, err)
	}
	return &engineLogs{c, res}, nil
}

// violations are the engine-log figures outside their tolerance that
// misses.jsonl does not list, and the listed ones that no longer miss.
func (e *engineLogs) violations() []string {
	if e == nil {
		return nil
	}
	nm, stale := e.res.Unlisted(e.corpus.Misses)
	var out []string
	for _, r := range nm {
		out = append(out, fmt.Sprintf("enginelog %s: %s logged %.4g, estimated %.4g (%+.1f%%, tolerance %.0f%%), not listed in %s/misses.jsonl",
			r.File, r.Figure, r.Logged, r.Estimated, 100*r.Err(), 100*r.Tol, engineLogDir))
	}
	for _, s := range stale {
		out = append(out, fmt.Sprintf("enginelog %s/misses.jsonl: %s", engineLogDir, s))
	}
	return out
}

// print writes the engine-log figures' table, by figure kind.
func (e *engineLogs) print(out io.Writer) {
	logs := map[string]bool{}
	within := 0
	for _, r := range e.res.Rows {
		logs[r.File] = true
		if r.OK() {
			within++
		}
	}
	fmt.Fprintf(out, "enginelog: %d figures from %d of %d serving-engine load logs (testdata/%s), %d within tolerance, %d listed misses\n",
		len(e.res.Rows), len(logs), e.res.Logs, engineLogDir, within, len(e.corpus.Misses))
	stats := enginelog.Stats(e.res.Rows)
	if len(stats) == 0 {
		return
	}
	width := len("figure")
	for _, st := range stats {
		width = max(width, len(st.Kind))
	}
	fmt.Fprintf(out, "\n%-9s  %-*s  %3s  %7s  %7s  %7s  %7s  %s\n", "source", width, "figure", "n", "median", "bias", "under", "within", "worst")
	for _, st := range stats {
		fmt.Fprintf(out, "%-9s  %-*s  %3d  %6.1f%%  %+6.1f%%  %6.0f%%  %3d/%-3d  %+6.1f%% %s\n", "enginelog", width, st.Kind, st.N,
			100*st.Median, 100*st.Bias, 100*st.Under, st.Within, st.N, 100*st.Worst, strings.TrimSuffix(st.WorstFile, ".log"))
	}
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

// accuracyJSON is the --json output.
type accuracyJSON struct {
	Statuses   map[string]int `json:"measured_statuses"`
	GPUs       []string       `json:"measured_gpus"`
	Groups     []groupJSON    `json:"groups"`
	Features   []groupJSON    `json:"features"`
	Cases      []caseJSON     `json:"cases"`
	OOMs       []oomJSON      `json:"ooms"`
	Failures   []failureJSON  `json:"failures"`
	EngineLogs *engineJSON    `json:"engine_logs,omitempty"`
	Violations []string       `json:"violations"`
}

// engineJSON is the engine-log comparison of --json.
type engineJSON struct {
	Logs    int              `json:"logs"`
	Skips   map[string]int   `json:"skipped"`
	Stats   []engineStatJSON `json:"figures_by_kind"`
	Figures []engineRowJSON  `json:"figures"`
}

type engineStatJSON struct {
	Kind      string  `json:"kind"`
	N         int     `json:"n"`
	Within    int     `json:"within_tolerance"`
	Median    float64 `json:"median_abs_error"`
	Bias      float64 `json:"median_error"`
	Under     float64 `json:"under_fraction"`
	Worst     float64 `json:"worst_error"`
	WorstFile string  `json:"worst_file"`
}

type engineRowJSON struct {
	File      string  `json:"file"`
	Figure    string  `json:"figure"`
	Kind      string  `json:"kind"`
	Shape     string  `json:"shape"`
	Measured  float64 `json:"measured"`
	Estimated float64 `json:"estimated"`
	Error     float64 `json:"error"`
	Tolerance float64 `json:"tolerance"`
	Within    bool    `json:"within_tolerance"`
	Miss      string  `json:"listed_miss,omitempty"`
}

type groupJSON struct {
	Source       string  `json:"source"`
	Key          string  `json:"key"`
	Level        string  `json:"level"`
	N            int     `json:"n"`
	Median       float64 `json:"median_abs_error"`
	MedianSigned float64 `json:"median_error"`
	Worst        float64 `json:"worst_abs_error"`
	WorstID      string  `json:"worst_id"`
	Under        float64 `json:"under_fraction"`
}

type caseJSON struct {
	Source    string  `json:"source"`
	ID        string  `json:"id"`
	Family    string  `json:"family"`
	GPU       string  `json:"gpu"`
	Level     string  `json:"level"`
	Measured  int64   `json:"measured"`
	Estimated int64   `json:"estimated"`
	Error     float64 `json:"error"`
	Phase     string  `json:"phase"`
	// MeasuredPhase is the phase a CPU row peaked in.
	MeasuredPhase string   `json:"measured_phase,omitempty"`
	Exempt        string   `json:"exempt,omitempty"`
	Features      []string `json:"features"`
}

type oomJSON struct {
	ID       string `json:"id"`
	GPU      string `json:"gpu"`
	Capacity int64  `json:"capacity"`
	Need     int64  `json:"estimated_device"`
	Fits     bool   `json:"predicted_to_fit"`
	Phase    string `json:"oom_phase"`
}

type failureJSON struct {
	Source string `json:"source"`
	ID     string `json:"id"`
	Error  string `json:"error"`
}

func writeAccuracyJSON(out io.Writer, set accuracy.Set, groups []accuracy.Group, eng *engineLogs, violations []string) error {
	// round keeps the JSON short: errors to 0.01%.
	round := func(x float64) float64 { return math.Round(x*1e4) / 1e4 }
	v := accuracyJSON{Statuses: set.Statuses, GPUs: set.GPUs, Groups: []groupJSON{}, Features: []groupJSON{}, Cases: []caseJSON{},
		OOMs: []oomJSON{}, Failures: []failureJSON{}, Violations: violations}
	if v.GPUs == nil {
		v.GPUs = []string{}
	}
	if v.Violations == nil {
		v.Violations = []string{}
	}
	for _, g := range groups {
		v.Groups = append(v.Groups, groupJSON{g.Source, g.Key, g.Label, g.N, round(g.Median), round(g.MedianSigned),
			round(g.Worst), g.WorstID, round(g.Under)})
	}
	var held []accuracy.Case
	for _, c := range set.Cases {
		if c.Exempt == "" {
			held = append(held, c)
		}
	}
	for _, g := range accuracy.SummarizeFeatures(held) {
		v.Features = append(v.Features, groupJSON{g.Source, g.Key, g.Label, g.N, round(g.Median), round(g.MedianSigned),
			round(g.Worst), g.WorstID, round(g.Under)})
	}
	for _, c := range set.Cases {
		v.Cases = append(v.Cases, caseJSON{c.Source, c.ID, c.Family, c.GPU, c.Label, int64(c.Measured), int64(c.Predicted),
			round(c.Err()), c.Phase, c.MeasuredPhase, c.Exempt, c.Features})
	}
	for _, o := range set.OOMs {
		v.OOMs = append(v.OOMs, oomJSON{o.ID, o.GPU, int64(o.Capacity), int64(o.Need), o.Fits, o.Phase})
	}
	for _, f := range set.Failures {
		v.Failures = append(v.Failures, failureJSON{f.Source, f.ID, f.Err.Error()})
	}
	if eng != nil {
		e := &engineJSON{Logs: eng.res.Logs, Skips: eng.res.Skips, Stats: []engineStatJSON{}, Figures: []engineRowJSON{}}
		for _, st := range enginelog.Stats(eng.res.Rows) {
			e.Stats = append(e.Stats, engineStatJSON{st.Kind, st.N, st.Within, round(st.Median), round(st.Bias), round(st.Under),
				round(st.Worst), st.WorstFile})
		}
		for _, r := range eng.res.Rows {
			e.Figures = append(e.Figures, engineRowJSON{r.File, r.Figure, r.Kind, r.Shape, r.Logged, r.Estimated, round(r.Err()),
				r.Tol, r.OK(), eng.corpus.Misses[r.Key()].Mechanism})
		}
		v.EngineLogs = e
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Colours of the scatter plot's levels.
var levelColors = map[string]color.RGBA{
	accuracy.Allocated: {0x1f, 0x77, 0xb4, 0xff},
	accuracy.Reserved:  {0xff, 0x7f, 0x0e, 0xff},
	accuracy.Device:    {0x2c, 0xa0, 0x2c, 0xff},
	accuracy.KVCache:   {0x94, 0x67, 0xbd, 0xff},
	accuracy.Weights:   {0x8c, 0x56, 0x4b, 0xff},
}

// writeAccuracyChart draws estimated against measured memory, log-log,
// one point per case: colour by level, filled circles for our
// measurements, triangles for published figures, crosses for the figures
// not held to the margin; the diagonal and the ±5% and ±10% bands.
func writeAccuracyChart(file string, set accuracy.Set) error {
	if len(set.Cases) == 0 {
		return fmt.Errorf("%w: --chart: no cases to draw", request.ErrUsage)
	}
	n := map[string]int{}
	for _, c := range set.Cases {
		n[c.Source]++
	}
	title := fmt.Sprintf("gpumem's estimates against %d figures we measured and %d published ones",
		n[accuracy.Measured], n[accuracy.Published])
	if n[accuracy.Measured] == 0 {
		title = fmt.Sprintf("gpumem's estimates against %d published figures (none measured by us yet)", n[accuracy.Published])
	}
	p := newChart(title)
	p.X.Label.Text = "measured (GiB, log scale)"
	p.Y.Label.Text = "estimated (GiB, log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = logTicks{}, logTicks{}
	p.Add(plotter.NewGrid())

	lo, hi := math.Inf(1), 0.0
	for _, c := range set.Cases {
		for _, v := range []float64{c.Measured.GiB(), c.Predicted.GiB()} {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	lo, hi = lo/1.25, hi*1.25
	l := newLegend("Sans")
	for _, band := range []struct {
		f      float64
		label  string
		dashes []vg.Length
		gray   uint8
	}{{1, "estimate = measurement", nil, 0x20}, {0.05, "±5%", []vg.Length{vg.Points(6), vg.Points(3)}, 0x70},
		{0.10, "±10%", []vg.Length{vg.Points(2), vg.Points(3)}, 0x90}} {
		for i, k := range []float64{1 + band.f, 1 - band.f} {
			if band.f == 1 {
				k = 1
			}
			line, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo * k}, {X: hi, Y: hi * k}})
			if err != nil {
				return err
			}
			line.LineStyle.Width = vg.Points(1)
			line.LineStyle.Color = color.Gray{Y: band.gray}
			line.LineStyle.Dashes = band.dashes
			p.Add(line)
			if i == 0 {
				l.Add(band.label, line)
			}
			if band.f == 1 {
				break
			}
		}
	}
	for _, src := range []string{accuracy.Measured, accuracy.Published} {
		for _, lvl := range append(accuracy.Labels[:], accuracy.KVCache, accuracy.Weights) {
			for _, exempt := range []bool{false, true} {
				var pts plotter.XYs
				for _, c := range set.Cases {
					if c.Source == src && c.Label == lvl && (c.Exempt != "") == exempt {
						pts = append(pts, plotter.XY{X: c.Measured.GiB(), Y: c.Predicted.GiB()})
					}
				}
				if len(pts) == 0 {
					continue
				}
				s, err := plotter.NewScatter(pts)
				if err != nil {
					return err
				}
				s.GlyphStyle.Color = levelColors[lvl]
				s.GlyphStyle.Radius = vg.Points(4)
				s.GlyphStyle.Shape = draw.CircleGlyph{}
				name := fmt.Sprintf("%s, %s (%d)", src, lvl, len(pts))
				switch {
				case exempt:
					s.GlyphStyle.Shape = draw.CrossGlyph{}
					name = fmt.Sprintf("%s, %s, exempt (%d)", src, lvl, len(pts))
				case src == accuracy.Published:
					s.GlyphStyle.Shape = draw.TriangleGlyph{}
				}
				p.Add(s)
				l.Add(name, s)
			}
		}
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = lo, hi, lo, hi
	return writePNG(file, render(p, l))
}

// logTicks marks 1, 2 and 5 times each power of ten and labels them,
// with unlabelled minor ticks between, for a log axis in GiB.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
