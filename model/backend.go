package model

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// Backend is the device whose kernels run a pass. Where PyTorch's CPU and
// CUDA kernels save different tensors for the same Python code, the
// activation model follows the backend's kernels; everything else (the
// modeling code, autograd's graph, the order of the phases) is the same.
// The zero value is CUDA.
type Backend uint8

const (
	// CUDA is PyTorch's CUDA backend, what every figure of this package
	// describes unless it says otherwise.
	CUDA Backend = iota
	// CPU is PyTorch's CPU backend (torch 2.6), whose kernels differ from
	// CUDA's in what they save:
	//
	//   - Dropout: at::native::dropout takes the fused native_dropout,
	//     which saves a 1-byte mask an element, only when
	//     is_fused_kernel_acceptable (a CUDA, XPU, lazy or privateuse1
	//     tensor); on the CPU _dropout_impl makes its noise with
	//     at::empty_like(input).bernoulli_(1 - p).div_(1 - p) and returns
	//     input * noise, whose mul saves the noise: the input's element
	//     size an element (aten/src/ATen/native/Dropout.cpp, v2.6.0).
	//   - Scaled dot-product attention: use_flash_attention_cpp
	//     (aten/src/ATen/native/transformers/sdp_utils_cpp.cpp, v2.6.0)
	//     admits the CPU flash kernel only without dropout
	//     (check_for_dropout) and with as many key/value heads as query
	//     heads (check_batch_size_and_num_heads_dense without grouped-query
	//     support), so a training pass with attention dropout, or a
	//     grouped-query model that transformers calls with unrepeated K/V
	//     heads and enable_gqa=True, runs _scaled_dot_product_attention_math
	//     (validation rows sdpa-kernel-*, testdata/measured/cpu, record
	//     the op that ran; aten/src/ATen/native/transformers/attention.cpp,
	//     v2.6.0): it upcasts 16-bit q, k and v to fp32, repeats the key
	//     and value heads, and saves the scaled query and key, the fp32
	//     probabilities (and with dropout the noise and the dropped
	//     probabilities) and the repeated value. transformers v4.57.1
	//     passes enable_gqa=True only without a mask
	//     ([Workload.NoAttentionMask]).
	//   - Autocast: the CPU's lists (autocast_mode.cpp, v2.6.0) put
	//     softmax on neither, so it keeps its input's dtype (validation
	//     row autocast-cpu-dtypes, testdata/measured/cpu): an eager core
	//     that adds the model's fp32 float mask to its 16-bit scores
	//     (BERT, GPT-2) takes an fp32 softmax, and BERT's attention
	//     dropout then saves fp32 noise (GPT-2 casts the probabilities
	//     back to the value's dtype first).
	CPU

	numBackends
)

// String returns "cuda" or "cpu".
func (b Backend) String() string {
	switch b {
	case CUDA:
		return "cuda"
	case CPU:
		return "cpu"
	}
	return "Backend(" + strconv.Itoa(int(b)) + ")"
}

// ParseBackend reads a backend name: "cuda" (or "") or "cpu".
func ParseBackend(s string) (Backend, error) {
	switch s {
	case "", "cuda":
		return CUDA, nil
	case "cpu":
		return CPU, nil
	}
	return 0, gpumem.Errorf("backend", s, gpumem.ErrInvalid, "want cuda or cpu")
}

// dropMask is the bytes a dropout site saves for backward per element
// of an input of e-byte elements: CUDA's native_dropout a 1-byte bool
// mask, the CPU's _dropout_impl its noise in the input's dtype (see
// [CPU]).
func (w Workload) dropMask(e int64) int64 {
	if w.Backend == CPU {
		return e
	}
	return 1
}

// mathAttention returns what the CPU's SDPA math kernel saves and holds
// for one attention core of sq queries over sk keys (the figures of
// [actCalc.attention]). _scaled_dot_product_attention_math
// (aten/src/ATen/native/transformers/attention.cpp, v2.6.0) is a
// composite of ordinary ops, which autograd records one by one:
//
//   - 16-bit q, k and v are first converted to fp32 (query_.to(kFloat)
//     and so on: the kernel computes in a = 4 bytes; fp32 inputs are
//     used as they are), locals alive to the end of the kernel;
//   - q·√scale (a new tensor, saved by the first matmul); the key heads
//     repeated to the query heads for enable_gqa
//     (pre_process_group_query_attention_input: repeat_interleave, a
//     copy, alive as a local), and kᵀ·√scale (saved by the matmul):
//     a·b·H·s·d each;
//   - is_causal: a boolean sq×sk tril converted to an additive mask in
//     the compute dtype (a·sq·sk), added in place to the scores;
//   - _safe_softmax (attention.cpp): softmax of the a·P scores, then
//     the rows whose scores are all −inf zeroed with where() written
//     into softmax's output, which holds the scores, that output and a
//     1-byte mask of the −inf scores at once ((2a + 1)·P; the CPU
//     rows' generate() prompt passes hold exactly that, no fourth P);
//     its result is saved (a·P);
//   - dropout (training with dropout_p > 0): the CPU's _dropout_impl
//     saves its noise and the dropped probabilities (2·a·P), which the
//     second matmul saves;
//   - the repeated value (a·b·H·sk·dv), saved by the second matmul,
//     whose output transformers transposes to the o_proj input
//     (e·b·sq·H·dv).
//
// Backward holds the probabilities' gradient and the softmax input's
// (2·a·P). Without a graph nothing is saved: kᵀ·√scale is a temporary
// freed once the first matmul returns, and the core holds the caller's
// q (and, called without enable_gqa, its k and v; with it they are the
// model's cache, counted as the KV cache), the kernel's locals and the
// softmax's (2a + 1)·P.
func (c *actCalc) mathAttention(bl *actBlock, sh actShape, sq, sk int64) (saved, part, fwd, bwd, attnFlops, live int64) {
	b, e := sh.b, sh.e
	a := max(e, 4)
	P := c.m(b, bl.H, sq, sk)
	qs := c.m(a, b, bl.H, sq, bl.d)
	ks := c.m(a, b, bl.H, sk, bl.d)
	vs := c.m(a, b, bl.H, sk, bl.dv)
	out := c.m(e, b, sq, bl.H, bl.dv)
	part = c.m(a, P)
	if sh.drop && bl.attnDrop {
		part = c.a(part, c.m(2*a, P))
	}
	saved = c.a(qs, ks, vs, out, part)
	kvH := bl.H
	if sh.gqa {
		kvH = bl.KV
	}
	// The locals beside what is saved: the repeated key, the fp32
	// copies of 16-bit inputs, the causal mask.
	locals := int64(0)
	if kvH < bl.H {
		locals = ks
	}
	in := c.m(e, b, bl.H, sq, bl.d)
	if !sh.gqa {
		in = c.a(in, c.m(e, b, kvH, sk, bl.d), c.m(e, b, kvH, sk, bl.dv))
	}
	if e != a {
		locals = c.a(locals, c.m(a, b, bl.H, sq, bl.d), c.m(a, b, kvH, sk, bl.d), c.m(a, b, kvH, sk, bl.dv))
	}
	if sh.causal && sq > 1 {
		locals = c.a(locals, c.m(a, sq, sk))
	}
	fwd = c.a(locals, c.m(a+1, P))
	bwd = c.m(2*a, P)
	live = c.a(in, locals, qs, vs, c.m(2*a+1, P))
	attnFlops = c.m(2, b, bl.H, sq, sk, bl.d+bl.dv)
	return saved, part, fwd, bwd, attnFlops, live
}
