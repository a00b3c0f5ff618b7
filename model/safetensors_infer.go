package model

// Inferring a Spec and its family from tensor names alone, when no
// config.json comes with the weights.

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// InferSpec returns a Spec whose Inventory is inv, with the shape facts
// that Hugging Face and GGUF tensor names reveal: the family whose
// checkpoint names they are (see [GuessFamily]), layers (highest layer
// index + 1), vocabulary and hidden size (from the token embedding),
// feed-forward size, routed experts, tied embeddings (no separate output
// head) and the dominant dtype. Heads and head size cannot be told apart
// from projection shapes alone; they are filled only where a per-head
// norm (qwen3, gemma3 q_norm) gives the head size. Take them from a
// config when one exists.
func InferSpec(inv []gpumem.Tensor) Spec {
	s := Spec{Inventory: inv}
	byDType := map[gpumem.DType]int64{}
	experts := map[int64]bool{}
	hasHead := false
	var qRows, kRows, qNorm, stacked int64
	for _, t := range inv {
		if n, err := t.Bytes(); err == nil {
			byDType[t.DType] += int64(n)
		}
		if l, ok := layerIndex(t.Name); ok && int64(l)+1 > s.Layers {
			s.Layers = int64(l) + 1
		}
		if e, ok := expertIndex(t.Name); ok && len(experts) <= maxTensors {
			experts[e] = true
		}
		name := t.Name
		switch {
		case len(t.Shape) == 2 && s.Vocab == 0 && hasSuffixAny(name, "embed_tokens.weight", "wte.weight",
			"word_embeddings.weight", "embed_in.weight", "token_embd.weight", "shared.weight", "token_embedding.weight"):
			// GGUF stores token_embd as [vocab, hidden] after reversal too.
			s.Vocab, s.Hidden = t.Shape[0], t.Shape[1]
		case hasSuffixAny(name, "lm_head.weight", "embed_out.weight", "proj_out.weight") || name == "output.weight":
			hasHead = true
		}
		if strings.Contains(name, "_exps.") && len(t.Shape) == 3 && t.Shape[0] > stacked {
			// GGUF stacks a layer's experts in one [experts, out, in] tensor.
			stacked = t.Shape[0]
		}
		if l, ok := layerIndex(name); ok && l == 0 && len(t.Shape) == 1 && hasSuffixAny(name, "self_attn.q_norm.weight", "attn_q_norm.weight") {
			qNorm = t.Shape[0]
		}
		if l, ok := layerIndex(name); ok && l == 0 && len(t.Shape) == 2 {
			switch {
			case hasSuffixAny(name, "self_attn.q_proj.weight", "attn_q.weight"):
				qRows = t.Shape[0]
			case hasSuffixAny(name, "self_attn.k_proj.weight", "attn_k.weight"):
				kRows = t.Shape[0]
			case hasSuffixAny(name, "mlp.up_proj.weight", "mlp.c_fc.weight", ".fc1.weight", "dense_h_to_4h.weight", "ffn_up.weight", "intermediate.dense.weight"):
				if s.Intermediate == 0 {
					s.Intermediate = t.Shape[0]
					if strings.HasSuffix(name, "c_fc.weight") && t.Shape[0] == s.Hidden {
						s.Intermediate = t.Shape[1] // GPT-2 Conv1D [in, out]
					}
				}
			}
		}
	}
	if s.Vocab > 0 {
		s.TiedEmbeddings = !hasHead
	}
	if qNorm > 0 && qRows > 0 && kRows > 0 && qRows%qNorm == 0 && kRows%qNorm == 0 {
		s.HeadDim, s.Heads, s.KVHeads = qNorm, qRows/qNorm, kRows/qNorm
	}
	s.MoE.Experts = max(int64(len(experts)), stacked)
	s.Family = GuessFamily(inv)
	var best int64 = -1
	for d, b := range byDType {
		if b > best || (b == best && d < s.DType) {
			s.DType, best = d, b
		}
	}
	return s
}

