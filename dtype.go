package gpumem

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/internal/checked"
)

// DType is a storage format of tensor elements: a plain number type
// (FP32, BF16, INT8, ...), a sub-byte type packed several to a byte
// (INT4, NF4, FP4), or a block format that stores a fixed number of
// elements with their scales in a fixed number of bytes (MXFP4, the GGUF
// quantizations Q4_0 ... Q8_K, IQ*, TQ*).
//
// The zero value is [Invalid]; [DType.Size] rejects it.
type DType uint8

// The storage formats. Sizes come from the formats' definitions: IEEE 754
// and the PyTorch dtypes for the plain types; the safetensors dtype list
// (huggingface/safetensors tensor.rs, bit sizes) for the FP8/FP6/FP4
// variants; the OCP Microscaling spec v1.0 for MXFP4 (32 FP4 values + one
// E8M0 scale); and ggml's src/ggml-common.h (static_assert'ed block
// structs, docs/reference.md#gguf-header) for every GGUF block format.
const (
	Invalid DType = iota

	BOOL   // 1 byte per element (torch.bool, safetensors BOOL)
	UINT8  // 1 byte
	INT8   // 1 byte
	INT16  // 2 bytes
	UINT16 // 2 bytes
	INT32  // 4 bytes
	UINT32 // 4 bytes
	INT64  // 8 bytes
	UINT64 // 8 bytes

	FP64 // 8 bytes
	FP32 // 4 bytes
	// TF32 is NVIDIA's TensorFloat-32 math mode. Its values are stored as
	// FP32, 4 bytes: the mode saves time, not memory.
	TF32
	FP16        // 2 bytes, IEEE half
	BF16        // 2 bytes, bfloat16
	FP8E4M3     // 1 byte, OCP E4M3 (torch.float8_e4m3fn)
	FP8E5M2     // 1 byte, OCP E5M2 (torch.float8_e5m2)
	FP8E4M3FNUZ // 1 byte, AMD's E4M3 variant (torch.float8_e4m3fnuz)
	FP8E5M2FNUZ // 1 byte, AMD's E5M2 variant (torch.float8_e5m2fnuz)
	FP8E8M0     // 1 byte, power-of-two scale (torch.float8_e8m0fnu), MX scales
	FP6E2M3     // 6 bits, packed: 4 elements in 3 bytes
	FP6E3M2     // 6 bits, packed: 4 elements in 3 bytes
	C64         // 8 bytes, complex64
	// FP4 is 4-bit E2M1 floating point, two elements per byte. It is also
	// the storage of bitsandbytes' "fp4" quant type; the per-block absmax
	// constants are accounted separately by [Blockwise].
	FP4
	// NF4 is bitsandbytes' 4-bit NormalFloat (QLoRA), two elements per
	// byte. The per-block absmax constants are accounted separately by
	// [Blockwise].
	NF4
	// INT4 is a 4-bit integer, two elements per byte, as GPTQ and AWQ pack
	// them (eight to an int32). Group scales and zeros are separate tensors.
	INT4

	MXFP4 // OCP MX: 32 FP4 (E2M1) values + 1 E8M0 scale = 17 bytes; GGUF type 39
	NVFP4 // GGUF type 40: 64 FP4 values + 4 FP8 sub-block scales = 36 bytes

	// GGUF block formats (ggml type ids in [DType.GGUFType]).
	Q4_0    // 32 elements in 18 bytes
	Q4_1    // 32 in 20
	Q5_0    // 32 in 22
	Q5_1    // 32 in 24
	Q8_0    // 32 in 34
	Q8_1    // 32 in 36
	Q2_K    // 256 in 84
	Q3_K    // 256 in 110
	Q4_K    // 256 in 144
	Q5_K    // 256 in 176
	Q6_K    // 256 in 210
	Q8_K    // 256 in 292
	IQ2_XXS // 256 in 66
	IQ2_XS  // 256 in 74
	IQ2_S   // 256 in 82
	IQ3_XXS // 256 in 98
	IQ3_S   // 256 in 110
	IQ1_S   // 256 in 50
	IQ1_M   // 256 in 56
	IQ4_NL  // 32 in 18
	IQ4_XS  // 256 in 136
	TQ1_0   // 256 in 54
	TQ2_0   // 256 in 66
	Q1_0    // 128 in 18
	Q2_0    // 64 in 18

	numDTypes
)

