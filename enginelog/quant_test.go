package enginelog

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// TestParseQuantization reads the quantization, the compressed-tensors
// scheme and the cache dtype a vLLM or SGLang log states, from the lines
// vLLM and SGLang print.
func TestParseQuantization(t *testing.T) {
	const weights = "INFO 08-09 14:01:40 model_runner.py:732] Loading model weights took 5.3494 GB\n"
	for _, c := range []struct {
		name, log         string
		quant, scheme, kv string
	}{
		{"v1 config line and kernel",
			"(EngineCore pid=242) INFO 04-22 00:22:32 [v1/engine/core.py:105] Initializing a V1 LLM engine (v0.19.0) with config: model='RedHatAI/Qwen2.5-7B-Instruct-fp8-dynamic', dtype=torch.bfloat16, max_seq_len=8192, quantization=compressed-tensors, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda\n" +
				"(EngineCore pid=242) INFO 04-22 00:22:33 [model_executor/.../linear/__init__.py:261] Selected CutlassFP8ScaledMMLinearKernel for CompressedTensorsW8A8Fp8\n",
			"compressed-tensors", "CompressedTensorsW8A8Fp8", ""},
		{"the model a v0.13 config line names",
			"(EngineCore_DP0 pid=143) INFO 03-18 14:04:03 [core.py:93] Initializing a V1 LLM engine (v0.13.0+faa43dbf.nv26.01) with config: model='neuralmagic/Qwen2.5-14B-Instruct-FP8-dynamic', speculative_config=None, quantization=compressed-tensors, kv_cache_dtype=fp8\n",
			"compressed-tensors", "", "fp8"},
		{"none and an fp8 cache",
			"(APIServer pid=1) INFO 04-22 01:00:00 [entrypoints/utils.py:233] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', 'kv_cache_dtype': 'fp8'}\n" +
				"INFO 04-22 01:00:01 [v1/engine/core.py:105] Initializing a V1 LLM engine (v0.19.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', quantization=None, enforce_eager=False, kv_cache_dtype=fp8, device_config=cuda\n",
			"", "", "fp8"},
		{"v0.5.4 switches to gptq_marlin before its config line",
			"Namespace(model='x', quantization=None, kv_cache_dtype='auto')\n" +
				"INFO 08-09 14:01:35 gptq_marlin.py:98] The model is convertible to gptq_marlin during runtime. Using gptq_marlin kernel.\n" +
				"INFO 08-09 14:01:35 llm_engine.py:174] Initializing an LLM engine (v0.5.4) with config: model='x', quantization=gptq_marlin, enforce_eager=False, kv_cache_dtype=auto, quantization_param_path=None\n",
			"gptq_marlin", "", ""},
		{"the arguments alone",
			"Namespace(model='meta-llama/Meta-Llama-3.1-8B-Instruct', quantization='bitsandbytes', kv_cache_dtype='fp8_e5m2', quantization_param_path=None)\n",
			"bitsandbytes", "", "fp8_e5m2"},
		{"a command line",
			"vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ --quantization awq_marlin --kv-cache-dtype fp8\n",
			"awq_marlin", "", "fp8"},
		{"sglang server args",
			"[2025-01-01 00:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B-FP8', quantization='fp8', quantization_param_path=None, kv_cache_dtype='fp8_e4m3')\n",
			"fp8", "", "fp8_e4m3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := Parse(strings.NewReader(c.log + weights))
			require.NoError(t, err)
			assert.Equal(t, c.quant, l.Params.Quantization)
			assert.Equal(t, c.scheme, l.Params.QuantScheme)
			assert.Equal(t, c.kv, l.Params.KVCacheDType)
			if strings.Contains(c.log, "with config: model='") {
				assert.NotEmpty(t, l.Params.ModelName)
			}
		})
	}
}

