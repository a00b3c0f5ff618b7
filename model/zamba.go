package model

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// FamilyZamba and FamilyZamba2 are transformers' ZambaForCausalLM and
// Zamba2ForCausalLM (model_type "zamba", "zamba2"): Mamba layers, some of
// which ("hybrid") first run a transformer block whose weights are
// shared across them, on the concatenation of the hidden state and the
// input embeddings (attention_hidden_size = 2·hidden_size), then a
// per-layer linear, then the layer's own Mamba block.
const (
	FamilyZamba  = "zamba"
	FamilyZamba2 = "zamba2"
)

// Zamba holds what a Zamba model adds to [SSM]: the shared blocks.
type Zamba struct {
	// AttnHidden is attention_hidden_size, the shared block's input
	// width (2 × hidden_size).
	AttnHidden int64
	// MemBlocks is Zamba2's num_mem_blocks: the shared transformer
	// blocks the hybrid layers use in turn (1 for Zamba).
	MemBlocks int64
	// AdapterRank is Zamba2's adapter_rank: each hybrid layer's LoRA-style
	// adapters on the shared block's gate_up_proj (always) and, with
	// SharedAttentionAdapter (use_shared_attention_adapter), on its q,
	// k and v projections.
	AdapterRank            int64
	SharedAttentionAdapter bool
	// Bias is Zamba2's add_bias_linear (the MLP's and the Mamba
	// projections' biases).
	Bias bool
}

