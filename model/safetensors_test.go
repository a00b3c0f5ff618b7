package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func stDTypeNames() map[gpumem.DType]string {
	m := map[gpumem.DType]string{}
	for k, v := range safetensorsDTypes {
		m[v] = k
	}
	return m
}

// stHeader writes a safetensors header for ts laid out back to back, as
// the reference writer does (header padded with spaces to a multiple of
// 8), and returns it with the total data size.
func stHeader(t testing.TB, ts []gpumem.Tensor, meta map[string]string) ([]byte, int64) {
	t.Helper()
	names := stDTypeNames()
	hdr := map[string]any{}
	if meta != nil {
		hdr["__metadata__"] = meta
	}
	var at int64
	for _, tn := range ts {
		b, err := tn.Bytes()
		require.NoError(t, err)
		shape := tn.Shape
		if shape == nil {
			shape = []int64{}
		}
		hdr[tn.Name] = map[string]any{"dtype": names[tn.DType], "shape": shape, "data_offsets": []int64{at, at + int64(b)}}
		at += int64(b)
	}
	js, err := json.Marshal(hdr)
	require.NoError(t, err)
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	return append(out, js...), at
}

// zeroTail is a file whose first bytes are head and the rest zeros, so
// that multi-GB checkpoints can be tested without allocating them.
type zeroTail struct {
	head []byte
	size int64
}

func (z zeroTail) ReadAt(p []byte, off int64) (int, error) {
	if off >= z.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off+int64(n) < z.size {
		if off+int64(n) < int64(len(z.head)) {
			p[n] = z.head[off+int64(n)]
		} else {
			p[n] = 0
		}
		n++
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func stFile(t testing.TB, ts []gpumem.Tensor) zeroTail {
	head, data := stHeader(t, ts, map[string]string{"format": "pt"})
	return zeroTail{head: head, size: int64(len(head)) + data}
}

func TestFromSafetensorsRoundTrip(t *testing.T) {
	t.Parallel()
	tiny, err := FromHFConfig(strings.NewReader(`{"model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
		"num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "torch_dtype": "bfloat16"}`))
	require.NoError(t, err)
	want := tiny.Tensors()
	f := stFile(t, want)
	// A real file: header then zero bytes.
	buf := make([]byte, f.size)
	copy(buf, f.head)
	got, err := FromSafetensors(bytes.NewReader(buf), int64(len(buf)))
	require.NoError(t, err)
	if diff := cmp.Diff(want, got.Tensors()); diff != "" {
		t.Errorf("FromSafetensors inventory (-want +got):\n%s", diff)
	}
	assert.Equal(t, tiny.Params(), got.Params())
	assert.Equal(t, "llama", got.Family) // guessed from the tensor names
	assert.Equal(t, int64(3), got.Layers)
	assert.Equal(t, int64(64), got.Hidden)
	assert.Equal(t, int64(100), got.Vocab)
	assert.Equal(t, int64(160), got.Intermediate)
	assert.False(t, got.TiedEmbeddings)
	assert.Equal(t, gpumem.BF16, got.DType)
	wb, err := got.WeightsBytes()
	require.NoError(t, err)
	tb, _ := tiny.WeightsBytes()
	assert.Equal(t, tb, wb)
}

// TestFromSafetensorsLlama2 writes Llama-2-7B's header (291 tensors) over
// a virtual 13.5 GB file and reads back the published count.
func TestFromSafetensorsLlama2(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("llama-2-7b")
	f := stFile(t, s.Tensors())
	got, err := FromSafetensors(f, f.size)
	require.NoError(t, err)
	assert.Equal(t, int64(6_738_415_616), got.Params())
	assert.Len(t, got.Inventory, 291)
	b, err := got.WeightsBytes()
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(2*6_738_415_616), b)
	assert.Equal(t, int64(32), got.Layers)
	assert.Equal(t, int64(11008), got.Intermediate)
}

func TestFromSafetensorsMixedDTypes(t *testing.T) {
	t.Parallel()
	ts := []gpumem.Tensor{
		{Name: "w", Shape: []int64{128, 64}, DType: gpumem.FP8E4M3},
		{Name: "w_scale_inv", Shape: []int64{1, 1}, DType: gpumem.FP32},
		{Name: "packed", Shape: []int64{10, 4}, DType: gpumem.FP4},
		{Name: "fp6", Shape: []int64{8}, DType: gpumem.FP6E2M3},
		{Name: "scalar", Shape: nil, DType: gpumem.BF16},
		{Name: "empty", Shape: []int64{0, 7}, DType: gpumem.FP16},
		{Name: "mask", Shape: []int64{3}, DType: gpumem.BOOL},
	}
	f := stFile(t, ts)
	got, err := FromSafetensors(f, f.size)
	require.NoError(t, err)
	m, err := got.BytesByDType()
	require.NoError(t, err)
	assert.Equal(t, map[gpumem.DType]gpumem.Bytes{
		gpumem.FP8E4M3: 128 * 64, gpumem.FP32: 4, gpumem.FP4: 20, gpumem.FP6E2M3: 6,
		gpumem.BF16: 2, gpumem.FP16: 0, gpumem.BOOL: 3,
	}, m)
	assert.Equal(t, int64(128*64+1+40+8+1+0+3), got.Params())
	assert.Equal(t, gpumem.FP8E4M3, got.DType)
}

func stRaw(header string, data int) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, make([]byte, data)...)
}

