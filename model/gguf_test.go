package model

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"runtime"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ggufKV is one metadata pair for the test writer: val is uint32, uint64,
// int32, float32, bool, string, []string, []int32, []float32 or
// [][]uint32.
type ggufKV struct {
	key string
	val any
}

type ggufTensor struct {
	name  string
	ne    []uint64 // ggml order, ne[0] innermost
	typ   uint32
	bytes int64
}

// writeGGUF writes a GGUF v3 file as gguf.md lays it out, with the data
// section zero-filled.
func writeGGUF(t testing.TB, kvs []ggufKV, tensors []ggufTensor, alignment int64) []byte {
	t.Helper()
	b, data := writeGGUFHeader(t, kvs, tensors, alignment)
	return append(b, make([]byte, data)...)
}

// writeGGUFHeader writes a GGUF v3 header padded to the alignment, and
// returns it with the size of the tensor data that should follow it.
func writeGGUFHeader(t testing.TB, kvs []ggufKV, tensors []ggufTensor, alignment int64) ([]byte, int64) {
	t.Helper()
	var b []byte
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	u32(ggufMagic)
	u32(3)
	u64(uint64(len(tensors)))
	u64(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.key)
		switch v := kv.val.(type) {
		case uint32:
			u32(ggufU32)
			u32(v)
		case uint64:
			u32(ggufU64)
			u64(v)
		case int32:
			u32(ggufI32)
			u32(uint32(v))
		case float32:
			u32(ggufF32)
			u32(math.Float32bits(v))
		case bool:
			u32(ggufBool)
			if v {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		case string:
			u32(ggufString)
			str(v)
		case []string:
			u32(ggufArray)
			u32(ggufString)
			u64(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []int32:
			u32(ggufArray)
			u32(ggufI32)
			u64(uint64(len(v)))
			for _, x := range v {
				u32(uint32(x))
			}
		case []float32:
			u32(ggufArray)
			u32(ggufF32)
			u64(uint64(len(v)))
			for _, f := range v {
				u32(math.Float32bits(f))
			}
		case [][]uint32:
			u32(ggufArray)
			u32(ggufArray)
			u64(uint64(len(v)))
			for _, inner := range v {
				u32(ggufU32)
				u64(uint64(len(inner)))
				for _, x := range inner {
					u32(x)
				}
			}
		default:
			t.Fatalf("writeGGUF: unsupported value %T", v)
		}
	}
	var off int64
	for _, tn := range tensors {
		str(tn.name)
		u32(uint32(len(tn.ne)))
		for _, ne := range tn.ne {
			u64(ne)
		}
		u32(tn.typ)
		u64(uint64(off))
		off += (tn.bytes + alignment - 1) / alignment * alignment
	}
	for int64(len(b))%alignment != 0 {
		b = append(b, 0)
	}
	return b, off
}

func tinyGGUF(t testing.TB) []byte {
	// A 1-layer llama-style model with hidden 256 and vocabulary 100:
	// quantized blocks need rows of 256 (K-quants) or 32 (Q4_0, Q8_0)
	// elements. Bytes per tensor from the block sizes of ggml-common.h:
	// Q4_K 144 B/256, Q4_0 18 B/32, Q6_K 210 B/256, Q8_0 34 B/32.
	return writeGGUF(t, []ggufKV{
		{"general.architecture", "llama"},
		{"general.name", "tiny"},
		{"llama.block_count", uint32(1)},
		{"llama.context_length", uint32(4096)},
		{"llama.embedding_length", uint32(256)},
		{"llama.feed_forward_length", uint32(512)},
		{"llama.attention.head_count", uint32(8)},
		{"llama.attention.head_count_kv", uint32(2)},
		{"llama.rope.freq_base", float32(10000)},
		{"tokenizer.ggml.tokens", []string{"<s>", "</s>", "hello", "world"}},
		{"tokenizer.ggml.scores", []float32{0, 0, -1, -2}},
		{"tokenizer.ggml.add_bos_token", true},
		{"test.nested", [][]uint32{{1, 2}, {3}}},
		{"general.file_type", uint32(15)},
	}, []ggufTensor{
		{"token_embd.weight", []uint64{256, 100}, 12, 100 * 144},     // Q4_K
		{"blk.0.attn_norm.weight", []uint64{256}, 0, 256 * 4},        // F32
		{"blk.0.attn_q.weight", []uint64{256, 256}, 2, 256 * 8 * 18}, // Q4_0
		{"blk.0.attn_k.weight", []uint64{256, 64}, 2, 64 * 8 * 18},
		{"blk.0.attn_v.weight", []uint64{256, 64}, 8, 64 * 8 * 34}, // Q8_0
		{"blk.0.attn_output.weight", []uint64{256, 256}, 2, 256 * 8 * 18},
		{"blk.0.ffn_norm.weight", []uint64{256}, 0, 256 * 4},
		{"blk.0.ffn_gate.weight", []uint64{256, 512}, 12, 512 * 144},
		{"blk.0.ffn_up.weight", []uint64{256, 512}, 12, 512 * 144},
		{"blk.0.ffn_down.weight", []uint64{512, 256}, 14, 256 * 2 * 210}, // Q6_K
		{"output_norm.weight", []uint64{256}, 0, 256 * 4},
		{"output.weight", []uint64{256, 100}, 14, 100 * 210},
		{"rope_freqs.weight", []uint64{16}, 1, 32}, // F16
	}, 32)
}

func TestFromGGUF(t *testing.T) {
	t.Parallel()
	data := tinyGGUF(t)
	s, err := FromGGUF(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	assert.Equal(t, "llama", s.Family)
	assert.Equal(t, "tiny", s.Name)
	assert.Equal(t, int64(1), s.Layers)
	assert.Equal(t, int64(256), s.Hidden)
	assert.Equal(t, int64(512), s.Intermediate)
	assert.Equal(t, int64(8), s.Heads)
	assert.Equal(t, int64(2), s.KVHeads)
	assert.Equal(t, int64(32), s.HeadDim)
	assert.Equal(t, int64(100), s.Vocab)
	assert.Equal(t, int64(4096), s.MaxPositions)
	assert.False(t, s.TiedEmbeddings)
	require.Len(t, s.Inventory, 13)
	// ggml ne order reversed to row-major.
	assert.Equal(t, gpumem.Tensor{Name: "token_embd.weight", Shape: []int64{100, 256}, DType: gpumem.Q4_K}, s.Inventory[0])
	assert.Equal(t, []int64{256, 512}, s.Inventory[9].Shape)
	assert.Equal(t, gpumem.Q6_K, s.Inventory[9].DType)
	m, err := s.BytesByDType()
	require.NoError(t, err)
	assert.Equal(t, map[gpumem.DType]gpumem.Bytes{
		gpumem.Q4_K: 100*144 + 2*512*144,
		gpumem.FP32: 3 * 1024,
		gpumem.Q4_0: (256 + 64 + 256) * 8 * 18,
		gpumem.Q8_0: 64 * 8 * 34,
		gpumem.Q6_K: 256*2*210 + 100*210,
		gpumem.FP16: 32,
	}, m)
	assert.Equal(t, int64(100*256*2+3*256+256*256*2+64*256*2+3*256*512+16), s.Params())
}

// TestFromGGUFVersion2: GGUF v2 has v3's layout (v3 only added
// big-endian files); v1's 32-bit counts are refused.
func TestFromGGUFVersion2(t *testing.T) {
	t.Parallel()
	data := tinyGGUF(t)
	binary.LittleEndian.PutUint32(data[4:], 2)
	s, err := FromGGUF(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	assert.Len(t, s.Inventory, 13)
}

// TestFromGGUFReferenceCase is docs/reference.md#gguf-header's worked file: F16
// [8,4] (ggml order) → 64 bytes, Q4_0 [64,2] → 72 bytes.
func TestFromGGUFReferenceCase(t *testing.T) {
	t.Parallel()
	data := writeGGUF(t, []ggufKV{{"general.architecture", "llama"}}, []ggufTensor{
		{"a", []uint64{8, 4}, 1, 64}, {"b", []uint64{64, 2}, 2, 72},
	}, 32)
	s, err := FromGGUF(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	m, err := s.BytesByDType()
	require.NoError(t, err)
	assert.Equal(t, map[gpumem.DType]gpumem.Bytes{gpumem.FP16: 64, gpumem.Q4_0: 72}, m)
	assert.Equal(t, []int64{4, 8}, s.Inventory[0].Shape)
	assert.Equal(t, []int64{2, 64}, s.Inventory[1].Shape)
}

func TestFromGGUFAlignmentAndMoE(t *testing.T) {
	t.Parallel()
	data := writeGGUF(t, []ggufKV{
		{"general.architecture", "qwen3moe"},
		{"general.alignment", uint32(64)},
		{"qwen3moe.block_count", uint32(1)},
		{"qwen3moe.expert_count", uint32(4)},
		{"qwen3moe.expert_used_count", uint32(2)},
	}, []ggufTensor{
		{"blk.0.ffn_up_exps.weight", []uint64{64, 32, 4}, 8, 4 * 32 * 2 * 34}, // Q8_0 [4, 32, 64]
		{"blk.0.ffn_gate_inp.weight", []uint64{64, 4}, 0, 4 * 64 * 4},
		{"odd.weight", []uint64{3}, 0, 12}, // padded to 64 before the next
		{"last.weight", []uint64{5}, 0, 20},
	}, 64)
	s, err := FromGGUF(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	assert.Equal(t, int64(4), s.MoE.Experts)
	assert.Equal(t, int64(2), s.MoE.Active)
	assert.Equal(t, []int64{4, 32, 64}, s.Inventory[0].Shape)
	g, err := s.Groups()
	require.NoError(t, err)
	assert.Equal(t, int64(4*32*64), g[0].Experts)
}

func TestFromGGUFTruncated(t *testing.T) {
	t.Parallel()
	data := tinyGGUF(t)
	for n := 0; n < len(data); n += 1 + n/64 {
		_, err := FromGGUF(bytes.NewReader(data[:n]), int64(n))
		require.Error(t, err, "FromGGUF(first %d of %d bytes)", n, len(data))
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
	}
}

func TestFromGGUFErrors(t *testing.T) {
	t.Parallel()
	head := func(version uint32, nt, nkv uint64) []byte {
		b := binary.LittleEndian.AppendUint32(nil, ggufMagic)
		b = binary.LittleEndian.AppendUint32(b, version)
		b = binary.LittleEndian.AppendUint64(b, nt)
		return binary.LittleEndian.AppendUint64(b, nkv)
	}
	pad := func(b []byte, n int) []byte { return append(b, make([]byte, n)...) }
	one := func(tn ggufTensor) []byte { return writeGGUF(t, nil, []ggufTensor{tn}, 32) }
	tests := []struct {
		name  string
		file  []byte
		field string
		kind  error
	}{
		{"empty", nil, "gguf.magic", gpumem.ErrSyntax},
		{"bad magic", []byte("GGML\x03\x00\x00\x00"), "gguf.magic", gpumem.ErrSyntax},
		{"version 1", pad(head(1, 0, 0), 0), "gguf.version", gpumem.ErrUnsupported},
		{"kv count 2^63", pad(head(3, 0, 1<<63), 64), "gguf.metadata_kv_count", gpumem.ErrRange},
		{"tensor count 2^64-1", pad(head(3, math.MaxUint64, 0), 64), "gguf.tensor_count", gpumem.ErrRange},
		{"key length past end", pad(append(head(3, 0, 1), binary.LittleEndian.AppendUint64(nil, 1000)...), 16), "gguf.metadata[0].key", gpumem.ErrSyntax},
		{"array count past end", writeGGUFRaw(t, "a", ggufArray, append(binary.LittleEndian.AppendUint32(nil, ggufU32), binary.LittleEndian.AppendUint64(nil, 1<<20)...)), `gguf.metadata["a"]`, gpumem.ErrSyntax},
		{"string array count past end", writeGGUFRaw(t, "a", ggufArray, append(binary.LittleEndian.AppendUint32(nil, ggufString), binary.LittleEndian.AppendUint64(nil, 1<<20)...)), `gguf.metadata["a"]`, gpumem.ErrSyntax},
		{"unknown value type", writeGGUFRaw(t, "a", 99, nil), `gguf.metadata["a"]`, gpumem.ErrInvalid},
		{"bad alignment", writeGGUF(t, []ggufKV{{"general.alignment", uint32(3)}}, nil, 32), `gguf.metadata["general.alignment"]`, gpumem.ErrInvalid},
		{"five dims", one(ggufTensor{"a", []uint64{1, 1, 1, 1, 1}, 0, 4}), `gguf.tensor["a"].n_dimensions`, gpumem.ErrInvalid},
		{"removed type 4", one(ggufTensor{"a", []uint64{32}, 4, 18}), `gguf.tensor["a"].type`, gpumem.ErrUnsupported},
		{"dimension above int64", one(ggufTensor{"a", []uint64{1 << 63}, 0, 4}), `gguf.tensor["a"].dimensions`, gpumem.ErrRange},
		{"overflowing product", one(ggufTensor{"a", []uint64{1 << 40, 1 << 40}, 0, 4}), `gguf.tensor["a"].dimensions`, gpumem.ErrInvalid},
		{"row not whole blocks", one(ggufTensor{"a", []uint64{100}, 12, 144}), `gguf.tensor["a"].dimensions`, gpumem.ErrInvalid},
		{"data past end", one(ggufTensor{"a", []uint64{1 << 20}, 0, 0}), `gguf.tensor["a"].offset`, gpumem.ErrSyntax},
		{"duplicate", writeGGUF(t, nil, []ggufTensor{{"a", []uint64{8}, 0, 32}, {"a", []uint64{8}, 0, 32}}, 32), `gguf.tensor["a"]`, gpumem.ErrInvalid},
		{"long name", one(ggufTensor{string(make([]byte, 65)), []uint64{8}, 0, 32}), "gguf.tensor[0].name", gpumem.ErrInvalid},
		{"name of GGML_MAX_NAME bytes", one(ggufTensor{string(bytes.Repeat([]byte("a"), 64)), []uint64{8}, 0, 32}), "gguf.tensor[0].name", gpumem.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromGGUF(bytes.NewReader(tc.file), int64(len(tc.file)))
			require.ErrorIs(t, err, tc.kind)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field, "%v", err)
		})
	}
	t.Run("misaligned and out-of-order offsets", func(t *testing.T) {
		t.Parallel()
		data := writeGGUF(t, nil, []ggufTensor{{"a", []uint64{8}, 0, 32}, {"b", []uint64{8}, 0, 32}}, 32)
		// The second tensor's offset is the last 8 bytes before padding
		// of the info section; find it by its value 32.
		i := bytes.LastIndex(data, binary.LittleEndian.AppendUint64(nil, 32))
		require.Positive(t, i)
		bad := bytes.Clone(data)
		binary.LittleEndian.PutUint64(bad[i:], 16)
		_, err := FromGGUF(bytes.NewReader(bad), int64(len(bad)))
		require.ErrorIs(t, err, gpumem.ErrInvalid)
		binary.LittleEndian.PutUint64(bad[i:], 64)
		_, err = FromGGUF(bytes.NewReader(bad), int64(len(bad)))
		require.ErrorIs(t, err, gpumem.ErrInvalid)
	})
}

// writeGGUFRaw writes a header with one KV of type typ and raw payload.
func writeGGUFRaw(t testing.TB, key string, typ uint32, payload []byte) []byte {
	t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, ggufMagic)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.LittleEndian.AppendUint32(b, typ)
	return append(b, payload...)
}

func FuzzGGUF(f *testing.F) {
	f.Add(tinyGGUF(f))
	f.Add(writeGGUF(f, []ggufKV{{"general.alignment", uint32(64)}}, []ggufTensor{{"a", []uint64{8}, 0, 32}}, 64))
	f.Add(writeGGUFRaw(f, "a", ggufArray, append(binary.LittleEndian.AppendUint32(nil, ggufArray), binary.LittleEndian.AppendUint64(nil, 3)...)))
	for _, seed := range ggufCraftedSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkGGUF(t, bytes.NewReader(data), int64(len(data)))
	})
}

