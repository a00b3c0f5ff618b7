package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/request"
)

// vllmPlan is the answer of gpumem plan --runtime vllm --concurrency C:
// the least gpu_memory_utilization that holds C requests of
// max_model_len at once, and the longest max_model_len that holds C at
// the utilization given (budget.VLLMUtilizationFor, VLLMMaxModelLenFor).
type vllmPlan struct {
	concurrency float64
	util        float64 // 0 when no utilization serves it
	utilErr     error
	atUtil      budget.VLLMReport
	maxLen      int // 0 when nothing fits
	maxLenErr   error
	atLen       budget.VLLMReport
	given       float64 // the utilization of the max_model_len answer
	dev         gpumem.Device
}

// planVLLM answers for the vLLM job j on dev; errors other than "does
// not fit" are returned.
func planVLLM(j budget.Job, dev gpumem.Device, concurrency float64) (vllmPlan, error) {
	p := vllmPlan{concurrency: concurrency, dev: dev, given: j.VLLM.GPUMemoryUtilization}
	if p.given == 0 {
		p.given = 0.9
	}
	var err error
	p.util, p.atUtil, err = budget.VLLMUtilizationFor(j, concurrency)
	if err != nil && !isDoesNotFit(err) {
		return p, err
	}
	p.utilErr = err
	p.maxLen, p.atLen, err = budget.VLLMMaxModelLenFor(j, concurrency)
	if err != nil && !isDoesNotFit(err) {
		return p, err
	}
	p.maxLenErr = err
	return p, nil
}

func (p *vllmPlan) write(out io.Writer, j budget.Job) {
	fmt.Fprintf(out, "%s under vLLM on %s (%s total), %g requests at once:\n", request.Describe(j), request.Clean(p.dev.Name),
		gpumem.Bytes(j.Device.Capacity).String(), p.concurrency)
	if p.utilErr != nil {
		fmt.Fprintf(out, "  max_model_len %s: no --gpu-memory-utilization serves it (%v)\n", gpumem.Thousands(int64(p.atUtil.MaxModelLen)), p.utilErr)
	} else {
		fmt.Fprintf(out, "  max_model_len %s: --gpu-memory-utilization %.4f (KV cache %s, %s tokens, %.2fx)\n",
			gpumem.Thousands(int64(p.atUtil.MaxModelLen)), p.util, p.atUtil.KVMemory.String(), gpumem.Thousands(p.atUtil.Tokens), p.atUtil.Concurrency)
	}
	if p.maxLenErr != nil {
		fmt.Fprintf(out, "  --gpu-memory-utilization %.4g: no max_model_len serves it (%v)\n", p.given, p.maxLenErr)
	} else {
		fmt.Fprintf(out, "  --gpu-memory-utilization %.4g: the longest --max-model-len is %s (KV cache %s, %s tokens, %.2fx)\n",
			p.given, gpumem.Thousands(int64(p.maxLen)), p.atLen.KVMemory.String(), gpumem.Thousands(p.atLen.Tokens), p.atLen.Concurrency)
	}
}

func (p *vllmPlan) json() map[string]any {
	m := map[string]any{"runtime": "vllm", "concurrency": p.concurrency, "gpu": request.Clean(p.dev.Name),
		"max_model_len": p.atUtil.MaxModelLen, "gpu_memory_utilization": p.given}
	if p.utilErr == nil {
		m["min_gpu_memory_utilization"] = p.util
		m["kv_cache_memory_at_min"] = int64(p.atUtil.KVMemory)
	} else {
		m["min_gpu_memory_utilization"] = 0
	}
	if p.maxLenErr == nil {
		m["max_max_model_len"] = p.maxLen
		m["kv_tokens"] = p.atLen.Tokens
	} else {
		m["max_max_model_len"] = 0
	}
	return m
}

func isDoesNotFit(err error) bool { return errors.Is(err, gpumem.ErrDoesNotFit) }
