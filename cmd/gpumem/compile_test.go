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

// TestCompileCLIAndService: --compile and the request's "compile" give the
// same estimate, lower than the eager one for a Llama fine-tune, and
// nonsense is refused naming the flag or the field.
func TestCompileCLIAndService(t *testing.T) {
	t.Parallel()
	args := []string{"estimate", "--model", "llama-3.2-3b", "--train", "--precision", "bf16", "--batch", "2", "--seq", "4096",
		"--attention", "flash", "--loss", "chunked", "--json"}
	code, eager, stderr := runCLI(t, "", args...)
	require.Equal(t, exitOK, code, stderr)
	code, compiled, stderr := runCLI(t, "", append(args, "--compile", "layers+loss")...)
	require.Equal(t, exitOK, code, stderr)
	c := allocatedOf(t, compiled)
	require.Positive(t, c, compiled)
	assert.Less(t, c, allocatedOf(t, eager))

	h := newServer(serverOptions{})
	body := `{"model":"llama-3.2-3b","train":true,"precision":"bf16","batch":2,"seq":4096,"attention":"flash","loss":"chunked","compile":"layers+loss"}`
	w := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(body))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	if diff := cmp.Diff(compiled, w.Body.String()); diff != "" {
		t.Errorf("POST /v1/estimate with compile differs from gpumem estimate --compile (-cli +service):\n%s", diff)
	}

	for _, tc := range []struct {
		name, body, field, contains string
		status                      int
	}{
		{"unknown scope", `{"model":"llama-3.2-3b","train":true,"compile":"all"}`, "compile", `compile "all"`, 400},
		{"inference", `{"model":"llama-3.2-3b","infer":true,"compile":"model"}`, "compile", "training steps", 400},
		// What the request states but the model does not derive.
		{"eager attention", `{"model":"llama-3.2-3b","train":true,"attention":"eager","compile":"layers"}`, "compile", "SDPA or flash", 422},
		{"gpt-2 blocks", `{"model":"gpt2","train":true,"compile":"layers"}`, "compile", "Llama-style", 422},
	} {
		w := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(tc.body))
		require.Equal(t, tc.status, w.Code, "%s: %s", tc.name, w.Body.String())
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), w.Body.String())
		assert.Equal(t, tc.field, r.Field, "%s: %s", tc.name, w.Body.String())
		assert.Contains(t, r.Error, tc.contains, tc.name)
	}

	for _, tc := range []struct {
		name     string
		args     []string
		contains string
	}{
		{"unknown scope", []string{"--model", "llama-3.2-3b", "--train", "--compile", "all"}, `--compile "all"`},
		{"inference", []string{"--model", "llama-3.2-3b", "--infer", "--compile", "model"}, "--compile"},
		{"gpt-2 blocks", []string{"--model", "gpt2", "--train", "--compile", "layers"}, "--compile"},
		{"liger loss", []string{"--model", "llama-3.2-3b", "--train", "--loss", "liger", "--compile", "layers+loss"}, "--compile"},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"estimate"}, tc.args...)...)
		assert.NotEqual(t, exitOK, code, tc.name)
		assert.Contains(t, stderr, tc.contains, tc.name)
	}
}
