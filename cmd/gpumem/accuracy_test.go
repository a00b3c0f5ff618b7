package main

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/cmd/gpumem/internal/accuracy"
	"github.com/gpumem/gpumem/request"
)

// TestAccuracy runs gpumem accuracy on the repository's data: the table
// names every published level and the CPU source, the JSON has one case
// per stated figure and per ok CPU row, and the chart is a PNG.
func TestAccuracy(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "accuracy", "--data", "../../testdata")
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{"published  all", "cpu        all", "allocated", "reserved", "device", "gate: met", "by feature", "published  loss:chunked",
		"enginelog  KV cache (all layers)", "serving-engine load logs (testdata/enginelogs)"} {
		assert.Contains(t, out, want)
	}
	stated, err := accuracy.ReadPublished(os.DirFS("../../testdata"), "published")
	require.NoError(t, err)
	cpuRows, err := accuracy.ReadCPU(os.DirFS("../../testdata"), "measured/cpu")
	require.NoError(t, err)
	cpu := accuracy.CompareCPU(cpuRows)
	require.NotEmpty(t, cpu.Cases)
	code, out, _ = runCLI(t, "", "accuracy", "--data", "../../testdata", "--by", "id", "--json")
	require.Equal(t, exitOK, code)
	var v struct {
		Groups []struct {
			Key string `json:"key"`
			N   int    `json:"n"`
		} `json:"groups"`
		Features []struct {
			Key string `json:"key"`
			N   int    `json:"n"`
		} `json:"features"`
		Cases []struct {
			Source    string   `json:"source"`
			ID        string   `json:"id"`
			Measured  int64    `json:"measured"`
			Estimated int64    `json:"estimated"`
			Error     float64  `json:"error"`
			Exempt    string   `json:"exempt"`
			Features  []string `json:"features"`
		} `json:"cases"`
		EngineLogs struct {
			Logs  int `json:"logs"`
			Stats []struct {
				Kind string `json:"kind"`
				N    int    `json:"n"`
			} `json:"figures_by_kind"`
			Figures []struct {
				File      string  `json:"file"`
				Measured  float64 `json:"measured"`
				Estimated float64 `json:"estimated"`
				Error     float64 `json:"error"`
				Within    bool    `json:"within_tolerance"`
				Miss      string  `json:"listed_miss"`
			} `json:"figures"`
		} `json:"engine_logs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Len(t, v.Cases, len(stated)+len(cpu.Cases))
	require.Len(t, v.Groups, len(stated)+len(cpu.Cases), "--by id: one group per case")
	n := map[string]int{}
	// Each held case counts once under each of its features.
	held := map[string]int{}
	for _, c := range v.Cases {
		n[c.Source]++
		assert.InDelta(t, float64(c.Estimated-c.Measured)/float64(c.Measured), c.Error, 1e-4, c.ID)
		if c.Source != accuracy.CPU {
			require.NotEmpty(t, c.Features, c.ID)
		}
		for _, f := range c.Features {
			if c.Exempt == "" {
				held[f]++
			}
		}
	}
	grouped := map[string]int{}
	for _, g := range v.Features {
		grouped[g.Key] += g.N
	}
	assert.Equal(t, held, grouped)
	// The engine logs: their own source, every figure counted in one kind,
	// and every figure outside its tolerance a listed miss.
	assert.GreaterOrEqual(t, v.EngineLogs.Logs, 100)
	require.NotEmpty(t, v.EngineLogs.Figures)
	figures := 0
	for _, st := range v.EngineLogs.Stats {
		figures += st.N
	}
	assert.Equal(t, len(v.EngineLogs.Figures), figures)
	for _, f := range v.EngineLogs.Figures {
		assert.InDelta(t, (f.Estimated-f.Measured)/f.Measured, f.Error, 1e-4, f.File)
		assert.Equal(t, f.Within, f.Miss == "", "%s: a figure outside its tolerance is a listed miss, and only such a figure", f.File)
	}
	require.Equal(t, map[string]int{accuracy.Published: len(stated), accuracy.CPU: len(cpu.Cases)}, n)

	png := filepath.Join(t.TempDir(), "acc.png")
	code, _, stderr = runCLI(t, "", "accuracy", "--data", "../../testdata", "--by", "gpu", "--chart", png)
	require.Equal(t, exitOK, code, stderr)
	b, err := os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "\x89PNG"))
}

// TestAccuracyGate checks exit 1 with the violation named when a figure
// is far above its estimate, and exit 2 for bad flags and data.
func TestAccuracyGate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "published"), 0o755))
	// GPT-2 inference needs well under 1 GiB; the figure says 40 GiB.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "published", "peaks.jsonl"),
		[]byte(`{"id":"x","metric":"max_memory_allocated","value_bytes":42949672960}`+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "published", "jobs.jsonl"),
		[]byte(`{"id":"x","label":"allocated","job":{"model":"gpt2","catalog":"gpt2","kind":"causal","mode":"prefill",`+
			`"batch":1,"seq":128,"precision":"bf16","optimizer":null,"attention":"sdpa","checkpointing":"none","lora_rank":0},"unmodelled":"","how":"test"}`+"\n"), 0o600))
	code, out, stderr := runCLI(t, "", "accuracy", "--data", dir)
	assert.Equal(t, exitDoesNotFit, code)
	assert.Contains(t, out, "gate: missed (1)")
	assert.Contains(t, out, "published x: allocated estimate")
	assert.Contains(t, stderr, "miss the accuracy gate")

	// An engine log whose figure misses its tolerance without a line in
	// misses.jsonl misses the gate; with its line it meets it. The log's
	// index line is given twice its context (16384 for the 8192 the job
	// ran), so the modelled cache no longer matches the logged one.
	eng := t.TempDir()
	logs := filepath.Join(eng, "enginelogs")
	require.NoError(t, os.MkdirAll(logs, 0o755))
	const file = "ollama-ollama-11711.log"
	b, err := os.ReadFile(filepath.Join("../../testdata/enginelogs", file))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(logs, file), b, 0o600))
	idx, err := os.ReadFile("../../testdata/enginelogs/index.jsonl")
	require.NoError(t, err)
	var line string
	for _, l := range strings.Split(string(idx), "\n") {
		if strings.Contains(l, `"file":"`+file+`"`) {
			line = l
		}
	}
	require.NotEmpty(t, line)
	require.Contains(t, line, `"n_ctx":8192`)
	line = strings.Replace(line, `"n_ctx":8192`, `"n_ctx":16384`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(logs, "index.jsonl"), []byte(line+"\n"), 0o600))
	code, out, _ = runCLI(t, "", "accuracy", "--data", eng)
	assert.Equal(t, exitDoesNotFit, code, out)
	assert.Contains(t, out, "enginelog ollama-ollama-11711.log: Ollama memory.required.kv")
	require.NoError(t, os.WriteFile(filepath.Join(logs, "misses.jsonl"),
		[]byte(`{"file":"`+file+`","figure":"Ollama memory.required.kv","mechanism":"the index states twice the job's context"}`+"\n"), 0o600))
	code, out, _ = runCLI(t, "", "accuracy", "--data", eng)
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "enginelog  Ollama memory.required.kv")
	require.NoError(t, os.WriteFile(filepath.Join(logs, "index.jsonl"), []byte(`{"file":"x.log"}`+"\n"), 0o600))
	code, _, stderr = runCLI(t, "", "accuracy", "--data", eng)
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, "enginelogs/index.jsonl line 1")

	// A CPU row far from its estimate misses the gate unless misses.tsv
	// lists it, and a listed row that meets the target misses it too.
	cpu := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(cpu, "measured", "cpu"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(cpu, "measured", "cpu", "2.6.0-x.jsonl"),
		[]byte(`{"schema":1,"id":"c","status":"ok","job":{"model":"gpt2","catalog":"gpt2","kind":"causal","mode":"prefill",`+
			`"batch":1,"seq":128,"precision":"fp32","optimizer":null,"attention":"sdpa","checkpointing":"none","lora_rank":0},`+
			`"env":{"torch":"2.6.0","transformers":"4.57.1"},"peak":{"allocated":42949672960,"phase":"forward"}}`+"\n"), 0o600))
	code, _, stderr = runCLI(t, "", "accuracy", "--data", cpu)
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, "misses.tsv")
	require.NoError(t, os.WriteFile(filepath.Join(cpu, "measured", "cpu", "misses.tsv"), nil, 0o600))
	code, out, _ = runCLI(t, "", "accuracy", "--data", cpu)
	assert.Equal(t, exitDoesNotFit, code)
	assert.Contains(t, out, "cpu c: misses the target")
	assert.Contains(t, out, "1 rows of whole jobs on the CPU (torch 2.6.0, transformers 4.57.1; measured/cpu): 0 meet the target, 1 miss it (0 listed)")
	require.NoError(t, os.WriteFile(filepath.Join(cpu, "measured", "cpu", "misses.tsv"), []byte("c\ta test\n"), 0o600))
	code, out, stderr = runCLI(t, "", "accuracy", "--data", cpu)
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "gate: met")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"accuracy", "--data", filepath.Join(dir, "nothing")}, "--data"},
		{[]string{"accuracy", "--data", t.TempDir()}, "no measured rows"},
		{[]string{"accuracy", "--data", "../../testdata", "--by", "colour"}, `--by "colour"`},
		{[]string{"accuracy", "--data", "../../testdata", "--chart", "a.svg"}, `--chart "a.svg"`},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		assert.Equal(t, exitBadInput, code, tc.args)
		assert.Contains(t, stderr, tc.want, tc.args)
	}
}

// TestGridFlags checks that the gpumem estimate command line that
// tools/calibrate records with each case (gpumem_flags) describes the
// same job as the case's job object: both give the same estimate, for
// every case of the grid that has a command line; and that the command
// line passes the mode checks (no flag that does nothing for its mode).
func TestGridFlags(t *testing.T) {
	t.Parallel()
	f, err := os.Open("internal/accuracy/testdata/grid.jsonl.gz")
	require.NoError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	require.NoError(t, err)
	dec := json.NewDecoder(z)
	n := 0
	for dec.More() {
		var r struct {
			ID    string       `json:"id"`
			Job   accuracy.Job `json:"job"`
			Flags *string      `json:"gpumem_flags"`
		}
		require.NoError(t, dec.Decode(&r))
		if r.Flags == nil {
			continue
		}
		fs := newFlags("estimate", nil)
		var jf request.Flags
		jf.Register(fs)
		require.NoError(t, parse(fs, strings.Fields(*r.Flags)), r.ID)
		require.NoError(t, jf.CheckGiven(fs), "%s: %s", r.ID, *r.Flags)
		fromFlags, _, err := jf.Job()
		require.NoError(t, err, r.ID)
		fromJob, err := r.Job.Budget()
		require.NoError(t, err, r.ID)
		a, err := budget.Estimate(fromFlags)
		require.NoError(t, err, r.ID)
		b, err := budget.Estimate(fromJob)
		require.NoError(t, err, r.ID)
		require.Equal(t, b, a, "%s: %s", r.ID, *r.Flags)
		n++
	}
	require.Greater(t, n, 600)
	t.Logf("%d grid cases: the command line and the job agree", n)
}

// TestAccuracyREADME checks that the table the README quotes is what
// gpumem accuracy prints today, so that new data cannot leave it stale.
func TestAccuracyREADME(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	const start = "$ go run ./cmd/gpumem accuracy\n"
	readme := string(b)
	i := strings.Index(readme, start)
	require.GreaterOrEqual(t, i, 0, "the README quotes gpumem accuracy")
	quoted := readme[i+len(start):]
	quoted = quoted[:strings.Index(quoted, "```")]
	code, out, stderr := runCLI(t, "", "accuracy", "--data", "../../testdata")
	require.Equal(t, exitOK, code, stderr)
	const end = "under: the share of cases under-estimated.\n"
	j := strings.Index(out, end)
	require.GreaterOrEqual(t, j, 0)
	require.Equal(t, out[:j+len(end)], quoted, "update the README's accuracy table: go run ./cmd/gpumem accuracy")
}
