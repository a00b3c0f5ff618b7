package model

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// zamba fills a for ZambaForCausalLM and Zamba2ForCausalLM (transformers
// modeling_zamba.py and modeling_zamba2.py at v4.57.1, 8cb5963c). Every
// layer is a Mamba decoder layer (input_layernorm, then the mixer: Zamba's
// ZambaMambaMixer, zambaMixer; Zamba2's Zamba2MambaMixer, Mamba-2's mixer,
// mamba2Torch or mamba2Fused); a hybrid layer first runs the shared
// transformer block on concat(hidden, the embeddings' clone) and its own
// linear, whose output the Mamba decoder adds to its input before the
// norm (zambaShared). The residual stream is in the compute dtype and
// final_layernorm is a plain RMSNorm. Checked against transformers' own
// modules on the CPU, per layer: testdata/oracle/zamba.json.
func (c *actCalc) zamba(a *Activations, s Spec, w Workload, e int64) {
	b, l := w.Batch, w.SeqLen
	T := c.m(b, l)
	H := s.Hidden
	eTH := c.m(e, T, H)
	var ms, mf, mbwd, mng int64
	var flops int64
	if s.Family == FamilyZamba2 {
		// Mamba-2's per-block figures with the mixer's width in
		// Intermediate, as mamba2Torch and mamba2Fused read it; they
		// include the block's norm and in_proj's input.
		m2 := s
		m2.Intermediate = s.SSM.Inner
		if w.SSMKernel == FusedSSM {
			_, mf, mng = c.mamba2Fused(m2, w, e)
			mbwd = c.mamba2FusedBackward(m2, w, e)
			ms = c.zamba2Fused(m2, w, e)
		} else {
			ms, mf, mng = c.mamba2Torch(m2, w, e)
			mbwd = c.mamba2TorchBackward(m2, w)
			// Zamba2RMSNormGated normalizes each of the n_groups groups
			// of I/n_groups channels (group_size): its rsqrt is fp32
			// [b, l, G, 1] where MambaRMSNormGated's is [b, l, 1].
			ms = c.a(ms, c.m(4, T, s.SSM.Groups-1))
		}
		I := s.SSM.Inner
		flops = c.m(2, T, H, c.a(I, m2.mamba2ConvDim(), s.SSM.Heads, I))
	} else {
		ms, mf, mbwd, mng = c.zambaMixer(s, w, e)
		ms = c.a(ms, c.normSaved(actRMS, T, H, e), eTH)
		mng = c.a(mng, eTH)
		I, R, N, nh := s.SSM.Inner, s.SSM.DTRank, s.SSM.State, s.SSM.Heads
		flops = c.m(2, T, c.a(c.m(3, H, I), c.m(I, R+2*N), c.m(nh, s.SSM.HeadDim, R)))
	}
	hybrids := s.zambaHybrids()
	if n := s.Layers - hybrids; n > 0 {
		x := actCost{saved: ms, input: eTH, fwd: mf, bwd: mbwd, flops: flops, noGrad: mng}
		c.place(a, w, "", "mamba", l, x, n, w.Train)
	}
	if hybrids > 0 {
		sh := c.zambaShared(s, w, e)
		x := actCost{
			saved: c.a(ms, sh.saved),
			attn:  sh.attn,
			input: eTH,
			// The shared block runs first: its transient with nothing of
			// the mixer yet, the mixer's with the block's saved tensors.
			fwd:       actMax(sh.fwd, mf),
			bwd:       actMax(sh.bwd, mbwd),
			flops:     c.a(flops, sh.flops),
			attnFlops: sh.attnFlops,
			// Without a graph the block's output (the linear's) is alive
			// beside the mixer's transient.
			noGrad: actMax(c.a(sh.noGrad, eTH), c.a(mng, eTH)),
		}
		c.place(a, w, "", "hybrid", l, x, hybrids, w.Train)
	}
	a.Tokens = l
	if w.Train {
		a.FinalNorm = gpumem.Bytes(c.a(int64(a.FinalNorm), c.normSaved(actRMS, T, H, e)))
	}
	c.head(a, &s, w, e, T, T, false)
	c.finish(a, w)
}

