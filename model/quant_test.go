package model

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tensorBytes returns the bytes of the tensors of f named module+suffix
// for each suffix, in the order asked.
func tensorBytes(t *testing.T, f Finetune, module string, suffixes ...string) []gpumem.Bytes {
	t.Helper()
	ts, err := f.Tensors()
	require.NoError(t, err)
	out := make([]gpumem.Bytes, len(suffixes))
	for i, suffix := range suffixes {
		found := false
		for _, x := range ts {
			if x.Name == module+suffix {
				b, err := x.Bytes()
				require.NoError(t, err)
				out[i], found = b, true
			}
		}
		require.True(t, found, "no tensor %s%s", module, suffix)
	}
	return out
}

// TestQuantFormatsBytes: the bytes each format stores for Llama-2-7B's
// q_proj (4096 × 4096) and down_proj (in 11008, out 4096), computed by
// hand from the libraries' buffer shapes.
func TestQuantFormatsBytes(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llama-2-7b")
	const q = "model.layers.0.self_attn.q_proj"
	const down = "model.layers.0.mlp.down_proj"
	t.Run("gptq group 128", func(t *testing.T) {
		t.Parallel()
		f := Finetune{Model: s, Quant: gpumem.INT4, Method: "gptq"}
		got := tensorBytes(t, f, q, ".qweight", ".qzeros", ".scales", ".g_idx")
		// qweight int32 [4096·4/32 = 512, 4096]: 512·4096·4 = 8,388,608
		// (= 4096²/2); qzeros int32 [4096/128 = 32, 4096·4/32 = 512]:
		// 32·512·4 = 65,536; scales fp16 [32, 4096]: 32·4096·2 = 262,144;
		// g_idx int32 [4096]: 16,384.
		assert.Equal(t, []gpumem.Bytes{8_388_608, 65_536, 262_144, 16_384}, got)
		// down_proj: qweight [11008·4/32 = 1376, 4096] int32 = 22,544,384;
		// 11008/128 = 86 groups: qzeros 86·512·4 = 176,128, scales
		// 86·4096·2 = 704,512; g_idx 11008·4 = 44,032.
		got = tensorBytes(t, f, down, ".qweight", ".qzeros", ".scales", ".g_idx")
		assert.Equal(t, []gpumem.Bytes{22_544_384, 176_128, 704_512, 44_032}, got)
		// The quantized weight keeps its parameter count.
		n, err := f.Params(), f.Validate()
		require.NoError(t, err)
		assert.Equal(t, s.Params(), n)
	})
	t.Run("gptq per row", func(t *testing.T) {
		t.Parallel()
		f := Finetune{Model: s, Quant: gpumem.INT4, Method: "gptq", GroupSize: -1}
		// One group: qzeros [1, 512] int32 = 2,048; scales [1, 4096]
		// fp16 = 8,192; g_idx still one int32 per input, 16,384.
		got := tensorBytes(t, f, q, ".qweight", ".qzeros", ".scales", ".g_idx")
		assert.Equal(t, []gpumem.Bytes{8_388_608, 2_048, 8_192, 16_384}, got)
	})
	t.Run("awq group 128", func(t *testing.T) {
		t.Parallel()
		f := Finetune{Model: s, Quant: gpumem.INT4, Method: "awq"}
		// qweight int32 [4096, 4096/8 = 512] = 8,388,608; qzeros int32
		// [32, 512] = 65,536; scales fp16 [32, 4096] = 262,144; no g_idx.
		got := tensorBytes(t, f, q, ".qweight", ".qzeros", ".scales")
		assert.Equal(t, []gpumem.Bytes{8_388_608, 65_536, 262_144}, got)
		ts, err := f.Tensors()
		require.NoError(t, err)
		for _, x := range ts {
			assert.NotEqual(t, q+".g_idx", x.Name)
		}
	})
	t.Run("llm.int8", func(t *testing.T) {
		t.Parallel()
		f := Finetune{Model: s, Quant: gpumem.INT8}
		// int8 weight 4096·4096 = 16,777,216 bytes; SCB one fp32 per
		// output row: 4096·4 = 16,384.
		got := tensorBytes(t, f, q, ".weight", ".SCB")
		assert.Equal(t, []gpumem.Bytes{16_777_216, 16_384}, got)
		// The head and the embedding stay as loaded (fp16 here).
		got = tensorBytes(t, f, "lm_head", ".weight")
		assert.Equal(t, []gpumem.Bytes{32000 * 4096 * 2}, got)
	})
	t.Run("whole model", func(t *testing.T) {
		t.Parallel()
		// GPTQ Llama-2-7B, group 128, fp16 rest: per layer the 4
		// attention linears (4096²) hold 4·8,732,672 bytes and the 3 MLP
		// linears: gate/up (in 4096, out 11008) qweight 4096·11008/2 =
		// 22,544,384, qzeros 32·1376·4 = 176,128, scales 32·11008·2 =
		// 704,512, g_idx 16,384 → 23,441,408 each; down 22,544,384 +
		// 176,128 + 704,512 + 44,032 = 23,469,056. Embedding and head
		// 2·32000·4096·2 = 524,288,000; 65 norms of 4096 in fp16 532,480.
		f := Finetune{Model: s, Quant: gpumem.INT4, Method: "gptq"}
		got, err := f.WeightsBytes()
		require.NoError(t, err)
		perLayer := int64(4*8_732_672 + 2*23_441_408 + 23_469_056)
		assert.Equal(t, gpumem.Bytes(32*perLayer+524_288_000+532_480), got) // 3,893,118,976
	})
}

