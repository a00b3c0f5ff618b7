package gpumem

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDTypeBlocks checks every block format against the table measured by
// compiling against ggml's src/ggml-common.h (docs/reference.md#gguf-header) and the
// plain types against their element sizes.
func TestDTypeBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d            DType
		elems, bytes int64
		gguf         int // -1: none
	}{
		{FP64, 1, 8, 28}, {FP32, 1, 4, 0}, {TF32, 1, 4, -1}, {FP16, 1, 2, 1}, {BF16, 1, 2, 30},
		{FP8E4M3, 1, 1, -1}, {FP8E5M2, 1, 1, -1}, {FP8E4M3FNUZ, 1, 1, -1}, {FP8E5M2FNUZ, 1, 1, -1}, {FP8E8M0, 1, 1, -1},
		{FP6E2M3, 4, 3, -1}, {FP6E3M2, 4, 3, -1}, {FP4, 2, 1, -1}, {NF4, 2, 1, -1}, {INT4, 2, 1, -1},
		{BOOL, 1, 1, -1}, {UINT8, 1, 1, -1}, {INT8, 1, 1, 24}, {INT16, 1, 2, 25}, {UINT16, 1, 2, -1},
		{INT32, 1, 4, 26}, {UINT32, 1, 4, -1}, {INT64, 1, 8, 27}, {UINT64, 1, 8, -1}, {C64, 1, 8, -1},
		{MXFP4, 32, 17, 39}, {NVFP4, 64, 36, 40},
		{Q4_0, 32, 18, 2}, {Q4_1, 32, 20, 3}, {Q5_0, 32, 22, 6}, {Q5_1, 32, 24, 7}, {Q8_0, 32, 34, 8}, {Q8_1, 32, 36, 9},
		{Q2_K, 256, 84, 10}, {Q3_K, 256, 110, 11}, {Q4_K, 256, 144, 12}, {Q5_K, 256, 176, 13}, {Q6_K, 256, 210, 14}, {Q8_K, 256, 292, 15},
		{IQ2_XXS, 256, 66, 16}, {IQ2_XS, 256, 74, 17}, {IQ3_XXS, 256, 98, 18}, {IQ1_S, 256, 50, 19}, {IQ4_NL, 32, 18, 20},
		{IQ3_S, 256, 110, 21}, {IQ2_S, 256, 82, 22}, {IQ4_XS, 256, 136, 23}, {IQ1_M, 256, 56, 29},
		{TQ1_0, 256, 54, 34}, {TQ2_0, 256, 66, 35}, {Q1_0, 128, 18, 41}, {Q2_0, 64, 18, 42},
	}
	seen := map[DType]bool{}
	for _, tc := range tests {
		seen[tc.d] = true
		e, b := tc.d.Block()
		if e != tc.elems || b != tc.bytes {
			t.Errorf("%v.Block() = %d, %d, want %d, %d", tc.d, e, b, tc.elems, tc.bytes)
		}
		id, ok := tc.d.GGUFType()
		if tc.gguf < 0 {
			assert.False(t, ok, "%v has no GGUF id", tc.d)
			continue
		}
		if !ok || int(id) != tc.gguf {
			t.Errorf("%v.GGUFType() = %d, %v, want %d", tc.d, id, ok, tc.gguf)
		}
		back, err := DTypeFromGGUF(uint32(tc.gguf))
		require.NoError(t, err)
		assert.Equal(t, tc.d, back)
	}
	for d := DType(1); d < numDTypes; d++ {
		assert.True(t, seen[d], "DType %v has no row in this table", d)
	}
}

func TestDTypeSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    DType
		n    int64
		want Bytes
	}{
		{Q4_K, 256 * 10, 1440}, // a worked value: 10 blocks of 144 bytes
		{Q4_K, 1, 144},         // a partial block takes a whole block
		{Q4_K, 0, 0},
		{BF16, 7, 14},
		{FP32, 6_738_415_616, 26_953_662_464}, // Llama-2-7B in fp32
		{NF4, 3, 2},                           // bitsandbytes packs (n+1)//2 bytes
		{NF4, 4096 * 4096, 8 << 20},
		{INT4, 9, 5},
		{FP6E2M3, 5, 6},
		{Q8_0, 4096, 4096 / 32 * 34},
		{MXFP4, 64, 34},
		{FP64, 1 << 59, 1 << 62},
	}
	for _, tc := range tests {
		got, err := tc.d.Size(tc.n)
		require.NoError(t, err, "%v.Size(%d)", tc.d, tc.n)
		if got != tc.want {
			t.Errorf("%v.Size(%d) = %d, want %d", tc.d, tc.n, got, tc.want)
		}
	}
}

