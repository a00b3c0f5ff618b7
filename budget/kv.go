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
// Generate) tokens in the compute dtype.
func kvCache(j Job, dt gpumem.DType) (gpumem.Bytes, error) {
	c := j.Model.kv
	c.DType = dt
	return c.Bytes(j.Batch, j.SeqLen+j.Generate)
}