func TestFromSafetensorsErrors(t *testing.T) {
	t.Parallel()
	hugeLen := binary.LittleEndian.AppendUint64(nil, 1<<63)
	tests := []struct {
		name  string
		file  []byte
		field string
		kind  error
	}{
		{"empty", nil, "safetensors.header_length", gpumem.ErrSyntax},
		{"truncated length", []byte{1, 2, 3}, "safetensors.header_length", gpumem.ErrSyntax},
		{"header length 2^63", append(hugeLen, '{', '}'), "safetensors.header_length", gpumem.ErrRange},
		{"header length over cap", binary.LittleEndian.AppendUint64(nil, maxSafetensorsHeader+1), "safetensors.header_length", gpumem.ErrRange},
		{"header beyond file", append(binary.LittleEndian.AppendUint64(nil, 100), '{', '}'), "safetensors.header_length", gpumem.ErrSyntax},
		{"not an object", stRaw(`[1]     `, 0), "safetensors.header", gpumem.ErrSyntax},
		{"bad json", stRaw(`{"a": `, 0), "safetensors.header", gpumem.ErrSyntax},
		{"trailing json", stRaw(`{} {}`, 0), "safetensors.header", gpumem.ErrSyntax},
		{"bad metadata", stRaw(`{"__metadata__": {"a": 1}}`, 0), "safetensors.__metadata__", gpumem.ErrSyntax},
		{"unknown dtype", stRaw(`{"w": {"dtype": "Q4_K", "shape": [32], "data_offsets": [0, 18]}}`, 18), `safetensors["w"].dtype`, gpumem.ErrUnsupported},
		{"missing dtype", stRaw(`{"w": {"shape": [2], "data_offsets": [0, 8]}}`, 8), `safetensors["w"].dtype`, gpumem.ErrSyntax},
		{"missing shape", stRaw(`{"w": {"dtype": "F32", "data_offsets": [0, 4]}}`, 4), `safetensors["w"].shape`, gpumem.ErrSyntax},
		{"negative dim", stRaw(`{"w": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}}`, 16), `safetensors["w"].shape`, gpumem.ErrInvalid},
		{"overflowing shape", stRaw(`{"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]}}`, 16), `safetensors["w"].shape`, gpumem.ErrInvalid},
		{"fractional dim", stRaw(`{"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}`, 4), `safetensors["w"]`, gpumem.ErrSyntax},
		{"offsets size mismatch", stRaw(`{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}`, 8), `safetensors["w"].data_offsets`, gpumem.ErrInvalid},
		{"offsets reversed", stRaw(`{"w": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}}`, 4), `safetensors["w"].data_offsets`, gpumem.ErrInvalid},
		{"offsets one number", stRaw(`{"w": {"dtype": "F32", "shape": [1], "data_offsets": [4]}}`, 4), `safetensors["w"].data_offsets`, gpumem.ErrSyntax},
		{"hole", stRaw(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}`, 8), `safetensors["a"].data_offsets`, gpumem.ErrInvalid},
		{"overlap", stRaw(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}`, 8), `safetensors["b"].data_offsets`, gpumem.ErrInvalid},
		{"data beyond file", stRaw(`{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}`, 8), "safetensors.data_offsets", gpumem.ErrInvalid},
		{"trailing bytes", stRaw(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}`, 8), "safetensors.data_offsets", gpumem.ErrInvalid},
		{"odd F4 count", stRaw(`{"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}`, 2), `safetensors["a"].shape`, gpumem.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromSafetensors(bytes.NewReader(tc.file), int64(len(tc.file)))
			require.ErrorIs(t, err, tc.kind)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field, "%v", err)
		})
	}
	t.Run("lying size", func(t *testing.T) {
		t.Parallel()
		_, err := FromSafetensors(bytes.NewReader(stRaw(`{}`, 0)), math.MaxInt64)
		require.ErrorIs(t, err, gpumem.ErrInvalid)
		_, err = FromSafetensors(bytes.NewReader(nil), -1)
		require.ErrorIs(t, err, gpumem.ErrInvalid)
	})
}

