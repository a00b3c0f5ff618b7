package budget

import (
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// checkTPHeads refuses a tensor-parallel size that does not divide the
// attention heads, as vLLM (ModelConfig.verify_with_parallel_config:
// "Total number of attention heads (H) must be divisible by tensor
// parallel size (T).") and SGLang (its model config's same check) do.
func checkTPHeads(j *Job, field string, tp int, engine string) error {
	h := j.Model.spec.LM().Heads
	if tp > 1 && h > 0 && h%int64(tp) != 0 {
		return gpumem.Errorf(field, tp, gpumem.ErrInvalid,
			"%s: total number of attention heads (%d) must be divisible by tensor parallel size (%d)", engine, h, tp)
	}
	return nil
}

// vllmNeed is the KV cache memory that holds concurrency requests of
// max_model_len tokens: their tokens in whole blocks of one page each
// (PageBytes: a block over all layers), at least one request's.
func vllmNeed(r *VLLMReport, bs, mml int64, concurrency float64) (int64, bool) {
	tokens := math.Ceil(float64(mml) * concurrency)
	if tokens > 1<<50 {
		return 0, false
	}
	blocks, _ := checked.CeilDiv(max(int64(tokens), mml), bs)
	return checked.Mul(blocks, int64(r.PageBytes))
}

func validConcurrency(c float64) error {
	if math.IsNaN(c) || math.IsInf(c, 0) || c <= 0 || c > 1<<20 {
		return gpumem.Errorf("concurrency", c, gpumem.ErrInvalid, "want a positive number of requests of max_model_len at once")
	}
	return nil
}

// VLLMUtilizationFor returns the least gpu_memory_utilization, to four
// decimals, at which vLLM's cache on j's GPU holds concurrency requests
// of max_model_len tokens at once (vLLM's "Maximum concurrency for L
// tokens per request" at least concurrency), and the report there;
// j.VLLM.GPUMemoryUtilization is ignored. The arithmetic is
// vllmBuffers' read backwards: (weights + profile peak + non-torch +
// CUDA graphs + the blocks of concurrency × max_model_len tokens) /
// total memory. Above 1, nothing serves it: the error wraps
// gpumem.ErrDoesNotFit, with the report at 1.
func VLLMUtilizationFor(j Job, concurrency float64) (float64, VLLMReport, error) {
	if err := validConcurrency(concurrency); err != nil {
		return 0, VLLMReport{}, err
	}
	j.VLLM.GPUMemoryUtilization = 1
	r, err := VLLMBuffers(j)
	if err != nil {
		return 0, r, err
	}
	bs := int64(16)
	if j.VLLM.BlockSize > 0 {
		bs = int64(j.VLLM.BlockSize)
	}
	need, ok := vllmNeed(&r, bs, int64(r.MaxModelLen), concurrency)
	if !ok {
		return 0, r, errOverflow("vLLM KV need")
	}
	fixed := checked.SatSum(int64(r.Weights), int64(r.Activations), int64(r.NonTorch), int64(r.CUDAGraphs))
	u := math.Ceil(float64(checked.SatSum(fixed, need))/float64(j.Device.Capacity)*1e4) / 1e4
	if u > 1 {
		return 0, r, gpumem.Errorf("concurrency", concurrency, gpumem.ErrDoesNotFit,
			"%s requests of %d tokens need gpu_memory_utilization %.4f, above 1 (%s of KV cache at 1)", strconv.FormatFloat(concurrency, 'g', -1, 64),
			r.MaxModelLen, u, r.KVMemory.String())
	}
	u = max(u, 1e-4)
	for ; u <= 1; u += 1e-4 {
		j.VLLM.GPUMemoryUtilization = u
		if r, err = VLLMBuffers(j); err != nil {
			return 0, r, err
		}
		if r.Refused == "" && r.Concurrency >= concurrency {
			return u, r, nil
		}
	}
	return 0, r, gpumem.Errorf("concurrency", concurrency, gpumem.ErrDoesNotFit, "not served at gpu_memory_utilization 1")
}

// VLLMMaxModelLenFor returns the longest max_model_len at which vLLM's
// cache on j's GPU, at j's gpu_memory_utilization, holds concurrency
// requests of that length at once, and the report there; it is capped
// at the model's max_position_embeddings (vLLM refuses a longer one).
// The cache's size does not depend on max_model_len, so it is
// floor(tokens / concurrency). When not even one token's request fits,
// the error wraps gpumem.ErrDoesNotFit.
func VLLMMaxModelLenFor(j Job, concurrency float64) (int, VLLMReport, error) {
	if err := validConcurrency(concurrency); err != nil {
		return 0, VLLMReport{}, err
	}
	if j.VLLM.MaxModelLen == 0 && j.SeqLen+j.Generate == 0 {
		j.VLLM.MaxModelLen = 1
	}
	r, err := VLLMBuffers(j)
	if err != nil {
		return 0, r, err
	}
	mml := int64(float64(r.Tokens) / concurrency)
	if p := j.Model.spec.LM().MaxPositions; p > 0 {
		mml = min(mml, p)
	}
	mml = min(mml, 1<<30)
	if mml < 1 {
		return 0, r, gpumem.Errorf("concurrency", concurrency, gpumem.ErrDoesNotFit,
			"vLLM's cache holds %d tokens at gpu_memory_utilization %.4g", r.Tokens, max(j.VLLM.GPUMemoryUtilization, 0))
	}
	j.VLLM.MaxModelLen = int(mml)
	r, err = VLLMBuffers(j)
	return int(mml), r, err
}
