package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEstimatePagedOptimizer: a paged optimizer's state is the
// paged_optimizer component, in device_peak and not in allocated_peak;
// the fit is checked against required_peak, so torchtune's low-memory
// Llama 2 7B full fine-tune (PagedAdamW, 54 GB of state) fits a 24 GB
// card, as it did for torchtune PR #527 (15.97 GB reserved).
func TestEstimatePagedOptimizer(t *testing.T) {
	t.Parallel()
	args := []string{"estimate", "--train", "--model", "llama-2-7b", "--batch", "2", "--seq", "512", "--precision", "bf16",
		"--optimizer", "paged_adamw_32bit", "--optimizer-in-backward", "--checkpointing", "full", "--gpu", "rtx4090"}
	code, out, stderr := runCLI(t, "", append(args, "--json")...)
	require.Zero(t, code, stderr)
	var r struct {
		Allocated  int64            `json:"allocated_peak"`
		Reserved   int64            `json:"reserved_peak"`
		Device     int64            `json:"device_peak"`
		Required   int64            `json:"required_peak"`
		Components map[string]int64 `json:"components"`
		Fits       bool             `json:"fits"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	// Every tensor of Llama 2 7B but the 65 norms (4096 elements) is
	// paged: 8 bytes (fp32 state1 and state2) × (6,738,415,616 − 65 ×
	// 4096) = 8 × 6,738,149,376 = 53,905,195,008.
	assert.Equal(t, int64(53_905_195_008), r.Components["paged_optimizer"])
	// The norms' state stays a device tensor: 8 × 4096 bytes each, 65
	// of them, every optimizer its own (optimizer_in_bwd).
	assert.Equal(t, int64(65*8*4096), r.Components["optimizer"])
	assert.Less(t, r.Allocated, int64(16e9))
	assert.Equal(t, r.Reserved+r.Components["context"]+r.Components["paged_optimizer"], r.Device)
	// The largest paged tensor is the embedding (or the head), 32000 ×
	// 4096 × 8 bytes = 1,048,576,000.
	assert.Equal(t, r.Device-r.Components["paged_optimizer"]+1_048_576_000, r.Required)
	assert.True(t, r.Fits)

	code, out, stderr = runCLI(t, "", args...)
	require.Zero(t, code, stderr)
	assert.Contains(t, out, "paged_optimizer")
	assert.True(t, strings.Contains(out, "required (paged state can page out)"), out)
}

// TestServeEstimatePagedOptimizer: /v1/estimate returns the bytes of
// gpumem estimate --json for a paged optimizer, required_peak included,
// and fits against it.
func TestServeEstimatePagedOptimizer(t *testing.T) {
	t.Parallel()
	body := `{"model":"llama-2-7b","train":true,"batch":2,"seq":512,"precision":"bf16","optimizer":"paged_adamw_32bit",
	  "optimizer_in_backward":true,"checkpointing":"full","gpu":"rtx4090"}`
	w := do(t, newServer(serverOptions{}), "POST", "/v1/estimate", "application/json", strings.NewReader(body))
	require.Equal(t, 200, w.Code, w.Body.String())
	code, out, stderr := runCLI(t, "", "estimate", "--train", "--model", "llama-2-7b", "--batch", "2", "--seq", "512", "--precision", "bf16",
		"--optimizer", "paged_adamw_32bit", "--optimizer-in-backward", "--checkpointing", "full", "--gpu", "rtx4090", "--json")
	require.Zero(t, code, stderr)
	assert.JSONEq(t, out, w.Body.String())
	var r map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
	assert.Contains(t, r, "required_peak")
	assert.Equal(t, true, r["fits"])
}
