package model

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// FamilyJamba is transformers' JambaForCausalLM (model_type "jamba").
const FamilyJamba = "jamba"

// jamba reads a JambaConfig (transformers configuration_jamba.py at
// v4.57.1, 8cb5963c; its defaults are Jamba-v0.1's). Layer i is an
// attention layer when i % attn_layer_period == attn_layer_offset and a
// Mamba layer otherwise (layers_block_type); its feed-forward is a
// JambaSparseMoeBlock of num_experts experts when i %
// expert_layer_period == expert_layer_offset, else one JambaMLP
// (layers_num_experts). The Mamba mixer's width is mamba_expand ×
// hidden_size; mamba_dt_rank "auto" is ceil(hidden_size / 16); the
// attention's head_dim is hidden_size // num_attention_heads.
func (c *config) jamba(s *Spec) error {
	var e errs
	s.Hidden = e.i(c.posv(4096, "hidden_size"))
	s.Layers = e.i(c.posv(32, "num_hidden_layers"))
	s.Vocab = e.i(c.posv(65536, "vocab_size"))
	s.Intermediate = e.i(c.posv(14336, "intermediate_size"))
	s.Heads = e.i(c.posv(32, "num_attention_heads"))
	// num_key_value_heads defaults to 8; an explicit null means
	// num_attention_heads (JambaConfig.__init__).
	kvDefault := int64(8)
	if v, ok := c.m["num_key_value_heads"]; ok && v == nil {
		kvDefault = s.Heads
	}
	s.KVHeads = e.i(c.posv(kvDefault, "num_key_value_heads"))
	s.Positions = e.i(c.posv(262144, "max_position_embeddings"))
	s.MoE.Experts = e.i(c.posv(16, "num_experts"))
	s.MoE.Active = e.i(c.posv(2, "num_experts_per_tok"))
	s.SSM.ExpertPeriod = e.i(c.posv(2, "expert_layer_period"))
	s.SSM.ExpertOffset = e.i(c.intv(1, "expert_layer_offset"))
	s.SSM.AttnPeriod = e.i(c.posv(8, "attn_layer_period"))
	s.SSM.AttnOffset = e.i(c.intv(4, "attn_layer_offset"))
	s.SSM.State = e.i(c.posv(16, "mamba_d_state"))
	s.SSM.ConvKernel = e.i(c.posv(4, "mamba_d_conv"))
	expand := e.i(c.posv(2, "mamba_expand"))
	s.SSM.ConvBias = e.b(c.boolv(true, "mamba_conv_bias"))
	s.SSM.Bias = e.b(c.boolv(false, "mamba_proj_bias"))
	s.TiedEmbeddings = e.b(c.boolv(false, "tie_word_embeddings"))
	if e.err != nil {
		return e.err
	}
	// JambaConfig._check_supported_offset: an offset must be below its
	// period.
	if s.SSM.AttnOffset < 0 || s.SSM.AttnOffset >= s.SSM.AttnPeriod {
		return gpumem.Errorf(c.field("attn_layer_offset"), s.SSM.AttnOffset, gpumem.ErrInvalid, "must be in [0, attn_layer_period %d)", s.SSM.AttnPeriod)
	}
	if s.SSM.ExpertOffset < 0 || s.SSM.ExpertOffset >= s.SSM.ExpertPeriod {
		return gpumem.Errorf(c.field("expert_layer_offset"), s.SSM.ExpertOffset, gpumem.ErrInvalid, "must be in [0, expert_layer_period %d)", s.SSM.ExpertPeriod)
	}
	if s.MoE.Active > s.MoE.Experts {
		return gpumem.Errorf(c.field("num_experts_per_tok"), s.MoE.Active, gpumem.ErrInvalid, "more than num_experts (%d)", s.MoE.Experts)
	}
	var err error
	if s.SSM.Inner, err = mulField(c.field("mamba_expand"), s.Hidden, expand); err != nil {
		return err
	}
	if err = c.dtRank(s, "mamba_dt_rank"); err != nil {
		return err
	}
	s.HeadDim = s.Hidden / s.Heads
	s.MoE.Intermediate = s.Intermediate
	s.Norm = RMSNorm
	s.Gated = true // JambaMLP: down(act(gate) · up)
	return nil
}