// zambaShared returns one invocation of the shared transformer block
// with the hybrid layer's own linear (ZambaAttentionDecoderLayer,
// Zamba2AttentionDecoderLayer, ZambaHybridLayer.linear). For T tokens,
// A = attention_hidden_size (2·hidden), F = intermediate_size, r =
// adapter_rank, compute dtype e bytes, op by op:
//
//	torch.concatenate  saves nothing; input_layernorm saves the concat as
//	                   any RMSNorm of width A        4·T·A + 4·T + e·T·A
//	q/k/v_proj         their input, the norm output (one storage)  e·T·A
//	Zamba2 adapters    with use_shared_attention_adapter, each of q, k
//	                   and v's Sequential(Linear(A, r), Linear(r, ·))
//	                   saves its rank-r middle (its input is the norm
//	                   output already counted)                 3·e·T·r
//	attention core     as any block's (attention): q, k and v (repeat_kv
//	                   copies), eager's fp32 softmax and its cast, SDPA's
//	                   log-sum-exp, o_proj's input; no RoPE (Zamba2's
//	                   use_mem_rope false)
//	pre_ff_layernorm   4·T·h + 4·T + e·T·h, and the MLP's input    e·T·h
//	MLP                Zamba: down(act(gate)·up); Zamba2: gate_up_proj
//	                   plus its adapter (the sum's storage, which the
//	                   chunks view, e·T·2F), act's output, the product;
//	                   either way four e·T·F tensors. Zamba2's adapter
//	                   saves its rank-r middle                   e·T·r
//	linear             its input, the MLP's output                 e·T·h
//
// testdata/oracle/zamba.json records the hybrid layer (this plus the
// Mamba decoder layer) from transformers' own models on the CPU.
func (c *actCalc) zambaShared(s Spec, w Workload, e int64) actCost {
	T := c.m(w.Batch, w.SeqLen)
	H, A, F := s.Hidden, s.Zamba.AttnHidden, s.Intermediate
	bl := actBlock{h: H, H: s.Heads, KV: s.KVHeads, d: s.HeadDim, dv: s.HeadDim, I: F, norm: actRMS, act: actGated, upcast: true}
	shp := actShape{b: w.Batch, s: w.SeqLen, e: e, k: w.Attention, hc: w.HeadChunk, softmax: w.Softmax,
		half: w.computeDType(&s) == gpumem.FP16, cpu: w.Backend == CPU, causal: true}
	core, part, fwd, bwd, attnFlops, live := c.attention(&bl, shp, w.SeqLen, w.SeqLen)
	var adapters int64
	if s.Family == FamilyZamba2 {
		r := s.Zamba.AdapterRank
		adapters = c.m(e, T, r)
		if s.Zamba.SharedAttentionAdapter {
			adapters = c.a(adapters, c.m(3*e, T, r))
		}
	}
	eTF := c.m(e, T, F)
	norms := c.a(c.normSaved(actRMS, T, A, e), c.m(e, T, A), c.normSaved(actRMS, T, H, e), c.m(e, T, H))
	saved := c.a(norms, core, adapters, c.m(4, eTF), c.m(e, T, H))
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	flops := c.m(2, T, c.a(c.m(A, q+2*kv), c.m(q, H), c.m(3, H, F), c.m(H, H)))
	return actCost{
		saved: saved,
		attn:  part,
		input: c.m(e, T, H),
		fwd:   fwd,
		// The MLP's backward: the gradients of its product and of the
		// gate-up output.
		bwd:       actMax(bwd, c.m(3, eTF)),
		flops:     flops,
		attnFlops: attnFlops,
		// Without a graph: the concat, its norm's fp32 copy and output
		// beside the core's live set, or the MLP's three tensors.
		noGrad: actMax(c.a(c.m(e+4+e, T, A), live), c.m(3, eTF)),
	}
}

