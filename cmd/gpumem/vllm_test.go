package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEstimateVLLM checks the vLLM runtime on the command line: Llama-3-8B
// in bf16 on 80 GiB at 0.9 (budget's TestVLLMLlama3 has the arithmetic).
func TestEstimateVLLM(t *testing.T) {
	runJSON := func(args ...string) (map[string]any, int, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"estimate", "--model", "llama-3-8b", "--infer", "--precision", "bf16"}, args...), strings.NewReader(""), &out, &errOut)
		var got map[string]any
		if code == exitOK {
			require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
		}
		return got, code, errOut.String()
	}
	got, code, stderr := runJSON("--seq", "8192", "--runtime", "vllm", "--memory", "80GiB", "--json")
	require.Equal(t, exitOK, code, stderr)
	v, ok := got["vllm"].(map[string]any)
	require.True(t, ok, got)
	assert.EqualValues(t, 16_060_522_496, v["weights"])
	assert.EqualValues(t, 60_986_220_544, v["kv_cache_memory"])
	assert.EqualValues(t, 29_080, v["gpu_blocks"])
	assert.InDelta(t, 465_280.0/8192, v["max_concurrency"], 1e-9)
	assert.Equal(t, "", v["refused"])
	assert.Equal(t, true, got["fits"])

	// --tensor-parallel-size 2, --kv-cache-dtype fp8: a page of 16 × 4
	// heads × 128 × 2 × 1 byte × 32 layers = 524,288 bytes.
	got, code, stderr = runJSON("--seq", "8192", "--runtime", "vllm", "--memory", "80GiB", "--tensor-parallel-size", "2",
		"--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.5", "--max-num-seqs", "64", "--json")
	require.Equal(t, exitOK, code, stderr)
	v = got["vllm"].(map[string]any)
	assert.EqualValues(t, 524_288, v["page_bytes"])
	// 0.5 × 85,899,345,920 − 8,030,261,248 − the forward pass's
	// 2,048 × (3 × 4,096 + 3 × 7,168) × 2 = 138,412,032 (the sampler's
	// 64 × 128,256 × 8 = 65,667,072 is smaller).
	assert.EqualValues(t, 42_949_672_960-8_030_261_248-138_412_032, v["kv_cache_memory"])

	// The refusal: exit 1 with vLLM's message.
	var out, errOut bytes.Buffer
	code = run([]string{"estimate", "--model", "llama-3-8b", "--infer", "--precision", "bf16", "--runtime", "vllm",
		"--memory", "24GiB", "--max-model-len", "131072"}, strings.NewReader(""), &out, &errOut)
	assert.Equal(t, exitDoesNotFit, code, errOut.String())
	assert.Contains(t, out.String(), "Maximum concurrency for 131,072 tokens per request: 0.40x")
	// (16,060,522,496 + 262,668,288 + 17,179,869,184) / 25,769,803,776.
	assert.Contains(t, out.String(), "least gpu_memory_utilization for one request of 131,072 tokens: 1.300")
	assert.Contains(t, errOut.String(), "To serve at least one request with the models's max seq len (131072)")

	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--runtime", "vllm"}, "give --gpu or --memory"},
		{[]string{"--runtime", "vllm", "--gpu", "h100", "--gpu-memory-utilization", "1.5"}, "--gpu-memory-utilization 1.5"},
		{[]string{"--runtime", "vllm", "--gpu", "h100", "--max-model-len", "-1"}, "--max-model-len -1"},
		{[]string{"--runtime", "vllm", "--gpu", "h100", "--kv-cache-dtype", "int4"}, "--kv-cache-dtype"},
		{[]string{"--gpu", "h100", "--max-num-seqs", "4"}, "--max-num-seqs 4: it is a vLLM option"},
		{[]string{"--runtime", "vllm", "--gpu", "h100", "--generate", "8", "--kv-dtype", "fp8"}, "--kv-cache-dtype"},
	} {
		_, code, stderr := runJSON(c.args...)
		assert.Equal(t, exitBadInput, code, c.args)
		assert.Contains(t, stderr, c.err, c.args)
	}
}

