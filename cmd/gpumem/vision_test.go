package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImageSizeFlag: --image-size and the request's "image_size" set a
// vision backbone's image side; the activations grow with the pixels
// (ResNet-50's saved maps ×4 from 224 to 448 px) and the CLI and the
// HTTP request give the same estimate. Bad values name the flag or field.
func TestImageSizeFlag(t *testing.T) {
	t.Parallel()
	args := []string{"estimate", "--model", "resnet50", "--train", "--batch", "32", "--json"}
	code, small, stderr := runCLI(t, "", args...)
	require.Equal(t, exitOK, code, stderr)
	code, big, stderr := runCLI(t, "", append(args, "--image-size", "448")...)
	require.Equal(t, exitOK, code, stderr)
	var a, b struct{ Components map[string]int64 }
	require.NoError(t, json.Unmarshal([]byte(small), &a))
	require.NoError(t, json.Unmarshal([]byte(big), &b))
	require.InDelta(t, 4.0, float64(b.Components["activations"])/float64(a.Components["activations"]), 0.05)

	h := newServer(serverOptions{})
	w := do(t, h, http.MethodPost, "/v1/estimate", "application/json",
		strings.NewReader(`{"model":"resnet50","train":true,"batch":32,"image_size":448}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, big, w.Body.String())
	// The prepared-model cache keys on the image size.
	w = do(t, h, http.MethodPost, "/v1/estimate", "application/json",
		strings.NewReader(`{"model":"resnet50","train":true,"batch":32}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, small, w.Body.String())

	for _, tc := range []struct{ body, field, contains string }{
		{`{"model":"vit-base","train":true,"image_size":384}`, "image_size", "not a vision backbone"},
		{`{"model":"resnet50","train":true,"image_size":16}`, "image_size", "at least 32 pixels"},
		{`{"model":"swin_t","train":true,"image_size":-1}`, "image_size", "want 1 to 65536 pixels"},
	} {
		w := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(tc.body))
		require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), w.Body.String())
		require.Equal(t, tc.field, r.Field)
		require.Contains(t, r.Error, tc.contains)
	}
	for _, tc := range []struct {
		args     []string
		contains string
	}{
		{[]string{"--model", "resnet50", "--train", "--image-size", "8"}, "--image-size 8: invalid value: a ResNet needs at least 32 pixels"},
		{[]string{"--model", "gpt2", "--train", "--image-size", "224"}, "--image-size 224: gpt2 is not a vision backbone"},
		{[]string{"--model", "convnext_tiny", "--train", "--tp", "2", "--gpus", "2"}, "--tp"},
		{[]string{"--model", "swin_t", "--train", "--attention", "flash"}, "--attention flash"},
		{[]string{"--model", "resnet18", "--load", "--image-size", "224"}, "--image-size: a load-only job runs nothing"},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"estimate"}, tc.args...)...)
		require.Equal(t, exitBadInput, code, stderr)
		require.Contains(t, stderr, tc.contains)
	}
	code, out, stderr := runCLI(t, "", "estimate", "--model", "swin_t", "--train", "--batch", "16", "--image-size", "256")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "train, batch 16 × 256×256 px images")
	code, out, stderr = runCLI(t, "", "plan", "--model", "convnext_tiny", "--train", "--gpu", "rtx 3090")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "px images")
	// The plan request takes image_size too: a larger image fits a
	// smaller batch.
	batch := func(body string) float64 {
		w := do(t, h, http.MethodPost, "/v1/plan", "application/json", strings.NewReader(body))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var p struct{ Batch float64 }
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), w.Body.String())
		return p.Batch
	}
	b224 := batch(`{"model":"resnet50","train":true,"gpu":"rtx 3090"}`)
	b448 := batch(`{"model":"resnet50","train":true,"gpu":"rtx 3090","image_size":448}`)
	require.Greater(t, b448, 0.0)
	require.InDelta(t, 4.0, b224/b448, 0.3)
}
