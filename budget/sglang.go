package budget

import (
	"math"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// SGLangOptions are SGLang's server arguments that size its KV pool
// (python/sglang/srt/server_args.py; the flags of sglang.launch_server in
// parentheses). The zero value is SGLang's defaults for one GPU.
type SGLangOptions struct {
	// MemFractionStatic is --mem-fraction-static: the fraction of the
	// free memory measured before the weights load that the weights and
	// the KV pool may take. Zero means SGLang's default by tensor
	// parallelism of its 2025 releases (ServerArgs.__post_init__): 0.88
	// for one GPU, 0.87 for 2–3, 0.85 for 4–7, 0.81 for 8–15, 0.79 for 16
	// or more. (Releases from late 2025 derive it from the GPU's memory
	// instead: give it then.) It must lie in (0, 1).
	MemFractionStatic float64
	// TensorParallel is --tp-size; zero means 1. Each rank holds 1/TP of
	// the weights and max(1, KV heads / TP) KV heads.
	TensorParallel int
	// KVCacheDType is --kv-cache-dtype: Invalid (zero, "auto") means the
	// weights' dtype; FP8E5M2 or FP8E4M3 a one-byte cache.
	KVCacheDType gpumem.DType
	// MaxTotalTokens is --max-total-tokens, a cap on the pool; zero means
	// none.
	MaxTotalTokens int
	// PageSize is --page-size, the tokens of one page; the pool is
	// rounded down to whole pages. Zero means 1.
	PageSize int
	// ContextLength is --context-length, the longest request; zero means
	// the model's max_position_embeddings (else Job.SeqLen +
	// Job.Generate). It sizes the reported concurrency only.
	ContextLength int
	// NonTorch is memory taken before SGLang measures its baseline
	// besides the CUDA context (NCCL's buffers under tensor
	// parallelism); zero means none.
	NonTorch gpumem.Bytes
}

// SGLangReport is one rank's KV pool as SGLang sizes it at start-up
// (ModelRunner.profile_max_num_token and init_memory_pool,
// python/sglang/srt/model_executor/model_runner.py): the lines "Load
// weight begin. avail mem=X GB" (Baseline), "Load weight end. ... avail
// mem=X GB" (Baseline − Weights) and "KV Cache is allocated. #tokens: N,
// K size: X GB, V size: Y GB" (Tokens, KSize, VSize).
type SGLangReport struct {
	MemFractionStatic float64      // as used
	Baseline          gpumem.Bytes // total_gpu_memory: free memory after the CUDA context and NCCL, before the weights
	Weights           gpumem.Bytes // this rank's weights
	Reserved          gpumem.Bytes // Baseline × (1 − mem_fraction_static): left for activations and CUDA graphs
	Rest              gpumem.Bytes // Baseline − Weights − Reserved: the pool's memory (negative: nothing)
	CellBytes         gpumem.Bytes // one token's K and V over all layers
	Tokens            int64        // max_total_num_tokens
	KSize, VSize      gpumem.Bytes // the pool's K and V buffers (an MLA pool's latent in KSize)
	ContextLength     int
	Concurrency       float64 // Tokens / ContextLength
	// MinFraction is the least mem_fraction_static that gives one
	// request of ContextLength its tokens: (Weights + ContextLength ×
	// CellBytes) / Baseline; at 1 or above, no fraction does.
	MinFraction float64
	// Refused is SGLang's RuntimeError when the pool would hold no
	// token, or "".
	Refused string
}

// SGLangBuffers returns how SGLang sizes j's KV pool on one rank; j must
// have Runtime SGLang and a Device with a Capacity. A job SGLang would
// refuse is no error: the report's Refused holds SGLang's message.
func SGLangBuffers(j Job) (SGLangReport, error) {
	if err := j.validate(); err != nil {
		return SGLangReport{}, err
	}
	if j.Runtime != SGLang {
		return SGLangReport{}, gpumem.Errorf("Job.Runtime", j.Runtime, gpumem.ErrInvalid, "SGLangBuffers needs Runtime SGLang")
	}
	return sglangBuffers(&j)
}

// sglangDefaultFraction is ServerArgs' mem_fraction_static by tensor
// parallelism (server_args.py, SGLang 2025 releases).
func sglangDefaultFraction(tp int) float64 {
	switch {
	case tp >= 16:
		return 0.79
	case tp >= 8:
		return 0.81
	case tp >= 4:
		return 0.85
	case tp >= 2:
		return 0.87
	}
	return 0.88
}

// validateSGLang checks the SGLang options of j.
func (j *Job) validateSGLang() error {
	o := &j.SGLang
	if j.Runtime != SGLang {
		if *o != (SGLangOptions{}) {
			return gpumem.Errorf("Job.SGLang", "set", gpumem.ErrInvalid, "SGLang options need Runtime SGLang")
		}
		return nil
	}
	if err := j.validateServing("SGLang", "an SGLang job's tensor parallelism is SGLang.TensorParallel",
		"an SGLang pool's type and page are SGLang.KVCacheDType and PageSize"); err != nil {
		return err
	}
	f := o.MemFractionStatic
	switch {
	case math.IsNaN(f) || f < 0 || f >= 1:
		return gpumem.Errorf("Job.SGLang.MemFractionStatic", f, gpumem.ErrInvalid, "want a fraction in (0, 1) (zero: SGLang's default)")
	case o.TensorParallel < 0 || o.TensorParallel > 1024:
		return gpumem.Errorf("Job.SGLang.TensorParallel", o.TensorParallel, gpumem.ErrInvalid, "want 1 to 1024 GPUs (zero: 1)")
	case o.MaxTotalTokens < 0:
		return gpumem.Errorf("Job.SGLang.MaxTotalTokens", o.MaxTotalTokens, gpumem.ErrInvalid, "must not be negative (zero: no cap)")
	case o.PageSize < 0 || o.PageSize > 1<<16:
		return gpumem.Errorf("Job.SGLang.PageSize", o.PageSize, gpumem.ErrInvalid, "want 1 to 65536 tokens (zero: 1)")
	case o.ContextLength < 0 || o.ContextLength > 1<<30:
		return gpumem.Errorf("Job.SGLang.ContextLength", o.ContextLength, gpumem.ErrInvalid, "want 1 to 2^30 tokens (zero: the model's)")
	case o.NonTorch < 0:
		return gpumem.Errorf("Job.SGLang.NonTorch", o.NonTorch, gpumem.ErrInvalid, "must not be negative")
	}
	switch o.KVCacheDType {
	case gpumem.Invalid, gpumem.FP16, gpumem.BF16, gpumem.FP32, gpumem.FP8E4M3, gpumem.FP8E5M2:
	default:
		return gpumem.Errorf("Job.SGLang.KVCacheDType", o.KVCacheDType, gpumem.ErrInvalid, "not an SGLang cache dtype (auto, fp8_e5m2, fp8_e4m3)")
	}
	if err := checkTPHeads(j, "Job.SGLang.TensorParallel", o.TensorParallel, "SGLang"); err != nil {
		return err
	}
	return j.needsDevice("SGLang sizes its pool from the GPU's free memory: give the device")
}

// sglangBuffers sizes j's SGLang pool; j is valid.
//
// profile_max_num_token (model_runner.py, sgl-project/sglang 01cc04e2;
// the arithmetic is unchanged in the 2025 releases, which moved it to
// model_runner_kv_cache_mixin.py): total_gpu_memory is the free memory
// init_torch_distributed measures after the CUDA context and NCCL are
// set up (the minimum over the ranks), available_gpu_memory the free
// memory after the weights load, and
//
//	rest_memory = available_gpu_memory − total_gpu_memory × (1 − mem_fraction_static)
//	max_num_token = rest_memory // cell_size
//
// with cell_size = KV heads per rank (max(1, heads / TP)) × head_dim ×
// layers × 2 × the cache dtype's bytes, or for an MLA model
// (kv_lora_rank + qk_rope_head_dim) × layers × bytes. init_memory_pool
// caps it at --max-total-tokens, rounds it down to --page-size, and
// raises "Not enough memory. Please try to increase
// --mem-fraction-static." when nothing is left. Here total_gpu_memory is
// the device's capacity less the CUDA context and NonTorch, and the
// weights are the only thing loading takes.
func sglangBuffers(j *Job) (SGLangReport, error) {
	o := j.SGLang
	var r SGLangReport
	tp := int64(max(o.TensorParallel, 1))
	r.MemFractionStatic = o.MemFractionStatic
	if r.MemFractionStatic == 0 {
		r.MemFractionStatic = sglangDefaultFraction(int(tp))
	}
	ctx := j.Overhead.resolve(false, j.Device).Context
	r.Baseline = gpumem.Bytes(max(checked.SatSum(int64(j.Device.Capacity), -int64(ctx), -int64(o.NonTorch)), 0))

	wdt, _, _, _ := j.Precision.dtypes()
	w, err := j.Model.weights(wdt, false)
	if err != nil {
		return r, err
	}
	r.Weights = gpumem.Bytes((int64(w) + tp - 1) / tp)
	r.Reserved = sglangReserved(r.Baseline, r.MemFractionStatic)
	r.Rest = gpumem.Bytes(checked.SatSum(int64(r.Baseline), -int64(r.Weights), -int64(r.Reserved)))

	c := j.Model.kv
	c.DType = wdt
	if o.KVCacheDType != gpumem.Invalid {
		c.DType = o.KVCacheDType
	}
	c.BlockTokens = 0
	lm := j.Model.spec.LM()
	layers := int64(max(c.Layers, 1))
	var kPer, vPer int64 // elements per token per layer
	if lm.MLA.Enabled() {
		kPer = lm.MLA.KVLoRARank + lm.MLA.QKRopeHeadDim
	} else {
		heads := max(int64(c.KVHeads)/tp, 1)
		kPer = heads * int64(c.HeadDim)
		vPer = kPer
	}
	kb, err := c.DType.Size(kPer * layers)
	if err != nil {
		return r, err
	}
	vb, err := c.DType.Size(vPer * layers)
	if err != nil {
		return r, err
	}
	r.CellBytes = kb + vb
	if r.CellBytes <= 0 {
		return r, errOverflow("SGLang KV cell")
	}
	if r.Rest > 0 {
		r.Tokens = int64(r.Rest) / int64(r.CellBytes)
	}
	if o.MaxTotalTokens > 0 {
		r.Tokens = min(r.Tokens, int64(o.MaxTotalTokens))
	}
	page := int64(max(o.PageSize, 1))
	r.Tokens = r.Tokens / page * page
	ks, ok1 := checked.Mul(r.Tokens, int64(kb))
	vs, ok2 := checked.Mul(r.Tokens, int64(vb))
	if !ok1 || !ok2 {
		return r, errOverflow("SGLang KV pool")
	}
	r.KSize, r.VSize = gpumem.Bytes(ks), gpumem.Bytes(vs)
	r.ContextLength = o.ContextLength
	if r.ContextLength == 0 {
		r.ContextLength = int(min(lm.MaxPositions, 1<<30))
	}
	if r.ContextLength == 0 {
		r.ContextLength = int(min(int64(j.SeqLen)+int64(j.Generate), 1<<30))
	}
	if r.ContextLength > 0 {
		r.Concurrency = float64(r.Tokens) / float64(r.ContextLength)
		kv, ok := checked.Mul(int64(r.ContextLength), int64(r.CellBytes))
		if !ok {
			kv = math.MaxInt64
		}
		need := checked.SatSum(int64(r.Weights), kv)
		if r.Baseline > 0 {
			r.MinFraction = float64(need) / float64(r.Baseline)
		} else {
			r.MinFraction = math.Inf(1)
		}
	}
	if r.Tokens <= 0 {
		r.Refused = "Not enough memory. Please try to increase --mem-fraction-static."
	}
	return r, nil
}

// estimateSGLang is Estimate for Runtime SGLang: the weights in Weights,
// the KV pool in KVCache and the CUDA context and NonTorch in Context
// and Buffers. The activations and CUDA graphs live in the memory
// mem_fraction_static reserves (SGLangReport.Reserved), which is not
// counted as allocated.
func estimateSGLang(j *Job) (Breakdown, error) {
	r, err := sglangBuffers(j)
	if err != nil {
		return Breakdown{}, err
	}
	var b Breakdown
	b.Weights = r.Weights
	b.KVCache = gpumem.Bytes(checked.SatSum(int64(r.KSize), int64(r.VSize)))
	b.Buffers = j.SGLang.NonTorch
	b.Context = j.Overhead.resolve(false, j.Device).Context
	b.Phase = Forward
	if j.Mode == Generation {
		b.Phase = Decode
	}
	b.Phases[b.Phase] = b.Allocated()
	return b, nil
}

// sglangReserved is total_gpu_memory × (1 − mem_fraction_static), the
// memory profile_max_num_token leaves out of the pool.
func sglangReserved(total gpumem.Bytes, fraction float64) gpumem.Bytes {
	return gpumem.Bytes(float64(total) * (1 - fraction))
}

// SGLangPoolTokens is profile_max_num_token's arithmetic on measured free
// memory (see sglangBuffers): total is total_gpu_memory, the free memory
// before the weights load ("Load weight begin. avail mem=X GB"), avail
// the free memory after it ("Load weight end. … avail mem=X GB"), cell
// one token's K and V bytes over the layers (SGLangReport.CellBytes):
// (avail − total × (1 − fraction)) // cell tokens, rounded down to whole
// pages of page tokens (zero: 1); zero when nothing is left. It states a
// pool whose weights budget cannot (experts kept on the host, a model
// outside the catalog). The errors name the argument.
func SGLangPoolTokens(total, avail gpumem.Bytes, fraction float64, cell gpumem.Bytes, page int) (int64, error) {
	switch {
	case total <= 0:
		return 0, gpumem.Errorf("total", total, gpumem.ErrInvalid, "the free memory before the weights must be positive")
	case avail < 0 || avail > total:
		return 0, gpumem.Errorf("avail", avail, gpumem.ErrInvalid, "the free memory after the weights must lie in [0, total]")
	case math.IsNaN(fraction) || fraction <= 0 || fraction >= 1:
		return 0, gpumem.Errorf("mem_fraction_static", fraction, gpumem.ErrInvalid, "want a fraction in (0, 1)")
	case cell <= 0:
		return 0, gpumem.Errorf("cell", cell, gpumem.ErrInvalid, "a token's K and V bytes must be positive")
	case page < 0 || page > 1<<16:
		return 0, gpumem.Errorf("page_size", page, gpumem.ErrInvalid, "want 1 to 65536 tokens (zero: 1)")
	}
	rest := int64(avail) - int64(sglangReserved(total, fraction))
	if rest <= 0 {
		return 0, nil
	}
	p := int64(max(page, 1))
	return rest / int64(cell) / p * p, nil
}
