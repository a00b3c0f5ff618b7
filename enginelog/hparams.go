package enginelog

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// Hparams are the model hyperparameters llama.cpp prints while it loads a
// GGUF (llama_model::print_info, src/llama-model.cpp, ggml-org/llama.cpp:
// "print_info: n_layer = 32"; releases of 2024 and ik_llama.cpp print the
// same keys as "llm_load_print_meta:"). A value llama.cpp prints as a
// per-layer list ("[8, 8, 0, …]", when the layers differ) is recorded in
// Varies, not as a number. Zero means not printed.
type Hparams struct {
	Arch       string // general.architecture ("llama", "qwen3", "command-r")
	NCtxTrain  int
	NEmbd      int
	NLayer     int
	NHead      int
	NHeadKV    int
	NEmbdHeadK int
	NEmbdHeadV int
	NFF        int
	NExpert    int
	NExpUsed   int
	NFFExp     int // n_ff_exp, an expert's inner size
	NFFShexp   int // n_ff_shexp, the shared expert's
	NExpShared int // n_expert_shared
	NVocab     int
	NSWA       int          // n_swa, the sliding window (0: none)
	NLoraKV    int          // n_lora_kv, DeepSeek's MLA latent
	SSMDState  int          // ssm_d_state, a recurrent (Mamba) state
	FileType   string       // "Q4_K - Medium", "BF16"
	ModelSize  gpumem.Bytes // "model size" ("file size" in 2025) = X GiB
	Params     float64      // "model params = 8.03 B", in parameters
	Varies     []string
	Conflicts  []string // values printed twice, differently (two models in one log)

	ggufVocab int // the metadata's token count
	nGQA      int // n_gqa, n_head / n_head_kv
}

// resolve applies llama.cpp's defaults to values the GGUF metadata
// leaves out (llama_model::load_hparams, src/llama-model.cpp):
// n_embd_head_k and _v are n_embd / n_head unless key_length and
// value_length are given, n_head_kv is n_head unless head_count_kv is, and
// n_vocab is the token list's length. print_info prints the resolved
// values, so a log that has them needs none of this; releases of 2023
// ("llama_model_load_internal:") printed neither the head size nor, before
// grouped-query attention, n_head_kv.
func (h *Hparams) resolve() {
	if h.NHeadKV == 0 && h.nGQA > 0 && h.NHead%h.nGQA == 0 {
		h.NHeadKV = h.NHead / h.nGQA
	}
	if h.NHeadKV == 0 {
		h.NHeadKV = h.NHead
	}
	if h.NEmbdHeadK == 0 && h.NHead > 0 {
		h.NEmbdHeadK = h.NEmbd / h.NHead
	}
	if h.NEmbdHeadV == 0 && h.NHead > 0 {
		h.NEmbdHeadV = h.NEmbd / h.NHead
	}
	if h.NVocab == 0 {
		h.NVocab = h.ggufVocab
	}
}

var (
	// The GGUF's metadata as llama_model_loader dumps it: "llama_model_loader:
	// - kv  14:  llama.block_count u32 = 80".
	reGGUFKV    = regexp.MustCompile(`llama_model_loader: - kv\s+\d+:\s+(\S+)\s+(\S+)\s+=\s+(.*?)\s*$`)
	reHparam    = regexp.MustCompile(`(?:print_info|llm_load_print_meta|llama_model_load_internal):\s+([a-z][a-z_ ]*?)\s*=\s*(.*?)\s*$`)
	reModelSize = regexp.MustCompile(`^` + num + ` (GiB|MiB)`)
	reParams    = regexp.MustCompile(`^` + num + ` ([KMBT])`)
)

// ggufKeys maps a GGUF key's suffix (after "<arch>.") to the print_info
// name llama.cpp loads it into (llama_model::load_hparams,
// src/llama-model.cpp; LLM_KV names in src/llama-arch.cpp).
var ggufKeys = map[string]string{
	"context_length": "n_ctx_train", "embedding_length": "n_embd", "block_count": "n_layer",
	"feed_forward_length": "n_ff", "attention.head_count": "n_head", "attention.head_count_kv": "n_head_kv",
	"attention.key_length": "n_embd_head_k", "attention.value_length": "n_embd_head_v", "vocab_size": "n_vocab",
	"expert_count": "n_expert", "expert_used_count": "n_expert_used", "expert_feed_forward_length": "n_ff_exp",
	"expert_shared_feed_forward_length": "n_ff_shexp", "expert_shared_count": "n_expert_shared",
	"attention.sliding_window": "n_swa", "attention.kv_lora_rank": "n_lora_kv", "ssm.state_size": "ssm_d_state",
}

