package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeadFlag: --head and the request's "head" pick the task class;
// the estimate of bert-base as BertForSequenceClassification has no
// vocabulary logits (the catalog's BertForMaskedLM has 32·512·30522).
func TestHeadFlag(t *testing.T) {
	t.Parallel()
	args := []string{"estimate", "--model", "bert-base", "--train", "--batch", "32", "--seq", "512", "--json"}
	code, cls, stderr := runCLI(t, "", append(args, "--head", "seq-cls")...)
	require.Equal(t, exitOK, code, stderr)
	code, mlm, stderr := runCLI(t, "", args...)
	require.Equal(t, exitOK, code, stderr)
	var a, b struct{ Components map[string]int64 }
	require.NoError(t, json.Unmarshal([]byte(cls), &a))
	require.NoError(t, json.Unmarshal([]byte(mlm), &b))
	require.Less(t, a.Components["logits"], b.Components["logits"])

	h := newServer(serverOptions{})
	w := do(t, h, http.MethodPost, "/v1/estimate", "application/json",
		strings.NewReader(`{"model":"bert-base","train":true,"batch":32,"seq":512,"head":"seq-cls"}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, cls, w.Body.String())

	for _, tc := range []struct{ body, field, contains string }{
		{`{"model":"bert-base","train":true,"head":"classifier"}`, "head", "want causal-lm, masked-lm"},
		{`{"model":"t5-small","train":true,"head":"seq-cls"}`, "head", "no seq-cls head"},
		{`{"model":"llava-1.5-7b","train":true,"head":"qa"}`, "head", "no qa head"},
		{`{"model":"gpt2","train":true,"labels":3}`, "labels", "a causal-lm head has no labels"},
		{`{"model":"bert-base","train":true,"head":"seq-cls","labels":-2}`, "labels", "want 1 to 16777216 labels"},
	} {
		w := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(tc.body))
		require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), w.Body.String())
		require.Equal(t, tc.field, r.Field)
		require.Contains(t, r.Error, tc.contains)
	}
	// --labels sizes the classifier: 1000 labels make
	// ViTForImageClassification (86,567,656 parameters).
	code, out, stderr := runCLI(t, "", "estimate", "--model", "vit-base-patch16-224", "--train", "--head", "image-cls", "--labels", "1000")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "vit-base-patch16-224 (image-cls, 1000 labels): train")
	require.Contains(t, out, "parameters 86,567,656")
	w = do(t, h, http.MethodPost, "/v1/estimate", "application/json",
		strings.NewReader(`{"model":"bert-base","train":true,"batch":32,"seq":512,"head":"seq-cls","labels":2}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, cls, w.Body.String())

	for _, tc := range []struct {
		args     []string
		contains string
	}{
		{[]string{"--model", "vit-base-patch16-224", "--train", "--head", "seq-cls"}, "--head seq-cls: a vit model has no seq-cls head"},
		{[]string{"--model", "gpt2", "--infer", "--generate", "8", "--head", "seq-cls"}, "--generate 8: a seq-cls head generates no tokens"},
		{[]string{"--model", "gpt2", "--train", "--head", ""}, "--head \"\": an empty value"},
		{[]string{"--model", "gpt2", "--train", "--head", "causal-lm"}, ""},
		{[]string{"--model", "gpt2", "--train", "--labels", "3"}, "--labels 3: a causal-lm head has no labels"},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"estimate"}, tc.args...)...)
		if tc.contains == "" {
			require.Equal(t, exitOK, code, stderr)
			continue
		}
		require.Equal(t, exitBadInput, code, stderr)
		require.Contains(t, stderr, tc.contains)
	}
}
