package main

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/leak"
	"github.com/gpumem/gpumem/model"
)

// defaultMaxBody is the largest request body the service reads, unless
// --max-body says otherwise.
const defaultMaxBody = 1 << 20

// Server timeouts. A request is a small JSON document or a log of at most
// --max-body bytes, and the library answers in microseconds to
// milliseconds, so these are generous for clients and short for
// connections that stall.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 120 * time.Second
	shutdownTimeout   = 10 * time.Second
	maxHeaderBytes    = 64 << 10

	// requestTimeout is every request's deadline, carried by its
	// context: well inside writeTimeout, so that a request the service
	// cannot finish gets a 503 reply rather than a closed connection.
	requestTimeout = 20 * time.Second
	// queueTimeout is how long a request waits for a compute slot
	// before it gets 503 with Retry-After.
	queueTimeout = 5 * time.Second
	// retryAfter is the Retry-After of a 503, in seconds: a slot frees
	// within milliseconds once the requests ahead are answered.
	retryAfter = 1
)

// Model size limits of the service: a model read from a request (a
// catalog name or an inline config) may have at most maxServeLayers
// blocks in any stack and maxServeTensors tensors. The deepest published
// models have a few hundred blocks (DeepNet, 1,000 over encoder and
// decoder); DeepSeek-V3 has about 92,000 checkpoint tensors. Preparing a
// model costs its distinct layer kinds, not its size (model.Spec.Runs),
// so these bound what a request may claim, not the work it causes.
const (
	maxServeLayers  = 4096
	maxServeTensors = 1 << 18
)

func runServe(args []string, _ io.Reader, out, errOut io.Writer) error {
	fs := newFlags("serve", out)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on (host:port); the service has no authentication, so keep it on loopback or behind a proxy")
	maxBody := fs.String("max-body", "1MiB", "largest request body accepted (e.g. 1MiB, 16MiB); larger bodies get 413")
	inflight := fs.Int("max-inflight", 0, "requests computed at once; others wait for a slot (default GOMAXPROCS)")
	asJSON := fs.Bool("json", false, "print {\"addr\": HOST:PORT, \"url\": ...} on standard output once listening (for --addr HOST:0)")
	if err := parse(fs, args); err != nil {
		return err
	}
	limit, err := gpumem.ParseBytes(*maxBody)
	if err != nil {
		return fmt.Errorf("%w: --max-body: %v", errUsage, err)
	}
	if limit < 1 {
		return fmt.Errorf("%w: --max-body %q: must be at least 1B", errUsage, *maxBody)
	}
	if *inflight < 0 {
		return fmt.Errorf("%w: --max-inflight %d: must not be negative", errUsage, *inflight)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("%w: --addr %q: %v", errUsage, *addr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := announce(out, errOut, ln.Addr(), *asJSON); err != nil {
		ln.Close()
		return err
	}
	return serve(ctx, ln, newServer(serverOptions{MaxBody: int64(limit), MaxInFlight: *inflight}), errOut)
}

// announce tells where the service listens: a line on errOut, or with
// --json {"addr": ..., "url": ...} on out, for a caller that asked for
// port 0.
func announce(out, errOut io.Writer, addr net.Addr, asJSON bool) error {
	url := "http://" + addr.String()
	if asJSON {
		return writeJSON(out, map[string]string{"addr": addr.String(), "url": url})
	}
	_, err := fmt.Fprintf(errOut, "gpumem serve: listening on %s\n", url)
	return err
}

// serve serves h on ln until ctx is done, then shuts down gracefully:
// it stops accepting, lets requests in flight finish (for up to
// shutdownTimeout) and returns.
func serve(ctx context.Context, ln net.Listener, h http.Handler, errOut io.Writer) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(errOut, "gpumem serve: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// serverOptions configure newServer. The zero value means defaults.
type serverOptions struct {
	MaxBody int64 // largest request body in bytes; 0 means defaultMaxBody (1 MiB)
	// MaxInFlight bounds the POST requests computed at once; 0 means
	// GOMAXPROCS. The work is CPU-bound, so more would not finish sooner,
	// and the bound caps the memory requests in flight can hold.
	MaxInFlight int
	// Timeout is each request's deadline (0: requestTimeout) and
	// QueueWait how long it may wait for a slot (0: queueTimeout, never
	// past the deadline).
	Timeout, QueueWait time.Duration
}

// server answers the service's endpoints. Requests share nothing but the
// catalogs, rendered once and read-only, the semaphore slots and the
// cache of prepared models (budget.Model is immutable and safe for
// concurrent use): every request builds its own job, so requests may run
// concurrently.
type server struct {
	maxBody  int64
	slots    chan struct{} // a semaphore of MaxInFlight slots
	timeout  time.Duration // each request's deadline
	queue    time.Duration // the longest wait for a slot
	computed atomic.Int64  // requests that reached the library (for tests)
	defaults jobFlags      // the estimate flags' defaults, shared with the CLI
	models   []byte        // GET /v1/models, rendered once
	devices  []byte        // GET /v1/devices, rendered once
	routes   map[string]route
	allow    map[string]string // path → Allow header
	prepared modelCache        // models prepared by budget.NewModel, by what they depend on
	specs    specCache         // catalog models looked up and checked, by name
}

// route is one endpoint.
type route struct {
	method string
	path   string
	query  []string // the query parameters it reads; others are refused
	handle func(out io.Writer, r *http.Request, body []byte) error
}

// table lists the endpoints. A new endpoint is one line here.
func (s *server) table() []route {
	return []route{
		{http.MethodPost, "/v1/estimate", nil, s.estimate},
		{http.MethodPost, "/v1/plan", nil, s.plan},
		{http.MethodPost, "/v1/pipeline", nil, s.pipeline},
		{http.MethodPost, "/v1/oom", nil, s.oom},
		{http.MethodPost, "/v1/leak", []string{"capacity", "gpu", "unit", "run"}, s.leak},
		{http.MethodGet, "/v1/models", nil, static(s.models)},
		{http.MethodGet, "/v1/devices", nil, static(s.devices)},
	}
}

// newServer returns the service's handler.
func newServer(opts serverOptions) http.Handler {
	s := &server{maxBody: opts.MaxBody, routes: map[string]route{}, allow: map[string]string{}}
	if s.maxBody <= 0 {
		s.maxBody = defaultMaxBody
	}
	n := opts.MaxInFlight
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	s.slots = make(chan struct{}, n)
	s.timeout, s.queue = opts.Timeout, opts.QueueWait
	s.prepared.max, s.specs.max = modelCacheSize, modelCacheSize
	if s.timeout <= 0 {
		s.timeout = requestTimeout
	}
	if s.queue <= 0 {
		s.queue = queueTimeout
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	s.defaults.register(fs) // the flags' registered defaults are the request's defaults
	s.models = renderModels()
	s.devices = renderDevices()
	for _, rt := range s.table() {
		key := rt.method + " " + rt.path
		s.routes[key] = rt
		if a := s.allow[rt.path]; a != "" {
			s.allow[rt.path] = a + ", " + rt.method
		} else {
			s.allow[rt.path] = rt.method
		}
		if rt.method == http.MethodGet {
			s.routes[http.MethodHead+" "+rt.path] = rt
			s.allow[rt.path] += ", " + http.MethodHead
		}
	}
	return s
}

// apiError is an error the service reports as {"error": msg, "field": field}
// with an HTTP status.
type apiError struct {
	status int
	field  string // the request field at fault; "" when none
	msg    string
	retry  bool // 503: the client may retry (Retry-After)
}

func (e *apiError) Error() string { return e.msg }

// badField returns a 400 error naming a request field.
func badField(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, field: field, msg: fmt.Sprintf(format, args...)}
}

// ServeHTTP dispatches through the route table. Every reply, errors
// included, is JSON.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			// A panic is a bug in gpumem, never the client's fault.
			writeError(w, &apiError{status: http.StatusInternalServerError, msg: fmt.Sprintf("internal error: %v", v)})
		}
	}()
	if servePage(w, r) {
		return // the page, not the API (serve_web.go)
	}
	rt, ok := s.routes[r.Method+" "+r.URL.Path]
	if !ok {
		if allow, known := s.allow[r.URL.Path]; known {
			w.Header().Set("Allow", allow)
			writeError(w, &apiError{status: http.StatusMethodNotAllowed,
				msg: fmt.Sprintf("method %s not allowed on %s; use %s", r.Method, r.URL.Path, allow)})
			return
		}
		writeError(w, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no endpoint %s", r.URL.Path)})
		return
	}
	if err := checkQuery(r, rt.query); err != nil {
		writeError(w, err)
		return
	}
	// Every request has a deadline, carried by its context, which is
	// also cancelled when the client goes away; the handlers check it
	// between the stages of their work.
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), timeoutKey{}, s.timeout), s.timeout)
	defer cancel()
	r = r.WithContext(ctx)
	var body []byte
	if rt.method == http.MethodPost {
		var err error
		if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody)); err != nil {
			writeError(w, readError(err))
			return
		}
		wait := time.NewTimer(s.queue)
		select {
		case s.slots <- struct{}{}:
			wait.Stop()
			defer func() { <-s.slots }()
		case <-ctx.Done():
			wait.Stop()
			writeError(w, stopped(ctx, "while waiting for a free slot"))
			return
		case <-wait.C:
			writeError(w, &apiError{status: http.StatusServiceUnavailable, retry: true,
				msg: fmt.Sprintf("busy: no compute slot became free within %v (gpumem serve --max-inflight)", s.queue)})
			return
		}
	}
	var out bytes.Buffer
	if err := rt.handle(&out, r, body); err != nil {
		writeError(w, err)
		return
	}
	if err := alive(ctx); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(out.Bytes())
	}
}

