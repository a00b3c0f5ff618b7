package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// tinyLlama is the geometry of the GGUF files these tests write: a llama
// of 2 blocks, hidden 256 (a whole K-quant block of 256 weights per row),
// 4 heads of 64, 2 KV heads, intermediate 512, vocabulary 512.
const (
	tinyLayers, tinyHidden, tinyHeads, tinyKVHeads, tinyFFN, tinyVocab = 2, 256, 4, 2, 512, 512
)

// writeLlamaGGUF writes a GGUF v3 file of tinyLlama as llama.cpp names its
// tensors (src/llama-arch.cpp), with the 2-D weights in dt, the norms in
// F32 and the data zero-filled, and returns its path.
func writeLlamaGGUF(t *testing.T, dt gpumem.DType) string {
	t.Helper()
	id, ok := dt.GGUFType()
	require.True(t, ok, dt)
	type tensor struct {
		name string
		ne   []uint64
		typ  uint32
		dt   gpumem.DType
	}
	mat := func(name string, in, out uint64) tensor { return tensor{name, []uint64{in, out}, id, dt} }
	vec := func(name string, n uint64) tensor { return tensor{name, []uint64{n}, 0, gpumem.FP32} }
	ts := []tensor{mat("token_embd.weight", tinyHidden, tinyVocab), vec("output_norm.weight", tinyHidden), mat("output.weight", tinyHidden, tinyVocab)}
	kvDim := uint64(tinyKVHeads * tinyHidden / tinyHeads)
	for i := range tinyLayers {
		p := "blk." + string(rune('0'+i)) + "."
		ts = append(ts, vec(p+"attn_norm.weight", tinyHidden),
			mat(p+"attn_q.weight", tinyHidden, tinyHidden), mat(p+"attn_k.weight", tinyHidden, kvDim),
			mat(p+"attn_v.weight", tinyHidden, kvDim), mat(p+"attn_output.weight", tinyHidden, tinyHidden),
			vec(p+"ffn_norm.weight", tinyHidden), mat(p+"ffn_gate.weight", tinyHidden, tinyFFN),
			mat(p+"ffn_up.weight", tinyHidden, tinyFFN), mat(p+"ffn_down.weight", tinyFFN, tinyHidden))
	}
	var b []byte
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	kvs := []struct {
		key string
		val any
	}{
		{"general.architecture", "llama"}, {"general.name", "tiny-" + dt.String()},
		{"llama.block_count", uint32(tinyLayers)}, {"llama.embedding_length", uint32(tinyHidden)},
		{"llama.feed_forward_length", uint32(tinyFFN)}, {"llama.attention.head_count", uint32(tinyHeads)},
		{"llama.attention.head_count_kv", uint32(tinyKVHeads)}, {"llama.context_length", uint32(2048)},
	}
	u32(0x46554747) // "GGUF"
	u32(3)
	u64(uint64(len(ts)))
	u64(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.key)
		switch v := kv.val.(type) {
		case string:
			u32(8)
			str(v)
		case uint32:
			u32(4)
			u32(v)
		}
	}
	const align = 32
	var off uint64
	for _, tn := range ts {
		str(tn.name)
		u32(uint32(len(tn.ne)))
		n := uint64(1)
		for _, d := range tn.ne {
			u64(d)
			n *= d
		}
		u32(tn.typ)
		u64(off)
		be, bb := tn.dt.Block()
		size := n / uint64(be) * uint64(bb)
		off += (size + align - 1) / align * align
	}
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	b = append(b, make([]byte, off)...)
	path := filepath.Join(t.TempDir(), "tiny-"+dt.String()+".gguf")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// TestEstimateGGUFEveryType runs `estimate --gguf FILE --infer` on a GGUF
