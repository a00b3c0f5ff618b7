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

// TestPlanVLLMConcurrency: plan --runtime vllm --concurrency answers
// both inverses; at the utilization printed the estimate holds the
// concurrency; the service answers the same.
func TestPlanVLLMConcurrency(t *testing.T) {
	args := []string{"plan", "--model", "llama-3.1-8b", "--infer", "--runtime", "vllm", "--gpu", "h100", "--max-model-len", "16384", "--concurrency", "8"}
	code, out, errOut := runCLI(t, "", append(args, "--json")...)
	require.Equal(t, 0, code, errOut)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	u := got["min_gpu_memory_utilization"].(float64)
	assert.Greater(t, u, 0.3)
	assert.Less(t, u, 0.9)
	assert.Greater(t, got["max_max_model_len"].(float64), float64(16384))

	code, est, errOut := runCLI(t, "", "estimate", "--model", "llama-3.1-8b", "--infer", "--runtime", "vllm", "--gpu", "h100",
		"--max-model-len", "16384", "--gpu-memory-utilization", strconv.FormatFloat(u, 'g', -1, 64), "--json")
	require.Equal(t, 0, code, errOut)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(est), &e))
	assert.GreaterOrEqual(t, e["vllm"].(map[string]any)["max_concurrency"].(float64), 8.0)

	code, text, errOut := runCLI(t, "", args...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, text, "8 requests at once")
	assert.Contains(t, text, "the longest --max-model-len is ")

	h := newServer(serverOptions{})
	rec := do(t, h, http.MethodPost, "/v1/plan", "application/json", strings.NewReader(
		`{"model":"llama-3.1-8b","mode":"infer","runtime":"vllm","gpu":"h100","max_model_len":16384,"concurrency":8}`))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.JSONEq(t, out, rec.Body.String())
	rec = do(t, h, http.MethodPost, "/v1/plan", "application/json", strings.NewReader(
		`{"model":"llama-3.1-8b","mode":"infer","runtime":"vllm","gpu":"h100","concurrency":-3}`))
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	var ae map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &ae))
	assert.Equal(t, "concurrency", ae["field"], rec.Body.String())

	code, _, errOut = runCLI(t, "", "plan", "--model", "llama-3.1-8b", "--infer", "--gpu", "h100", "--concurrency", "4")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--concurrency 4: only with --runtime vllm")
}

// TestEstimateVLLMCUDAGraphs: --cuda-graph-memory comes off the cache and
// prints vLLM's equivalence line; with --enforce-eager it is refused.
func TestEstimateVLLMCUDAGraphs(t *testing.T) {
	base := []string{"estimate", "--model", "llama-3.1-8b", "--infer", "--runtime", "vllm", "--gpu", "h100", "--max-model-len", "8192", "--json"}
	code, a, errOut := runCLI(t, "", base...)
	require.Equal(t, 0, code, errOut)
	code, b, errOut := runCLI(t, "", append(base, "--cuda-graph-memory", "2GiB")...)
	require.Equal(t, 0, code, errOut)
	var ja, jb map[string]any
	require.NoError(t, json.Unmarshal([]byte(a), &ja))
	require.NoError(t, json.Unmarshal([]byte(b), &jb))
	va, vb := ja["vllm"].(map[string]any), jb["vllm"].(map[string]any)
	assert.Equal(t, va["kv_cache_memory"].(float64)-2*(1<<30), vb["kv_cache_memory"])
	assert.Equal(t, float64(2<<30), vb["cuda_graph_memory"])
	code, _, errOut = runCLI(t, "", "estimate", "--model", "llama-3.1-8b", "--infer", "--runtime", "vllm", "--gpu", "h100", "--cuda-graph-memory", "1GiB", "--enforce-eager")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--cuda-graph-memory")
	code, _, errOut = runCLI(t, "", "estimate", "--model", "llama-3.1-8b", "--infer", "--runtime", "vllm", "--gpu", "h100", "--tensor-parallel-size", "3")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--tensor-parallel-size")
}
