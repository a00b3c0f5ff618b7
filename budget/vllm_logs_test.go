package budget

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestVLLMLogs compares the vLLM runtime with the figures vLLM printed in
// testdata/vllm (each file names its source and job), all from V0's
// worker: the weights within 2%; the driver rank's KV cache memory and
// activation peak within 5%, or, where the log is another rank's, the
// blocks the driver (which alone samples, and so has the fewest) gives
// the engine, as the refusal prints them, within 5%.
func TestVLLMLogs(t *testing.T) {
	for _, c := range []struct {
		file      string
		model     string
		capacity  gpumem.Bytes // total_gpu_memory as vLLM saw it
		o         VLLMOptions
		weights   float64 // GiB, "Loading model weights took"
		kv        float64 // GiB, "the rest of the memory reserved for KV Cache"
		act       float64 // GiB, "PyTorch activation peak memory"
		minTokens int64   // the refusal's tokens (the rank with the least), or 0
		worker    bool    // kv and act are a non-driver rank's, which does not sample (compared, not asserted)
	}{{
		// requested 23.08 GiB = total × 0.98; the reporter's non-torch
		// figure (0.25 GiB) is given, as NonTorch is an input.
		file: "qwen14b-distill-tp2-rtx4090.log", model: "qwen2.5-14b",
		capacity: 25_287_700_000, // 23.08 GiB / 0.98, to 10^5 bytes
		o: VLLMOptions{GPUMemoryUtilization: 0.98, MaxModelLen: 131072, TensorParallel: 2,
			NonTorch: gpumem.Bytes(0.25 * (1 << 30)), V0: true},
		weights: 13.9476, kv: 8.69, act: 0.19, minTokens: 81536, worker: true,
	}, {
		// V0 without chunked prefill (max_model_len 8192 < 32K) profiles
		// max(max_model_len, 2048) = 8192 tokens; the logged non-torch
		// memory (which in V0 includes the CUDA context and cuBLAS
		// workspaces) is given.
		file: "llama3-8b-h100-tp1.log", model: "llama-3-8b",
		capacity: 85_060_800_000, // 79.22 GiB, to 10^5 bytes
		o: VLLMOptions{MaxModelLen: 8192, MaxNumBatchedTokens: 8192,
			NonTorch: 1_922_000_000, V0: true}, // 1.79 GiB
		weights: 14.96, kv: 53.29, act: 1.26,
	}, {
		file: "llama3-8b-h100-tp2.log", model: "llama-3-8b",
		capacity: 85_060_800_000,
		// The activation peak is the same as with TP 1: the driver's
		// sampler over the whole vocabulary, not the forward pass, which
		// TP halves.
		o: VLLMOptions{MaxModelLen: 8192, MaxNumBatchedTokens: 8192, TensorParallel: 2,
			NonTorch: 3_844_000_000, V0: true}, // 3.58 GiB
		weights: 7.48, kv: 58.97, act: 1.26,
	}} {
		text, err := os.ReadFile("../testdata/vllm/" + c.file)
		require.NoError(t, err)
		require.True(t, strings.Contains(string(text), "# source: https://"), c.file)
		s, ok := model.Lookup(c.model)
		require.True(t, ok, c.model)
		m, err := ModelOf(s)
		require.NoError(t, err)
		j := Job{Model: m, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 1, Runtime: VLLM, VLLM: c.o,
			Device: gpumem.Device{Capacity: c.capacity}}
		r, err := VLLMBuffers(j)
		require.NoError(t, err)
		gib := func(b gpumem.Bytes) float64 { return float64(b) / (1 << 30) }
		w, kv := gib(r.Weights), gib(r.KVMemory)
		t.Logf("%s: weights %.4f GiB (vLLM %.4f, %+.1f%%), KV %.2f GiB (vLLM %.2f, %+.1f%%), activation peak %.2f GiB (vLLM %.2f), tokens %d (refusal's minimum %d)",
			c.file, w, c.weights, 100*(w/c.weights-1), kv, c.kv, 100*(kv/c.kv-1), gib(r.Activations), c.act, r.Tokens, c.minTokens)
		assert.InEpsilon(t, c.weights, w, 0.02, c.file)
		if c.worker {
			// The driver's blocks, as KV memory, within 5% (+2.8%, of
			// which +2.3% is the weights' −1.4%).
			assert.InEpsilon(t, float64(c.minTokens), float64(r.Tokens), 0.05, c.file)
		} else {
			assert.InEpsilon(t, c.kv, kv, 0.05, c.file)
			assert.InEpsilon(t, c.act, gib(r.Activations), 0.05, c.file)
		}
	}
}