// alive returns nil while the request may go on, and a 503 once its
// deadline has passed or its client has gone away: the handlers call it
// between the stages of their work (reading the model, estimating,
// planning), each of which takes milliseconds, so work for a client
// that has gone stops within one stage.
func alive(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return stopped(ctx, "")
}

// stopped is the reply to a request whose context is done.
func stopped(ctx context.Context, when string) *apiError {
	if when != "" {
		when = " " + when
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &apiError{status: http.StatusServiceUnavailable, retry: true,
			msg: fmt.Sprintf("the request passed its %s deadline%s", requestTimeoutOf(ctx), when)}
	}
	return &apiError{status: http.StatusServiceUnavailable, msg: "the request was cancelled" + when}
}

// requestTimeoutOf names the deadline in a message.
func requestTimeoutOf(ctx context.Context) string {
	if d, ok := ctx.Value(timeoutKey{}).(time.Duration); ok {
		return d.String()
	}
	return "deadline"
}

type timeoutKey struct{}

// checkQuery refuses query parameters the route does not read, so that a
// misspelt one is not silently ignored.
func checkQuery(r *http.Request, known []string) error {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("query string: %v", err)}
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		ok := false
		for _, n := range known {
			ok = ok || k == n
		}
		if !ok {
			if len(known) == 0 {
				return badField(k, "unknown query parameter %q: %s takes none", k, r.URL.Path)
			}
			return badField(k, "unknown query parameter %q: want %s", k, strings.Join(known, " or "))
		}
	}
	return nil
}

// readError turns an error reading the body into a reply.
func readError(err error) *apiError {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &apiError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("request body larger than %d bytes (gpumem serve --max-body)", mb.Limit)}
	}
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("reading the request body: %v", err)}
}

// writeError writes err as JSON: {"error": "...", "field": "..."}.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusBadRequest, msg: err.Error()}
	}
	v := struct {
		Error string `json:"error"`
		Field string `json:"field,omitempty"`
	}{ae.msg, ae.field}
	b, _ := json.MarshalIndent(v, "", "  ") // two strings: cannot fail
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if ae.retry {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(ae.status)
	w.Write(b)
}

// writeJSON writes v as the CLI's --json does: indented by two spaces,
// with a final newline.
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// isJSON reports whether the request's Content-Type is JSON
// (application/json or any application/*+json).
func isJSON(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// decodeStrict decodes one JSON object from body into v, refusing unknown
// fields and trailing data; errors name the field.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &apiError{status: http.StatusBadRequest, msg: "invalid JSON: data after the top-level object"}
	}
	return nil
}

// unknownField matches encoding/json's error for DisallowUnknownFields.
var unknownField = regexp.MustCompile(`^json: unknown field "(.*)"$`)

// jsonError turns a decoding error into a reply naming the field.
func jsonError(err error) *apiError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return &apiError{status: http.StatusBadRequest, msg: "empty request body: want a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &apiError{status: http.StatusBadRequest, msg: "invalid JSON: unexpected end of the body"}
	case errors.As(err, &se):
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)}
	case errors.As(err, &te):
		if te.Field == "" {
			return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("want a JSON object, got %s", te.Value)}
		}
		// A field of the embedded estimateRequest (in a plan request) is
		// named with the Go type's: the client knows only the field.
		field := strings.TrimPrefix(te.Field, "estimateRequest.")
		return badField(field, "%s: want %s, got %s", field, jsonKind(te.Type.String()), te.Value)
	}
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		return badField(m[1], "unknown field %q", m[1])
	}
	return &apiError{status: http.StatusBadRequest, msg: "invalid JSON: " + err.Error()}
}

// jsonKind names a Go type as a JSON client knows it.
func jsonKind(goType string) string {
	switch goType {
	case "int", "int64":
		return "an integer"
	case "bool":
		return "true or false"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "json.RawMessage":
		return "a JSON value"
	}
	return goType
}

// sizeText reads a size given as a string ParseBytes reads ("80GiB") or
// as a JSON integer number of bytes, and returns it as text; "" when the
// value is absent or null.
func sizeText(field string, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badField(field, "%s: %v", field, err)
		}
		return s, nil
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return "", badField(field, "%s: want a size such as \"80GiB\" or an integer of bytes, got %s", field, raw)
		}
	}
	// A JSON integer is a number of bytes: say so, since a size string
	// without a unit is refused (checkTarget).
	return string(raw) + "B", nil
}

// checkTarget checks a memory size a request gives as a string as the
// command line's size flags are read (parseSize): a positive amount with
// a unit, or an integer of bytes from 1 MiB up. "80" is refused with the
// units it may have meant, not read as 80 bytes; "0" and "0GiB" are
// refused, not read as "no GPU named".
func checkTarget(field, text string) error {
	if _, err := parseSize(field, text, "80GiB"); err != nil {
		return badField(field, "%s", forRequest(err.Error()))
	}
	return nil
}

