package budget

// What Ollama reads from a GGUF: its architecture and the keys its memory
// estimate uses.

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// ollamaModel is what Ollama's estimate reads from a GGUF file.
type ollamaModel struct {
	arch                 string
	blocks               []uint64 // blk.N sizes
	output               uint64   // output_norm + output (or token_embd)
	gateExps             uint64   // blk.0.ffn_gate_exps.weight (mixtral 8x22b), 0 without
	gate0Rows            uint64   // blk.0.ffn_gate.0.weight's Shape[1] (mixtral 8x7b), 0 without
	embd, heads, headsKV uint64
	headK, headV         uint64
	vocab, ff            uint64
	trainCtx             int
}

// ollamaEngineArchs are the architectures Ollama v0.12.11 always runs on
// its own engine (KV.OllamaEngineRequired, fs/ggml/ggml.go), whose
// layout is measured by allocating, not estimated.
var ollamaEngineArchs = []string{"gemma3", "gemma3n", "gptoss", "gpt-oss", "llama4", "mistral3", "mllama",
	"qwen25vl", "qwen3", "qwen3moe", "qwen3vl", "qwen3vlmoe"}

// ollamaArch maps a Hugging Face model_type to the GGUF architecture
// llama.cpp's converter writes for it (convert_hf_to_gguf.py); a GGUF
// Family is already one.
func ollamaArch(family string) string {
	switch family {
	case "mistral", "mixtral":
		return "llama"
	case "phi":
		return "phi2"
	case "cohere":
		return "command-r"
	case "deepseek_v2":
		return "deepseek2"
	case "gpt_oss":
		return "gptoss"
	case "qwen3_moe":
		return "qwen3moe"
	case "qwen2_5_vl":
		return "qwen25vl"
	}
	return family
}

// ollamaRead collects the sizes Ollama's estimate uses: the GGUF tensors
// grouped by their first name part (Tensors.GroupLayers: "blk.N",
// "output", "output_norm", "token_embd"), each tensor's size elements ×
// type size / block size; a model without a GGUF inventory has its
// blocks' bytes spread evenly and its head in the output.
func ollamaRead(m *Model) (ollamaModel, error) { return ollamaReadArch(m, false) }

// ollamaReadArch is ollamaRead; with engine, an architecture Ollama runs
// on its own engine is read too (its cache formula, OllamaKV).
func ollamaReadArch(m *Model, engine bool) (ollamaModel, error) {
	s := m.spec
	lm := s.LM()
	om := ollamaModel{arch: ollamaArch(s.Family), trainCtx: int(min(lm.MaxPositions, math.MaxInt32))}
	if !engine && slices.Contains(ollamaEngineArchs, om.arch) {
		return om, gpumem.Errorf("model", s.Family, gpumem.ErrUnsupported,
			"Ollama %s runs %s on its own engine, which measures its layout by allocating it: not modelled (the llama.cpp runtime sizes the buffers)", OllamaVersion, om.arch)
	}
	if lm.Layers <= 0 || lm.Heads <= 0 || lm.Hidden <= 0 {
		return om, gpumem.Errorf("model", s.Name, gpumem.ErrInvalid, "Ollama's estimate needs a decoder with layers, heads and a width")
	}
	n := int(lm.Layers)
	om.blocks = make([]uint64, n)
	om.embd, om.heads = uint64(lm.Hidden), uint64(lm.Heads)
	om.headsKV = uint64(max(lm.KVHeads, 1))
	om.headK, om.headV = uint64(lm.HeadDim), uint64(lm.HeadDim)
	if lm.MLA.Enabled() {
		om.headK, om.headV = uint64(lm.MLA.QKNopeHeadDim+lm.MLA.QKRopeHeadDim), uint64(lm.MLA.VHeadDim)
	}
	om.vocab, om.ff = uint64(lm.Vocab), uint64(lm.Intermediate)
	var outNorm, out, embd uint64
	var hasOut bool
	if inv := s.Inventory; inv != nil {
		for _, t := range inv {
			b, err := t.Bytes()
			if err != nil {
				return om, err
			}
			name := t.Name
			if rest, ok := strings.CutPrefix(name, "blk."); ok {
				idx, tail, _ := strings.Cut(rest, ".")
				i, err := strconv.Atoi(idx)
				if err != nil || i < 0 || i >= n {
					continue // a block Ollama's loop never reads
				}
				om.blocks[i] += uint64(b)
				if i == 0 && tail == "ffn_gate_exps.weight" {
					om.gateExps = uint64(b)
				}
				if i == 0 && tail == "ffn_gate.0.weight" && len(t.Shape) == 2 {
					om.gate0Rows = uint64(t.Shape[0]) // ggml's Shape[1]: rows, reversed to row-major
				}
				continue
			}
			switch first, _, _ := strings.Cut(name, "."); first {
			case "output_norm":
				outNorm += uint64(b)
			case "output":
				out += uint64(b)
				hasOut = true
			case "token_embd":
				embd += uint64(b)
			default:
				_, comp, il := model.Component(name)
				switch {
				case comp == "layer" && il >= 0 && il < n:
					om.blocks[il] += uint64(b)
				case comp == "embeddings":
					embd += uint64(b)
				case comp == "head":
					out += uint64(b)
					hasOut = true
				}
			}
		}
	} else {
		for i := range m.groups {
			g := &m.groups[i]
			total, err := m.storedBytes(g, "Ollama weights")
			if err != nil {
				return om, err
			}
			switch g.comp {
			case compLayer:
				for i := range om.blocks {
					om.blocks[i] += uint64(total / int64(n))
				}
			case compEmbed:
				embd += uint64(total)
			default:
				if g.comp == compHead && len(g.shape) == 2 {
					hasOut = true
				}
				out += uint64(total)
			}
		}
	}
	om.output = outNorm + out
	if !hasOut {
		om.output += embd
	}
	return om, nil
}