// zamba reads a ZambaConfig (transformers configuration_zamba.py at
// v4.57.1, 8cb5963c; its defaults are Zamba-7B-v1's): layers_block_type
// is "mamba", "mamba", "hybrid", then "hybrid" where (i − 3) %
// attn_layer_period == attn_layer_offset; the Mamba width is
// mamba_expand × hidden_size in n_mamba_heads heads; mamba_dt_rank
// "auto" is ceil(hidden_size / 16); attention_head_dim defaults to
// 2·hidden_size / num_attention_heads; tie_word_embeddings defaults to
// true.
func (c *config) zamba(s *Spec) error {
	var e errs
	s.Hidden = e.i(c.posv(3712, "hidden_size"))
	s.Layers = e.i(c.posv(76, "num_hidden_layers"))
	s.Vocab = e.i(c.posv(32000, "vocab_size"))
	s.Intermediate = e.i(c.posv(14848, "intermediate_size"))
	s.Heads = e.i(c.posv(16, "num_attention_heads"))
	s.KVHeads = e.i(c.posv(16, "num_key_value_heads"))
	s.Positions = e.i(c.posv(4096, "max_position_embeddings"))
	period := e.i(c.posv(6, "attn_layer_period"))
	offset := e.i(c.intv(4, "attn_layer_offset"))
	s.SSM.Heads = e.i(c.posv(2, "n_mamba_heads"))
	s.SSM.State = e.i(c.posv(16, "mamba_d_state"))
	s.SSM.ConvKernel = e.i(c.posv(4, "mamba_d_conv"))
	expand := e.i(c.posv(2, "mamba_expand"))
	s.SSM.ConvBias = e.b(c.boolv(true, "mamba_conv_bias"))
	s.SSM.Bias = e.b(c.boolv(false, "mamba_proj_bias"))
	s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
	if e.err != nil {
		return e.err
	}
	z := &Zamba{MemBlocks: 1}
	var err error
	if z.AttnHidden, err = c.posv(2*s.Hidden, "attention_hidden_size"); err != nil {
		return err
	}
	if s.HeadDim, err = c.posv(2*s.Hidden/s.Heads, "attention_head_dim"); err != nil {
		return err
	}
	if s.SSM.Inner, err = mulField(c.field("mamba_expand"), s.Hidden, expand); err != nil {
		return err
	}
	if s.SSM.Inner%s.SSM.Heads != 0 {
		return gpumem.Errorf(c.field("n_mamba_heads"), s.SSM.Heads, gpumem.ErrInvalid, "must divide mamba_expand × hidden_size (%d)", s.SSM.Inner)
	}
	s.SSM.HeadDim = s.SSM.Inner / s.SSM.Heads
	if err = c.dtRank(s, "mamba_dt_rank"); err != nil {
		return err
	}
	if s.Layers > maxLayers {
		return gpumem.Errorf(c.field("num_hidden_layers"), s.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
	}
	// ZambaConfig._layers_block_type.
	s.LayerTypes = make([]string, s.Layers)
	for i := range s.LayerTypes {
		t := "mamba"
		switch {
		case i == 2:
			t = "hybrid"
		case i >= 3 && int64(i-3)%period == offset:
			t = "hybrid"
		}
		s.LayerTypes[i] = t
	}
	s.Zamba = z
	s.Norm = RMSNorm
	s.Gated = true // ZambaMLP: down(act(gate) · up)
	return nil
}

// zamba2 reads a Zamba2Config (configuration_zamba2.py at v4.57.1; its
// defaults are Zamba2-2.7B's): layers_block_type as given (its default
// list otherwise), intermediate_size 4·hidden_size by default,
// attention_head_dim 2·hidden_size / num_attention_heads,
// num_key_value_heads num_attention_heads by default, the Mamba-2 mixer
// of n_mamba_heads heads of mamba_expand·hidden_size / n_mamba_heads in
// mamba_ngroups groups.
func (c *config) zamba2(s *Spec) error {
	var e errs
	s.Hidden = e.i(c.posv(2560, "hidden_size"))
	s.Layers = e.i(c.posv(54, "num_hidden_layers"))
	s.Vocab = e.i(c.posv(32000, "vocab_size"))
	s.Heads = e.i(c.posv(32, "num_attention_heads"))
	s.Positions = e.i(c.posv(4096, "max_position_embeddings"))
	s.SSM.Heads = e.i(c.posv(8, "n_mamba_heads"))
	s.SSM.State = e.i(c.posv(64, "mamba_d_state"))
	s.SSM.ConvKernel = e.i(c.posv(4, "mamba_d_conv"))
	s.SSM.Groups = e.i(c.posv(1, "mamba_ngroups"))
	s.SSM.Chunk = e.i(c.posv(256, "chunk_size"))
	expand := e.i(c.posv(2, "mamba_expand"))
	s.SSM.ConvBias = true // Zamba2MambaMixer's conv1d always has a bias
	s.TiedEmbeddings = e.b(c.boolv(true, "tie_word_embeddings"))
	z := &Zamba{AttnHidden: 2 * s.Hidden}
	z.MemBlocks = e.i(c.posv(1, "num_mem_blocks"))
	z.AdapterRank = e.i(c.posv(128, "adapter_rank"))
	z.SharedAttentionAdapter = e.b(c.boolv(false, "use_shared_attention_adapter"))
	z.Bias = e.b(c.boolv(false, "add_bias_linear"))
	if e.err != nil {
		return e.err
	}
	var err error
	if s.Intermediate, err = c.posv(4*s.Hidden, "intermediate_size"); err != nil {
		return err
	}
	kv := s.Heads
	if v, ok := c.m["num_key_value_heads"]; ok && v != nil {
		if kv, err = c.posv(s.Heads, "num_key_value_heads"); err != nil {
			return err
		}
	}
	s.KVHeads = kv
	s.HeadDim = 2 * s.Hidden / s.Heads
	s.SSM.Bias = z.Bias
	if s.SSM.Inner, err = mulField(c.field("mamba_expand"), s.Hidden, expand); err != nil {
		return err
	}
	if s.SSM.Inner%s.SSM.Heads != 0 {
		return gpumem.Errorf(c.field("n_mamba_heads"), s.SSM.Heads, gpumem.ErrInvalid, "must divide mamba_expand × hidden_size (%d)", s.SSM.Inner)
	}
	s.SSM.HeadDim = s.SSM.Inner / s.SSM.Heads
	if s.SSM.Heads%s.SSM.Groups != 0 {
		return gpumem.Errorf(c.field("mamba_ngroups"), s.SSM.Groups, gpumem.ErrInvalid, "must divide n_mamba_heads (%d)", s.SSM.Heads)
	}
	if s.Layers > maxLayers {
		return gpumem.Errorf(c.field("num_hidden_layers"), s.Layers, gpumem.ErrRange, "more than %d layers", maxLayers)
	}
	types, err := c.strs(nil, "layers_block_type")
	if err != nil {
		return err
	}
	if types == nil {
		// Zamba2Config's default list (54 layers).
		types = append(types, "mamba")
		for range 7 {
			types = append(types, "mamba", "mamba", "mamba", "mamba", "mamba", "hybrid")
		}
		types = append(types, "mamba", "mamba", "mamba", "mamba", "hybrid", "mamba", "mamba", "mamba", "hybrid", "mamba", "mamba")
	}
	if int64(len(types)) != s.Layers {
		return gpumem.Errorf(c.field("layers_block_type"), len(types), gpumem.ErrInvalid, "want num_hidden_layers (%d) entries", s.Layers)
	}
	for i, t := range types {
		if t != "mamba" && t != "hybrid" {
			return gpumem.Errorf(c.field("layers_block_type")+"["+itoa(int64(i))+"]", t, gpumem.ErrInvalid, `want "mamba" or "hybrid"`)
		}
	}
	s.LayerTypes = types
	s.Zamba = z
	s.Norm = RMSNorm
	s.Gated = true
	return nil
}

// validateZamba checks a Zamba or Zamba2 Spec's fields.
func (s Spec) validateZamba(path string) error {
	if s.Zamba == nil {
		return gpumem.Errorf(path+".Zamba", nil, gpumem.ErrInvalid, "a %s Spec needs its Zamba fields", s.Family)
	}
	type field struct {
		name  string
		v     int64
		limit int64
	}
	// A fixed array: MambaState calls this on every generation estimate,
	// which must not allocate (a slice literal grown by append would).
	lim := [...]field{{"Layers", s.Layers, maxLayers}, {"Hidden", s.Hidden, 1 << 24}, {"Intermediate", s.Intermediate, 1 << 26},
		{"Vocab", s.Vocab, 1 << 26}, {"Heads", s.Heads, 1 << 16}, {"KVHeads", s.KVHeads, 1 << 16}, {"HeadDim", s.HeadDim, 1 << 16},
		{"SSM.Inner", s.SSM.Inner, 1 << 26}, {"SSM.Heads", s.SSM.Heads, 1 << 16}, {"SSM.HeadDim", s.SSM.HeadDim, 1 << 26},
		{"SSM.State", s.SSM.State, 1 << 16}, {"SSM.ConvKernel", s.SSM.ConvKernel, 1 << 10},
		{"Zamba.AttnHidden", s.Zamba.AttnHidden, 1 << 26}, {"Zamba.MemBlocks", s.Zamba.MemBlocks, maxLayers},
		{"SSM.DTRank", s.SSM.DTRank, 1 << 24}, {"SSM.Groups", s.SSM.Groups, 1 << 16}, {"Zamba.AdapterRank", s.Zamba.AdapterRank, 1 << 20}}
	n := len(lim) - 2 // Zamba: through SSM.DTRank
	if s.Family != FamilyZamba {
		// Zamba2: SSM.Groups and Zamba.AdapterRank instead of SSM.DTRank.
		lim[n-1] = lim[n+1]
		n++
	}
	for _, f := range lim[:n] {
		if f.v <= 0 || f.v > f.limit {
			return gpumem.Errorf(path+"."+f.name, f.v, gpumem.ErrInvalid, "must be in [1, %d]", f.limit)
		}
	}
	if int64(len(s.LayerTypes)) != s.Layers {
		return gpumem.Errorf(path+".LayerTypes", len(s.LayerTypes), gpumem.ErrInvalid, "want one type per layer (%d)", s.Layers)
	}
	if s.SSM.Heads*s.SSM.HeadDim != s.SSM.Inner {
		return gpumem.Errorf(path+".SSM.HeadDim", s.SSM.HeadDim, gpumem.ErrInvalid, "SSM.Heads × SSM.HeadDim must be SSM.Inner (%d)", s.SSM.Inner)
	}
	if s.Family == FamilyZamba2 && s.SSM.Heads%s.SSM.Groups != 0 {
		return gpumem.Errorf(path+".SSM.Groups", s.SSM.Groups, gpumem.ErrInvalid, "must divide SSM.Heads (%d)", s.SSM.Heads)
	}
	if s.Heads%s.KVHeads != 0 {
		return gpumem.Errorf(path+".KVHeads", s.KVHeads, gpumem.ErrInvalid, "does not divide the %d query heads", s.Heads)
	}
	return nil
}

// zambaHybrids returns the hybrid layers' count: the shared block's
// invocations, each with its own KV cache entry.
func (s Spec) zambaHybrids() int64 {
	var n int64
	for _, t := range s.LayerTypes {
		if t == "hybrid" {
			n++
		}
	}
	return n
}

// zambaState is the Mamba state per sequence of every layer (hybrid
// layers run a Mamba block too): ZambaHybridDynamicCache's conv_states
// [I, d_conv] and ssm_states [n_mamba_heads, I/n_mamba_heads, d_state];
// Zamba2HybridDynamicCache's conv_states [I + 2·G·N, d_conv] and
// ssm_states [n_mamba_heads, head_dim, d_state] (transformers v4.57.1).
func (s Spec) zambaState() (int64, bool) {
	conv := s.SSM.Inner
	if s.Family == FamilyZamba2 {
		conv += 2 * s.SSM.Groups * s.SSM.State
	}
	a, ok1 := checked.Mul(conv, s.SSM.ConvKernel)
	b, ok2 := checked.Mul(s.SSM.Inner, s.SSM.State)
	per, ok3 := checked.Add(a, b)
	all, ok4 := checked.Mul(per, s.Layers)
	return all, ok1 && ok2 && ok3 && ok4
}

// buildZamba is ZambaForCausalLM and Zamba2ForCausalLM in
// named_parameters order (transformers modeling_zamba.py and
// modeling_zamba2.py at v4.57.1, 8cb5963c): embed_tokens; per layer
// either a Mamba decoder layer (input_layernorm and the mixer) or a
// hybrid layer: the shared transformer block, listed once under the
// first layer that uses it (parameters() counts shared weights once) —
// Zamba2 cycles num_mem_blocks blocks over its hybrid layers, and each
// block holds the adapters of the hybrid layers it serves (a Linear to
// adapter_rank and one back, for gate_up_proj and, with
// use_shared_attention_adapter, for q, k and v) — then the layer's own
// linear (hidden × hidden) and Mamba decoder layer; final_layernorm;
// lm_head unless tied.
//
// Zamba's mixer is ZambaMambaMixer: conv1d over I, in_proj to 2·I,
// per-head x_proj_weight [heads, R + 2N, I/heads], dt_proj_weight
// [heads, I/heads, R] and dt_proj_bias, A_log [heads, I/heads, N], D,
// out_proj. Zamba2's is Zamba2MambaMixer, Mamba-2's mixer (biased conv1d
// over I + 2·G·N, in_proj to I + conv + heads, dt_bias, A_log and D per
// head, the gated RMSNorm over I, out_proj). The shared block:
// input_layernorm over attention_hidden_size, q/k/v from it and o back
// to hidden_size, pre_ff_layernorm, and the MLP (Zamba: gate, up and
// down; Zamba2: gate_up_proj to 2·intermediate and down_proj).
func (s Spec) buildZamba(b *builder) {
	H, A, F := s.Hidden, s.Zamba.AttnHidden, s.Intermediate
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	z2 := s.Family == FamilyZamba2
	b.add("model.embed_tokens.weight", s.Vocab, H)
	mamba := func(p string) {
		I, N, K, nh := s.SSM.Inner, s.SSM.State, s.SSM.ConvKernel, s.SSM.Heads
		b.normP(p, "input_layernorm", H, RMSNorm)
		if z2 {
			conv := I + 2*s.SSM.Groups*N
			b.addP(p, "mamba.conv1d.weight", conv, 1, K)
			b.addP(p, "mamba.conv1d.bias", conv)
			b.linearP(p, "mamba.in_proj", I+conv+nh, H, s.Zamba.Bias)
			b.addP(p, "mamba.dt_bias", nh)
			b.addP(p, "mamba.A_log", nh)
			b.normP(p, "mamba.norm", I, RMSNorm)
			b.addP(p, "mamba.D", nh)
			b.linearP(p, "mamba.out_proj", H, I, s.Zamba.Bias)
			return
		}
		hd, R := s.SSM.HeadDim, s.SSM.DTRank
		b.addP(p, "mamba.conv1d.weight", I, 1, K)
		if s.SSM.ConvBias {
			b.addP(p, "mamba.conv1d.bias", I)
		}
		b.linearP(p, "mamba.in_proj", 2*I, H, s.SSM.Bias)
		b.addP(p, "mamba.x_proj_weight", nh, R+2*N, hd)
		b.addP(p, "mamba.dt_proj_weight", nh, hd, R)
		b.addP(p, "mamba.dt_proj_bias", nh, hd)
		b.addP(p, "mamba.A_log", nh, hd, N)
		b.addP(p, "mamba.D", nh, hd)
		b.linearP(p, "mamba.out_proj", H, I, s.SSM.Bias)
	}
	hybrids := s.zambaHybrids()
	var seen, hybrid int64
	for i := int64(0); i < s.Layers; i++ {
		p := "model.layers." + itoa(i) + "."
		if s.LayerTypes[i] != "hybrid" {
			mamba(p)
			continue
		}
		k := hybrid % s.Zamba.MemBlocks
		hybrid++
		if k == seen && seen < s.Zamba.MemBlocks {
			// The block's first use lists its weights (and, for
			// Zamba2, every adapter it holds).
			seen++
			sp := p + "shared_transf."
			if z2 {
				sp = p + "shared_transformer."
			}
			b.linearP(sp, "self_attn.q_proj", q, A, false)
			b.linearP(sp, "self_attn.k_proj", kv, A, false)
			b.linearP(sp, "self_attn.v_proj", kv, A, false)
			if z2 && s.Zamba.SharedAttentionAdapter {
				for j := int64(0); j < hybrids; j++ {
					if j%s.Zamba.MemBlocks != k {
						continue
					}
					for _, n := range []string{"q", "k", "v"} {
						ap := sp + "self_attn.linear_" + n + "_adapter_list." + itoa(j) + "."
						b.linearP(ap, "0", s.Zamba.AdapterRank, A, false)
						b.linearP(ap, "1", A, s.Zamba.AdapterRank, false)
					}
				}
			}
			b.linearP(sp, "self_attn.o_proj", H, q, false)
			if z2 {
				b.linearP(sp, "feed_forward.gate_up_proj", 2*F, H, s.Zamba.Bias)
				b.linearP(sp, "feed_forward.down_proj", H, F, s.Zamba.Bias)
				for j := int64(0); j < hybrids; j++ {
					if j%s.Zamba.MemBlocks != k {
						continue
					}
					ap := sp + "feed_forward.gate_up_proj_adapter_list." + itoa(j) + "."
					b.linearP(ap, "0", s.Zamba.AdapterRank, H, false)
					b.linearP(ap, "1", 2*F, s.Zamba.AdapterRank, false)
				}
			} else {
				b.linearP(sp, "feed_forward.gate_proj", F, H, false)
				b.linearP(sp, "feed_forward.up_proj", F, H, false)
				b.linearP(sp, "feed_forward.down_proj", H, F, false)
			}
			b.normP(sp, "input_layernorm", A, RMSNorm)
			b.normP(sp, "pre_ff_layernorm", H, RMSNorm)
		}
		b.linearP(p, "linear", H, H, false)
		mamba(p + "mamba_decoder.")
	}
	b.norm("model.final_layernorm", H, RMSNorm)
	if !s.TiedEmbeddings {
		b.add("lm_head.weight", s.Vocab, H)
	}
}
