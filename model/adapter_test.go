package model

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoRAPublished checks PEFT's print_trainable_parameters() output as
// published for two models with r=8 and the family's default targets.
func TestLoRAPublished(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model          string
		trainable, all int64
		source         string
	}{
		// "trainable params: 4,194,304 || all params: 6,742,609,920 ||
		// trainable%: 0.06220594176090199" (Llama-2-7B, q_proj/v_proj, r=8).
		{"llama-2-7b", 4_194_304, 6_742_609_920, "PEFT print_trainable_parameters, many tutorials"},
		// "trainable params: 294,912 || all params: 124,734,720 ||
		// trainable%: 0.2364" (GPT-2, c_attn Conv1D, r=8).
		{"gpt2", 294_912, 124_734_720, "PEFT print_trainable_parameters, many tutorials"},
		// FLAN-T5-base, q/v of 36 attention modules (12 encoder self, 12
		// decoder self, 12 cross), r=8: "'Frozen Base Parameters', 'LoRA
		// Trainable Parameters' ... [247577856, 884736]".
		{"flan-t5-base", 884_736, 247_577_856 + 884_736, "published frozen/LoRA split"},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			s, ok := Lookup(tc.model)
			require.True(t, ok)
			f := Finetune{Model: s, LoRA: LoRA{Rank: 8}}
			got, err := f.TrainableParams(), f.Validate()
			require.NoError(t, err)
			assert.Equal(t, tc.trainable, got, tc.source)
			all, err := f.Params(), f.Validate()
			require.NoError(t, err)
			assert.Equal(t, tc.all, all, tc.source)
		})
	}
}

func TestLoRAShapes(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llama-3-8b")
	ad, err := LoRA{Rank: 16, Targets: []string{"k_proj", "self_attn.o_proj"}}.Adapters(s)
	require.NoError(t, err)
	require.Len(t, ad, 4*32)
	// GQA: k_proj is [1024, 4096], so B is [1024, 16].
	assert.Equal(t, gpumem.Tensor{Name: "model.layers.0.self_attn.k_proj.lora_A.weight", Shape: []int64{16, 4096}, DType: gpumem.FP32}, ad[0])
	assert.Equal(t, gpumem.Tensor{Name: "model.layers.0.self_attn.k_proj.lora_B.weight", Shape: []int64{1024, 16}, DType: gpumem.FP32}, ad[1])
	assert.Equal(t, []int64{4096, 16}, ad[3].Shape)

	// all-linear leaves the head alone: 7 linear layers per block.
	all, err := LoRA{Rank: 8, Targets: []string{AllLinear}, DType: gpumem.BF16}.Adapters(s)
	require.NoError(t, err)
	assert.Len(t, all, 2*7*32)
	for _, a := range all {
		assert.False(t, strings.HasPrefix(a.Name, "lm_head"))
		assert.Equal(t, gpumem.BF16, a.DType)
	}
	// r·(in+out) summed over the 7 linears of one block, ×32 layers:
	// q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096,
	// gate/up 4096+14336 each, down 14336+4096.
	n, err := sumElems(all)
	require.NoError(t, err)
	assert.Equal(t, int64(8*32*(8192+5120+5120+8192+3*18432)), n)
}

func TestLoRAErrors(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llama-2-7b")
	w, _ := Lookup("whisper-small")
	tests := []struct {
		name  string
		l     LoRA
		s     Spec
		field string
	}{
		{"zero rank", LoRA{}, s, "LoRA.Rank"},
		{"negative rank", LoRA{Rank: -4}, s, "LoRA.Rank"},
		{"bad dtype", LoRA{Rank: 4, DType: 200}, s, "LoRA.DType"},
		{"no match", LoRA{Rank: 4, Targets: []string{"c_attn"}}, s, "LoRA.Targets"},
		{"empty targets", LoRA{Rank: 4, Targets: []string{}}, s, "LoRA.Targets"},
		{"no PEFT default", LoRA{Rank: 4}, w, "LoRA.Targets"},
		{"invalid spec", LoRA{Rank: 4}, Spec{}, "Spec.Family"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.l.Adapters(tc.s)
			require.ErrorIs(t, err, gpumem.ErrInvalid)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
		})
	}
}