// ggufCraftedSeeds are headers claiming far more than they hold: huge
// key, name, string and array lengths, tensor and pair counts, n_dims.
func ggufCraftedSeeds() [][]byte {
	kv := func(typ uint32, payload ...[]byte) []byte {
		return cat(ggufHead(0, 1), le64(1), []byte("a"), le32(typ), cat(payload...), make([]byte, 16))
	}
	return [][]byte{
		cat(ggufHead(0, 1), le64(1<<40), make([]byte, 32)),                                // key length 2^40
		cat(ggufHead(0, 1), le64(40), make([]byte, 40)),                                   // key length of the file size
		cat(ggufHead(1, 0), le64(1<<40), make([]byte, 32)),                                // name length 2^40
		cat(ggufHead(1, 0), le64(100), make([]byte, 100)),                                 // name of 100 bytes
		cat(ggufHead(1<<20, 0), make([]byte, 64)),                                         // tensor_count 2^20
		cat(ggufHead(math.MaxUint64, math.MaxUint64), make([]byte, 64)),                   // both counts 2^64-1
		cat(ggufHead(0, 65537), make([]byte, 64)),                                         // metadata_kv_count above the limit
		kv(ggufString, le64(1<<40)),                                                       // string length 2^40
		kv(ggufArray, le32(ggufU8), le64(1<<24+1)),                                        // array above the limit
		kv(ggufArray, le32(ggufString), le64(1<<40)),                                      // string array 2^40
		cat(ggufHead(1, 0), le64(1), []byte("w"), le32(math.MaxUint32), make([]byte, 32)), // n_dims 2^32-1
	}
}

