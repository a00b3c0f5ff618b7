package budget

import (
	"strings"

	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
)

// # What one rank holds
//
// Under tensor, pipeline and expert parallelism a rank holds part of
// each tensor, part of the blocks and part of the experts. Each group of
// identical tensors is classified once, by its name, as Megatron-LM's
// tensor-parallel layers split it (megatron/core/tensor_parallel/layers.py):
//
//   - column-parallel projections (q, k, v, fused qkv, gate, up, fc1,
//     MLA's q_b and kv_b up-projections): weight rows and bias split;
//   - row-parallel projections (attention output, down, fc2): weight
//     columns split, bias whole;
//   - vocab-parallel embedding and head: vocabulary rows split
//     (Megatron pads the vocabulary to a multiple of 128·t; here each rank
//     holds ceil(V/t) rows);
//   - key/value projections below t heads: one head per rank, replicated
//     (as vLLM and Megatron forks do; upstream Megatron requires the
//     query groups to be a multiple of t);
//   - everything else (norms, routers, MLA down-projections, position
//     embeddings, convolutions): whole on every rank.
//
// Routed experts are divided among ExpertParallel ranks. A pipeline
// stage holds ceil(L/p) blocks; the first stage holds the embeddings,
// the last the final norm and head (and, for tied embeddings, a copy of
// the embedding as its output layer, as Megatron does).

// tpClass is how tensor parallelism splits a tensor.
type tpClass uint8

const (
	tpWhole tpClass = iota // replicated on every rank
	tpSplit                // split along tpDim
	tpVocab                // vocabulary rows split
	tpKV                   // a key or value projection: KV heads split, one replicated below t
	tpQKV                  // a fused q/k/v projection: query heads split, KV heads as tpKV
)

const (
	compLayer uint8 = iota
	compEmbed
	compHead
	compOther
)

func compOf(c string) uint8 {
	switch c {
	case "layer":
		return compLayer
	case "embeddings":
		return compEmbed
	case "head":
		return compHead
	}
	return compOther
}

// Module names, by how Megatron splits the layer they name (Hugging Face
// and GGUF spellings).
var (
	tpColumn = map[string]bool{"q_proj": true, "gate_proj": true, "up_proj": true, "gate_up_proj": true, "c_fc": true,
		"fc1": true, "dense_h_to_4h": true, "wi": true, "wi_0": true, "wi_1": true, "w1": true, "w3": true, "query": true,
		"q": true, "to_q": true, "q_b_proj": true, "kv_b_proj": true, "attn_q": true, "ffn_gate": true, "ffn_up": true,
		"ffn_gate_exps": true, "ffn_up_exps": true, "proj": true}
	tpKeyValue = map[string]bool{"k_proj": true, "v_proj": true, "key": true, "value": true, "k": true, "v": true,
		"to_k": true, "to_v": true, "attn_k": true, "attn_v": true}
	tpFused = map[string]bool{"qkv_proj": true, "c_attn": true, "query_key_value": true, "attn_qkv": true, "Wqkv": true}
	tpRow   = map[string]bool{"o_proj": true, "out_proj": true, "c_proj": true, "dense_4h_to_h": true, "down_proj": true,
		"fc2": true, "wo": true, "o": true, "w2": true, "attn_output": true, "ffn_down": true, "ffn_down_exps": true}
	tpVocabulary = map[string]bool{"embed_tokens": true, "wte": true, "word_embeddings": true, "embed_in": true,
		"token_embedding": true, "lm_head": true, "embed_out": true, "token_embd": true}
	// GPT-2's Conv1D stores weights as [in, out]: its column split is dim 1.
	tpConv1D = map[string]bool{"c_attn": true, "c_fc": true, "c_proj": true}
)

// tpClassify classifies a tensor by its name and rank: the class and the
// dimension split (-1 for none).
func tpClassify(name string, ndim int) (tpClass, int8) {
	base, param := name, ""
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		base, param = name[:i], name[i+1:]
	}
	mod, parent := base, ""
	if i := strings.LastIndexByte(base, '.'); i >= 0 {
		mod, parent = base[i+1:], base[:i]
		if j := strings.LastIndexByte(parent, '.'); j >= 0 {
			parent = parent[j+1:]
		}
	}
	if ndim == 0 || ndim > 2 {
		return tpWhole, -1
	}
	bias := param == "bias" || ndim == 1
	if tpVocabulary[mod] || (base == "shared" || base == "output") && !bias {
		if bias {
			return tpSplit, 0
		}
		return tpVocab, 0
	}
	column := tpColumn[mod] || (mod == "dense" && parent == "intermediate")
	row := tpRow[mod] || (mod == "dense" && parent != "intermediate" && parent != "pooler") ||
		(parent == "to_out" && mod == "0") || (parent == "net" && mod == "2")
	colDim, rowDim := int8(0), int8(1)
	if tpConv1D[mod] {
		colDim, rowDim = 1, 0
	}
	switch {
	case tpKeyValue[mod]:
		if bias {
			return tpKV, 0
		}
		return tpKV, colDim
	case tpFused[mod]:
		if bias {
			return tpQKV, 0
		}
		return tpQKV, colDim
	case column:
		if bias {
			return tpSplit, 0
		}
		return tpSplit, colDim
	case row:
		if bias {
			return tpWhole, -1
		}
		return tpSplit, rowDim
	}
	return tpWhole, -1
}