func shardFS(t testing.TB) (fstest.MapFS, int64) {
	t.Helper()
	s, err := FromHFConfig(strings.NewReader(`{"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50, "torch_dtype": "bfloat16"}`))
	require.NoError(t, err)
	ts := s.Tensors()
	half := len(ts) / 2
	fsys := fstest.MapFS{}
	wm := map[string]string{}
	var total int64
	for i, part := range [][]gpumem.Tensor{ts[:half], ts[half:]} {
		name := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
		head, data := stHeader(t, part, nil)
		fsys["ckpt/"+name] = &fstest.MapFile{Data: append(head, make([]byte, data)...)}
		for _, tn := range part {
			wm[tn.Name] = name
		}
		total += data
	}
	idx, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": wm})
	require.NoError(t, err)
	fsys["ckpt/model.safetensors.index.json"] = &fstest.MapFile{Data: idx}
	return fsys, s.Params()
}

func TestFromSafetensorsIndex(t *testing.T) {
	t.Parallel()
	fsys, params := shardFS(t)
	got, err := FromSafetensorsIndex(fsys, "ckpt/model.safetensors.index.json")
	require.NoError(t, err)
	assert.Equal(t, params, got.Params())
	assert.Equal(t, int64(2), got.Layers)

	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name, index, field string
			kind               error
		}{
			{"missing index", "", "index", gpumem.ErrInvalid},
			{"not json", `{`, "index", gpumem.ErrSyntax},
			{"empty map", `{"weight_map": {}}`, "index.weight_map", gpumem.ErrInvalid},
			{"traversal", `{"weight_map": {"a": "../secret.safetensors"}}`, `index.weight_map["../secret.safetensors"]`, gpumem.ErrInvalid},
			{"absent shard", `{"weight_map": {"a": "nope.safetensors"}}`, "shard(nope.safetensors)", gpumem.ErrInvalid},
			{"tensor not in shard", `{"weight_map": {"a": "model-00001-of-00002.safetensors"}}`, "", gpumem.ErrInvalid},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := fstest.MapFS{}
				for k, v := range fsys {
					f[k] = v
				}
				if tc.index == "" {
					delete(f, "ckpt/model.safetensors.index.json")
				} else {
					f["ckpt/model.safetensors.index.json"] = &fstest.MapFile{Data: []byte(tc.index)}
				}
				_, err := FromSafetensorsIndex(f, "ckpt/model.safetensors.index.json")
				require.ErrorIs(t, err, tc.kind)
				var fe *gpumem.FieldError
				require.ErrorAs(t, err, &fe)
				if tc.field != "" {
					assert.Equal(t, tc.field, fe.Field, "%v", err)
				}
			})
		}
	})
}

func FuzzSafetensors(f *testing.F) {
	ts := []gpumem.Tensor{
		{Name: "a", Shape: []int64{2, 3}, DType: gpumem.BF16},
		{Name: "b", Shape: []int64{4}, DType: gpumem.FP4},
	}
	head, data := stHeader(f, ts, map[string]string{"format": "pt"})
	f.Add(append(head, make([]byte, data)...))
	f.Add(stRaw(`{"w": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}}`, 16))
	f.Add(stRaw(`{"__metadata__": {"a": "b"}, "x": {"dtype": "U8", "shape": [], "data_offsets": [0, 1]}}`, 1))
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 127})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := FromSafetensors(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			var fe *gpumem.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a *FieldError: %v", err)
			}
			return
		}
		// Round trip: the inventory's bytes equal the data buffer.
		b, err := s.WeightsBytes()
		if err != nil {
			t.Fatalf("WeightsBytes: %v", err)
		}
		n := binary.LittleEndian.Uint64(data)
		if int64(b) != int64(len(data))-8-int64(n) {
			t.Fatalf("inventory holds %d bytes, data buffer %d", b, int64(len(data))-8-int64(n))
		}
	})
}