// TestQuantErrors: combinations that make no sense name their field.
func TestQuantErrors(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llama-2-7b")
	tests := []struct {
		name  string
		f     Finetune
		field string
	}{
		{"int4 without a method", Finetune{Model: s, Quant: gpumem.INT4}, "Finetune.Method"},
		{"gptq nf4", Finetune{Model: s, Quant: gpumem.NF4, Method: "gptq"}, "Finetune.Method"},
		{"unknown method", Finetune{Model: s, Quant: gpumem.INT4, Method: "hqq"}, "Finetune.Method"},
		{"method without quant", Finetune{Model: s, Method: "awq"}, "Finetune.Method"},
		{"group not dividing", Finetune{Model: s, Quant: gpumem.INT4, Method: "gptq", GroupSize: 100}, "Finetune.GroupSize"},
		{"group of bitsandbytes", Finetune{Model: s, Quant: gpumem.NF4, GroupSize: 64}, "Finetune.GroupSize"},
		{"group zero-like", Finetune{Model: s, Quant: gpumem.INT4, Method: "awq", GroupSize: -2}, "Finetune.GroupSize"},
		{"unquantized without quant", Finetune{Model: s, Unquantized: gpumem.BF16}, "Finetune.Unquantized"},
		{"unquantized fp8", Finetune{Model: s, Quant: gpumem.NF4, Unquantized: gpumem.FP8E4M3}, "Finetune.Unquantized"},
		{"compute dtype of gptq", Finetune{Model: s, Quant: gpumem.INT4, Method: "gptq", ComputeDType: gpumem.FP32}, "Finetune.ComputeDType"},
		{"compute dtype int8", Finetune{Model: s, Quant: gpumem.NF4, ComputeDType: gpumem.INT8}, "Finetune.ComputeDType"},
		{"unfused int8", Finetune{Model: s, Quant: gpumem.INT8, Unfused: true}, "Finetune.Unfused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.f.Tensors()
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
		})
	}
	// A layer whose in_features is not a multiple of 32 cannot use
	// exllamav2 (hidden 100).
	cfg := `{"model_type":"llama","hidden_size":100,"intermediate_size":256,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64}`
	small, err := FromHFConfig(strings.NewReader(cfg))
	require.NoError(t, err)
	_, err = Finetune{Model: small, Quant: gpumem.INT4, Method: "gptq", GroupSize: -1}.Tensors()
	require.ErrorIs(t, err, gpumem.ErrUnsupported)
}

// TestUnquantized: QLoRA Llama-3.1-8B as the recipe loads it (NF4 with
// double quantization, r=64 on PEFT's default q_proj and v_proj, fp32
// adapters, the rest in bf16): 5,811,362,688 bytes, 5.41 GiB.
func TestUnquantized(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llama-3.1-8b")
	f := Finetune{Model: s, LoRA: LoRA{Rank: 64}, Quant: gpumem.NF4, Blockwise: gpumem.Blockwise{Nested: true}, Unquantized: gpumem.BF16}
	got, err := f.WeightsBytes()
	require.NoError(t, err)
	// Per layer q, o: 4096² = 16,777,216 weights; k, v: 1024·4096 =
	// 4,194,304; gate, up, down: 14336·4096 = 58,720,256. 32 layers:
	// 6,979,321,856 weights → NF4 3,489,660,928 bytes.
	// Constants (blocks n/64 uint8, ceil(blocks/256) fp32, offset 4,
	// code 64): q, o 262,144 + 4,096 + 68 = 266,308; k, v 65,536 + 1,024
	// + 68 = 66,628; MLP 917,504 + 14,336 + 68 = 931,908; per layer
	// 3,461,596, 32 layers 110,771,072.
	// bf16: embedding and lm_head 128256·4096·2 = 1,050,673,152 each; 65
	// norms of 4096: 532,480.
	// Adapters fp32: q (64·4096 + 4096·64) + v (64·4096 + 1024·64) =
	// 851,968 per layer, 27,262,976 in all, 109,051,904 bytes.
	want := gpumem.Bytes(3_489_660_928 + 110_771_072 + 2*1_050_673_152 + 532_480 + 109_051_904)
	assert.Equal(t, want, got)
	assert.InDelta(t, 5.41, float64(got)/float64(gpumem.GiB), 0.005)
	// Without Unquantized the loader's dtype is the checkpoint's (bf16
	// for Llama-3.1) until the job's precision policy restores it.
	g := f
	g.Unquantized = gpumem.FP32
	got32, err := g.WeightsBytes()
	require.NoError(t, err)
	assert.Equal(t, want+2*1_050_673_152+532_480, got32)
}
