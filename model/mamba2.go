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

// mamba2 fills a for Mamba2ForCausalLM under Mamba2Mixer.torch_forward
// (transformers modeling_mamba2.py at v4.57.1, 8cb5963c: the chunked SSD
// "naive implementation" run without mamba_ssm, no cache in training).
// For b sequences of l tokens (T = b·l) padded to L = c·Q (c chunks of
// chunk_size Q), h heads, width I = h·P, G groups, state N, conv width
// D = I + 2·G·N, P_in = I + D + h, compute dtype e bytes, per block:
//
//	Mamba2RMSNorm     fp32 copy of the input cast, rsqrt, the cast
//	                  back, and in_proj's input    4·T·H + 4·T + 2·e·T·H
//	projected_states  in_proj's output, saved by the convolution (and by
//	                  SiLU(gate) in fp32)                      e·T·P_in
//	conv1d            its output [b, D, l + K − 1]        e·b·D·(l+K−1)
//	x                 fp32: SiLU's output xBC itself, saved by x·Δ,
//	                  4·T·D; 16-bit: x.float()                   4·T·I
//	Δ                 dt + dt_bias, softplus, clamp           3·e·T·h
//	A                 exp(A_log.float()) and −exp(·), fp32        8·h
//	x·Δ chunked       padded to L (reshape_into_chunks)          4·b·L·I
//	D_residual        the padded x saved by D·x                  4·b·L·I
//	B, C chunked      repeated to heads and padded, B·decay   3·4·b·L·h·N
//	segment_sum       two bool masks per call           2·Q² + 2·(c+1)²
//	L = exp(segsum)   [b, h, c, Q, Q]                   4·b·h·c·Q²
//	G, M              the contractions C·B and G·L     2·4·b·c·Q²·h
//	decay_states, exp(A_cumsum)                             2·4·b·h·L
//	states            the concatenated and the decayed states,
//	                  [b, c + 1, h, P, N] each          2·4·b·(c+1)·I·N
//	decay_chunk       [b, h, c + 1, c + 1]                 4·b·h·(c+1)²
//	C·states summed   saved by the decay out                     4·b·L·I
//	gated norm        y (a view of the padded sum, 4·b·L·I),
//	                  SiLU(gate.float()) and its 16-bit input's fp32
//	                  copy, y·SiLU(gate), the normalized x, rsqrt
//	                                            3·4·T·I (+4·T·I) + 4·T
//	out_proj          its input                                  e·T·I
//
// testdata/oracle/mamba2.json records these per block from transformers'
// own Mamba2ForCausalLM on the CPU (tools/oracle/mamba.py --mamba2): six
// cases with and without padding, one to three groups, fp32 and bf16,
// every block to the byte. Nothing of the broadcast products is saved,
// but each is a local of torch_forward, alive until the mixer returns:
// G_intermediate [b, c, Q, Q, h, N] and C_times_states [b, c, Q, h, P, N]
// (fp32) are the forward transient with M_intermediate [b, c, Q, Q, h]
// and, before C_times_states is made, Y_diag's product [b, c, Q, Q, h,
// P]: 4·b·c·Q²·h·(N + 1) + max(4·b·c·Q²·I, 4·b·L·I·N); backward
// materializes their gradients (MulBackward of a broadcast operand), the
// same bytes. A pass without gradients runs the same code: those locals
// beside in_proj's output, xBC, the fp32 x·Δ, its chunks and D_residual,
// B and C repeated and chunked, L, G and M
// (testdata/measured/cpu, the mamba2-small prefill rows).
func (c *actCalc) mamba2(a *Activations, s Spec, w Workload, e int64) {
	b, l := w.Batch, w.SeqLen
	T := c.m(b, l)
	H := s.Hidden
	saved, big, noGrad := c.mamba2Torch(s, w, e)
	if w.SSMKernel == FusedSSM {
		saved, big, noGrad = c.mamba2Fused(s, w, e)
	}
	bwd := c.mamba2TorchBackward(s, w)
	if w.SSMKernel == FusedSSM {
		bwd = c.mamba2FusedBackward(s, w, e)
	}
	l0 := LayerActivations{Kind: "mamba2", Count: s.Layers, Tokens: l, Saved: gpumem.Bytes(saved),
		Input: gpumem.Bytes(c.m(4, T, H)), Forward: gpumem.Bytes(big), Backward: gpumem.Bytes(bwd)}
	kept := saved
	switch {
	case !w.Train:
		l0.Saved, l0.Input, l0.Backward = 0, 0, 0
		l0.Forward = gpumem.Bytes(noGrad)
		kept = 0
	case w.Checkpointing == FullCheckpointing:
		kept = int64(l0.Input)
		l0.Forward = gpumem.Bytes(noGrad)
		l0.Backward = gpumem.Bytes(c.a(saved, bwd))
	}
	l0.Kept, l0.KeptTotal = gpumem.Bytes(kept), gpumem.Bytes(c.m(kept, s.Layers))
	c.push(l0)
	a.Tokens = l
	if w.Train {
		// norm_f on the fp32 residual stream, as Mamba's (model/mamba.go).
		a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), c.m(8, T, H), c.m(4, T)))
	}
	c.head(a, &s, w, e, T, T, false)
	c.finish(a, w)
}