// zambaMixer returns what one ZambaMambaMixer saves, its forward and
// backward transients and its no-grad live set, without the decoder
// layer's norm (modeling_zamba.py at v4.57.1). The mixer is Mamba's
// (mambaSequential, and MambaInnerFn's unfused parts) split into
// n_mamba_heads heads of I/heads channels, each with its own x_proj and
// dt_proj (batched matmuls over [heads, b, ·, l]). For b sequences of l
// tokens (T = b·l), width I, state N, rank R, K taps, h heads, compute
// dtype e bytes:
//
// SequentialSSM (slow_forward, use_mamba_kernels false) saves Mamba's
// sequential terms (mambaSequential) but: in_proj's x half made
// contiguous for the convolution (e·T·I more); x_proj's output per
// head, e·T·h·(R + 2N); B.float() per head when e < 4, 4·T·h·N. The
// states of the loop are [b, h, I/h, N], the same bytes as Mamba's.
// testdata/oracle/zamba.json measures it on transformers' own
// ZambaForCausalLM (every layer to the byte).
//
// FusedSSM (cuda_kernels_forward: causal_conv1d_fn, then
// selective_scan_fn once per head), derived from the source (mamba_ssm
// selective_scan_interface.py at e9594ce1), without an oracle:
// in_proj's output (e·T·2I: its gate half is z), the contiguous x half
// that CausalConv1dFn keeps (e·T·I), the convolution's output (u, and
// x_proj's input: a copy for b > 1), x_proj's output (B and C are
// strided views of it the kernel takes as they are), dt_proj's output
// Δ (e·T·I), A and its exp (8·I·N), D and dt_proj's bias as fp32
// copies when e < 4 (8·I), the fp32 scan checkpoints every 2048
// positions (4·b·I·⌈l/2048⌉·2N), the ungated outputs (e·T·I) and
// out_proj's input (e·T·I).
func (c *actCalc) zambaMixer(s Spec, w Workload, e int64) (saved, fwd, bwd, noGrad int64) {
	b, l := w.Batch, w.SeqLen
	T := c.m(b, l)
	I, N, R, K, h := s.SSM.Inner, s.SSM.State, s.SSM.DTRank, s.SSM.ConvKernel, s.SSM.Heads
	copyIn := int64(0)
	if b > 1 {
		// The batched matmuls x_proj_weight[:, None] @ x and
		// dt_proj_weight[:, None] @ time_step broadcast the weights over
		// the batch: for b > 1 matmul expands and reshapes them to
		// [h·b, ·, ·], copies it saves (the transposed x too).
		copyIn = c.a(c.m(e, T, I), c.m(e, b, I, 2*R+2*N))
	}
	xdbl := c.m(e, T, h, R+2*N)
	if w.SSMKernel == SequentialSSM {
		big := c.m(4, T, I, N)
		last := c.m(4, b, I, N)
		up := int64(0)
		if e < 4 {
			last = c.m(l, e, b, I, N)
			up = c.a(c.m(4, T, h, N), c.m(4, T, I))
		}
		states := c.a(c.m(e, b, I, N), c.m(4, l-1, b, I, N), last)
		saved = c.a(c.m(2*e, T, I), c.m(e, T, I), c.m(e, b, I, l+K-1), c.m(e, T, I), copyIn, xdbl,
			c.m(2*e, T, I), c.m(8, I, N), c.m(2, big), up, states, c.m(3*e, T, I))
		fwd = big
		bwd = c.m(3, big)
		noGrad = c.a(c.m(3, big), c.m(3*e, T, I), c.m(e, b, I, l+K-1), c.m(e, T, I))
		return saved, fwd, bwd, noGrad
	}
	chunks, _ := checked.CeilDiv(l, 2048)
	scanX := c.m(4, b, I, chunks, 2*N)
	fp32Copies := int64(0)
	if e < 4 {
		fp32Copies = c.m(8, I)
	}
	saved = c.a(c.m(3*e, T, I), c.m(e, T, I), copyIn, xdbl, c.m(e, T, I), c.m(8, I, N), fp32Copies, scanX, c.m(2*e, T, I))
	// Forward: the gated outputs and their concatenation beside what is
	// saved. Backward: selective_scan_cuda.bwd's du, dΔ and dz in the
	// compute dtype and its fp32 dB and dC, per head.
	fwd = c.m(2*e, T, I)
	bwd = c.a(c.m(3*e, T, I), c.m(8, T, N))
	// Without a graph: in_proj's output, the contiguous x, the
	// convolution's, x_proj's, Δ, the scan's outputs and their
	// concatenation, and its checkpoints.
	noGrad = c.a(c.m(7*e, T, I), xdbl, scanX)
	return saved, fwd, bwd, noGrad
}

