package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
	"github.com/gpumem/gpumem/internal/checked"
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
	if lm.Family == model.FamilyJamba || lm.Family == model.FamilyZamba || lm.Family == model.FamilyZamba2 {
		// Only a hybrid's attention layers cache keys and values
		// (HybridMambaAttentionDynamicCache's transformer_layers; a
		// Zamba model's hybrid layers, each invocation of the shared
		// block its own entry).
		c.Layers = int(lm.AttentionLayers())
	}
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
func kvCache(j *Job, dt gpumem.DType, v *rankView) (gpumem.Bytes, error) {
	if f := j.Model.spec.Family; f == "mamba" || f == model.FamilyMamba2 {
		// A Mamba model caches no keys or values: MambaCache's conv and
		// ssm states, whatever the sequence length (model.Spec.MambaState).
		if j.KVDType != gpumem.Invalid {
			dt = j.KVDType
		}
		return j.Model.spec.MambaState(int64(j.Batch), dt)
	}
	c := j.Model.kv
	c.DType = dt
	if j.KVDType != gpumem.Invalid {
		c.DType = j.KVDType
	}
	c.BlockTokens = j.KVBlock
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
	if s.Family == model.FamilyJamba || s.Family == model.FamilyZamba || s.Family == model.FamilyZamba2 {
		// Jamba's cache: its attention layers' keys and values beside
		// its Mamba layers' conv and ssm states, in the cache's dtype
		// (a Zamba model's states are every layer's).
		kv, err := c.Bytes(j.Batch, j.SeqLen+j.Generate)
		if err != nil {
			return 0, err
		}
		st, err := s.MambaState(int64(j.Batch), c.DType)
		if err != nil {
			return 0, err
		}
		sum, ok := checked.Add(int64(kv), int64(st))
		if !ok {
			return 0, errOverflow("KV cache")
		}
		return gpumem.Bytes(sum), nil
	}
	if s.Encoder == nil {
		return c.Bytes(j.Batch, j.SeqLen+j.Generate)
	}
	// An encoder–decoder (transformers' EncoderDecoderCache) keeps two
	// caches per decoder layer: the self-attention cache of the decoded
	// tokens, and the cross-attention keys and values of the encoder's
	// output, computed once (Spec.EncoderInput: T5 encodes the prompt and
	// decodes from one start token; Whisper encodes 30 s of audio and
	// decodes from its prompt).
	enc, text := s.EncoderInput(int64(j.SeqLen))
	dec := j.SeqLen + j.Generate
	if text {
		dec = 1 + j.Generate
	}
	self, err := c.Bytes(j.Batch, dec)
	if err != nil {
		return 0, err
	}
	c.Windows = nil
	cross, err := c.Bytes(j.Batch, int(enc))
	if err != nil {
		return 0, err
	}
	sum, ok := checked.Add(int64(self), int64(cross))
	if !ok {
		return 0, errOverflow("KV cache")
	}
	return gpumem.Bytes(sum), nil
}

// validateSSMRuntime refuses a serving runtime (llama.cpp, vLLM, SGLang)
// for a state-space or hybrid model: their recurrent state (llama.cpp's
// per-sequence recurrent cells, vLLM's and SGLang's Mamba cache pools
// beside or instead of the paged KV cache) is not modelled, and their
// transformer KV models would give a silently wrong figure.
func (j *Job) validateSSMRuntime() error {
	if j.Runtime != LlamaCpp && j.Runtime != VLLM && j.Runtime != SGLang {
		return nil
	}
	switch j.Model.spec.Family {
	case "mamba", model.FamilyMamba2, model.FamilyJamba, model.FamilyZamba, model.FamilyZamba2:
		return gpumem.Errorf("Job.Runtime", j.Runtime, gpumem.ErrUnsupported,
			"the %s runtime's cache of a %s model (recurrent state) is not modelled", j.Runtime, j.Model.spec.Family)
	}
	return nil
}
