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

// TestQuantFlags: --quant, --group-size, --kv-dtype, --kv-block and
// --load, and the errors that name them as typed.
func TestQuantFlags(t *testing.T) {
	t.Parallel()
	estimateJSON := func(args ...string) map[string]any {
		t.Helper()
		code, out, stderr := runCLI(t, "", append(append([]string{"estimate"}, args...), "--json")...)
		require.Equal(t, exitOK, code, stderr)
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		return r
	}
	comp := func(r map[string]any, name string) int64 {
		return int64(r["components"].(map[string]any)[name].(float64))
	}
	// fp8 halves the KV cache of a generating job.
	gen := []string{"--model", "llama-3.1-8b", "--infer", "--batch", "4", "--seq", "2000", "--generate", "500"}
	bf16 := estimateJSON(gen...)
	fp8 := estimateJSON(append(gen, "--kv-dtype", "fp8")...)
	assert.Equal(t, int64(1_310_720_000), comp(bf16, "kv_cache"))
	assert.Equal(t, comp(bf16, "kv_cache")/2, comp(fp8, "kv_cache"))
	// Blocks of 16: 157 blocks of 16 tokens per sequence.
	paged := estimateJSON(append(gen, "--kv-block", "16")...)
	assert.Equal(t, int64(4*2512*131_072), comp(paged, "kv_cache"))

	// Load only: weights and context.
	load := estimateJSON("--model", "llama-3.1-8b", "--load")
	assert.Equal(t, "loaded", load["phase"])
	assert.Equal(t, int64(load["device_peak"].(float64)), comp(load, "weights")+comp(load, "context"))
	code, out, stderr := runCLI(t, "", "estimate", "--model", "llama-3.1-8b", "--load")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "llama-3.1-8b: load only, bf16 precision")
	assert.Contains(t, out, "peak phase: loaded")

	// QLoRA: the frozen rest in bf16, about 5.46 GiB of weights under
	// bf16-mixed (the adapters' autocast copies included).
	q := estimateJSON("--model", "llama-3.1-8b", "--train", "--qlora", "--seq", "512")
	assert.InDelta(t, 5.46, float64(comp(q, "weights"))/(1<<30), 0.01)
	// GPTQ inference: 4-bit weights and the exllamav2 scratch.
	g := estimateJSON("--model", "llama-2-7b", "--infer", "--quant", "gptq", "--precision", "fp16", "--seq", "128")
	assert.Equal(t, int64(8_519_680+811_598_336), comp(g, "workspace"))
}

func TestQuantFlagErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--infer", "--quant", "int3"}, `--quant "int3": want int8, nf4, fp4, gptq, awq or fp8`},
		{[]string{"--train", "--quant", "gptq"}, "--quant gptq: quantized weights cannot train; give --lora-rank"},
		{[]string{"--train", "--qlora", "--quant", "awq"}, "--quant awq: --qlora stores the weights in nf4 already"},
		{[]string{"--infer", "--quant", "nf4", "--group-size", "64"}, "--group-size 64: it applies to --quant gptq or awq"},
		{[]string{"--infer", "--group-size", "64"}, "--group-size 64: it applies to --quant gptq or awq"},
		{[]string{"--infer", "--quant", "gptq", "--group-size", "100"}, "--group-size 100: invalid value"},
		{[]string{"--infer", "--kv-dtype", "fp8"}, "--kv-dtype fp8: only a generating job keeps a KV cache"},
		{[]string{"--infer", "--generate", "8", "--kv-dtype", "fp9"}, `--kv-dtype "fp9"`},
		{[]string{"--infer", "--generate", "8", "--kv-dtype", "nf4"}, "--kv-dtype nf4: invalid value: not a KV cache format"},
		{[]string{"--infer", "--generate", "8", "--kv-block", "-1"}, "--kv-block -1: invalid value"},
		{[]string{"--train", "--kv-block", "16"}, "--kv-block 16: only a generating job keeps a KV cache"},
		{[]string{"--load", "--batch", "4"}, "--batch: a load-only job runs nothing"},
		{[]string{"--load", "--optimizer", "adamw"}, "--optimizer: a load-only job runs nothing"},
		{[]string{"--load", "--train"}, "give one of --train, --infer and --load"},
	}
	for _, tc := range tests {
		args := append([]string{"estimate", "--model", "llama-2-7b"}, tc.args...)
		code, out, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitBadInput, code, "%q: %s", args, stderr)
		assert.Empty(t, out, args)
		assert.Contains(t, stderr, tc.want, args)
	}
	code, _, stderr := runCLI(t, "", "plan", "--model", "llama-2-7b", "--load", "--gpu", "h100")
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, "--load: plan searches the batch and sequence")
}

