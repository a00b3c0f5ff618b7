package budget

import (
	"github.com/gpumem/gpumem/internal/checked"
)

// This file replays ggml's graph allocator over llama.cpp's worst-case
// graph to size the compute buffer (llamaCppCompute).
//
// The allocator (ggml_gallocr_alloc_graph_impl and ggml_dyn_tallocr,
// ggml/src/ggml-alloc.c, ggml-org/llama.cpp 2026): the graph's input
// tensors are placed first, in the order the graph reaches them; then
// each node in order is placed — in its parent's memory when its op can
// run in place (ggml_op_can_inplace: ADD, MUL, RMS_NORM, ROPE, SOFT_MAX,
// …), the parent is the allocator's own (not a view, not external),
// not a graph output, of the same layout, and this node is its only
// consumer; otherwise at the best-fitting free block other than the last,
// or at the end of the last block — and a tensor is freed after its last
// consumer (a view's source after its last view's), outputs never. The
// buffer is the highest offset reached, every size padded to the
// buffer's alignment. The placement, not only the set of tensors alive
// at once, sets it: the feed-forward's tensors land above holes left by
// the attention's.
//
// The graph (llm_build_llama, src/models/llama.cpp; build_norm, build_qkv,
// build_attn, build_attn_mha, build_ffn and build_inp_embd in
// src/llama-graph.cpp; cpy_k/cpy_v in src/llama-kv-cache.cpp), in the
// order ggml_build_forward_expand visits it, all activations f32, per
// layer: rms_norm and its weight's mul (in place); Q's matmul and rope
// (rope reads a reshape view, so it is not in place), V's matmul, K's
// matmul and rope, the K and V stores into the cache (views of the cache,
// with their row indices as inputs: k_idxs of n_ubatch int64, v_idxs of
// n_ubatch × n_embd_v_gqa without flash attention, whose V cache is
// transposed); then flash_attn_ext (n_embd_head × n_head × n_ubatch) —
// or, without it, KQ (n_kv × n_ubatch × n_head), its soft_max with the
// mask (in place), KQV and its contiguous copy; the output matmul; on
// the last layer get_rows of the attention output and of the residual
// by out_ids; the residual add (in place), rms_norm and mul, the
// gate's and up's matmuls (n_ff), swiglu, the down matmul and the
// residual add. After the layers: the final rms_norm and mul (a graph
// output) and the logits (n_vocab × n_ubatch, an output). Inputs: the
// mask (n_kv × n_ubatch, f16 with flash attention, f32 without), the
// positions, the indices, out_ids; on the CPU also the tokens, their
// get_rows and, since PR #18550 (January 2026), an unused n_embd ×
// n_ubatch input for embeddings given as vectors, which the allocator
// places and never frees. On a GPU the layer input arrives as a copy of
// the host's (the scheduler's split input) and the inputs are copies.
//
// The layout repeats from the third layer on, so at most four layers
// are replayed (the first three and the last): the same peak as the whole
// graph for the shapes checked (TestLlamaGraphLayersRepeat).

// llamaGraphMaxNodes bounds the replayed graph: 7 inputs, the embedding
// lookup, up to 12 layers of at most 36 tensors and the output's 3.
const llamaGraphMaxNodes = 448

// llamaGraphLayers is how many layers are replayed: the first three and
// the last.
const llamaGraphLayers = 4

// llamaGraphMaxTensor bounds one tensor (4 PiB), so that the offsets of
// all of them stay far from overflowing; a larger one is an overflow.
const llamaGraphMaxTensor = 1 << 52

// llamaGraphAlign is the compute buffer's alignment: 32 bytes on the CPU
// (TENSOR_ALIGNMENT), 128 on CUDA; a few bytes per tensor either way.
const llamaGraphAlign = 128

type gnode struct {
	size          int64
	src           [3]int16 // sources the allocator tracks, −1: none
	view          int16    // the tensor this one views, −1: none, −2: external (a cache view)
	inplace       bool     // ggml_op_can_inplace
	input, output bool
	// allocator state
	children, views int32
	allocated       bool
	off             int64
}

type ggraph struct {
	n     int
	nodes [llamaGraphMaxNodes]gnode
	err   bool
}

func (g *ggraph) add(size int64, inplace bool, srcs ...int16) int16 {
	if g.n == llamaGraphMaxNodes || size < 0 || size > llamaGraphMaxTensor {
		g.err = true
		return -1
	}
	t := &g.nodes[g.n]
	*t = gnode{size: size, inplace: inplace, view: -1, src: [3]int16{-1, -1, -1}}
	copy(t.src[:], srcs)
	g.n++
	return int16(g.n - 1)
}

func (g *ggraph) input(size int64) int16 {
	i := g.add(size, false)
	if i >= 0 {
		g.nodes[i].input = true
	}
	return i
}

// viewOf adds a view of t (a reshape or permute): no memory.
func (g *ggraph) viewOf(t int16) int16 { return g.viewFrom(t, t) }

