package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/cmd/gpumem/internal/accuracy"
	"github.com/gpumem/gpumem/request"
)

// The known answer of the synthetic rows: a fleet whose allocator holds
// 7% on top of the allocated peak and whose processes carry 600 MiB
// beyond the allocator (neither is a default: DefaultFragmentation is
// 5%, and the default H100 context under CUDA 12 is 426 MiB).
const (
	synthFrag    = 0.07
	synthContext = 600 * gpumem.MiB
	synthGPU     = "NVIDIA H100 80GB HBM3"
)

// synthCase is one synthetic job: llama-3.2-1b in bf16.
type synthCase struct {
	train      bool
	batch, seq int
}

var synthCases = []synthCase{
	{true, 1, 512}, {true, 2, 512}, {true, 4, 1024}, {true, 8, 2048},
	{false, 1, 2048}, {false, 8, 4096}, {false, 32, 4096},
}

func (c synthCase) job() accuracy.Job {
	seq, opt := c.seq, "adamw"
	j := accuracy.Job{Model: "llama-3.2-1b", Catalog: "llama-3.2-1b", Kind: "causal", Mode: "train",
		Batch: c.batch, Seq: &seq, Precision: "bf16", Optimizer: &opt, Attention: "sdpa", Checkpointing: "none"}
	if !c.train {
		j.Mode, j.Optimizer = "prefill", nil
	}
	return j
}

func (c synthCase) flags() []string {
	mode := "--infer"
	if c.train {
		mode = "--train"
	}
	return []string{"--model", "llama-3.2-1b", mode, "--batch", strconv.Itoa(c.batch), "--seq", strconv.Itoa(c.seq),
		"--precision", "bf16", "--gpu", synthGPU}
}

// roundUp rounds v up to a multiple of m.
func roundUp(v, m gpumem.Bytes) gpumem.Bytes { return (v + m - 1) / m * m }

// synthRow measures c as a device would under the known overhead: the
// allocated peak is the estimate's, rounded up to the allocator's 512
// bytes; the allocator reserves (1+f)·A in whole 2 MiB segments; the
// driver shows that plus the context, in whole MiB (nvidia-smi).
func synthRow(t *testing.T, c synthCase) (row string, peak [3]gpumem.Bytes) {
	t.Helper()
	j := c.job()
	bj, err := j.Budget()
	require.NoError(t, err)
	bj.Device, _ = gpumem.LookupDevice(synthGPU)
	b, err := budget.Estimate(bj)
	require.NoError(t, err)
	a := roundUp(b.Allocated(), 512)
	r := roundUp(gpumem.Bytes(math.Ceil((1+synthFrag)*float64(a))), 2*gpumem.MiB)
	d := roundUp(r+synthContext, gpumem.MiB)
	m := map[string]any{"schema": 1, "id": fmt.Sprintf("synth/%v/b%d/s%d", c.train, c.batch, c.seq), "status": "ok",
		"job": j, "env": map[string]any{"gpu": synthGPU, "cuda": "12.4"},
		"peak": map[string]any{"allocated": int64(a), "reserved": int64(r), "device": int64(d)}}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return string(out), [3]gpumem.Bytes{a, r, d}
}