// validateJamba checks a Jamba Spec's fields.
func (s Spec) validateJamba(path string) error {
	for _, f := range []struct {
		name  string
		v     int64
		limit int64
	}{{"Layers", s.Layers, maxLayers}, {"Hidden", s.Hidden, 1 << 24}, {"Intermediate", s.Intermediate, 1 << 26},
		{"Vocab", s.Vocab, 1 << 26}, {"Heads", s.Heads, 1 << 16}, {"KVHeads", s.KVHeads, 1 << 16}, {"HeadDim", s.HeadDim, 1 << 16},
		{"MoE.Experts", s.MoE.Experts, 1 << 16}, {"MoE.Active", s.MoE.Active, 1 << 16},
		{"SSM.Inner", s.SSM.Inner, 1 << 26}, {"SSM.State", s.SSM.State, 1 << 16}, {"SSM.ConvKernel", s.SSM.ConvKernel, 1 << 10},
		{"SSM.DTRank", s.SSM.DTRank, 1 << 24}, {"SSM.AttnPeriod", s.SSM.AttnPeriod, maxLayers},
		{"SSM.ExpertPeriod", s.SSM.ExpertPeriod, maxLayers}} {
		if f.v <= 0 || f.v > f.limit {
			return gpumem.Errorf(path+"."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, %d]", f.limit)
		}
	}
	if s.SSM.AttnOffset < 0 || s.SSM.AttnOffset >= s.SSM.AttnPeriod {
		return gpumem.Errorf(path+".SSM.AttnOffset", s.SSM.AttnOffset, gpumem.ErrInvalid, "must be in [0, SSM.AttnPeriod)")
	}
	if s.SSM.ExpertOffset < 0 || s.SSM.ExpertOffset >= s.SSM.ExpertPeriod {
		return gpumem.Errorf(path+".SSM.ExpertOffset", s.SSM.ExpertOffset, gpumem.ErrInvalid, "must be in [0, SSM.ExpertPeriod)")
	}
	if s.MoE.Active > s.MoE.Experts {
		return gpumem.Errorf(path+".MoE.Active", s.MoE.Active, gpumem.ErrInvalid, "more than MoE.Experts (%d)", s.MoE.Experts)
	}
	if s.Heads%s.KVHeads != 0 {
		return gpumem.Errorf(path+".KVHeads", s.KVHeads, gpumem.ErrInvalid, "does not divide the %d query heads", s.Heads)
	}
	return nil
}

// JambaAttention reports whether layer i of a Jamba model is an
// attention layer (JambaConfig.layers_block_type).
func (s Spec) JambaAttention(i int64) bool { return i%s.SSM.AttnPeriod == s.SSM.AttnOffset }

// jambaMoE reports whether layer i's feed-forward is the sparse MoE
// block (JambaConfig.layers_num_experts; one expert is a JambaMLP).
func (s Spec) jambaMoE(i int64) bool {
	return s.MoE.Experts > 1 && i%s.SSM.ExpertPeriod == s.SSM.ExpertOffset
}

// AttentionLayers returns how many layers of s hold a KV cache: every
// layer but a Jamba model's Mamba layers, none for Mamba and Mamba-2.
func (s Spec) AttentionLayers() int64 {
	switch layoutOf(&s) {
	case layoutMamba, layoutMamba2:
		return 0
	case layoutJamba:
		if s.SSM.AttnPeriod <= 0 || s.SSM.AttnOffset >= s.Layers {
			return 0
		}
		return (s.Layers-1-s.SSM.AttnOffset)/s.SSM.AttnPeriod + 1
	case layoutZamba:
		// Each hybrid layer's invocation of the shared block keeps its
		// own keys and values (Zamba*HybridDynamicCache.transformer_layers).
		return s.zambaHybrids()
	}
	return s.Layers
}