// checkGGUF reads a file and checks FromGGUF's invariants: an error is
// a *FieldError naming a field; a Spec has unique names of at most 64
// bytes, at most 4 dimensions each, none negative, and tensor data
// within the file.
func checkGGUF(t *testing.T, r io.ReaderAt, size int64) {
	s, err := FromGGUF(r, size)
	if err != nil {
		requireFieldError(t, err)
		return
	}
	seen := map[string]bool{}
	for _, tn := range s.Inventory {
		if seen[tn.Name] || len(tn.Name) >= ggufMaxName || len(tn.Shape) > ggufMaxDims {
			t.Fatalf("accepted tensor %q (duplicate %v) of shape %v", tn.Name, seen[tn.Name], tn.Shape)
		}
		seen[tn.Name] = true
		for _, d := range tn.Shape {
			if d < 0 {
				t.Fatalf("accepted negative dimension in %v", tn)
			}
		}
	}
	if int64(len(s.Inventory)) > size/24 {
		t.Fatalf("%d tensors in a %d-byte file", len(s.Inventory), size)
	}
	b, err := s.WeightsBytes()
	if err != nil {
		t.Fatalf("WeightsBytes of an accepted file: %v", err)
	}
	if int64(b) > size {
		t.Fatalf("inventory of %d bytes in a %d-byte file", b, size)
	}
}