// TestQLoRA: Llama-2-7B with NF4 double-quantized base and r=64 adapters
// on every linear layer (the QLoRA paper's setting).
func TestQLoRA(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llama-2-7b")
	q := gpumem.Blockwise{Block: 64, Nested: true}
	f := Finetune{Model: s, LoRA: LoRA{Rank: 64, Targets: []string{AllLinear}}, Quant: gpumem.NF4, Blockwise: q}
	got, err := f.WeightsBytes()
	require.NoError(t, err)

	// Derivation: per layer the 7 linears hold 4·4096² + 3·4096·11008 =
	// 202,375,168 weights → NF4 bytes /2; each tensor adds its constants
	// (Blockwise.Constants, checked in the root package). Embedding and
	// lm_head stay fp16 (2·32000·4096·2 bytes), the 65 RMSNorm vectors of
	// 4096 too. Adapters: r·(in+out) fp32 over the 7 linears.
	var constants gpumem.Bytes
	for _, n := range []int64{4096 * 4096, 4096 * 11008} {
		c, err := q.Constants(n)
		require.NoError(t, err)
		mult := int64(4)
		if n != 4096*4096 {
			mult = 3
		}
		constants += gpumem.Bytes(mult*32) * c
	}
	linear := int64(32 * (4*4096*4096 + 3*4096*11008))
	want := gpumem.Bytes(linear/2) + constants +
		gpumem.Bytes(2*(2*32000*4096+65*4096)) +
		gpumem.Bytes(4*64*32*(4*8192+3*(4096+11008)))
	assert.Equal(t, want, got)
	// About 3.9 GB: 4.13 bits per quantized weight, as the QLoRA paper's
	// 4 + 0.127 bits.
	bits := float64(8*(int64(linear/2)+int64(constants))) / float64(linear)
	assert.InEpsilon(t, 4.127, bits, 0.001)

	tr, err := f.TrainableParams(), f.Validate()
	require.NoError(t, err)
	assert.Equal(t, int64(64*32*(4*8192+3*(4096+11008))), tr) // 159,907,840
	params, err := f.Params(), f.Validate()
	require.NoError(t, err)
	assert.Equal(t, s.Params()+tr, params)

	t.Run("quantized weights cannot train", func(t *testing.T) {
		t.Parallel()
		g := f
		g.Train = TrainParts("layer")
		err := g.Validate()
		require.ErrorIs(t, err, gpumem.ErrInvalid)
	})
	t.Run("unsupported quant", func(t *testing.T) {
		t.Parallel()
		g := f
		g.Quant = gpumem.Q4_K
		_, err := g.WeightsBytes()
		require.ErrorIs(t, err, gpumem.ErrUnsupported)
	})
}

func TestTrainPredicates(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llava-1.5-7b")
	proj := Finetune{Model: s, Train: TrainParts("projector")}
	n, err := proj.TrainableParams(), proj.Validate()
	require.NoError(t, err)
	assert.Equal(t, int64(20_979_712), n) // 1024·4096+4096 + 4096²+4096
	frozen := Finetune{Model: s, Train: FreezeParts("vision")}
	n, err = frozen.TrainableParams(), frozen.Validate()
	require.NoError(t, err)
	assert.Equal(t, int64(7_063_427_072-303_507_456), n)
	full := Finetune{Model: s}
	n, err = full.TrainableParams(), full.Validate()
	require.NoError(t, err)
	// vision_feature_layer -2: the tower's last CLIP-L layer
	// (4·(1024²+1024) + 2·1024·4096+4096+1024 + 2·2·1024) and its
	// post_layernorm (2·1024) get no gradient (FrozenByModel).
	assert.Equal(t, s.Params()-12_596_224-2_048, n)
	// DeepSeek-V3's router bias is a buffer: it never trains.
	ds, _ := Lookup("deepseek-v3")
	n, err = Finetune{Model: ds}.TrainableParams(), Finetune{Model: ds}.Validate()
	require.NoError(t, err)
	assert.Equal(t, int64(671_026_419_200-58*256), n)
}

