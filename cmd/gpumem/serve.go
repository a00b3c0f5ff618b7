package main

import (
	"bytes"
	"context"
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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/request"
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
		return fmt.Errorf("%w: --max-body: %v", request.ErrUsage, err)
	}
	if limit < 1 {
		return fmt.Errorf("%w: --max-body %q: must be at least 1B", request.ErrUsage, *maxBody)
	}
	if *inflight < 0 {
		return fmt.Errorf("%w: --max-inflight %d: must not be negative", request.ErrUsage, *inflight)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("%w: --addr %q: %v", request.ErrUsage, *addr, err)
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
	defaults request.Flags // the estimate flags' defaults, shared with the CLI
	models   []byte        // GET /v1/models, rendered once
	devices  []byte        // GET /v1/devices, rendered once
	routes   map[string]route
	allow    map[string]string // path → Allow header
	cache    *request.Cache    // prepared models and catalog models looked up
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
	s.cache = request.NewCache(request.DefaultCacheSize)
	if s.timeout <= 0 {
		s.timeout = requestTimeout
	}
	if s.queue <= 0 {
		s.queue = queueTimeout
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	s.defaults.Register(fs) // the flags' registered defaults are the request's defaults
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

// ServeHTTP dispatches through the route table. Every reply, errors
// included, is JSON.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			// A panic is a bug in gpumem, never the client's fault.
			writeError(w, &request.Error{Status: http.StatusInternalServerError, Msg: fmt.Sprintf("internal error: %v", v)})
		}
	}()
	if servePage(w, r) {
		return // the page, not the API (serve_web.go)
	}
	rt, ok := s.routes[r.Method+" "+r.URL.Path]
	if !ok {
		if allow, known := s.allow[r.URL.Path]; known {
			w.Header().Set("Allow", allow)
			writeError(w, &request.Error{Status: http.StatusMethodNotAllowed,
				Msg: fmt.Sprintf("method %s not allowed on %s; use %s", r.Method, r.URL.Path, allow)})
			return
		}
		writeError(w, &request.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("no endpoint %s", r.URL.Path)})
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
			writeError(w, &request.Error{Status: http.StatusServiceUnavailable, Retry: true,
				Msg: fmt.Sprintf("busy: no compute slot became free within %v (gpumem serve --max-inflight)", s.queue)})
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
func stopped(ctx context.Context, when string) *request.Error {
	if when != "" {
		when = " " + when
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &request.Error{Status: http.StatusServiceUnavailable, Retry: true,
			Msg: fmt.Sprintf("the request passed its %s deadline%s", requestTimeoutOf(ctx), when)}
	}
	return &request.Error{Status: http.StatusServiceUnavailable, Msg: "the request was cancelled" + when}
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
		return &request.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("query string: %v", err)}
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		ok := false
		for _, n := range known {
			ok = ok || k == n
		}
		if !ok {
			if len(known) == 0 {
				return request.BadField(k, "unknown query parameter %q: %s takes none", k, r.URL.Path)
			}
			return request.BadField(k, "unknown query parameter %q: want %s", k, strings.Join(known, " or "))
		}
	}
	return nil
}

// readError turns an error reading the body into a reply.
func readError(err error) *request.Error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &request.Error{Status: http.StatusRequestEntityTooLarge,
			Msg: fmt.Sprintf("request body larger than %d bytes (gpumem serve --max-body)", mb.Limit)}
	}
	return &request.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("reading the request body: %v", err)}
}

// writeError writes err as JSON: {"error": "...", "field": "..."}.
func writeError(w http.ResponseWriter, err error) {
	var ae *request.Error
	if !errors.As(err, &ae) {
		ae = &request.Error{Status: http.StatusBadRequest, Msg: err.Error()}
	}
	v := struct {
		Error string `json:"error"`
		Field string `json:"field,omitempty"`
	}{ae.Msg, ae.Field}
	b, _ := json.MarshalIndent(v, "", "  ") // two strings: cannot fail
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if ae.Retry {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(ae.Status)
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