// estimateRequest is the body of POST /v1/estimate: the estimate flags
// as JSON fields. Fields left out take the flags' defaults.
type estimateRequest struct {
	Model         string          `json:"model"`
	Config        json.RawMessage `json:"config"`
	Mode          string          `json:"mode"`
	Train         bool            `json:"train"`
	Infer         bool            `json:"infer"`
	Batch         int             `json:"batch"`
	Seq           int             `json:"seq"`
	Generate      int             `json:"generate"`
	GradAccum     int             `json:"grad_accum"`
	Precision     string          `json:"precision"`
	Optimizer     string          `json:"optimizer"`
	Attention     string          `json:"attention"`
	Checkpointing string          `json:"checkpointing"`
	LoRARank      int64           `json:"lora_rank"`
	LoRATargets   []string        `json:"lora_targets"`
	QLoRA         bool            `json:"qlora"`
	Images        int             `json:"images"`
	Dropout       bool            `json:"dropout"`
	Head          string          `json:"head"`       // --head: the task head
	Labels        int             `json:"labels"`     // --labels: a classification head's num_labels
	ImageSize     int             `json:"image_size"` // --image-size: a vision backbone's image side in pixels
	Loss          string          `json:"loss"`
	Compile       string          `json:"compile"` // --compile: none, layers, loss, layers+loss, model
	LogitsToKeep  int             `json:"logits_to_keep"`
	GPU           string          `json:"gpu"`
	Memory        json.RawMessage `json:"memory"`

	// OptimizerImpl, Momentum, Nesterov, OptimizerInBackward and Frozen
	// are --optimizer-impl, --momentum, --nesterov,
	// --optimizer-in-backward and --frozen.
	OptimizerImpl       string  `json:"optimizer_impl"`
	Momentum            float64 `json:"momentum"`
	Nesterov            bool    `json:"nesterov"`
	OptimizerInBackward bool    `json:"optimizer_in_backward"`
	Frozen              bool    `json:"frozen"`
	// OffloadActivations is --offload-activations.
	OffloadActivations bool `json:"offload_activations"`
	KeepLogits         bool `json:"keep_logits"`
	// EvalLoss is --eval.
	EvalLoss bool `json:"eval"`

	// Quant, GroupSize, KVDType and KVBlock are --quant, --group-size,
	// --kv-dtype and --kv-block.
	Quant     string `json:"quant"`
	GroupSize int64  `json:"group_size"`
	KVDType   string `json:"kv_dtype"`
	KVBlock   int    `json:"kv_block"`

	// CUDA and LazyLoading are --cuda and --lazy-loading.
	CUDA        string `json:"cuda"`
	LazyLoading *bool  `json:"lazy_loading"`

	// Profile is --profile's content: the overhead profile object gpumem
	// calibrate writes (schema, context, fragmentation, workspace,
	// workspaces, fit), inline; a file name is not read.
	Profile json.RawMessage `json:"profile"`

	// Runtime is --runtime (pytorch or llama.cpp); NGPULayers, CtxSize,
	// Parallel, UBatchSize, FlashAttn, CacheTypeK and CacheTypeV are
	// llama.cpp's --n-gpu-layers (left out: all), --ctx-size,
	// --parallel, --ubatch-size, --flash-attn, --cache-type-k and
	// --cache-type-v.
	Runtime    string `json:"runtime"`
	NGPULayers *int   `json:"n_gpu_layers"`
	CtxSize    int    `json:"ctx_size"`
	Parallel   int    `json:"parallel"`
	UBatchSize int    `json:"ubatch_size"`
	FlashAttn  bool   `json:"flash_attn"`
	CacheTypeK string `json:"cache_type_k"`
	CacheTypeV string `json:"cache_type_v"`
	// SplitMode, TensorSplit and MainGPU are llama.cpp's --split-mode,
	// --tensor-split (one share per GPU: their count is the GPUs) and
	// --main-gpu.
	// NoMmap is llama.cpp's --no-mmap.
	NoMmap bool `json:"no_mmap"`
	// SWAFull is llama.cpp's --swa-full: a sliding-window model's SWA
	// layers cache the whole context.
	SWAFull bool `json:"swa_full"`
	// LlamaCppVersion is --llamacpp-version: the llama.cpp build's date,
	// YYYY-MM-DD or YYYY-MM, which sets how n_gpu_layers places the layers.
	LlamaCppVersion string    `json:"llamacpp_version"`
	SplitMode       string    `json:"split_mode"`
	TensorSplit     []float64 `json:"tensor_split"`
	MainGPU         int       `json:"main_gpu"`

	// GPUMemoryUtilization, MaxModelLen, MaxNumBatchedTokens,
	// MaxNumSeqs, BlockSize, KVCacheDType and TensorParallelSize are
	// vLLM's flags with runtime "vllm" (--gpu-memory-utilization and so
	// on); the job needs gpu or memory.
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
	MaxModelLen          int     `json:"max_model_len"`
	MaxNumBatchedTokens  int     `json:"max_num_batched_tokens"`
	MaxNumSeqs           int     `json:"max_num_seqs"`
	BlockSize            int     `json:"block_size"`
	KVCacheDType         string  `json:"kv_cache_dtype"`
	TensorParallelSize   int     `json:"tensor_parallel_size"`
	// CUDAGraphMemory and EnforceEager are vLLM's --cuda-graph-memory
	// (a size, "1.58GiB") and --enforce-eager; VLLMV0 is --vllm-v0.
	CUDAGraphMemory string `json:"cuda_graph_memory"`
	EnforceEager    bool   `json:"enforce_eager"`
	VLLMV0          bool   `json:"vllm_v0"`

	// MemFractionStatic, MaxTotalTokens, PageSize and ContextLength are
	// SGLang's flags with runtime "sglang" (--mem-fraction-static and so
	// on; kv_cache_dtype and tensor_parallel_size apply too); the job
	// needs gpu or memory.
	MemFractionStatic float64 `json:"mem_fraction_static"`
	MaxTotalTokens    int     `json:"max_total_tokens"`
	PageSize          int     `json:"page_size"`
	ContextLength     int     `json:"context_length"`

	// GPUs, Nodes, ZeRO, FSDP, TP, SP, PP, VPP, CP, EP and Offload are
	// the layout flags --gpus, --nodes, --zero, --fsdp, --tp, --sp,
	// --pp, --vpp, --cp, --ep and --offload (layoutFrom); the estimate
	// is per GPU.
	GPUs    int    `json:"gpus"`
	Nodes   int    `json:"nodes"`
	ZeRO    int    `json:"zero"`
	FSDP    string `json:"fsdp"`
	TP      int    `json:"tp"`
	SP      bool   `json:"sp"`
	PP      int    `json:"pp"`
	VPP     int    `json:"vpp"`
	CP      int    `json:"cp"`
	EP      int    `json:"ep"`
	Offload string `json:"offload"`

	// Safetensors is the header of a .safetensors file (its first
	// 8 + N bytes, base64 in JSON), SafetensorsSize the file's size:
	// what --safetensors reads, without the tensors' data
	// (checkpointSpec).
	Safetensors     []byte `json:"safetensors"`
	SafetensorsSize int64  `json:"safetensors_size"`
	// GGUF and GGUFSize are the same for a .gguf file: its header up to
	// the end of the tensor infos, and the file's size (--gguf).
	GGUF     []byte `json:"gguf"`
	GGUFSize int64  `json:"gguf_size"`
}