// dtypeInfo describes the storage of one DType: blockElems elements take
// blockBytes bytes. For plain types blockElems is 1; for packed sub-byte
// types it is the smallest whole-byte group.
type dtypeInfo struct {
	name       string
	blockElems int64
	blockBytes int64
	gguf       int16 // ggml_type id, or -1
	float      bool  // a floating-point (or quantized float) format
}

var dtypes = [numDTypes]dtypeInfo{
	Invalid: {"invalid", 0, 0, -1, false},

	BOOL:   {"bool", 1, 1, -1, false},
	UINT8:  {"uint8", 1, 1, -1, false},
	INT8:   {"int8", 1, 1, 24, false},
	INT16:  {"int16", 1, 2, 25, false},
	UINT16: {"uint16", 1, 2, -1, false},
	INT32:  {"int32", 1, 4, 26, false},
	UINT32: {"uint32", 1, 4, -1, false},
	INT64:  {"int64", 1, 8, 27, false},
	UINT64: {"uint64", 1, 8, -1, false},

	FP64:        {"fp64", 1, 8, 28, true},
	FP32:        {"fp32", 1, 4, 0, true},
	TF32:        {"tf32", 1, 4, -1, true},
	FP16:        {"fp16", 1, 2, 1, true},
	BF16:        {"bf16", 1, 2, 30, true},
	FP8E4M3:     {"fp8_e4m3", 1, 1, -1, true},
	FP8E5M2:     {"fp8_e5m2", 1, 1, -1, true},
	FP8E4M3FNUZ: {"fp8_e4m3fnuz", 1, 1, -1, true},
	FP8E5M2FNUZ: {"fp8_e5m2fnuz", 1, 1, -1, true},
	FP8E8M0:     {"fp8_e8m0", 1, 1, -1, true},
	FP6E2M3:     {"fp6_e2m3", 4, 3, -1, true},
	FP6E3M2:     {"fp6_e3m2", 4, 3, -1, true},
	C64:         {"complex64", 1, 8, -1, true},
	FP4:         {"fp4", 2, 1, -1, true},
	NF4:         {"nf4", 2, 1, -1, true},
	INT4:        {"int4", 2, 1, -1, false},

	MXFP4: {"mxfp4", 32, 17, 39, true},
	NVFP4: {"nvfp4", 64, 36, 40, true},

	Q4_0:    {"Q4_0", 32, 18, 2, true},
	Q4_1:    {"Q4_1", 32, 20, 3, true},
	Q5_0:    {"Q5_0", 32, 22, 6, true},
	Q5_1:    {"Q5_1", 32, 24, 7, true},
	Q8_0:    {"Q8_0", 32, 34, 8, true},
	Q8_1:    {"Q8_1", 32, 36, 9, true},
	Q2_K:    {"Q2_K", 256, 84, 10, true},
	Q3_K:    {"Q3_K", 256, 110, 11, true},
	Q4_K:    {"Q4_K", 256, 144, 12, true},
	Q5_K:    {"Q5_K", 256, 176, 13, true},
	Q6_K:    {"Q6_K", 256, 210, 14, true},
	Q8_K:    {"Q8_K", 256, 292, 15, true},
	IQ2_XXS: {"IQ2_XXS", 256, 66, 16, true},
	IQ2_XS:  {"IQ2_XS", 256, 74, 17, true},
	IQ2_S:   {"IQ2_S", 256, 82, 22, true},
	IQ3_XXS: {"IQ3_XXS", 256, 98, 18, true},
	IQ3_S:   {"IQ3_S", 256, 110, 21, true},
	IQ1_S:   {"IQ1_S", 256, 50, 19, true},
	IQ1_M:   {"IQ1_M", 256, 56, 29, true},
	IQ4_NL:  {"IQ4_NL", 32, 18, 20, true},
	IQ4_XS:  {"IQ4_XS", 256, 136, 23, true},
	TQ1_0:   {"TQ1_0", 256, 54, 34, true},
	TQ2_0:   {"TQ2_0", 256, 66, 35, true},
	Q1_0:    {"Q1_0", 128, 18, 41, true},
	Q2_0:    {"Q2_0", 64, 18, 42, true},
}

