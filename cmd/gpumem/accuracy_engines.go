package main

// The engine-log part of gpumem accuracy: loading the recorded logs and
// printing their rows.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/gpumem/gpumem/enginelog"
	"github.com/gpumem/gpumem/request"
)

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