// mamba2TorchBackward is the backward transient of one block under
// torch_forward: the MulBackward0 of a broadcast product computes both
// operands' gradients at the product's full shape (mul_tensor_backward,
// grad · other) and the engine reduces each to its operand's shape only
// after the node returns (validate_outputs, sum_to in
// torch/csrc/autograd/engine.cpp, torch 2.6), so the two full-size
// gradients of the largest product, Y_diag's [b, c, Q, Q, h, P],
// G_intermediate's [b, c, Q, Q, h, N] or the states' [b, c, Q, h, P, N],
// are alive together (testdata/measured/cpu, the mamba2-small training
// rows).
func (c *actCalc) mamba2TorchBackward(s Spec, w Workload) int64 {
	b, l := w.Batch, w.SeqLen
	I, N, nh, Q := s.Intermediate, s.SSM.State, s.SSM.Heads, s.SSM.Chunk
	ch, _ := checked.CeilDiv(l, Q)
	L := c.m(ch, Q)
	return c.m(2, max(c.m(4, b, ch, Q, Q, I), c.m(4, b, ch, Q, Q, nh, N), c.m(4, b, L, I, N)))
}

// mamba2Torch returns what one block saves, its forward transient and
// its no-grad transient under Mamba2Mixer.torch_forward (see mamba2),
// the mixer's width read from s.Intermediate.
func (c *actCalc) mamba2Torch(s Spec, w Workload, e int64) (saved, big, noGrad int64) {
	b, l := w.Batch, w.SeqLen
	T := c.m(b, l)
	H, I, N, K, nh, Q := s.Hidden, s.Intermediate, s.SSM.State, s.SSM.ConvKernel, s.SSM.Heads, s.SSM.Chunk
	D := s.mamba2ConvDim()
	P := I + D + nh
	ch, _ := checked.CeilDiv(l, Q)
	L := c.m(ch, Q)
	x := c.m(4, T, D)
	gate := int64(0)
	if e < 4 {
		x = c.m(4, T, I)
		gate = c.m(4, T, I)
	}
	saved = c.a(c.m(4, T, H), c.m(4, T), c.m(2*e, T, H), c.m(e, T, P), c.m(e, b, D, l+K-1), x, c.m(3*e, T, nh), 8*nh,
		c.m(4*4, b, L, I), c.m(3*4, b, L, nh, N), 2*Q*Q+2*(ch+1)*(ch+1), c.m(3*4, b, ch, Q, Q, nh),
		c.m(2*4, b, nh, L), c.m(2*4, b, ch+1, I, N), c.m(4, b, nh, ch+1, ch+1),
		c.m(3*4, T, I), gate, c.m(4, T), c.m(e, T, I))
	// G_intermediate and M_intermediate stay alive (locals) while Y_diag's
	// broadcast product M[..., None]·x[:, :, None], fp32 [b, c, Q, Q, h,
	// P], is summed, and later while the states' product B_decay·x and
	// C_times_states, fp32 [b, c, Q, h, P, N] each, are made.
	gInt, mInt := c.m(4, b, ch, Q, Q, nh, N), c.m(4, b, ch, Q, Q, nh)
	big = c.a(gInt, mInt, max(c.m(4, b, ch, Q, Q, I), c.m(4, b, L, I, N)))
	// Without a graph the other locals live beside it: in_proj's output,
	// SiLU's xBC, the fp32 x·Δ, its padded chunks and D_residual, B and C
	// repeated to the heads and padded, L, G and M.
	noGrad = c.a(big, c.m(e, T, P), c.m(e, T, D), c.m(3*4, b, L, I), c.m(2*4, b, L, nh, N), c.m(2*4, T, nh, N),
		c.m(3*4, b, ch, Q, Q, nh), c.m(e, T, H))
	return saved, big, noGrad
}