// file of each floating-point and quantized ggml type the reader knows:
// before an inference job stopped asking whether a tensor trains, every
// quantized file exited 2 with "a Q4_K tensor cannot be trained".
// Training the same file is still refused, and inspect counts no
// quantized tensor as trainable.
func TestEstimateGGUFEveryType(t *testing.T) {
	var n int
	for id := uint32(0); id < 64; id++ {
		dt, err := gpumem.DTypeFromGGUF(id)
		if err != nil || !dt.IsFloat() {
			continue
		}
		n++
		t.Run(dt.String(), func(t *testing.T) {
			path := writeLlamaGGUF(t, dt)
			var out, errOut bytes.Buffer
			code := run([]string{"estimate", "--gguf", path, "--infer", "--seq", "128", "--json"}, strings.NewReader(""), &out, &errOut)
			require.Equal(t, exitOK, code, errOut.String())
			var got map[string]any
			require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())

			if dt.IsQuantized() {
				out.Reset()
				errOut.Reset()
				code = run([]string{"estimate", "--gguf", path, "--train", "--seq", "128"}, strings.NewReader(""), &out, &errOut)
				assert.Equal(t, exitBadInput, code)
				assert.Contains(t, errOut.String(), "cannot be trained")

				out.Reset()
				errOut.Reset()
				code = run([]string{"inspect", "--gguf", path, "--json"}, strings.NewReader(""), &out, &errOut)
				require.Equal(t, exitOK, code, errOut.String())
				var r struct {
					Params          int64 `json:"params"`
					TrainableParams int64 `json:"trainable_params"`
				}
				require.NoError(t, json.Unmarshal(out.Bytes(), &r))
				// Only the F32 norms can train: 2 per block and output_norm,
				// (2·2 + 1) · 256 = 1,280 elements.
				assert.Equal(t, int64((2*tinyLayers+1)*tinyHidden), r.TrainableParams)
			}
		})
	}
	// F32, F16, BF16, F64 and the 29 block formats of dtype.go.
	assert.GreaterOrEqual(t, n, 30)
}

// TestEstimateLlamaCpp checks the llama.cpp runtime on the command line:
// chosen by default for a GGUF inference job, its buffers in the JSON,
// and its flags refused where they do not apply.
func TestEstimateLlamaCpp(t *testing.T) {
	path := writeLlamaGGUF(t, gpumem.Q8_0)
	runJSON := func(args ...string) (map[string]any, int, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"estimate", "--gguf", path}, args...), strings.NewReader(""), &out, &errOut)
		var got map[string]any
		if code == exitOK {
			require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
		}
		return got, code, errOut.String()
	}
	got, code, stderr := runJSON("--infer", "--seq", "1000", "--json")
	require.Equal(t, exitOK, code, stderr)
	l, ok := got["llamacpp"].(map[string]any)
	require.True(t, ok, "a GGUF inference job runs on llama.cpp by default: %v", got)
	// Q8_0: 34 bytes per 32 weights. token_embd 512·256 = 131,072
	// weights → 139,264 bytes on the host. On the GPU: output 139,264 and
	// output_norm 1,024; per layer q, o 256·256 → 69,632 each, k, v
	// 128·256 → 34,816 each, gate, up, down 512·256 → 139,264 each, two
	// norms of 1,024: 628,736, × 2 = 1,257,472. In all 1,397,760.
	assert.EqualValues(t, 139264, l["host_weights"])
	assert.EqualValues(t, 1397760, l["gpu_weights"])
	// 1,000 tokens → 1,024 cells × 2 layers × (128 + 128) × 2 bytes.
	assert.EqualValues(t, 1024, l["kv_cells"])
	assert.EqualValues(t, 1024*2*256*2, l["kv"])
	// Compute, n_ubatch 512, as ggml-alloc places it: the inputs (mask
	// 1024·512·4 = 2 MiB, v_idxs 512·128·8 = 0.5 MiB, positions, k_idxs
	// and out_ids 8 KiB), then KQ 1024·512·4·4 = 8 MiB above four
	// 256·512·4 tensors (2 MiB): 13,115,392.
	assert.EqualValues(t, 13_115_392, l["compute"])
	assert.EqualValues(t, 3, l["layers_offloaded"])

	// -ngl 2: the output layer and layer 1; -ctk q8_0; flash attention.
	got, code, stderr = runJSON("--infer", "--ctx-size", "512", "--n-gpu-layers", "2", "--cache-type-k", "q8_0", "--flash-attn", "--json")
	require.Equal(t, exitOK, code, stderr)
	l = got["llamacpp"].(map[string]any)
	assert.EqualValues(t, 139264+1024+628736, l["gpu_weights"])
	// One layer: K 512·128·34/32 = 69,632, V 512·128·2 = 131,072.
	assert.EqualValues(t, 69632+131072, l["kv"])
	assert.EqualValues(t, 69632+131072, l["host_kv"])

	got, code, stderr = runJSON("--infer", "--runtime", "pytorch", "--json")
	require.Equal(t, exitOK, code, stderr)
	assert.NotContains(t, got, "llamacpp")

	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--infer", "--n-gpu-layers", "0"}, "--n-gpu-layers 0"},
		{[]string{"--infer", "--n-gpu-layers", "-3"}, "--n-gpu-layers -3"},
		{[]string{"--infer", "--ctx-size", "-1"}, "--ctx-size -1"},
		{[]string{"--infer", "--cache-type-v", "q4_k"}, "--cache-type-v"},
		{[]string{"--infer", "--runtime", "tensorrt-llm"}, `--runtime "tensorrt-llm"`},
		{[]string{"--train", "--runtime", "llama.cpp"}, "--runtime llama.cpp"},
		{[]string{"--infer", "--runtime", "pytorch", "--flash-attn"}, "--flash-attn"},
		{[]string{"--infer", "--generate", "8", "--kv-dtype", "q8_0"}, "--kv-dtype q8_0"},
	} {
		_, code, stderr := runJSON(c.args...)
		assert.Equal(t, exitBadInput, code, c.args)
		assert.Contains(t, stderr, c.err, c.args)
	}
}