// TestServeQuant: the request fields give the CLI's bytes, and their
// errors name the request's fields.
func TestServeQuant(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	same := []struct {
		args []string
		body string
	}{
		{[]string{"--model", "llama-2-7b", "--infer", "--quant", "awq", "--group-size", "64"},
			`{"model":"llama-2-7b","mode":"infer","quant":"awq","group_size":64}`},
		{[]string{"--model", "llama-3.1-8b", "--infer", "--generate", "100", "--kv-dtype", "fp8", "--kv-block", "16"},
			`{"model":"llama-3.1-8b","infer":true,"generate":100,"kv_dtype":"fp8","kv_block":16}`},
		{[]string{"--model", "llama-3.1-8b", "--load", "--quant", "int8"}, `{"model":"llama-3.1-8b","mode":"load","quant":"int8"}`},
		{[]string{"--model", "llama-2-7b", "--train", "--quant", "nf4", "--lora-rank", "8"},
			`{"model":"llama-2-7b","train":true,"quant":"nf4","lora_rank":8}`},
	}
	for _, tc := range same {
		code, want, stderr := runCLI(t, "", append(append([]string{"estimate"}, tc.args...), "--json")...)
		require.Equal(t, exitOK, code, stderr)
		w := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(tc.body))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		if diff := cmp.Diff(want, w.Body.String()); diff != "" {
			t.Errorf("%s differs from the CLI (-cli +service):\n%s", tc.body, diff)
		}
	}
	bad := []struct {
		body, field, contains string
	}{
		{`{"model":"llama-2-7b","infer":true,"quant":"int3"}`, "quant", `quant "int3"`},
		{`{"model":"llama-2-7b","train":true,"quant":"gptq"}`, "quant", "give lora_rank"},
		{`{"model":"llama-2-7b","train":true,"qlora":true,"quant":"awq"}`, "quant", "qlora stores"},
		{`{"model":"llama-2-7b","infer":true,"group_size":64}`, "group_size", "gptq or awq"},
		{`{"model":"llama-2-7b","infer":true,"quant":"gptq","group_size":100}`, "group_size", "100"},
		{`{"model":"llama-2-7b","infer":true,"kv_dtype":"fp8"}`, "kv_dtype", "only a generating job"},
		{`{"model":"llama-2-7b","infer":true,"generate":4,"kv_dtype":"fp9"}`, "kv_dtype", `kv_dtype "fp9"`},
		{`{"model":"llama-2-7b","infer":true,"generate":4,"kv_dtype":"nf4"}`, "kv_dtype", "not a KV cache format"},
		{`{"model":"llama-2-7b","infer":true,"generate":4,"kv_block":-1}`, "kv_block", "-1"},
		{`{"model":"llama-2-7b","mode":"load","batch":4}`, "batch", "load-only job runs nothing"},
		{`{"model":"llama-2-7b","mode":"load","infer":true}`, "mode", "runs nothing"},
	}
	for _, tc := range bad {
		w := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(tc.body))
		require.Equal(t, http.StatusBadRequest, w.Code, "%s: %s", tc.body, w.Body.String())
		var e struct {
			Error string `json:"error"`
			Field string `json:"field"`
		}
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), w.Body.String())
		assert.Equal(t, tc.field, e.Field, tc.body)
		assert.Contains(t, e.Error, tc.contains, tc.body)
	}
}