// viewFrom adds a view of t made from src, itself a view of t.
func (g *ggraph) viewFrom(t, src int16) int16 {
	i := g.add(0, false, src)
	if i >= 0 {
		g.nodes[i].view = t
	}
	return i
}

// store adds a write into the cache (a view of an external tensor).
func (g *ggraph) store(srcs ...int16) {
	i := g.add(0, false, srcs...)
	if i >= 0 {
		g.nodes[i].view = -2
	}
}

// gfree is a free block of the allocator.
type gfree struct{ off, size int64 }

type gallocr struct {
	n      int
	blocks [256]gfree // MAX_FREE_BLOCKS
	max    int64
	err    bool
}

func gpad(x int64) int64 { return (x + llamaGraphAlign - 1) / llamaGraphAlign * llamaGraphAlign }

func (a *gallocr) alloc(size int64) int64 {
	size = gpad(size)
	best := -1
	for i := 0; i < a.n-1; i++ {
		if a.blocks[i].size >= size && (best < 0 || a.blocks[i].size <= a.blocks[best].size) {
			best = i
		}
	}
	if best < 0 {
		best = a.n - 1 // the last block, which grows without bound
	}
	b := &a.blocks[best]
	off := b.off
	b.off += size
	if best != a.n-1 {
		b.size -= size
		if b.size == 0 {
			copy(a.blocks[best:], a.blocks[best+1:a.n])
			a.n--
		}
	}
	a.max = max(a.max, off+size)
	return off
}

func (a *gallocr) free(off, size int64) {
	size = gpad(size)
	for i := 0; i < a.n; i++ {
		b := &a.blocks[i]
		if b.off+b.size == off && i != a.n-1 {
			b.size += size
			if i+1 < a.n && b.off+b.size == a.blocks[i+1].off {
				if i+1 == a.n-1 {
					// merged into the last, unbounded block
					a.blocks[i+1].off = b.off
					copy(a.blocks[i:], a.blocks[i+1:a.n])
					a.n--
					return
				}
				b.size += a.blocks[i+1].size
				copy(a.blocks[i+1:], a.blocks[i+2:a.n])
				a.n--
			}
			return
		}
		if off+size == b.off {
			b.off = off
			if i != a.n-1 {
				b.size += size
			}
			if i > 0 && a.blocks[i-1].off+a.blocks[i-1].size == b.off {
				if i == a.n-1 {
					a.blocks[i].off = a.blocks[i-1].off
				} else {
					a.blocks[i-1].size += b.size
				}
				if i == a.n-1 {
					copy(a.blocks[i-1:], a.blocks[i:a.n])
				} else {
					copy(a.blocks[i:], a.blocks[i+1:a.n])
				}
				a.n--
			}
			return
		}
	}
	if a.n == len(a.blocks) {
		a.err = true
		return
	}
	pos := 0
	for pos < a.n && a.blocks[pos].off < off {
		pos++
	}
	copy(a.blocks[pos+1:a.n+1], a.blocks[pos:a.n])
	a.blocks[pos] = gfree{off, size}
	a.n++
}

// run replays the allocator over g and returns the buffer's size.
func (g *ggraph) run() (int64, bool) {
	var a gallocr
	a.n = 1
	a.blocks[0] = gfree{0, 0} // the last block: unbounded
	place := func(i int16) {
		t := &g.nodes[i]
		if t.allocated || t.view != -1 {
			return
		}
		if t.inplace {
			for _, p := range t.src {
				if p < 0 {
					continue
				}
				pt := &g.nodes[p]
				if !pt.allocated || pt.view != -1 || pt.output || pt.size != t.size {
					continue
				}
				if pt.children == 1 && pt.views == 0 {
					t.off, t.allocated = pt.off, true
					pt.allocated = false // not freed: its memory is now t's
					return
				}
			}
		}
		t.off, t.allocated = a.alloc(t.size), true
	}
	release := func(i int16) {
		t := &g.nodes[i]
		if t.output || !t.allocated {
			return
		}
		a.free(t.off, t.size)
		t.allocated = false
	}
	for i := range g.n {
		t := &g.nodes[i]
		if t.view >= 0 {
			g.nodes[t.view].views++
		}
		for _, s := range t.src {
			if s >= 0 {
				g.nodes[s].children++
			}
		}
	}
	for i := range g.n {
		if g.nodes[i].input {
			place(int16(i))
		}
	}
	for i := range g.n {
		place(int16(i))
		for _, p := range g.nodes[i].src {
			if p < 0 {
				continue
			}
			pt := &g.nodes[p]
			pt.children--
			if pt.children != 0 || pt.views != 0 {
				continue
			}
			if pt.view >= 0 {
				vs := &g.nodes[pt.view]
				vs.views--
				if vs.views == 0 && vs.children == 0 {
					release(pt.view)
				}
			} else if pt.view == -1 {
				release(p)
			}
		}
	}
	return a.max, !a.err && !g.err
}

