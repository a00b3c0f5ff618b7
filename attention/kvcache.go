package attention

import (
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Layout is how a KV cache stores one token of one layer.
type Layout uint8

const (
	// PerHead stores a key of KVHeads×HeadDim and a value of
	// KVHeads×ValueHeadDim elements per token per layer: Hugging Face's
	// DynamicCache and StaticCache, vLLM and llama.cpp for MHA/GQA models.
	// It is also how Hugging Face caches an MLA model (DeepSeek-V2/V3):
	// DeepseekV3Attention decompresses and caches full key_states
	// (num_heads × (qk_nope_head_dim + qk_rope_head_dim), 128 × 192 for
	// DeepSeek-V3) and value_states (num_heads × v_head_dim, 128 × 128);
	// describe it with KVHeads = num_heads, HeadDim = 192, ValueHeadDim = 128.
	PerHead Layout = iota
	// Latent stores one compressed vector of LatentDim elements per token
	// per layer and no separate value, as MLA-native engines do (vLLM's MLA
	// backends, vllm/v1/attention/backends/mla/common.py: "a single latent
	// vector to represent the per-token entry of the KV cache", of
	// kv_lora_rank + qk_rope_head_dim = 512 + 64 = 576 elements for
	// DeepSeek-V2/V3; DeepSeek-V2 paper, Table 1: (d_c + d_h^R)·l).
	Latent
)

// String returns "PerHead" or "Latent".
func (l Layout) String() string {
	switch l {
	case PerHead:
		return "PerHead"
	case Latent:
		return "Latent"
	}
	return "Layout(" + strconv.Itoa(int(l)) + ")"
}

// KVCache describes the key/value cache of a decoder: how many bytes it
// holds for batch sequences of a given number of tokens.
//
// Per token and layer it stores, in DType,
//
//	PerHead: KVHeads·HeadDim + KVHeads·ValueHeadDim elements (K and V)
//	Latent:  LatentDim elements
//
// so a dense fp16 Llama-2-7B (32 layers, 32 KV heads of 128) takes
// 2·32·32·128·2 B = 512 KiB per token and Llama-3-8B (8 KV heads) 128 KiB.
//
// Quantized caches are described by DType:
//   - FP8E4M3 / FP8E5M2: 1 byte per element, vLLM's kv_cache_dtype "fp8"
//     with per-tensor k/v scales (docs/features/quantization/quantized_kvcache.md),
//     which live with the model and are not counted here;
//   - INT8: 1 byte per element with per-tensor scales, TensorRT-LLM's
//     --int8_kv_cache (examples/llama "INT8 KV cache");
//   - Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: llama.cpp's --cache-type-k/-v
//     layout, where each token's row of KVHeads·HeadDim elements is stored
//     in ggml blocks of 32 elements with their fp16 scale(s) (Q8_0: 34
//     bytes per 32; Q4_0: 18 bytes per 32, i.e. 4.5 bits per element,
//     scales included; ggml_row_size). The row must be a whole number of
//     blocks, as ggml requires.
//
// Sliding-window layers keep at most their window of tokens (Windows), and
// a paged cache allocates whole blocks of BlockTokens tokens per sequence
// (PagedAttention, Kwon et al. 2023; vLLM's engine argument --block-size,
// 8, 16 or 32, defaults to 16 on CUDA, docs/reference.md#kv-cache).
// Not counted: an engine's preallocation of its whole pool
// (gpu_memory_utilization), per-request metadata, block tables, and the
// scales of per-token quantization schemes.
type KVCache struct {
	// Layers is the number of layers that keep a cache, at least 1.
	Layers int
	// KVHeads is the number of key/value heads per layer (PerHead), at
	// least 1.
	KVHeads int
	// HeadDim is the key head dimension (PerHead), at least 1.
	HeadDim int
	// ValueHeadDim is the value head dimension (PerHead); zero means
	// HeadDim.
	ValueHeadDim int
	// DType is the storage type of the cache elements.
	DType gpumem.DType
	// BlockTokens is the page size of a paged cache in tokens; each
	// sequence's tokens round up to whole blocks. Zero means a contiguous
	// cache with no rounding.
	BlockTokens int
	// Layout selects per-head K/V or an MLA latent.
	Layout Layout
	// LatentDim is the elements per token per layer of a Latent cache:
	// kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V2/V3).
	LatentDim int
	// Windows, if not empty, holds one entry per layer: the sliding window
	// of that layer in tokens (it keeps at most that many), or 0 for a
	// full-attention layer. Gemma 3 alternates five layers of 1024 with one
	// full layer; Mistral 7B v0.1 uses 4096 on every layer.
	Windows []int
}

// Validate reports the first invalid field as a *gpumem.FieldError.
func (c KVCache) Validate() error {
	switch {
	case c.Layers < 1:
		return gpumem.Errorf("KVCache.Layers", c.Layers, gpumem.ErrInvalid, "must be at least 1")
	case c.Layout > Latent:
		return gpumem.Errorf("KVCache.Layout", c.Layout, gpumem.ErrInvalid, "PerHead or Latent")
	case c.Layout == PerHead && c.KVHeads < 1:
		return gpumem.Errorf("KVCache.KVHeads", c.KVHeads, gpumem.ErrInvalid, "must be at least 1")
	case c.Layout == PerHead && c.HeadDim < 1:
		return gpumem.Errorf("KVCache.HeadDim", c.HeadDim, gpumem.ErrInvalid, "must be at least 1")
	case c.ValueHeadDim < 0:
		return gpumem.Errorf("KVCache.ValueHeadDim", c.ValueHeadDim, gpumem.ErrInvalid, "must not be negative")
	case c.Layout == Latent && c.LatentDim < 1:
		return gpumem.Errorf("KVCache.LatentDim", c.LatentDim, gpumem.ErrInvalid, "must be at least 1 for a Latent cache")
	case !c.DType.Valid() || c.DType == gpumem.BOOL || c.DType == gpumem.C64:
		return gpumem.Errorf("KVCache.DType", c.DType, gpumem.ErrInvalid, "not a cache storage format")
	case c.BlockTokens < 0:
		return gpumem.Errorf("KVCache.BlockTokens", c.BlockTokens, gpumem.ErrInvalid, "must not be negative")
	case len(c.Windows) != 0 && len(c.Windows) != c.Layers:
		return gpumem.Errorf("KVCache.Windows", len(c.Windows), gpumem.ErrInvalid, "needs one entry per layer (%d)", c.Layers)
	}
	for i, w := range c.Windows {
		if w < 0 {
			return gpumem.Errorf("KVCache.Windows", w, gpumem.ErrInvalid, "layer %d: window must not be negative", i)
		}
	}
	if be, _ := c.DType.Block(); be > 1 {
		// Block formats are stored row by row (one row per token).
		for _, row := range [2]int64{c.rowK(), c.rowV()} {
			if row%be != 0 {
				return gpumem.Errorf("KVCache.DType", c.DType, gpumem.ErrInvalid,
					"a row of %d elements is not a whole number of %d-element blocks", row, be)
			}
		}
	}
	return nil
}

// rowK and rowV return the elements per token per layer of the key and
// the value rows (rowV is 0 for a Latent cache).
func (c KVCache) rowK() int64 {
	if c.Layout == Latent {
		return int64(c.LatentDim)
	}
	return int64(c.KVHeads) * int64(c.HeadDim)
}

func (c KVCache) rowV() int64 {
	if c.Layout == Latent {
		return 0
	}
	dv := c.ValueHeadDim
	if dv == 0 {
		dv = c.HeadDim
	}
	return int64(c.KVHeads) * int64(dv)
}

// PerToken returns the bytes one token takes in one layer: the key and
// value rows (or the latent) in DType, block scales included.
func (c KVCache) PerToken() (gpumem.Bytes, error) {
	if err := c.Validate(); err != nil {
		return 0, err
	}
	k, err := c.DType.Size(c.rowK())
	if err != nil {
		return 0, err
	}
	v, err := c.DType.Size(c.rowV())
	if err != nil {
		return 0, err
	}
	if k+v < k {
		return 0, gpumem.Errorf("KVCache", c.rowK(), gpumem.ErrRange, "bytes per token overflow int64")
	}
	return k + v, nil
}

// Bytes returns the cache bytes for batch sequences of tokens tokens each:
//
//	Σ over layers of batch · slots(layer) · PerToken
//
// where slots is tokens, capped at the layer's window, and, in a paged
// cache, the number of whole blocks those tokens touch times BlockTokens.
// A window layer of a paged cache keeps the blocks that the last
// min(tokens, window) positions fall in, assuming the engine frees a
// block once all its positions have left the window; one that never
// frees them holds a full-attention layer's blocks instead (give it
// window 0). It fails for negative
// counts, invalid fields, and totals beyond int64.
func (c KVCache) Bytes(batch, tokens int) (gpumem.Bytes, error) {
	per, err := c.PerToken()
	if err != nil {
		return 0, err
	}
	if batch < 0 {
		return 0, gpumem.Errorf("batch", batch, gpumem.ErrInvalid, "must not be negative")
	}
	if tokens < 0 {
		return 0, gpumem.Errorf("tokens", tokens, gpumem.ErrInvalid, "must not be negative")
	}
	return c.total(per, batch, tokens, false)
}

// total sums the slots of all layers for batch sequences of tokens tokens;
// with grown it takes each layer's largest slot count over lengths
// 1..tokens instead of the count at tokens.
func (c KVCache) total(per gpumem.Bytes, batch, tokens int, grown bool) (gpumem.Bytes, error) {
	slotsOf := c.slots
	if grown {
		slotsOf = c.grownSlots
	}
	var slots int64 // Σ over layers of the slots one sequence holds
	ok := true
	if len(c.Windows) == 0 {
		slots, ok = checked.Mul(slotsOf(int64(tokens), 0), int64(c.Layers))
	} else {
		for _, w := range c.Windows {
			slots, ok = checked.Add(slots, slotsOf(int64(tokens), int64(w)))
			if !ok {
				break
			}
		}
	}
	total, ok2 := checked.MulAll(slots, int64(batch), int64(per))
	if !ok || !ok2 {
		return 0, gpumem.Errorf("tokens", tokens, gpumem.ErrRange, "cache bytes overflow int64 (batch %d)", batch)
	}
	return gpumem.Bytes(total), nil
}

// slots returns the token slots one sequence of t tokens holds in a layer
// with window w (0: full attention).
func (c KVCache) slots(t, w int64) int64 {
	if t == 0 {
		return 0
	}
	kept := t
	if w > 0 && w < t {
		kept = w
	}
	if c.BlockTokens == 0 {
		return kept
	}
	b := int64(c.BlockTokens)
	// Positions t−kept … t−1 are live; count the blocks they touch.
	first, lastBlock := (t-kept)/b, (t-1)/b
	return (lastBlock - first + 1) * b
}

// grownSlots returns the most slots a layer with window w held at any
// length from 1 to t. It differs from slots only for a paged window
// layer, whose live window straddles one block more at some alignments.
func (c KVCache) grownSlots(t, w int64) int64 {
	if c.BlockTokens == 0 || w == 0 || t <= w {
		return c.slots(t, w) // non-decreasing in t
	}
	// The live window starts at p = t' − w for t' in (w, t]; it touches
	// floor((p mod b + w − 1)/b) + 1 blocks, which grows with p mod b, and
	// p mod b reaches min(t − w, b − 1).
	b := int64(c.BlockTokens)
	r := min(t-w, b-1)
	return ((r+w-1)/b + 1) * b
}

// MaxTokens returns the largest number of tokens n such that a batch of
// sequences growing to n tokens never holds more than limit bytes (for a
// paged cache with windows, Bytes can dip as blocks leave the window, so
// the largest value over lengths 1..n counts). It bisects over a
// non-decreasing function: the result fits and the result + 1 does not,
// unless every length up to 2^40 fits, as with only sliding-window
// layers, whose cache stops growing. It fails with gpumem.ErrDoesNotFit
// when even one token does not fit.
func (c KVCache) MaxTokens(batch int, limit gpumem.Bytes) (int, error) {
	if batch < 1 {
		return 0, gpumem.Errorf("batch", batch, gpumem.ErrInvalid, "must be at least 1")
	}
	per, err := c.PerToken()
	if err != nil {
		return 0, err
	}
	fits := func(n int) bool {
		b, err := c.total(per, batch, n, true)
		return err == nil && b <= limit // an overflow does not fit
	}
	ok := fits(1)
	if !ok {
		return 0, gpumem.Errorf("limit", limit, gpumem.ErrDoesNotFit, "one token of %d sequences does not fit", batch)
	}
	lo, hi := 1, 2
	for fits(hi) {
		lo = hi
		if hi >= maxSearch {
			return lo, nil
		}
		hi *= 2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}
