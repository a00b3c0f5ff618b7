package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leakSnapshot is a small PyTorch memory snapshot in the documented
// JSON form: weights kept, an activation freed per iteration, and one
// tensor kept per iteration by train.py:57.
func leakSnapshot(iters int) string {
	var b strings.Builder
	b.WriteString(`{"segments": [{"device": 0, "address": 0, "total_size": 2147483648, "blocks": [`)
	b.WriteString(`{"size": 104857600, "state": "active_allocated"}`)
	for i := 0; i < iters; i++ {
		b.WriteString(`, {"size": 1048576, "state": "active_allocated"}`)
	}
	b.WriteString(`]}], "device_traces": [[`)
	b.WriteString(`{"action": "alloc", "addr": 1, "size": 104857600, "frames": [{"filename": "/w/train.py", "line": 12, "name": "main"}]}`)
	for i := 0; i < iters; i++ {
		a := strings.Repeat("1", 3) + string(rune('0'+i%10)) + strings.Repeat("0", 6)
		b.WriteString(`, {"action": "alloc", "addr": 5000, "size": 67108864, "frames": []}`)
		b.WriteString(`, {"action": "alloc", "addr": ` + a + string(rune('0'+i/10)) + `, "size": 1048576, "frames": [{"filename": "/w/train.py", "line": 57, "name": "train_step"}]}`)
		b.WriteString(`, {"action": "free_completed", "addr": 5000, "size": 67108864}`)
	}
	b.WriteString(`]]}`)
	return b.String()
}

// TestLeakReadersCLI: a snapshot names the frame that holds the growth, a
// prose narrative says how sure the reading is, a short log says what it
// can, and the service answers the same in JSON.
func TestLeakReadersCLI(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, leakSnapshot(30), "leak", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "snapshot      device 0: 91 trace entries (61 allocs, 30 frees, 0 of blocks allocated before the trace)")
	assert.Contains(t, out, `held by     "train.py:57:train_step": 30 allocations, 30.00 MiB, in 10/10 of the trace, growing`)
	assert.Contains(t, out, "leak          true")
	assert.Contains(t, out, "per event")

	data, err := os.ReadFile("../../leak/testdata/logs/real/detectron2_163.log")
	require.NoError(t, err)
	code, out, stderr = runCLI(t, string(data), "leak", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "reading       confidence medium: figures were read from prose")
	assert.Contains(t, out, "shape         rising (too few samples for a verdict)")
	assert.Contains(t, out, "verdict       none: 3 samples, 5 needed")
	assert.Contains(t, out, "observed OOM  at iteration 15000")

	// A percentage needs --capacity; with it, bytes.
	data, err = os.ReadFile("../../leak/testdata/logs/real/lightning12703.log")
	require.NoError(t, err)
	code, _, stderr = runCLI(t, string(data), "leak", "-")
	assert.Equal(t, exitDoesNotFit, code)
	assert.Contains(t, stderr, "--capacity")
	code, out, stderr = runCLI(t, string(data), "leak", "--json", "--capacity", "24GiB", "-")
	require.Equal(t, exitOK, code, stderr)
	var j struct {
		Short bool   `json:"short"`
		Shape string `json:"shape"`
		Input struct {
			Confidence string   `json:"confidence"`
			Why        []string `json:"confidence_why"`
			Prose      int      `json:"prose_samples"`
		} `json:"input"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	assert.True(t, j.Short)
	assert.Equal(t, "low", j.Input.Confidence)
	assert.Equal(t, 2, j.Input.Prose)
	assert.Contains(t, j.Input.Why, "percentages were turned into bytes with the device's capacity")

	h := newServer(serverOptions{})
	w := do(t, h, http.MethodPost, "/v1/leak", "", strings.NewReader(leakSnapshot(30)))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"frame": "train.py:57:train_step"`)
}

