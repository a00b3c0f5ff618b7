package main

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/request"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServePage: the page's files are served with their types and a
// policy that forbids loading anything from elsewhere; only GET and HEAD.
func TestServePage(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	for path, ctype := range map[string]string{"/": "text/html; charset=utf-8", "/app.js": "text/javascript; charset=utf-8",
		"/app.css": "text/css; charset=utf-8"} {
		w := do(t, h, http.MethodGet, path, "", nil)
		require.Equal(t, http.StatusOK, w.Code, path)
		assert.Equal(t, ctype, w.Header().Get("Content-Type"), path)
		assert.Equal(t, pagePolicy, w.Header().Get("Content-Security-Policy"), path)
		assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"), path)
		assert.Equal(t, string(webPages[path].body), w.Body.String(), path)
		etag := w.Header().Get("ETag")
		require.NotEmpty(t, etag, path)
		// A second load with the ETag is 304, without a body.
		req, _ := http.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("If-None-Match", etag)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusNotModified, rec.Code, path)
		assert.Empty(t, rec.Body.String(), path)
	}
	w := do(t, h, http.MethodHead, "/", "", nil)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Empty(t, w.Body.String())
	// The page ignores a query string: the job lives in the fragment.
	assert.Equal(t, http.StatusOK, do(t, h, http.MethodGet, "/?x=1", "", nil).Code)
	w = do(t, h, http.MethodPost, "/", "application/json", strings.NewReader("{}"))
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
	assert.Equal(t, "GET, HEAD", w.Header().Get("Allow"))
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Equal(t, http.StatusNotFound, do(t, h, http.MethodGet, "/index.html", "", nil).Code)
}

// TestPageOffline: the page names no other host (the SVG namespace is a
// name, not a request), runs no inline script and sets no inline style,
// which its Content-Security-Policy would block.
func TestPageOffline(t *testing.T) {
	t.Parallel()
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for path, p := range webPages {
		text := stripComments(strings.ReplaceAll(string(p.body), `"http://www.w3.org/2000/svg"`, ""))
		if m := url.FindString(text); m != "" {
			t.Errorf("%s names another host: %q", path, m)
		}
	}
	html := string(webPages["/"].body)
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(html, -1) {
		if !strings.Contains(tag, `src="app.js"`) {
			t.Errorf("an inline script: %s", tag)
		}
	}
	if regexp.MustCompile(`\sstyle=`).MatchString(html) || strings.Contains(string(webPages["/app.js"].body), `setAttribute("style"`) {
		t.Error("an inline style attribute: the policy (style-src 'self') blocks it")
	}
	if !strings.Contains(html, `<html lang="en">`) || !strings.Contains(html, `name="viewport"`) {
		t.Error("the page has no language or no viewport")
	}
}

// stripComments removes // line comments of JavaScript and CSS /* */
// comments, which may cite pages.
func stripComments(s string) string {
	s = regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(s, "")
	return regexp.MustCompile(`(?m)^\s*//.*$`).ReplaceAllString(s, "")
}

// TestPageFields: every request field the page's script sets is a field
// of the service's requests, so that a renamed field fails here rather
// than in the browser.
func TestPageFields(t *testing.T) {
	t.Parallel()
	js := string(webPages["/app.js"].body)
	var fields []string
	for _, re := range []string{`\breq\.([a-z_]+)\s*=`, `\bleakReq\.([a-z_]+)\s*=`, `\{ (?:configs|allow|maximize|max_seq|min_batch|max_batch|message|log)\b`} {
		for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(js, -1) {
			if len(m) > 1 {
				fields = append(fields, m[1])
			}
		}
	}
	for _, m := range regexp.MustCompile(`\b(allow|maximize|max_seq|min_batch|max_batch|configs|series|message|log): `).FindAllStringSubmatch(js, -1) {
		fields = append(fields, m[1])
	}
	slices.Sort(fields)
	fields = slices.Compact(fields)
	require.Greater(t, len(fields), 20, "found %v", fields)
	for _, f := range fields {
		if !request.IsField(f) {
			t.Errorf("the page sets %q, which no request has", f)
		}
	}
}

