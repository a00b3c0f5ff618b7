package gpujob

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/request"
)

// Answer is a job's estimate on one GPU kind: the figures the components
// compare with the nodes, bytes as integers. They are the fields of
// gpumem serve's POST /v1/estimate reply of the same names.
type Answer struct {
	AllocatedPeak int64
	ReservedPeak  int64
	DevicePeak    int64
	RequiredPeak  int64 // a paged optimizer: what the fit is checked against; 0 without one
	Phase         string
	Device        string
	Free          int64
	MinHeadroom   int64
	Fits          bool
	Shortfall     int64
	// Breakdown is the estimate itself, by component (Components).
	Breakdown budget.Breakdown
}

// Components maps each component's name to its bytes, as gpumem estimate
// --json's "components" does.
func (a Answer) Components() map[string]int64 {
	cs := a.Breakdown.Components()
	m := make(map[string]int64, len(cs))
	for _, c := range cs {
		m[c.Name] = int64(c.Bytes)
	}
	return m
}

// Need is the memory one GPU must set aside for the job: the peak the
// fit is checked against, plus its headroom.
func (a Answer) Need() int64 {
	return max(a.DevicePeak, a.RequiredPeak) + a.MinHeadroom
}

// Estimator estimates jobs: Local in the components.
type Estimator interface {
	// Estimate estimates req on each GPU kind of gpus, by GPU.Key.
	Estimate(ctx context.Context, req request.Estimate, gpus []GPU) (map[string]Answer, error)
	// Advice is what gpumem plan would change for req to fit on g: its
	// first fitting change, else its hints.
	Advice(ctx context.Context, req request.Estimate, g GPU) (string, error)
}

// RequestError is the job's fault: a field of its request at fault (a
// request.Error), with where the request came from.
type RequestError struct {
	Source string // "annotation gpumem.io/job", "labels gpumem.io/*"; "" when not known
	Field  string // the request field; "" when the request as a whole
	Msg    string
}

func (e *RequestError) Error() string {
	s := e.Msg
	if e.Field != "" {
		s = fmt.Sprintf("field %q: %s", e.Field, e.Msg)
	}
	if e.Source != "" {
		s = e.Source + ": " + s
	}
	return s
}

// IsRequestError reports whether err is the job's fault (a field of its
// request), not the component's.
func IsRequestError(err error) bool {
	var re *RequestError
	return errors.As(err, &re)
}

// requestError turns package request's errors into a RequestError from
// source; other errors pass unchanged.
func requestError(source string, err error) error {
	var e *request.Error
	if errors.As(err, &e) {
		return &RequestError{Source: source, Field: e.Field, Msg: e.Msg}
	}
	return err
}

// Local estimates in process, with the core module's package request:
// the request is checked, turned into a budget.Job and estimated exactly
// as gpumem serve's POST /v1/estimate does (one schema, one validation),
// without a network hop. The models it prepares are kept in a
// request.Cache, so that a job seen before costs its checks, its job's
// fields and budget.Estimate once per GPU kind. It is safe for
// concurrent use.
type Local struct {
	cache            *request.Cache
	estimates, plans atomic.Int64
}

// NewLocal returns a Local keeping up to request.DefaultCacheSize
// prepared models.
func NewLocal() *Local {
	return &Local{cache: request.NewCache(request.DefaultCacheSize)}
}

// Estimates counts the estimates made (one per job and GPU kind), Plans
// the plans (Advice), Built the models prepared (budget.NewModel calls):
// for tests and metrics.
func (l *Local) Estimates() int64 { return l.estimates.Load() }
func (l *Local) Plans() int64     { return l.plans.Load() }
func (l *Local) Built() int64     { return l.cache.Built() }

// target is the gpu or memory request field that names g: its catalog
// name, or its labelled memory in bytes.
func target(g GPU) (gpu, memory string) {
	if g.Catalog {
		return g.Device.Name, ""
	}
	return "", strconv.FormatInt(int64(g.Device.Capacity), 10) + "B"
}

