package main

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/leak"
	"github.com/gpumem/gpumem/request"
)

// oom answers POST /v1/oom: the body is the message (or a whole log) as
// text, or {"message": "..."} with Content-Type application/json.
func (s *server) oom(out io.Writer, r *http.Request, body []byte) error {
	text := string(body)
	if isJSON(r) {
		var req request.OOM
		if err := request.DecodeStrict(body, &req); err != nil {
			return err
		}
		text = req.Message
	}
	o, ok := leak.ParseOOM(text)
	if !ok {
		return &request.Error{Status: http.StatusUnprocessableEntity, Field: "message",
			Msg: "no out-of-memory message found in the input"}
	}
	return writeOOMJSON(out, o, o.Diagnose())
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
			return request.BadField("run", "want an integer of 1 or more, got %q", v)
		}
		run = n
	}
	text, series := body, false
	if isJSON(r) {
		var req request.Leak
		if err := request.DecodeStrict(body, &req); err != nil {
			return err
		}
		c, err := request.SizeText("capacity", req.Capacity)
		if err != nil {
			return err
		}
		if c != "" && capacity != "" {
			return request.BadField("capacity", "give capacity in the JSON body or the query string, not both")
		}
		if req.GPU != "" && gpu != "" {
			return request.BadField("gpu", "give gpu in the JSON body or the query string, not both")
		}
		if req.Unit != "" && unitText != "" {
			return request.BadField("unit", "give unit in the JSON body or the query string, not both")
		}
		if req.Run != nil && q.Get("run") != "" {
			return request.BadField("run", "give run in the JSON body or the query string, not both")
		}
		if req.Run != nil {
			run = *req.Run
		}
		capacity, gpu, unitText, text, series = capacity+c, gpu+req.GPU, unitText+req.Unit, []byte(req.Log), req.Series
	}
	if run < 1 {
		return request.BadField("run", "want 1 or more (runs are numbered from 1), got %d", run)
	}
	var unit gpumem.Bytes
	if unitText != "" {
		u, err := parseUnit(unitText)
		if err != nil {
			return request.BadField("unit", "%s", request.ForRequest(err.Error()))
		}
		unit = u
	}
	opts := leak.Options{Run: run - 1}
	switch {
	case capacity != "" && gpu != "":
		return request.BadField("capacity", "give one of capacity and gpu")
	case capacity != "":
		if err := request.CheckTarget("capacity", capacity); err != nil {
			return err
		}
		b, _ := gpumem.ParseBytes(capacity)
		opts.Capacity = b
	case gpu != "":
		d, ok := gpumem.LookupDevice(gpu)
		if !ok {
			return request.BadField("gpu", "unknown GPU %q (see GET /v1/devices)", gpu)
		}
		opts.Capacity = d.Capacity
	}
	samples, rr, err := readLog(text, unit, &opts)
	if errors.Is(err, leak.ErrNoSamples) {
		return &request.Error{Status: http.StatusUnprocessableEntity, Field: "log", Msg: request.ForRequest(err.Error())}
	}
	if err != nil {
		ae := request.LibraryError(err, nil)
		var fe *gpumem.FieldError
		if errors.As(err, &fe) && !strings.HasPrefix(fe.Field, "ReadOptions.") {
			// The message keeps the place in the log: "line 12 = 5Gb: ...",
			// "device_traces[0][3].size = -5: ..." of a memory snapshot:
			// a log that does not read, 422 as one without a figure.
			ae.Field = "log"
			ae.Status = http.StatusUnprocessableEntity
		}
		return ae
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	s.computed.Add(1)
	rep, err := leak.Analyze(samples, &opts)
	if err != nil {
		return request.LibraryError(err, map[string]string{"Options.Capacity": "capacity", "Options.Run": "run"})
	}
	if rep.Run >= rep.Runs {
		return request.BadField("run", "the log has %d run(s), got run %d", rep.Runs, run)
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
