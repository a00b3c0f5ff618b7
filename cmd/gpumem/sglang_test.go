package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEstimateSGLang: --runtime sglang prints SGLang's pool and its JSON
// matches POST /v1/estimate's; a job SGLang refuses exits 1; the flags
// of another engine are refused by name.
func TestEstimateSGLang(t *testing.T) {
	args := []string{"estimate", "--model", "llama-3.1-8b", "--infer", "--runtime", "sglang", "--gpu", "h100", "--mem-fraction-static", "0.85"}
	code, text, errOut := runCLI(t, "", args...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, text, "SGLang (per GPU, mem_fraction_static 0.85")
	assert.Contains(t, text, "KV Cache is allocated. #tokens: ")

	code, cli, errOut := runCLI(t, "", append(args, "--json")...)
	require.Equal(t, 0, code, errOut)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(cli), &got))
	sg := got["sglang"].(map[string]any)
	assert.Equal(t, 0.85, sg["mem_fraction_static"])
	assert.Equal(t, float64(131072), sg["cell_bytes"])
	assert.Positive(t, sg["max_total_num_tokens"])

	h := newServer(serverOptions{})
	rec := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(
		`{"model":"llama-3.1-8b","mode":"infer","runtime":"sglang","gpu":"h100","mem_fraction_static":0.85}`))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.JSONEq(t, cli, rec.Body.String())

	code, _, errOut = runCLI(t, "", "estimate", "--model", "llama-3.1-70b", "--infer", "--runtime", "sglang", "--gpu", "rtx4090")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "increase --mem-fraction-static")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--runtime", "sglang", "--gpu", "h100", "--mem-fraction-static", "1.2"}, "--mem-fraction-static 1.2"},
		{[]string{"--runtime", "sglang", "--gpu", "h100", "--max-num-seqs", "8"}, "--max-num-seqs 8: it is a vLLM option"},
		{[]string{"--runtime", "sglang", "--gpu", "h100", "--kv-cache-dtype", "fp8"}, "--kv-cache-dtype"},
		{[]string{"--runtime", "sglang"}, "--gpu or --memory"},
		{[]string{"--runtime", "vllm", "--gpu", "h100", "--page-size", "16"}, "--page-size 16: it is an SGLang option"},
	} {
		code, _, errOut := runCLI(t, "", append([]string{"estimate", "--model", "llama-3.1-8b", "--infer"}, c.args...)...)
		assert.Equal(t, 2, code, "%v", c.args)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
	for _, c := range []struct{ body, field string }{
		{`{"model":"llama-3.1-8b","mode":"infer","runtime":"sglang","gpu":"h100","mem_fraction_static":1.5}`, "mem_fraction_static"},
		{`{"model":"llama-3.1-8b","mode":"infer","runtime":"sglang"}`, "gpu"},
		{`{"model":"llama-3.1-8b","mode":"infer","runtime":"sglang","gpu":"h100","page_size":-2}`, "page_size"},
	} {
		rec := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(c.body))
		assert.Equal(t, http.StatusBadRequest, rec.Code, c.body)
		var e map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
		assert.Equal(t, c.field, e["field"], rec.Body.String())
	}
}
