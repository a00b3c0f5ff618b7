package enginelog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestParseCorpus reads every log of testdata/enginelogs: each parses
// without error and yields at least one figure, every size is positive
// or a stated zero, and the kinds the file's name promises are there.
func TestParseCorpus(t *testing.T) {
	files, err := filepath.Glob("../testdata/enginelogs/*.log")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 100)
	kinds := map[Kind]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		l, err := Parse(strings.NewReader(string(b)))
		require.NoError(t, err, f)
		require.NotEmpty(t, l.Figures, f)
		for _, fig := range l.Figures {
			kinds[fig.Kind]++
			assert.GreaterOrEqual(t, int64(fig.Bytes), int64(0), f)
			assert.Positive(t, fig.Line, f)
		}
		base := filepath.Base(f)
		switch {
		case strings.HasPrefix(base, "vllm-"):
			assert.Equal(t, VLLM, l.Engine, f)
		case strings.HasPrefix(base, "sglang-"):
			assert.Equal(t, SGLang, l.Engine, f)
		case strings.HasPrefix(base, "llamacpp-"):
			assert.Equal(t, LlamaCpp, l.Engine, f)
		case strings.HasPrefix(base, "ollama-"):
			assert.Contains(t, []Engine{Ollama, LlamaCpp}, l.Engine, f) // Ollama's runner prints llama.cpp's lines
		}
	}
	for _, k := range []Kind{ModelBuffer, KVBuffer, ComputeBuffer, KVSelf, VRAMUsed, AllocFailed, OllamaKV,
		Weights, KVCacheMemory, GPUBlocks, KVTokens, Concurrency, NonTorch, ActivationPeak, TotalGPUMemory,
		CUDAGraph, SGLangTokens, SGLangK, SGLangMaxTokens} {
		assert.Positive(t, kinds[k], "no %s figure in the corpus", k)
	}
	t.Logf("%d logs, figures by kind: %v", len(files), kinds)
}