// buildJamba is JambaForCausalLM (transformers modeling_jamba.py at
// v4.57.1): embed_tokens; per layer input_layernorm, either self_attn
// (q/k/v/o without biases, JambaAttention) or mamba (JambaMambaMixer:
// MambaMixer's tensors plus the dt_layernorm, b_layernorm and
// c_layernorm RMSNorms over dt_rank, N and N), pre_ff_layernorm and
// feed_forward (a router and num_experts gated MLPs, or one MLP);
// final_layernorm; lm_head unless tied.
func (s Spec) buildJamba(b *builder) {
	H, I, N, R, K, F := s.Hidden, s.SSM.Inner, s.SSM.State, s.SSM.DTRank, s.SSM.ConvKernel, s.Intermediate
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	b.add("model.embed_tokens.weight", s.Vocab, H)
	class := func(i int64) int {
		c := 0
		if s.JambaAttention(i) {
			c = 1
		}
		if s.jambaMoE(i) {
			c += 2
		}
		return c
	}
	mlp := func(p string) {
		b.linearP(p, "gate_proj", F, H, false)
		b.linearP(p, "up_proj", F, H, false)
		b.linearP(p, "down_proj", H, F, false)
	}
	b.stack(s.Layers, class, func(i int64) {
		p := "model.layers." + itoa(i) + "."
		b.normP(p, "input_layernorm", H, RMSNorm)
		if s.JambaAttention(i) {
			b.linearP(p, "self_attn.q_proj", q, H, false)
			b.linearP(p, "self_attn.k_proj", kv, H, false)
			b.linearP(p, "self_attn.v_proj", kv, H, false)
			b.linearP(p, "self_attn.o_proj", H, q, false)
		} else {
			b.addP(p, "mamba.A_log", I, N)
			b.addP(p, "mamba.D", I)
			b.addP(p, "mamba.conv1d.weight", I, 1, K)
			if s.SSM.ConvBias {
				b.addP(p, "mamba.conv1d.bias", I)
			}
			b.linearP(p, "mamba.in_proj", 2*I, H, s.SSM.Bias)
			b.linearP(p, "mamba.x_proj", R+2*N, I, false)
			b.linearP(p, "mamba.dt_proj", I, R, true)
			b.linearP(p, "mamba.out_proj", H, I, s.SSM.Bias)
			b.normP(p, "mamba.dt_layernorm", R, RMSNorm)
			b.normP(p, "mamba.b_layernorm", N, RMSNorm)
			b.normP(p, "mamba.c_layernorm", N, RMSNorm)
		}
		b.normP(p, "pre_ff_layernorm", H, RMSNorm)
		if s.jambaMoE(i) {
			b.linearP(p, "feed_forward.router", s.MoE.Experts, H, false)
			b.repeat(s.MoE.Experts, func(e int64) {
				mlp(p + "feed_forward.experts." + itoa(e) + ".")
			})
		} else {
			mlp(p + "feed_forward.")
		}
	})
	b.norm("model.final_layernorm", H, RMSNorm)
	if !s.TiedEmbeddings {
		b.add("lm_head.weight", s.Vocab, H)
	}
}

// jambaState is HybridMambaAttentionDynamicCache's Mamba part per
// sequence (transformers modeling_jamba.py at v4.57.1): for each Mamba
// layer conv_states [I, d_conv] and ssm_states [I, d_state].
func (s Spec) jambaState() (int64, bool) {
	return checked.MulAll(s.Layers-s.AttentionLayers(), s.SSM.Inner, s.SSM.ConvKernel+s.SSM.State)
}

