package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// sglangFlags are SGLang's server arguments (budget.SGLangOptions);
// --tensor-parallel-size and --kv-cache-dtype are shared with vLLM
// (vllmFlags), as both engines name them so.
type SGLangFlags struct {
	MemFraction    float64 // --mem-fraction-static; 0: SGLang's default by TP
	MaxTotalTokens int     // --max-total-tokens; 0: no cap
	PageSize       int     // --page-size; 0: 1
	ContextLength  int     // --context-length; 0: the model's
}

// sglangFlagNames are the flags that only an SGLang job takes.
var sglangFlagNames = []string{"mem-fraction-static", "max-total-tokens", "page-size", "context-length"}

func (s *SGLangFlags) Register(fs *flag.FlagSet) {
	fs.Float64Var(&s.MemFraction, "mem-fraction-static", 0, "with --runtime sglang: the fraction of the free memory the weights and the KV pool may take, in (0, 1) (default SGLang's: 0.88 on one GPU, less with --tensor-parallel-size)")
	fs.IntVar(&s.MaxTotalTokens, "max-total-tokens", 0, "with --runtime sglang: a cap on the KV pool's tokens (default none)")
	fs.IntVar(&s.PageSize, "page-size", 0, "with --runtime sglang: tokens per page; the pool is whole pages (default 1)")
	fs.IntVar(&s.ContextLength, "context-length", 0, "with --runtime sglang: the longest request, for the concurrency printed (default the model's max_position_embeddings)")
}

// apply sets j's SGLang options (j.Runtime is set, and the vLLM flags
// applied: they set the shared --tensor-parallel-size and
// --kv-cache-dtype). On error it returns the flag at fault, without its
// dashes.
func (s *SGLangFlags) Apply(j *budget.Job) (string, error) {
	given := map[string]string{}
	if s.MemFraction != 0 {
		given["mem-fraction-static"] = strconv.FormatFloat(s.MemFraction, 'g', -1, 64)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max-total-tokens", s.MaxTotalTokens}, {"page-size", s.PageSize}, {"context-length", s.ContextLength}} {
		if c.v != 0 {
			given[c.name] = strconv.Itoa(c.v)
		}
	}
	if j.Runtime != budget.SGLang {
		for _, name := range sglangFlagNames {
			if v, ok := given[name]; ok {
				return name, fmt.Errorf("%w: --%s %s: it is an SGLang option (give --runtime sglang, or leave --%s out)", ErrUsage, name, v, name)
			}
		}
		return "", nil
	}
	if f := s.MemFraction; math.IsNaN(f) || f < 0 || f >= 1 {
		return "mem-fraction-static", fmt.Errorf("%w: --mem-fraction-static %s: want a fraction in (0, 1), such as 0.88", ErrUsage, given["mem-fraction-static"])
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max-total-tokens", s.MaxTotalTokens}, {"page-size", s.PageSize}, {"context-length", s.ContextLength}} {
		if c.v < 0 {
			return c.name, fmt.Errorf("%w: --%s %d: must not be negative", ErrUsage, c.name, c.v)
		}
	}
	o := &j.SGLang
	o.MemFractionStatic, o.MaxTotalTokens, o.PageSize, o.ContextLength = s.MemFraction, s.MaxTotalTokens, s.PageSize, s.ContextLength
	return "", nil
}

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
