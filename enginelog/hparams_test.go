package enginelog

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestParseHparams reads the three ways llama.cpp prints a model's shape,
// each to the value.
func TestParseHparams(t *testing.T) {
	// print_info (2025), with a prefix before the engine's text.
	h, err := ParseHparams(strings.Join([]string{
		"ollama  | print_info: arch             = llama",
		"print_info: n_ctx_train      = 131072",
		"print_info: n_embd           = 4096",
		"print_info: n_layer          = 32",
		"print_info: n_head           = 32",
		"print_info: n_head_kv        = 8",
		"print_info: n_swa            = 0",
		"print_info: n_embd_head_k    = 128",
		"print_info: n_embd_head_v    = 128",
		"print_info: n_ff             = 14336",
		"print_info: n_expert         = 0",
		"print_info: file type        = Q4_K - Medium",
		"print_info: file size        = 4.58 GiB (4.89 BPW)",
		"print_info: model params     = 8.03 B",
		"print_info: n_vocab          = 128256",
	}, "\n"))
	require.NoError(t, err)
	assert.Equal(t, Hparams{Arch: "llama", NCtxTrain: 131072, NEmbd: 4096, NLayer: 32, NHead: 32, NHeadKV: 8,
		NEmbdHeadK: 128, NEmbdHeadV: 128, NFF: 14336, NVocab: 128256, FileType: "Q4_K - Medium", ModelSize: 4_917_737_554 /* 4.58 × 2^30, rounded */, Params: 8.03e9}, h)
	s, err := h.Spec()
	require.NoError(t, err)
	assert.Equal(t, int64(8), s.KVHeads)
	assert.Equal(t, int64(128), s.HeadDim)
	assert.Equal(t, gpumem.BF16, s.DType)

	// llm_load_print_meta (2024) with "model size".
	h, err = ParseHparams("llm_load_print_meta: model ftype      = BF16\nllm_load_print_meta: model size       = 61.734 GiB (16.001 BPW)")
	require.NoError(t, err)
	assert.Equal(t, "BF16", h.FileType)
	want, err := gpumem.ParseBytes("61.734 GiB")
	require.NoError(t, err)
	assert.Equal(t, want, h.ModelSize)
	assert.InDelta(t, 61.734*(1<<30), float64(h.ModelSize), 1)
	assert.False(t, h.Complete())

	// The GGUF metadata, from an excerpt that starts after
	// general.architecture: the keys name it; the head size is n_embd /
	// n_head and n_vocab the token list's length when the file does not
	// give them.
	h, err = ParseHparams(strings.Join([]string{
		"llama_model_loader: - kv   2:                          qwen2.block_count u32              = 28",
		"llama_model_loader: - kv   3:                     qwen2.embedding_length u32              = 3584",
		"llama_model_loader: - kv   4:                  qwen2.feed_forward_length u32              = 18944",
		"llama_model_loader: - kv   5:                 qwen2.attention.head_count u32              = 28",
		"llama_model_loader: - kv   6:              qwen2.attention.head_count_kv u32              = 4",
		"llama_model_loader: - kv   7:                       qwen2.rope.freq_base f32              = 1000000.000000",
		`llama_model_loader: - kv  24:                      tokenizer.ggml.tokens arr[str,152064]  = ["!", "\"", "#", ...`,
	}, "\n"))
	require.NoError(t, err)
	assert.Equal(t, "qwen2", h.Arch)
	assert.Equal(t, 28, h.NLayer)
	assert.Equal(t, 4, h.NHeadKV)
	assert.Equal(t, 128, h.NEmbdHeadK)
	assert.Equal(t, 152064, h.NVocab)
	assert.True(t, h.Complete())

	// Releases of 2023: no head size, and n_gqa instead of n_head_kv.
	h, err = ParseHparams(strings.Join([]string{
		"llama_model_load_internal: n_vocab    = 32000",
		"llama_model_load_internal: n_ctx      = 4096",
		"llama_model_load_internal: n_embd     = 8192",
		"llama_model_load_internal: n_head     = 64",
		"llama_model_load_internal: n_head_kv  = 8",
		"llama_model_load_internal: n_layer    = 80",
		"llama_model_load_internal: n_gqa      = 8",
		"llama_model_load_internal: n_ff       = 28672",
	}, "\n"))
	require.NoError(t, err)
	assert.Equal(t, 8, h.NHeadKV)
	assert.Equal(t, 128, h.NEmbdHeadK)
	assert.Zero(t, h.NCtxTrain, "n_ctx of 2023 is the context, not the training one")
	h, err = ParseHparams("llama_model_load_internal: n_head     = 64\nllama_model_load_internal: n_gqa      = 8")
	require.NoError(t, err)
	assert.Equal(t, 8, h.NHeadKV)

	_, err = ParseHparams("print_info: n_layer          = many")
	require.ErrorContains(t, err, "n_layer")
}

// TestHparamsSpecRefuses checks that a shape the printed values do not
// decide is refused, not guessed.
func TestHparamsSpecRefuses(t *testing.T) {
	base := Hparams{NEmbd: 4096, NLayer: 32, NHead: 32, NHeadKV: 8, NEmbdHeadK: 128, NEmbdHeadV: 128, NFF: 14336, NVocab: 32000}
	_, err := base.Spec()
	require.NoError(t, err)
	for name, h := range map[string]Hparams{
		"n_swa":         func() Hparams { h := base; h.NSWA = 4096; return h }(),
		"n_lora_kv":     func() Hparams { h := base; h.NLoraKV = 512; return h }(),
		"ssm_d_state":   func() Hparams { h := base; h.SSMDState = 128; return h }(),
		"n_embd_head_v": func() Hparams { h := base; h.NEmbdHeadV = 64; return h }(),
		"n_head_kv":     func() Hparams { h := base; h.Varies = []string{"n_head_kv"}; return h }(),
		"n_ff_exp":      func() Hparams { h := base; h.NExpert = 8; return h }(),
		"incomplete":    func() Hparams { h := base; h.NVocab = 0; return h }(),
	} {
		_, err := h.Spec()
		assert.True(t, errors.Is(err, ErrNotLlamaStyle), "%s: %v", name, err)
		assert.ErrorContains(t, err, name, name)
	}
	h, err := ParseHparams("print_info: n_layer          = 64\nprint_info: n_layer          = 64\nprint_info: n_layer          = 28")
	require.NoError(t, err)
	assert.Equal(t, []string{"n_layer 64 and 28"}, h.Conflicts)
	two := base
	two.Conflicts = h.Conflicts
	_, err = two.Spec()
	assert.ErrorIs(t, err, ErrNotLlamaStyle)
	assert.ErrorContains(t, err, "two models")
	h, err = ParseHparams("print_info: n_head_kv        = [8, 8, 0, 8]")
	require.NoError(t, err)
	assert.Equal(t, []string{"n_head_kv"}, h.Varies)

	moe := base
	moe.NExpert, moe.NExpUsed, moe.NFFExp = 128, 8, 768
	s, err := moe.Spec()
	require.NoError(t, err)
	assert.Equal(t, int64(128), s.MoE.Experts)
	assert.Equal(t, int64(768), s.MoE.Intermediate)
}
