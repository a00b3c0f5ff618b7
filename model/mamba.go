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
	// Heads, HeadDim, Groups and Chunk are Mamba-2's num_heads,
	// head_dim, n_groups and chunk_size (zero for Mamba).
	Heads, HeadDim, Groups, Chunk int64
	// Inner is a hybrid's Mamba width, mamba_expand × hidden (Jamba;
	// Mamba keeps it in Spec.Intermediate). AttnPeriod and AttnOffset
	// place the attention layers, ExpertPeriod and ExpertOffset the
	// MoE feed-forwards (Jamba's attn_layer_* and expert_layer_*).
	Inner, AttnPeriod, AttnOffset, ExpertPeriod, ExpertOffset int64
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
	if err = c.dtRank(s, "time_step_rank"); err != nil {
		return err
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
// dtype=dtype)), a size independent of the sequence length. For
// Mamba-2, Mamba2Cache's conv_states [batch, I + 2·n_groups·N,
// conv_kernel] and ssm_states [batch, heads, head_dim, N]. For Jamba,
// HybridMambaAttentionDynamicCache's conv and ssm states of its Mamba
// layers only (its attention layers' keys and values are a KV cache).
func (s Spec) MambaState(batch int64, dt gpumem.DType) (gpumem.Bytes, error) {
	l := layoutOf(&s)
	if l != layoutMamba && l != layoutMamba2 && l != layoutJamba && l != layoutZamba {
		return 0, gpumem.Errorf("Spec.Family", s.Family, gpumem.ErrInvalid, "not a mamba, mamba2, jamba, zamba or zamba2 model")
	}
	// The layout's own field checks (not Validate, which builds the
	// inventory): a generation estimate calls this and must not allocate.
	var err error
	switch l {
	case layoutMamba:
		err = s.validateMamba("Spec")
	case layoutMamba2:
		err = s.validateMamba2("Spec")
	case layoutZamba:
		err = s.validateZamba("Spec")
	default:
		err = s.validateJamba("Spec")
	}
	if err != nil {
		return 0, err
	}
	if batch < 1 || batch > 1<<30 {
		return 0, gpumem.Errorf("batch", batch, gpumem.ErrInvalid, "must be in [1, 2^30]")
	}
	per, ok := checked.Mul(s.Intermediate, s.SSM.ConvKernel+s.SSM.State)
	layers := s.Layers
	switch l {
	case layoutMamba2:
		per, ok = s.mamba2State()
	case layoutJamba:
		per, ok = s.jambaState()
		layers = 1
	case layoutZamba:
		per, ok = s.zambaState()
		layers = 1
	}
	n, ok2 := checked.MulAll(layers, batch, per)
	ok = ok && ok2
	if !ok {
		return 0, gpumem.Errorf("batch", batch, gpumem.ErrRange, "state size overflows")
	}
	return dt.Size(n)
}

// SSMKernel is the implementation of a state-space mixer (Mamba,
// Mamba-2, Jamba) whose saved tensors an estimate assumes
// (Workload.SSMKernel). The zero value is [FusedSSM], what the mixers
// run on a CUDA device with mamba_ssm and causal_conv1d installed.
type SSMKernel uint8

const (
	// FusedSSM is mamba_ssm's kernels as each mixer's
	// cuda_kernels_forward calls them: MambaInnerFn (Mamba),
	// mamba_split_conv1d_scan_combined (Mamba-2), causal_conv1d_fn and
	// selective_scan_fn (Jamba). The scans keep their state on chip.
	FusedSSM SSMKernel = iota
	// SequentialSSM is transformers' code without the kernels (on the
	// CPU, or on a GPU without mamba_ssm): MambaMixer's and
	// JambaMambaMixer's slow_forward (use_mambapy false), whose
	// discretized A and B are fp32 [b, I, l, N] tensors and whose
	// recurrence is a Python loop keeping every state, and
	// Mamba2Mixer's torch_forward, the chunked SSD in plain torch.
	SequentialSSM

	numSSMKernels
)

// String returns "fused" or "sequential".
func (k SSMKernel) String() string {
	switch k {
	case FusedSSM:
		return "fused"
	case SequentialSSM:
		return "sequential"
	}
	return "SSMKernel(" + itoa(int64(k)) + ")"
}

// ParseSSMKernel parses "fused" or "sequential" (also "slow").
func ParseSSMKernel(s string) (SSMKernel, error) {
	switch s {
	case "", "fused", "cuda":
		return FusedSSM, nil
	case "sequential", "slow":
		return SequentialSSM, nil
	}
	return 0, gpumem.Errorf("ssm_kernel", s, gpumem.ErrInvalid, `want "fused" or "sequential"`)
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
	if w.SSMKernel == SequentialSSM {
		saved, fwd, bwd, noGrad = c.mambaSequential(s, w, e)
	}
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
		// norm_f runs on the fp32 residual stream (MambaModel.forward
		// passes the last block's fp32 sum): its .to(float32) is that
		// stream, and weight · x.to(input_dtype) saves the fp32
		// normalized copy (8·T·h + 4·T, whatever the compute dtype;
		// testdata/oracle/mamba.json). lm_head's input is its cast to
		// the weights' dtype (MambaForCausalLM.forward).
		a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), c.m(8, T, H), c.m(4, T)))
	}
	c.head(a, &s, w, e, T, T, false)
	c.finish(a, w)
}