// TestQuantOf maps every method a log may state to gpumem's layout, and
// refuses the ones budget does not model with the method in the reason.
func TestQuantOf(t *testing.T) {
	for _, c := range []struct {
		p      Params
		dt     gpumem.DType
		method string
		block  [2]int64
	}{
		{Params{}, gpumem.Invalid, "", [2]int64{}},
		{Params{Quantization: "fp8"}, gpumem.FP8E4M3, "", [2]int64{}},
		{Params{Quantization: "compressed-tensors", QuantScheme: "CompressedTensorsW8A8Fp8"}, gpumem.FP8E4M3, "", [2]int64{1, 1<<31 - 1}},
		{Params{Quantization: "compressed-tensors", QuantScheme: "CompressedTensorsW8A8Int8"}, gpumem.INT8, "", [2]int64{}},
		{Params{Quantization: "gptq"}, gpumem.INT4, "gptq", [2]int64{}},
		{Params{Quantization: "gptq_marlin"}, gpumem.INT4, "gptq", [2]int64{}},
		{Params{Quantization: "awq"}, gpumem.INT4, "awq", [2]int64{}},
		{Params{Quantization: "awq_marlin"}, gpumem.INT4, "awq", [2]int64{}},
		// The method in the log, the scheme in the model's name.
		{Params{Quantization: "compressed-tensors", ModelName: "neuralmagic/Qwen2.5-14B-Instruct-FP8-dynamic"}, gpumem.FP8E4M3, "", [2]int64{1, 1<<31 - 1}},
		{Params{Quantization: "compressed-tensors", ModelName: "redhatai/Llama-3.3-70B-Instruct-quantized.w8a8"}, gpumem.INT8, "", [2]int64{}},
		// A name without the method in the log says nothing.
		{Params{ModelName: "Qwen/Qwen2.5-7B-Instruct-AWQ"}, gpumem.Invalid, "", [2]int64{}},
	} {
		q, ok, why := quantOf(c.p)
		require.True(t, ok, "%+v: %s", c.p, why)
		assert.Equal(t, c.dt, q.ft.Quant, "%+v", c.p)
		assert.Equal(t, c.method, q.ft.Method, "%+v", c.p)
		assert.Equal(t, c.block, q.ft.FP8Block, "%+v", c.p)
	}
	for _, p := range []Params{{Quantization: "bitsandbytes"}, {Quantization: "gguf"}, {Quantization: "aqlm"},
		{Quantization: "compressed-tensors"}, {Quantization: "compressed-tensors", QuantScheme: "CompressedTensorsWNA16"},
		{Quantization: "compressed-tensors", ModelName: "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"}} {
		_, ok, why := quantOf(p)
		assert.False(t, ok, "%+v", p)
		assert.Contains(t, why, p.Quantization, "%+v", p)
		assert.Contains(t, why, "not modelled")
	}
}