func TestDTypeSizeErrors(t *testing.T) {
	t.Parallel()
	_, err := FP64.Size(1 << 61)
	require.ErrorIs(t, err, ErrRange)
	_, err = BF16.Size(-1)
	require.ErrorIs(t, err, ErrRange)
	_, err = Invalid.Size(1)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = DType(200).Size(1)
	require.ErrorIs(t, err, ErrInvalid)
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "dtype", fe.Field)
}

func TestDTypeBits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    DType
		want float64
	}{
		{FP32, 32}, {BF16, 16}, {NF4, 4}, {Q4_K, 4.5}, {Q6_K, 6.5625}, {IQ2_XXS, 2.0625}, {MXFP4, 4.25}, {FP6E3M2, 6}, {Invalid, 0},
	}
	for _, tc := range tests {
		if got := tc.d.Bits(); got != tc.want {
			t.Errorf("%v.Bits() = %v, want %v", tc.d, got, tc.want)
		}
	}
	assert.True(t, Q4_K.IsQuantized())
	assert.True(t, NF4.IsQuantized())
	assert.False(t, BF16.IsQuantized())
	assert.True(t, BF16.IsFloat())
	assert.False(t, INT8.IsFloat())
}

func TestParseDType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want DType
	}{
		// torch names.
		{"torch.bfloat16", BF16}, {"torch.float16", FP16}, {"torch.half", FP16}, {"torch.float32", FP32},
		{"torch.float", FP32}, {"torch.float64", FP64}, {"torch.double", FP64}, {"torch.int8", INT8},
		{"torch.uint8", UINT8}, {"torch.bool", BOOL}, {"torch.int64", INT64}, {"torch.long", INT64},
		{"torch.float8_e4m3fn", FP8E4M3}, {"torch.float8_e5m2", FP8E5M2}, {"torch.float8_e4m3fnuz", FP8E4M3FNUZ},
		{"torch.float8_e8m0fnu", FP8E8M0},
		// Hugging Face config values.
		{"bfloat16", BF16}, {"float16", FP16}, {"float32", FP32},
		// safetensors.
		{"BF16", BF16}, {"F16", FP16}, {"F32", FP32}, {"F64", FP64}, {"I8", INT8}, {"U8", UINT8}, {"I16", INT16},
		{"U16", UINT16}, {"I32", INT32}, {"U32", UINT32}, {"I64", INT64}, {"U64", UINT64}, {"BOOL", BOOL},
		{"F8_E4M3", FP8E4M3}, {"F8_E5M2", FP8E5M2}, {"F8_E8M0", FP8E8M0}, {"F8_E4M3FNUZ", FP8E4M3FNUZ},
		{"F8_E5M2FNUZ", FP8E5M2FNUZ}, {"F6_E2M3", FP6E2M3}, {"F6_E3M2", FP6E3M2}, {"F4", FP4}, {"C64", C64},
		// GGUF names.
		{"Q4_K", Q4_K}, {"q4_k", Q4_K}, {"IQ2_XXS", IQ2_XXS}, {"TQ1_0", TQ1_0}, {"MXFP4", MXFP4},
		// Short forms.
		{"bf16", BF16}, {"fp16", FP16}, {"fp32", FP32}, {"tf32", TF32}, {"fp8", FP8E4M3}, {"int8", INT8},
		{"int4", INT4}, {"nf4", NF4}, {"fp4", FP4}, {" BF16 ", BF16},
	}
	for _, tc := range tests {
		got, err := ParseDType(tc.in)
		require.NoError(t, err, tc.in)
		if got != tc.want {
			t.Errorf("ParseDType(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	// Every canonical name reads back.
	for d := DType(1); d < numDTypes; d++ {
		got, err := ParseDType(d.String())
		require.NoError(t, err, d.String())
		assert.Equal(t, d, got, d.String())
		text, err := d.MarshalText()
		require.NoError(t, err)
		var u DType
		require.NoError(t, u.UnmarshalText(text))
		assert.Equal(t, d, u)
	}
}

func TestParseDTypeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		kind error
	}{
		{"", ErrSyntax}, {"torch.", ErrSyntax}, {"float128", ErrSyntax}, {"invalid", ErrSyntax}, {"Q4_K_M", ErrSyntax},
		{"auto", ErrUnsupported},
	}
	for _, tc := range tests {
		_, err := ParseDType(tc.in)
		if !errors.Is(err, tc.kind) {
			t.Errorf("ParseDType(%q) error = %v, want %v", tc.in, err, tc.kind)
		}
		var pe *ParseError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, tc.in, pe.Input)
	}
	_, err := DTypeFromGGUF(4) // Q4_2, removed from ggml
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = DTypeFromGGUF(1000)
	require.ErrorIs(t, err, ErrUnsupported)
	text, err := Invalid.MarshalText()
	require.NoError(t, err, "the unset dtype marshals as empty text")
	assert.Empty(t, text)
	d := BF16
	require.NoError(t, d.UnmarshalText(nil))
	assert.Equal(t, Invalid, d)
	_, err = DType(200).MarshalText()
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, "DType(200)", DType(200).String())
}