// jambaMixer returns what one JambaMambaMixer saves, its forward and
// backward transients and its no-grad live set, for the workload's
// kernel (transformers modeling_jamba.py at v4.57.1, 8cb5963c). The
// mixer is MambaMixer (model/mamba.go) with RMSNorms on Δ's rank, B and
// C after x_proj, and dt_proj's bias added by the scan. For b sequences
// of l tokens (T = b·l), width I, state N, rank R, K taps, compute
// dtype e bytes:
//
// SequentialSSM (slow_forward, use_mamba_kernels false) saves Mamba's
// sequential terms but for x_proj's output: the three norms keep its
// fp32 values (the output itself in fp32, fp32 copies of its slices
// otherwise: 4·T·(R + 2N)), their rsqrt (3·4·T) and normalized casts
// (e·T·(R + 2N)); dt_proj keeps the normalized Δ (e·T·R), the Δ·B
// product the normalized B in fp32 (4·T·N), and the scan's matmul the
// normalized C (e·T·N). testdata/oracle/jamba.json measures it on
// transformers' own JambaForCausalLM (every Mamba layer to the byte).
//
// FusedSSM (cuda_kernels_forward: causal_conv1d_fn, then
// selective_scan_fn; mamba_inner_fn cannot take the inner norms),
// derived from the source (mamba_ssm selective_scan_interface.py at
// e9594ce1), without an oracle: CausalConv1dFn keeps in_proj's output
// (its x half is the channel-last input, e·T·2I); x_proj its input, the
// convolution's output (a copy for b > 1: e·T·I more); the norms and
// dt_proj as above; SelectiveScanFn u (that output), the contiguous
// copies of Δ, B, C and z (e·T·(2I + 2N)), A and its exp (8·I·N), D and
// the detached dt_proj bias as fp32 copies when e < 4 (8·I), the fp32
// scan checkpoints every 2048 positions (4·b·I·⌈l/2048⌉·2N) and its
// ungated output (e·T·I); out_proj the gated output (e·T·I).
func (c *actCalc) jambaMixer(s Spec, w Workload, e int64) (saved, fwd, bwd, noGrad int64) {
	b, l := w.Batch, w.SeqLen
	T := c.m(b, l)
	I, N, R, K := s.SSM.Inner, s.SSM.State, s.SSM.DTRank, s.SSM.ConvKernel
	copyIn := int64(0)
	if b > 1 {
		copyIn = c.m(e, T, I)
	}
	norms := c.a(c.m(4, T, R+2*N), c.m(12, T), c.m(e, T, R+2*N), c.m(e, T, R))
	if w.SSMKernel == SequentialSSM {
		big := c.m(4, T, I, N)
		last := c.m(4, b, I, N)
		up := int64(0)
		if e < 4 {
			last = c.m(l, e, b, I, N)
			up = c.m(4, T, I)
		}
		states := c.a(c.m(e, b, I, N), c.m(4, l-1, b, I, N), last)
		saved = c.a(c.m(2*e, T, I), c.m(e, b, I, l+K-1), c.m(e, T, I), copyIn, norms, c.m(4, T, N), c.m(e, T, N),
			c.m(2*e, T, I), c.m(8, I, N), c.m(2, big), up, states, c.m(3*e, T, I))
		fwd = big
		bwd = c.m(3, big)
		// Without a graph slow_forward's locals live until it
		// returns: its peak is the gating's add after the loop, as
		// MambaMixer's (mambaSequential), with x_proj's output and
		// the three norms' outputs (2·e·T·(R + 2N)).
		noGrad = c.a(c.m(3, big), c.m(8*e, T, I), c.m(2*e, T, R+2*N))
		return saved, fwd, bwd, noGrad
	}
	chunks, _ := checked.CeilDiv(l, 2048)
	scanX := c.m(4, b, I, chunks, 2*N)
	fp32Copies := int64(0)
	if e < 4 {
		fp32Copies = c.m(8, I)
	}
	saved = c.a(c.m(2*e, T, I), c.m(e, T, I), copyIn, norms, c.m(e, T, 2*I+2*N), c.m(8, I, N), fp32Copies, scanX,
		c.m(2*e, T, I))
	// Forward: x_proj's output, the normalized Δ, B and C, dt_proj's
	// output and the gated output are locals of the mixer beside what is
	// saved. Backward: selective_scan_cuda.bwd's du, dΔ and dz in the
	// compute dtype and its fp32 dB and dC.
	fwd = c.a(c.m(2*e, T, I), c.m(2*e, T, R+2*N))
	bwd = c.a(c.m(3*e, T, I), c.m(8, T, N))
	// Without a graph every local stays alive until the mixer returns:
	// in_proj's output, the convolution's, x_proj's, the norms', dt_proj's,
	// the scan's contiguous copies, its checkpoints and both outputs.
	noGrad = c.a(c.m(8*e, T, I), c.m(2*e, T, R+2*N), scanX)
	return saved, fwd, bwd, noGrad
}