// estimate answers POST /v1/estimate.
func (s *server) estimate(out io.Writer, r *http.Request, body []byte) error {
	jf, spec, source, err := s.decodeEstimate(body)
	if err != nil {
		return err
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	j, dev, err := jf.jobWith(spec, s.prepared.prepare(source, &jf))
	if err != nil {
		return libraryError(err, jobFields(jf))
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	s.computed.Add(1)
	e, err := estimate(j, dev)
	if err != nil {
		return libraryError(err, jobFields(jf))
	}
	return e.writeJSON(out)
}

// decodeEstimate turns a request body into the jobFlags the CLI would
// have parsed, the model it names, and where the model comes from (see
// modelSource). It checks each field with the functions the CLI's
// jobFlags.jobFor uses, so that an error names the request field; what
// those functions accept, the service accepts.
func (s *server) decodeEstimate(body []byte) (jobFlags, model.Spec, string, error) {
	req := s.defaultRequest()
	if err := decodeStrict(body, &req); err != nil {
		return s.defaults, model.Spec{}, "", err
	}
	jf, spec, err := s.flagsFrom(req)
	if err != nil {
		return jf, spec, "", err
	}
	return jf, spec, modelSource(req), nil
}

// defaultRequest is an estimate request with the flags' defaults.
func (s *server) defaultRequest() estimateRequest {
	d := s.defaults
	return estimateRequest{Batch: d.batch, Seq: d.seq, Generate: d.generate, GradAccum: d.accum,
		Precision: d.precision, Optimizer: d.opt, Attention: d.attn, Checkpointing: d.ckpt,
		LoRARank: d.loraRank, QLoRA: d.qlora, Images: d.images, Loss: d.loss}
}

// flagsFrom checks a decoded estimate request and turns it into flags.
func (s *server) flagsFrom(req estimateRequest) (jobFlags, model.Spec, error) {
	jf := s.defaults
	switch strings.ToLower(req.Mode) {
	case "":
	case "train", "training":
		jf.train = true
	case "infer", "inference":
		jf.infer = true
	case "load":
		jf.loadOnly = true
	default:
		return jf, model.Spec{}, badField("mode", "mode %q: want train, infer or load", req.Mode)
	}
	jf.train = jf.train || req.Train
	jf.infer = jf.infer || req.Infer
	if jf.loadOnly && (jf.train || jf.infer) {
		return jf, model.Spec{}, badField("mode", "\"mode\": \"load\" runs nothing: leave train and infer out")
	}
	if jf.train == jf.infer && !jf.loadOnly {
		return jf, model.Spec{}, badField("mode", "give one of \"mode\": \"train\" and \"mode\": \"infer\" (or train: true, infer: true)")
	}
	var spec model.Spec
	config := bytes.TrimSpace(req.Config)
	hasConfig := len(config) > 0 && string(config) != "null"
	switch {
	case len(req.Safetensors) > 0 || len(req.GGUF) > 0:
		var err error
		if spec, err = checkpointSpec(req, hasConfig, &jf); err != nil {
			return jf, spec, err
		}
	case req.Model != "" && hasConfig:
		return jf, spec, badField("config", "give one of model and config")
	case req.Model != "":
		var ok bool
		if spec, ok = s.specs.get(req.Model); ok {
			jf.name = req.Model
			break // checkModelSize passed it
		}
		s.specs.looked.Add(1)
		if isLargest(req.Model) {
			return jf, spec, badField("model", "%s: only /v1/plan searches for the largest model", largestName)
		}
		if _, isGPT, err := model.ParseGPT(req.Model); isGPT && err != nil {
			return jf, spec, badField("model", "%v", err)
		}
		if spec, ok = model.Lookup(req.Model); !ok {
			return jf, spec, badField("model", "no model %q in the catalog (see GET /v1/models, or give config)", req.Model)
		}
		jf.name = req.Model
		if err := checkModelSize(spec, config); err != nil {
			return jf, spec, err
		}
		s.specs.put(req.Model, spec)
	case hasConfig:
		if config[0] != '{' {
			return jf, spec, badField("config", "config: want a config.json object, got %s", truncate(config, 40))
		}
		var err error
		if spec, err = model.FromHFConfig(bytes.NewReader(config)); err != nil {
			return jf, spec, libraryError(err, nil)
		}
		jf.config = "(inline)"
		if err := checkModelSize(spec, config); err != nil {
			return jf, spec, err
		}
	default:
		return jf, spec, badField("model", "name a model with model (a catalog name) or config (a config.json object)")
	}
	jf.batch, jf.seq, jf.generate, jf.accum, jf.images = req.Batch, req.Seq, req.Generate, req.GradAccum, req.Images
	jf.dropout = req.Dropout
	jf.head, jf.labels = req.Head, req.Labels
	headed, herr := withHead(spec, req.Head)
	if herr != nil {
		return jf, spec, badField("head", "head %q: %v", req.Head, forRequest(herr.Error()))
	}
	if _, err := withLabels(headed, req.Labels); err != nil {
		return jf, spec, badField("labels", "labels = %d: %v", req.Labels, forRequest(err.Error()))
	}
	jf.imageSize = req.ImageSize
	if _, err := withImageSize(spec, req.ImageSize); err != nil {
		return jf, spec, badField("image_size", "image_size = %d: %v", req.ImageSize, forRequest(err.Error()))
	}
	jf.loss, jf.logitsToKeep = req.Loss, req.LogitsToKeep
	if req.Compile != "" {
		jf.compile = req.Compile
	}
	jf.precision, jf.opt, jf.attn, jf.ckpt = req.Precision, req.Optimizer, req.Attention, req.Checkpointing
	jf.loraRank, jf.qlora, jf.gpu = req.LoRARank, req.QLoRA, req.GPU
	jf.quant, jf.groupSize, jf.kvDType, jf.kvBlock = req.Quant, req.GroupSize, req.KVDType, req.KVBlock
	if err := s.checkQuantFields(req, jf); err != nil {
		return jf, spec, err
	}
	jf.llama = llamaFlags{runtime: req.Runtime, ctxSize: req.CtxSize, parallel: req.Parallel,
		ubatch: req.UBatchSize, flashAttn: req.FlashAttn, cacheK: req.CacheTypeK, cacheV: req.CacheTypeV}
	if req.NGPULayers != nil {
		jf.llama.gpuLayers = strconv.Itoa(*req.NGPULayers)
	}
	jf.llama.splitMode, jf.llama.mainGPU, jf.llama.noMmap, jf.llama.swaFull = req.SplitMode, req.MainGPU, req.NoMmap, req.SWAFull
	jf.llama.version = req.LlamaCppVersion
	if req.TensorSplit != nil {
		if len(req.TensorSplit) == 0 {
			return jf, spec, badField("tensor_split", "tensor_split: an empty list (leave it out for an even split)")
		}
		parts := make([]string, len(req.TensorSplit))
		for i, f := range req.TensorSplit {
			parts[i] = strconv.FormatFloat(f, 'g', -1, 64)
		}
		jf.llama.tensorSplit = strings.Join(parts, ",")
	}
	jf.vllm = vllmFlags{gpuMemUtil: req.GPUMemoryUtilization, maxModelLen: req.MaxModelLen,
		batchedTokens: req.MaxNumBatchedTokens, maxNumSeqs: req.MaxNumSeqs, blockSize: req.BlockSize,
		kvCacheDType: req.KVCacheDType, tensorParallel: req.TensorParallelSize,
		cudaGraphMem: req.CUDAGraphMemory, enforceEager: req.EnforceEager, v0: req.VLLMV0}
	jf.sglang = sglangFlags{memFraction: req.MemFractionStatic, maxTotalTokens: req.MaxTotalTokens,
		pageSize: req.PageSize, contextLength: req.ContextLength}
	{
		// The llama.cpp fields are checked here, so that an error names
		// the request's field.
		probe := budget.Job{Mode: budget.Prefill}
		switch {
		case jf.train:
			probe.Mode = budget.Training
		case jf.loadOnly:
			probe.Mode = budget.Load
		}
		if name, err := jf.llama.apply(&probe, false); err != nil {
			return jf, spec, badField(strings.ReplaceAll(name, "-", "_"), "%s", forRequest(err.Error()))
		}
		if name, err := jf.vllm.apply(&probe); err != nil {
			return jf, spec, badField(strings.ReplaceAll(name, "-", "_"), "%s", forRequest(err.Error()))
		}
		if name, err := jf.sglang.apply(&probe); err != nil {
			return jf, spec, badField(strings.ReplaceAll(name, "-", "_"), "%s", forRequest(err.Error()))
		}
		if (probe.Runtime == budget.VLLM || probe.Runtime == budget.SGLang) && req.GPU == "" && len(req.Memory) == 0 {
			return jf, spec, badField("gpu", "runtime %q: %s sizes its KV cache from the GPU's memory: give gpu or memory", req.Runtime, probe.Runtime)
		}
	}
	if err := layoutFrom(req, &jf); err != nil {
		return jf, spec, err
	}
	var err error
	if jf.memory, err = sizeText("memory", req.Memory); err != nil {
		return jf, spec, err
	}
	if jf.loraRank < 0 {
		return jf, spec, badField("lora_rank", "lora_rank = %d: must not be negative", jf.loraRank)
	}
	if req.LoRATargets != nil {
		if len(req.LoRATargets) == 0 {
			return jf, spec, badField("lora_targets", "lora_targets: an empty list (leave it out for PEFT's default)")
		}
		for _, t := range req.LoRATargets {
			if strings.TrimSpace(t) == "" || strings.Contains(t, ",") {
				return jf, spec, badField("lora_targets", "lora_targets: %q is not a module name", t)
			}
		}
		if jf.loraRank == 0 && !jf.qlora {
			return jf, spec, badField("lora_targets", "lora_targets: give lora_rank or qlora too")
		}
		jf.loraTargets = strings.Join(req.LoRATargets, ",")
	}
	if jf.precision != "" {
		if _, err := budget.ParsePrecision(jf.precision); err != nil {
			return jf, spec, badField("precision", "precision %q: want fp32, fp16-mixed, bf16-mixed, fp16-master, bf16-master, bf16, fp16 or fp8", jf.precision)
		}
	}
	jf.optImpl, jf.momentum, jf.nesterov = req.OptimizerImpl, req.Momentum, req.Nesterov
	jf.inBwd, jf.frozen, jf.offloadActs = req.OptimizerInBackward, req.Frozen, req.OffloadActivations
	jf.keepLogits, jf.evalLoss = req.KeepLogits, req.EvalLoss
	if jf.train {
		if jf.frozen && req.Optimizer != s.defaults.opt {
			return jf, spec, badField("optimizer", "optimizer %q: frozen: every parameter is frozen, so there is nothing to step (leave one out)", req.Optimizer)
		}
		if _, _, flagName, err := jf.optimizerFor(); err != nil {
			return jf, spec, badField(strings.ReplaceAll(flagName, "-", "_"), "%s", forRequest(err.Error()))
		}
	} else {
		for _, c := range []struct {
			field string
			set   bool
		}{{"optimizer_impl", jf.optImpl != ""}, {"momentum", jf.momentum != 0}, {"nesterov", jf.nesterov},
			{"optimizer_in_backward", jf.inBwd}, {"frozen", jf.frozen}, {"offload_activations", jf.offloadActs},
			{"keep_logits", jf.keepLogits}} {
			if c.set {
				return jf, spec, badField(c.field, "%s: an inference job runs no backward pass and no optimizer (give \"mode\": \"train\", or leave %s out)", c.field, c.field)
			}
		}
	}
	if _, err := parseAttention(jf.attn); err != nil {
		return jf, spec, badField("attention", "attention %q: want eager, sdpa or flash", jf.attn)
	}
	if _, err := parseCheckpointing(jf.ckpt); err != nil {
		return jf, spec, badField("checkpointing", "checkpointing %q: want none, selective, full or offload", jf.ckpt)
	}
	jf.cuda = req.CUDA
	if jf.cuda != "" {
		if _, err := budget.ParseCUDAVersion(jf.cuda); err != nil {
			return jf, spec, badField("cuda", "cuda %q: want a CUDA version such as 12.1 (or a wheel tag such as cu121)", jf.cuda)
		}
	}
	if req.LazyLoading != nil {
		jf.lazy = optBool{set: true, v: *req.LazyLoading}
	}
	if len(req.Profile) > 0 && string(req.Profile) != "null" {
		p, err := parseProfile(req.Profile)
		if err != nil {
			return jf, spec, badField("profile", "profile: %v", err)
		}
		jf.profileData = &p
	}
	if c, err := model.ParseCompile(jf.compile); err != nil {
		return jf, spec, badField("compile", "compile %q: want none, layers, loss, layers+loss or model", jf.compile)
	} else if c != 0 && !jf.train {
		return jf, spec, badField("compile", "compile %q: compilation is modelled for training steps (give \"mode\": \"train\", or leave compile out)", jf.compile)
	}
	if l, err := model.ParseLoss(jf.loss); err != nil {
		var fe *gpumem.FieldError
		msg := err.Error()
		if errors.As(err, &fe) {
			msg = fe.Err.Error()
		}
		return jf, spec, badField("loss", "loss %q: %s", jf.loss, msg)
	} else if l.Kind != model.FullLoss && !jf.train {
		return jf, spec, badField("loss", "loss %q: an inference job computes no loss (give \"mode\": \"train\", or leave loss out)", jf.loss)
	}
	switch {
	case jf.logitsToKeep < 0:
		return jf, spec, badField("logits_to_keep", "logits_to_keep = %d: must not be negative (0: every position)", jf.logitsToKeep)
	case jf.logitsToKeep > 0 && jf.train:
		return jf, spec, badField("logits_to_keep", "logits_to_keep = %d: a training step's loss needs the logits of every position", jf.logitsToKeep)
	case jf.logitsToKeep > 0 && jf.generate > 0:
		return jf, spec, badField("logits_to_keep", "logits_to_keep = %d: generation's prompt pass keeps the last position's logits already", jf.logitsToKeep)
	}
	switch {
	case jf.gpu != "" && jf.memory != "":
		return jf, spec, badField("memory", "give one of gpu and memory")
	case jf.gpu != "":
		if _, ok := gpumem.LookupDevice(jf.gpu); !ok {
			return jf, spec, badField("gpu", "unknown GPU %q (see GET /v1/devices, or give memory)", jf.gpu)
		}
	case jf.memory != "":
		if err := checkTarget("memory", jf.memory); err != nil {
			return jf, spec, err
		}
	}
	return jf, spec, nil
}

// checkQuantFields checks the quantization, KV cache and load fields of
// a request as jobFor and checkGiven check their flags, naming the
// request's fields.
func (s *server) checkQuantFields(req estimateRequest, jf jobFlags) error {
	if jf.loadOnly {
		def := s.defaults
		for _, c := range []struct {
			name  string
			given bool
		}{{"generate", req.Generate != 0}, {"batch", req.Batch != def.batch}, {"seq", req.Seq != def.seq},
			{"grad_accum", req.GradAccum > 1}, {"checkpointing", req.Checkpointing != def.ckpt}, {"dropout", req.Dropout},
			{"images", req.Images != 0}, {"kv_dtype", req.KVDType != ""}, {"kv_block", req.KVBlock != 0}} {
			if c.given {
				return badField(c.name, "%s: a load-only job runs nothing (leave it out, or give \"mode\": \"train\" or \"infer\")", c.name)
			}
		}
	}
	if jf.quant != "" {
		if jf.qlora {
			return badField("quant", "quant %q: qlora stores the weights in nf4 already (give one of them)", jf.quant)
		}
		if _, method, _, err := parseQuant(jf.quant); err != nil {
			return badField("quant", "quant %q: want int8, nf4, fp4, gptq, awq or fp8", jf.quant)
		} else if jf.groupSize != 0 && method != "gptq" && method != "awq" {
			return badField("group_size", "group_size %d: it applies to quant gptq or awq", jf.groupSize)
		}
		if jf.train && jf.loraRank == 0 && !req.Frozen {
			return badField("quant", "quant %q: quantized weights cannot train; give lora_rank to train adapters on them (or frozen for gradients to the input only)", jf.quant)
		}
	} else if jf.groupSize != 0 {
		return badField("group_size", "group_size %d: it applies to quant gptq or awq", jf.groupSize)
	}
	if jf.kvDType != "" {
		if _, err := gpumem.ParseDType(jf.kvDType); err != nil {
			return badField("kv_dtype", "kv_dtype %q: want fp8, fp8_e5m2, int8, fp16, bf16, Q8_0, Q4_0, ...", jf.kvDType)
		}
	}
	if (jf.kvDType != "" || jf.kvBlock != 0) && (!jf.infer || req.Generate == 0) {
		name := "kv_dtype"
		if jf.kvDType == "" {
			name = "kv_block"
		}
		return badField(name, "%s: only a generating job keeps a KV cache (give \"mode\": \"infer\" with generate)", name)
	}
	return nil
}

// truncate shortens b for an error message.
func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// jobFields maps the library's names for a budget.Job's fields to the
// request's.
func jobFields(jf jobFlags) map[string]string {
	// The fields a flag sets are named after it (requestField asks
	// flagFor); these are the ones named otherwise, or by the request
	// as a whole.
	m := map[string]string{
		"Job.Mode": "mode", "Job.Model": "model", "Job.Device": "gpu", "Job.Device.Capacity": "gpu",
		"Job.LlamaCpp": "runtime",
	}
	if jf.frozen {
		m["Job.Gradients"] = "frozen"
	}
	if jf.qlora {
		m["Finetune.Quant"] = "qlora"
	}
	if jf.config != "" {
		m["Job.Model"] = "config"
	}
	if jf.safetensors != "" {
		m["Job.Model"] = "safetensors"
	}
	if jf.gguf != "" {
		m["Job.Model"] = "gguf"
	}
	if jf.memory != "" {
		m["Job.Device"] = "memory"
	}
	return m
}

// libraryError turns an error of the library or of the CLI's shared code
// into a reply: a *gpumem.FieldError names its field as the request
// calls it (requestField), an input the library does not model is 422,
// anything else the input caused is 400.
func libraryError(err error, fields map[string]string) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	status := http.StatusBadRequest
	if errors.Is(err, gpumem.ErrUnsupported) {
		status = http.StatusUnprocessableEntity
	}
	var fe *gpumem.FieldError
	if errors.As(err, &fe) {
		field := requestField(fe.Field, fields)
		msg := (&gpumem.FieldError{Field: field, Value: fe.Value, Err: fe.Err}).Error()
		switch {
		case field == "" && fe.Field != "" && unicode.IsUpper(rune(fe.Field[0])):
			msg = fe.Err.Error() // a library name the request does not know
		case field == "":
			msg = err.Error() // "line 12 = 5Gb: ..."
		}
		return &apiError{status: status, field: field, msg: forRequest(msg)}
	}
	return &apiError{status: status, msg: forRequest(err.Error())}
}

// requestFields are the fields of every request body, by their JSON
// names: an error's field is one of them, or a key of an inline config
// ("config.num_hidden_layers"), or none.
var requestFields = func() map[string]bool {
	m := map[string]bool{}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				add(f.Type)
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" {
				m[name] = true
			}
		}
	}
	for _, v := range []any{planRequest{}, oomRequest{}, leakRequest{}} {
		add(reflect.TypeOf(v))
	}
	return m
}()

