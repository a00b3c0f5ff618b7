package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPTBySizeCLI: --model gpt:175b and gpt:96x12288 name the same
// 174,604,259,328-parameter model (see model.TestGPT175BExact); a bad
// size names the flag.
func TestGPTBySizeCLI(t *testing.T) {
	t.Parallel()
	for _, m := range []string{"gpt:175b", "gpt:96x12288"} {
		code, out, stderr := runCLI(t, "", "estimate", "--model", m, "--infer", "--seq", "128")
		assert.Equal(t, exitOK, code, stderr)
		assert.Contains(t, out, "parameters 174,604,259,328")
	}
	code, _, stderr := runCLI(t, "", "estimate", "--model", "gpt:96x100", "--infer")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, `--model "gpt:96x100"`)
	assert.Contains(t, stderr, "multiple of 64")
	code, _, stderr = runCLI(t, "", "estimate", "--model", "gpt:largest", "--train")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, "only gpumem plan")
	code, _, stderr = runCLI(t, "", "plan", "--model", "gpt2", "--infer", "--memory", "8GiB", "--states-only")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, "--states-only")
}

// TestPlanLargestCLI: plan --model gpt:largest --states-only with the
// ZeRO paper's Table 2 job, 64 GPUs of 32 GB (--memory 32GB = 32e9
// bytes) under ZeRO-3: 16Ψ/64 ≤ 32e9 gives Ψ ≤ 128e9; the largest
// GPT-3-style shape under it is 89 × 10880 (127,005,547,520).
func TestPlanLargestCLI(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "plan", "--model", "gpt:largest", "--train", "--precision", "fp16-master", "--optimizer", "adam",
		"--batch", "1", "--seq", "1", "--memory", "32GB", "--gpus", "8", "--nodes", "8", "--zero", "3", "--states-only", "--json")
	require.Equal(t, exitOK, code, stderr)
	var v struct {
		Largest struct {
			Params int64  `json:"params"`
			Layers int64  `json:"layers"`
			Hidden int64  `json:"hidden"`
			Layout string `json:"layout"`
		} `json:"largest_model"`
		States int64 `json:"model_states"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	assert.Equal(t, int64(127_005_547_520), v.Largest.Params)
	assert.Equal(t, int64(89), v.Largest.Layers)
	assert.Equal(t, int64(10880), v.Largest.Hidden)
	assert.Equal(t, "DP 64, ZeRO-3", v.Largest.Layout)
	// 16 × 127,005,547,520 / 64 = 31,751,386,880 bytes.
	assert.Equal(t, int64(31_751_386_880), v.States)

	// Without a layout the fleet chooses one per size; --states-only
	// then has none to count with.
	code, _, stderr = runCLI(t, "", "plan", "--model", "gpt:largest", "--train", "--memory", "32GB", "--gpus", "8", "--states-only")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, "--states-only")

	code, out, stderr = runCLI(t, "", "plan", "--model", "gpt:largest", "--train", "--precision", "bf16-mixed", "--batch", "1", "--seq", "2048", "--gpu", "a100-80gb", "--gpus", "8")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "largest GPT that fits on NVIDIA A100-SXM4-80GB")
}

// TestServePlanLargest: the service's plan takes "model": "gpt:largest"
// and "states_only" as the CLI does.
func TestServePlanLargest(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	w := do(t, h, http.MethodPost, "/v1/plan", "application/json", strings.NewReader(
		`{"model":"gpt:largest","train":true,"precision":"fp16-master","optimizer":"adam","batch":1,"seq":1,"memory":"32GB","states_only":true}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var v struct {
		Largest struct {
			Params int64 `json:"params"`
		} `json:"largest_model"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &v))
	// One GPU, no sharding: 16Ψ ≤ 32e9, Ψ ≤ 2e9 (the paper's baseline).
	assert.LessOrEqual(t, v.Largest.Params, int64(2e9))
	assert.Greater(t, v.Largest.Params, int64(1.94e9))
	w = do(t, h, http.MethodPost, "/v1/plan", "application/json", strings.NewReader(`{"model":"gpt2","infer":true,"memory":"8GiB","states_only":true}`))
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), "states_only")
	w = do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(`{"model":"gpt:largest","infer":true}`))
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), "only /v1/plan")
	w = do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(`{"model":"gpt:96x100","infer":true}`))
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), `"model"`)
}