// Estimate checks req and builds its job once (on the first GPU kind),
// then moves the job to every kind (request.Flags.OnDevice: the job's
// fields but its device are the same on every kind) and estimates it
// there: budget.Estimate once per kind, the model from the cache.
func (l *Local) Estimate(ctx context.Context, req request.Estimate, gpus []GPU) (out map[string]Answer, err error) {
	defer recovered(&err)
	out = make(map[string]Answer, len(gpus))
	if len(gpus) == 0 {
		return out, nil
	}
	f, spec, source, err := l.cache.Check(onGPU(req, gpus[0]))
	if err != nil {
		return nil, requestError("", err)
	}
	j, _, err := l.cache.JobWith(&f, spec, source)
	if err != nil {
		return nil, requestError("", err)
	}
	for _, g := range gpus {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k := g.Key()
		if _, done := out[k]; done {
			continue
		}
		f.GPU, f.Memory = target(g)
		var dev gpumem.Device
		if g.Catalog {
			dev, err = request.OnDeviceOf(&j, g.Device, true) // the catalog entry NodeGPU found
		} else {
			dev, err = f.OnDevice(&j)
		}
		if err == nil {
			l.estimates.Add(1)
			var r request.Result
			if r, err = request.Evaluate(j, dev); err == nil {
				out[k] = answerOf(r)
				continue
			}
		}
		return nil, requestError("", request.LibraryError(err, request.JobFields(f)))
	}
	return out, nil
}

// answerOf is the Answer of an estimate with a device.
func answerOf(r request.Result) Answer {
	a := Answer{AllocatedPeak: int64(r.Need.Allocated()), ReservedPeak: int64(r.Need.Reserved()),
		DevicePeak: int64(r.Need.Device()), Phase: r.Need.Phase.String(),
		Device: r.Device.Name, Free: int64(r.Device.Free()), MinHeadroom: int64(r.Headroom.Bytes),
		Fits: r.Fits, Shortfall: int64(r.Shortfall), Breakdown: r.Need}
	if r.Need.Paged != 0 {
		a.RequiredPeak = int64(r.Need.Required())
	}
	return a
}

// Advice plans req on g as gpumem plan does with no --allow (POST
// /v1/plan with the estimate request): budget.Allocate, or
// budget.AllocateFleet when the job names GPUs but no layout, for a
// PyTorch job; vLLM's and Ollama's own answers for theirs (vllmAdvice,
// ollamaAdvice). A llama.cpp or SGLang job has no plan (an error): its
// placement is the job's own flags (n_gpu_layers, mem_fraction_static),
// which gpumem plan does not search either.
func (l *Local) Advice(ctx context.Context, req request.Estimate, g GPU) (advice string, err error) {
	defer recovered(&err)
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if request.IsOllama(req.Runtime) {
		return l.ollamaAdvice(onGPU(req, g))
	}
	p, err := l.cache.Prepare(onGPU(req, g))
	if err != nil {
		return "", requestError("", err)
	}
	j, dev, f := p.Job, p.Device, p.Flags
	if j.Runtime == budget.VLLM {
		l.plans.Add(1)
		advice, err := vllmAdvice(j)
		if err != nil {
			return "", requestError("", request.LibraryError(err, request.JobFields(f)))
		}
		return advice, nil
	}
	if j.Runtime != budget.PyTorch {
		return "", fmt.Errorf("a plan searches the settings of a PyTorch, vLLM or Ollama job, not of %s", j.Runtime)
	}
	l.plans.Add(1)
	var lim budget.Limits
	var plan budget.Plan
	if j.Parallel.GPUs() > 1 && !f.Layout.Explicit {
		plan, err = budget.AllocateFleet(budget.Fleet{Nodes: f.Layout.Nodes, GPUsPerNode: f.GPUs, Free: dev.Free()}, j, &lim)
	} else {
		plan, err = budget.Allocate(dev.Free(), j, &lim)
	}
	var short *budget.InsufficientMemoryError
	if errors.As(err, &short) {
		return adviceOf(false, short.Hints, short.Ladder), nil
	}
	if err != nil {
		return "", requestError("", request.LibraryError(err, request.JobFields(f)))
	}
	return adviceOf(true, nil, plan.Ladder), nil
}