// libraryFields maps the last part of a library field name ("Job.SeqLen",
// "Workload.SeqLen", "Limits.HeadChunks[0]") to the request field that
// sets it.
var libraryFields = map[string]string{
	"Batch": "batch", "MicroBatch": "batch", "SeqLen": "seq", "QueryLen": "seq", "KeyLen": "seq", "Generate": "generate",
	"GradAccum": "grad_accum", "Images": "images", "ImageTokens": "images", "Precision": "precision", "DType": "precision",
	"Optimizer": "optimizer", "Optimizers": "allow", "Attention": "attention", "Kernel": "attention", "Softmax": "attention",
	"Checkpointing": "checkpointing", "CheckpointEvery": "checkpointing", "Mode": "mode", "Dropout": "dropout",
	"Rank": "lora_rank", "Targets": "lora_targets", "Quant": "qlora", "MinBatch": "min_batch", "MaxBatch": "max_batch",
	"TargetGlobalBatch": "target_batch", "MinSeqLen": "min_seq", "MaxSeqLen": "max_seq", "HeadroomFraction": "headroom",
	"HeadChunks": "allow", "HeadChunk": "allow", "Models": "allow", "Offload": "allow", "BufferMin": "allow",
	"Objective": "maximize", "CUDA": "cuda", "Loading": "lazy_loading",
	"Capacity": "capacity", "Device": "gpu",
	"Loss": "loss", "Chunks": "loss", "LogitsToKeep": "logits_to_keep", "Losses": "allow",
	"Compile": "compile",
}