// checkMamba refuses the workload options the Mamba activation model
// does not cover.
func (w Workload) checkMamba() error {
	if w.SSMKernel >= numSSMKernels {
		return gpumem.Errorf("Workload.SSMKernel", w.SSMKernel, gpumem.ErrInvalid, "unknown Mamba kernel")
	}
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

// mambaSequential returns what one block saves, its forward and
// backward transients and its no-grad transient under
// MambaMixer.slow_forward (transformers modeling_mamba.py at v4.57.1,
// 8cb5963c; use_mambapy false, no cache in training). For b sequences
// of l tokens (T = b·l), compute dtype e bytes, K = conv_kernel, by
// the op that saves it:
//
//	MambaRMSNorm      4·T·h + 4·T + e·T·h (as LlamaRMSNorm)
//	in_proj           its input                                e·T·h
//	projected_states  in_proj's output, whose hidden_states half
//	                  conv1d and whose gate half SiLU save       e·T·2I
//	conv1d            its output [b, I, l + K − 1] (padding K − 1,
//	                  sliced to l), saved by SiLU        e·b·I·(l+K−1)
//	SiLU(conv)        its output, saved by x_proj and ·D         e·T·I
//	x_proj input      for b > 1 the transposed [b, l, I] is not a
//	                  view of [b·l, I]: linear's copy            e·T·I
//	x_dbl             x_proj's output (dt_proj's time_step, C)
//	                                                      e·T·(R + 2N)
//	dt_proj           its output, saved by softplus             e·T·I
//	softplus          its output Δ, saved by A·Δ and Δ·B        e·T·I
//	A                 exp(A_log.float()) and −exp(·), fp32     8·I·N
//	discrete_A        exp(A·Δ), fp32 [b, I, l, N]           4·T·I·N
//	discrete_B        Δ·B.float(), fp32 [b, I, l, N]        4·T·I·N
//	B.float(), u.float()  fp32 copies when e < 4      4·T·N + 4·T·I
//	the loop          state_0 (zeros, dtype e), saved by the first
//	                  product                                   e·b·I·N
//	                  state_1 … state_{l−1}, fp32, saved by the next
//	                  step's product                    4·(l−1)·b·I·N
//	                  matmul's state.to(dtype): l copies when e < 4,
//	                  else state_l itself       l·e·b·I·N or 4·b·I·N
//	gating            scan_output + u·D, SiLU(gate)           2·e·T·I
//	out_proj          its input                                 e·T·I
//
// testdata/oracle/mamba.json records these per block from transformers'
// own MambaForCausalLM on the CPU (tools/oracle/mamba.py); every case
// matches to the byte. deltaB_u = discrete_B·u (fp32, [b, I, l, N]) is
// not saved (its add saves nothing): it is the forward transient beside
// the saved tensors, 4·T·I·N. In backward the gradients of deltaB_u and
// discrete_A accumulate over the l steps of the loop, and each step's
// indexing discrete_A[:, :, i, :] (deltaB_u's too) records a
// SelectBackward0 and, for each leading ":", a SliceBackward0: the
// select_backward's zero-filled [b, I, l, N] gradient is the input of
// a slice_backward that makes another and copies it in, so two are
// alive beside the two accumulated gradients: 4·4·T·I·N (the CPU
// profiler's backward of transformers' MambaMixer counts 256
// select_backward and 658 slice_backward calls for one block of 64
// tokens; testdata/measured/cpu, the mamba-small training rows). A pass without gradients keeps every local of
// slow_forward alive until it returns, so its peak is the gating's add
// after the loop: discrete_A, discrete_B and deltaB_u (12·T·I·N),
// projected_states (e·T·2I), SiLU's output, Δ, the list of the l
// matmul outputs, their stack, u·D and the sum (6·e·T·I), and x_dbl
// (e·T·(R + 2N)); the convolution's padded output is freed by then.
func (c *actCalc) mambaSequential(s Spec, w Workload, e int64) (saved, fwd, bwd, noGrad int64) {
	b, l := w.Batch, w.SeqLen
	T := c.m(b, l)
	H, I, N, R, K := s.Hidden, s.Intermediate, s.SSM.State, s.SSM.DTRank, s.SSM.ConvKernel
	big := c.m(4, T, I, N)
	copyIn := int64(0)
	if b > 1 {
		copyIn = c.m(e, T, I)
	}
	upcast := int64(0)
	last := c.m(4, b, I, N)
	if e < 4 {
		upcast = c.a(c.m(4, T, N), c.m(4, T, I))
		last = c.m(l, e, b, I, N)
	}
	states := c.a(c.m(e, b, I, N), c.m(4, l-1, b, I, N), last)
	saved = c.a(c.normSaved(actRMS, T, H, e), c.m(e, T, H), c.m(2*e, T, I), c.m(e, b, I, l+K-1), c.m(e, T, I), copyIn,
		c.m(e, T, R+2*N), c.m(2*e, T, I), c.m(8, I, N), c.m(2, big), upcast, states, c.m(3*e, T, I))
	fwd = big
	bwd = c.m(4, big)
	noGrad = c.a(c.m(3, big), c.m(8*e, T, I), c.m(e, T, R+2*N), c.m(e, T, H))
	return saved, fwd, bwd, noGrad
}
