package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem/request"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deepLlama is an inline config of 65,536 layers (190 bytes).
const deepLlama = `{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"num_hidden_layers":65536,"vocab_size":1000}`

// wideMoE is an inline MoE config of 4,096 layers × 256 experts.
const wideMoE = `{"model_type":"mixtral","hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"num_key_value_heads":4,"num_hidden_layers":64,"vocab_size":1000,"num_local_experts":4096,"num_experts_per_tok":2}`

// TestServeModelSizeLimit: a model larger than the service reads is a
// 422 naming the config key that makes it so; the largest catalog
// models are served.
func TestServeModelSizeLimit(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	for _, tc := range []struct {
		name, body string
		status     int
		field      string
	}{
		{"deep", `{"config":` + deepLlama + `,"mode":"train"}`, 422, "config.num_hidden_layers"},
		{"deep gpt2 naming", `{"config":{"model_type":"gpt2","n_layer":5000,"n_embd":64,"n_head":4,"vocab_size":100,"n_positions":64},"mode":"infer"}`, 422, "config.n_layer"},
		{"many experts", `{"config":` + wideMoE + `,"mode":"train"}`, 422, "config.num_local_experts"},
		{"deep plan", `{"config":` + deepLlama + `,"mode":"train","gpu":"h100"}`, 422, "config.num_hidden_layers"},
		{"deepseek-v3 from the catalog", `{"model":"deepseek-v3","mode":"infer"}`, 200, ""},
		{"llama-3.1-405b from the catalog", `{"model":"llama-3.1-405b","mode":"train"}`, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/estimate"
			if strings.Contains(tc.name, "plan") {
				path = "/v1/plan"
			}
			w := do(t, h, http.MethodPost, path, "application/json", strings.NewReader(tc.body))
			require.Equal(t, tc.status, w.Code, w.Body.String())
			if tc.status != 200 {
				var r errorReply
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
				assert.Equal(t, tc.field, r.Field, r.Error)
				assert.Contains(t, r.Error, "the service reads models of at most")
			}
		})
	}
}

// TestServeBusy: a request that cannot get a compute slot in time gets
// 503 with Retry-After, and the library never sees it. The slot is
// never freed, so the outcome does not depend on the machine's speed.
func TestServeBusy(t *testing.T) {
	t.Parallel()
	s := newServer(serverOptions{MaxInFlight: 1, QueueWait: time.Millisecond}).(*server)
	s.slots <- struct{}{} // the one slot is taken and stays taken
	for _, path := range []string{"/v1/estimate", "/v1/plan"} {
		w := do(t, s, http.MethodPost, path, "application/json", strings.NewReader(`{"model":"gpt2","train":true,"gpu":"h100"}`))
		require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Contains(t, w.Body.String(), "no compute slot")
	}
	assert.Zero(t, s.computed.Load(), "no work was done")
}

// TestServeDeadline: a request past its deadline gets 503 with
// Retry-After, whichever stage it reached, and no estimate is computed.
func TestServeDeadline(t *testing.T) {
	t.Parallel()
	s := newServer(serverOptions{Timeout: time.Nanosecond}).(*server)
	for _, tc := range []struct{ path, body string }{
		{"/v1/estimate", `{"model":"gpt2","train":true}`},
		{"/v1/plan", `{"model":"gpt2","train":true,"gpu":"h100"}`},
		{"/v1/leak?capacity=1GiB", "Step 1: Memory=1GB\n"},
	} {
		w := do(t, s, http.MethodPost, tc.path, "", strings.NewReader(tc.body))
		require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Contains(t, w.Body.String(), "deadline")
	}
	assert.Zero(t, s.computed.Load(), "no work was done past the deadline")
}

// TestServeClientGone: work for a client that has gone away stops: the
// library never sees the request, and the reply (which no one reads)
// says so without inviting a retry.
func TestServeClientGone(t *testing.T) {
	t.Parallel()
	s := newServer(serverOptions{}).(*server)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, path := range []string{"/v1/estimate", "/v1/plan"} {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(`{"model":"gpt2","train":true,"gpu":"h100"}`))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
		assert.Empty(t, w.Header().Get("Retry-After"))
		assert.Contains(t, w.Body.String(), "cancelled")
	}
	assert.Zero(t, s.computed.Load())
	// The same request from a client that stays is answered.
	w := do(t, s, http.MethodPost, "/v1/estimate", "", strings.NewReader(`{"model":"gpt2","train":true}`))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, int64(1), s.computed.Load())
}