var reTokens = regexp.MustCompile(`^arr\[str,(\d+)\]`)

// ggufKV reads one line of llama_model_loader's metadata dump into h
// (the GGUF header's keys, which print_info repeats after load).
func (h *Hparams) ggufKV(s string, line int) error {
	m := find(reGGUFKV, s, "llama_model_loader: - kv")
	if m == nil {
		return nil
	}
	key, typ, v := m[1], m[2], m[3]
	if key == "general.architecture" {
		h.Arch = v
		return nil
	}
	if key == "tokenizer.ggml.tokens" {
		// n_vocab is the token list's length (llama_vocab::load).
		if mm := reTokens.FindStringSubmatch(typ); mm != nil {
			h.ggufVocab = atoi(mm[1])
		}
		return nil
	}
	if h.Arch == "" {
		// An excerpt that starts after "general.architecture": the
		// architecture is the prefix of its own keys ("glm4.block_count").
		if i := strings.IndexByte(key, '.'); i > 0 && ggufKeys[key[i+1:]] != "" {
			h.Arch = key[:i]
		}
	}
	if h.Arch == "" || !strings.HasPrefix(key, h.Arch+".") {
		return nil
	}
	name := ggufKeys[strings.TrimPrefix(key, h.Arch+".")]
	if name == "" {
		return nil
	}
	if strings.HasPrefix(typ, "arr") {
		h.Varies = append(h.Varies, name)
		return nil
	}
	return h.set(name, v, line)
}

// hparam reads one print_info line into h.
func (h *Hparams) hparam(s string, line int) error {
	if err := h.ggufKV(s, line); err != nil {
		return err
	}
	if !strings.Contains(s, "print_info:") && !strings.Contains(s, "llm_load_print_meta:") && !strings.Contains(s, "llama_model_load_internal:") {
		return nil
	}
	m := reHparam.FindStringSubmatch(s)
	if m == nil {
		return nil
	}
	key, v := m[1], m[2]
	switch {
	case key == "arch":
		h.Arch = v
	case key == "file type" || key == "model ftype":
		h.FileType = v
	case key == "model size" || key == "file size":
		if mm := reModelSize.FindStringSubmatch(v); mm != nil {
			b, err := size(mm[1], mm[2], line)
			if err != nil {
				return err
			}
			h.ModelSize = b
		}
	case key == "model params":
		if mm := reParams.FindStringSubmatch(v); mm != nil {
			f, err := strconv.ParseFloat(mm[1]+map[string]string{"K": "e3", "M": "e6", "B": "e9", "T": "e12"}[mm[2]], 64)
			if err != nil {
				return fmt.Errorf("enginelog: line %d: model params %q: %w", line, v, err)
			}
			h.Params = f
		}
	default:
		if h.field(key) == nil {
			return nil
		}
		if strings.HasPrefix(v, "[") {
			h.Varies = append(h.Varies, key)
			return nil
		}
		return h.set(key, v, line)
	}
	return nil
}

// field is the count print_info names key, or nil.
func (h *Hparams) field(key string) *int {
	return map[string]*int{
		"n_ctx_train": &h.NCtxTrain, "n_embd": &h.NEmbd, "n_layer": &h.NLayer, "n_head": &h.NHead,
		"n_head_kv": &h.NHeadKV, "n_embd_head_k": &h.NEmbdHeadK, "n_embd_head_v": &h.NEmbdHeadV,
		"n_ff": &h.NFF, "n_expert": &h.NExpert, "n_expert_used": &h.NExpUsed, "n_ff_exp": &h.NFFExp,
		"n_ff_shexp": &h.NFFShexp, "n_expert_shared": &h.NExpShared, "n_vocab": &h.NVocab, "n_swa": &h.NSWA,
		"n_lora_kv": &h.NLoraKV, "ssm_d_state": &h.SSMDState, "n_gqa": &h.nGQA,
	}[key]
}

// set sets the count key to v. A second, different value (a log that
// loads two models, such as a draft model for speculative decoding) is
// recorded in Conflicts, and Spec refuses the shape.
func (h *Hparams) set(key, v string, line int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("enginelog: line %d: %s = %q: want a count", line, key, v)
	}
	f := h.field(key)
	if *f != 0 && *f != n {
		h.Conflicts = append(h.Conflicts, fmt.Sprintf("%s %d and %d", key, *f, n))
	}
	*f = n
	return nil
}

// Complete is true when h holds every value a decoder's buffers depend
// on: n_layer, n_embd, n_head, n_head_kv, n_embd_head_k and _v, n_ff (or
// an MoE's expert size) and n_vocab.
func (h Hparams) Complete() bool {
	ff := h.NFF > 0 || (h.NExpert > 0 && h.NFFExp > 0)
	return h.NLayer > 0 && h.NEmbd > 0 && h.NHead > 0 && h.NHeadKV > 0 && h.NEmbdHeadK > 0 && h.NEmbdHeadV > 0 && ff && h.NVocab > 0
}

