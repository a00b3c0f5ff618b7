package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEstimatePipeline(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, "", "estimate", "--pipeline", "sdxl", "--train", "--lora-rank", "4", "--checkpointing", "full", "--gpu", "rtx4090")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "unet 2,567,463,684 (trainable 5,806,080)")
	assert.Contains(t, out, "text encoder 2 694,659,840")
	assert.Contains(t, out, "batch 1 at 1024×1024 (latent 128×128)")
	assert.Contains(t, out, "fits on NVIDIA GeForce RTX 4090")

	code, out, errOut = runCLI(t, "", "estimate", "--pipeline", "stabilityai/stable-diffusion-xl-base-1.0", "--infer", "--cpu-offload", "--json")
	require.Equal(t, exitOK, code, errOut)
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, "sdxl", r["pipeline"])
	assert.Positive(t, r["host"], "the components not running are on the host")
	assert.Equal(t, float64(1024), r["height"])

	// A full fine-tune of SD 1.5 with AdamW does not fit a 12 GB card.
	code, out, _ = runCLI(t, "", "estimate", "--pipeline", "sd-1.5", "--train", "--memory", "12GB")
	assert.Equal(t, exitDoesNotFit, code, out)
}

func TestEstimateDiffusersDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ sub, catalog string }{{"unet", "sd-1.5-unet"}, {"vae", "sd-1.5-vae"}, {"text_encoder", "sd-1.5-text-encoder"}} {
		data, err := os.ReadFile(filepath.Join("..", "..", "model", "configs", c.catalog+".json"))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, c.sub), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, c.sub, "config.json"), data, 0o644))
	}
	code, fromDir, errOut := runCLI(t, "", "estimate", "--diffusers", dir, "--infer", "--batch", "2")
	require.Equal(t, exitOK, code, errOut)
	_, fromCatalog, _ := runCLI(t, "", "estimate", "--pipeline", "sd-1.5", "--infer", "--batch", "2")
	assert.Equal(t, fromCatalog[len("sd-1.5"):], fromDir[len(dir):], "the directory's configs are the catalog's")
	require.NoError(t, os.Remove(filepath.Join(dir, "vae", "config.json")))
	code, _, errOut = runCLI(t, "", "estimate", "--diffusers", dir, "--infer")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, errOut, "vae/config.json")
}

func TestEstimatePipelineBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--pipeline", "sd-9", "--infer"}, "--pipeline"},
		{[]string{"--pipeline", "sdxl", "--infer", "--resolution", "1001"}, "--resolution"},
		{[]string{"--pipeline", "sdxl", "--infer", "--seq", "77"}, "--seq"},
		{[]string{"--vae-tiling", "--model", "gpt2", "--infer"}, "--vae-tiling"},
		{[]string{"--pipeline", "sdxl", "--train", "--cpu-offload"}, "--cpu-offload"},
		{[]string{"--pipeline", "sdxl", "--infer", "--cache-latents"}, "--cache-latents"},
		{[]string{"--pipeline", "sdxl", "--train", "--checkpointing", "selective"}, "--checkpointing"},
		{[]string{"--pipeline", "sdxl", "--infer", "--precision", "fp16-mixed"}, "--precision"},
		{[]string{"--pipeline", "sdxl", "--infer", "--frozen-dtype", "int8"}, "--frozen-dtype"},
		{[]string{"--pipeline", "sdxl", "--infer", "--batch", "0"}, "--batch"},
		{[]string{"--pipeline", "sdxl", "--diffusers", ".", "--infer"}, "--diffusers"},
		{[]string{"--pipeline", "sdxl"}, "--train"},
	} {
		code, _, errOut := runCLI(t, "", append([]string{"estimate"}, tc.args...)...)
		assert.Equal(t, exitBadInput, code, "%v", tc.args)
		assert.Contains(t, errOut, tc.flag, "%v", tc.args)
	}
}
