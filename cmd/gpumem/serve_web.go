package main

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/leak"
	"github.com/gpumem/gpumem/request"
)

// The page of gpumem serve: plain HTML, CSS and JavaScript in web/,
// embedded in the binary, which fetches nothing from elsewhere and calls
// the service's own endpoints (cmd/gpumem/README.md, "The page").
//
//go:embed web/index.html web/app.css web/app.js
var webFiles embed.FS

// webPage is one file of the page.
type webPage struct {
	ctype string
	body  []byte
	etag  string
}

// webPages are the page's files by URL path, read once.
var webPages = func() map[string]webPage {
	m := map[string]webPage{}
	for path, f := range map[string]struct{ file, ctype string }{
		"/":        {"web/index.html", "text/html; charset=utf-8"},
		"/app.css": {"web/app.css", "text/css; charset=utf-8"},
		"/app.js":  {"web/app.js", "text/javascript; charset=utf-8"},
	} {
		b, err := webFiles.ReadFile(f.file)
		if err != nil {
			panic(err) // embedded: a missing file fails the build's tests
		}
		sum := sha256.Sum256(b)
		m[path] = webPage{ctype: f.ctype, body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return m
}()

// pagePolicy is the page's Content-Security-Policy: its own script,
// style and requests only, so that nothing is fetched from elsewhere and
// no inline script runs.
const pagePolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// servePage answers GET and HEAD of the page's files and reports
// whether r was for one. Another method gets the API's 405. The query
// string is not read: the page keeps the job in the URL's fragment.
func servePage(w http.ResponseWriter, r *http.Request) bool {
	p, ok := webPages[r.URL.Path]
	if !ok {
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, &request.Error{Status: http.StatusMethodNotAllowed,
			Msg: fmt.Sprintf("method %s not allowed on %s; use GET, HEAD", r.Method, r.URL.Path)})
		return true
	}
	h := w.Header()
	h.Set("Content-Type", p.ctype)
	h.Set("Content-Security-Policy", pagePolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", p.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(p.body))
	return true
}

// planConfig is one framework configuration of a plan: its text as
// plan writes it, the plan flag that writes it, or why it does not
// apply.
type planConfig struct {
	Text  string `json:"text,omitempty"`
	Flag  string `json:"flag"`
	Error string `json:"error,omitempty"`
}

// planConfigs renders what plan --deepspeed FILE, --accelerate FILE,
// --hf-args and --megatron write for the plan p, by the names
// deepspeed, accelerate, training_arguments and megatron; a
// configuration that does not apply to p carries the library's reason.
func planConfigs(p budget.Plan) map[string]planConfig {
	m := map[string]planConfig{}
	set := func(name, flag string, text string, err error) {
		if err != nil {
			m[name] = planConfig{Flag: flag, Error: err.Error()}
			return
		}
		m[name] = planConfig{Flag: flag, Text: text}
	}
	ds, err := p.DeepSpeed()
	var raw []byte
	if err == nil {
		raw, err = ds.MarshalIndent()
	}
	set("deepspeed", "--deepspeed ds_config.json", string(raw)+"\n", err)
	acc, err := p.Accelerate()
	var y []byte
	if err == nil {
		y, err = acc.YAML()
	}
	set("accelerate", "--accelerate accelerate_config.yaml", string(y), err)
	line, err := hfArgsLine(p)
	set("training_arguments", "--hf-args", line, err)
	args, err := p.Megatron()
	set("megatron", "--megatron", strings.Join(args, " "), err)
	return m
}

// seriesJSON is what "series": true adds to a /v1/leak reply: the
// points the trend was fitted to and the fitted line from the first
// point to the last one, or to the forecast OOM when it lies beyond.
type seriesJSON struct {
	Series []pointJSON `json:"series"`
	Trend  []pointJSON `json:"trend"`
}

// pointJSON is a leak.Point on the wire, bytes as an integer.
type pointJSON struct {
	X     float64 `json:"x"`
	Bytes int64   `json:"bytes"`
}

// leakSeries adds the series and the trend of rep (analyzed from
// samples with opts) to the reply j.
func leakSeries(j json.RawMessage, rep leak.Report, samples []leak.Sample, opts *leak.Options) (json.RawMessage, error) {
	pts := rep.Series(samples, opts)
	v := seriesJSON{Series: make([]pointJSON, len(pts)), Trend: []pointJSON{}}
	for i, p := range pts {
		v.Series[i] = pointJSON{p.X, int64(p.Bytes)}
	}
	if n := len(v.Series); n > 0 {
		x0, x1 := v.Series[0].X, v.Series[n-1].X
		if rep.OOM.OK && rep.OOM.Step > x1 {
			x1 = rep.OOM.Step
		}
		for _, x := range []float64{x0, x1} {
			if y, ok := rep.Trend(x); ok {
				v.Trend = append(v.Trend, pointJSON{X: x, Bytes: int64(clampBytes(y))})
			}
		}
	}
	extra, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := append(j[:len(j)-1:len(j)-1], ',')
	out = append(out, extra[1:]...)
	return out, nil
}

// clampBytes rounds a fitted value to bytes, within int64.
func clampBytes(y float64) gpumem.Bytes {
	switch {
	case y != y: // NaN
		return 0
	case y >= math.MaxInt64:
		return math.MaxInt64
	case y <= math.MinInt64:
		return math.MinInt64
	}
	return gpumem.Bytes(math.Round(y))
}