// partHeads returns the query and key/value heads of the sub-model part.
func partHeads(s model.Spec, part string) (heads, kv int64) {
	p := s.LM()
	switch {
	case part == "vision" && s.Vision != nil:
		p = *s.Vision
	case part == "encoder" && s.Encoder != nil:
		h, k := s.Encoder.Heads, s.Encoder.KVHeads
		if k == 0 {
			k = h
		}
		return h, k
	}
	if p.MLA.Enabled() {
		return p.Heads, p.Heads
	}
	return p.Heads, p.KVHeads
}

// rankView is one rank's share of the model.
type rankView struct {
	tp, ep      int64
	pp          int64 // pipeline stages (0 or 1: none); a stage holds ceil(layers/pp) blocks
	embed, head bool  // the stage holds the embeddings, the final norm and head
	last        bool  // the last pipeline stage (a tied embedding's copy)
	tiedModel   bool  // the model's head is its input embedding
}

// view returns the rank of p at pipeline stage last (false: the first).
func (p Parallel) view(m *Model, last bool) rankView {
	v := rankView{tp: int64(max(p.TensorParallel, 1)), ep: int64(max(p.ExpertParallel, 1)), embed: true, head: true, tiedModel: m.tied}
	if pp := int64(max(p.PipelineParallel, 1)); pp > 1 {
		v.pp = pp
		v.embed, v.head, v.last = !last, last, last
	}
	return v
}

// elems returns the elements of one tensor of g on the rank.
func (v *rankView) elems(g *group) int64 {
	t, e := v.tp, g.elems
	if t <= 1 {
		return e
	}
	switch g.tp {
	case tpSplit, tpVocab:
		q, _ := checked.CeilDiv(e, t)
		return q
	case tpKV:
		if g.kv >= t || g.kv <= 0 {
			q, _ := checked.CeilDiv(e, t)
			return q
		}
		return e / g.kv
	case tpQKV:
		den := g.heads + 2*g.kv
		if g.heads > 0 && den > 0 && e%den == 0 {
			return e / den * (g.heads/t + 2*max(1, g.kv/t))
		}
		q, _ := checked.CeilDiv(e, t)
		return q
	}
	return e
}

// count returns how many tensors of g the rank holds, for a model of
// layers blocks.
func (v *rankView) count(g *group, layers int64) int64 {
	n := g.count
	if g.expert && v.ep > 1 {
		n, _ = checked.CeilDiv(n, v.ep)
	}
	if v.pp <= 1 {
		return n
	}
	switch g.comp {
	case compLayer:
		stage, _ := checked.CeilDiv(layers, v.pp)
		if layers > 0 && n%layers == 0 {
			return n / layers * stage
		}
		q, _ := checked.CeilDiv(n, v.pp)
		return q
	case compEmbed:
		if v.embed || (v.last && v.tied(g)) {
			return n
		}
		return 0
	case compHead:
		if v.head {
			return n
		}
		return 0
	}
	if v.embed {
		return n
	}
	return 0
}

// tied reports whether g is the word embedding the last stage copies as
// its output layer.
func (v *rankView) tied(g *group) bool { return g.tp == tpVocab && v.tiedModel }

// shape returns the rank's shape of one tensor of g holding elems
// elements: the split dimension reduced, or one flat dimension when
// the split does not fall on a dimension.
func (g *group) rankShape(elems int64) []int64 {
	if elems == g.elems {
		return g.shape
	}
	sh := append([]int64(nil), g.shape...)
	if d := int(g.tpDim); d >= 0 && d < len(sh) {
		other := g.elems / max(sh[d], 1)
		if other > 0 && elems%other == 0 {
			sh[d] = elems / other
			return sh
		}
	}
	return []int64{elems}
}

// rankTrainable returns the rank's trainable elements.
func (m *Model) rankTrainable(v *rankView) int64 {
	if v == nil {
		return m.trainableParams
	}
	var n int64
	for i := range m.groups {
		g := &m.groups[i]
		if g.trainable {
			x, _ := checked.Mul(v.elems(g), v.count(g, m.layers))
			n, _ = checked.Add(n, x)
		}
	}
	return n
}
