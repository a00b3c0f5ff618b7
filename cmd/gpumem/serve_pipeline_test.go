package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServePipelineMatchesCLI checks that /v1/pipeline returns the bytes
// gpumem estimate --pipeline --json prints for the same job.
func TestServePipelineMatchesCLI(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	for _, tc := range []struct {
		args []string
		body string
	}{
		{[]string{"--pipeline", "sdxl", "--train", "--lora-rank", "4", "--checkpointing", "full", "--gpu", "rtx4090"},
			`{"pipeline":"sdxl","mode":"train","lora_rank":4,"checkpointing":"full","gpu":"rtx4090"}`},
		{[]string{"--pipeline", "sd-1.5", "--infer", "--batch", "4", "--vae-slicing", "--guidance-scale", "1", "--memory", "8GB"},
			`{"pipeline":"sd-1.5","batch":4,"vae_slicing":true,"guidance_scale":1,"memory":"8GB"}`},
		{[]string{"--pipeline", "flux.1-dev", "--train", "--lora-rank", "4", "--precision", "bf16-mixed", "--checkpointing", "full",
			"--max-sequence-length", "77", "--cache-latents", "--precompute-text", "--height", "768", "--width", "512"},
			`{"pipeline":"flux.1-dev","mode":"train","lora_rank":4,"precision":"bf16-mixed","checkpointing":"full","max_sequence_length":77,"cache_latents":true,"precompute_text":true,"height":768,"width":512}`},
	} {
		code, want, errOut := runCLI(t, "", append([]string{"estimate", "--json"}, tc.args...)...)
		require.Equal(t, exitOK, code, errOut)
		w := do(t, h, http.MethodPost, "/v1/pipeline", "application/json", strings.NewReader(tc.body))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		assert.JSONEq(t, want, w.Body.String(), tc.body)
	}
}

func TestServePipelineErrors(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	for _, tc := range []struct {
		body, field string
		status      int
	}{
		{`{"pipeline":"sd-9"}`, "pipeline", http.StatusBadRequest},
		{`{}`, "pipeline", http.StatusBadRequest},
		{`{"pipeline":"sdxl","resolution":1001}`, "resolution", http.StatusBadRequest},
		{`{"pipeline":"sdxl","mode":"generate"}`, "mode", http.StatusBadRequest},
		{`{"pipeline":"sdxl","mode":"train","cpu_offload":true}`, "cpu_offload", http.StatusBadRequest},
		{`{"pipeline":"sdxl","checkpointing":"selective","mode":"train"}`, "checkpointing", http.StatusBadRequest},
		{`{"pipeline":"sdxl","batch":0}`, "batch", http.StatusBadRequest},
		{`{"pipeline":"sdxl","memory":"0"}`, "memory", http.StatusBadRequest},
		{`{"pipeline":"sdxl","seq":77}`, "seq", http.StatusBadRequest},
		{`{"pipeline":"sdxl","max_sequence_length":77}`, "max_sequence_length", http.StatusBadRequest},
		{`{"pipeline":"flux.1-dev","max_sequence_length":-1}`, "max_sequence_length", http.StatusBadRequest},
		{`{"pipeline":"sd3-medium","resolution":1000}`, "resolution", http.StatusBadRequest},
	} {
		w := do(t, h, http.MethodPost, "/v1/pipeline", "application/json", strings.NewReader(tc.body))
		assert.Equal(t, tc.status, w.Code, "%s: %s", tc.body, w.Body.String())
		var r struct{ Error, Field string }
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), tc.body)
		assert.Equal(t, tc.field, r.Field, "%s: %s", tc.body, r.Error)
		assert.NotContains(t, r.Error, "--", tc.body)
	}
}