// ErrNotLlamaStyle is returned (wrapped) by Hparams.Spec for a model whose
// buffers the printed values do not decide alone.
var ErrNotLlamaStyle = errors.New("not a llama-style decoder")

// Spec builds the model the hyperparameters describe, for its KV cache
// and compute buffer: a llama-style decoder (RMSNorm, gated MLP, rotary
// positions) of n_layer layers, n_head query heads and n_head_kv key/value
// heads of n_embd_head_k, n_ff inner size (an MoE's n_expert experts of
// n_ff_exp, n_expert_used of them per token) and n_vocab rows, in BF16.
// Its weights are not the GGUF's (a quantized file's recipe is not
// modelled; a 16-bit one's biases and norms are not printed). It refuses,
// with ErrNotLlamaStyle, what the values do not decide: a per-layer value
// ("[…]"), a sliding window, DeepSeek's latent cache, a recurrent state,
// K and V heads of different sizes, or the values of two models (a log
// that loads a draft model too).
func (h Hparams) Spec() (model.Spec, error) {
	switch {
	case !h.Complete():
		return model.Spec{}, fmt.Errorf("enginelog: hparams incomplete: %w", ErrNotLlamaStyle)
	case len(h.Conflicts) > 0:
		return model.Spec{}, fmt.Errorf("enginelog: two models' hparams in one log (%s): %w", strings.Join(h.Conflicts, ", "), ErrNotLlamaStyle)
	case len(h.Varies) > 0:
		return model.Spec{}, fmt.Errorf("enginelog: per-layer %s: %w", strings.Join(h.Varies, ", "), ErrNotLlamaStyle)
	case h.NSWA > 0:
		return model.Spec{}, fmt.Errorf("enginelog: sliding window n_swa = %d: %w", h.NSWA, ErrNotLlamaStyle)
	case h.NLoraKV > 0:
		return model.Spec{}, fmt.Errorf("enginelog: latent attention n_lora_kv = %d: %w", h.NLoraKV, ErrNotLlamaStyle)
	case h.SSMDState > 0:
		return model.Spec{}, fmt.Errorf("enginelog: recurrent state ssm_d_state = %d: %w", h.SSMDState, ErrNotLlamaStyle)
	case h.NEmbdHeadK != h.NEmbdHeadV:
		return model.Spec{}, fmt.Errorf("enginelog: n_embd_head_k %d != n_embd_head_v %d: %w", h.NEmbdHeadK, h.NEmbdHeadV, ErrNotLlamaStyle)
	}
	s := model.Spec{
		Name: "llama.cpp hparams (" + h.Arch + ")", Family: "llama", DType: gpumem.BF16,
		Layers: int64(h.NLayer), Hidden: int64(h.NEmbd), Intermediate: int64(h.NFF),
		Heads: int64(h.NHead), KVHeads: int64(h.NHeadKV), HeadDim: int64(h.NEmbdHeadK),
		Vocab: int64(h.NVocab), Norm: model.RMSNorm, Gated: true, MaxPositions: int64(h.NCtxTrain),
	}
	if h.NExpert > 0 {
		if h.NFFExp == 0 || h.NExpUsed == 0 {
			return model.Spec{}, fmt.Errorf("enginelog: %d experts without n_ff_exp or n_expert_used: %w", h.NExpert, ErrNotLlamaStyle)
		}
		s.MoE = model.MoE{Experts: int64(h.NExpert), Active: int64(h.NExpUsed), Intermediate: int64(h.NFFExp)}
		if h.NExpShared > 0 {
			s.MoE.Shared = int64(h.NExpShared)
			s.MoE.SharedIntermediate = int64(h.NFFShexp)
		}
		if s.Intermediate == 0 {
			s.Intermediate = int64(h.NFFExp)
		}
	}
	if err := s.Validate(); err != nil {
		return model.Spec{}, fmt.Errorf("enginelog: hparams: %w", err)
	}
	return s, nil
}

// ParseHparams reads the model hyperparameters of llama.cpp's lines
// (print_info, llm_load_print_meta, llama_model_load_internal, or
// llama_model_loader's GGUF metadata dump), as Parse does in a whole log.
func ParseHparams(text string) (Hparams, error) {
	var h Hparams
	for i, s := range strings.Split(text, "\n") {
		if err := h.hparam(s, i+1); err != nil {
			return Hparams{}, err
		}
	}
	h.resolve()
	return h, nil
}