// TestCompareQuantizedVLLM compares small corpora of quantized vLLM logs:
// a modelled method gives a weights row on the quantized model (channel
// scales for W8A8 fp8: the 16-bit model's bytes less one byte per
// quantized weight plus one fp32 per row), an fp8 cache doubles the
// tokens a KV memory holds, and a method budget does not model, or one
// the log does not state, skips the weights with the reason.
func TestCompareQuantizedVLLM(t *testing.T) {
	cat := "llama-3.1-8b"
	fp8 := "fp8"
	entry := func(file string, quant *string) string {
		e := `{"file":"` + file + `","engine":"vllm","source":"s","url":"https://github.com/o/r/blob/56dc5b76ca535960998bdf9fd4a3077d98fdf60a/x.log","model":"m","catalog":"` + cat + `"`
		if quant != nil {
			e += `,"quant":"` + *quant + `"`
		}
		return e + "}\n"
	}
	const cfg = "INFO 04-22 00:22:32 [v1/engine/core.py:105] Initializing a V1 LLM engine (v0.19.0) with config: model='m', max_seq_len=8192, quantization=%s, enforce_eager=False, kv_cache_dtype=%s, device_config=cuda\n"
	lines := func(q, kv, extra string) string {
		return strings.Replace(strings.Replace(cfg, "%s", q, 1), "%s", kv, 1) + extra +
			"INFO 04-22 00:22:42 [v1/worker/gpu_model_runner.py:4820] Model loading took 8.49 GiB memory and 8.7 seconds\n" +
			"INFO 04-22 00:23:05 [v1/worker/gpu_worker.py:436] Available KV cache memory: 64.61 GiB\n" +
			"INFO 04-22 00:23:05 [v1/core/kv_cache_utils.py:1319] GPU KV cache size: 529,248 tokens\n"
	}
	fsys := fstest.MapFS{
		"c/index.jsonl": {Data: []byte(entry("vllm-a.log", &fp8) + entry("vllm-b.log", &fp8) + entry("vllm-c.log", &fp8) + entry("vllm-d.log", nil))},
		"c/vllm-a.log":  {Data: []byte(lines("compressed-tensors", "auto", "INFO 04-22 00:22:33 [linear/__init__.py:261] Selected CutlassFP8ScaledMMLinearKernel for CompressedTensorsW8A8Fp8\n"))},
		"c/vllm-b.log":  {Data: []byte(lines("bitsandbytes", "auto", ""))},
		"c/vllm-c.log":  {Data: []byte(lines("None", "auto", ""))},
		"c/vllm-d.log":  {Data: []byte(lines("None", "fp8", ""))},
	}
	c, err := ReadCorpus(fsys, "c")
	require.NoError(t, err)
	res, err := Compare(c)
	require.NoError(t, err)
	rows := map[string]Row{}
	for _, r := range res.Rows {
		rows[r.Key()] = r
	}
	spec, ok := model.Lookup(cat)
	require.True(t, ok)
	m16, err := budget.ModelOf(spec)
	require.NoError(t, err)
	w16 := vllmWeights(t, m16)
	a, ok := rows["vllm-a.log | vLLM weights"]
	require.True(t, ok, "no weights row for the W8A8 fp8 log")
	// Every linear of the 32 blocks: q, k, v, o, gate, up, down.
	var linear, outRows int64
	h, kv, ff := spec.Hidden, spec.KVHeads*spec.HeadDim, spec.Intermediate
	for _, s := range [][2]int64{{h, h}, {kv, h}, {kv, h}, {h, h}, {ff, h}, {ff, h}, {h, ff}} {
		linear += s[0] * s[1]
		outRows += s[0]
	}
	linear *= spec.Layers
	outRows *= spec.Layers
	want := float64(w16) - float64(linear) + 4*float64(outRows)
	assert.InDelta(t, want, a.Estimated, 512*7*float64(spec.Layers)) // each tensor's 512-byte rounding
	_, ok = rows["vllm-b.log | vLLM weights"]
	assert.False(t, ok, "bitsandbytes weights estimated")
	_, ok = rows["vllm-c.log | vLLM weights"]
	assert.False(t, ok, "weights estimated for a quantized model whose log states no method")
	assert.Equal(t, 1, res.Skips["quantized vLLM weights: bitsandbytes (not modelled)"])
	assert.Equal(t, 1, res.Skips["quantized vLLM weights whose method the log does not state"])
	// The same KV memory holds twice the tokens in an fp8 cache.
	b, d := rows["vllm-b.log | vLLM KV tokens per logged KV memory"], rows["vllm-d.log | vLLM KV tokens per logged KV memory"]
	require.Positive(t, b.Estimated)
	assert.InDelta(t, 2*b.Estimated, d.Estimated, 16)
	assert.InDelta(t, float64(w16), rows["vllm-d.log | vLLM weights"].Estimated, 0)
}

func vllmWeights(t *testing.T, m budget.Model) gpumem.Bytes {
	t.Helper()
	r, err := budget.VLLMBuffers(budget.Job{Model: m, Mode: budget.Prefill, Precision: budget.BF16, Batch: 1, SeqLen: 1,
		Runtime: budget.VLLM, VLLM: budget.VLLMOptions{MaxModelLen: 1}, Device: gpumem.Device{Capacity: 1}})
	require.NoError(t, err)
	return r.Weights
}

// TestValidSourceURL accepts a GitHub thread or a repository file at a
// full commit, and nothing else.
func TestValidSourceURL(t *testing.T) {
	for _, u := range []string{
		"https://github.com/vllm-project/vllm/issues/10207",
		"https://github.com/ollama/ollama/pull/1",
		"https://github.com/llm-d-incubation/llm-d-planner/blob/56dc5b76ca535960998bdf9fd4a3077d98fdf60a/accuracy/results/v0.19.0/logs/x.log",
	} {
		assert.True(t, validSourceURL(u), u)
	}
	for _, u := range []string{
		"", "http://github.com/o/r/issues/1", "https://gitlab.com/o/r/issues/1", "https://github.com/o",
		"https://github.com/o/r/blob/main/x.log",
		"https://github.com/o/r/blob/56dc5b76/x.log",
		"https://github.com/o/r/blob/56DC5B76CA535960998BDF9FD4A3077D98FDF60A/x.log",
		"https://github.com/o/r/blob/56dc5b76ca535960998bdf9fd4a3077d98fdf60a/",
	} {
		assert.False(t, validSourceURL(u), u)
	}
}