// sparseFile is a virtual file of size bytes, zero except for parts, so
// that a header claiming gigabytes can be read without allocating them.
type sparseFile struct {
	size  int64
	parts []sparsePart
}

type sparsePart struct {
	off int64
	b   []byte
}

func (f sparseFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= f.size {
		return 0, io.EOF
	}
	n := len(p)
	if int64(n) > f.size-off {
		n = int(f.size - off)
	}
	clear(p[:n])
	for _, part := range f.parts {
		lo, hi := max(part.off, off), min(part.off+int64(len(part.b)), off+int64(n))
		if lo < hi {
			copy(p[lo-off:hi-off], part.b[lo-part.off:hi-part.off])
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// ggufHead is a GGUF v3 header with the given counts.
func ggufHead(nt, nkv uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, ggufMagic)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, nt)
	return binary.LittleEndian.AppendUint64(b, nkv)
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestFromGGUFLimits: every length is checked against its documented
// bound before anything is allocated or skipped, and the error names the
// field and the claimed value.
func TestFromGGUFLimits(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	// A KV "a" of type typ whose payload starts at byte 24+8+1+4 = 37.
	kv := func(typ uint32, payload ...[]byte) []byte {
		return cat(ggufHead(0, 1), le64(1), []byte("a"), le32(typ), cat(payload...))
	}
	tests := []struct {
		name  string
		file  io.ReaderAt
		size  int64
		field string
		kind  error
		value any
	}{
		{"key length 2^40", bytes.NewReader(cat(ggufHead(0, 1), le64(1<<40), make([]byte, 32))), 64,
			"gguf.metadata[0].key", gpumem.ErrRange, uint64(1 << 40)},
		{"key length of the file size", sparseFile{size: 4 * mib, parts: []sparsePart{{0, cat(ggufHead(0, 1), le64(4*mib-32))}}}, 4 * mib,
			"gguf.metadata[0].key", gpumem.ErrRange, uint64(4*mib - 32)},
		{"key length 2^40 in a 2 TiB file", sparseFile{size: 2 << 40, parts: []sparsePart{{0, cat(ggufHead(0, 1), le64(1<<40))}}}, 2 << 40,
			"gguf.metadata[0].key", gpumem.ErrRange, uint64(1 << 40)},
		{"string length 2^40", bytes.NewReader(kv(ggufString, le64(1<<40))), 45,
			`gguf.metadata["a"]`, gpumem.ErrRange, uint64(1 << 40)},
		{"string of 65 MiB", sparseFile{size: 128 * mib, parts: []sparsePart{{0, kv(ggufString, le64(65*mib))}}}, 128 * mib,
			`gguf.metadata["a"]`, gpumem.ErrRange, uint64(65 * mib)},
		{"u8 array of 2^24+1", sparseFile{size: 32 * mib, parts: []sparsePart{{0, kv(ggufArray, le32(ggufU8), le64(1<<24+1))}}}, 32 * mib,
			`gguf.metadata["a"]`, gpumem.ErrRange, uint64(1<<24 + 1)},
		{"string array of 2^24+1", sparseFile{size: 256 * mib, parts: []sparsePart{{0, kv(ggufArray, le32(ggufString), le64(1<<24+1))}}}, 256 * mib,
			`gguf.metadata["a"]`, gpumem.ErrRange, uint64(1<<24 + 1)},
		{"string array of 2^40", bytes.NewReader(kv(ggufArray, le32(ggufString), le64(1<<40))), 49,
			`gguf.metadata["a"]`, gpumem.ErrRange, uint64(1 << 40)},
		{"65537 pairs", sparseFile{size: 2 * mib, parts: []sparsePart{{0, ggufHead(0, 65537)}}}, 2 * mib,
			"gguf.metadata_kv_count", gpumem.ErrRange, uint64(65537)},
		{"metadata above 256 MiB", fiveStrings(60 * mib), 1 << 30, `gguf.metadata["e"]`, gpumem.ErrRange, uint64(60 * mib)},
		{"tensor name length 2^40", bytes.NewReader(cat(ggufHead(1, 0), le64(1<<40), make([]byte, 32))), 56,
			"gguf.tensor[0].name", gpumem.ErrInvalid, uint64(1 << 40)},
		{"tensor name length of the file size", sparseFile{size: 4 * mib, parts: []sparsePart{{0, cat(ggufHead(1, 0), le64(4*mib-32))}}}, 4 * mib,
			"gguf.tensor[0].name", gpumem.ErrInvalid, uint64(4*mib - 32)},
		{"n_dims 2^32-1", bytes.NewReader(cat(ggufHead(1, 0), le64(1), []byte("w"), le32(math.MaxUint32), make([]byte, 32))), 69,
			`gguf.tensor["w"].n_dimensions`, gpumem.ErrInvalid, uint32(math.MaxUint32)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromGGUF(tc.file, tc.size)
			t.Log(err)
			require.ErrorIs(t, err, tc.kind)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field, "%v", err)
			assert.Equal(t, tc.value, fe.Value, "%v", err)
		})
	}
}

