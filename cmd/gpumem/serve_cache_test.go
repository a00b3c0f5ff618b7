package main

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gpumem/gpumem/request"
	"github.com/stretchr/testify/require"
)

// TestServeModelCache checks the cache of prepared models: a second
// identical request, or a request differing only in what does not
// change the model (batch, sequence, GPU, plan's limits), builds no
// model; a request that changes the model (another model, another inline
// config's bytes, LoRA rank or targets, QLoRA, quantization, group size,
// head, labels, a quantized job's training precision, frozen) builds its
// own. Every reply is byte-identical to a fresh server's, whose cache is
// empty.
func TestServeModelCache(t *testing.T) {
	s := newServer(serverOptions{}).(*server)
	built := func() int64 { return s.cache.Built() }
	inline := `{"config":` + llama7BConfig + `,"infer":true,"batch":8,"seq":512}`
	steps := []struct {
		path, body string
		builds     bool // a model is built: no earlier request shares it
	}{
		{"/v1/estimate", `{"model":"llama-3-8b","mode":"train","batch":4,"seq":4096,"gpu":"h100"}`, true},
		{"/v1/estimate", `{"model":"llama-3-8b","mode":"train","batch":4,"seq":4096,"gpu":"h100"}`, false},
		{"/v1/estimate", `{"model":"llama-3-8b","mode":"train","batch":1,"seq":512,"memory":"40GiB","precision":"bf16"}`, false},
		{"/v1/estimate", `{"model":"llama-3-8b","mode":"infer","generate":10}`, false},
		{"/v1/plan", `{"model":"llama-3-8b","mode":"train","gpu":"h100","max_batch":8}`, false},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train"}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train","lora_rank":16}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train","lora_rank":8}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train","lora_rank":8,"lora_targets":["q_proj","v_proj"]}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train","lora_rank":8,"lora_targets":["q_proj","k_proj"]}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train","lora_rank":8,"lora_targets":["q_proj","v_proj"],"batch":2}`, false},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train","qlora":true,"lora_rank":8}`, true},
		// The QLoRA model keeps its unquantized weights in the
		// training precision's dtype (Finetune.Unquantized).
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train","qlora":true,"lora_rank":8,"precision":"fp16-mixed"}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"infer","quant":"gptq"}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"infer","quant":"gptq","group_size":64}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"infer","quant":"awq","group_size":64}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"infer","quant":"int8"}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"train","quant":"int8","frozen":true}`, true},
		{"/v1/estimate", `{"model":"llama-2-7b","mode":"infer","quant":"int8","batch":3}`, false},
		{"/v1/estimate", `{"model":"bert-base","train":true,"batch":32,"seq":512}`, true},
		{"/v1/estimate", `{"model":"bert-base","train":true,"batch":32,"seq":512,"head":"seq-cls"}`, true},
		{"/v1/estimate", `{"model":"bert-base","train":true,"batch":32,"seq":512,"head":"seq-cls","labels":5}`, true},
		{"/v1/estimate", `{"model":"bert-base","train":true,"batch":8,"seq":128,"head":"seq-cls","labels":5}`, false},
		{"/v1/estimate", inline, true},
		{"/v1/estimate", inline, false},
		{"/v1/estimate", `{"config":` + llama7BConfig + `,"infer":true,"batch":1,"seq":64}`, false},
		// Other bytes, even for the same config: the key is the exact
		// bytes.
		{"/v1/estimate", `{"config":` + strings.Replace(llama7BConfig, "{", "{ ", 1) + `,"infer":true,"batch":8,"seq":512}`, true},
	}
	for k, st := range steps {
		before := built()
		w := do(t, s, http.MethodPost, st.path, "application/json", strings.NewReader(st.body))
		require.Equal(t, http.StatusOK, w.Code, "%s %s: %s", st.path, st.body, w.Body)
		if got := built() - before; got != map[bool]int64{true: 1, false: 0}[st.builds] {
			t.Errorf("step %d, %s %s: built %d models, want builds = %v", k, st.path, st.body, got, st.builds)
		}
		fresh := do(t, newServer(serverOptions{}), http.MethodPost, st.path, "application/json", strings.NewReader(st.body))
		if w.Body.String() != fresh.Body.String() {
			t.Errorf("step %d, %s %s: reply differs from a fresh server's:\n got %s\nwant %s", k, st.path, st.body, w.Body, fresh.Body)
		}
	}
	if n := s.cache.Models(); int64(n) != built() {
		t.Errorf("cache holds %d models after %d were built, all distinct", n, built())
	}
}

