package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeepLogitsAndEval: --keep-logits raises a training step that the
// Trainer's default would not (the logits held through backward and the
// step), --eval raises a prefill by the loss's upcast and log-softmax;
// the request fields keep_logits and eval give the CLI's answers, and
// each flag or field outside its mode is an error naming it.
func TestKeepLogitsAndEval(t *testing.T) {
	t.Parallel()
	peak := func(args ...string) int64 {
		t.Helper()
		return estimatePeak(t, append([]string{"--model", "llama-3-8b", "--batch", "2", "--seq", "1024",
			"--attention", "sdpa", "--precision", "bf16"}, args...)...)
	}
	// 2 × 1024 × 128256 logits: bf16 2 bytes each held (keep-logits),
	// fp32 upcast and log-softmax 8 bytes each (eval).
	const TV = 2 * 1024 * 128256
	assert.Greater(t, peak("--train", "--keep-logits"), peak("--train"))
	assert.Equal(t, peak("--infer")+8*TV, peak("--infer", "--eval"))
	code, out, stderr := runCLI(t, "", "estimate", "--model", "llama-3-8b", "--train", "--keep-logits")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, ", logits held to the step\n")
	code, out, stderr = runCLI(t, "", "estimate", "--model", "llama-3-8b", "--infer", "--eval")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, ", evaluation loss\n")

	h := newServer(serverOptions{})
	for _, tc := range []struct {
		args []string
		body string
	}{
		{[]string{"--model", "llama-3-8b", "--train", "--keep-logits"}, `{"model":"llama-3-8b","mode":"train","keep_logits":true}`},
		{[]string{"--model", "llama-3-8b", "--infer", "--eval"}, `{"model":"llama-3-8b","mode":"infer","eval":true}`},
	} {
		code, want, stderr := runCLI(t, "", append(append([]string{"estimate"}, tc.args...), "--json")...)
		require.Equal(t, 0, code, stderr)
		w := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(tc.body))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		if diff := cmp.Diff(want, w.Body.String()); diff != "" {
			t.Errorf("POST /v1/estimate %s differs from gpumem estimate --json (-cli +service):\n%s", tc.body, diff)
		}
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--model", "llama-3-8b", "--infer", "--keep-logits"}},
		{[]string{"--model", "llama-3-8b", "--train", "--eval"}},
		{[]string{"--model", "llama-3-8b", "--infer", "--generate", "4", "--eval"}},
		{[]string{"--model", "llama-3-8b", "--infer", "--logits-to-keep", "1", "--eval"}},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"estimate"}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		flag := tc.args[len(tc.args)-1]
		assert.Contains(t, stderr, flag, "%v", tc.args)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"model":"llama-3-8b","mode":"infer","keep_logits":true}`, "keep_logits"},
		{`{"model":"llama-3-8b","mode":"train","eval":true}`, "eval"},
		{`{"model":"llama-3-8b","mode":"infer","generate":4,"eval":true}`, "eval"},
	} {
		w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(tc.body))
		require.Equal(t, http.StatusBadRequest, w.Code, "%s: %s", tc.body, w.Body.String())
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
		assert.Equal(t, tc.field, r.Field, "%s: %s", tc.body, r.Error)
	}
}