// requestField names a library field as the request does: fields maps
// the request's own names first ("Job.Model" is "config" for an inline
// config); then the last part of the name ("Workload.SeqLen" is "seq");
// a config key keeps its name without the library's ("config.n_embd
// (Spec.Hidden)" is "config.n_embd"); a whole workload is its larger
// dimension; anything else names no field rather than a library one.
func requestField(field string, fields map[string]string) string {
	if f, ok := fields[field]; ok {
		return f
	}
	if k, _, ok := strings.Cut(field, " ("); ok && strings.HasPrefix(k, "config.") {
		return k
	}
	if strings.HasPrefix(field, "config.") || field == "config" {
		return field
	}
	base := field
	if i := strings.IndexByte(base, '['); i >= 0 {
		base = base[:i]
	}
	if f, ok := fields[base]; ok {
		return f
	}
	if fl, ok := flagFor(base); ok {
		// The request field is the flag's name: --grad-accum, grad_accum.
		if f := strings.ReplaceAll(strings.TrimPrefix(fl, "--"), "-", "_"); requestFields[f] {
			return f
		}
	}
	last := base[strings.LastIndexByte(base, '.')+1:]
	if first, _, _ := strings.Cut(base, "."); first == "Spec" || first == "Finetune" {
		last = first // the model as a whole
	}
	switch last {
	case "Workload", "Shape":
		return "seq" // the sequence, which a pasted job overflows first
	case "Spec", "Finetune", "Model", "Inventory":
		if f, ok := fields["Job.Model"]; ok {
			return f
		}
	}
	if f, ok := libraryFields[last]; ok && requestFields[f] {
		if f == "capacity" && fields["Job.Device"] != "" {
			return fields["Job.Device"]
		}
		return f
	}
	if requestFields[field] {
		return field
	}
	return ""
}

// cliWords are the library's and the command line's names that messages
// of the shared code may carry, with the request's names for them.
var cliWords = strings.NewReplacer(
	"Batch × (SeqLen + Generate)", "batch × (seq + generate)",
	"TargetGlobalBatch", "target_batch", "MinSeqLen", "min_seq", "MaxSeqLen", "max_seq",
	"MinBatch", "min_batch", "MaxBatch", "max_batch", "HeadroomFraction", "headroom", "GradAccum", "grad_accum",
)

// cliFlag matches a command-line flag in a message of the shared code.
var cliFlag = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)

// forRequest rewrites a message of the code the CLI and the service
// share in the request's terms: no "usage: " prefix, request fields
// ("max_seq") for the flags ("--max-seq") and library names
// ("MaxSeqLen") that set them.
func forRequest(msg string) string {
	msg = strings.TrimPrefix(msg, errUsage.Error()+": ")
	msg = cliFlag.ReplaceAllStringFunc(msg, func(f string) string {
		name := strings.ReplaceAll(f[2:], "-", "_")
		if requestFields[name] {
			return name
		}
		return f
	})
	return cliWords.Replace(msg)
}

// oomRequest is the JSON body of POST /v1/oom.
type oomRequest struct {
	Message string `json:"message"`
}

// oom answers POST /v1/oom: the body is the message (or a whole log) as
// text, or {"message": "..."} with Content-Type application/json.
func (s *server) oom(out io.Writer, r *http.Request, body []byte) error {
	text := string(body)
	if isJSON(r) {
		var req oomRequest
		if err := decodeStrict(body, &req); err != nil {
			return err
		}
		text = req.Message
	}
	o, ok := leak.ParseOOM(text)
	if !ok {
		return &apiError{status: http.StatusUnprocessableEntity, field: "message",
			msg: "no out-of-memory message found in the input"}
	}
	return writeOOMJSON(out, o, o.Diagnose())
}

// leakRequest is the JSON body of POST /v1/leak.
type leakRequest struct {
	Log      string          `json:"log"`
	Capacity json.RawMessage `json:"capacity"`
	GPU      string          `json:"gpu"`
	// Unit is the unit of unit-less values in bare columns and CSV
	// columns ("MiB", "GB", "B"), as gpumem leak --unit.
	Unit string `json:"unit"`
	// Series adds the points fitted and the fitted line to the reply
	// (leakSeries).
	Series bool `json:"series"`
	// Run is the run to analyze when a narrative's steps restart (1 =
	// the first), as gpumem leak --run.
	Run *int `json:"run"`
}

// leak answers POST /v1/leak: the body is the log as text with capacity,
// gpu or unit in the query string, or {"log": ..., "capacity": ...,
// "gpu": ..., "unit": ...} with Content-Type application/json. A log
// without a memory figure is 422 naming field "log".
func (s *server) leak(out io.Writer, r *http.Request, body []byte) error {
	q := r.URL.Query() // checkQuery has parsed it already
	capacity, gpu, unitText := q.Get("capacity"), q.Get("gpu"), q.Get("unit")
	run := 1
	if v := q.Get("run"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return badField("run", "want an integer of 1 or more, got %q", v)
		}
		run = n
	}
	text, series := body, false
	if isJSON(r) {
		var req leakRequest
		if err := decodeStrict(body, &req); err != nil {
			return err
		}
		c, err := sizeText("capacity", req.Capacity)
		if err != nil {
			return err
		}
		if c != "" && capacity != "" {
			return badField("capacity", "give capacity in the JSON body or the query string, not both")
		}
		if req.GPU != "" && gpu != "" {
			return badField("gpu", "give gpu in the JSON body or the query string, not both")
		}
		if req.Unit != "" && unitText != "" {
			return badField("unit", "give unit in the JSON body or the query string, not both")
		}
		if req.Run != nil && q.Get("run") != "" {
			return badField("run", "give run in the JSON body or the query string, not both")
		}
		if req.Run != nil {
			run = *req.Run
		}
		capacity, gpu, unitText, text, series = capacity+c, gpu+req.GPU, unitText+req.Unit, []byte(req.Log), req.Series
	}
	if run < 1 {
		return badField("run", "want 1 or more (runs are numbered from 1), got %d", run)
	}
	var unit gpumem.Bytes
	if unitText != "" {
		u, err := parseUnit(unitText)
		if err != nil {
			return badField("unit", "%s", forRequest(err.Error()))
		}
		unit = u
	}
	opts := leak.Options{Run: run - 1}
	switch {
	case capacity != "" && gpu != "":
		return badField("capacity", "give one of capacity and gpu")
	case capacity != "":
		if err := checkTarget("capacity", capacity); err != nil {
			return err
		}
		b, _ := gpumem.ParseBytes(capacity)
		opts.Capacity = b
	case gpu != "":
		d, ok := gpumem.LookupDevice(gpu)
		if !ok {
			return badField("gpu", "unknown GPU %q (see GET /v1/devices)", gpu)
		}
		opts.Capacity = d.Capacity
	}
	samples, rr, err := readLog(text, unit, &opts)
	if errors.Is(err, leak.ErrNoSamples) {
		return &apiError{status: http.StatusUnprocessableEntity, field: "log", msg: forRequest(err.Error())}
	}
	if err != nil {
		ae := libraryError(err, nil)
		var fe *gpumem.FieldError
		if errors.As(err, &fe) && !strings.HasPrefix(fe.Field, "ReadOptions.") {
			// The message keeps the place in the log: "line 12 = 5Gb: ...",
			// "device_traces[0][3].size = -5: ..." of a memory snapshot:
			// a log that does not read, 422 as one without a figure.
			ae.field = "log"
			ae.status = http.StatusUnprocessableEntity
		}
		return ae
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	s.computed.Add(1)
	rep, err := leak.Analyze(samples, &opts)
	if err != nil {
		return libraryError(err, map[string]string{"Options.Capacity": "capacity", "Options.Run": "run"})
	}
	if rep.Run >= rep.Runs {
		return badField("run", "the log has %d run(s), got run %d", rep.Runs, run)
	}
	j, err := leakJSON(rep, rr)
	if err != nil {
		return err
	}
	if series {
		if j, err = leakSeries(j, rep, samples, &opts); err != nil {
			return err
		}
	}
	return writeJSON(out, j)
}

