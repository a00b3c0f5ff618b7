package model

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// FamilyMamba2 is transformers' Mamba2ForCausalLM (model_type "mamba2").
const FamilyMamba2 = "mamba2"

// mamba2 reads a Mamba2Config (transformers configuration_mamba2.py at
// v4.57.1, 8cb5963c; its defaults are Mamba-Codestral-7B's): the mixer's
// inner width is expand × hidden_size and must equal num_heads ×
// head_dim (the class raises otherwise); n_groups groups share B and C;
// the embedding and lm_head are untied unless tie_word_embeddings.
func (c *config) mamba2(s *Spec) error {
	var e errs
	s.Hidden = e.i(c.posv(4096, "hidden_size"))
	s.Layers = e.i(c.posv(64, "num_hidden_layers"))
	s.Vocab = e.i(c.posv(32768, "vocab_size"))
	s.SSM.State = e.i(c.posv(128, "state_size"))
	s.SSM.ConvKernel = e.i(c.posv(4, "conv_kernel"))
	s.SSM.Heads = e.i(c.posv(128, "num_heads"))
	s.SSM.HeadDim = e.i(c.posv(64, "head_dim"))
	s.SSM.Groups = e.i(c.posv(8, "n_groups"))
	s.SSM.Chunk = e.i(c.posv(256, "chunk_size"))
	expand := e.i(c.posv(2, "expand"))
	s.SSM.ConvBias = e.b(c.boolv(true, "use_conv_bias"))
	s.SSM.Bias = e.b(c.boolv(false, "use_bias"))
	s.TiedEmbeddings = e.b(c.boolv(false, "tie_word_embeddings"))
	if e.err != nil {
		return e.err
	}
	var err error
	if s.Intermediate, err = mulField(c.field("expand"), s.Hidden, expand); err != nil {
		return err
	}
	if hd, ok := checked.Mul(s.SSM.Heads, s.SSM.HeadDim); !ok || hd != s.Intermediate {
		return gpumem.Errorf(c.field("num_heads"), s.SSM.Heads, gpumem.ErrInvalid,
			"num_heads × head_dim (%d × %d) must equal hidden_size × expand (%d)", s.SSM.Heads, s.SSM.HeadDim, s.Intermediate)
	}
	if s.SSM.Heads%s.SSM.Groups != 0 {
		return gpumem.Errorf(c.field("n_groups"), s.SSM.Groups, gpumem.ErrInvalid, "must divide num_heads (%d)", s.SSM.Heads)
	}
	s.Norm = RMSNorm
	return nil
}

// validateMamba2 checks a Mamba-2 Spec's fields.
func (s Spec) validateMamba2(path string) error {
	for _, f := range []struct {
		name  string
		v     int64
		limit int64
	}{{"Layers", s.Layers, maxLayers}, {"Hidden", s.Hidden, 1 << 24}, {"Intermediate", s.Intermediate, 1 << 26},
		{"Vocab", s.Vocab, 1 << 26}, {"SSM.State", s.SSM.State, 1 << 16}, {"SSM.ConvKernel", s.SSM.ConvKernel, 1 << 10},
		{"SSM.Heads", s.SSM.Heads, 1 << 20}, {"SSM.HeadDim", s.SSM.HeadDim, 1 << 16}, {"SSM.Groups", s.SSM.Groups, 1 << 20}} {
		if f.v <= 0 || f.v > f.limit {
			return gpumem.Errorf(path+"."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, %d]", f.limit)
		}
	}
	if s.SSM.Heads*s.SSM.HeadDim != s.Intermediate {
		return gpumem.Errorf(path+".SSM.Heads", s.SSM.Heads, gpumem.ErrInvalid, "Heads × HeadDim must equal Intermediate (%d)", s.Intermediate)
	}
	if s.SSM.Heads%s.SSM.Groups != 0 {
		return gpumem.Errorf(path+".SSM.Groups", s.SSM.Groups, gpumem.ErrInvalid, "must divide SSM.Heads (%d)", s.SSM.Heads)
	}
	return nil
}

// mamba2ConvDim is the width the depthwise convolution runs over:
// x, B and C, I + 2·n_groups·N (Mamba2Mixer.conv_dim).
func (s Spec) mamba2ConvDim() int64 {
	return s.Intermediate + 2*s.SSM.Groups*s.SSM.State
}

// buildMamba2 is Mamba2ForCausalLM (transformers modeling_mamba2.py at
// v4.57.1): the embedding, per block a Mamba2RMSNorm and the
// Mamba2Mixer (in_proj to z, xBC and dt: I + conv_dim + heads; the
// depthwise conv1d over conv_dim; dt_bias, A_log and D per head; the
// gated MambaRMSNormGated over I; out_proj), norm_f, lm_head unless
// tied.
func (s Spec) buildMamba2(b *builder) {
	H, I, K, nh := s.Hidden, s.Intermediate, s.SSM.ConvKernel, s.SSM.Heads
	conv := s.mamba2ConvDim()
	b.add("backbone.embeddings.weight", s.Vocab, H)
	b.stack(s.Layers, nil, func(i int64) {
		p := "backbone.layers." + itoa(i) + "."
		b.normP(p, "norm", H, RMSNorm)
		b.addP(p, "mixer.dt_bias", nh)
		b.addP(p, "mixer.A_log", nh)
		b.addP(p, "mixer.D", nh)
		b.addP(p, "mixer.conv1d.weight", conv, 1, K)
		if s.SSM.ConvBias {
			b.addP(p, "mixer.conv1d.bias", conv)
		}
		b.linearP(p, "mixer.in_proj", I+conv+nh, H, s.SSM.Bias)
		b.normP(p, "mixer.norm", I, RMSNorm)
		b.linearP(p, "mixer.out_proj", H, I, s.SSM.Bias)
	})
	b.norm("backbone.norm_f", H, RMSNorm)
	if !s.TiedEmbeddings {
		b.add("lm_head.weight", s.Vocab, H)
	}
}

// mamba2State is Mamba2Cache's per-layer values per sequence:
// conv_states [conv_dim, conv_kernel] and ssm_states [num_heads,
// head_dim, state_size] (transformers modeling_mamba2.py at v4.57.1,
// Mamba2Cache.__init__, in the cache's dtype).
func (s Spec) mamba2State() (int64, bool) {
	a, ok1 := checked.Mul(s.mamba2ConvDim(), s.SSM.ConvKernel)
	b, ok2 := checked.MulAll(s.SSM.Heads, s.SSM.HeadDim, s.SSM.State)
	return a + b, ok1 && ok2
}
