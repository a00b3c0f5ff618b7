package accuracy

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/optimizer"
)

// testdata is the repository's data set.
var testdata = os.DirFS("../../../../testdata")

// logSet prints every case and the summary by family, as gpumem accuracy
// does.
func logSet(t *testing.T, set Set) {
	t.Helper()
	for _, c := range set.Cases {
		t.Logf("%-9s %-48s %-9s measured %10s  estimated %10s  %+6.1f%%  %s", c.Source, c.ID, c.Label,
			c.Measured.String(), c.Predicted.String(), 100*c.Err(), c.Exempt)
	}
	for _, g := range Summarize(set.Cases, func(c Case) string { return c.Family }) {
		t.Logf("%-9s %-12s %-9s n=%-3d median %5.1f%%  worst %5.1f%% (%s)  under %3.0f%%", g.Source, g.Key, g.Label, g.N,
			100*g.Median, 100*g.Worst, g.WorstID, 100*g.Under)
	}
}

// TestMeasured holds gpumem to every row tools/calibrate recorded on a
// GPU (testdata/measured): each ok and oom row must be estimable, no
// allocated estimate may fall more than 5% below its measurement, each
// level's median absolute error must stay within 10%, and every OOM row
// must be predicted not to fit.
func TestMeasured(t *testing.T) {
	rows, err := ReadMeasured(testdata, "measured")
	require.NoError(t, err)
	set := Compare(rows, nil)
	if len(rows) == 0 {
		t.Log("testdata/measured holds no rows yet: no GPU has run tools/calibrate (see its README)")
	}
	logSet(t, set)
	for _, v := range Check(set) {
		t.Error(v)
	}
}

// TestPublished compares gpumem with the published figures whose job is
// stated (testdata/published/jobs.jsonl): every one must be estimable, and
// no allocated estimate may fall more than 5% below its figure unless the
// line says what the measured window holds that the job does not.
func TestPublished(t *testing.T) {
	stated, err := ReadPublished(testdata, "published")
	require.NoError(t, err)
	require.NotEmpty(t, stated)
	set := Compare(nil, stated)
	logSet(t, set)
	require.Len(t, set.Cases, len(stated))
	for _, v := range Check(set) {
		t.Error(v)
	}
	for _, s := range stated {
		require.NotEmpty(t, s.How, "%s: say how the job was read from the source", s.ID)
	}
}

// TestExemptReason checks the reason jobs.jsonl gives for the Llama 3.2
// 1B figure: the stated job's persistent state alone exceeds it.
func TestExemptReason(t *testing.T) {
	stated, err := ReadPublished(testdata, "published")
	require.NoError(t, err)
	for _, s := range stated {
		if s.ID != "litgpt-llama32-1b-full-mb4" {
			continue
		}
		j, err := s.Job.Budget()
		require.NoError(t, err)
		b, err := budget.Estimate(j)
		require.NoError(t, err)
		// Before the first step returns, the bf16 weights, the bf16
		// gradients of every parameter and AdamW's two bf16 states are
		// all allocated.
		total, _ := j.Model.Params()
		require.Equal(t, int64(1_235_814_400), total)
		require.Greater(t, 8*total, s.Value)
		require.Greater(t, b.Allocated(), gpumem.Bytes(s.Value))
		return
	}
	t.Fatal("litgpt-llama32-1b-full-mb4 is not in jobs.jsonl")
}

// gridRow is one line of the harness's dry run.
type gridRow struct {
	ID    string  `json:"id"`
	Job   Job     `json:"job"`
	Flags *string `json:"gpumem_flags"`
}

// readGrid reads testdata/grid.jsonl.gz, the output of
// `tools/calibrate/calibrate.py --dry-run` (see testdata/README.md).
func readGrid(t *testing.T) []gridRow {
	t.Helper()
	f, err := os.Open("testdata/grid.jsonl.gz")
	require.NoError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	require.NoError(t, err)
	var rows []gridRow
	require.NoError(t, eachLine(z, func(line int, b []byte) error {
		var r gridRow
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		rows = append(rows, r)
		return nil
	}))
	return rows
}