// writeSynthRows writes the synthetic rows (with an oom row, which is
// skipped, and a blank line) to a file and returns its name and peaks.
func writeSynthRows(t *testing.T) (string, [][3]gpumem.Bytes) {
	t.Helper()
	var lines []string
	var peaks [][3]gpumem.Bytes
	for _, c := range synthCases {
		l, p := synthRow(t, c)
		lines = append(lines, l)
		peaks = append(peaks, p)
	}
	lines = append(lines, "", `{"schema":1,"id":"synth/oom","status":"oom","oom_phase":"backward","error":"CUDA out of memory","job":{"model":"llama-3.2-1b"}}`)
	name := filepath.Join(t.TempDir(), "rows.jsonl")
	require.NoError(t, os.WriteFile(name, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	return name, peaks
}

// TestCalibrateSynthetic fits rows made with a known fragmentation and
// context and checks the command recovers both, that the fit's error
// shrinks, and that estimate --profile then reproduces the rows.
func TestCalibrateSynthetic(t *testing.T) {
	t.Parallel()
	rows, peaks := writeSynthRows(t)
	prof := filepath.Join(t.TempDir(), "profile.json")
	code, stdout, stderr := runCLI(t, "", "calibrate", "--out", prof, rows)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "fitted 7 rows")
	assert.Contains(t, stdout, "median before")

	b, err := os.ReadFile(prof)
	require.NoError(t, err)
	p, err := request.ParseProfile(b)
	require.NoError(t, err)
	// Tolerances: the 2 MiB segment rounding moves R by under 2 MiB on
	// peaks of 2.9 GB and more, so f within 0.001; the nvidia-smi MiB
	// rounding adds 0 to 1 MiB to every D − R, so C in [600, 601] MiB.
	assert.InDelta(t, synthFrag, p.Fragmentation, 0.001)
	assert.GreaterOrEqual(t, p.Context, int64(synthContext))
	assert.LessOrEqual(t, p.Context, int64(synthContext+gpumem.MiB))
	require.NotNil(t, p.Fit)
	assert.Equal(t, 7, p.Fit.N)
	require.Len(t, p.Fit.Before, 3)
	require.Len(t, p.Fit.After, 3)
	for i, l := range []string{"allocated", "reserved", "device"} {
		assert.Equal(t, l, p.Fit.Before[i].Level)
		assert.Equal(t, 7, p.Fit.Before[i].N)
		assert.Equal(t, 7, p.Fit.After[i].N)
	}
	// Allocated: the estimate is the measurement but for the 512-byte
	// rounding, before and after alike.
	assert.Less(t, math.Abs(p.Fit.After[0].Worst), 1e-6)
	// Reserved and device: the defaults (5%, 426 MiB) are off by about
	// 2% before; the profile leaves only the rounding.
	for _, l := range []int{1, 2} {
		assert.Greater(t, math.Abs(p.Fit.Before[l].Worst), 0.01, p.Fit.Before[l].Level)
		assert.Less(t, math.Abs(p.Fit.After[l].Worst), 0.002, p.Fit.After[l].Level)
	}

	// estimate --profile reproduces every row's reserved and device
	// peaks within 0.2% (the rounding), and without it does not.
	for i, c := range synthCases {
		var with, without struct {
			Reserved int64 `json:"reserved_peak"`
			Device   int64 `json:"device_peak"`
		}
		code, out, stderr := runCLI(t, "", append([]string{"estimate", "--json", "--profile", prof}, c.flags()...)...)
		require.Equal(t, 0, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(out), &with))
		code, out, stderr = runCLI(t, "", append([]string{"estimate", "--json"}, c.flags()...)...)
		require.Equal(t, 0, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(out), &without))
		rel := func(est int64, m gpumem.Bytes) float64 { return math.Abs(float64(est)-float64(m)) / float64(m) }
		assert.Less(t, rel(with.Reserved, peaks[i][1]), 0.002, "reserved %v", c)
		assert.Less(t, rel(with.Device, peaks[i][2]), 0.002, "device %v", c)
		assert.Greater(t, rel(without.Device, peaks[i][2]), 0.005, "device without the profile %v", c)
	}

	// plan takes the profile too.
	code, _, stderr = runCLI(t, "", "plan", "--profile", prof, "--model", "llama-3.2-1b", "--train", "--batch", "1", "--seq", "512", "--gpu", synthGPU)
	assert.Equal(t, 0, code, stderr)
}

// TestCalibrateDeviceOnly: rows without a reserved peak fit f and C
// together from the device peaks of different sizes.
func TestCalibrateDeviceOnly(t *testing.T) {
	t.Parallel()
	var lines []string
	for _, c := range synthCases {
		l, _ := synthRow(t, c)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		m["peak"].(map[string]any)["reserved"] = nil
		b, err := json.Marshal(m)
		require.NoError(t, err)
		lines = append(lines, string(b))
	}
	rows := filepath.Join(t.TempDir(), "rows.jsonl")
	require.NoError(t, os.WriteFile(rows, []byte(strings.Join(lines, "\n")), 0o644))
	code, stdout, stderr := runCLI(t, "", "calibrate", "--out", "-", rows)
	require.Equal(t, 0, code, stderr)
	p, err := request.ParseProfile([]byte(stdout))
	require.NoError(t, err)
	// Both rounding steps now land on D: f within 0.002, C within 16 MiB.
	assert.InDelta(t, synthFrag, p.Fragmentation, 0.002)
	assert.InDelta(t, float64(synthContext), float64(p.Context), float64(16*gpumem.MiB))
	require.Len(t, p.Fit.After, 2) // allocated and device
}

