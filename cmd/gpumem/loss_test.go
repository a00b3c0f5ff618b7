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

// TestEstimateLossFlags: --loss lowers a Llama-3-8B step's peak and says
// so in the job line; --logits-to-keep lowers a prefill's.
func TestEstimateLossFlags(t *testing.T) {
	t.Parallel()
	peak := func(args ...string) int64 {
		t.Helper()
		return estimatePeak(t, append([]string{"--model", "llama-3-8b", "--batch", "2", "--seq", "4096",
			"--attention", "flash", "--precision", "bf16"}, args...)...)
	}
	full := peak("--train")
	assert.Equal(t, full, peak("--train", "--loss", "full"))
	for _, l := range []string{"chunked", "chunked:16", "liger", "cce"} {
		assert.Less(t, peak("--train", "--loss", l), full, l)
	}
	assert.Less(t, peak("--train", "--loss", "chunked:16"), peak("--train", "--loss", "chunked"))
	assert.Less(t, peak("--infer", "--logits-to-keep", "1"), peak("--infer"))
	code, out, stderr := runCLI(t, "", "estimate", "--model", "llama-3-8b", "--train", "--loss", "cce")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "torch.optim.AdamW, cce loss\n")
	code, out, stderr = runCLI(t, "", "estimate", "--model", "llama-3-8b", "--infer", "--logits-to-keep", "1")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, ", logits of the last position\n")
}

// TestEstimateLossFlagErrors: bad values name the flag as typed.
func TestEstimateLossFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "llama-3-8b", "--train", "--loss", "chunked:0"}, `--loss "chunked:0": invalid value: the chunk count`},
		{[]string{"--model", "llama-3-8b", "--train", "--loss", "chunked:-3"}, `--loss "chunked:-3"`},
		{[]string{"--model", "llama-3-8b", "--train", "--loss", "fused"}, `--loss "fused": invalid value: want full, chunked, chunked:N, liger or cce`},
		{[]string{"--model", "llama-3-8b", "--infer", "--loss", "liger"}, "--loss liger: an inference job computes no loss"},
		{[]string{"--model", "bert-base-uncased", "--train", "--loss", "liger"}, "--loss liger: unsupported: the fused linear (liger) loss replaces a causal language model's head; bert with a masked-lm head has none"},
		{[]string{"--model", "vit-base-patch16-224", "--train", "--loss", "cce"}, "--loss cce: unsupported"},
		{[]string{"--model", "llama-3-8b", "--train", "--gpus", "2", "--tp", "2", "--loss", "liger"}, "--loss liger: unsupported: the liger loss is modelled without tensor parallelism"},
		{[]string{"--model", "llama-3-8b", "--train", "--logits-to-keep", "1"}, "--logits-to-keep 1: a training step's loss needs the logits of every position"},
		{[]string{"--model", "llama-3-8b", "--train", "--eval"}, "--eval: an evaluation pass is an inference job's"},
		{[]string{"--model", "llama-3-8b", "--infer", "--generate", "8", "--logits-to-keep", "1"}, "--logits-to-keep 1: generation's prompt pass"},
		{[]string{"--model", "llama-3-8b", "--infer", "--logits-to-keep", "-1"}, "--logits-to-keep -1: invalid value"},
		{[]string{"--model", "t5-small", "--infer", "--logits-to-keep", "1"}, "--logits-to-keep 1: unsupported"},
	} {
		code, out, stderr := runCLI(t, "", append([]string{"estimate"}, tc.args...)...)
		assert.Equal(t, exitBadInput, code, "%v: %s", tc.args, stderr)
		assert.Empty(t, out)
		assert.Contains(t, stderr, tc.want, "%v", tc.args)
	}
}