// TestGrid checks, before any GPU runs it, that gpumem can estimate every
// case of the calibration grid, so that no measured row will come back
// that the comparison cannot read.
func TestGrid(t *testing.T) {
	rows := readGrid(t)
	require.Greater(t, len(rows), 800)
	families := map[string]int{}
	for _, r := range rows {
		j, err := r.Job.Budget()
		require.NoError(t, err, r.ID)
		b, err := budget.Estimate(j)
		require.NoError(t, err, r.ID)
		require.Positive(t, b.Allocated(), r.ID)
		families[j.Model.Spec().Family]++
	}
	t.Logf("%d grid cases by family: %v", len(rows), families)
	for _, f := range []string{"llama", "gpt2", "opt", "bert", "t5", "whisper", "vit", "mixtral", "llava", "qwen2"} {
		require.Positive(t, families[f], "the grid has no %s case", f)
	}
}

// TestJobErrors checks that a bad job names its field and value.
func TestJobErrors(t *testing.T) {
	base := func() Job {
		seq, opt := 128, "adamw"
		return Job{Model: "gpt2", Catalog: "gpt2", Kind: "causal", Mode: "train", Batch: 1, Seq: &seq,
			Precision: "bf16-mixed", Optimizer: &opt, Attention: "sdpa", Checkpointing: "none"}
	}
	j := base()
	_, err := j.Budget()
	require.NoError(t, err)
	str := func(s string) *string { return &s }
	seven := 7
	// The vocabulary carries the optimizer and offloading settings.
	j = base()
	j.Optimizer, j.Momentum, j.Nesterov, j.OptimizerImpl = str("sgd"), 0.9, true, "forloop"
	j.OptimizerInBackward, j.OffloadActivations, j.Checkpointing = true, true, "full"
	b, err := j.Budget()
	require.NoError(t, err)
	require.Equal(t, optimizer.SGD{Momentum: 0.9, Nesterov: true, Impl: optimizer.ForLoop}, b.Optimizer)
	require.True(t, b.OptimizerInBackward)
	require.True(t, b.OffloadActivations)
	for _, tc := range []struct {
		field string
		edit  func(*Job)
	}{
		{"job.catalog", func(j *Job) { j.Catalog = "gpt-9" }},
		{"job.catalog", func(j *Job) { j.Catalog = "" }},
		{"job.mode", func(j *Job) { j.Mode = "serve" }},
		{"job.generate", func(j *Job) { j.Mode = "generate" }},
		{"job.precision", func(j *Job) { j.Precision = "fp64" }},
		{"job.optimizer", func(j *Job) { j.Optimizer = nil }},
		{"job.optimizer", func(j *Job) { j.Optimizer = str("adamw_hf") }},
		{"job.optimizer_impl", func(j *Job) { j.OptimizerImpl = "vectorized" }},
		{"job.optimizer_impl", func(j *Job) { j.Optimizer = str("adafactor"); j.OptimizerImpl = "fused" }},
		{"job.attention", func(j *Job) { j.Attention = "ring" }},
		{"job.checkpointing", func(j *Job) { j.Checkpointing = "some" }},
		{"job.lora_rank", func(j *Job) { j.LoRARank = -1 }},
		{"job.lora_targets", func(j *Job) { j.LoRATargets = []string{"c_attn"} }},
		{"job.lora_dtype", func(j *Job) { j.LoRARank = 8; j.LoRADType = "bf17" }},
		{"job.quant", func(j *Job) { j.Quant = "hqq" }},
		{"job.group_size", func(j *Job) { j.Quant = "nf4"; j.LoRARank = 8; j.GroupSize = 64 }},
		{"job.unquantized", func(j *Job) { j.Quant = "nf4"; j.LoRARank = 8; j.Unquantized = "bf17" }},
		{"job.kv_dtype", func(j *Job) { j.Mode = "generate"; j.Generate = 1; j.Optimizer = nil; j.KVDType = "fp9" }},
		{"job.context_bytes", func(j *Job) { j.ContextBytes = -1 }},
		{"job.bnb_compute_dtype", func(j *Job) { j.Quant = "nf4"; j.LoRARank = 8; j.BnbComputeDType = "bf17" }},
		{"job.batch", func(j *Job) { j.Mode = "load"; j.Optimizer = nil }},
		{"job.batch", func(j *Job) { j.Batch = 0 }},
		{"job.seq", func(j *Job) { j.Seq = nil }},
		{"job.encoder_seq", func(j *Job) { j.EncoderSeq = &seven }},
		{"job.offload", func(j *Job) { j.Offload = "disk" }},
		{"job.momentum", func(j *Job) { j.Momentum = 0.9 }},
	} {
		j := base()
		tc.edit(&j)
		_, err := j.Budget()
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", tc.field, err)
		require.Equal(t, tc.field, fe.Field, "%v", err)
	}
}

