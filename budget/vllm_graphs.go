package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// VLLMGraphs are the CUDA graphs vLLM captures under its default
// cudagraph_mode, FULL_AND_PIECEWISE (vllm-project/vllm: config/vllm.py
// at 09f030ea, v1/worker/gpu_model_runner.py at 000fc94b; the releases
// from v0.21.0 that size the graphs before the cache):
//
//   - Sizes is cudagraph_capture_sizes (VllmConfig._set_cudagraph_sizes,
//     vllm/config/vllm.py): with m = min(max_num_seqs × decode_query_len ×
//     2, 512, max_num_batched_tokens), the sizes 1, 2, 4 up to m, the
//     multiples of 8 below 256 up to m, then the multiples of 16 from 256
//     up to m; decode_query_len is 1 plus the speculative tokens;
//   - Piecewise is one PIECEWISE graph per size, for mixed prefill-decode
//     batches, and Full one FULL graph per size x with decode_query_len ≤ x
//     ≤ max_num_seqs × decode_query_len, for uniform decode batches
//     (the capture descriptors of CudagraphDispatcher that
//     GPUModelRunner.capture_model and profile_cudagraph_memory walk;
//     vLLM logs the counts as "Profiling CUDA graph memory: PIECEWISE=N
//     (largest=S), FULL=M (largest=T)").
//
// With max_num_seqs 256 that is 51 and 35 graphs, as vLLM's progress bars
// print them ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):
// 51/51", "(decode, FULL): 35"). Tensor parallelism with sequence
// parallelism enabled (which keeps only multiples of the TP size) and
// explicit capture sizes are not modelled.
type VLLMGraphs struct {
	Sizes           []int
	Piecewise, Full int
}

// VLLMCaptureSizes returns the graphs vLLM captures for --max-num-seqs
// maxNumSeqs (zero: 256), --max-num-batched-tokens maxNumBatchedTokens
// (zero: 2048, as VLLMOptions) and specTokens speculative tokens per step.
func VLLMCaptureSizes(maxNumSeqs, maxNumBatchedTokens, specTokens int) (VLLMGraphs, error) {
	switch {
	case maxNumSeqs < 0 || maxNumSeqs > 1<<20:
		return VLLMGraphs{}, gpumem.Errorf("Job.VLLM.MaxNumSeqs", maxNumSeqs, gpumem.ErrInvalid, "want 1 to 2^20 sequences (zero: 256)")
	case maxNumBatchedTokens < 0 || maxNumBatchedTokens > 1<<30:
		return VLLMGraphs{}, gpumem.Errorf("Job.VLLM.MaxNumBatchedTokens", maxNumBatchedTokens, gpumem.ErrInvalid, "want 1 to 2^30 tokens (zero: 2048)")
	case specTokens < 0 || specTokens > 1<<10:
		return VLLMGraphs{}, gpumem.Errorf("num_speculative_tokens", specTokens, gpumem.ErrInvalid, "want 0 to 1024 tokens")
	}
	seqs := maxNumSeqs
	if seqs == 0 {
		seqs = 256
	}
	tokens := maxNumBatchedTokens
	if tokens == 0 {
		tokens = 2048
	}
	q := 1 + specTokens
	m := min(seqs*q*2, 512, tokens)
	var g VLLMGraphs
	for _, s := range []int{1, 2, 4} {
		if s <= m {
			g.Sizes = append(g.Sizes, s)
		}
	}
	for s := 8; s < 256 && s <= m; s += 8 {
		g.Sizes = append(g.Sizes, s)
	}
	for s := 256; s <= m; s += 16 {
		g.Sizes = append(g.Sizes, s)
	}
	g.Piecewise = len(g.Sizes)
	for _, s := range g.Sizes {
		if s >= q && s <= seqs*q {
			g.Full++
		}
	}
	return g, nil
}

// VLLMGraphSamples are what vLLM's profile_cudagraph_memory measures for
// each mode before the cache is sized: the device memory the first (the
// largest) graph's capture took, and the second's. vLLM logs them at
// DEBUG level ("Estimated PIECEWISE CUDA graph memory: X MiB first-capture
// + (N-1) × Y MiB per-graph").
type VLLMGraphSamples struct {
	PiecewiseFirst, PiecewiseNext gpumem.Bytes
	FullFirst, FullNext           gpumem.Bytes
}

// vllmGraphFloor is the least per-graph cost profile_cudagraph_memory
// counts ("at least 1 MiB per graph for driver overhead").
const vllmGraphFloor = 1 << 20

// Estimate is vLLM's cudagraph_memory_estimate from the samples
// (GPUModelRunner.profile_cudagraph_memory, vllm/v1/worker/
// gpu_model_runner.py, vllm-project/vllm 000fc94b): the graphs of both
// modes share one memory pool, so the larger first capture counts once,
// and each further graph of a mode costs that mode's second sample (at
// least 1 MiB): max(first) + Σ per-graph × (graphs − 1). The per-graph
// cost is not derived from the model — vLLM itself measures it — so this
// is the rule for releases from v0.21.0, to be fed with one run's
// samples; VLLMOptions.CUDAGraphMemory takes its result (or vLLM's own
// "Estimated CUDA graph memory" line).
func (g VLLMGraphs) Estimate(s VLLMGraphSamples) (gpumem.Bytes, error) {
	for _, f := range []struct {
		name string
		v    gpumem.Bytes
	}{{"PiecewiseFirst", s.PiecewiseFirst}, {"PiecewiseNext", s.PiecewiseNext}, {"FullFirst", s.FullFirst}, {"FullNext", s.FullNext}} {
		if f.v < 0 {
			return 0, gpumem.Errorf("VLLMGraphSamples."+f.name, f.v, gpumem.ErrInvalid, "must not be negative")
		}
	}
	var total int64
	for _, m := range []struct {
		n           int
		first, next gpumem.Bytes
	}{{g.Piecewise, s.PiecewiseFirst, s.PiecewiseNext}, {g.Full, s.FullFirst, s.FullNext}} {
		if m.n <= 0 {
			continue
		}
		total = max(total, int64(m.first))
	}
	for _, m := range []struct {
		n    int
		next gpumem.Bytes
	}{{g.Piecewise, s.PiecewiseNext}, {g.Full, s.FullNext}} {
		if m.n <= 0 {
			continue
		}
		p, ok := checked.Mul(max(int64(m.next), vllmGraphFloor), int64(m.n-1))
		if ok {
			total, ok = checked.Add(total, p)
		}
		if !ok {
			return 0, errOverflow("vLLM CUDA graph estimate")
		}
	}
	return gpumem.Bytes(total), nil
}