// mamba2Fused returns what one Mamba-2 block saves, its forward
// transient and its no-grad transient under the mamba_ssm kernels, as
// Mamba2Mixer.cuda_kernels_forward calls them (transformers
// modeling_mamba2.py at v4.57.1; mamba_ssm ops/triton/ssd_combined.py
// at e9594ce1). Derived from the source, without an oracle (no GPU).
//
// Training calls mamba_split_conv1d_scan_combined with the gated
// RMSNorm and out_proj fused in; MambaSplitConv1dScanCombinedFn saves
// zxbcdt (in_proj's output, e·T·P_in), out_x (the scan's output before
// the norm, e·T·I) and the norm's rstd (fp32, one per token and group,
// 4·T·G); A = −exp(A_log.float()) keeps its exp (8·h), and the block's
// Mamba2RMSNorm and in_proj save what they save under torch_forward
// (4·T·H + 4·T + 2·e·T·H). The convolution's output, Δ and the chunk
// states are recomputed in backward.
//
// The forward transient is what _mamba_chunk_scan_combined_fwd holds
// beside the convolution's output (e·T·D): dA_cumsum and Δ, fp32
// [b, h, c, Q] (8·b·h·L), and at its largest either the fp32 chunk
// states with their state-passed copy in the compute dtype
// ((4 + e)·b·c·I·N) or that copy with CB, fp32 [b, c, G, Q, Q].
//
// A pass without gradients (prefill) takes the unfused branch:
// causal_conv1d_fn, mamba_chunk_scan_combined and transformers'
// MambaRMSNormGated in torch, whose fp32 copies of the output and of
// the gate, the gate's SiLU and their product (4·4·T·I) outweigh the
// scan's own transient at long sequences; beside them in_proj's
// output, the convolution's and the scan's (e·T·(P_in + D + I)).
func (c *actCalc) mamba2Fused(s Spec, w Workload, e int64) (saved, fwd, noGrad int64) {
	b, l := w.Batch, w.SeqLen
	T := c.m(b, l)
	H, I, N, nh, G, Q := s.Hidden, s.Intermediate, s.SSM.State, s.SSM.Heads, s.SSM.Groups, s.SSM.Chunk
	D := s.mamba2ConvDim()
	P := I + D + nh
	ch, _ := checked.CeilDiv(l, Q)
	L := c.m(ch, Q)
	saved = c.a(c.m(4, T, H), c.m(4, T), c.m(2*e, T, H), c.m(e, T, P), c.m(e, T, I), c.m(4, T, G), 8*nh)
	scan := c.a(c.m(8, b, nh, L), max(c.m(4+e, b, ch, I, N), c.a(c.m(e, b, ch, I, N), c.m(4, b, ch, G, Q, Q))))
	fwd = c.a(c.m(e, T, D), scan)
	noGrad = c.a(c.m(e, T, P+D+I), max(scan, c.m(16, T, I)), c.m(e, T, H))
	return saved, fwd, noGrad
}

// mamba2FusedBackward is the transient of MambaSplitConv1dScanCombinedFn's
// backward (ssd_combined.py at e9594ce1): the recomputed convolution
// output (e·T·D), dzxbcdt (e·T·P_in), dxBC (e·T·D), the recomputed
// norm output for out_proj's weight gradient (e·T·I), and
// _mamba_chunk_scan_combined_bwd's recomputed chunk states and CB, as
// in the forward.
func (c *actCalc) mamba2FusedBackward(s Spec, w Workload, e int64) int64 {
	b, l := w.Batch, w.SeqLen
	T := c.m(b, l)
	I, N, nh, G, Q := s.Intermediate, s.SSM.State, s.SSM.Heads, s.SSM.Groups, s.SSM.Chunk
	D := s.mamba2ConvDim()
	ch, _ := checked.CeilDiv(l, Q)
	L := c.m(ch, Q)
	scan := c.a(c.m(8, b, nh, L), max(c.m(4+e, b, ch, I, N), c.a(c.m(e, b, ch, I, N), c.m(4, b, ch, G, Q, Q))))
	return c.a(c.m(2*e, T, D), c.m(e, T, I+D+nh), c.m(e, T, I), scan)
}