// ggufToDType maps ggml_type ids (include/ggml.h) to DTypes; ids 4, 5,
// 31–33 and 36–38 were removed from ggml and map to Invalid.
var ggufToDType = func() (m [43]DType) {
	for d := DType(1); d < numDTypes; d++ {
		if id := dtypes[d].gguf; id >= 0 {
			m[id] = d
		}
	}
	return m
}()

// Valid reports whether d is one of the defined formats.
func (d DType) Valid() bool { return d > Invalid && d < numDTypes }

// String returns the canonical name: lower case for the plain and sub-byte
// types ("bf16", "fp8_e4m3", "nf4"), ggml's upper-case names for the GGUF
// block formats ("Q4_K", "IQ2_XXS"). [ParseDType] reads every name back.
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypes[d].name
}

// Block returns how many elements share one storage block and how many
// bytes that block takes: (1, 2) for BF16, (2, 1) for NF4, (256, 144) for
// Q4_K. It returns (0, 0) for an invalid DType.
func (d DType) Block() (elems, bytes int64) {
	if !d.Valid() {
		return 0, 0
	}
	return dtypes[d].blockElems, dtypes[d].blockBytes
}

// Bits returns the storage bits per element, block scales included: 16 for
// BF16, 4 for NF4 (whose absmax constants are stored apart), 4.5 for Q4_K.
// It returns 0 for an invalid DType.
func (d DType) Bits() float64 {
	if !d.Valid() {
		return 0
	}
	return float64(dtypes[d].blockBytes*8) / float64(dtypes[d].blockElems)
}

// IsFloat reports whether d holds floating-point values or floating-point
// quantizations (everything but the integer and boolean types).
func (d DType) IsFloat() bool { return d.Valid() && dtypes[d].float }

// IsQuantized reports whether d stores more than one element per block
// with shared scales or sub-byte packing (NF4, INT4, MXFP4, Q4_K, ...).
func (d DType) IsQuantized() bool { return d.Valid() && dtypes[d].blockElems > 1 }

// Size returns the bytes that n elements of d take, in exact integer
// arithmetic: ceil(n / blockElems) × blockBytes. For a block format a
// partial last block takes a whole block. It fails for an invalid DType,
// a negative n, or a size beyond int64.
func (d DType) Size(n int64) (Bytes, error) {
	if !d.Valid() {
		return 0, Errorf("dtype", d, ErrInvalid, "not a storage format")
	}
	if n < 0 {
		return 0, Errorf("elements", n, ErrRange, "negative count")
	}
	info := &dtypes[d]
	if info.blockElems == 1 && info.blockBytes <= 16 && n < 1<<59 {
		// One element per block (every plain format): no division, and
		// the product cannot overflow.
		return Bytes(n * info.blockBytes), nil
	}
	blocks, _ := checked.CeilDiv(n, info.blockElems)
	b, ok := checked.Mul(blocks, info.blockBytes)
	if !ok {
		return 0, Errorf("elements", n, ErrRange, "%d elements of %s overflow int64 bytes", n, d)
	}
	return Bytes(b), nil
}

// GGUFType returns the ggml_type id under which GGUF files store d, and
// false if GGUF has none.
func (d DType) GGUFType() (uint32, bool) {
	if !d.Valid() || dtypes[d].gguf < 0 {
		return 0, false
	}
	return uint32(dtypes[d].gguf), true
}

// DTypeFromGGUF returns the DType for a ggml_type id as found in a GGUF
// tensor_info. Removed and unknown ids fail with ErrUnsupported.
func DTypeFromGGUF(id uint32) (DType, error) {
	if int(id) < len(ggufToDType) && ggufToDType[id] != Invalid {
		return ggufToDType[id], nil
	}
	return Invalid, Errorf("ggml_type", id, ErrUnsupported, "unknown or removed ggml type id")
}