// TestParseLines checks the figures of one line of each format, to the
// byte.
func TestParseLines(t *testing.T) {
	mib := func(x float64) gpumem.Bytes { return gpumem.Bytes(x * (1 << 20)) }
	for _, c := range []struct {
		line string
		want Figure
	}{
		{"llm_load_tensors:      CUDA0 buffer size =  3820.94 MiB", Figure{Kind: ModelBuffer, Device: "CUDA0", Bytes: mustBytes(t, "3820.94 MiB")}},
		{"load_tensors:   CPU_Mapped model buffer size =  6940.48 MiB", Figure{Kind: ModelBuffer, Device: "CPU_Mapped", Bytes: mustBytes(t, "6940.48 MiB")}},
		{"llama_kv_cache_init:      CUDA1 KV buffer size =  3584.00 MiB", Figure{Kind: KVBuffer, Device: "CUDA1", Bytes: mib(3584)}},
		{"llama_context:  CUDA_Host compute buffer size =    48.02 MiB", Figure{Kind: ComputeBuffer, Device: "CUDA_Host", Bytes: mustBytes(t, "48.02 MiB")}},
		{"llama_new_context_with_model: kv self size  = 1024.00 MB", Figure{Kind: KVSelf, Bytes: mib(1024)}},
		{"llama_kv_cache_init: VRAM kv self = 44.00 MB", Figure{Kind: KVBuffer, Device: "CUDA", Bytes: mib(44)}},
		{"ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc failed: out of memory", Figure{Kind: AllocFailed, Device: "CUDA4", Bytes: mib(144)}},
		{"INFO 01-30 03:18:12 gpu_model_runner.py:848] Loading model weights took 67.7229 GB", Figure{Kind: Weights, Bytes: mustBytes(t, "67.7229 GiB")}},
		{"INFO [gpu_worker.py:298] Available KV cache memory: 6.51 GiB", Figure{Kind: KVCacheMemory, Bytes: mustBytes(t, "6.51 GiB")}},
		{"INFO [kv_cache_utils.py:864] GPU KV cache size: 42,656 tokens", Figure{Kind: KVTokens, Count: 42656}},
		{"INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381", Figure{Kind: GPUBlocks, Count: 1381}},
		{"[TP0] KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB", Figure{Kind: SGLangTokens, Count: 367404}},
		{"[2025-10-16 09:06:10 TP5] Load weight begin. avail mem=137.29 GB", Figure{Kind: SGLangFreeBeforeWeights, Bytes: mustBytes(t, "137.29 GiB")}},
		{"[2026-05-02 23:01:20] Load weight end. type=Qwen3MoeForCausalLM, dtype=torch.bfloat16, avail mem=17.29 GB, mem usage=2.91 GB.", Figure{Kind: SGLangFreeAfterWeights, Bytes: mustBytes(t, "17.29 GiB")}},
	} {
		l, err := Parse(strings.NewReader(c.line))
		require.NoError(t, err, c.line)
		got := l.Figures[0]
		got.Line = 0
		assert.Equal(t, c.want, got, c.line)
	}
	l, err := Parse(strings.NewReader(`time=x level=INFO source=memory.go:309 msg="offload to cuda" layers.requested=-1 layers.model=33 layers.offload=12 memory.available="[2.2 GiB]" memory.required.kv="256.0 MiB" memory.graph.full="164.0 MiB"
time=x msg="starting llama server" cmd="ollama_llama_server --model m --ctx-size 2048 --batch-size 512 --n-gpu-layers 12 --parallel 1 --port 1"`))
	require.NoError(t, err)
	assert.Equal(t, Ollama, l.Engine)
	kv, ok := l.First(OllamaKV)
	require.True(t, ok)
	assert.Equal(t, mib(256), kv.Bytes)
	assert.Equal(t, 2048, l.Params.NCtx)
	assert.Equal(t, 1, l.Params.NSeqMax)
	assert.Equal(t, 12, l.Params.NGPULayers)
	require.NotNil(t, l.Params.FlashAttn)
	assert.False(t, *l.Params.FlashAttn)

	// The layers' placement, a zero count included.
	l, err = Parse(strings.NewReader("load_tensors: offloading 0 repeating layers to GPU\nload_tensors: offloaded 0/35 layers to GPU\nllama_kv_cache_init: CUDA0 KV buffer size = 1.00 MiB"))
	require.NoError(t, err)
	assert.True(t, l.Params.HasRepeating)
	assert.Zero(t, l.Params.LayersRepeating)
	assert.Equal(t, 35, l.Params.LayersTotal)
	l, err = Parse(strings.NewReader(`time=x level=INFO source=ggml.go:351 msg="offloading 40 repeating layers to GPU"` + "\nllama_kv_cache_init: CUDA0 KV buffer size = 1.00 MiB"))
	require.NoError(t, err)
	assert.Equal(t, 40, l.Params.LayersRepeating)
}

func mustBytes(t *testing.T, s string) gpumem.Bytes {
	t.Helper()
	b, err := gpumem.ParseBytes(s)
	require.NoError(t, err)
	return b
}

// TestParseGarbage: input without a figure, and a line longer than
// MaxLine, are errors that say what was expected.
func TestParseGarbage(t *testing.T) {
	for _, in := range []string{"", "hello\nworld", "llm_load_tensors: offloaded 33/33 layers to GPU", "\x00\xff\xfe"} {
		_, err := Parse(strings.NewReader(in))
		require.Error(t, err, "%q", in)
		assert.True(t, errors.Is(err, ErrNoFigures), "%q: %v", in, err)
		assert.Contains(t, err.Error(), "buffer size")
	}
	_, err := Parse(strings.NewReader(strings.Repeat("x", MaxLine+1)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "longer than")
}

// BenchmarkParseCorpus parses the 100 logs of testdata/enginelogs.
func BenchmarkParseCorpus(b *testing.B) {
	files, err := filepath.Glob("../testdata/enginelogs/*.log")
	if err != nil || len(files) == 0 {
		b.Fatal(err)
	}
	var texts []string
	size := 0
	for _, f := range files {
		t, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		texts = append(texts, string(t))
		size += len(t)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		for _, t := range texts {
			if _, err := Parse(strings.NewReader(t)); err != nil {
				b.Fatal(err)
			}
		}
	}
}