// TestServeLlamaCpp checks the request fields of the llama.cpp runtime.
func TestServeLlamaCpp(t *testing.T) {
	h := newServer(serverOptions{})
	w := do(t, h, "POST", "/v1/estimate", "application/json",
		strings.NewReader(`{"model":"llama-3-8b","mode":"infer","runtime":"llama.cpp","ctx_size":8192,"flash_attn":true}`))
	require.Equal(t, 200, w.Code, w.Body.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	l, ok := got["llamacpp"].(map[string]any)
	require.True(t, ok, got)
	assert.EqualValues(t, 1<<30, l["kv"])
	for body, field := range map[string]string{
		`{"model":"llama-3-8b","mode":"infer","runtime":"llama.cpp","n_gpu_layers":0}`:     "n_gpu_layers",
		`{"model":"llama-3-8b","mode":"infer","runtime":"llama.cpp","cache_type_k":"nf4"}`: "cache_type_k",
		`{"model":"llama-3-8b","mode":"infer","runtime":"llama.cpp","ubatch_size":-1}`:     "ubatch_size",
		`{"model":"llama-3-8b","mode":"infer","runtime":"tensorrt"}`:                       "runtime",
		`{"model":"llama-3-8b","mode":"train","runtime":"llama.cpp"}`:                      "runtime",
		`{"model":"llama-3-8b","mode":"infer","ctx_size":4096}`:                            "ctx_size",
	} {
		w := do(t, h, "POST", "/v1/estimate", "application/json", strings.NewReader(body))
		var m map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
		assert.Equal(t, 400, w.Code, body)
		assert.Equal(t, field, m["field"], "%s: %v", body, m)
	}
}

// TestPlanLlamaCpp: plan refuses the llama.cpp runtime (it searches
// PyTorch's knobs), on the command line and in the service.
func TestPlanLlamaCpp(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"plan", "--model", "llama-3-8b", "--infer", "--runtime", "llama.cpp", "--memory", "24GiB"}, strings.NewReader(""), &out, &errOut)
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, errOut.String(), "--runtime llama.cpp")
	w := do(t, newServer(serverOptions{}), "POST", "/v1/plan", "application/json",
		strings.NewReader(`{"model":"llama-3-8b","mode":"infer","runtime":"llama.cpp","memory":"24GiB"}`))
	var m map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
	assert.Equal(t, 400, w.Code)
	assert.Equal(t, "runtime", m["field"])
}