func TestTensor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		t     Tensor
		elems int64
		bytes Bytes
	}{
		{"scalar", Tensor{Name: "step", DType: FP32}, 1, 4},
		{"embedding", Tensor{Name: "model.embed_tokens.weight", Shape: []int64{32000, 4096}, DType: BF16}, 131_072_000, 262_144_000},
		{"zero dim", Tensor{Shape: []int64{0, 1 << 40, 1 << 40}, DType: FP32}, 0, 0},
		{"gguf rows", Tensor{Shape: []int64{4096, 4096}, DType: Q4_K}, 4096 * 4096, 4096 * 16 * 144},
		{"nf4 flattened odd", Tensor{Shape: []int64{3, 3}, DType: NF4}, 9, 5},
	}
	for _, tc := range tests {
		n, err := tc.t.Elems()
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.elems, n, tc.name)
		b, err := tc.t.Bytes()
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.bytes, b, tc.name)
	}
}

func TestTensorErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		t     Tensor
		kind  error
		field string
	}{
		{Tensor{Name: "w", Shape: []int64{4, -1}, DType: FP32}, ErrInvalid, "Tensor(w).Shape[1]"},
		{Tensor{Name: "w", Shape: []int64{1 << 40, 1 << 40}, DType: FP32}, ErrRange, "Tensor(w).Shape"},
		{Tensor{Name: "w", Shape: []int64{1 << 31, 1 << 31}, DType: FP64}, ErrRange, "Tensor(w).Shape"},
		{Tensor{Name: "w", Shape: []int64{4}}, ErrInvalid, "Tensor(w).DType"},
		{Tensor{Name: "w", Shape: []int64{2, 100}, DType: Q4_K}, ErrInvalid, "Tensor(w).Shape[1]"},
		{Tensor{Shape: []int64{-3}, DType: BF16}, ErrInvalid, "Tensor.Shape[0]"},
	}
	for _, tc := range tests {
		_, err := tc.t.Bytes()
		require.ErrorIs(t, err, tc.kind, "%+v", tc.t)
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, tc.field, fe.Field)
	}
}

func TestBlockwise(t *testing.T) {
	t.Parallel()
	// A 4096×4096 NF4 weight: 262144 blocks of 64.
	n := int64(4096 * 4096)
	tests := []struct {
		q    Blockwise
		n    int64
		want Bytes
	}{
		{Blockwise{}, n, 262144*4 + 64},                                // fp32 absmax per block + 16-entry code
		{Blockwise{Nested: true}, n, 262144*1 + 262144/256*4 + 4 + 64}, // uint8 absmax + fp32 per 256 blocks + offset + code
		{Blockwise{Block: 128}, n, 131072*4 + 64},                      // larger blocks
		{Blockwise{}, 65, 2*4 + 64},                                    // a partial block has its own absmax
		{Blockwise{Nested: true}, 1, 1 + 4 + 4 + 64},
	}
	for _, tc := range tests {
		got, err := tc.q.Constants(tc.n)
		require.NoError(t, err)
		if got != tc.want {
			t.Errorf("%+v.Constants(%d) = %d, want %d", tc.q, tc.n, got, tc.want)
		}
	}
	// QLoRA paper, §2: double quantization costs 8/64 + 32/(64·256) bits
	// per parameter instead of 32/64 = 0.5; the per-tensor terms vanish at
	// this size.
	big := int64(1) << 34
	single, err := Blockwise{}.Constants(big)
	require.NoError(t, err)
	double, err := Blockwise{Nested: true}.Constants(big)
	require.NoError(t, err)
	assert.InEpsilon(t, 0.5, float64(single)*8/float64(big), 1e-6)
	assert.InEpsilon(t, 8.0/64+32.0/(64*256), float64(double)*8/float64(big), 1e-6)

	for _, bad := range []int64{32, 100, 8192, -64} {
		_, err := Blockwise{Block: bad}.Constants(n)
		require.ErrorIs(t, err, ErrInvalid, "block %d", bad)
	}
	_, err = Blockwise{}.Constants(-1)
	require.ErrorIs(t, err, ErrRange)
}

func TestErrorf(t *testing.T) {
	t.Parallel()
	err := Errorf("Job.Batch", -1, ErrInvalid, "must be positive")
	assert.Equal(t, "Job.Batch = -1: invalid value: must be positive", err.Error())
	require.ErrorIs(t, err, ErrInvalid)
	plain := Errorf("Job.SeqLen", 0, ErrInvalid, "")
	assert.Equal(t, "Job.SeqLen = 0: invalid value", plain.Error())
}

func BenchmarkDTypeSize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Q4_K.Size(4096 * 14336); err != nil {
			b.Fatal(err)
		}
	}
}
