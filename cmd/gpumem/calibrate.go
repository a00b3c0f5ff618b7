package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/cmd/gpumem/internal/accuracy"
	"github.com/gpumem/gpumem/request"
)

// calRow is one ok row of a calibration file with its job.
type calRow struct {
	where string // file:line
	id    string
	job   budget.Job
	peak  [3]gpumem.Bytes // allocated, reserved, device; 0: not measured
}

var calLevels = [3]string{accuracy.Allocated, accuracy.Reserved, accuracy.Device}

func runCalibrate(args []string, _ io.Reader, out, _ io.Writer) error {
	fs := newFlags("calibrate", out)
	outFile := fs.String("out", "gpumem-profile.json", "write the profile to `FILE` (- : standard output, the report then goes nowhere)")
	asJSON := fs.Bool("json", false, "print the report as JSON (the profile with its fit)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: give one or more ROWS.jsonl files (tools/calibrate's output)", request.ErrUsage)
	}
	var rows []calRow
	for _, name := range fs.Args() {
		rs, err := readCalRows(name)
		if err != nil {
			return fmt.Errorf("%w: %v", request.ErrUsage, err)
		}
		rows = append(rows, rs...)
	}
	p, err := fitProfile(rows)
	if err != nil {
		return fmt.Errorf("%w: %v", request.ErrUsage, err)
	}
	p.Fit.Rows = fs.Args()
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if *outFile == "-" {
		_, err = out.Write(b)
		return err
	}
	if err := os.WriteFile(*outFile, b, 0o644); err != nil {
		return fmt.Errorf("%w: --out %q: %v", request.ErrUsage, *outFile, err)
	}
	if *asJSON {
		_, err = out.Write(b)
		return err
	}
	printCalibration(out, p, *outFile)
	return nil
}