// TestServeLayoutFields: the layout fields are the layout flags, and an
// error names the field.
func TestServeLayoutFields(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	for body, args := range map[string][]string{
		`{"model":"llama-3.1-8b","mode":"train","gpus":8,"zero":3,"gpu":"h100"}`:                     {"--gpus", "8", "--zero", "3"},
		`{"model":"llama-3.1-8b","mode":"train","gpus":4,"fsdp":"full_shard","offload":"optimizer"}`: {"--gpus", "4", "--fsdp", "full_shard", "--offload", "optimizer"},
		`{"model":"llama-3.1-8b","mode":"train","gpus":8,"tp":4,"sp":true,"pp":2,"nodes":2}`:         {"--gpus", "8", "--tp", "4", "--sp", "--pp", "2", "--nodes", "2"},
	} {
		w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(body))
		require.Equal(t, http.StatusOK, w.Code, "%s: %s", body, w.Body)
		var req map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &req))
		cli := []string{"estimate", "--model", "llama-3.1-8b", "--train", "--json"}
		if g, ok := req["gpu"].(string); ok {
			cli = append(cli, "--gpu", g)
		}
		_, out, errOut := runCLI(t, "", append(cli, args...)...)
		var a, b map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
		require.NoError(t, json.Unmarshal([]byte(out), &b), errOut)
		assert.True(t, reflect.DeepEqual(a, b), "%s: service and CLI differ:\n%s\n%s", body, w.Body, out)
	}
	// One GPU's estimate differs from eight with ZeRO-3: the fields are read.
	one := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(`{"model":"llama-3.1-8b","mode":"train"}`))
	eight := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(`{"model":"llama-3.1-8b","mode":"train","gpus":8,"zero":3}`))
	assert.NotEqual(t, one.Body.String(), eight.Body.String())
	for body, field := range map[string]string{
		`{"model":"gpt2","mode":"train","tp":-1}`:        "tp",
		`{"model":"gpt2","mode":"train","gpus":100000}`:  "gpus",
		`{"model":"gpt2","mode":"train","zero":4}`:       "zero",
		`{"model":"gpt2","mode":"train","offload":"x"}`:  "offload",
		`{"model":"gpt2","mode":"train","nodes":-2}`:     "nodes",
		`{"model":"gpt2","mode":"train","gpus":"eight"}`: "gpus",
	} {
		w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(body))
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), w.Body.String())
		assert.Equal(t, http.StatusBadRequest, w.Code, body)
		assert.Equal(t, field, r.Field, "%s: %s", body, r.Error)
		assert.NotContains(t, r.Error, "--", "%s: the message names flags: %s", body, r.Error)
	}
}