// TestServeErrorFieldsAreRequestFields: every error names a field of the
// request (or a key of its inline config), never a library name, and its
// message speaks of request fields, not of flags or Go fields.
func TestServeErrorFieldsAreRequestFields(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	for _, tc := range []struct {
		path, body, field string
	}{
		{"/v1/estimate", `{"model":"t5-small","mode":"infer","seq":100000000}`, "seq"},
		{"/v1/estimate", `{"model":"gpt2","mode":"train","seq":2000000000,"batch":2000000000}`, "batch"},
		{"/v1/estimate", `{"config":{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"num_key_value_heads":8,"num_hidden_layers":2,"vocab_size":1000},"mode":"train"}`, "config.num_key_value_heads"},
		{"/v1/estimate", `{"config":{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"num_hidden_layers":70000,"vocab_size":1000},"mode":"train"}`, "config.num_hidden_layers"},
		{"/v1/estimate", `{"model":"llama-3-8b","mode":"train","lora_rank":1099511627777}`, "lora_rank"},
		{"/v1/estimate", `{"model":"llama-3-8b","mode":"train","memory":"80"}`, "memory"},
		{"/v1/estimate", `{"model":"llama-3-8b","mode":"train","memory":"0GiB"}`, "memory"},
		{"/v1/estimate", `{"model":"llama-3-8b","mode":"train","memory":0}`, "memory"},
		{"/v1/plan", `{"model":"llama-3-8b","mode":"train","gpu":"h100","target_batch":-1}`, "target_batch"},
		{"/v1/plan", `{"model":"llama-3-8b","mode":"train","gpu":"h100","min_batch":5,"max_batch":2}`, "min_batch"},
		{"/v1/plan", `{"model":"llama-3-8b","mode":"train","gpu":"h100","min_seq":9,"max_seq":2}`, "min_seq"},
		{"/v1/plan", `{"model":"llama-3-8b","mode":"train","gpu":"h100","headroom":"2"}`, "headroom"},
		{"/v1/plan", `{"model":"llama-3-8b","mode":"train","gpu":"h100","allow":"nope"}`, "allow"},
		{"/v1/plan", `{"model":"llama-3-8b","mode":"train","memory":"1.5"}`, "memory"},
		{"/v1/leak?capacity=0", "Step 1: Memory=1GB\n", "capacity"},
		{"/v1/leak?capacity=24", "Step 1: Memory=1GB\n", "capacity"},
	} {
		w := do(t, h, http.MethodPost, tc.path, "", strings.NewReader(tc.body))
		require.GreaterOrEqual(t, w.Code, 400, "%s %s: %s", tc.path, tc.body, w.Body.String())
		require.Less(t, w.Code, 500, "%s %s: %s", tc.path, tc.body, w.Body.String())
		var r errorReply
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
		assert.Equal(t, tc.field, r.Field, "%s %s: %s", tc.path, tc.body, r.Error)
		checkRequestTerms(t, r)
	}
}

// checkRequestTerms fails when an error reply names a library field or a
// flag instead of the request's field.
func checkRequestTerms(t testing.TB, r errorReply) {
	t.Helper()
	unknown := strings.HasPrefix(r.Error, "unknown field ") || strings.HasPrefix(r.Error, "unknown query parameter ")
	if r.Field != "" && !request.IsField(r.Field) && !strings.HasPrefix(r.Field, "config") && !unknown {
		t.Errorf("field %q is not a request field (%s)", r.Field, r.Error)
	}
	for _, w := range []string{"Job.", "Limits.", "Workload", "Spec.", "Finetune", "usage:", "SeqLen", "MaxBatch", "MinBatch", " --"} {
		if strings.Contains(r.Error, w) && !unknown && !strings.Contains(r.Error, "--max-body") && !strings.Contains(r.Error, "--max-inflight") {
			t.Errorf("message speaks of %q: %s", w, r.Error)
		}
	}
}