// readCalRows reads the ok rows of one tools/calibrate file; other
// statuses carry no peak and are skipped.
func readCalRows(name string) ([]calRow, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []calRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		where := name + ":" + strconv.Itoa(n)
		r, ok, err := calRowOf(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		if ok {
			r.where = where
			rows = append(rows, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return rows, nil
}

// calRowOf decodes one row; ok is false for a row that measured no peak
// (status oom, unsupported, error, timeout).
func calRowOf(line []byte) (calRow, bool, error) {
	var r accuracy.Row
	if err := json.Unmarshal(line, &r); err != nil {
		return calRow{}, false, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	switch {
	case r.Schema != 1:
		return calRow{}, false, fmt.Errorf("field \"schema\" = %d: this reader knows schema 1", r.Schema)
	case r.ID == "":
		return calRow{}, false, errors.New("field \"id\" is empty")
	case r.Status == "":
		return calRow{}, false, errors.New("field \"status\" is empty")
	case r.Status != "ok":
		return calRow{}, false, nil
	case r.Peak == nil:
		return calRow{}, false, errors.New("field \"peak\": an ok row without a peak")
	}
	c := calRow{id: r.ID}
	for i, v := range [3]*int64{r.Peak.Allocated, r.Peak.Reserved, r.Peak.Device} {
		if v == nil {
			continue
		}
		if *v < 0 {
			return c, false, fmt.Errorf("field \"peak.%s\" = %d: a measured peak must not be negative", calLevels[i], *v)
		}
		c.peak[i] = gpumem.Bytes(*v)
	}
	j, err := r.Job.Budget()
	if err != nil {
		return c, false, fmt.Errorf("field \"job\": %v", err)
	}
	if err := rowEnvironment(&j, &r.Env); err != nil {
		return c, false, err
	}
	if _, err := budget.Estimate(j); err != nil {
		return c, false, fmt.Errorf("field \"job\": %v", err)
	}
	c.job = j
	return c, true, nil
}

// rowEnvironment sets the job's device, CUDA and module loading from
// the row's env, as the accuracy comparison does: these choose the
// default CUDA context that the "before" column compares with.
func rowEnvironment(j *budget.Job, e *accuracy.Env) error {
	if d, ok := gpumem.LookupDevice(e.GPU); ok {
		j.Device = d
	} else if e.ComputeCapability != "" {
		c, err := gpumem.ParseComputeCapability(e.ComputeCapability)
		if err != nil {
			return fmt.Errorf("field \"env.compute_capability\": %v", err)
		}
		j.Device = gpumem.Device{Compute: c}
	}
	if e.CUDA != "" {
		v, err := budget.ParseCUDAVersion(e.CUDA)
		if err != nil {
			return fmt.Errorf("field \"env.cuda\": %v", err)
		}
		j.Overhead.CUDA = v
	}
	switch strings.ToUpper(e.ModuleLoading) {
	case "":
	case "LAZY":
		j.Overhead.Loading = budget.LoadingLazy
	case "EAGER":
		j.Overhead.Loading = budget.LoadingEager
	case "DEFAULT": // eager before CUDA 12.2 (CUDA Programming Guide, "Lazy Loading")
		j.Overhead.Loading = budget.LoadingLazy
		if !j.Overhead.CUDA.IsZero() && j.Overhead.CUDA.Less(budget.CUDAVersion{Major: 12, Minor: 2}) {
			j.Overhead.Loading = budget.LoadingEager
		}
	default:
		return fmt.Errorf("field \"env.CUDA_MODULE_LOADING\" = %q: want LAZY, EAGER or DEFAULT", e.ModuleLoading)
	}
	return nil
}

// fitProfile fits the overhead with budget.Calibrate and measures the
// estimates' error before (the defaults) and after (the profile).
func fitProfile(rows []calRow) (request.Profile, error) {
	obs := make([]budget.Observation, len(rows))
	for i, r := range rows {
		obs[i] = budget.Observation{Name: r.id, Job: r.job, Allocated: r.peak[0], Reserved: r.peak[1], Device: r.peak[2]}
	}
	ov, err := budget.Calibrate(obs)
	if err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) && strings.HasPrefix(fe.Field, "Observation[") {
			// Name the row, not the slice index.
			idx, rest, _ := strings.Cut(strings.TrimPrefix(fe.Field, "Observation["), "]")
			if i, e := strconv.Atoi(idx); e == nil && i >= 0 && i < len(rows) {
				f := strings.TrimPrefix(rest, ".")
				switch f {
				case "Allocated", "Reserved", "Device":
					f = "peak." + strings.ToLower(f)
				default:
					f = "job"
				}
				return request.Profile{}, fmt.Errorf("%s: field \"%s\" = %v: %v", rows[i].where, f, fe.Value, fe.Err)
			}
		}
		return request.Profile{}, fmt.Errorf("fitting %d rows: %v", len(rows), err)
	}
	p := request.Profile{Schema: request.ProfileSchema, Context: int64(ov.Context), Fragmentation: ov.Fragmentation}
	before, err := levelErrors(rows, nil)
	if err != nil {
		return p, err
	}
	after, err := levelErrors(rows, &p)
	if err != nil {
		return p, err
	}
	p.Fit = &request.ProfileFit{N: len(rows), Before: before, After: after}
	return p, nil
}

// levelErrors estimates every row (with the profile applied, if any) and
// summarizes the relative error at each measured level.
func levelErrors(rows []calRow, p *request.Profile) ([]request.LevelError, error) {
	var errs [3][]float64
	for _, r := range rows {
		j := r.job
		if p != nil {
			p.Apply(&j.Overhead)
		}
		b, err := budget.Estimate(j)
		if err != nil {
			return nil, fmt.Errorf("%s: estimating with the profile: %v", r.where, err)
		}
		est := [3]gpumem.Bytes{b.Allocated(), b.Reserved(), b.Device()}
		for l, m := range r.peak {
			if m > 0 {
				errs[l] = append(errs[l], float64(est[l]-m)/float64(m))
			}
		}
	}
	var out []request.LevelError
	for l, es := range errs {
		if len(es) == 0 {
			continue
		}
		e := request.LevelError{Level: calLevels[l], N: len(es)}
		for _, x := range es {
			if math.Abs(x) > math.Abs(e.Worst) {
				e.Worst = x
			}
		}
		slices.Sort(es)
		if n := len(es); n%2 == 1 {
			e.Median = es[n/2]
		} else {
			e.Median = (es[n/2-1] + es[n/2]) / 2
		}
		out = append(out, e)
	}
	return out, nil
}

func printCalibration(out io.Writer, p request.Profile, file string) {
	fmt.Fprintf(out, "fitted %d rows\n", p.Fit.N)
	if p.Context > 0 {
		fmt.Fprintf(out, "context        %s (%d bytes)\n", gpumem.Bytes(p.Context).Exact(), p.Context)
	} else {
		fmt.Fprintf(out, "context        not measured (the default stays)\n")
	}
	if p.Fragmentation < 0 {
		fmt.Fprintf(out, "fragmentation  none\n")
	} else {
		fmt.Fprintf(out, "fragmentation  %.2f%%\n", 100*p.Fragmentation)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nlevel\tn\tmedian before\tworst before\tmedian after\tworst after")
	for i, b := range p.Fit.Before {
		a := p.Fit.After[i]
		fmt.Fprintf(tw, "%s\t%d\t%+.2f%%\t%+.2f%%\t%+.2f%%\t%+.2f%%\n", b.Level, b.N,
			100*b.Median, 100*b.Worst, 100*a.Median, 100*a.Worst)
	}
	tw.Flush()
	fmt.Fprintf(out, "\nwrote %s; apply it with gpumem estimate --profile %s (or plan)\n", file, file)
}