// TestCalibrateBadRows: garbage exits 2 naming the file, line and field.
func TestCalibrateBadRows(t *testing.T) {
	t.Parallel()
	good, _ := synthRow(t, synthCases[0])
	for name, tc := range map[string]struct{ line, want string }{
		"not json":   {`{"schema":1,`, "rows.jsonl:2: "},
		"schema":     {`{"schema":2,"id":"x","status":"ok"}`, `rows.jsonl:2: field "schema" = 2`},
		"no id":      {`{"schema":1,"status":"ok"}`, `rows.jsonl:2: field "id" is empty`},
		"no peak":    {`{"schema":1,"id":"x","status":"ok","job":{}}`, `rows.jsonl:2: field "peak"`},
		"negative":   {strings.Replace(good, `"device":`, `"device":-`, 1), `rows.jsonl:2: field "peak.device" = -`},
		"unknown":    {strings.Replace(good, `"batch"`, `"bacth"`, 1), `rows.jsonl:2: job: unknown field "bacth"`},
		"bad job":    {strings.Replace(good, `"batch":1`, `"batch":-1`, 1), `rows.jsonl:2: field "job"`},
		"bad cuda":   {strings.Replace(good, `"cuda":"12.4"`, `"cuda":"twelve"`, 1), `rows.jsonl:2: field "env.cuda"`},
		"contradict": {contradict(t, good), `rows.jsonl:2: field "peak.reserved"`},
	} {
		rows := filepath.Join(t.TempDir(), "rows.jsonl")
		require.NoError(t, os.WriteFile(rows, []byte(good+"\n"+tc.line+"\n"), 0o644))
		code, _, stderr := runCLI(t, "", "calibrate", "--out", filepath.Join(t.TempDir(), "p.json"), rows)
		assert.Equal(t, 2, code, name)
		assert.Contains(t, stderr, tc.want, name)
	}
	// One row cannot separate the context from fragmentation without a
	// reserved peak; no file at all is a usage error too.
	code, _, stderr := runCLI(t, "", "calibrate")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "ROWS.jsonl")
}

// contradict returns row with its reserved peak below its allocated one.
func contradict(t *testing.T, row string) string {
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(row), &m))
	pk := m["peak"].(map[string]any)
	pk["reserved"] = pk["allocated"].(float64) - 1024
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