// fiveStrings is a 1 GiB file whose metadata are five strings "a" to "e"
// of n bytes each.
func fiveStrings(n uint64) sparseFile {
	f := sparseFile{size: 1 << 30, parts: []sparsePart{{0, ggufHead(0, 5)}}}
	for i, key := range "abcde" {
		f.parts = append(f.parts, sparsePart{24 + int64(i)*(21+int64(n)), cat(le64(1), []byte{byte(key)}, le32(ggufString), le64(n))})
	}
	return f
}

// heapBytes returns the bytes allocated while f runs. Callers must not
// be parallel tests, so that nothing else allocates meanwhile.
func heapBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestFromGGUFAllocation: a header claiming a huge name, key or tensor
// count costs what its real bytes cost, not what it claims. (Not
// parallel: it measures the process's allocations.)
func TestFromGGUFAllocation(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name string
		file sparseFile
	}{
		{"key of 8 MiB", sparseFile{size: 16 * mib, parts: []sparsePart{{0, cat(ggufHead(0, 1), le64(8*mib))}}}},
		{"tensor name of 8 MiB", sparseFile{size: 16 * mib, parts: []sparsePart{{0, cat(ggufHead(1, 0), le64(8*mib))}}}},
		// 2^20 tensors claimed; the second (all zeros, like the first)
		// is a duplicate of "".
		{"tensor_count 2^20", sparseFile{size: 1 << 30, parts: []sparsePart{{0, ggufHead(1<<20, 0)}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := heapBytes(func() { _, err = FromGGUF(tc.file, tc.file.size) })
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Less(t, n, uint64(1*mib), "allocated %d bytes (%v)", n, err)
		})
	}
}

func TestFromGGUFNilReader(t *testing.T) {
	t.Parallel()
	for _, size := range []int64{0, 64} {
		_, err := FromGGUF(nil, size)
		require.ErrorIs(t, err, gpumem.ErrInvalid)
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, "gguf", fe.Field)
	}
}