// dtypeAliases maps lower-cased spellings to DTypes: torch names (with
// and without the "torch." prefix), Hugging Face config values,
// safetensors dtype names and common short forms. Canonical names are
// matched separately from the table above.
var dtypeAliases = map[string]DType{
	// torch dtypes and Hugging Face config.json "dtype"/"torch_dtype".
	"float64": FP64, "double": FP64, "float": FP32, "float32": FP32,
	"float16": FP16, "half": FP16, "bfloat16": BF16,
	"float8_e4m3fn": FP8E4M3, "float8_e5m2": FP8E5M2,
	"float8_e4m3fnuz": FP8E4M3FNUZ, "float8_e5m2fnuz": FP8E5M2FNUZ,
	"float8_e8m0fnu": FP8E8M0, "complex64": C64, "cfloat": C64,
	"long": INT64, "int": INT32, "short": INT16, "uint4": INT4,
	// safetensors dtype names.
	"u8": UINT8, "i8": INT8, "i16": INT16, "u16": UINT16, "i32": INT32,
	"u32": UINT32, "i64": INT64, "u64": UINT64, "f64": FP64, "f32": FP32,
	"f16": FP16, "f8_e4m3": FP8E4M3, "f8_e5m2": FP8E5M2,
	"f8_e4m3fnuz": FP8E4M3FNUZ, "f8_e5m2fnuz": FP8E5M2FNUZ, "f8_e8m0": FP8E8M0,
	"f6_e2m3": FP6E2M3, "f6_e3m2": FP6E3M2, "f4": FP4, "c64": C64,
	// short forms.
	"fp8": FP8E4M3, "e4m3": FP8E4M3, "e5m2": FP8E5M2, "float8": FP8E4M3,
	"fp4_e2m1": FP4, "e2m1": FP4, "nf4": NF4, "mxfp4": MXFP4, "nvfp4": NVFP4,
	"i4": INT4, "tensorfloat32": TF32,
}

// ParseDType parses a data type name in any of the spellings the field
// writes, case-insensitively:
//   - torch names: "torch.bfloat16", "torch.float16", "torch.half",
//     "torch.float32", "torch.float8_e4m3fn", ...;
//   - Hugging Face config values: "bfloat16", "float16", "float32";
//   - safetensors dtypes: "BF16", "F16", "F32", "I8", "U8", "F8_E4M3", ...;
//   - GGUF names: "Q4_K", "IQ2_XXS", "MXFP4", ...;
//   - short forms: "bf16", "fp16", "fp32", "tf32", "fp8" (E4M3), "int8",
//     "int4", "nf4", "fp4", and gpumem's own [DType.String] names.
//
// "auto", the Hugging Face placeholder, is not a storage format and fails
// with ErrUnsupported. Unknown names fail with ErrSyntax. Use
// [DTypeFromGGUF] for numeric ggml type ids.
func ParseDType(s string) (DType, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	name = strings.TrimPrefix(name, "torch.")
	if name == "" {
		return Invalid, &ParseError{Func: "ParseDType", Input: s, Err: fmt.Errorf("%w: empty dtype", ErrSyntax)}
	}
	for d := DType(1); d < numDTypes; d++ {
		if strings.EqualFold(dtypes[d].name, name) {
			return d, nil
		}
	}
	if d, ok := dtypeAliases[name]; ok {
		return d, nil
	}
	if name == "auto" {
		return Invalid, &ParseError{Func: "ParseDType", Input: s, Err: fmt.Errorf("%w: \"auto\" defers the dtype to the checkpoint; give a concrete dtype", ErrUnsupported)}
	}
	return Invalid, &ParseError{Func: "ParseDType", Input: s, Err: fmt.Errorf("%w: unknown dtype", ErrSyntax)}
}

// MarshalText implements [encoding.TextMarshaler] with [DType.String].
// The zero value, Invalid, marshals as empty text (an unset optional
// dtype); other undefined values fail.
func (d DType) MarshalText() ([]byte, error) {
	if d == Invalid {
		return []byte{}, nil
	}
	if !d.Valid() {
		return nil, Errorf("dtype", uint8(d), ErrInvalid, "not a storage format")
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseDType];
// empty text is Invalid, the unset value.
func (d *DType) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*d = Invalid
		return nil
	}
	v, err := ParseDType(string(text))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