// checkZamba refuses the workload options the Zamba activation model
// does not cover, beyond Mamba's (checkMamba).
func (w Workload) checkZamba(s *Spec) error {
	if err := w.checkMamba(); err != nil {
		return err
	}
	if s.Family == FamilyZamba && w.Attention != Eager {
		// ZambaPreTrainedModel: _supports_sdpa and _supports_flash_attn
		// are false (modeling_zamba.py at v4.57.1).
		return gpumem.Errorf("Workload.Attention", w.Attention.String(), gpumem.ErrUnsupported,
			"transformers' Zamba runs eager attention only (Zamba2 has SDPA and Flash)")
	}
	if w.HeadChunk > 0 {
		return gpumem.Errorf("Workload.HeadChunk", w.HeadChunk, gpumem.ErrUnsupported, "Zamba's shared attention is modelled over all heads at once")
	}
	return nil
}

// zamba2Fused returns what one Zamba2 Mamba decoder layer saves under
// the mamba_ssm kernels in training (Zamba2MambaMixer.cuda_kernels_forward,
// modeling_zamba2.py at v4.57.1). Zamba2Config's use_mem_eff_path is
// false, so training does not take mamba_split_conv1d_scan_combined (as
// Mamba-2 does, mamba2Fused) but causal_conv1d_fn, then
// mamba_chunk_scan_combined without z, then Zamba2RMSNormGated and
// out_proj in torch. Derived from the source (mamba_ssm
// ops/triton/ssd_combined.py at e9594ce1: MambaChunkScanCombinedFn saves
// out, x, dt, A, B, C, D), without an oracle (no GPU). For T tokens,
// width I, conv width D, P_in = I + D + h, G groups, compute dtype e:
//
//	input_layernorm, in_proj's input           4·T·H + 4·T + 2·e·T·H
//	in_proj's output, whose xBC slice CausalConv1dFn keeps and whose dt
//	slice the scan keeps                                       e·T·P_in
//	the convolution's output (the scan's x, B and C)           e·T·D
//	the scan's output                                          e·T·I
//	A = −exp(A_log.float()) and its exp                        8·h
//	the gated norm: for 16-bit e, fp32 copies of the output and of the
//	gate (8·T·I); SiLU's output and the gated product (8·T·I); rsqrt per
//	group (4·T·G); the normalized cast (e·T·I)
//	out_proj's input                                           e·T·I
func (c *actCalc) zamba2Fused(s Spec, w Workload, e int64) int64 {
	T := c.m(w.Batch, w.SeqLen)
	H, I, nh, G := s.Hidden, s.Intermediate, s.SSM.Heads, s.SSM.Groups
	D := s.mamba2ConvDim()
	up := int64(0)
	if e < 4 {
		up = c.m(8, T, I)
	}
	return c.a(c.m(4, T, H), c.m(4, T), c.m(2*e, T, H), c.m(e, T, I+D+nh), c.m(e, T, D), c.m(e, T, I), 8*nh,
		up, c.m(8, T, I), c.m(4, T, G), c.m(2*e, T, I))
}