// TestServePlanConfigs: "configs": true adds what plan's --deepspeed,
// --accelerate, --hf-args and --megatron write; without it the reply is
// plan --json's. GPUs without a layout are planned as plan does
// (AllocateFleet chooses the layout).
func TestServePlanConfigs(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	const job = `"model":"llama-3.1-8b","mode":"train","batch":4,"seq":1024,"gpu":"a100-80gb","allow":"full,adamw8bit,lora"`
	w := do(t, h, http.MethodPost, "/v1/plan", "", strings.NewReader(`{`+job+`,"configs":true}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var got struct {
		Fits    bool                  `json:"fits"`
		Configs map[string]planConfig `json:"configs"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	require.True(t, got.Fits)
	dir := t.TempDir()
	ds, acc := filepath.Join(dir, "ds.json"), filepath.Join(dir, "acc.yaml")
	args := []string{"plan", "--model", "llama-3.1-8b", "--train", "--batch", "4", "--seq", "1024", "--gpu", "a100-80gb",
		"--allow", "full,adamw8bit,lora"}
	code, out, errOut := runCLI(t, "", append(args, "--deepspeed", ds, "--accelerate", acc, "--hf-args", "--megatron")...)
	require.Equal(t, 0, code, errOut)
	for name, file := range map[string]string{"deepspeed": ds, "accelerate": acc} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		assert.Equal(t, string(b), got.Configs[name].Text, name)
	}
	for name, prefix := range map[string]string{"training_arguments": "TrainingArguments: ", "megatron": "Megatron-LM: "} {
		c := got.Configs[name]
		assert.NotEmpty(t, c.Text, name)
		assert.Contains(t, out, prefix+c.Text+"\n", name)
		assert.True(t, strings.HasPrefix(c.Flag, "--"), name)
	}
	// Without configs: exactly plan --json.
	w = do(t, h, http.MethodPost, "/v1/plan", "", strings.NewReader(`{`+job+`}`))
	_, out, _ = runCLI(t, "", append(args, "--json")...)
	var a, b map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	assert.True(t, reflect.DeepEqual(a, b), "service and CLI differ")
	assert.NotContains(t, a, "configs")
	// Four GPUs, no layout given: the layout is chosen as plan chooses it.
	w = do(t, h, http.MethodPost, "/v1/plan", "", strings.NewReader(`{"model":"llama-3.1-8b","mode":"train","gpu":"a100-40gb","gpus":4}`))
	_, out, _ = runCLI(t, "", "plan", "--model", "llama-3.1-8b", "--train", "--gpu", "a100-40gb", "--gpus", "4", "--json")
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	assert.True(t, reflect.DeepEqual(a, b), "four GPUs: service and CLI differ:\n%s\n%s", w.Body, out)
}

// TestServeLeakSeries: "series": true adds the points fitted and the
// trend to the OOM forecast; the reply is otherwise gpumem leak --json's.
func TestServeLeakSeries(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	var log strings.Builder
	for i := range 12 {
		log.WriteString("step " + strconv.Itoa(10*(i+1)) + " | memory allocated " + strconv.Itoa(10+i) + ".0 GiB\n")
	}
	body, _ := json.Marshal(map[string]any{"log": log.String(), "capacity": "24GiB", "series": true})
	w := do(t, h, http.MethodPost, "/v1/leak", "application/json", strings.NewReader(string(body)))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var r struct {
		Samples int     `json:"samples"`
		OOMStep float64 `json:"oom_step"`
		Series  []struct {
			X     float64 `json:"x"`
			Bytes int64   `json:"bytes"`
		} `json:"series"`
		Trend []struct {
			X     float64 `json:"x"`
			Bytes int64   `json:"bytes"`
		} `json:"trend"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
	require.Equal(t, 12, r.Samples)
	require.Len(t, r.Series, 12)
	assert.Equal(t, 10.0, r.Series[0].X)
	assert.Equal(t, int64(10)<<30, r.Series[0].Bytes)
	assert.Equal(t, int64(21)<<30, r.Series[11].Bytes)
	require.Len(t, r.Trend, 2)
	// 1 GiB per 10 steps from 10 GiB at step 10: 24 GiB at step 150.
	assert.Equal(t, 150.0, r.OOMStep)
	assert.Equal(t, r.OOMStep, r.Trend[1].X)
	assert.Equal(t, int64(24)<<30, r.Trend[1].Bytes)
	assert.Equal(t, int64(10)<<30, r.Trend[0].Bytes)
	// Without series: gpumem leak --json, key for key.
	body, _ = json.Marshal(map[string]any{"log": log.String(), "capacity": "24GiB"})
	w = do(t, h, http.MethodPost, "/v1/leak", "application/json", strings.NewReader(string(body)))
	_, out, _ := runCLI(t, log.String(), "leak", "--capacity", "24GiB", "--json", "-")
	var a, b map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
	require.NoError(t, json.Unmarshal([]byte(out), &b), out)
	assert.True(t, reflect.DeepEqual(a, b), "service and CLI differ")
	assert.NotContains(t, a, "series")
}

// tinySafetensors writes the header of a small checkpoint of family in
// bf16 (the tensors of its config) and returns it with the file's size.
func tinySafetensors(t testing.TB, family string) ([]byte, int64) {
	t.Helper()
	spec, err := model.FromHFConfig(strings.NewReader(`{"model_type": "` + family + `", "hidden_size": 64, "intermediate_size": 160,
		"num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "torch_dtype": "bfloat16"}`))
	require.NoError(t, err)
	h := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, ts := range spec.Tensors() {
		n := int64(2)
		for _, d := range ts.Shape {
			n *= d
		}
		h[ts.Name] = map[string]any{"dtype": "BF16", "shape": ts.Shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	js, err := json.Marshal(h)
	require.NoError(t, err)
	head := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	head = append(head, js...)
	return head, int64(len(head)) + off
}

// TestServeSafetensors: a checkpoint's header and its file's size, as
// the page sends them, give what --safetensors gives for the file; the
// data is never read.
func TestServeSafetensors(t *testing.T) {
	t.Parallel()
	head, size := tinySafetensors(t, "qwen3") // qwen3's q_norm gives the head size
	file := filepath.Join(t.TempDir(), "model.safetensors")
	require.NoError(t, os.WriteFile(file, append(slices.Clone(head), make([]byte, size-int64(len(head)))...), 0o644))
	// Llama's tensor names do not give its heads: --safetensors fails on
	// them, and the service says so of the file.
	llama, llamaSize := tinySafetensors(t, "llama")
	h := newServer(serverOptions{})
	body, _ := json.Marshal(map[string]any{"safetensors": head, "safetensors_size": size, "mode": "train", "batch": 2, "seq": 64, "gpu": "rtx 4090"})
	w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(string(body)))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	_, out, errOut := runCLI(t, "", "estimate", "--safetensors", file, "--train", "--batch", "2", "--seq", "64", "--gpu", "rtx 4090", "--json")
	var a, b map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
	require.NoError(t, json.Unmarshal([]byte(out), &b), errOut)
	assert.True(t, reflect.DeepEqual(a, b), "service and CLI differ:\n%s\n%s", w.Body, out)
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"safetensors": head, "safetensors_size": 10, "mode": "train"}, "safetensors_size"},
		{map[string]any{"safetensors": head[:len(head)-5], "safetensors_size": size, "mode": "train"}, "safetensors"},
		{map[string]any{"safetensors": head, "safetensors_size": size, "model": "gpt2", "mode": "train"}, "safetensors"},
		{map[string]any{"safetensors": []byte("short"), "safetensors_size": size, "mode": "train"}, "safetensors"},
		{map[string]any{"safetensors": llama, "safetensors_size": llamaSize, "mode": "train"}, "safetensors"},
	} {
		body, _ := json.Marshal(c.body)
		w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(string(body)))
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), w.Body.String())
		assert.Equal(t, http.StatusBadRequest, w.Code, r.Error)
		assert.Equal(t, c.field, r.Field, r.Error)
	}
}

