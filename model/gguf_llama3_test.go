package model

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ggml type ids (ggml.h enum ggml_type) and block sizes
// (ggml-common.h): a Q4_K block is 144 bytes for 256 weights, Q6_K 210.
const (
	ggmlF32  = 0
	ggmlQ4_K = 12
	ggmlQ6_K = 14
)

// llama3Q4KM is a Llama-3-8B(-Instruct) Q4_K_M header as llama.cpp's
// convert_hf_to_gguf.py and llama-quantize write it, and the size of the
// tensor data that follows it.
//
// Metadata: the keys of a converted Meta-Llama-3-8B (config.json:
// 32 layers, hidden 4096, intermediate 14336, 32 heads, 8 KV heads,
// rope_theta 500000, 8192 positions, vocabulary 128,256), with the
// tokenizer's 128,256 tokens (128,000 BPE tokens and 256 special ones),
// their int32 token types and its 280,147 BPE merges; general.file_type
// 15 is LLAMA_FTYPE_MOSTLY_Q4_K_M.
//
// Tensors: 291 (token_embd, output_norm, output and 9 per block). Their
// order is llama-quantize's: llama_model_quantize_impl walks the
// loader's weights_map, sorted by weight_name_comparer
// (src/llama-model-loader.h): tensors outside blocks first, then block by
// block, by name within each. Their types are llama_tensor_get_type's
// for Q4_K_M (src/llama-quant.cpp, ggml-org/llama.cpp, read at
// 5a44f27e): Q4_K by default; output.weight Q6_K; attn_v and ffn_down
// Q6_K in the layers where use_more_bits(i, 32) holds (i < 4, i >= 28,
// or (i-4)%3 == 2: 16 of the 32) and Q4_K elsewhere; the 1-D norms stay
// F32. That is 193 Q4_K, 33 Q6_K and 65 F32 tensors, the counts
// llama.cpp's loader prints for such a file (for Llama-3.1-8B-Instruct
// Q4_K_M, which adds one F32 rope_freqs: "f32: 66, q4_K: 193, q6_K: 33",
// with tokenizer.ggml.merges arr[str,280147]; mozilla-ai/llamafile
// issue 516).
//
// The strings are synthetic, of realistic lengths: tokens of 2 to 16
// bytes (mean 9), merges that split a token with a space (mean 10), so
// that the header is about 7.8 MB, as in the published files (4.92 GB,
// of which 4,912,898,048 bytes are tensor data, see
// TestFromGGUFLlama3).
func llama3Q4KM(t testing.TB) (header []byte, data int64) {
	rng := rand.New(rand.NewPCG(3, 8))
	tokens := make([]string, 128256)
	types := make([]int32, len(tokens))
	var sb strings.Builder
	for i := range tokens {
		if i >= 128000 {
			tokens[i] = fmt.Sprintf("<|reserved_special_token_%d|>", i-128000)
			types[i] = 3 // CONTROL (gguf-py/gguf/constants.py TokenType)
			continue
		}
		sb.Reset()
		for n := 2 + rng.IntN(15); n > 0; n-- {
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
		tokens[i] = sb.String()
		types[i] = 1 // NORMAL
	}
	merges := make([]string, 280147)
	for i := range merges {
		tok := tokens[i%128000]
		k := 1 + rng.IntN(len(tok)-1)
		merges[i] = tok[:k] + " " + tok[k:]
	}
	const chatTemplate = "{% set loop_messages = messages %}{% for message in loop_messages %}" +
		"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}" +
		"{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}" +
		"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
	kvs := []ggufKV{
		{"general.architecture", "llama"},
		{"general.name", "Meta-Llama-3-8B-Instruct"},
		{"llama.block_count", uint32(32)},
		{"llama.context_length", uint32(8192)},
		{"llama.embedding_length", uint32(4096)},
		{"llama.feed_forward_length", uint32(14336)},
		{"llama.attention.head_count", uint32(32)},
		{"llama.attention.head_count_kv", uint32(8)},
		{"llama.rope.freq_base", float32(500000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"general.file_type", uint32(15)},
		{"llama.vocab_size", uint32(128256)},
		{"llama.rope.dimension_count", uint32(128)},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "llama-bpe"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", merges},
		{"tokenizer.ggml.bos_token_id", uint32(128000)},
		{"tokenizer.ggml.eos_token_id", uint32(128009)},
		{"tokenizer.chat_template", chatTemplate},
		{"general.quantization_version", uint32(2)},
	}
	// rows × bytes per row: a row of n weights is n/256 blocks.
	q4k := func(n, rows uint64) int64 { return int64(n / 256 * 144 * rows) }
	q6k := func(n, rows uint64) int64 { return int64(n / 256 * 210 * rows) }
	mat := func(name string, typ uint32, n, rows uint64) ggufTensor {
		b := q4k(n, rows)
		if typ == ggmlQ6_K {
			b = q6k(n, rows)
		}
		return ggufTensor{name, []uint64{n, rows}, typ, b}
	}
	norm := func(name string) ggufTensor { return ggufTensor{name, []uint64{4096}, ggmlF32, 4096 * 4} }
	moreBits := func(i int) bool { return i < 32/8 || i >= 7*32/8 || (i-32/8)%3 == 2 }
	tensors := []ggufTensor{
		mat("output.weight", ggmlQ6_K, 4096, 128256),
		norm("output_norm.weight"),
		mat("token_embd.weight", ggmlQ4_K, 4096, 128256),
	}
	for i := range 32 {
		vd := uint32(ggmlQ4_K)
		if moreBits(i) {
			vd = ggmlQ6_K
		}
		blk := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", i, s) }
		layer := []ggufTensor{
			mat(blk("attn_k"), ggmlQ4_K, 4096, 1024),
			norm(blk("attn_norm")),
			mat(blk("attn_output"), ggmlQ4_K, 4096, 4096),
			mat(blk("attn_q"), ggmlQ4_K, 4096, 4096),
			mat(blk("attn_v"), vd, 4096, 1024),
			mat(blk("ffn_down"), vd, 14336, 4096),
			mat(blk("ffn_gate"), ggmlQ4_K, 4096, 14336),
			norm(blk("ffn_norm")),
			mat(blk("ffn_up"), ggmlQ4_K, 4096, 14336),
		}
		if !slices.IsSortedFunc(layer, func(a, b ggufTensor) int { return strings.Compare(a.name, b.name) }) {
			t.Fatal("block tensors out of weight_name_comparer order")
		}
		tensors = append(tensors, layer...)
	}
	return writeGGUFHeader(t, kvs, tensors, 32)
}

var (
	llama3Once sync.Once
	llama3     sparseFile
)

// llama3File is llama3Q4KM's header in a sparse file of the full size,
// built once for the test and the benchmark.
func llama3File(tb testing.TB) sparseFile {
	llama3Once.Do(func() {
		h, data := llama3Q4KM(tb)
		llama3 = sparseFile{size: int64(len(h)) + data, parts: []sparsePart{{0, h}}}
	})
	return llama3
}

// TestFromGGUFLlama3 reads a Llama-3-8B Q4_K_M header (llama3Q4KM) and
// checks the Spec, then that reading it allocates under 3,000 times
// (the 128,256 tokens, their types and 280,147 merges are skipped
// without allocating; what is left is one per tensor: its name and shape
// in the inventory). Not parallel: it counts the process's allocations.
func TestFromGGUFLlama3(t *testing.T) {
	f := llama3File(t)
	header := f.parts[0].b
	// 4.92 GB files: the header is the rest after the tensor data.
	t.Logf("header %d bytes, file %d bytes", len(header), f.size)
	s, err := FromGGUF(f, f.size)
	require.NoError(t, err)
	assert.Equal(t, "llama", s.Family)
	assert.Equal(t, "Meta-Llama-3-8B-Instruct", s.Name)
	assert.Equal(t, int64(32), s.Layers)
	assert.Equal(t, int64(4096), s.Hidden)
	assert.Equal(t, int64(14336), s.Intermediate)
	assert.Equal(t, int64(32), s.Heads)
	assert.Equal(t, int64(8), s.KVHeads)
	assert.Equal(t, int64(128), s.HeadDim)
	assert.Equal(t, int64(128256), s.Vocab)
	assert.Equal(t, int64(8192), s.MaxPositions)
	assert.True(t, s.Gated, "ffn_gate: a gated MLP")
	assert.Equal(t, RMSNorm, s.Norm, "attn_norm without a bias")
	require.Len(t, s.Inventory, 291)
	assert.Equal(t, gpumem.Tensor{Name: "output.weight", Shape: []int64{128256, 4096}, DType: gpumem.Q6_K}, s.Inventory[0])
	assert.Equal(t, gpumem.Tensor{Name: "blk.31.ffn_up.weight", Shape: []int64{14336, 4096}, DType: gpumem.Q4_K}, s.Inventory[290])
	// Parameters: embedding and head 2 × 128256·4096 = 1,050,673,152;
	// per layer q, o 4096² each, k, v 1024·4096 each, gate, up, down
	// 14336·4096 each, two norms of 4096: 218,112,000, × 32 =
	// 6,979,584,000; output_norm 4096. In all 8,030,261,248 (Llama-3-8B's
	// 8.03B).
	assert.Equal(t, int64(8_030_261_248), s.Params())
	var sum int64
	for _, tn := range s.Inventory {
		e, err := tn.Elems()
		require.NoError(t, err)
		sum += e
	}
	assert.Equal(t, sum, s.Params())
	// Bytes: a 4096-row is 16 blocks (Q4_K 2,304 B, Q6_K 3,360 B), a
	// 14336-row 56 (Q4_K 8,064 B, Q6_K 11,760 B).
	//   Q4_K: token_embd 128256·2304 = 295,501,824; per layer q, o
	//   4096·2304, k 1024·2304, gate, up 14336·2304 = 87,293,952, × 32 =
	//   2,793,406,464; v in 16 layers 16·1024·2304 = 37,748,736; down in
	//   16 layers 16·4096·8064 = 528,482,304: 3,655,139,328.
	//   Q6_K: output 128256·3360 = 430,940,160; v 16·1024·3360 =
	//   55,050,240; down 16·4096·11760 = 770,703,360: 1,256,693,760.
	//   F32: 65 norms of 4096·4 = 1,064,960.
	m, err := s.BytesByDType()
	require.NoError(t, err)
	assert.Equal(t, map[gpumem.DType]gpumem.Bytes{
		gpumem.Q4_K: 3_655_139_328,
		gpumem.Q6_K: 1_256_693_760,
		gpumem.FP32: 1_064_960,
	}, m)
	assert.Equal(t, int64(4_912_898_048), f.size-int64(len(header)))

	allocs := testing.AllocsPerRun(3, func() {
		if _, err := FromGGUF(f, f.size); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations", allocs)
	assert.Less(t, allocs, 3000.0)
	// One allocation per tensor (its name); the rest (buffer, maps,
	// shape slabs, inventory, Spec) does not grow with the metadata.
	// Before the reader had its own buffer and built field names only
	// for errors: 1,993.
	assert.LessOrEqual(t, allocs, float64(len(s.Inventory)+64))
}

// TestFromGGUFBufferBoundaries: values that straddle or exceed the
// reader's 64 KiB buffer are read right, and a key still names its pair
// in an error after reading its value has refilled the buffer.
func TestFromGGUFBufferBoundaries(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 100<<10)
	var strs []string
	for i := range 20000 { // 20,000 strings of 1 to 7 bytes: ~160 KB
		strs = append(strs, strings.Repeat("y", 1+i%7))
	}
	data := writeGGUF(t, []ggufKV{
		{"general.architecture", "llama"},
		{"tokenizer.ggml.tokens", append([]string{"ab", big, "c"}, strs...)},
		{"tokenizer.chat_template", big},
		{"general.name", "after the arrays"},
		{"llama.block_count", uint32(1)},
	}, []ggufTensor{{"blk.0.attn_norm.weight", []uint64{8}, ggmlF32, 32}}, 32)
	s, err := FromGGUF(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	assert.Equal(t, "after the arrays", s.Name)
	assert.Equal(t, int64(1), s.Layers)
	assert.Equal(t, []gpumem.Tensor{{Name: "blk.0.attn_norm.weight", Shape: []int64{8}, DType: gpumem.FP32}}, s.Inventory)

	// A pair "a" with a string of l bytes, then a pair whose key ends 2
	// bytes before the end of the first 64 KiB buffer and whose type, 99,
	// is unknown: reading the type refills the buffer over the key.
	const key = "tokenizer.ggml.unknown_type"
	l := ggufBufSize - 2 - (24 + 8 + 1 + 4 + 8) - 8 - len(key)
	file := cat(ggufHead(0, 2), le64(1), []byte("a"), le32(ggufString), le64(uint64(l)), make([]byte, l),
		le64(uint64(len(key))), []byte(key), le32(99), make([]byte, ggufBufSize))
	require.Equal(t, ggufBufSize-2, bytes.Index(file, []byte(key))+len(key))
	_, err = FromGGUF(bytes.NewReader(file), int64(len(file)))
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, `gguf.metadata["`+key+`"]`, fe.Field, "%v", err)
	assert.Equal(t, uint32(99), fe.Value)
}

// BenchmarkFromGGUFLlama3 reads the Llama-3-8B Q4_K_M header of
// llama3Q4KM.
func BenchmarkFromGGUFLlama3(b *testing.B) {
	f := llama3File(b)
	b.SetBytes(int64(len(f.parts[0].b)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromGGUF(f, f.size); err != nil {
			b.Fatal(err)
		}
	}
}
