package model

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readConfig(t testing.TB, path string) Spec {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	s, err := FromHFConfig(bytes.NewReader(data))
	require.NoError(t, err, path)
	return s
}

func TestFromHFConfigSamples(t *testing.T) {
	t.Parallel()
	t.Run("absent num_key_value_heads: llama default = heads", func(t *testing.T) {
		t.Parallel()
		s := readConfig(t, "testdata/configs/llama-7b-no-kv-heads.json")
		assert.Equal(t, int64(32), s.KVHeads)
		assert.Equal(t, int64(6_738_415_616), s.Params()) // same shapes as Llama-2-7B
		assert.Equal(t, gpumem.FP16, s.DType)
	})
	t.Run("absent num_key_value_heads: qwen2 class default 32", func(t *testing.T) {
		t.Parallel()
		s, err := FromHFConfig(strings.NewReader(`{"model_type": "qwen2", "num_attention_heads": 32, "hidden_size": 4096}`))
		require.NoError(t, err)
		assert.Equal(t, int64(32), s.KVHeads) // Qwen2Config(num_key_value_heads=32)
		// With Qwen2-7B's 28 heads the default 32 KV heads is rejected,
		// naming the key to add.
		data, err := os.ReadFile("testdata/configs/qwen2-no-kv-heads.json")
		require.NoError(t, err)
		_, err = FromHFConfig(bytes.NewReader(data))
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, "config.num_key_value_heads (Spec.KVHeads)", fe.Field)
	})
	t.Run("dtype wins over torch_dtype; mistral class defaults", func(t *testing.T) {
		t.Parallel()
		s := readConfig(t, "testdata/configs/dtype-and-torch-dtype.json")
		assert.Equal(t, gpumem.BF16, s.DType)
		assert.Equal(t, int64(8), s.KVHeads)
		assert.Equal(t, int64(4096), s.SlidingWindow)
		assert.Equal(t, int64(7_241_732_096), s.Params()) // MistralConfig() is Mistral-7B
	})
	t.Run("unknown model_type with decoder keys is generic", func(t *testing.T) {
		t.Parallel()
		s := readConfig(t, "testdata/configs/internlm2-7b.json")
		assert.True(t, s.Generic)
		assert.Equal(t, "internlm2", s.Family)
		// InternLM2-7B published 7,737,708,544 (Hub safetensors total);
		// as a llama-style decoder: 2·92544·4096 + 32·(4096·(4096+2·1024)
		// + 4096² + 3·4096·14336 + 2·4096) + 4096.
		assert.Equal(t, int64(2*92544*4096+32*(4096*(4096+2*1024)+4096*4096+3*4096*14336+2*4096)+4096), s.Params())
	})
	t.Run("gemma3 multimodal", func(t *testing.T) {
		t.Parallel()
		s := readConfig(t, "testdata/configs/gemma-3-4b-it.json")
		assert.Equal(t, "gemma3", s.Family)
		lm := s.LM()
		assert.Equal(t, "gemma3_text", lm.Family)
		assert.Equal(t, int64(262208), lm.Vocab) // Gemma3TextConfig default
		require.Len(t, lm.LayerTypes, 34)
		assert.Equal(t, "sliding_attention", lm.LayerTypes[0])
		assert.Equal(t, "full_attention", lm.LayerTypes[5]) // sliding_window_pattern 6
		// google/gemma-3-4b-it: 4,300,079,472 ("'google/gemma-3-4b-it': ('gemma', 4300079472)").
		assert.Equal(t, int64(4_300_079_472), s.Params())
	})
	t.Run("unknown model_type without decoder keys", func(t *testing.T) {
		t.Parallel()
		data, err := os.ReadFile("testdata/configs/unknown-tts.json")
		require.NoError(t, err)
		_, err = FromHFConfig(bytes.NewReader(data))
		require.ErrorIs(t, err, gpumem.ErrUnsupported)
		assert.Contains(t, err.Error(), "my_tts")
		assert.Contains(t, err.Error(), "llama, mistral")
	})
}

func TestFromHFConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, json, field string
		kind              error
	}{
		{"not json", `{"model_type": "llama",`, "config", gpumem.ErrSyntax},
		{"array", `[1, 2]`, "config", gpumem.ErrSyntax},
		{"trailing data", `{"model_type": "llama"} {}`, "config", gpumem.ErrSyntax},
		{"negative hidden", `{"model_type": "llama", "hidden_size": -1}`, "config.hidden_size", gpumem.ErrInvalid},
		{"zero hidden", `{"model_type": "llama", "hidden_size": 0}`, "config.hidden_size", gpumem.ErrInvalid},
		{"huge hidden", `{"model_type": "llama", "hidden_size": 1e30}`, "config.hidden_size", gpumem.ErrRange},
		{"huge integer", `{"model_type": "llama", "hidden_size": 99999999999999999999999}`, "config.hidden_size", gpumem.ErrRange},
		{"fractional", `{"model_type": "llama", "hidden_size": 4096.5}`, "config.hidden_size", gpumem.ErrInvalid},
		{"string number", `{"model_type": "llama", "hidden_size": "4096"}`, "config.hidden_size", gpumem.ErrSyntax},
		{"bool as number", `{"model_type": "gpt2", "n_embd": true}`, "config.n_embd", gpumem.ErrSyntax},
		{"number as bool", `{"model_type": "llama", "tie_word_embeddings": 1}`, "config.tie_word_embeddings", gpumem.ErrSyntax},
		{"bad dtype", `{"model_type": "llama", "torch_dtype": "float128"}`, "config.torch_dtype", gpumem.ErrSyntax},
		{"dtype not string", `{"model_type": "llama", "dtype": 16}`, "config.dtype", gpumem.ErrSyntax},
		{"kv heads not dividing", `{"model_type": "llama", "num_key_value_heads": 5}`, "config.num_key_value_heads (Spec.KVHeads)", gpumem.ErrInvalid},
		{"more kv heads", `{"model_type": "llama", "num_key_value_heads": 64}`, "config.num_key_value_heads (Spec.KVHeads)", gpumem.ErrInvalid},
		{"nested kv heads", `{"model_type": "llava", "text_config": {"num_key_value_heads": 3}}`, "config.text_config.num_key_value_heads (Spec.Text.KVHeads)", gpumem.ErrInvalid},
		{"text_config not object", `{"model_type": "llava", "text_config": 3}`, "config.text_config", gpumem.ErrSyntax},
		{"nested negative", `{"model_type": "llava", "vision_config": {"patch_size": -14}}`, "config.vision_config.patch_size", gpumem.ErrInvalid},
		{"layer_types length", `{"model_type": "qwen2", "num_hidden_layers": 2, "layer_types": ["full_attention"]}`, "config.layer_types", gpumem.ErrInvalid},
		{"layer_types not list", `{"model_type": "qwen2", "layer_types": "full"}`, "config.layer_types", gpumem.ErrSyntax},
		{"llama4 with vision", `{"model_type": "llama4", "text_config": {"model_type": "llama4_text"}}`, "config.vision_config", gpumem.ErrUnsupported},
		{"llama4_text moe_layers not default", `{"model_type": "llama4_text", "num_hidden_layers": 4, "moe_layers": [0, 3]}`, "config.moe_layers", gpumem.ErrUnsupported},
		{"llama4_text moe_layers not list", `{"model_type": "llama4_text", "moe_layers": 3}`, "config.moe_layers", gpumem.ErrSyntax},
		{"llama4_text moe_layers entry", `{"model_type": "llama4_text", "num_hidden_layers": 2, "moe_layers": [0, -1]}`, "config.moe_layers[1]", gpumem.ErrInvalid},
		{"llama4_text step zero", `{"model_type": "llama4_text", "interleave_moe_layer_step": 0}`, "config.interleave_moe_layer_step", gpumem.ErrInvalid},
		{"bloom heads not dividing", `{"model_type": "bloom", "hidden_size": 64, "n_head": 6}`, "config.n_head", gpumem.ErrInvalid},
		{"bloom n_embed not a number", `{"model_type": "bloom", "n_embed": "big"}`, "config.n_embed", gpumem.ErrSyntax},
		{"qwen2_vl heads not dividing", `{"model_type": "qwen2_vl", "vision_config": {"embed_dim": 1280, "num_heads": 12}}`, "config.vision_config.num_heads", gpumem.ErrInvalid},
		{"qwen2_5_vl zero merge", `{"model_type": "qwen2_5_vl", "vision_config": {"spatial_merge_size": 0}}`, "config.vision_config.spatial_merge_size", gpumem.ErrInvalid},
		{"qwen2_vl text kv heads", `{"model_type": "qwen2_vl", "num_key_value_heads": 5}`, "config.num_key_value_heads (Spec.KVHeads)", gpumem.ErrInvalid},
		{"qwen2_vl text_config", `{"model_type": "qwen2_vl", "text_config": {"hidden_size": "x"}}`, "config.text_config.hidden_size", gpumem.ErrSyntax},
		{"gpt_oss no experts", `{"model_type": "gpt_oss", "num_local_experts": 0}`, "config.num_local_experts", gpumem.ErrInvalid},
		{"gpt_oss active > experts", `{"model_type": "gpt_oss", "num_local_experts": 4, "experts_per_token": 5}`, "config.num_experts_per_tok (Spec.MoE.Active)", gpumem.ErrInvalid},
		{"gpt_oss attention_bias not bool", `{"model_type": "gpt_oss", "attention_bias": "yes"}`, "config.attention_bias", gpumem.ErrSyntax},
		{"unknown type", `{"model_type": "my_tts"}`, "config.model_type", gpumem.ErrUnsupported},
		{"missing key with no default", `{"model_type": "x", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10}`, "config.intermediate_size", gpumem.ErrInvalid},
		{"missing model_type, some keys", `{"hidden_size": 8}`, "config.num_hidden_layers", gpumem.ErrInvalid},
		{"no model_type", `{}`, "config.model_type", gpumem.ErrUnsupported},
		{"model_type not string", `{"model_type": 7}`, "config.model_type", gpumem.ErrSyntax},
		{"generic missing head_dim divisor", `{"model_type": "x", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 16, "vocab_size": 10, "intermediate_size": 4}`, "config.head_dim", gpumem.ErrInvalid},
		{"whisper heads not dividing", `{"model_type": "whisper", "d_model": 10, "decoder_attention_heads": 3}`, "config.decoder_attention_heads", gpumem.ErrInvalid},
		{"moe without active", `{"model_type": "mixtral", "num_experts_per_tok": 0}`, "config.num_experts_per_tok", gpumem.ErrInvalid},
		{"moe active > experts", `{"model_type": "mixtral", "num_experts_per_tok": 9}`, "config.num_experts_per_tok (Spec.MoE.Active)", gpumem.ErrInvalid},
		{"vit image smaller than patch", `{"model_type": "vit", "image_size": 8}`, "config.image_size (Spec.Image.Size)", gpumem.ErrInvalid},
		{"too many experts", `{"model_type": "mixtral", "num_local_experts": 1000000000, "num_experts_per_tok": 2}`, "config", gpumem.ErrRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromHFConfig(strings.NewReader(tc.json))
			require.ErrorIs(t, err, tc.kind)
			var fe *gpumem.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			if tc.field == "config" {
				assert.True(t, strings.HasPrefix(fe.Field, "config") || fe.Field == "Spec", "field %q", fe.Field)
			} else {
				assert.Equal(t, tc.field, fe.Field, "%v", err)
			}
		})
	}
	t.Run("oversized", func(t *testing.T) {
		t.Parallel()
		big := `{"model_type": "llama", "x": "` + strings.Repeat("a", maxConfigBytes) + `"}`
		_, err := FromHFConfig(strings.NewReader(big))
		require.ErrorIs(t, err, gpumem.ErrRange)
	})
}

