package budget

import (
	"fmt"
	"math"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// VLLMOptions are vLLM's engine arguments that size its KV cache
// (vllm/engine/arg_utils.py EngineArgs; the flags of `vllm serve` in
// parentheses). The zero value is vLLM's defaults: utilization 0.9,
// max_model_len the job's tokens, 2,048 batched tokens, 256 sequences,
// 16-token blocks, the cache in the weights' dtype, one GPU.
type VLLMOptions struct {
	// GPUMemoryUtilization is --gpu-memory-utilization: the fraction of
	// the GPU's total memory vLLM may use for the weights, the profile
	// run's peak, the non-torch memory and the KV cache; zero means 0.9.
	// It must lie in (0, 1].
	GPUMemoryUtilization float64
	// MaxModelLen is --max-model-len, the longest request (prompt and
	// output); zero means Job.SeqLen + Job.Generate.
	MaxModelLen int
	// MaxNumBatchedTokens is --max-num-batched-tokens: the tokens of the
	// profile run's dummy forward pass; zero means 2,048 (the chunked
	// prefill default of `vllm serve`, arg_utils.py, v0.8–v0.10; later
	// releases choose 8,192 on an H100-class GPU: give it then).
	MaxNumBatchedTokens int
	// MaxNumSeqs is --max-num-seqs: the sequences of the profile run's
	// dummy sampler pass; zero means 256.
	MaxNumSeqs int
	// BlockSize is --block-size, the tokens of one KV block; zero means
	// 16 (CacheConfig.block_size on CUDA).
	BlockSize int
	// KVCacheDType is --kv-cache-dtype: Invalid (zero, "auto") means the
	// weights' dtype; FP8 (fp8, fp8_e4m3, fp8_e5m2) halves a 16-bit cache.
	KVCacheDType gpumem.DType
	// TensorParallel is --tensor-parallel-size; zero means 1. Each rank
	// holds 1/TP of the weights and max(1, KV heads / TP) KV heads.
	TensorParallel int
	// NonTorch is the profile run's non-torch memory increase (NCCL
	// buffers and the like, not the CUDA context, which vLLM's baseline
	// snapshot already holds); zero means none.
	NonTorch gpumem.Bytes
	// CUDAGraphMemory is vLLM's own estimate of its CUDA graphs' memory
	// ("Estimated CUDA graph memory: X GiB total"), which releases from
	// v0.21.0 measure by capturing graphs before sizing the cache and
	// subtract from it (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the
	// default). Give it from a log of the same model and settings, or
	// from VLLMGraphs.Estimate (the graphs VLLMCaptureSizes counts and
	// one run's per-graph samples, for another max_num_seqs); zero
	// means none subtracted, as in earlier releases, which capture the
	// graphs after the cache, in the memory utilization leaves.
	CUDAGraphMemory gpumem.Bytes
	// EnforceEager is --enforce-eager: no CUDA graphs, so no
	// CUDAGraphMemory.
	EnforceEager bool
	// V0 is the V0 engine (vLLM up to 0.10 with VLLM_USE_V1=0, the
	// default before 0.8): its profile run's sampler sorts the logits for
	// top-k and top-p, and only the driver rank samples (vllmProfilePeak).
	V0 bool
}

// VLLMReport is one rank's memory as vLLM sizes it at start-up
// (vllm/v1/worker/gpu_worker.py determine_available_memory and
// vllm/v1/core/kv_cache_utils.py, vllm-project/vllm 35d5cda; V0's
// worker.py of v0.6–v0.8 did the same sum): the lines "Model loading
// took X GiB" (Weights), "Available KV cache memory: X GiB" (KVMemory),
// "# GPU blocks: N" (Blocks) and "Maximum concurrency for L tokens per
// request: C x" (Concurrency).
type VLLMReport struct {
	Requested   gpumem.Bytes // gpu_memory_utilization × total memory
	Weights     gpumem.Bytes // this rank's weights
	Activations gpumem.Bytes // the profile run's torch peak increase (vllmProfilePeak)
	NonTorch    gpumem.Bytes // the profile run's non-torch increase (VLLMOptions.NonTorch)
	KVMemory    gpumem.Bytes // Requested − Weights − Activations − NonTorch, at least 0
	PageBytes   gpumem.Bytes // one block over all layers: BlockSize × KV bytes per token per layer × layers
	Blocks      int64        // KVMemory / PageBytes
	Tokens      int64        // Blocks × BlockSize
	MaxModelLen int
	Needed      gpumem.Bytes // the KV cache of one request of MaxModelLen tokens: its blocks over all layers
	Concurrency float64      // Tokens / MaxModelLen
	// MinUtilization is the least gpu_memory_utilization at which vLLM
	// starts (one request of MaxModelLen fits): (Weights + Activations +
	// NonTorch + Needed) / total memory; above 1 nothing does.
	MinUtilization float64
	// Refused is the ValueError vLLM raises when one request of
	// MaxModelLen tokens does not fit in KVMemory, or "" when it fits.
	Refused string
	// CUDAGraphs is the CUDA graph memory subtracted from the cache
	// (VLLMOptions.CUDAGraphMemory, zero with EnforceEager).
	CUDAGraphs gpumem.Bytes
	// EquivalentUtilization is the gpu_memory_utilization that gives the
	// same cache without the graphs subtracted, utilization − CUDAGraphs
	// / total memory, and CompensatingUtilization the one that restores
	// the cache of a release that does not subtract them, utilization +
	// CUDAGraphs / total (the "is equivalent to" line of gpu_worker.py,
	// v0.21.0 and later).
	EquivalentUtilization, CompensatingUtilization float64
}

// VLLMBuffers returns how vLLM sizes j's KV cache on one rank; j must
// have Runtime VLLM and a Device with a Capacity. A serving job is a
// Generation job: Batch is at least 1, and SeqLen + Generate (Generate at
// least 1) is one request's length, max_model_len unless
// VLLMOptions.MaxModelLen gives it. A job vLLM would refuse is no error:
// the report's Refused holds vLLM's message. ExampleVLLMBuffers sizes
// Qwen2.5-7B on an L4.
func VLLMBuffers(j Job) (VLLMReport, error) {
	if err := j.validate(); err != nil {
		return VLLMReport{}, err
	}
	if j.Runtime != VLLM {
		return VLLMReport{}, gpumem.Errorf("Job.Runtime", j.Runtime, gpumem.ErrInvalid, "VLLMBuffers needs Runtime VLLM")
	}
	return vllmBuffers(&j)
}

// validateVLLM checks the vLLM options of j.
func (j *Job) validateVLLM() error {
	o := &j.VLLM
	if j.Runtime != VLLM {
		if !o.isZero() {
			return gpumem.Errorf("Job.VLLM", "set", gpumem.ErrInvalid, "vLLM options need Runtime VLLM")
		}
		return nil
	}
	if err := j.validateServing("vLLM", "a vLLM job's tensor parallelism is VLLM.TensorParallel",
		"a vLLM cache's type and block are VLLM.KVCacheDType and VLLM.BlockSize"); err != nil {
		return err
	}
	u := o.GPUMemoryUtilization
	switch {
	case math.IsNaN(u) || u < 0 || u > 1:
		return gpumem.Errorf("Job.VLLM.GPUMemoryUtilization", u, gpumem.ErrInvalid, "want a fraction in (0, 1] (zero: 0.9)")
	case o.MaxModelLen < 0 || o.MaxModelLen > 1<<30:
		return gpumem.Errorf("Job.VLLM.MaxModelLen", o.MaxModelLen, gpumem.ErrInvalid, "want 1 to 2^30 tokens (zero: the job's tokens)")
	case o.MaxNumBatchedTokens < 0 || o.MaxNumBatchedTokens > 1<<30:
		return gpumem.Errorf("Job.VLLM.MaxNumBatchedTokens", o.MaxNumBatchedTokens, gpumem.ErrInvalid, "want 1 to 2^30 tokens (zero: 2048)")
	case o.MaxNumSeqs < 0 || o.MaxNumSeqs > 1<<20:
		return gpumem.Errorf("Job.VLLM.MaxNumSeqs", o.MaxNumSeqs, gpumem.ErrInvalid, "want 1 to 2^20 sequences (zero: 256)")
	case o.BlockSize < 0 || o.BlockSize > 1<<16:
		return gpumem.Errorf("Job.VLLM.BlockSize", o.BlockSize, gpumem.ErrInvalid, "want 1 to 65536 tokens (zero: 16)")
	case o.TensorParallel < 0 || o.TensorParallel > 1024:
		return gpumem.Errorf("Job.VLLM.TensorParallel", o.TensorParallel, gpumem.ErrInvalid, "want 1 to 1024 GPUs (zero: 1)")
	case o.NonTorch < 0:
		return gpumem.Errorf("Job.VLLM.NonTorch", o.NonTorch, gpumem.ErrInvalid, "must not be negative")
	case o.CUDAGraphMemory < 0:
		return gpumem.Errorf("Job.VLLM.CUDAGraphMemory", o.CUDAGraphMemory, gpumem.ErrInvalid, "must not be negative")
	case o.CUDAGraphMemory > 0 && o.EnforceEager:
		return gpumem.Errorf("Job.VLLM.CUDAGraphMemory", o.CUDAGraphMemory, gpumem.ErrInvalid, "--enforce-eager captures no CUDA graphs")
	}
	if err := checkTPHeads(j, "Job.VLLM.TensorParallel", o.TensorParallel, "vLLM"); err != nil {
		return err
	}
	switch o.KVCacheDType {
	case gpumem.Invalid, gpumem.FP16, gpumem.BF16, gpumem.FP32, gpumem.FP8E4M3, gpumem.FP8E5M2:
	default:
		return gpumem.Errorf("Job.VLLM.KVCacheDType", o.KVCacheDType, gpumem.ErrInvalid, "not a vLLM cache dtype (auto, fp8, fp8_e4m3, fp8_e5m2)")
	}
	return j.needsDevice("vLLM sizes its cache from the GPU's total memory: give the device")
}

// validateServing checks what a serving engine's job must be: inference,
// on one GPU as far as Job.Parallel goes (the engine's own option says
// how many), with the cache typed by the engine's options (the messages
// say which).
func (j *Job) validateServing(engine, parallel, cache string) error {
	if j.Mode != Prefill && j.Mode != Generation {
		return gpumem.Errorf("Job.Mode", j.Mode, gpumem.ErrInvalid, "%s runs inference: want Prefill or Generation", engine)
	}
	if j.Parallel.GPUs() > 1 || j.Offload != 0 {
		return gpumem.Errorf("Job.Parallel", j.Parallel.Describe(), gpumem.ErrInvalid, "%s", parallel)
	}
	if j.KVDType != gpumem.Invalid || j.KVBlock != 0 {
		return gpumem.Errorf("Job.KVDType", j.KVDType, gpumem.ErrInvalid, "%s", cache)
	}
	return nil
}

// needsDevice refuses a job without a device capacity: an engine that
// sizes its cache from the GPU's memory.
func (j *Job) needsDevice(why string) error {
	if j.Device.Capacity <= 0 {
		return gpumem.Errorf("Job.Device.Capacity", j.Device.Capacity, gpumem.ErrInvalid, "%s", why)
	}
	return nil
}

// vllmBuffers sizes j's vLLM memory; j is valid.
//
// The KV space (determine_available_memory, vllm/v1/worker/gpu_worker.py,
// vllm-project/vllm 35d5cda): requested_memory = total_memory × gpu_memory_utilization, and
// available_kv_cache_memory = requested_memory − non_kv_cache_memory,
// where non_kv_cache_memory = weights_memory + torch_peak_increase +
// non_torch_increase of the profile run (memory_profiling). The CUDA
// context and NCCL's buffers are in the baseline snapshot (init_snapshot,
// taken after init_worker_distributed_environment), so they are not
// subtracted: they live in the 1 − utilization left over, as do the CUDA
// graphs, which are captured after the cache is allocated (capture_model
// in compile_or_warm_up_model, after initialize_kv_cache), so
// enforce_eager does not change the cache's size there. Releases from
// v0.21.0 estimate the graphs' memory beforehand by capturing some
// (profile_cudagraph_memory) and subtract it:
// available_kv_cache_memory = requested − non_kv_cache_memory −
// cudagraph_memory_estimate (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1,
// their default); that estimate is a measurement, taken here from
// VLLMOptions.CUDAGraphMemory.
//
// The blocks (get_num_blocks, vllm/v1/core/kv_cache_utils.py): one page is
// block_size × (K + V bytes per token per layer) for each attention layer,
// num_blocks = available // page_size // num_layers; the concurrency is
// num_blocks × block_size / max_model_len (get_max_concurrency_for_kv_
// cache_config), and check_enough_kv_cache_memory refuses when
// cdiv(max_model_len, block_size) pages over all layers exceed the space.
// Sliding-window layers are counted as full-attention ones.
func vllmBuffers(j *Job) (VLLMReport, error) {
	o := j.VLLM
	var r VLLMReport
	u := o.GPUMemoryUtilization
	if u == 0 {
		u = 0.9
	}
	tp := int64(max(o.TensorParallel, 1))
	bs := int64(o.BlockSize)
	if bs == 0 {
		bs = 16
	}
	mml := int64(o.MaxModelLen)
	if mml == 0 {
		mml = int64(j.SeqLen) + int64(j.Generate)
	}
	r.MaxModelLen = int(mml)
	r.Requested = gpumem.Bytes(float64(j.Device.Capacity) * u)

	wdt, _, _, cdt := j.Precision.dtypes()
	w, err := j.Model.weights(wdt, false)
	if err != nil {
		return r, err
	}
	r.Weights = gpumem.Bytes((int64(w) + tp - 1) / tp)

	act, err := vllmProfilePeak(j, cdt, tp)
	if err != nil {
		return r, err
	}
	r.Activations = act
	r.NonTorch = o.NonTorch

	if !o.EnforceEager {
		r.CUDAGraphs = o.CUDAGraphMemory
	}
	d := float64(r.CUDAGraphs) / float64(j.Device.Capacity)
	r.EquivalentUtilization, r.CompensatingUtilization = u-d, u+d
	kv := int64(r.Requested) - checked.SatSum(int64(r.Weights), int64(r.Activations), int64(r.NonTorch), int64(r.CUDAGraphs))
	r.KVMemory = gpumem.Bytes(max(kv, 0))

	c := j.Model.kv
	c.DType = wdt
	if o.KVCacheDType != gpumem.Invalid {
		c.DType = o.KVCacheDType
	}
	c.BlockTokens = 0
	c.KVHeads = max(1, c.KVHeads/int(tp))
	per, err := c.PerToken()
	if err != nil {
		return r, err
	}
	layers := int64(max(c.Layers, 1))
	page, ok := checked.Mul(int64(per), bs)
	if ok {
		page, ok = checked.Mul(page, layers)
	}
	if !ok || page <= 0 {
		return r, errOverflow("vLLM KV page")
	}
	r.PageBytes = gpumem.Bytes(page)
	r.Blocks = int64(r.KVMemory) / int64(per) / bs / layers
	r.Tokens = r.Blocks * bs
	if mml > 0 {
		r.Concurrency = float64(r.Tokens) / float64(mml)
	}
	need, ok := checked.Mul((mml+bs-1)/bs, page)
	if !ok {
		return r, errOverflow("vLLM KV need")
	}
	r.Needed = gpumem.Bytes(need)
	r.MinUtilization = float64(checked.SatSum(int64(r.Weights), int64(r.Activations), int64(r.NonTorch), int64(r.CUDAGraphs), need)) /
		float64(j.Device.Capacity)
	switch {
	case r.KVMemory <= 0:
		r.Refused = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
	case need > int64(r.KVMemory):
		r.Refused = vllmRefusal(mml, need, int64(r.KVMemory), r.Tokens)
	}
	return r, nil
}

// vllmRefusal is the ValueError of check_enough_kv_cache_memory
// (vllm/v1/core/kv_cache_utils.py, 2025 releases; later ones spell it
// "model's" and add a link; V0 said "The model's max seq len (N) is larger
// than the maximum number of tokens that can be stored in KV cache (M)":
// "To serve at least one request
// with the models's max seq len (…), (… GiB KV cache is needed, which is
// larger than the available KV cache memory (… GiB). Based on the
// available memory, the estimated maximum model length is …. Try
// increasing `gpu_memory_utilization` or decreasing `max_model_len` when
// initializing the engine."). The estimated length is the largest the
// blocks hold (vLLM searches it by bisection over the same arithmetic).
func vllmRefusal(mml, need, avail, tokens int64) string {
	const gib = float64(1 << 30)
	estimated := ""
	if tokens > 0 {
		estimated = fmt.Sprintf(" Based on the available memory, the estimated maximum model length is %d.", tokens)
	}
	return fmt.Sprintf("To serve at least one request with the models's max seq len (%d), (%.2f GiB KV cache is needed, "+
		"which is larger than the available KV cache memory (%.2f GiB).%s Try increasing `gpu_memory_utilization` or "+
		"decreasing `max_model_len` when initializing the engine.", mml, float64(need)/gib, float64(avail)/gib, estimated)
}

// vllmProfilePeak is the torch peak increase of vLLM's profile run: a
// dummy forward pass of max_num_batched_tokens tokens over max_num_seqs
// sequences, then the sampler over the sequences' last tokens
// (gpu_model_runner.py profile_run, _dummy_run and _dummy_sampler_run in
// V1; worker/model_runner.py profile_run and execute_model in V0). The
// peak is the larger of the two phases, on the rank that samples (in V0
// the driver, whose blocks, the fewest, are the engine's):
//
//   - The forward pass is widest in the gated MLP (LlamaMLP.forward,
//     vllm/model_executor/models/llama.py): while down_proj runs, the
//     decoder layer's residual and normed input (its caller's local),
//     gate_up_proj's output (2 × intermediate / TP; the local gate_up lives
//     until the method returns), SiluAndMul's output (intermediate / TP)
//     and down_proj's output are alive: 3 × hidden + 3 × intermediate /
//     TP per token, in the compute dtype. The fused add-RMSNorm works in
//     place and the attention's live set (qkv, its output and o_proj's) is
//     narrower.
//   - V0's sampler holds the forward pass's output hidden states (the
//     caller's local, tokens × hidden), the logits of max_num_seqs rows
//     in the compute dtype (compute_logits) and their fp32 copy
//     (Sampler.forward: logits.to(torch.float)). The dummy requests ask
//     for top-k (vocab − 1) and top-p (0.99): V0's _apply_top_k_top_p
//     (vllm/model_executor/layers/sampler.py) sorts the fp32 logits, and
//     PyTorch's stable sort of 128 or more rows (segmented_sort_pairs,
//     aten/src/ATen/native/cuda/SortStable.cu) allocates, besides the
//     sorted values (fp32) and indices (int64), an int64 index per element
//     and cub's alternate key and value buffers (fp32 and int64): 36 bytes
//     per logit with the fp32 copy, the peak of the sampler. V1's dummy
//     sampler (FlashInfer's top-k/top-p kernels on CUDA, or none: the
//     model runner notes that profiling may skip top-k, top-p and
//     logprobs) is taken as the fp32 logits and their softmax, 8 bytes
//     per logit; the hidden states it also holds are not counted (no V1
//     log of the corpus prints its activation peak to check them).
//
// The vocabulary is whole on the sampling rank (V0 gathers the logits to
// the driver, V1 to every rank).
func vllmProfilePeak(j *Job, cdt gpumem.DType, tp int64) (gpumem.Bytes, error) {
	lm := j.Model.spec.LM()
	o := j.VLLM
	tokens := int64(o.MaxNumBatchedTokens)
	if tokens == 0 {
		tokens = 2048
	}
	seqs := int64(o.MaxNumSeqs)
	if seqs == 0 {
		seqs = 256
	}
	ff := lm.Intermediate
	if lm.MoE.Experts > 0 && lm.MoE.Intermediate > 0 {
		ff = lm.MoE.Intermediate * max(lm.MoE.Active, 1)
	}
	width := checked.SatSum(3*lm.Hidden, 3*((ff+tp-1)/tp))
	fwd, ok := checked.Mul(width, tokens)
	if !ok {
		return 0, errOverflow("vLLM profile run")
	}
	b, err := cdt.Size(fwd)
	if err != nil {
		return 0, err
	}
	hiddenN, ok := checked.Mul(lm.Hidden, tokens)
	if !ok {
		return 0, errOverflow("vLLM profile run")
	}
	hidden, err := cdt.Size(hiddenN)
	if err != nil {
		return 0, err
	}
	logitsN, ok := checked.Mul(seqs, lm.Vocab)
	if !ok {
		return 0, errOverflow("vLLM profile run")
	}
	perLogit, held := int64(8), int64(0) // V1: fp32 logits and softmax
	if o.V0 {
		cl, err := cdt.Size(1)
		if err != nil {
			return 0, err
		}
		perLogit, held = int64(cl)+36, int64(hidden)
	}
	sampler, ok := checked.Mul(logitsN, perLogit)
	if ok {
		sampler, ok = checked.Add(sampler, held)
	}
	if !ok {
		return 0, errOverflow("vLLM profile run")
	}
	return gpumem.Bytes(max(int64(b), sampler)), nil
}

// estimateVLLM is Estimate for Runtime VLLM: the weights in Weights, the
// profile run's peak in Activations, the KV cache vLLM allocates (its
// blocks) in KVCache, the non-torch memory in Buffers and the CUDA context
// in Context. vLLM allocates the cache once, so Allocated is the
// requested memory, give or take the part of a block.
func estimateVLLM(j *Job) (Breakdown, error) {
	r, err := vllmBuffers(j)
	if err != nil {
		return Breakdown{}, err
	}
	var b Breakdown
	b.Weights, b.Activations = r.Weights, r.Activations
	b.Buffers = gpumem.Bytes(checked.SatSum(int64(r.NonTorch), int64(r.CUDAGraphs)))
	kvb, ok := checked.Mul(r.Blocks, int64(r.PageBytes))
	if !ok {
		return Breakdown{}, errOverflow("vLLM KV cache")
	}
	b.KVCache = gpumem.Bytes(kvb)
	b.Context = j.Overhead.resolve(false, j.Device).Context
	b.Phase = Forward
	if j.Mode == Generation {
		b.Phase = Decode
	}
	b.Phases[b.Phase] = b.Allocated()
	return b, nil
}
