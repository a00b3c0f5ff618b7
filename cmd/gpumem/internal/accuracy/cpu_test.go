package accuracy

import (
	"encoding/json"
	"io/fs"
	"os"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// cpuData is the CPU rows' folder.
var cpuData = os.DirFS("../../../../testdata/measured/cpu")

// TestCPU holds gpumem to the whole-step CPU measurements of
// tools/measure: every ok row must be estimable, and the rows that miss
// the target (within 3%, not more than 2% under, the peak's phase named
// right) must be exactly those testdata/measured/cpu/misses.tsv lists, so
// that a fix removes rows from the list and nothing starts to miss.
func TestCPU(t *testing.T) {
	rows, err := ReadCPU(cpuData, ".")
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	set := CompareCPU(rows)
	misses, err := ReadCPUMisses(cpuData, "misses.tsv")
	require.NoError(t, err)
	n := 0
	for _, c := range set.Cases {
		m := CPUMiss(c)
		if m != "" {
			n++
		}
		t.Logf("%-72s measured %10d estimated %10d %+6.2f%%  %-14s %-14s %s", c.ID, c.Measured, c.Predicted, 100*c.Err(), c.MeasuredPhase, c.Phase, m)
	}
	for _, g := range Summarize(set.Cases, func(c Case) string { return c.Family }) {
		t.Logf("%-12s n=%-3d median %5.2f%%  worst %6.2f%% (%s)  under %3.0f%%", g.Key, g.N, 100*g.Median, 100*g.Worst, g.WorstID, 100*g.Under)
	}
	t.Logf("%d rows, %d estimated, %d miss the target, %d listed", len(rows), len(set.Cases), n, len(misses))
	for _, v := range CheckCPU(set, misses) {
		t.Error(v)
	}
}

// TestCPUMethod checks the measurements themselves: every validation row
// of tools/measure (live bytes known to the byte) agrees with what it
// expects, and in every job row the integrated level after the build and
// after the inputs equals the storages of the parameters, buffers and
// inputs, so the integration missed no allocation or free, and the level
// returns to zero once the case frees what it made.
func TestCPUMethod(t *testing.T) {
	names, err := fs.Glob(cpuData, "validation-*.jsonl")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	exact := 0
	for _, name := range names {
		f, err := cpuData.Open(name)
		require.NoError(t, err)
		err = eachLine(f, func(line int, b []byte) error {
			var v map[string]any
			require.NoError(t, json.Unmarshal(b, &v))
			require.Equal(t, true, v["ok"], "%s:%d %v", name, line, v["case"])
			for _, k := range []string{"peak", "end"} {
				if want, ok := v["expected_"+k]; ok {
					require.Equal(t, want, v["measured_"+k], "%s:%d %v %s", name, line, v["case"], k)
					exact++
				}
			}
			return nil
		})
		f.Close()
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, exact, 6, "validation figures compared")
	rows, err := ReadCPU(cpuData, ".")
	require.NoError(t, err)
	for _, r := range rows {
		if r.Status != "ok" {
			continue
		}
		c := r.Checks
		require.Positive(t, c.ParamPlusBufferBytes, r.ID)
		require.Equal(t, c.ParamPlusBufferBytes, c.AfterBuild, "%s: level after the build", r.ID)
		require.Equal(t, c.ParamBufferInputBytes, c.AfterInputs, "%s: level after the inputs", r.ID)
		require.Equal(t, r.ModelInfo.ParamBytes+r.ModelInfo.BufferBytes, c.ParamPlusBufferBytes, r.ID)
		if r.Job.Compile != 0 {
			// Rows measured before measure.py reset Dynamo at the end of a
			// compiled case: what Dynamo had compiled still held 32 bytes
			// (the LoRA rows) until the next case's reset.
			require.LessOrEqual(t, c.Leftover, int64(32), "%s: bytes left once the case freed what it made", r.ID)
			continue
		}
		require.Zero(t, c.Leftover, "%s: bytes left once the case freed what it made", r.ID)
	}
}

// TestCheckCPU checks the ratchet on made-up cases: a miss must be listed,
// a listed row that meets the target must be removed, a listed id must
// exist; the phase counts as much as the bytes.
func TestCheckCPU(t *testing.T) {
	c := func(id string, measured, predicted gpumem.Bytes, phase, got string) Case {
		return Case{Source: CPU, ID: id, Label: Allocated, Measured: measured, Predicted: predicted, Phase: phase, MeasuredPhase: got}
	}
	set := CPUSet{Cases: []Case{
		c("meets", 1000, 1029, "forward", "forward"),
		c("under", 1000, 979, "forward", "forward"),
		c("over", 1000, 1031, "backward", "backward"),
		c("phase", 1000, 1000, "optimizer step", "backward"),
		c("fixed", 1000, 1000, "forward", "forward"),
	}}
	require.Equal(t, "", CPUMiss(set.Cases[0]))
	require.Equal(t, "2.1% under", CPUMiss(set.Cases[1]))
	require.Equal(t, "3.1% over", CPUMiss(set.Cases[2]))
	require.Equal(t, "peak in backward, estimated in optimizer step", CPUMiss(set.Cases[3]))
	listed := map[string]string{"under": "a", "over": "b", "phase": "c"}
	require.Empty(t, CheckCPU(set, listed))
	listed["fixed"], listed["gone"] = "d", "e"
	delete(listed, "under")
	v := CheckCPU(set, listed)
	require.Len(t, v, 3, "%q", v)
	require.Contains(t, v[0], "cpu under: misses the target (2.1% under)")
	require.Contains(t, v[1], "cpu fixed: now within the target")
	require.Contains(t, v[2], "cpu gone: listed in misses.tsv but no ok row has that id")
}

func TestCPUReadErrors(t *testing.T) {
	_, err := ReadCPUMisses(fstest.MapFS{"m.tsv": {Data: []byte("# c\n\nid-without-tab\n")}}, "m.tsv")
	require.ErrorContains(t, err, "m.tsv:3: want a row id, a tab and the mechanism")
	_, err = ReadCPUMisses(fstest.MapFS{"m.tsv": {Data: []byte("a\tx\na\ty\n")}}, "m.tsv")
	require.ErrorContains(t, err, "m.tsv:2: a is listed twice")
	row := func(id, job string) string {
		return `{"schema": 1, "id": "` + id + `", "status": "ok", "job": ` + job + `, "peak": {"allocated": 10, "phase": "prefill"}}`
	}
	_, err = ReadCPU(fstest.MapFS{"c/a.jsonl": {Data: []byte(row("x", `{"mode": "prefill"}`) + "\n" + row("x", `{}`))}}, "c")
	require.ErrorContains(t, err, `line 2: id "x" is also in a.jsonl`)
	_, err = ReadCPU(fstest.MapFS{"c/a.jsonl": {Data: []byte(row("x", `{"mode": "prefill", "modes": 1}`))}}, "c")
	require.ErrorContains(t, err, `unknown field "modes"`)
	rows, err := ReadCPU(fstest.MapFS{"c/a.jsonl": {Data: []byte(row("x", `{"catalog": "gpt2", "mode": "train", "optimizer": "adamw", "precision": "fp32", "attention": "sdpa", "batch": 1, "seq": 8}`))},
		"c/validation-a.jsonl": {Data: []byte("not a row")}}, "c")
	require.NoError(t, err)
	set := CompareCPU(rows)
	require.Len(t, set.Failures, 1)
	require.ErrorContains(t, set.Failures[0].Err, `peak.phase "prefill": not a phase of a train job`)
	_, err = ReadCPU(fstest.MapFS{}, "missing")
	require.Error(t, err)
}