// vllmAdvice is gpumem plan --runtime vllm --concurrency 1 on the job's
// GPU: vLLM starts when its cache holds one request of max_model_len
// tokens (check_enough_kv_cache_memory, vllm/v1/core/kv_cache_utils.py;
// budget.VLLMReport), so the plan says the least gpu_memory_utilization
// at which it does (budget.VLLMUtilizationFor) and the longest
// max_model_len at the job's utilization (budget.VLLMMaxModelLenFor).
func vllmAdvice(j budget.Job) (string, error) {
	u, atU, uErr := budget.VLLMUtilizationFor(j, 1)
	if uErr != nil && !errors.Is(uErr, gpumem.ErrDoesNotFit) {
		return "", uErr
	}
	n, _, nErr := budget.VLLMMaxModelLenFor(j, 1)
	if nErr != nil && !errors.Is(nErr, gpumem.ErrDoesNotFit) {
		return "", nErr
	}
	given := j.VLLM.GPUMemoryUtilization
	if given == 0 {
		given = 0.9 // vLLM's default (EngineArgs.gpu_memory_utilization)
	}
	var parts []string
	if uErr == nil {
		parts = append(parts, fmt.Sprintf("gpu_memory_utilization %.4f for max_model_len %s", u, gpumem.Thousands(int64(atU.MaxModelLen))))
	} else {
		// VLLMUtilizationFor's sum, which it reports only in its error:
		// (weights + profile peak + non-torch + CUDA graphs + one
		// request's blocks) / total memory, rounded up to four decimals.
		need := float64(atU.Weights+atU.Activations+atU.NonTorch+atU.CUDAGraphs+atU.Needed) / float64(j.Device.Capacity)
		parts = append(parts, fmt.Sprintf("max_model_len %s needs gpu_memory_utilization %.4f, above 1", gpumem.Thousands(int64(atU.MaxModelLen)), math.Ceil(need*1e4)/1e4))
	}
	if nErr == nil {
		parts = append(parts, fmt.Sprintf("max_model_len %s at gpu_memory_utilization %.4g", gpumem.Thousands(int64(n)), given))
	} else {
		parts = append(parts, fmt.Sprintf("no max_model_len at gpu_memory_utilization %.4g", given))
	}
	return strings.Join(parts, ", or "), nil
}

// ollamaAdvice is gpumem plan --runtime ollama (POST /v1/plan with
// "runtime": "ollama") on req's GPU: Ollama v0.12.11's placement at the
// job's num_ctx (budget.OllamaLayers: the layers that fit, the rest on
// the CPU) and the longest num_ctx with every layer on the GPUs
// (budget.OllamaMaxContext). The request's gpus are Ollama's to fill,
// as the service takes them.
func (l *Local) ollamaAdvice(req request.Estimate) (string, error) {
	f, spec, source, err := l.cache.Check(req)
	if err != nil {
		return "", requestError("", err)
	}
	gpus := max(f.GPUs, 1)
	f.GPUs = 1 // the GPUs are Ollama's to fill, not a data-parallel layout
	j, dev, err := l.cache.JobWith(&f, spec, source)
	if err != nil {
		return "", requestError("", err)
	}
	l.plans.Add(1)
	o, field, err := request.OllamaOptions(j.LlamaCpp, func(flag string) string { return strings.ReplaceAll(flag, "-", "_") })
	if field != "" {
		return "", requestError("", request.BadField(strings.ReplaceAll(field, "-", "_"), "%s", request.ForRequest(err.Error())))
	}
	free := make([]gpumem.Bytes, gpus)
	for i := range free {
		free[i] = dev.Free()
	}
	at, err := budget.OllamaLayers(j.Model, free, o)
	if err != nil {
		return "", requestError("", request.LibraryError(err, request.JobFields(f)))
	}
	maxCtx, maxAt, err := budget.OllamaMaxContext(j.Model, free, o)
	if err != nil && !errors.Is(err, gpumem.ErrDoesNotFit) {
		return "", requestError("", request.LibraryError(err, request.JobFields(f)))
	}
	s := fmt.Sprintf("Ollama %s puts %d of %d layers on the GPU at num_ctx %s", budget.OllamaVersion, at.Layers, at.Slots, gpumem.Thousands(int64(at.Context)))
	if !at.Full {
		s += " (the rest on the CPU)"
	}
	if err != nil {
		return s + fmt.Sprintf("; not every layer fits at any num_ctx (%d of %d at one token)", maxAt.Layers, maxAt.Slots), nil
	}
	return s + fmt.Sprintf("; every layer up to num_ctx %s", gpumem.Thousands(int64(maxCtx))), nil
}

// adviceOf words a plan: the changes it applied when they make the job
// fit, else its hints.
func adviceOf(fits bool, hints []string, ladder []budget.Rung) string {
	var applied []string
	for _, r := range ladder {
		if r.Applied && r.Change != "as given" {
			applied = append(applied, r.Change)
		}
	}
	switch {
	case fits && len(applied) > 0:
		return strings.Join(applied, ", ")
	case len(hints) > 0:
		return strings.Join(hints, "; ")
	case len(applied) > 0:
		return strings.Join(applied, ", ") + " (still short)"
	}
	return "no change found"
}

// recovered turns a panic of the library into an error: a bug in
// gpumem, which must not take the component down with it.
func recovered(err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("gpumem: internal error: %v", v)
	}
}