// TestServeLoss: the request fields loss and logits_to_keep give the
// CLI's answers, and their errors name them.
func TestServeLoss(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	for _, tc := range []struct {
		args []string
		body string
	}{
		{[]string{"--model", "llama-3-8b", "--train", "--loss", "liger", "--seq", "4096"}, `{"model":"llama-3-8b","mode":"train","loss":"liger","seq":4096}`},
		{[]string{"--model", "llama-3-8b", "--train", "--loss", "chunked:4"}, `{"model":"llama-3-8b","mode":"train","loss":"chunked:4"}`},
		{[]string{"--model", "llama-3-8b", "--infer", "--logits-to-keep", "1"}, `{"model":"llama-3-8b","mode":"infer","logits_to_keep":1}`},
	} {
		code, want, stderr := runCLI(t, "", append(append([]string{"estimate"}, tc.args...), "--json")...)
		require.Equal(t, 0, code, stderr)
		w := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(tc.body))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		if diff := cmp.Diff(want, w.Body.String()); diff != "" {
			t.Errorf("POST /v1/estimate %s differs from gpumem estimate --json (-cli +service):\n%s", tc.body, diff)
		}
	}
	for _, tc := range []struct {
		body, field string
		status      int
	}{
		{`{"model":"llama-3-8b","mode":"train","loss":"chunked:0"}`, "loss", 400},
		{`{"model":"llama-3-8b","mode":"train","loss":"nope"}`, "loss", 400},
		{`{"model":"llama-3-8b","mode":"infer","loss":"cce"}`, "loss", 400},
		{`{"model":"bert-base-uncased","mode":"train","loss":"liger"}`, "loss", 422},
		{`{"model":"llama-3-8b","mode":"infer","logits_to_keep":-1}`, "logits_to_keep", 400},
		{`{"model":"llama-3-8b","mode":"train","logits_to_keep":2}`, "logits_to_keep", 400},
		{`{"model":"llama-3-8b","mode":"infer","generate":4,"logits_to_keep":2}`, "logits_to_keep", 400},
		{`{"model":"t5-small","mode":"infer","logits_to_keep":2}`, "logits_to_keep", 422},
		{`{"model":"llama-3-8b","mode":"train","loss":"chunked:-1"}`, "loss", 400},
	} {
		for _, path := range []string{"/v1/estimate", "/v1/plan"} {
			body := `{"gpu":"h100",` + tc.body[1:] // plan needs a target
			w := do(t, h, http.MethodPost, path, "", strings.NewReader(body))
			require.Equal(t, tc.status, w.Code, "%s %s: %s", path, tc.body, w.Body.String())
			var r errorReply
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
			assert.Equal(t, tc.field, r.Field, "%s %s: %s", path, tc.body, r.Error)
			checkRequestTerms(t, r)
		}
	}
}

// TestPlanAllowLoss: --allow fused-loss is a rung of plan's ladder and
// the plan's JSON names the loss; with --infer it is exit 2.
func TestPlanAllowLoss(t *testing.T) {
	t.Parallel()
	args := []string{"plan", "--model", "llama-3-8b", "--train", "--precision", "bf16", "--batch", "4", "--seq", "4096",
		"--attention", "flash", "--memory", "170GiB", "--max-batch", "4", "--allow", "fused-loss", "--json"}
	code, out, stderr := runCLI(t, "", args...)
	require.Equal(t, 0, code, stderr)
	var r struct {
		Loss   string `json:"loss"`
		Ladder []struct {
			Change string `json:"change"`
		} `json:"ladder"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, "liger", r.Loss)
	require.GreaterOrEqual(t, len(r.Ladder), 2)
	assert.Equal(t, "loss → liger", r.Ladder[1].Change)
	code, _, stderr = runCLI(t, "", "plan", "--model", "llama-3-8b", "--infer", "--gpu", "h100", "--allow", "cce")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, `--allow "cce"`)
	h := newServer(serverOptions{})
	w := do(t, h, http.MethodPost, "/v1/plan", "", strings.NewReader(
		`{"model":"llama-3-8b","mode":"train","precision":"bf16","batch":4,"seq":4096,"attention":"flash","memory":"170GiB","max_batch":4,"allow":"fused-loss"}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `"loss": "liger"`)
}