// TestServeMemoryTargets: a size without a unit, or of zero, is refused
// naming the field; a JSON integer is bytes.
func TestServeMemoryTargets(t *testing.T) {
	t.Parallel()
	h := newServer(serverOptions{})
	w := do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(`{"model":"gpt2","mode":"infer","memory":"80"}`))
	require.Equal(t, 400, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `80GiB`)
	w = do(t, h, http.MethodPost, "/v1/estimate", "", strings.NewReader(`{"model":"gpt2","mode":"infer","memory":85899345920}`))
	require.Equal(t, 200, w.Code, w.Body.String())
	var r struct {
		Device string `json:"device"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
	assert.Contains(t, r.Device, "85899345920B")
}

// The fuzz targets of the other request bodies: never a 5xx, always
// JSON, an error message (naming a request field) on 4xx.
func fuzzBody(f *testing.F, path, contentType string, seeds []string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	h := newServer(serverOptions{})
	f.Fuzz(func(t *testing.T, body []byte) {
		w := do(t, h, http.MethodPost, path, contentType, bytes.NewReader(body))
		if w.Code >= 500 {
			t.Fatalf("POST %s %q = %d %s", path, body, w.Code, w.Body.String())
		}
		require.Equal(t, "application/json", w.Header().Get("Content-Type"))
		if w.Code != http.StatusOK {
			var r errorReply
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r), w.Body.String())
			require.NotEmpty(t, r.Error)
			checkRequestTerms(t, r)
		} else {
			require.True(t, json.Valid(w.Body.Bytes()), w.Body.String())
		}
	})
}

func FuzzServePlan(f *testing.F) {
	fuzzBody(f, "/v1/plan", "application/json", []string{
		`{"model":"gpt2","train":true,"gpu":"h100"}`,
		`{"model":"llama-3-8b","mode":"train","gpu":"rtx4090","allow":"adamw8bit,lora","target_batch":32}`,
		`{"model":"llama-3-8b","mode":"train","gpu":"h100","max_seq":10000000}`,
		`{"model":"llama-3.1-8b","mode":"train","qlora":true,"gpu":"a100-40gb","max_seq":32768,"maximize":"seq"}`,
		`{"model":"gpt2","mode":"infer","gpu":"v100","cuda":"11.2","lazy_loading":false,"maximize":"batch"}`,
		`{"model":"llama-3-8b","mode":"train","memory":"24GiB","min_batch":5,"max_batch":2}`,
		`{"config":` + deepLlama + `,"mode":"train","gpu":"h100"}`,
		`{"config":` + wideMoE + `,"mode":"train","gpu":"h100"}`,
		`{"model":"gpt2","train":true,"memory":"0.` + strings.Repeat("1", 4000) + `GiB"}`,
	})
}

func FuzzServeOOM(f *testing.F) {
	fuzzBody(f, "/v1/oom", "application/json", []string{`{"message":"` + strings.ReplaceAll(oomMessage, `"`, `\"`) + `"}`, `{"message":""}`, `{"message":5}`})
}

func FuzzServeLeak(f *testing.F) {
	fuzzBody(f, "/v1/leak", "application/json", []string{
		`{"log":"Step 1: Memory=1GB\nStep 2: Memory=2GB\nStep 3: Memory=3GB\nStep 4: Memory=4GB\nStep 5: Memory=5GB\nStep 6: Memory=6GB\n","gpu":"h100"}`,
		`{"log":"","capacity":"0"}`, `{"log":"1,2\n","capacity":12345678}`,
		`{"log":"Step 1: Memory=1GB","capacity":"1.` + strings.Repeat("9", 3000) + `GiB"}`,
		`{"log":"At iter 99 the model uses 3200mb of GPU memory, at iter 219 it jumps to 7000mb, at iter 5199 it is 10gb."}`,
		`{"log":"At the beginning, GPU memory usage is only 22%. However, after 900 steps, GPU memory usage is around 68%.","capacity":"24GiB"}`,
		`{"log":"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, \"size\": 5}, {\"action\": \"alloc\", \"addr\": 2, \"size\": -5}]]}"}`,
		`{"log":"[{\"action\": \"alloc\", \"addr\": 1, \"size\": 5}, {\"action\": \"free_completed\", \"addr\": 1, \"size\": 5}]"}`,
		`{"log":"      0/89     5.61G   0.07745    0.0277   0.01785\n      1/89     5.71G   0.07745    0.0277   0.01785\n"}`,
	})
}
