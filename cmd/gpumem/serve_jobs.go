package main

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/request"
)

// estimate answers POST /v1/estimate: the request is decoded and
// checked by package request, which names the field at fault.
func (s *server) estimate(out io.Writer, r *http.Request, body []byte) error {
	req, err := request.Decode(body)
	if err != nil {
		return err
	}
	jf, spec, source, err := s.cache.Check(req)
	if err != nil {
		return err
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	j, dev, err := s.cache.JobWith(&jf, spec, source)
	if err != nil {
		return err
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	s.computed.Add(1)
	e, err := request.Evaluate(j, dev)
	if err != nil {
		return request.LibraryError(err, request.JobFields(jf))
	}
	return writeEstimation(out, e)
}

// plan answers POST /v1/plan with the JSON of gpumem plan --json; a job
// that fits nowhere is 200 with "fits": false, the ladder and hints.
func (s *server) plan(out io.Writer, r *http.Request, body []byte) error {
	req := request.Plan{Estimate: request.Default()}
	if err := request.DecodeStrict(body, &req); err != nil {
		return err
	}
	largest := request.IsLargest(req.Model)
	if largest {
		req.Model = request.LargestPlaceholder
	} else if req.StatesOnly {
		return request.BadField("states_only", "only with \"model\": %q", request.LargestName)
	}
	if isOllama(req.Runtime) && req.Mode == "" && !req.Train {
		req.Infer = true // Ollama serves: the mode goes without saying
	}
	jf, spec, source, err := s.cache.Check(req.Estimate)
	if err != nil {
		return err
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	ollamaGPUs := jf.GPUs
	if isOllama(jf.Llama.Runtime) {
		jf.GPUs = 1 // the GPUs are Ollama's to fill, not a data-parallel layout
	}
	j, dev, err := s.cache.JobWith(&jf, spec, source)
	if err != nil {
		return err
	}
	if isOllama(jf.Llama.Runtime) {
		// Ollama's placement (gpumem plan --runtime ollama).
		s.computed.Add(1)
		p, flag, err := planOllama(j, dev, ollamaGPUs, func(flag string) string { return strings.ReplaceAll(flag, "-", "_") })
		if flag != "" {
			return request.BadField(strings.ReplaceAll(flag, "-", "_"), "%s", request.ForRequest(err.Error()))
		}
		if err != nil {
			return request.LibraryError(err, request.JobFields(jf))
		}
		return writeJSON(out, p.json())
	}
	if j.Runtime == budget.LlamaCpp {
		return request.BadField("runtime", "runtime %q: a plan searches the batch, sequence and memory savers of a PyTorch job; for llama.cpp ask /v1/estimate with n_gpu_layers and ctx_size", jf.Llama.Runtime)
	}
	if j.Runtime == budget.VLLM && req.Concurrency != 0 {
		if dev.Capacity == 0 {
			return request.BadField("gpu", "give gpu or memory to plan for")
		}
		s.computed.Add(1)
		p, err := planVLLM(j, dev, req.Concurrency)
		if err != nil {
			return request.LibraryError(err, request.JobFields(jf))
		}
		return writeJSON(out, p.json())
	}
	if req.Concurrency != 0 {
		return request.BadField("concurrency", "concurrency = %g: only with \"runtime\": \"vllm\"", req.Concurrency)
	}
	if j.Runtime == budget.VLLM || j.Runtime == budget.SGLang {
		return request.BadField("runtime", "runtime %q: a plan searches the batch, sequence and memory savers of a PyTorch job; for vLLM ask /v1/estimate with gpu_memory_utilization and max_model_len", jf.Llama.Runtime)
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	if dev.Capacity == 0 {
		return request.BadField("gpu", "give gpu or memory to plan for")
	}
	lim := budget.Limits{TargetGlobalBatch: req.TargetBatch, MinBatch: req.MinBatch, MaxBatch: req.MaxBatch,
		MinSeqLen: req.MinSeq, MaxSeqLen: req.MaxSeq}
	if err := parseAllow(req.Allow, &jf, &lim); err != nil {
		return request.BadField("allow", "%s", request.ForRequest(err.Error()))
	}
	if err := parseHeadroom(req.Headroom, &lim); err != nil {
		return request.BadField("headroom", "%s", request.ForRequest(err.Error()))
	}
	if lim.Objective, err = parseObjective(req.Maximize, &lim); err != nil {
		return request.BadField("maximize", "%s", request.ForRequest(err.Error()))
	}
	s.computed.Add(1)
	if largest {
		r, err := planLargest(j, dev, jf.Layout.Nodes, jf.GPUs, j.Parallel.GPUs() <= 1 || jf.Layout.Explicit, req.StatesOnly, &lim, "states_only")
		if err != nil {
			if errors.Is(err, request.ErrUsage) {
				return request.BadField("states_only", "%s", request.ForRequest(err.Error()))
			}
			var short *budget.InsufficientMemoryError
			if errors.As(err, &short) {
				return writeJSON(out, planErrorJSON(short, dev))
			}
			return request.LibraryError(err, request.JobFields(jf))
		}
		return r.write(out, dev, true)
	}
	var p budget.Plan
	if j.Parallel.GPUs() > 1 && !jf.Layout.Explicit {
		// GPUs but no layout: choose one, as plan does.
		p, err = budget.AllocateFleet(budget.Fleet{Nodes: jf.Layout.Nodes, GPUsPerNode: jf.GPUs, Free: dev.Free()}, j, &lim)
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
		// The Limits fields are named after their flags (FlagFor); the
		// limits as a whole are what allow changes.
		fields := request.JobFields(jf)
		fields["Limits"] = "allow"
		return request.LibraryError(err, fields)
	}
	res := planJSON(p, dev)
	if req.Configs {
		res["configs"] = planConfigs(p)
	}
	return writeJSON(out, res)
}
