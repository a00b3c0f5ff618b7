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
	if layoutOf(&s) != layoutMamba {
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

// mamba fills a for MambaForCausalLM (transformers modeling_mamba.py,
// MambaMixer.cuda_kernels_forward with the mamba_ssm and causal_conv1d
// kernels installed; mamba_ssm ops/selective_scan_interface.py at
// 0e8d22c, MambaInnerFn with its default checkpoint_lvl 1). Per block of
// T = batch·seq tokens, in the compute dtype (e bytes):
//
//	MambaBlock       the residual stream is fp32 (residual_in_fp32);
//	                 the norm's input is its cast to the weights' dtype
//	MambaRMSNorm     as LlamaRMSNorm: fp32 copy 4·T·h, rsqrt 4·T, the
//	                 cast back e·T·h
//	in_proj          its input, the norm's output                  e·T·h
//	MambaInnerFn     xz, in_proj's output made contiguous        e·T·2I
//	                 x_dbl, x_proj's output               e·T·(R + 2N)
//	                 B and C, contiguous [b, 1, N, l] copies    2·e·T·N
//	                 out, the scan's output before the z gate     e·T·I
//	                 scan_intermediates, fp32 [b, I, ⌈l/2048⌉, 2N]
//	                 A = -exp(A_log.float()), fp32                4·I·N
//	                 (conv1d_out and delta are recomputed in backward)
//
// The forward transient is in_proj's output beside its copy, the
// convolution's output, delta and the gated output (5·e·T·I); backward
// holds dxz, the recomputed conv1d_out and delta, dout_y, ddelta,
// dconv1d_out and out_z (8·e·T·I). A pass without gradients (the
// prompt of generation) runs the same kernels unrecorded: in_proj's
// output, the convolution, x_dbl, delta and the scan's output
// (5·e·T·I + e·T·(R + 2N)). Under full checkpointing a block keeps its
// fp32 input (4·T·h).
func (c *actCalc) mamba(a *Activations, s Spec, w Workload, e int64) {
	T := c.m(w.Batch, w.SeqLen)
	H, I, N, R := s.Hidden, s.Intermediate, s.SSM.State, s.SSM.DTRank
	chunks, _ := checked.CeilDiv(w.SeqLen, 2048)
	norm := c.normSaved(actRMS, T, H, e)
	saved := c.a(norm, c.m(e, T, H), c.m(e, T, 2*I), c.m(e, T, R+2*N), c.m(2*e, T, N), c.m(e, T, I),
		c.m(4, w.Batch, I, chunks, 2*N), c.m(4, I, N))
	fwd := c.m(5*e, T, I)
	bwd := c.m(8*e, T, I)
	noGrad := c.a(c.m(5*e, T, I), c.m(e, T, R+2*N), c.m(e, T, H))
	input := c.m(4, T, H)
	l := LayerActivations{Kind: "mamba", Count: s.Layers, Tokens: w.SeqLen, Saved: gpumem.Bytes(saved),
		Input: gpumem.Bytes(input), Forward: gpumem.Bytes(fwd), Backward: gpumem.Bytes(bwd)}
	kept := saved
	switch {
	case !w.Train:
		l.Saved, l.Input, l.Backward = 0, 0, 0
		l.Forward = gpumem.Bytes(noGrad)
		kept = 0
	case w.Checkpointing == FullCheckpointing:
		kept = input
		l.Forward = gpumem.Bytes(noGrad)
		l.Backward = gpumem.Bytes(c.a(saved, bwd))
	}
	l.Kept, l.KeptTotal = gpumem.Bytes(kept), gpumem.Bytes(c.m(kept, s.Layers))
	c.push(l)
	a.Tokens = w.SeqLen
	if w.Train {
		a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), c.normSaved(actRMS, T, H, e)))
	}
	c.head(a, &s, w, e, T, T, false)
	c.finish(a, w)
}

// checkMamba refuses the workload options the Mamba activation model
// does not cover.
func (w Workload) checkMamba() error {
	switch w.Checkpointing {
	case NoCheckpointing, FullCheckpointing:
	default:
		return gpumem.Errorf("Workload.Checkpointing", w.Checkpointing, gpumem.ErrUnsupported, "a Mamba block is checkpointed whole (full) or not at all")
	}
	if w.TensorParallel > 1 || w.SequenceParallel || w.ContextParallel > 1 {
		return gpumem.Errorf("Workload.TensorParallel", w.TensorParallel, gpumem.ErrUnsupported, "Mamba's activations are modelled on one GPU")
	}
	if w.Dropout || w.Images > 0 {
		return gpumem.Errorf("Workload.Images", w.Images, gpumem.ErrUnsupported, "a Mamba language model has no dropout or image input")
	}
	if w.Loss.Kind != FullLoss {
		return gpumem.Errorf("Workload.Loss", w.Loss, gpumem.ErrUnsupported, "Mamba is modelled with the full cross-entropy")
	}
	return nil
}