// row builds a measured row for the tests of Compare and Check: a
// Llama 3.2 1B training job whose peaks are the estimate's levels scaled
// by the factors given (zero: not measured). The rows are made up to
// exercise the gate; they are not data.
func row(t *testing.T, id, status string, alloc, reserved, device float64) string {
	t.Helper()
	seq, opt := 512, "adamw"
	j := Job{Model: "llama-3.2-1b", Catalog: "llama-3.2-1b", Kind: "causal", Mode: "train", Batch: 2, Seq: &seq,
		Precision: "bf16", Optimizer: &opt, Attention: "sdpa", Checkpointing: "none"}
	bj, err := j.Budget()
	require.NoError(t, err)
	bj.Device, _ = gpumem.LookupDevice("NVIDIA H100 80GB HBM3")
	b, err := budget.Estimate(bj)
	require.NoError(t, err)
	scale := func(f float64, v gpumem.Bytes) any {
		if f == 0 {
			return nil
		}
		return int64(f * float64(v))
	}
	r := map[string]any{"schema": 1, "id": id, "status": status, "job": j,
		"env":  map[string]any{"gpu": "NVIDIA H100 80GB HBM3", "gpu_total_memory": int64(b.Device()) * 9 / 10},
		"peak": map[string]any{"allocated": scale(alloc, b.Allocated()), "reserved": scale(reserved, b.Reserved()), "device": scale(device, b.Device())}}
	if status == "oom" {
		r["oom_phase"] = "backward"
		delete(r, "peak")
	}
	out, err := json.Marshal(r)
	require.NoError(t, err)
	return string(out)
}

// TestCheck shows that the gate fails on what it must: an allocated
// estimate 6% under, a median above 10%, an OOM predicted to fit, a row
// that cannot be estimated; and passes a set within its bounds.
func TestCheck(t *testing.T) {
	read := func(lines ...string) Set {
		fsys := fstest.MapFS{"m/a.jsonl": {Data: []byte(strings.Join(lines, "\n") + "\n")}}
		rows, err := ReadMeasured(fsys, "m")
		require.NoError(t, err)
		return Compare(rows, nil)
	}
	// Measurements 3% above and 2% below the estimate, at every level.
	good := read(row(t, "a", "ok", 1.03, 1.03, 1.03), row(t, "b", "ok", 0.98, 0.98, 0.98),
		row(t, "c", "unsupported", 0, 0, 0))
	require.Empty(t, Check(good))
	require.Len(t, good.Cases, 6)
	require.Equal(t, map[string]int{"ok": 2, "unsupported": 1}, good.Statuses)
	require.Equal(t, []string{"NVIDIA H100 80GB HBM3"}, good.GPUs)
	g := Summarize(good.Cases, nil)
	require.Len(t, g, 3)
	require.InDelta(t, 0.025, g[0].Median, 1e-3)
	require.InDelta(t, 1/1.03-1, g[0].Worst*-1, 2e-3)
	require.InDelta(t, 0.5, g[0].Under, 1e-9)

	under := read(row(t, "a", "ok", 1.06, 0, 0))
	v := Check(under)
	require.Len(t, v, 1)
	require.Contains(t, v[0], "below the measured")

	// Reserved off by 20% and 30%: only the median fails (the margin is
	// for the allocated level).
	wide := read(row(t, "a", "ok", 1, 0.8, 0), row(t, "b", "ok", 1, 0.7, 0))
	v = Check(wide)
	require.Len(t, v, 1, "%v", v)
	require.Contains(t, v[0], "median absolute error")

	// The OOM row's GPU has 90% of the estimate: predicted not to fit.
	require.Empty(t, Check(read(row(t, "a", "oom", 0, 0, 0))))
	big := strings.Replace(row(t, "a", "oom", 0, 0, 0), `"gpu_total_memory":`, `"gpu_total_memory":1`, 1)
	v = Check(read(big))
	require.Len(t, v, 1, "%v", v)
	require.Contains(t, v[0], "but the estimate")

	bad := strings.Replace(row(t, "a", "ok", 1, 1, 1), `"precision":"bf16"`, `"precision":"fp64"`, 1)
	v = Check(read(bad))
	require.Len(t, v, 1, "%v", v)
	require.Contains(t, v[0], "job.precision")
}