// TestProfileFlagErrors: a bad profile file is a usage error naming the
// flag, the file and the field.
func TestProfileFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"schema":     {`{"schema":3}`, `field "schema" = 3`},
		"context":    {`{"schema":1,"context":-5}`, `field "context" = -5`},
		"frag":       {`{"schema":1,"fragmentation":11}`, `field "fragmentation" = 11`},
		"workspace":  {`{"schema":1,"workspace":-1}`, `field "workspace" = -1`},
		"workspaces": {`{"schema":1,"workspaces":-2}`, `field "workspaces" = -2`},
		"unknown":    {`{"schema":1,"contex":5}`, `unknown field "contex"`},
		"type":       {`{"schema":1,"context":"1GiB"}`, `profile.context`},
		"two values": {`{"schema":1} {}`, "more than one JSON value"},
		"not json":   {`nope`, "invalid character"},
		"missing":    {"", "no such file"},
	} {
		f := filepath.Join(dir, name+".json")
		if tc.body != "" {
			require.NoError(t, os.WriteFile(f, []byte(tc.body), 0o644))
		}
		for _, cmd := range []string{"estimate", "plan"} {
			code, _, stderr := runCLI(t, "", cmd, "--profile", f, "--model", "gpt2", "--train", "--batch", "1", "--seq", "128", "--gpu", "h100")
			assert.Equal(t, 2, code, name)
			assert.Contains(t, stderr, "--profile", name)
			assert.Contains(t, stderr, tc.want, name)
		}
	}
	// A profile's terms reach the estimate: fragmentation −1 (none) makes
	// reserved equal allocated, context 1 GiB is the context component.
	f := filepath.Join(dir, "ok.json")
	require.NoError(t, os.WriteFile(f, []byte(`{"schema":1,"context":1073741824,"fragmentation":-1}`), 0o644))
	code, out, stderr := runCLI(t, "", "estimate", "--json", "--profile", f, "--model", "gpt2", "--train", "--batch", "1", "--seq", "128", "--gpu", "h100")
	require.Equal(t, 0, code, stderr)
	var e struct {
		Allocated  int64 `json:"allocated_peak"`
		Reserved   int64 `json:"reserved_peak"`
		Device     int64 `json:"device_peak"`
		Components struct {
			Context int64 `json:"context"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	assert.Equal(t, e.Allocated, e.Reserved)
	assert.Equal(t, int64(1<<30), e.Components.Context)
	assert.Equal(t, e.Reserved+1<<30, e.Device)
}

// TestServeProfile: the "profile" request field takes the profile
// object inline, answers what estimate/plan --profile print, and a bad
// one is a 400 naming the request's field.
func TestServeProfile(t *testing.T) {
	t.Parallel()
	body := `{"schema":1,"context":1073741824,"fragmentation":0.2}`
	f := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, os.WriteFile(f, []byte(body), 0o644))
	h := newServer(serverOptions{})
	for _, route := range []string{"estimate", "plan"} {
		code, want, stderr := runCLI(t, "", route, "--json", "--profile", f, "--model", "gpt2", "--train", "--batch", "2", "--seq", "512", "--gpu", "rtx 3090")
		require.Equal(t, 0, code, stderr)
		_, without, _ := runCLI(t, "", route, "--json", "--model", "gpt2", "--train", "--batch", "2", "--seq", "512", "--gpu", "rtx 3090")
		assert.NotEqual(t, want, without, route)
		w := do(t, h, http.MethodPost, "/v1/"+route, "application/json",
			strings.NewReader(`{"model":"gpt2","train":true,"batch":2,"seq":512,"gpu":"rtx 3090","profile":`+body+`}`))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		assert.Equal(t, want, w.Body.String(), route)
	}
	for _, p := range []string{`{"schema":1,"fragmentation":-0.5,"context":-1}`, `{"schema":2}`, `{"schema":1,"contex":1}`, `"h100.json"`} {
		w := do(t, h, http.MethodPost, "/v1/estimate", "application/json",
			strings.NewReader(`{"model":"gpt2","train":true,"profile":`+p+`}`))
		assert.Equal(t, http.StatusBadRequest, w.Code, p)
		var m map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
		assert.Equal(t, "profile", m["field"], p)
	}
}

// TestCalibrateTooFew: rows that cannot be fitted exit 2 saying why.
func TestCalibrateTooFew(t *testing.T) {
	t.Parallel()
	one, _ := synthRow(t, synthCases[0])
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(one), &m))
	m["peak"].(map[string]any)["reserved"] = nil
	b, err := json.Marshal(m)
	require.NoError(t, err)
	for name, tc := range map[string]struct{ body, want string }{
		"one device row": {string(b), "one device-level measurement cannot separate"},
		"only oom":       {`{"schema":1,"id":"x","status":"oom","job":{}}`, "no observations to fit"},
		"empty":          {"\n\n", "no observations to fit"},
	} {
		rows := filepath.Join(t.TempDir(), "rows.jsonl")
		require.NoError(t, os.WriteFile(rows, []byte(tc.body), 0o644))
		code, _, stderr := runCLI(t, "", "calibrate", "--out", "-", rows)
		assert.Equal(t, 2, code, name)
		assert.Contains(t, stderr, tc.want, name)
	}
}

// FuzzCalibrateInput: any row line and any profile bytes give a result
// or an error, never a panic.
func FuzzCalibrateInput(f *testing.F) {
	for _, s := range []string{
		`{"schema":1,"id":"x","status":"ok","job":{"model":"gpt2","catalog":"gpt2","mode":"train","batch":1,"seq":128,"precision":"bf16"},"peak":{"allocated":1,"reserved":2,"device":3}}`,
		`{"schema":1,"id":"x","status":"ok","peak":{"allocated":-1}}`,
		`{"schema":1,"context":1,"fragmentation":1e308}`,
		`{"schema":1,"env":{"cuda":"99.9","CUDA_MODULE_LOADING":"lazy"},"status":"ok","id":"y","peak":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, ok, err := calRowOf(b); err == nil && ok {
			_, _ = fitProfile([]calRow{r, r})
		}
		_, _ = request.ParseProfile(b)
	})
}