func TestFromHFConfigAliases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, json string
		check      func(t *testing.T, s Spec)
	}{
		{"gpt2 hidden_size alias", `{"model_type": "gpt2", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 16}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, int64(1024), s.Hidden)
				assert.Equal(t, int64(2), s.Layers)
			}},
		{"t5 num_decoder_layers defaults to num_layers", `{"model_type": "t5", "num_layers": 3}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, int64(3), s.Layers)
				assert.Equal(t, int64(3), s.Encoder.Layers)
			}},
		{"mixtral num_experts alias", `{"model_type": "mixtral", "num_experts": 4}`,
			func(t *testing.T, s Spec) { assert.Equal(t, int64(4), s.MoE.Experts) }},
		{"deepseek num_local_experts alias", `{"model_type": "deepseek_v3", "num_local_experts": 16, "num_hidden_layers": 4}`,
			func(t *testing.T, s Spec) { assert.Equal(t, int64(16), s.MoE.Experts) }},
		{"mistral explicit null window", `{"model_type": "mistral", "sliding_window": null}`,
			func(t *testing.T, s Spec) { assert.Zero(t, s.SlidingWindow) }},
		{"qwen2 window off unless use_sliding_window", `{"model_type": "qwen2", "sliding_window": 4096}`,
			func(t *testing.T, s Spec) { assert.Zero(t, s.SlidingWindow) }},
		{"qwen2 sliding from max_window_layers", `{"model_type": "qwen2", "num_hidden_layers": 3, "use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 2}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, int64(4096), s.SlidingWindow)
				assert.Equal(t, []string{"full_attention", "full_attention", "sliding_attention"}, s.LayerTypes)
			}},
		{"gpt_oss defaults: alternating window, biased experts", `{"model_type": "gpt_oss", "num_hidden_layers": 4, "num_local_experts": 32, "experts_per_token": 2, "quantization_config": {"quant_method": "mxfp4"}}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, []string{"sliding_attention", "full_attention", "sliding_attention", "full_attention"}, s.LayerTypes)
				assert.Equal(t, int64(128), s.SlidingWindow)
				assert.Equal(t, MoE{Experts: 32, Active: 2, Intermediate: 2880}, s.MoE)
				assert.Equal(t, Bias{QKV: true, Out: true}, s.Bias)
				assert.Equal(t, Quantization{Method: "mxfp4", DType: gpumem.MXFP4}, s.Quantization)
			}},
		{"llama4_text interleaved (Maverick's rule)", `{"model_type": "llama4_text", "num_hidden_layers": 4, "interleave_moe_layer_step": 2, "moe_layers": [1, 3], "num_local_experts": 128}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, MoE{Experts: 128, Active: 1, Intermediate: 8192, Shared: 1, SharedIntermediate: 8192, Step: 2}, s.MoE)
				assert.Equal(t, int64(16384), s.Intermediate, "dense layers: intermediate_size_mlp")
				assert.Equal(t, []bool{false, true, false, true}, []bool{s.IsMoELayer(0), s.IsMoELayer(1), s.IsMoELayer(2), s.IsMoELayer(3)})
				var dense, moe bool
				for _, x := range s.Tensors() {
					dense = dense || x.Name == "model.layers.0.feed_forward.gate_proj.weight"
					moe = moe || x.Name == "model.layers.1.feed_forward.experts.down_proj"
				}
				assert.True(t, dense && moe)
			}},
		{"bloom n_embed wins, n_inner ignored", `{"model_type": "bloom", "n_embed": 128, "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "n_inner": 7, "vocab_size": 10}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, []int64{128, 3, 4, 32, 512}, []int64{s.Hidden, s.Layers, s.Heads, s.HeadDim, s.Intermediate})
				// 10·128 + 2·256 + 3·(12·128² + 13·128) = 1,280 + 512 + 594,816 = 596,608.
				assert.Equal(t, int64(596_608), s.Params())
				assert.True(t, s.TiedEmbeddings)
			}},
		{"gemma2 alternating layers", `{"model_type": "gemma2", "num_hidden_layers": 4}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, []string{"sliding_attention", "full_attention", "sliding_attention", "full_attention"}, s.LayerTypes)
			}},
		{"v5 rope_parameters ignored", `{"model_type": "llama", "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}`,
			func(t *testing.T, s Spec) { assert.Equal(t, int64(6_738_415_616), s.Params()) }},
		{"auto dtype", `{"model_type": "llama", "torch_dtype": "auto"}`,
			func(t *testing.T, s Spec) { assert.Equal(t, gpumem.FP32, s.DType) }},
		{"float integer", `{"model_type": "llama", "hidden_size": 4096.0}`,
			func(t *testing.T, s Spec) { assert.Equal(t, int64(4096), s.Hidden) }},
		{"falcon new architecture", `{"model_type": "falcon", "new_decoder_architecture": true, "num_kv_heads": 8, "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, int64(8), s.KVHeads)
				assert.Equal(t, int64(2), s.ParallelNorms)
			}},
		{"bigcode multi query", `{"model_type": "gpt_bigcode"}`,
			func(t *testing.T, s Spec) { assert.Equal(t, int64(1), s.KVHeads) }},
		{"siglip full config reads vision tower", `{"model_type": "siglip", "vision_config": {"image_size": 384, "patch_size": 14}}`,
			func(t *testing.T, s Spec) {
				assert.Equal(t, "siglip_vision_model", s.Family)
				assert.Equal(t, int64(729), s.Image.Patches())
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := FromHFConfig(strings.NewReader(tc.json))
			require.NoError(t, err)
			tc.check(t, s)
		})
	}
}

// TestEveryFamily reads each supported model_type from its class
// defaults alone ({"model_type": X}).
func TestEveryFamily(t *testing.T) {
	t.Parallel()
	for _, f := range Families() {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			s, err := FromHFConfig(strings.NewReader(`{"model_type": "` + f + `"}`))
			require.NoError(t, err)
			assert.Positive(t, s.Params())
			assert.False(t, s.Generic)
		})
	}
}

func FuzzFromHFConfig(f *testing.F) {
	for _, dir := range []string{"configs", "testdata/configs"} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") {
				if data, err := os.ReadFile(p); err == nil {
					f.Add(data)
				}
			}
			return nil
		})
	}
	f.Add([]byte(`{"model_type": "llama", "hidden_size": -1}`))
	f.Add([]byte(`{"model_type": "deepseek_v3", "n_routed_experts": 100000}`))
	f.Add([]byte(`{"model_type": "llama", "hidden_size": 1e400, "num_hidden_layers": 9223372036854775808}`))
	f.Add([]byte(`{"model_type": "llava", "text_config": {"text_config": {"model_type": "llava"}}}`))
	f.Add([]byte(`{"model_type": "llama", "x": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := FromHFConfig(bytes.NewReader(data))
		if err != nil {
			requireFieldError(t, err)
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("FromHFConfig returned an invalid Spec: %v", err)
		}
		if s.Params() <= 0 {
			t.Fatalf("Params() = %d for a valid Spec", s.Params())
		}
	})
}

func BenchmarkFromHFConfig(b *testing.B) {
	data, err := os.ReadFile("configs/llama-3-8b.json")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromHFConfig(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFromHFConfigNilReader(t *testing.T) {
	t.Parallel()
	_, err := FromHFConfig(nil)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config", fe.Field)
}

// requireFieldError fails unless err is a *gpumem.FieldError with a field
// and a reason, as every reader's error must be.
func requireFieldError(t *testing.T, err error) {
	t.Helper()
	var fe *gpumem.FieldError
	if !errors.As(err, &fe) || fe.Field == "" || fe.Err == nil {
		t.Fatalf("error is not a *FieldError with a field and a reason: %v", err)
	}
}