// TestReadErrors checks that malformed data files are reported with
// their file and line, not skipped.
func TestReadErrors(t *testing.T) {
	for name, data := range map[string]string{
		"schema":  `{"schema":2,"id":"x","status":"ok","job":{}}`,
		"id":      `{"schema":1,"status":"ok","job":{}}`,
		"unknown": `{"schema":1,"id":"x","status":"ok","job":{"modle":"gpt2"}}`,
		"json":    `{"schema":1,`,
	} {
		_, err := ReadMeasured(fstest.MapFS{"m/x.jsonl": {Data: []byte("\n" + data + "\n")}}, "m")
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "m/x.jsonl: line 2", name)
	}
	_, err := ReadMeasured(fstest.MapFS{}, "missing")
	require.Error(t, err)

	peaks := `{"id":"a","metric":"max_memory_allocated","value_bytes":100}` + "\n" +
		`{"id":"b","metric":"other: x","value_bytes":100}` + "\n"
	for name, tc := range map[string]struct{ jobs, want string }{
		"missing": {`{"id":"c","label":"allocated","job":{}}`, `"c" is not in peaks.jsonl`},
		"twice":   {`{"id":"a","label":"allocated","job":{}}` + "\n" + `{"id":"a","label":"allocated","job":{}}`, "twice"},
		"label":   {`{"id":"a","label":"reserved","job":{}}`, "does not match"},
		"other":   {`{"id":"b","label":"peak","job":{}}`, "does not match"},
		"env gpu": {`{"id":"a","label":"allocated","job":{},"env":{"gpu":"h1000"}}`, `env.gpu "h1000"`},
		"env key": {`{"id":"a","label":"allocated","job":{},"env":{"gpu":"h100","driver":"535"}}`, `unknown field "driver"`},
	} {
		fsys := fstest.MapFS{"p/peaks.jsonl": {Data: []byte(peaks)}, "p/jobs.jsonl": {Data: []byte(tc.jobs + "\n")}}
		_, err := ReadPublished(fsys, "p")
		require.ErrorContains(t, err, tc.want, name)
	}
	fsys := fstest.MapFS{"p/peaks.jsonl": {Data: []byte(peaks)},
		"p/jobs.jsonl": {Data: []byte(`{"id":"b","label":"device","job":{}}` + "\n")}}
	s, err := ReadPublished(fsys, "p")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint([]int64{100}), fmt.Sprint([]int64{s[0].Value}))
}

// TestEnvironment: an environment sets the device, the CUDA version and
// the module loading that size the CUDA context.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		gpu, cc, cuda, loading string
		want                   budget.Overhead
		compute                gpumem.ComputeCapability
		err                    string
	}{
		{"Tesla V100-SXM2-16GB", "", "11.2", "", budget.Overhead{CUDA: budget.CUDAVersion{Major: 11, Minor: 2}}, gpumem.ComputeCapability{Major: 7}, ""},
		{"NVIDIA H100 80GB HBM3", "9.0", "12.4", "LAZY", budget.Overhead{CUDA: budget.CUDAVersion{Major: 12, Minor: 4}, Loading: budget.LoadingLazy}, gpumem.ComputeCapability{Major: 9}, ""},
		{"NVIDIA H100 80GB HBM3", "", "12.1", "DEFAULT", budget.Overhead{CUDA: budget.CUDAVersion{Major: 12, Minor: 1}, Loading: budget.LoadingEager}, gpumem.ComputeCapability{Major: 9}, ""},
		{"NVIDIA H100 80GB HBM3", "", "12.4", "DEFAULT", budget.Overhead{CUDA: budget.CUDAVersion{Major: 12, Minor: 4}, Loading: budget.LoadingLazy}, gpumem.ComputeCapability{Major: 9}, ""},
		{"NVIDIA Future GPU", "10.3", "", "eager", budget.Overhead{Loading: budget.LoadingEager}, gpumem.ComputeCapability{Major: 10, Minor: 3}, ""},
		{"NVIDIA Future GPU", "", "", "", budget.Overhead{}, gpumem.ComputeCapability{}, ""},
		{"", "", "twelve", "", budget.Overhead{}, gpumem.ComputeCapability{}, "env.cuda"},
		{"", "x", "", "", budget.Overhead{}, gpumem.ComputeCapability{}, "env.compute_capability"},
		{"", "", "", "SOMETIMES", budget.Overhead{}, gpumem.ComputeCapability{}, "module loading"},
	} {
		var j budget.Job
		err := environment(&j, tc.gpu, tc.cc, tc.cuda, tc.loading)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%+v", tc)
			continue
		}
		require.NoError(t, err, "%+v", tc)
		require.Equal(t, tc.want, j.Overhead, "%+v", tc)
		require.Equal(t, tc.compute, j.Device.Compute, "%+v", tc)
	}
}