// ggufHeaderEnd returns where a GGUF v2/v3 file's header (metadata and
// tensor infos) ends, as the page finds it before it sends the header.
func ggufHeaderEnd(t *testing.T, b []byte) int {
	t.Helper()
	p := 0
	u32 := func() uint32 { v := binary.LittleEndian.Uint32(b[p:]); p += 4; return v }
	u64 := func() uint64 { v := binary.LittleEndian.Uint64(b[p:]); p += 8; return v }
	str := func() { p += int(u64()) }
	size := map[uint32]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
	var value func(typ uint32)
	value = func(typ uint32) {
		switch typ {
		case 8:
			str()
		case 9:
			et, n := u32(), u64()
			for range n {
				value(et)
			}
		default:
			p += size[typ]
		}
	}
	require.Equal(t, uint32(0x46554747), u32())
	u32() // version
	nt, nkv := u64(), u64()
	for range nkv {
		str()
		value(u32())
	}
	for range nt {
		str()
		p += 8 * int(u32())
		u32()
		u64()
	}
	return p
}

// TestServeGGUF: a GGUF file's header and size, as the page sends them,
// give what --gguf gives for the file (an inference job on llama.cpp by
// default, as --gguf's).
func TestServeGGUF(t *testing.T) {
	t.Parallel()
	path := writeLlamaGGUF(t, gpumem.Q4_K)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	head := b[:ggufHeaderEnd(t, b)]
	h := newServer(serverOptions{})
	for _, mode := range []string{"infer", "train"} {
		args := []string{"estimate", "--gguf", path, "--" + mode, "--seq", "128", "--gpu", "rtx 4090", "--json"}
		req := map[string]any{"gguf": head, "gguf_size": len(b), "mode": mode, "seq": 128, "gpu": "rtx 4090"}
		if mode == "train" {
			req["lora_rank"] = 8 // quantized weights train adapters only
			args = append(args, "--lora-rank", "8")
		}
		body, _ := json.Marshal(req)
		w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(string(body)))
		_, out, errOut := runCLI(t, "", args...)
		if mode == "infer" {
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		}
		if w.Code != http.StatusOK {
			// The CLI refuses the same job: the error names the same flag.
			assert.NotEmpty(t, errOut, "%s: service %s, CLI succeeded", mode, w.Body)
			continue
		}
		var a, c map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
		require.NoError(t, json.Unmarshal([]byte(out), &c), errOut)
		assert.True(t, reflect.DeepEqual(a, c), "%s: service and CLI differ:\n%s\n%s", mode, w.Body, out)
		if mode == "infer" {
			assert.Contains(t, a, "llamacpp", "a GGUF inference job runs on llama.cpp by default")
		}
	}
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"gguf": head, "gguf_size": 10, "mode": "infer"}, "gguf_size"},
		{map[string]any{"gguf": head[:len(head)-3], "gguf_size": len(b), "mode": "infer"}, "gguf"},
		{map[string]any{"gguf": head, "gguf_size": len(b), "config": map[string]any{}, "mode": "infer"}, "gguf"},
		{map[string]any{"gguf": head, "gguf_size": len(b), "safetensors": []byte("x"), "mode": "infer"}, "gguf"},
	} {
		body, _ := json.Marshal(c.body)
		w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(string(body)))
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), w.Body.String())
		assert.Equal(t, http.StatusBadRequest, w.Code, r.Error)
		assert.Equal(t, c.field, r.Field, r.Error)
	}
}

