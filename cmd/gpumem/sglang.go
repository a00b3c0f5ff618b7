package main

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// writeSGLang prints SGLang's pool as its start-up log does.
func writeSGLang(out io.Writer, j budget.Job, r *budget.SGLangReport) {
	gib := func(b gpumem.Bytes) string { return fmt.Sprintf("%.2f GB", float64(b)/(1<<30)) }
	srow := func(name, v string) { fmt.Fprintf(out, "  %-38s %14s\n", name, v) }
	fmt.Fprint(out, "SGLang (per GPU")
	if tp := j.SGLang.TensorParallel; tp > 1 {
		fmt.Fprintf(out, " of %d, tensor parallel", tp)
	}
	fmt.Fprintf(out, ", mem_fraction_static %.3g; GB as SGLang prints them, 2^30 bytes):\n", r.MemFractionStatic)
	srow("Load weight begin. avail mem", gib(r.Baseline))
	srow("model weights", gib(r.Weights))
	srow("Load weight end. avail mem", gib(r.Baseline-r.Weights))
	srow("reserved (1 − mem_fraction_static)", gib(r.Reserved))
	srow("KV pool memory", gib(max(r.Rest, 0)))
	fmt.Fprintf(out, "  KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB\n", r.Tokens,
		float64(r.KSize)/(1<<30), float64(r.VSize)/(1<<30))
	if r.ContextLength > 0 {
		fmt.Fprintf(out, "  requests of %s tokens the pool holds at once: %.2f\n", gpumem.Thousands(int64(r.ContextLength)), r.Concurrency)
		fmt.Fprintf(out, "  least mem_fraction_static for one request of %s tokens: %.3f\n", gpumem.Thousands(int64(r.ContextLength)), r.MinFraction)
	}
	if r.Refused != "" {
		fmt.Fprintf(out, "SGLang would refuse to start: RuntimeError: %s\n", r.Refused)
	}
	fmt.Fprintln(out)
}

// sglangJSON is the "sglang" object of the --json output.
func sglangJSON(r *budget.SGLangReport) map[string]any {
	return map[string]any{
		"mem_fraction_static": r.MemFractionStatic, "baseline": int64(r.Baseline), "weights": int64(r.Weights),
		"reserved": int64(r.Reserved), "kv_pool_memory": int64(max(r.Rest, 0)), "cell_bytes": int64(r.CellBytes),
		"max_total_num_tokens": r.Tokens, "k_size": int64(r.KSize), "v_size": int64(r.VSize),
		"context_length": r.ContextLength, "max_concurrency": r.Concurrency, "min_mem_fraction_static": r.MinFraction,
		"refused": r.Refused,
	}
}