// TestServeVLLM checks the request fields of the vLLM runtime.
func TestServeVLLM(t *testing.T) {
	h := newServer(serverOptions{})
	w := do(t, h, "POST", "/v1/estimate", "application/json",
		strings.NewReader(`{"model":"llama-3-8b","mode":"infer","precision":"bf16","seq":8192,"runtime":"vllm","memory":"80GiB"}`))
	require.Equal(t, 200, w.Code, w.Body.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	v, ok := got["vllm"].(map[string]any)
	require.True(t, ok, got)
	assert.EqualValues(t, 29_080, v["gpu_blocks"])
	for body, field := range map[string]string{
		`{"model":"llama-3-8b","mode":"infer","runtime":"vllm","gpu":"h100","gpu_memory_utilization":2}`: "gpu_memory_utilization",
		`{"model":"llama-3-8b","mode":"infer","runtime":"vllm","gpu":"h100","max_model_len":-5}`:         "max_model_len",
		`{"model":"llama-3-8b","mode":"infer","runtime":"vllm","gpu":"h100","kv_cache_dtype":"nf4"}`:     "kv_cache_dtype",
		`{"model":"llama-3-8b","mode":"infer","runtime":"vllm","gpu":"h100","tensor_parallel_size":-1}`:  "tensor_parallel_size",
		`{"model":"llama-3-8b","mode":"infer","gpu":"h100","max_num_batched_tokens":4096}`:               "max_num_batched_tokens",
		`{"model":"llama-3-8b","mode":"train","runtime":"vllm","gpu":"h100"}`:                            "runtime",
	} {
		w := do(t, h, "POST", "/v1/estimate", "application/json", strings.NewReader(body))
		var m map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
		assert.Equal(t, 400, w.Code, body)
		assert.Equal(t, field, m["field"], "%s: %v", body, m)
	}
}

// TestServeVLLMNeedsDevice: a vLLM request without gpu or memory names a
// field, and plan refuses the runtime.
func TestServeVLLMNeedsDevice(t *testing.T) {
	h := newServer(serverOptions{})
	w := do(t, h, "POST", "/v1/estimate", "application/json",
		strings.NewReader(`{"model":"llama-3-8b","mode":"infer","runtime":"vllm"}`))
	var m map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
	assert.Equal(t, 400, w.Code, m)
	assert.Equal(t, "gpu", m["field"], m)
	w = do(t, h, "POST", "/v1/plan", "application/json",
		strings.NewReader(`{"model":"llama-3-8b","mode":"infer","runtime":"vllm","gpu":"h100"}`))
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
	assert.Equal(t, 400, w.Code, m)
	assert.Equal(t, "runtime", m["field"], m)
}

// TestEstimateVLLMV0: --vllm-v0 (vllm_v0) takes V0's profile sampler,
// which sorts 256 × 128,256 logits: 32,833,536 × (2 + 36) bytes plus the
// 2,048 × 4,096 × 2 hidden states it holds, 1,264,451,584 bytes, where V1's
// fp32 logits and softmax take 262,668,288.
func TestEstimateVLLMV0(t *testing.T) {
	args := []string{"estimate", "--model", "llama-3-8b", "--infer", "--precision", "bf16", "--seq", "8192", "--runtime", "vllm", "--memory", "80GiB", "--json"}
	kv := map[bool]float64{}
	for _, v0 := range []bool{false, true} {
		a := args
		if v0 {
			a = append(append([]string{}, args...), "--vllm-v0")
		}
		var out, errOut bytes.Buffer
		require.Equal(t, exitOK, run(a, strings.NewReader(""), &out, &errOut), errOut.String())
		var got map[string]any
		require.NoError(t, json.Unmarshal(out.Bytes(), &got))
		kv[v0] = got["vllm"].(map[string]any)["kv_cache_memory"].(float64)
	}
	assert.Equal(t, float64(1_264_451_584-262_668_288), kv[false]-kv[true])

	var out, errOut bytes.Buffer
	code := run([]string{"estimate", "--model", "llama-3-8b", "--infer", "--vllm-v0"}, strings.NewReader(""), &out, &errOut)
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, errOut.String(), "--vllm-v0")
}