// TestFP8DeepSeek applies DeepSeek-V3's declared quantization_config
// (fp8 e4m3, 128×128 weight blocks). The released checkpoint holds 91,991
// tensors (a header audit: "tensorCount == 91991", 163 shards); its MTP
// layer 61, which transformers does not load, is a full MoE layer (782
// tensors + 776 scales) plus 6 MTP-only tensors (embed_tokens, enorm,
// hnorm, eh_proj, shared_head.norm, shared_head.head): 1,564. The main
// model is then 91,991 − 1,564 = 90,427 = 45,395 parameters + 45,032
// weight_scale_inv tensors.
func TestFP8DeepSeek(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("deepseek-v3")
	q := s.Quantization
	require.Equal(t, Quantization{Method: "fp8", DType: gpumem.FP8E4M3, Block: [2]int64{128, 128}}, q)
	f := Finetune{Model: s, Quant: q.DType, FP8Block: q.Block}
	ts, err := f.Tensors()
	require.NoError(t, err)
	assert.Len(t, ts, 90_427)
	scales := 0
	for _, tn := range ts {
		if strings.HasSuffix(tn.Name, ".weight_scale_inv") {
			scales++
		}
		if tn.Name == "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv" {
			assert.Equal(t, []int64{5, 56}, tn.Shape) // ceil(576/128), 7168/128
		}
		if tn.Name == "model.layers.3.mlp.gate.weight" || tn.Name == "lm_head.weight" {
			assert.Equal(t, gpumem.BF16, tn.DType, tn.Name)
		}
	}
	assert.Equal(t, 45_032, scales)
	params, err := f.Params(), f.Validate()
	require.NoError(t, err)
	assert.Equal(t, s.Params(), params) // scales are not parameters
	_, err = Finetune{Model: s, Quant: gpumem.FP8E4M3, FP8Block: [2]int64{128, 0}}.Tensors()
	require.ErrorIs(t, err, gpumem.ErrInvalid)
}

// TestQuantKeepsQuantized: quantizing a GGUF inventory leaves its
// already-quantized tensors alone.
func TestQuantKeepsQuantized(t *testing.T) {
	t.Parallel()
	data := tinyGGUF(t)
	s, err := FromGGUF(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	ts, err := Finetune{Model: s, Quant: gpumem.NF4}.Tensors()
	require.NoError(t, err)
	assert.Equal(t, s.Tensors(), ts)
}

func TestQuantizationConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json string
		want Quantization
	}{
		{`{"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true}`,
			Quantization{Method: "bitsandbytes", DType: gpumem.NF4, Nested: true}},
		{`{"quant_method": "bitsandbytes", "load_in_8bit": true}`, Quantization{Method: "bitsandbytes", DType: gpumem.INT8}},
		{`{"quant_method": "gptq", "bits": 4, "group_size": 128}`, Quantization{Method: "gptq", DType: gpumem.INT4, Group: 128}},
		{`{"quant_method": "fp8", "fmt": "e5m2"}`, Quantization{Method: "fp8", DType: gpumem.FP8E5M2}},
		{`{"quant_method": "hqq"}`, Quantization{Method: "hqq"}},
	}
	for _, tc := range tests {
		s, err := FromHFConfig(strings.NewReader(`{"model_type": "llama", "quantization_config": ` + tc.json + `}`))
		require.NoError(t, err, tc.json)
		assert.Equal(t, tc.want, s.Quantization, tc.json)
	}
	_, err := FromHFConfig(strings.NewReader(`{"model_type": "llama", "quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}`))
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config.quantization_config.weight_block_size", fe.Field)
}