// TestEstimateLlamaCppSplit: --gpus and --tensor-split spread the layers
// over GPUs (llama.cpp's --split-mode layer), the JSON lists each GPU,
// the estimate is the most loaded one, and POST /v1/estimate takes the
// same as split_mode and tensor_split.
func TestEstimateLlamaCppSplit(t *testing.T) {
	path := writeLlamaGGUF(t, gpumem.Q8_0)
	split := func(ts string) (map[string]any, []any) {
		code, out, errOut := runCLI(t, "", "estimate", "--gguf", path, "--infer", "--ctx-size", "1024", "--tensor-split", ts, "--json")
		require.Equal(t, 0, code, errOut)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		devs := got["llamacpp"].(map[string]any)["devices"].([]any)
		require.Len(t, devs, 2)
		return got, devs
	}
	// 3 slots (2 layers and the output): slot k on GPU 0 while k/3 is
	// below the split point, 0.5 for 1,1 and 0.75 for 3,1.
	_, devs := split("3,1")
	d1 := devs[1].(map[string]any)
	assert.Equal(t, float64(0), d1["layers"])
	assert.Equal(t, false, d1["output"])
	assert.Equal(t, float64(0), d1["compute"])
	got, devs := split("1,1")
	l := got["llamacpp"].(map[string]any)
	d0, d1 := devs[0].(map[string]any), devs[1].(map[string]any)
	assert.Equal(t, float64(2), d0["layers"])
	assert.Equal(t, float64(0), d1["layers"])
	assert.Equal(t, true, d1["output"])
	comps := got["components"].(map[string]any)
	busiest := devs[int(l["busiest"].(float64))].(map[string]any)
	assert.Equal(t, busiest["weights"], comps["weights"])

	code, text, errOut := runCLI(t, "", "estimate", "--gguf", path, "--infer", "--ctx-size", "1024", "--gpus", "2", "--split-mode", "row")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, text, "over 2 GPUs, --split-mode row")
	assert.Contains(t, text, "CUDA1 (")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--split-mode", "tensor", "--gpus", "2"}, "--split-mode"},
		{[]string{"--tensor-split", "1,x"}, "--tensor-split"},
		{[]string{"--tensor-split", "0,0"}, "every share is zero"},
		{[]string{"--tensor-split", "1,1", "--gpus", "3"}, "--gpus 3"},
		{[]string{"--split-mode", "row"}, "one GPU has nothing to split"},
		{[]string{"--main-gpu", "2", "--gpus", "2", "--split-mode", "none"}, "--main-gpu 2"},
		{[]string{"--runtime", "pytorch", "--tensor-split", "1,1"}, "it is a llama.cpp option"},
	} {
		code, _, errOut := runCLI(t, "", append([]string{"estimate", "--gguf", path, "--infer", "--ctx-size", "1024"}, c.args...)...)
		assert.Equal(t, 2, code, "%v", c.args)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}

	h := newServer(serverOptions{})
	rec := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(
		`{"model":"llama-3.1-8b","mode":"infer","runtime":"llama.cpp","ctx_size":8192,"tensor_split":[1,1],"split_mode":"layer"}`))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	code, cli, errOut := runCLI(t, "", "estimate", "--model", "llama-3.1-8b", "--infer", "--runtime", "llama.cpp", "--ctx-size", "8192", "--tensor-split", "1,1", "--split-mode", "layer", "--json")
	require.Equal(t, 0, code, errOut)
	assert.JSONEq(t, cli, rec.Body.String())
	rec = do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(
		`{"model":"llama-3.1-8b","mode":"infer","runtime":"llama.cpp","tensor_split":[1,-1]}`))
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	var e map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
	assert.Equal(t, "tensor_split", e["field"])
}

// TestEstimateLlamaCppNoMmap: --no-mmap makes the host buffer the CPU
// tensors alone; the JSON reports the mapping's span as host_mapped.
func TestEstimateLlamaCppNoMmap(t *testing.T) {
	path := writeLlamaGGUF(t, gpumem.Q8_0)
	for _, args := range [][]string{{"--n-gpu-layers", "1"}, {"--n-gpu-layers", "1", "--no-mmap"}} {
		code, out, errOut := runCLI(t, "", append([]string{"estimate", "--gguf", path, "--infer", "--ctx-size", "512", "--json"}, args...)...)
		require.Equal(t, 0, code, errOut)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		l := got["llamacpp"].(map[string]any)
		assert.GreaterOrEqual(t, l["host_mapped"].(float64), l["host_weights"].(float64), "%v", args)
		if len(args) == 3 {
			assert.Equal(t, l["host_weights"], l["host_mapped"])
		}
	}
	code, _, errOut := runCLI(t, "", "estimate", "--model", "gpt2", "--infer", "--no-mmap")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--no-mmap")
}

