package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/request"
)

// isOllama is request.IsOllama.
func isOllama(runtime string) bool { return request.IsOllama(runtime) }

// ollamaPlan is the answer of gpumem plan --runtime ollama: Ollama's
// placement at the given num_ctx and the longest num_ctx that keeps
// every layer on the GPUs.
type ollamaPlan struct {
	at         budget.OllamaReport
	maxCtx     int
	maxAt      budget.OllamaReport
	maxErr     error // gpumem.ErrDoesNotFit: not every layer fits at any context
	dev        gpumem.Device
	gpus       int
	name       string
	cacheTypes string
}

// ollamaOptions is request.OllamaOptions.
func ollamaOptions(o budget.LlamaCppOptions, name func(string) string) (budget.OllamaOptions, string, error) {
	return request.OllamaOptions(o, name)
}

// planOllama answers gpumem plan --runtime ollama for the job j (a
// llama.cpp job built from the flags) on gpus GPUs like dev. On a usage
// error it returns the flag at fault, without its dashes.
func planOllama(j budget.Job, dev gpumem.Device, gpus int, name func(string) string) (ollamaPlan, string, error) {
	p := ollamaPlan{dev: dev, gpus: max(gpus, 1), name: j.Model.Spec().Name}
	if dev.Capacity == 0 {
		return p, "gpu", fmt.Errorf("%w: give %s NAME or %s SIZE: Ollama places the layers by the GPU's free memory", request.ErrUsage, name("gpu"), name("memory"))
	}
	o, flag, err := ollamaOptions(j.LlamaCpp, name)
	if err != nil {
		return p, flag, err
	}
	free := make([]gpumem.Bytes, p.gpus)
	for i := range free {
		free[i] = dev.Free()
	}
	if p.at, err = budget.OllamaLayers(j.Model, free, o); err != nil {
		return p, "", err
	}
	p.maxCtx, p.maxAt, err = budget.OllamaMaxContext(j.Model, free, o)
	if err != nil && !errors.Is(err, gpumem.ErrDoesNotFit) {
		return p, "", err
	}
	p.maxErr = err
	return p, "", nil
}

func (p *ollamaPlan) write(out io.Writer) {
	r := &p.at
	model := p.name
	if model == "" {
		model = "the model"
	}
	on := fmt.Sprintf("%s (%s free)", request.Clean(p.dev.Name), p.dev.Free().String())
	if strings.HasSuffix(p.dev.Name, "of free memory") {
		on = request.Clean(p.dev.Name) // --memory
	}
	if p.gpus > 1 {
		on = fmt.Sprintf("%d × %s (%s free each)", p.gpus, request.Clean(p.dev.Name), p.dev.Free().String())
	}
	fmt.Fprintf(out, "%s (%s, %d layers with the output layer) under Ollama %s's placement on %s:\n",
		model, r.Arch, r.Slots, budget.OllamaVersion, on)
	fmt.Fprintf(out, "  num_ctx %s, num_batch %d, %d parallel, flash attention %v: %d/%d layers on the GPU",
		gpumem.Thousands(int64(r.Context)), r.Batch, r.Parallel, r.FlashAttn, r.Layers, r.Slots)
	if r.GPUs > 1 {
		fmt.Fprintf(out, " (split %s over %d GPUs)", joinInts(r.TensorSplit), r.GPUs)
	}
	if r.Layers == 0 {
		fmt.Fprintf(out, ": none fits beside the graph and the %s Ollama keeps free; it runs on the CPU\n", gpumem.Bytes(457<<20).String())
	} else {
		fmt.Fprintf(out, ", %s of GPU memory\n", r.VRAM.String())
	}
	fmt.Fprintf(out, "    weights %s in blocks + %s output layer, KV cache %s, graph %s (%s offload), 457 MiB minimum and one layer's buffer per GPU\n",
		r.Repeating.String(), r.Output.String(), r.KV.String(), r.Graph.String(), map[bool]string{true: "full", false: "partial"}[r.Full])
	if !r.Full {
		fmt.Fprintf(out, "    %s runs on the CPU (Ollama's total %s)\n", (r.Total - r.VRAM).String(), r.Total.String())
	}
	if p.maxErr != nil {
		fmt.Fprintf(out, "  not every layer fits at any num_ctx: %d/%d at one token\n", p.maxAt.Layers, p.maxAt.Slots)
		return
	}
	fmt.Fprintf(out, "  longest num_ctx with every layer on the GPU: %s (KV cache %s, %s of GPU memory)",
		gpumem.Thousands(int64(p.maxCtx)), p.maxAt.KV.String(), p.maxAt.VRAM.String())
	fmt.Fprintln(out)
}

func (p *ollamaPlan) json() map[string]any {
	r := &p.at
	sizes := make([]int64, len(r.GPUSizes))
	for i, s := range r.GPUSizes {
		sizes[i] = int64(s)
	}
	m := map[string]any{
		"runtime": "ollama", "ollama_version": budget.OllamaVersion, "arch": r.Arch,
		"gpu": request.Clean(p.dev.Name), "gpus": p.gpus, "free": int64(p.dev.Free()),
		"num_ctx": r.Context, "num_batch": r.Batch, "parallel": r.Parallel, "flash_attn": r.FlashAttn,
		"layers": r.Layers, "slots": r.Slots, "full_offload": r.Full, "gpus_used": r.GPUs,
		"tensor_split": r.TensorSplit, "gpu_sizes": sizes, "vram": int64(r.VRAM), "total": int64(r.Total),
		"kv": int64(r.KV), "graph": int64(r.Graph), "graph_full": int64(r.GraphFull), "graph_partial": int64(r.GraphPartial),
		"weights_repeating": int64(r.Repeating), "weights_output": int64(r.Output),
	}
	if p.maxErr == nil {
		m["max_num_ctx"] = p.maxCtx
		m["max_num_ctx_vram"] = int64(p.maxAt.VRAM)
	} else {
		m["max_num_ctx"] = 0
	}
	return m
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