// jamba fills a for JambaForCausalLM: attention layers as Llama-style
// blocks without rotary embeddings (JambaAttention: q, k, v, o
// projections, repeat_kv, fp32 softmax in eager; JambaMLP a SwiGLU),
// Mamba layers as input_layernorm, in_proj's input, the mixer
// (jambaMixer), pre_ff_layernorm and the feed-forward; the feed-forward
// of every expert_layer_period-th layer a JambaSparseMoeBlock, Mixtral's
// without the renormalization of the top-k weights. The residual stream
// is in the compute dtype and final_layernorm is a plain RMSNorm.
func (c *actCalc) jamba(a *Activations, s Spec, w Workload, e int64) {
	sh := actShape{b: w.Batch, s: w.SeqLen, e: e, k: w.Attention, hc: w.HeadChunk, softmax: w.Softmax, half: w.computeDType(&s) == gpumem.FP16}
	T := c.m(w.Batch, w.SeqLen)
	H := s.Hidden
	bl := actFamily(&s)
	mb := bl
	m := s.MoE
	mb.moe, mb.noRenorm = &m, true
	var counts [4]int64 // attention, attention+MoE, Mamba, Mamba+MoE
	for i := int64(0); i < s.Layers; i++ {
		k := 0
		if !s.JambaAttention(i) {
			k = 2
		}
		if s.jambaMoE(i) {
			k++
		}
		counts[k]++
	}
	if counts[0] > 0 {
		c.stack(a, w, "", "attention", &bl, sh, counts[0], w.Train)
	}
	if counts[1] > 0 {
		c.stack(a, w, "", "attention-moe", &mb, sh, counts[1], w.Train)
	}
	eTH := c.m(e, T, H)
	norm := c.normSaved(actRMS, T, H, e)
	ms, mf, mbwd, mng := c.jambaMixer(s, w, e)
	R, N, I := s.SSM.DTRank, s.SSM.State, s.SSM.Inner
	mixFlops := c.m(2, T, c.a(c.m(3, H, I), c.m(I, R+2*N), c.m(R, I)))
	for k, kind := range [2]string{"mamba", "mamba-moe"} {
		n := counts[2+k]
		if n == 0 {
			continue
		}
		var ffn, ffnBwd, ffnFlops, inner int64
		if k == 1 {
			ffn, ffnBwd = c.moe(&mb, T, e)
			ffnFlops = c.m(2, T, c.a(c.m(H, m.Experts), c.m(m.Active, 3, H, m.Intermediate)))
			inner = m.Intermediate
		} else {
			eTI := c.m(e, T, s.Intermediate)
			ffn, ffnBwd = c.m(bl.act.tensors(), eTI), c.m(2, eTI)
			ffnFlops = c.m(6, T, H, s.Intermediate)
			inner = s.Intermediate
		}
		x := actCost{
			saved: c.a(c.m(2, norm), c.m(2, eTH), ms, ffn),
			input: eTH,
			fwd:   mf,
			// The feed-forward's backward runs first, with the mixer's
			// saved tensors alive; then the mixer's, without the
			// feed-forward's.
			bwd:    actMax(mbwd, ffnBwd),
			flops:  c.a(mixFlops, ffnFlops),
			noGrad: c.a(eTH, actMax(mng, c.m(3, e, T, inner))),
		}
		c.place(a, w, "", kind, w.SeqLen, x, n, w.Train)
	}
	a.Tokens = w.SeqLen
	if w.Train {
		a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), norm))
	}
	c.head(a, &s, w, e, T, T, false)
	c.finish(a, w)
}

// dtRank reads key, the rank of the selective scan's Δ projection
// (Mamba's time_step_rank, Jamba's and Zamba's mamba_dt_rank), into
// s.SSM.DTRank: an integer, or "auto" (or absent), which transformers'
// MambaConfig, JambaConfig and ZambaConfig (configuration_mamba.py,
// configuration_jamba.py, configuration_zamba.py at v4.57.1) turn into
// ceil(hidden_size / 16).
func (c *config) dtRank(s *Spec, key string) error {
	if v, ok := c.m[key]; ok && v != nil {
		if str, isStr := v.(string); isStr {
			if str != "auto" {
				return gpumem.Errorf(c.field(key), str, gpumem.ErrInvalid, `want "auto" or an integer`)
			}
		} else {
			r, err := c.posv(0, key)
			if err != nil {
				return err
			}
			s.SSM.DTRank = r
		}
	}
	if s.SSM.DTRank == 0 {
		s.SSM.DTRank = (s.Hidden + 15) / 16
	}
	return nil
}