// FuzzServeCheckpoint sends checkpoint headers of any bytes and size as
// the page would: a reply is 200, 400 or 422, never a 5xx, and a read
// past the header sent is an error, not a panic.
func FuzzServeCheckpoint(f *testing.F) {
	head, size := tinySafetensors(f, "qwen3")
	f.Add(false, head, size)
	f.Add(false, head[:20], size)
	f.Add(true, []byte("GGUF\x03\x00\x00\x00"), int64(100))
	f.Add(true, binary.LittleEndian.AppendUint64([]byte("GGUF\x03\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"), 1), int64(1<<20))
	h := newServer(serverOptions{})
	f.Fuzz(func(t *testing.T, gguf bool, header []byte, size int64) {
		field := "safetensors"
		if gguf {
			field = "gguf"
		}
		body, _ := json.Marshal(map[string]any{field: header, field + "_size": size, "mode": "infer"})
		w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(string(body)))
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusUnprocessableEntity:
		default:
			t.Fatalf("%s of %d bytes, size %d: %d %s", field, len(header), size, w.Code, w.Body)
		}
	})
}

// BenchmarkServePage is GET / from memory.
func BenchmarkServePage(b *testing.B) {
	h := newServer(serverOptions{})
	b.ReportAllocs()
	for b.Loop() {
		if w := do(b, h, http.MethodGet, "/", "", nil); w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

// BenchmarkServeLeakSeries is POST /v1/leak of a 1,000-line log with and
// without the series the page draws.
func BenchmarkServeLeakSeries(b *testing.B) {
	var log strings.Builder
	for i := range 1000 {
		log.WriteString("step " + strconv.Itoa(i+1) + " | memory allocated " + strconv.Itoa(10000+3*i) + " MiB\n")
	}
	h := newServer(serverOptions{})
	for _, series := range []bool{false, true} {
		body, _ := json.Marshal(map[string]any{"log": log.String(), "capacity": "24GiB", "series": series})
		b.Run("series="+strconv.FormatBool(series), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if w := do(b, h, http.MethodPost, "/v1/leak", "application/json", strings.NewReader(string(body))); w.Code != http.StatusOK {
					b.Fatal(w.Code, w.Body)
				}
			}
		})
	}
}