// static returns a handler that writes a reply rendered beforehand.
func static(reply []byte) func(io.Writer, *http.Request, []byte) error {
	return func(out io.Writer, _ *http.Request, _ []byte) error {
		_, err := out.Write(reply)
		return err
	}
}

// modelEntry is one model of GET /v1/models.
type modelEntry struct {
	Name   string `json:"name"`
	Family string `json:"family"`
	Params int64  `json:"params"`
	Source string `json:"source,omitempty"`
}

// renderModels renders GET /v1/models: {"models": [...]} in catalog order.
func renderModels() []byte {
	cat := model.Catalog()
	v := struct {
		Models []modelEntry `json:"models"`
	}{make([]modelEntry, 0, len(cat))}
	for _, s := range cat {
		src, _ := model.CatalogSource(s.Name)
		v.Models = append(v.Models, modelEntry{Name: s.Name, Family: s.Family, Params: s.Params(), Source: src})
	}
	var b bytes.Buffer
	writeJSON(&b, v) // strings and integers: cannot fail
	return b.Bytes()
}

// deviceEntry is one GPU of GET /v1/devices.
type deviceEntry struct {
	Name          string `json:"name"`
	Capacity      int64  `json:"capacity"`
	CapacityHuman string `json:"capacity_human"`
	// ComputeCapability is "8.0" for an A100; absent for AMD parts.
	ComputeCapability string `json:"compute_capability,omitempty"`
}

// renderDevices renders GET /v1/devices: {"devices": [...]} in catalog order.
func renderDevices() []byte {
	devs := gpumem.Devices()
	v := struct {
		Devices []deviceEntry `json:"devices"`
	}{make([]deviceEntry, 0, len(devs))}
	for _, d := range devs {
		v.Devices = append(v.Devices, deviceEntry{Name: d.Name, Capacity: int64(d.Capacity), CapacityHuman: d.Capacity.String(),
			ComputeCapability: d.Compute.String()})
	}
	var b bytes.Buffer
	writeJSON(&b, v)
	return b.Bytes()
}

// planRequest is the body of POST /v1/plan: an estimate request plus
// the plan flags.
type planRequest struct {
	estimateRequest
	TargetBatch int    `json:"target_batch"`
	MinBatch    int    `json:"min_batch"`
	MaxBatch    int    `json:"max_batch"`
	MinSeq      int    `json:"min_seq"`
	MaxSeq      int    `json:"max_seq"`
	Allow       string `json:"allow"`
	Headroom    string `json:"headroom"`
	Maximize    string `json:"maximize"`
	// StatesOnly is plan --states-only: with "model": "gpt:largest",
	// count the ZeRO paper's model states alone.
	StatesOnly bool `json:"states_only"`
	// Concurrency is plan --concurrency: with "runtime": "vllm", the
	// requests of max_model_len vLLM must hold at once.
	Concurrency float64 `json:"concurrency"`
	// Configs adds "configs" to a plan that fits: what plan's
	// --deepspeed, --accelerate, --hf-args and --megatron write
	// (planConfigs).
	Configs bool `json:"configs"`
}

