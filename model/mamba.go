package model

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// SSM describes the selective state-space mixer of a Mamba model
// (transformers MambaConfig). The zero value means none.
type SSM struct {
	State      int64 // state_size (N, 16)
	ConvKernel int64 // conv_kernel (4)
	DTRank     int64 // time_step_rank ("auto": ceil(hidden / 16))
	// ConvBias is use_conv_bias (true); Bias is use_bias (false), the
	// biases of in_proj and out_proj.
	ConvBias, Bias bool
}

// mamba reads a MambaConfig (transformers configuration_mamba.py at
// 17fbf389): intermediate_size is expand × hidden_size, time_step_rank
// "auto" is ceil(hidden_size / 16), the embedding and lm_head are tied
// (PretrainedConfig's tie_word_embeddings).
func (c *config) mamba(s *Spec) error {
	var e errs
	s.Hidden = e.i(c.posv(768, "hidden_size", "d_model"))
	s.Layers = e.i(c.posv(32, "num_hidden_layers", "n_layer"))
	s.Vocab = e.i(c.posv(50280, "vocab_size"))
	s.SSM.State = e.i(c.posv(16, "state_size"))
	s.SSM.ConvKernel = e.i(c.posv(4, "conv_kernel"))
	expand := e.i(c.posv(2, "expand"))
	s.SSM.ConvBias = e.b(c.boolv(true, "use_conv_bias"))
	s.SSM.Bias = e.b(c.boolv(false, "use_bias"))
	s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
	if e.err != nil {
		return e.err
	}
	var err error
	if s.Intermediate, err = mulField(c.field("expand"), s.Hidden, expand); err != nil {
		return err
	}
	if v, ok := c.m["time_step_rank"]; ok && v != nil {
		if str, isStr := v.(string); isStr {
			if str != "auto" {
				return gpumem.Errorf(c.field("time_step_rank"), str, gpumem.ErrInvalid, `want "auto" or an integer`)
			}
		} else if s.SSM.DTRank, err = c.posv(0, "time_step_rank"); err != nil {
			return err
		}
	}
	if s.SSM.DTRank == 0 {
		s.SSM.DTRank = (s.Hidden + 15) / 16
	}
	s.Norm = RMSNorm
	return nil
}

// validateMamba checks a Mamba Spec's fields.
func (s Spec) validateMamba(path string) error {
	for _, f := range []struct {
		name  string
		v     int64
		limit int64
	}{{"Layers", s.Layers, maxLayers}, {"Hidden", s.Hidden, 1 << 24}, {"Intermediate", s.Intermediate, 1 << 26},
		{"Vocab", s.Vocab, 1 << 26}, {"SSM.State", s.SSM.State, 1 << 16}, {"SSM.ConvKernel", s.SSM.ConvKernel, 1 << 10},
		{"SSM.DTRank", s.SSM.DTRank, 1 << 24}} {
		if f.v <= 0 || f.v > f.limit {
			return gpumem.Errorf(path+"."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, %d]", f.limit)
		}
	}
	return nil
}

// buildMamba is MambaForCausalLM (transformers modeling_mamba.py): the
// embedding, per block a MambaRMSNorm and the MambaMixer (in_proj to
// 2·I, a depthwise conv1d of conv_kernel taps, x_proj to dt_rank + 2·N,
// dt_proj back to I with a bias, A_log [I, N], D [I], out_proj), the
// final norm_f, and lm_head unless tied.
func (s Spec) buildMamba(b *builder) {
	H, I, N, R, K := s.Hidden, s.Intermediate, s.SSM.State, s.SSM.DTRank, s.SSM.ConvKernel
	b.add("backbone.embeddings.weight", s.Vocab, H)
	b.stack(s.Layers, nil, func(i int64) {
		p := "backbone.layers." + itoa(i) + "."
		b.normP(p, "norm", H, RMSNorm)
		b.addP(p, "mixer.A_log", I, N)
		b.addP(p, "mixer.D", I)
		b.addP(p, "mixer.conv1d.weight", I, 1, K)
		if s.SSM.ConvBias {
			b.addP(p, "mixer.conv1d.bias", I)
		}
		b.linearP(p, "mixer.in_proj", 2*I, H, s.SSM.Bias)
		b.linearP(p, "mixer.x_proj", R+2*N, I, false)
		b.linearP(p, "mixer.dt_proj", I, R, true)
		b.linearP(p, "mixer.out_proj", H, I, s.SSM.Bias)
	})
	b.norm("backbone.norm_f", H, RMSNorm)
	if !s.TiedEmbeddings {
		b.add("lm_head.weight", s.Vocab, H)
	}
}

// MambaState returns the generation cache of a Mamba model: per layer
// MambaCache's conv_states [batch, I, conv_kernel] and ssm_states
// [batch, I, state_size] in dt (transformers modeling_mamba.py,
// MambaCache: torch.zeros(max_batch_size, intermediate_size, ...,
// dtype=dtype)), a size independent of the sequence length.
func (s Spec) MambaState(batch int64, dt gpumem.DType) (gpumem.Bytes, error) {
	if layoutOf(s) != layoutMamba {
		return 0, gpumem.Errorf("Spec.Family", s.Family, gpumem.ErrInvalid, "not a mamba model")
	}
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if batch < 1 || batch > 1<<30 {
		return 0, gpumem.Errorf("batch", batch, gpumem.ErrInvalid, "must be in [1, 2^30]")
	}
	n, ok := checked.MulAll(s.Layers, batch, s.Intermediate, s.SSM.ConvKernel+s.SSM.State)
	if !ok {
		return 0, gpumem.Errorf("batch", batch, gpumem.ErrRange, "state size overflows")
	}
	return dt.Size(n)
}