func hasSuffixAny(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// expertIndex finds N in "...experts.N..." (HF per-expert tensors).
func expertIndex(name string) (int64, bool) {
	i := strings.Index(name, ".experts.")
	if i < 0 {
		return 0, false
	}
	rest := name[i+len(".experts."):]
	seg, _, _ := strings.Cut(rest, ".")
	if seg == "" || len(seg) > 9 || strings.Trim(seg, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(seg, 10, 64)
	return n, err == nil
}

// GuessFamily returns the Hugging Face model_type whose checkpoint tensor
// names inv carries ("llama" for model.layers.N.self_attn.q_proj with
// mlp.gate_proj, "gpt2" for transformer.h.N.attn.c_attn, ...), or "" when
// the names match none. Llama-style names shared by several families
// (mistral, qwen2 without biases, gemma) read as "llama"; the layouts are
// the same.
func GuessFamily(inv []gpumem.Tensor) string {
	has := func(sub string) bool {
		for _, t := range inv {
			if strings.Contains(t.Name, sub) {
				return true
			}
		}
		return false
	}
	switch {
	case has("vision_tower.") && has("multi_modal_projector.linear_"):
		return "llava"
	case has("vision_tower.") && has("mm_input_projection_weight"):
		return "gemma3"
	case has("kv_a_proj_with_mqa"):
		if has("e_score_correction_bias") {
			return "deepseek_v3"
		}
		return "deepseek_v2"
	case has("block_sparse_moe.experts."):
		return "mixtral"
	case has("mlp.shared_expert_gate"):
		return "qwen2_moe"
	case has("mlp.experts.") && has("self_attn.q_norm"):
		return "qwen3_moe"
	case has("self_attn.qkv_proj") && has("mlp.gate_up_proj"):
		return "phi3"
	case has("self_attn.dense") && has("final_layernorm"):
		return "phi"
	case has("pre_feedforward_layernorm") && has("self_attn.q_norm"):
		return "gemma3_text"
	case has("pre_feedforward_layernorm"):
		return "gemma2"
	case has("self_attn.q_norm") && has("mlp.gate_proj"):
		return "qwen3"
	case has("self_attn.q_proj.bias") && has("mlp.gate_proj") && !has("self_attn.o_proj.bias"):
		return "qwen2"
	case has("model.layers.") && has("mlp.gate_proj"):
		return "llama"
	case has("transformer.h.") && has("attn.c_attn"):
		if has("transformer.h.0.attn.c_attn.weight") && cAttnIsLinear(inv) {
			return "gpt_bigcode"
		}
		return "gpt2"
	case has("transformer.word_embeddings") && has("query_key_value"):
		return "falcon"
	case has("gpt_neox."):
		return "gpt_neox"
	case has("model.decoder.embed_positions") && has("self_attn_layer_norm") && !has("encoder"):
		return "opt"
	case has("model.encoder.conv1"):
		return "whisper"
	case has("encoder.block.") && has("shared.weight"):
		return "t5"
	case has("bert.embeddings"):
		return "bert"
	case has("roberta.embeddings"):
		return "roberta"
	case has("vit.embeddings"):
		return "vit"
	case has("text_model.") && has("vision_model.") && has("logit_scale"):
		return "clip"
	case has("vision_model.embeddings.class_embedding"):
		return "clip_vision_model"
	case has("vision_model.embeddings.patch_embedding") && has("vision_model.encoder.layers."):
		return "siglip_vision_model"
	case has("transformer_blocks.") && has("norm1.linear") && has("patch_embed.text_proj"):
		return "cogvideox"
	}
	return ""
}

// cAttnIsLinear tells GPTBigCode's nn.Linear c_attn ([out, in], out >
// in) from GPT-2's Conv1D ([in, 3·in]).
func cAttnIsLinear(inv []gpumem.Tensor) bool {
	for _, t := range inv {
		if strings.HasSuffix(t.Name, "h.0.attn.c_attn.weight") && len(t.Shape) == 2 {
			return t.Shape[0] > t.Shape[1]
		}
	}
	return false
}
