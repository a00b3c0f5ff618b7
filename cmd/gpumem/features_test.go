package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFeatureCombinations: the knobs of the training and serving stacks
// work together, or are refused naming the flag and the request field.
func TestFeatureCombinations(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	for _, tc := range []struct {
		name  string
		args  []string
		body  string
		code  int    // exit status
		field string // the request field named on 4xx
		says  string // in the CLI's error
	}{
		{"a frozen 4-bit model differentiates to its input",
			[]string{"--model", "llama-2-7b", "--train", "--quant", "nf4", "--frozen", "--seq", "512"},
			`{"model":"llama-2-7b","mode":"train","quant":"nf4","frozen":true,"seq":512}`, exitOK, "", ""},
		{"a fused loss needs a causal LM head",
			[]string{"--model", "llama-3.2-1b", "--train", "--head", "seq-cls", "--loss", "liger", "--seq", "512"},
			`{"model":"llama-3.2-1b","mode":"train","head":"seq-cls","loss":"liger","seq":512}`, exitBadInput, "loss", "--loss liger"},
		{"a fused loss makes the head's gradient before the backward hooks",
			[]string{"--model", "llama-3.2-1b", "--train", "--loss", "cce", "--optimizer-in-backward", "--seq", "512"},
			`{"model":"llama-3.2-1b","mode":"train","loss":"cce","optimizer_in_backward":true,"seq":512}`, exitBadInput, "optimizer_in_backward", "--optimizer-in-backward"},
		{"the chunked loss with the step in backward",
			[]string{"--model", "llama-3.2-1b", "--train", "--loss", "chunked", "--optimizer-in-backward", "--seq", "512"},
			`{"model":"llama-3.2-1b","mode":"train","loss":"chunked","optimizer_in_backward":true,"seq":512}`, exitOK, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI(t, "", append([]string{"estimate"}, tc.args...)...)
			require.Equal(t, tc.code, code, stderr)
			assert.Contains(t, stderr, tc.says)
			w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(tc.body))
			if tc.code == exitOK {
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
				require.NotEmpty(t, out)
				return
			}
			require.GreaterOrEqual(t, w.Code, 400, w.Body.String())
			require.Less(t, w.Code, 500, w.Body.String())
			assert.Contains(t, w.Body.String(), `"field": "`+tc.field+`"`)
		})
	}
}