// TestServeModelCacheBound checks that the cache never holds more than
// its bound and drops the least recently used model first.
func TestServeModelCacheBound(t *testing.T) {
	s := newServer(serverOptions{}).(*server)
	require.Equal(t, request.DefaultCacheSize, s.cache.Limit())
	s.cache.SetLimit(3)
	post := func(name string) {
		t.Helper()
		w := do(t, s, http.MethodPost, "/v1/estimate", "application/json",
			strings.NewReader(`{"model":"`+name+`","mode":"infer","seq":16}`))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		if n := s.cache.Models(); n > 3 {
			t.Fatalf("after %s the cache holds %d models, above its bound of 3", name, n)
		}
	}
	for _, name := range []string{"gpt2", "gpt2-medium", "opt-350m", "pythia-1b", "gpt2-medium"} {
		post(name)
	}
	// Kept, most recent first: gpt2-medium, pythia-1b, opt-350m; gpt2 was
	// the least recently used when pythia-1b came.
	require.EqualValues(t, 4, s.cache.Built())
	require.Equal(t, 3, s.cache.Models())
	post("opt-350m")
	require.EqualValues(t, 4, s.cache.Built(), "opt-350m was dropped; want kept")
	post("gpt2")
	require.EqualValues(t, 5, s.cache.Built(), "gpt2 was kept; want dropped")
	post("pythia-1b") // dropped by gpt2: the least recently used then
	require.EqualValues(t, 6, s.cache.Built(), "pythia-1b was kept; want dropped")
}

// TestServeModelCacheConcurrent sends the same few requests from several
// goroutines (run with -race): every reply equals the first one for its
// body, and no more models are built than the requests that could miss
// at once.
func TestServeModelCacheConcurrent(t *testing.T) {
	s := newServer(serverOptions{MaxInFlight: 4}).(*server)
	s.cache.SetLimit(2) // fewer than the bodies: entries come and go
	bodies := estimateSeeds[:4]
	want := make([]string, len(bodies))
	for i, b := range bodies {
		want[i] = do(t, newServer(serverOptions{}), http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(b)).Body.String()
	}
	const workers, rounds = 4, 12
	var wg sync.WaitGroup
	errs := make(chan string, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				i := (w + r) % len(bodies)
				got := do(t, s, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(bodies[i])).Body.String()
				if got != want[i] {
					errs <- bodies[i] + ": " + got
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("reply differs from a fresh server's: %s", e)
	}
	if n := s.cache.Models(); n > 2 {
		t.Errorf("cache holds %d models, above its bound of 2", n)
	}
}

// TestServeSpecCache checks the cache of catalog models: a name looked
// up and checked once is not looked up again, whatever else the request
// changes; an unknown name is looked up every time and kept nowhere;
// the cache never holds more than its bound.
func TestServeSpecCache(t *testing.T) {
	s := newServer(serverOptions{}).(*server)
	require.Equal(t, request.DefaultCacheSize, s.cache.Limit())
	post := func(body string, code int) {
		t.Helper()
		w := do(t, s, http.MethodPost, "/v1/estimate", "application/json", strings.NewReader(body))
		require.Equal(t, code, w.Code, "%s: %s", body, w.Body)
	}
	post(`{"model":"gpt2","mode":"infer"}`, http.StatusOK)
	post(`{"model":"gpt2","mode":"train","lora_rank":4}`, http.StatusOK)
	post(`{"model":"gpt2","mode":"infer","head":"seq-cls","labels":3}`, http.StatusOK)
	require.EqualValues(t, 1, s.cache.Looked(), "gpt2 looked up again")
	post(`{"model":"no-such-model","mode":"infer"}`, http.StatusBadRequest)
	post(`{"model":"no-such-model","mode":"infer"}`, http.StatusBadRequest)
	require.EqualValues(t, 3, s.cache.Looked(), "an unknown name is looked up each time")
	require.Equal(t, 1, s.cache.Specs(), "an unknown name is kept")

	s.cache.SetLimit(2)
	for _, name := range []string{"gpt2-medium", "opt-350m", "gpt2"} {
		post(`{"model":"`+name+`","mode":"infer"}`, http.StatusOK)
		if n := s.cache.Specs(); n > 2 {
			t.Fatalf("after %s the cache holds %d models, above its bound of 2", name, n)
		}
	}
	require.EqualValues(t, 6, s.cache.Looked(), "gpt2 was kept past two newer names")
}