// plan answers POST /v1/plan with the JSON of gpumem plan --json; a job
// that fits nowhere is 200 with "fits": false, the ladder and hints.
func (s *server) plan(out io.Writer, r *http.Request, body []byte) error {
	req := planRequest{estimateRequest: s.defaultRequest()}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	largest := isLargest(req.Model)
	if largest {
		req.Model = largestPlaceholder
	} else if req.StatesOnly {
		return badField("states_only", "only with \"model\": %q", largestName)
	}
	if isOllama(req.Runtime) && req.Mode == "" && !req.Train {
		req.Infer = true // Ollama serves: the mode goes without saying
	}
	jf, spec, err := s.flagsFrom(req.estimateRequest)
	if err != nil {
		return err
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	ollamaGPUs := jf.gpus
	if isOllama(jf.llama.runtime) {
		jf.gpus = 1 // the GPUs are Ollama's to fill, not a data-parallel layout
	}
	j, dev, err := jf.jobWith(spec, s.prepared.prepare(modelSource(req.estimateRequest), &jf))
	if err != nil {
		return libraryError(err, jobFields(jf))
	}
	if isOllama(jf.llama.runtime) {
		// Ollama's placement (gpumem plan --runtime ollama).
		s.computed.Add(1)
		p, flag, err := planOllama(j, dev, ollamaGPUs, func(flag string) string { return strings.ReplaceAll(flag, "-", "_") })
		if flag != "" {
			return badField(strings.ReplaceAll(flag, "-", "_"), "%s", forRequest(err.Error()))
		}
		if err != nil {
			return libraryError(err, jobFields(jf))
		}
		return writeJSON(out, p.json())
	}
	if j.Runtime == budget.LlamaCpp {
		return badField("runtime", "runtime %q: a plan searches the batch, sequence and memory savers of a PyTorch job; for llama.cpp ask /v1/estimate with n_gpu_layers and ctx_size", jf.llama.runtime)
	}
	if j.Runtime == budget.VLLM && req.Concurrency != 0 {
		if dev.Capacity == 0 {
			return badField("gpu", "give gpu or memory to plan for")
		}
		s.computed.Add(1)
		p, err := planVLLM(j, dev, req.Concurrency)
		if err != nil {
			return libraryError(err, jobFields(jf))
		}
		return writeJSON(out, p.json())
	}
	if req.Concurrency != 0 {
		return badField("concurrency", "concurrency = %g: only with \"runtime\": \"vllm\"", req.Concurrency)
	}
	if j.Runtime == budget.VLLM || j.Runtime == budget.SGLang {
		return badField("runtime", "runtime %q: a plan searches the batch, sequence and memory savers of a PyTorch job; for vLLM ask /v1/estimate with gpu_memory_utilization and max_model_len", jf.llama.runtime)
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	if dev.Capacity == 0 {
		return badField("gpu", "give gpu or memory to plan for")
	}
	lim := budget.Limits{TargetGlobalBatch: req.TargetBatch, MinBatch: req.MinBatch, MaxBatch: req.MaxBatch,
		MinSeqLen: req.MinSeq, MaxSeqLen: req.MaxSeq}
	if err := parseAllow(req.Allow, &jf, &lim); err != nil {
		return badField("allow", "%s", forRequest(err.Error()))
	}
	if err := parseHeadroom(req.Headroom, &lim); err != nil {
		return badField("headroom", "%s", forRequest(err.Error()))
	}
	if lim.Objective, err = parseObjective(req.Maximize, &lim); err != nil {
		return badField("maximize", "%s", forRequest(err.Error()))
	}
	s.computed.Add(1)
	if largest {
		r, err := planLargest(j, dev, jf.layout.nodes, jf.gpus, j.Parallel.GPUs() <= 1 || jf.layout.explicitLayout, req.StatesOnly, &lim, "states_only")
		if err != nil {
			if errors.Is(err, errUsage) {
				return badField("states_only", "%s", forRequest(err.Error()))
			}
			var short *budget.InsufficientMemoryError
			if errors.As(err, &short) {
				return writeJSON(out, planErrorJSON(short, dev))
			}
			return libraryError(err, jobFields(jf))
		}
		return r.write(out, dev, true)
	}
	var p budget.Plan
	if j.Parallel.GPUs() > 1 && !jf.layout.explicitLayout {
		// GPUs but no layout: choose one, as plan does.
		p, err = budget.AllocateFleet(budget.Fleet{Nodes: jf.layout.nodes, GPUsPerNode: jf.gpus, Free: dev.Free()}, j, &lim)
	} else {
		p, err = budget.Allocate(dev.Free(), j, &lim)
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	var short *budget.InsufficientMemoryError
	if errors.As(err, &short) {
		return writeJSON(out, planErrorJSON(short, dev))
	}
	if err != nil {
		// The Limits fields are named after their flags (flagFor); the
		// limits as a whole are what allow changes.
		fields := jobFields(jf)
		fields["Limits"] = "allow"
		return libraryError(err, fields)
	}
	res := planJSON(p, dev)
	if req.Configs {
		res["configs"] = planConfigs(p)
	}
	return writeJSON(out, res)
}

// checkModelSize refuses a model larger than the service reads
// (maxServeLayers blocks in a stack, maxServeTensors tensors) with a 422
// that names the config key at fault ("config.num_hidden_layers",
// "config.text_config.num_local_experts"), or "model" for a catalog
// model.
func checkModelSize(spec model.Spec, config json.RawMessage) *apiError {
	var stacks []int64
	var walk func(s *model.Spec)
	walk = func(s *model.Spec) {
		if s == nil {
			return
		}
		stacks = append(stacks, s.Layers)
		walk(s.Encoder)
		walk(s.Vision)
		walk(s.Text)
	}
	walk(&spec)
	for _, n := range stacks {
		if n > maxServeLayers {
			return &apiError{status: http.StatusUnprocessableEntity, field: configKey(config, n, layerKeys),
				msg: fmt.Sprintf("a stack of %d layers: the service reads models of at most %d layers a stack", n, maxServeLayers)}
		}
	}
	var tensors int64
	for _, r := range spec.Runs() {
		tensors += r.Count // Validate bounds the sum far below overflow
	}
	if tensors > maxServeTensors {
		field := "model"
		if len(config) > 0 {
			field = configKey(config, spec.LM().MoE.Experts, expertKeys)
			if field == "config" {
				field = configKey(config, spec.LM().Layers, layerKeys)
			}
		}
		return &apiError{status: http.StatusUnprocessableEntity, field: field,
			msg: fmt.Sprintf("%d tensors: the service reads models of at most %d tensors (DeepSeek-V3 has about 92,000)", tensors, maxServeTensors)}
	}
	return nil
}

// The config keys that give a stack's layers and a block's experts.
var (
	layerKeys  = []string{"num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "decoder_layers", "encoder_layers"}
	expertKeys = []string{"num_local_experts", "num_experts", "n_routed_experts"}
)

// configKey finds the key of config (or of its text_config,
// vision_config) among keys whose value is n, as "config.KEY"; "config"
// when none is, and "model" without a config.
func configKey(config json.RawMessage, n int64, keys []string) string {
	if len(config) == 0 {
		return "model"
	}
	if n <= 0 {
		return "config"
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(config, &top) != nil {
		return "config"
	}
	want := strconv.FormatInt(n, 10)
	find := func(m map[string]json.RawMessage, prefix string) string {
		for _, k := range keys {
			if v, ok := m[k]; ok && strings.TrimSpace(string(v)) == want {
				return prefix + k
			}
		}
		return ""
	}
	if k := find(top, "config."); k != "" {
		return k
	}
	for _, sub := range []string{"text_config", "vision_config"} {
		var m map[string]json.RawMessage
		if json.Unmarshal(top[sub], &m) == nil {
			if k := find(m, "config."+sub+"."); k != "" {
				return k
			}
		}
	}
	return "config"
}

// modelCacheSize bounds the models the service keeps prepared, and the
// catalog models it keeps looked up. A Model holds its tensor groups,
// not its tensors: 4.2 KB on average over 48 catalog models with LoRA
// (heap after GC), so about 1 MB when full.
const modelCacheSize = 256

// modelSource names where a checked request's model comes from: the
// catalog name as given, or the SHA-256 of the inline config.json's
// bytes (the exact bytes, spaces around them trimmed as flagsFrom trims
// them: model.FromHFConfig reads nothing else, so the same bytes give
// the same model.Spec).
func modelSource(req estimateRequest) string {
	if req.Model != "" {
		return "model\x00" + req.Model
	}
	if len(req.Safetensors) > 0 || len(req.GGUF) > 0 {
		h := sha256.New()
		h.Write(req.Safetensors)
		h.Write(req.GGUF)
		fmt.Fprintf(h, "\x00%d\x00%d\x00%d", len(req.Safetensors), req.SafetensorsSize, req.GGUFSize)
		return "checkpoint\x00" + string(h.Sum(nil))
	}
	sum := sha256.Sum256(bytes.TrimSpace(req.Config))
	return "config\x00" + string(sum[:])
}

// modelKey is everything a model prepared by jobFor depends on: the
// model's source (modelSource), the head and labels that change its
// Spec, and every field of the model.Finetune that jobFor fills
// (TestModelKeyCoversFinetune fails when model.Finetune or model.LoRA
// gains a field, so that the key follows).
type modelKey struct {
	source      string
	head        string
	labels      int
	imageSize   int
	rank        int64
	targets     string // LoRA.Targets joined by NUL
	loraDType   gpumem.DType
	quant       gpumem.DType
	quantHead   bool
	method      string
	groupSize   int64
	unquantized gpumem.DType
	compute     gpumem.DType
	unfused     bool
	keepsInputs bool
	quantFrom   gpumem.DType
	blockwise   gpumem.Blockwise
	fp8Block    [2]int64
	// trainNone: Finetune.Train is set, which jobFor does for one
	// function only, training nothing (--frozen with --quant). No two
	// valid requests differ in it alone today (without frozen, a
	// quantized training job needs LoRA); it keeps the key exact.
	trainNone bool
}

// modelCache keeps the models the service has prepared, the least
// recently used dropped first once it holds max of them, so that a
// second request for the same model and fine-tuning setup skips
// budget.NewModel (most of an estimate request's time). It is safe for
// concurrent use; two requests that miss on the same key at once both
// build the model, and the first one stored is kept.
type modelCache struct {
	lru[modelKey, budget.Model]
	built atomic.Int64 // budget.NewModel calls, for tests
}

// prepare returns the function jobWith calls to turn the Finetune that
// f describes into a budget.Model for a model from source.
func (c *modelCache) prepare(source string, f *jobFlags) func(model.Finetune) (budget.Model, error) {
	return func(ft model.Finetune) (budget.Model, error) {
		k := modelKey{source: source, head: f.head, labels: f.labels, imageSize: f.imageSize,
			rank: ft.LoRA.Rank, targets: strings.Join(ft.LoRA.Targets, "\x00"), loraDType: ft.LoRA.DType,
			quant: ft.Quant, quantHead: ft.QuantizeHead, method: ft.Method, groupSize: ft.GroupSize, unquantized: ft.Unquantized,
			compute: ft.ComputeDType, unfused: ft.Unfused, keepsInputs: ft.KeepsInputs, quantFrom: ft.QuantFrom,
			blockwise: ft.Blockwise, fp8Block: ft.FP8Block,
			trainNone: ft.Train != nil}
		if m, ok := c.get(k); ok {
			return m, nil
		}
		c.built.Add(1)
		m, err := budget.NewModel(ft)
		if err != nil {
			return m, err // not kept: the error is cheap to find again
		}
		return c.put(k, m), nil
	}
}

// specCache keeps the catalog models the service has looked up, by the
// name the request gave, once checkModelSize has passed them:
// model.Lookup parses the catalog's config.json on every call, and
// checkModelSize builds the model's tensor runs. A model.Spec is a value
// that jobFor only copies (withHead, withLabels), so requests may share
// one.
type specCache struct {
	lru[string, model.Spec]
	looked atomic.Int64 // model.Lookup calls, for tests
}

// lru is a map of at most max entries (at least 1) that drops the least
// recently used one to make room. It is safe for concurrent use.
type lru[K comparable, V any] struct {
	mu      sync.Mutex
	max     int
	entries map[K]*list.Element
	order   list.List // of *lruEntry[K, V], the most recently used first
}

type lruEntry[K comparable, V any] struct {
	key K
	v   V
}

func (c *lru[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry[K, V]).v, true
}

// put stores v under k unless an entry is there already, and returns the
// stored value.
func (c *lru[K, V]) put(k K, v V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[K, V]).v
	}
	if c.entries == nil {
		c.entries = map[K]*list.Element{}
	}
	for c.order.Len() >= max(c.max, 1) {
		old := c.order.Back()
		delete(c.entries, old.Value.(*lruEntry[K, V]).key)
		c.order.Remove(old)
	}
	c.entries[k] = c.order.PushFront(&lruEntry[K, V]{key: k, v: v})
	return v
}

// len returns the number of entries.
func (c *lru[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