// llamaGraph is what one device's part of the worst-case graph holds.
type llamaGraph struct {
	embd, qDim, kv, ff, vocab, heads int64 // n_embd, n_head × n_embd_head, n_embd_k_gqa, n_ff, n_vocab, n_head
	nKV, ub                          int64
	swaKV                            int64 // the SWA cache's cells (0: no SWA cache): its mask and indices are inputs too
	flash                            bool
	layers                           int  // repeating layers on the device (the last ones)
	output                           bool // the output layer on the device
	host                             bool // the whole graph on one CPU device: tokens, get_rows and the inputs in the same buffer
	idx                              bool // set_rows stores with index inputs, and the last layer's get_rows by out_ids (builds from August 2025)
	unusedEmbd                       bool // the unused embeddings input (builds from January 2026, on the host)
}

// peak builds and replays the graph; false when a size overflows.
func (s *llamaGraph) peak() (int64, bool) { return s.peakN(llamaGraphLayers) }

// peakN replays at most maxLayers layers (the last of them the model's
// last).
func (s *llamaGraph) peakN(maxLayers int) (int64, bool) {
	var g ggraph
	ok := true
	mul := func(xs ...int64) int64 {
		p := int64(1)
		for _, x := range xs {
			var o bool
			if p, o = checked.Mul(p, x); !o {
				ok = false
				return 0
			}
		}
		return p
	}
	T := s.ub
	E := mul(s.embd, T, 4)
	maskElem := int64(4)
	if s.flash {
		maskElem = 2
	}
	var inL int16 // the layer input
	if s.host {
		tokens := g.input(mul(T, 4))
		inL = g.add(E, false, tokens) // get_rows
		if s.unusedEmbd {
			g.input(E)
		}
	} else {
		inL = g.input(E) // the split input's copy
	}
	layers := min(s.layers, maxLayers)
	var pos, kIdx, vIdx, mask, outIDs int16 = -1, -1, -1, -1, -1
	if layers > 0 {
		pos = g.input(mul(T, 4))
		if s.idx {
			kIdx = g.input(mul(T, 8))
			vRows := T
			if !s.flash {
				vRows = mul(T, s.kv)
			}
			vIdx = g.input(mul(vRows, 8))
		}
		mask = g.input(mul(s.nKV, T, maskElem))
		if s.swaKV > 0 {
			// build_attn_inp_kv_iswa: the SWA cache's indices and mask.
			if s.idx {
				g.input(mul(T, 8))
				vRows := T
				if !s.flash {
					vRows = mul(T, s.kv)
				}
				g.input(mul(vRows, 8))
			}
			g.input(mul(s.swaKV, T, maskElem))
		}
		if s.idx {
			outIDs = g.input(mul(T, 4))
		}
	}
	Q, KV, FF := mul(s.qDim, T, 4), mul(s.kv, T, 4), mul(s.ff, T, 4)
	for il := range layers {
		last := il == layers-1
		inpSA := inL
		norm := g.add(E, true, inL)
		cur := g.add(E, true, norm) // × attn_norm
		q := g.add(Q, false, cur)
		qRope := g.add(Q, true, g.viewOf(q), pos)
		v := g.add(KV, false, cur)
		vr := g.viewOf(v)
		k := g.add(KV, false, cur)
		kRope := g.add(KV, true, g.viewOf(k), pos)
		g.store(g.viewOf(kRope), kIdx)
		g.store(g.viewFrom(v, vr), vIdx)
		qp := g.viewFrom(qRope, g.viewOf(qRope))
		var att int16
		if s.flash {
			att = g.viewOf(g.add(Q, false, qp, mask))
		} else {
			kq := g.add(mul(s.nKV, T, s.heads, 4), false, qp)
			sm := g.add(g.nodes[kq].size, true, kq, mask)
			kqv := g.add(Q, false, sm)
			att = g.add(Q, false, g.viewOf(kqv)) // cont
		}
		cur = g.add(E, false, att) // × wo
		if last && s.idx {
			cur = g.add(E, false, cur, outIDs)
			inpSA = g.add(E, false, inpSA, outIDs)
		}
		ffnInp := g.add(E, true, cur, inpSA)
		n2 := g.add(E, true, ffnInp)
		c2 := g.add(E, true, n2)
		gate := g.add(FF, false, c2)
		up := g.add(FF, false, c2)
		sw := g.add(FF, false, gate, up)
		down := g.add(E, false, sw)
		inL = g.add(E, true, down, ffnInp)
	}
	if s.output {
		on := g.add(E, true, inL)
		rn := g.add(E, true, on)
		g.nodes[rn].output = true
		lg := g.add(mul(s.vocab, T, 4), false, rn)
		g.nodes[lg].output = true
	} else if layers > 0 {
		// the layer output leaves for the host: a consumer outside.
		g.viewOf(inL)
	}
	if !ok {
		return 0, false
	}
	return g.run()
}
