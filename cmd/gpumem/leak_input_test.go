package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLeakNoSamples: input without a memory figure is exit 1 with "no
// memory samples found", never "leak false" and exit 0; the service
// answers 422 naming field "log".
func TestLeakNoSamples(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "epoch 1 step 1 loss 6.2\nmbiu 461.85 MB\n", "step,loss\n1,2.0\n2,1.9\n"} {
		for _, args := range [][]string{{"leak", "-"}, {"leak", "--json", "-"}} {
			code, out, stderr := runCLI(t, in, args...)
			assert.Equal(t, exitDoesNotFit, code, "%q %v", in, args)
			assert.Empty(t, out, "%q %v", in, args)
			assert.Contains(t, stderr, "no memory samples found", "%q %v", in, args)
			assert.NotContains(t, stderr, "leak          false")
		}
		h := newServer(serverOptions{})
		w := do(t, h, http.MethodPost, "/v1/leak", "", strings.NewReader(in))
		require.Equal(t, http.StatusUnprocessableEntity, w.Code, w.Body.String())
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
		assert.Equal(t, "log", r.Field)
		assert.Contains(t, r.Error, "no memory samples found")
	}
	// The skipped line is named in the message.
	_, _, stderr := runCLI(t, "step,loss\n1,2.0\n", "leak", "-")
	assert.Contains(t, stderr, `line 1 no_memory_figure: "step,loss"`)
}

// TestLeakSkipsBadLines: a malformed line no longer rejects the log; the
// text and JSON say how many lines were read and skipped, and which.
func TestLeakSkipsBadLines(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := 1; i <= 20; i++ {
		b.WriteString("Step " + strconv.Itoa(i*10) + ": Loss=2.0, Memory=" + strconv.Itoa(10+i) + ".0GB\n")
		if i == 5 {
			b.WriteString("Step 55: Memory=12Gb\n") // bits: malformed, line 6
		}
	}
	log := b.String()
	code, out, stderr := runCLI(t, log, "leak", "--capacity", "40GB", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "read          21 lines: 20 samples, 1 line skipped (1 malformed)")
	assert.Contains(t, out, "line 6       malformed: \"Step 55: Memory=12Gb\"")
	assert.Contains(t, out, "axis          step")
	assert.Contains(t, out, "leak          true")
	assert.Contains(t, out, "per step")
	assert.Contains(t, out, "forecast OOM  at step ")

	code, out, stderr = runCLI(t, log, "leak", "--json", "-")
	require.Equal(t, exitOK, code, stderr)
	var r struct {
		Leak     bool   `json:"leak"`
		AxisUnit string `json:"axis_unit"`
		Input    struct {
			Lines    int            `json:"lines"`
			Read     int            `json:"read"`
			Skipped  int            `json:"skipped"`
			ByReason map[string]int `json:"skipped_by_reason"`
			Examples []struct {
				Line   int    `json:"line"`
				Reason string `json:"reason"`
				Text   string `json:"text"`
			} `json:"examples"`
			StepUnit *string `json:"step_unit"`
			Assumed  *string `json:"assumed_unit"`
		} `json:"input"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.True(t, r.Leak)
	assert.Equal(t, "step", r.AxisUnit)
	assert.Equal(t, 21, r.Input.Lines)
	assert.Equal(t, 20, r.Input.Read)
	assert.Equal(t, 1, r.Input.Skipped)
	assert.Equal(t, 1, r.Input.ByReason["malformed"])
	require.Len(t, r.Input.Examples, 1)
	assert.Equal(t, 6, r.Input.Examples[0].Line)
	assert.Nil(t, r.Input.Assumed)

	// The service gives the same reply.
	h := newServer(serverOptions{})
	w := do(t, h, http.MethodPost, "/v1/leak", "", strings.NewReader(log))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.JSONEq(t, out, w.Body.String())
}

// TestLeakCSVHeaderAndUnit: a CSV with its own header, epochs on the
// axis; a bare column needs --unit or says what it assumed.
func TestLeakCSVHeaderAndUnit(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("\"epoch\",\"train_loss\",\"gpu_mem (GB)\"\n")
	for e := 1; e <= 12; e++ {
		b.WriteString(strconv.Itoa(e) + ",0.5," + strconv.Itoa(10+e) + "\n") // 1 GB per epoch
	}
	code, out, stderr := runCLI(t, b.String(), "leak", "--capacity", "40GB", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "axis          epoch")
	assert.Contains(t, out, "per epoch")
	assert.Contains(t, out, "forecast OOM  at epoch 30")
	assert.NotContains(t, out, "unit ")

	bare := "100\n110\n120\n130\n140\n150\n"
	code, out, stderr = runCLI(t, bare, "leak", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "unit          values without a unit read as MiB")
	assert.Contains(t, out, "axis          sample")

	code, out, stderr = runCLI(t, bare, "leak", "--unit", "GiB", "--json", "-")
	require.Equal(t, exitOK, code, stderr)
	var r struct {
		Input struct {
			Assumed *string `json:"assumed_unit"`
		} `json:"input"`
		AxisUnit string `json:"axis_unit"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Nil(t, r.Input.Assumed)
	assert.Equal(t, "sample", r.AxisUnit)

	code, _, stderr = runCLI(t, bare, "leak", "--unit", "parsecs", "-")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, "--unit")

	h := newServer(serverOptions{})
	w := do(t, h, http.MethodPost, "/v1/leak?unit=furlong", "", strings.NewReader(bare))
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	var e errorReply
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e))
	assert.Equal(t, "unit", e.Field)
	w = do(t, h, http.MethodPost, "/v1/leak", "application/json", strings.NewReader(`{"log":"100\n110\n","unit":"GiB"}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"assumed_unit": null`)
}

// TestLeakNvidiaSMISeconds: an nvidia-smi CSV with timestamps is in
// seconds, not "per step".
func TestLeakNvidiaSMISeconds(t *testing.T) {
	t.Parallel()
	log := "timestamp, memory.used [MiB], memory.total [MiB]\n" +
		"2024/01/15 10:00:00.000, 1000 MiB, 24564 MiB\n" +
		"2024/01/15 10:01:00.000, 1100 MiB, 24564 MiB\n" +
		"2024/01/15 10:02:00.000, 1200 MiB, 24564 MiB\n" +
		"2024/01/15 10:03:00.000, 1300 MiB, 24564 MiB\n" +
		"2024/01/15 10:04:00.000, 1400 MiB, 24564 MiB\n" +
		"2024/01/15 10:05:00.000, 1500 MiB, 24564 MiB\n"
	code, out, stderr := runCLI(t, log, "leak", "-")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "axis          seconds since the first sample")
	assert.Contains(t, out, "per second")
	assert.Contains(t, out, "s after the first sample")
	assert.NotContains(t, out, "per step")
	assert.NotContains(t, out, "at step")
}