// TestEstimateLlamaCppVersion: --llamacpp-version (llamacpp_version)
// selects the -ngl rule of the build: at -ngl 22 on Llama-3.1-8B a build
// of May 2025 keeps the output layer on the CPU, a current one offloads
// it first; a bad date is refused naming the flag or the field.
func TestEstimateLlamaCppVersion(t *testing.T) {
	args := []string{"estimate", "--model", "llama-3.1-8b", "--infer", "--runtime", "llama.cpp", "--ctx-size", "4096", "--n-gpu-layers", "22", "--json"}
	out := map[string]map[string]any{}
	for _, v := range []string{"", "2025-05-22"} {
		a := args
		if v != "" {
			a = append(append([]string{}, args...), "--llamacpp-version", v)
		}
		code, text, errOut := runCLI(t, "", a...)
		require.Equal(t, 0, code, errOut)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(text), &got))
		out[v] = got["llamacpp"].(map[string]any)
	}
	assert.Equal(t, true, out[""]["output_on_gpu"])
	assert.Equal(t, false, out["2025-05-22"]["output_on_gpu"])
	assert.Greater(t, out["2025-05-22"]["host_weights"].(float64), out[""]["host_weights"].(float64))

	code, _, errOut := runCLI(t, "", append(append([]string{}, args...), "--llamacpp-version", "b5466")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--llamacpp-version")

	h := newServer(serverOptions{})
	rec := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(
		`{"model":"llama-3.1-8b","mode":"infer","runtime":"llama.cpp","n_gpu_layers":22,"llamacpp_version":"2025-12"}`))
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	var e map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
	assert.Equal(t, "llamacpp_version", e["field"])
	assert.Contains(t, e["error"], "llamacpp_version")
}

// TestEstimateLlamaCppSWA: gpt-oss-20b's sliding-window layers (the even
// 12 of 24, window 128) keep 768 cells at --ctx-size 8192 (n_swa +
// n_ubatch, padded to 256), the others 8192: 12 × 16 MiB + 12 × 1.5 MiB
// of f16 K and V (512 values a token and layer). --swa-full, or a build
// before the SWA cache, gives every layer 8192 cells; a build of the
// refused windows, or --swa-full without llama.cpp, names its flag or
// request field.
func TestEstimateLlamaCppSWA(t *testing.T) {
	args := []string{"estimate", "--model", "gpt-oss-20b", "--infer", "--runtime", "llama.cpp", "--ctx-size", "8192", "--json"}
	kv := map[string]float64{}
	for _, extra := range [][]string{nil, {"--swa-full"}, {"--llamacpp-version", "2025-05-01"}} {
		code, text, errOut := runCLI(t, "", append(append([]string{}, args...), extra...)...)
		require.Equal(t, 0, code, errOut)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(text), &got))
		l := got["llamacpp"].(map[string]any)
		kv[strings.Join(extra, " ")] = l["kv"].(float64) / (1 << 20)
		switch len(extra) {
		case 0:
			assert.Equal(t, 768.0, l["swa_kv_cells"])
			assert.Equal(t, 12.0, l["swa_layers"])
		case 1: // --swa-full: the SWA cache of the whole context
			assert.Equal(t, 8192.0, l["swa_kv_cells"])
		default: // no SWA cache
			assert.NotContains(t, l, "swa_kv_cells")
		}
	}
	assert.Equal(t, 12*16+12*1.5, kv[""])
	assert.Equal(t, 24*16.0, kv["--swa-full"])
	assert.Equal(t, 24*16.0, kv["--llamacpp-version 2025-05-01"])

	code, out, errOut := runCLI(t, "", "estimate", "--model", "gpt-oss-20b", "--infer", "--runtime", "llama.cpp", "--ctx-size", "8192")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "sliding-window cache: 12 of 24 layers keep 768 cells")

	code, _, errOut = runCLI(t, "", append(append([]string{}, args...), "--llamacpp-version", "2025-05-25")...)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "--llamacpp-version")
	code, _, errOut = runCLI(t, "", "estimate", "--model", "gpt-oss-20b", "--infer", "--swa-full")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--swa-full")

	h := newServer(serverOptions{})
	for _, c := range []struct {
		body, field string
		status      int
	}{
		{`{"model":"gpt-oss-20b","mode":"infer","swa_full":true}`, "swa_full", http.StatusBadRequest},
		// a build whose SWA cache is not modelled: unsupported
		{`{"model":"gpt-oss-20b","mode":"infer","runtime":"llama.cpp","ctx_size":8192,"llamacpp_version":"2025-11-01"}`, "llamacpp_version", http.StatusUnprocessableEntity},
	} {
		rec := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(c.body))
		assert.Equal(t, c.status, rec.Code, c.body)
		var e map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
		assert.Equal(t, c.field, e["field"], "%s: %v", c.body, e)
	}
	rec := do(t, h, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(
		`{"model":"gpt-oss-20b","mode":"infer","runtime":"llama.cpp","ctx_size":8192,"swa_full":true}`))
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}
