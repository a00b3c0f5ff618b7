package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
	"github.com/gpumem/gpumem/model"
)

// kvGeometry returns the KV cache of the language model of s as Hugging
// Face's DynamicCache keeps it: per-head K and V for every layer (MLA
// models decompressed: num_heads × (qk_nope + qk_rope) keys and
// num_heads × v_head_dim values, modular_deepseek_v3.py), sliding-window
// layers capped at their window. The dtype is set per job.
func kvGeometry(s model.Spec) attention.KVCache {
	lm := s.LM()
	c := attention.KVCache{Layers: int(lm.Layers), KVHeads: int(lm.KVHeads), HeadDim: int(lm.HeadDim)}
	if lm.MLA.Enabled() {
		c.KVHeads = int(lm.Heads)
		c.HeadDim = int(lm.MLA.QKNopeHeadDim + lm.MLA.QKRopeHeadDim)
		c.ValueHeadDim = int(lm.MLA.VHeadDim)
	}
	if lm.SlidingWindow > 0 {
		c.Windows = make([]int, lm.Layers)
		for i := range c.Windows {
			if len(lm.LayerTypes) == int(lm.Layers) && lm.LayerTypes[i] == "full_attention" {
				continue
			}
			c.Windows[i] = int(lm.SlidingWindow)
		}
	}
	return c
}

// kvCache returns the KV cache of a Generation job: Batch × (SeqLen +
// Generate) tokens in the compute dtype (an encoder–decoder's two
// caches, below), for the rank v (nil: the whole
// model). Tensor parallelism splits the KV heads (one per rank,
// replicated, below t; MLA's decompressed heads like query heads);
// a pipeline stage holds its ceil(layers/pp) layers' cache.
func kvCache(j Job, dt gpumem.DType, v *rankView) (gpumem.Bytes, error) {
	c := j.Model.kv
	c.DType = dt
	if v != nil {
		if t := int(v.tp); t > 1 {
			c.KVHeads = max(1, c.KVHeads/t)
		}
		if v.pp > 1 {
			c.Layers = (c.Layers + int(v.pp) - 1) / int(v.pp)
			if len(c.Windows) > c.Layers {
				c.Windows = c.Windows[:c.Layers]
			}
		}
	}
	s := j.Model.spec
	if s.Encoder == nil {
		return c.Bytes(j.Batch, j.SeqLen+j.Generate)
	}
	// An encoder–decoder (transformers' EncoderDecoderCache) keeps two
	// caches per decoder layer: the self-attention cache of the decoded
	// tokens, and the cross-attention keys and values of the encoder's
	// output, computed once. T5 encodes the prompt (SeqLen tokens) and
	// decodes from one start token; Whisper encodes 30 s of audio (the
	// encoder's 1500 positions) and decodes from its prompt (SeqLen).
	enc, dec := j.SeqLen, 1+j.Generate
	if s.Family == "whisper" {
		enc, dec = int(s.Encoder.Positions), j.SeqLen+j.Generate
	}
	self, err := c.Bytes(j.Batch, dec)
	if err != nil {
		return 0, err
	}
	c.Windows = nil
	cross, err := c.Bytes(j.Batch, enc)
	if err != nil {
		return 0, err
	}
	return self + cross, nil
}