// TestFromSafetensorsMoE writes Qwen3-30B-A3B's 18,867-tensor header over
// a virtual 61 GB file and reads back the published count and the
// expert count inferred from the names.
func TestFromSafetensorsMoE(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("qwen3-30b-a3b")
	f := stFile(t, s.Tensors())
	got, err := FromSafetensors(f, f.size)
	require.NoError(t, err)
	assert.Equal(t, int64(30_532_122_624), got.Params())
	assert.Equal(t, int64(128), got.MoE.Experts)
	assert.Equal(t, int64(48), got.Layers)
	assert.Equal(t, int64(2048), got.Hidden)
	assert.Equal(t, int64(151936), got.Vocab)
}

func TestInferSpecGPT2(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("gpt2")
	got := InferSpec(s.Tensors())
	assert.Equal(t, int64(3072), got.Intermediate) // Conv1D c_fc is [768, 3072]
	assert.True(t, got.TiedEmbeddings)
	assert.Equal(t, int64(12), got.Layers)
	assert.Equal(t, int64(50257), got.Vocab)
}

// TestGuessFamily reads each catalog model's own inventory back.
func TestGuessFamily(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"mistral-7b": "llama", "llama-3-8b": "llama", "gemma-7b": "llama", "gemma-2b": "llama", // same layout as llama
		"llava-1.5-7b": "llava", "gemma-3-4b": "gemma3", "deepseek-v3": "deepseek_v3", "deepseek-v2-lite": "deepseek_v2",
		"mixtral-8x7b": "mixtral", "qwen1.5-moe-a2.7b": "qwen2_moe", "qwen3-30b-a3b": "qwen3_moe", "phi-3-mini": "phi3",
		"phi-2": "phi", "gemma-3-1b": "gemma3_text", "gemma-2-9b": "gemma2", "qwen3-8b": "qwen3", "qwen2-7b": "qwen2",
		"gpt2": "gpt2", "falcon-7b": "falcon", "pythia-1b": "gpt_neox", "opt-125m": "opt", "whisper-small": "whisper",
		"t5-base": "t5", "cogvideox-5b-text-encoder": "t5", "bert-base": "bert", "roberta-base": "roberta",
		"vit-base-patch16-224": "vit", "clip-vit-large-patch14-336": "clip", "cogvideox-5b-transformer": "cogvideox",
	}
	for name, fam := range want {
		s, ok := Lookup(name)
		require.True(t, ok, name)
		if got := GuessFamily(s.Tensors()); got != fam {
			t.Errorf("GuessFamily(%s inventory) = %q, want %q", name, got, fam)
		}
	}
	big, err := FromHFConfig(strings.NewReader(`{"model_type": "gpt_bigcode", "n_layer": 1}`))
	require.NoError(t, err)
	assert.Equal(t, "gpt_bigcode", GuessFamily(big.Tensors()))
	q3, _ := Lookup("qwen3-8b")
	got := InferSpec(q3.Tensors())
	assert.Equal(t, []int64{32, 8, 128}, []int64{got.Heads, got.KVHeads, got.HeadDim}, "from q_norm")
	assert.Empty(t, GuessFamily([]gpumem.Tensor{{Name: "w", Shape: []int64{1}, DType: gpumem.FP32}}))
}

// FuzzSafetensorsIndex fuzzes the index file over two fixed shards.
func FuzzSafetensorsIndex(f *testing.F) {
	fsys, _ := shardFS(f)
	f.Add(fsys["ckpt/model.safetensors.index.json"].Data)
	f.Add([]byte(`{"weight_map": {"a": "../x.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}`))
	f.Fuzz(func(t *testing.T, index []byte) {
		m := fstest.MapFS{}
		for k, v := range fsys {
			m[k] = v
		}
		m["ckpt/model.safetensors.index.json"] = &fstest.MapFile{Data: index}
		s, err := FromSafetensorsIndex(m, "ckpt/model.safetensors.index.json")
		if err != nil {
			var fe *gpumem.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a *FieldError: %v", err)
			}
			return
		}
		if s.Params() <= 0 {
			t.Fatalf("accepted index with Params() = %d", s.Params())
		}
	})
}