// TestLeakReadersBadInput: garbage, binary and a broken snapshot give a
// clear exit 1 or 2 with a message, and 422 naming "log" from the service.
func TestLeakReadersBadInput(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"\x80\x04\x95\x00\x00garbage pickle",
		"\x00\x01\x02\xff\xfe binary",
		`{"device_traces": [[{"action": "alloc", "addr": 1, "size": -5}]]}`,
		`{"device_traces": [[{"action": "alloc"`,
		`{"segments": [], "device_traces": [[]]}`,
		"It goes up and up and nobody knows why, says the memory.",
	} {
		code, out, stderr := runCLI(t, in, "leak", "-")
		assert.Contains(t, []int{exitDoesNotFit, exitBadInput}, code, "%q", in)
		assert.Empty(t, out, "%q", in)
		assert.NotEmpty(t, strings.TrimSpace(stderr), "%q", in)
		h := newServer(serverOptions{})
		w := do(t, h, http.MethodPost, "/v1/leak", "", strings.NewReader(in))
		require.Equal(t, http.StatusUnprocessableEntity, w.Code, "%q: %s", in, w.Body.String())
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
		assert.Equal(t, "log", r.Field, "%q", in)
		assert.NotEmpty(t, r.Error)
	}
}

// FuzzLeakInput feeds any text to gpumem leak: exit 0, 1 or 2, output
// only on 0, a message on standard error otherwise; never a panic.
func FuzzLeakInput(f *testing.F) {
	f.Add(leakSnapshot(3))
	f.Add("At iter 99 the model uses 3200mb of GPU memory, at iter 219 it jumps to 7000mb.")
	f.Add("第一个epoch占用2.59，第二个epoch突增到了7G，")
	f.Add("      0/89     5.61G   0.07745    0.0277   0.01785\n")
	f.Add("Before model run: 1098\nBefore model run: 2173\n")
	f.Add("GPU memory usage is only 22%, after 900 steps around 68%")
	f.Add("\x80\x05\x00")
	f.Fuzz(func(t *testing.T, in string) {
		for _, args := range [][]string{{"leak", "-"}, {"leak", "--json", "--capacity", "24GiB", "-"}} {
			code, out, stderr := runCLI(t, in, args...)
			switch code {
			case exitOK:
				if out == "" {
					t.Fatalf("%q: exit 0 without output", in)
				}
			case exitDoesNotFit, exitBadInput:
				if out != "" || strings.TrimSpace(stderr) == "" {
					t.Fatalf("%q: exit %d with output %q, error %q", in, code, out, stderr)
				}
			default:
				t.Fatalf("%q: exit %d", in, code)
			}
		}
	})
}

// TestLeakRun: --run (request field run) picks a run of a narrative whose
// steps restart; a run the log does not have, or below 1, is refused
// naming it.
func TestLeakRun(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../leak/testdata/logs/real/pytorch1509.log")
	require.NoError(t, err)
	code, out, stderr := runCLI(t, string(data), "leak", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "runs          2 (the steps restart; run 1 analyzed, --run)")
	assert.Contains(t, out, "2.87 GiB → 4.43 GiB")
	code, out, stderr = runCLI(t, string(data), "leak", "--run", "2", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "run 2 of 2")
	assert.Contains(t, out, "1.65 GiB → 1.75 GiB")
	for _, bad := range []string{"0", "3"} {
		code, out, stderr = runCLI(t, string(data), "leak", "--run", bad, "-")
		assert.Equal(t, exitBadInput, code)
		assert.Empty(t, out)
		assert.Contains(t, stderr, "--run "+bad)
	}
	h := newServer(serverOptions{})
	body, _ := json.Marshal(map[string]any{"log": string(data), "run": 2})
	w := do(t, h, http.MethodPost, "/v1/leak", "application/json", strings.NewReader(string(body)))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"run": 1`)
	for _, q := range []string{"?run=0", "?run=3", "?run=x"} {
		w = do(t, h, http.MethodPost, "/v1/leak"+q, "", strings.NewReader(string(data)))
		require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
		assert.Equal(t, "run", r.Field)
	}
}
