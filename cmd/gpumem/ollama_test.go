package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestPlanOllama: plan --runtime ollama on a GGUF file prints Ollama's
// placement and the longest context with every layer, and the JSON
// agrees with the text; a smaller card holds fewer layers.
func TestPlanOllama(t *testing.T) {
	path := writeLlamaGGUF(t, gpumem.FP16)
	code, out, errOut := runCLI(t, "", "plan", "--gguf", path, "--runtime", "ollama", "--memory", "2GiB", "--ctx-size", "1024", "--json")
	require.Equal(t, 0, code, errOut)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, "ollama", got["runtime"])
	assert.Equal(t, float64(tinyLayers+1), got["slots"])
	assert.Equal(t, float64(tinyLayers+1), got["layers"])
	assert.Equal(t, true, got["full_offload"])
	assert.Equal(t, float64(1024), got["num_ctx"])
	// KV: 1024 × (64 + 64) × 2 KV heads × 2 bytes × 2 layers.
	assert.Equal(t, float64(1024*128*2*2*tinyLayers), got["kv"])
	maxCtx := got["max_num_ctx"].(float64)
	assert.Greater(t, maxCtx, float64(1024))

	code, text, errOut := runCLI(t, "", "plan", "--gguf", path, "--runtime", "ollama", "--memory", "2GiB", "--ctx-size", "1024")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, text, "3/3 layers on the GPU")
	assert.Contains(t, text, "longest num_ctx with every layer on the GPU: "+gpumem.Thousands(int64(maxCtx)))

	// 457 MiB minimum, the graph and two layers: below that, no layer.
	code, out, errOut = runCLI(t, "", "plan", "--gguf", path, "--runtime", "ollama", "--memory", "400MiB", "--json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, float64(0), got["layers"])
	assert.Equal(t, float64(0), got["max_num_ctx"])
}

func TestPlanOllamaErrors(t *testing.T) {
	path := writeLlamaGGUF(t, gpumem.FP16)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ctx-size", "1024"}, "--memory"},
		{[]string{"--memory", "8GiB", "--cache-type-k", "q8_0", "--cache-type-v", "f16"}, "--cache-type-v"},
		{[]string{"--memory", "8GiB", "--cache-type-k", "q5_1"}, "--cache-type-k"},
		{[]string{"--memory", "8GiB", "--ctx-size", "-5"}, "--ctx-size"},
		{[]string{"--memory", "8GiB", "--train"}, "--runtime"},
	} {
		code, _, errOut := runCLI(t, "", append([]string{"plan", "--gguf", path, "--runtime", "ollama"}, c.args...)...)
		assert.Equal(t, 2, code, "%v", c.args)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
}

// TestServePlanOllama: POST /v1/plan with "runtime": "ollama" answers as
// plan --runtime ollama --json, and names the request's fields in
// errors.
func TestServePlanOllama(t *testing.T) {
	h := newServer(serverOptions{})
	body := `{"model":"llama-3.1-8b","runtime":"ollama","memory":"24GiB","ctx_size":16384}`
	rec := do(t, h, http.MethodPost, "/v1/plan", "application/json", strings.NewReader(body))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	assert.Equal(t, float64(33), got["layers"])
	assert.Equal(t, float64(16384), got["num_ctx"])
	// bf16 weights, 16,384 × 256 × 8 × 2 × 32 = 2 GiB of cache.
	assert.Equal(t, float64(2<<30), got["kv"])

	code, cli, errOut := runCLI(t, "", "plan", "--model", "llama-3.1-8b", "--runtime", "ollama", "--memory", "24GiB", "--ctx-size", "16384", "--json")
	require.Equal(t, 0, code, errOut)
	assert.JSONEq(t, cli, rec.Body.String())

	for _, c := range []struct{ body, field string }{
		{`{"model":"llama-3.1-8b","runtime":"ollama","memory":"24GiB","cache_type_k":"q8_0","cache_type_v":"f16"}`, "cache_type_v"},
		{`{"model":"llama-3.1-8b","runtime":"ollama"}`, "gpu"},
		{`{"model":"qwen3-8b","runtime":"ollama","memory":"24GiB"}`, "model"},
	} {
		rec := do(t, h, http.MethodPost, "/v1/plan", "application/json", strings.NewReader(c.body))
		assert.NotEqual(t, http.StatusOK, rec.Code, c.body)
		var e map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
		assert.Equal(t, c.field, e["field"], strconv.Quote(rec.Body.String()))
	}
}
