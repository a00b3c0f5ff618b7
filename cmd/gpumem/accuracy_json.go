package main

// gpumem accuracy -json: the report's JSON form.

import (
	"encoding/json"
	"io"
	"math"

	"github.com/gpumem/gpumem/cmd/gpumem/internal/accuracy"
	"github.com/gpumem/gpumem/enginelog"
)

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
