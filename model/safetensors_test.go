package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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
		{"bad metadata", stRaw(`{"__metadata__": {"a": 1}}`, 0), `safetensors.__metadata__["a"]`, gpumem.ErrSyntax},
		{"unknown dtype", stRaw(`{"w": {"dtype": "Q4_K", "shape": [32], "data_offsets": [0, 18]}}`, 18), `safetensors["w"].dtype`, gpumem.ErrUnsupported},
		{"missing dtype", stRaw(`{"w": {"shape": [2], "data_offsets": [0, 8]}}`, 8), `safetensors["w"].dtype`, gpumem.ErrSyntax},
		{"missing shape", stRaw(`{"w": {"dtype": "F32", "data_offsets": [0, 4]}}`, 4), `safetensors["w"].shape`, gpumem.ErrSyntax},
		{"negative dim", stRaw(`{"w": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}}`, 16), `safetensors["w"].shape`, gpumem.ErrInvalid},
		{"overflowing shape", stRaw(`{"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]}}`, 16), `safetensors["w"].shape`, gpumem.ErrInvalid},
		{"fractional dim", stRaw(`{"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}`, 4), `safetensors["w"].shape`, gpumem.ErrSyntax},
		{"offsets size mismatch", stRaw(`{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}`, 8), `safetensors["w"].data_offsets`, gpumem.ErrInvalid},
		{"offsets reversed", stRaw(`{"w": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}}`, 4), `safetensors["w"].data_offsets`, gpumem.ErrInvalid},
		{"offsets one number", stRaw(`{"w": {"dtype": "F32", "shape": [1], "data_offsets": [4]}}`, 4), `safetensors["w"].data_offsets`, gpumem.ErrSyntax},
		{"hole", stRaw(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}`, 8), `safetensors["a"].data_offsets`, gpumem.ErrInvalid},
		{"overlap", stRaw(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}`, 8), `safetensors["b"].data_offsets`, gpumem.ErrInvalid},
		{"data beyond file", stRaw(`{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}`, 8), "safetensors.data_offsets", gpumem.ErrInvalid},
		{"trailing bytes", stRaw(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}`, 8), "safetensors.data_offsets", gpumem.ErrInvalid},
		{"odd F4 count", stRaw(`{"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}`, 2), `safetensors["a"].shape`, gpumem.ErrInvalid},
		{"duplicate tensor", stRaw(`{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}`, 2), `safetensors["a"]`, gpumem.ErrInvalid},
		{"metadata twice", stRaw(`{"__metadata__": {}, "__metadata__": {}}`, 0), "safetensors.__metadata__", gpumem.ErrSyntax},
		{"dtype twice", stRaw(`{"a": {"dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}`, 1), `safetensors["a"].dtype`, gpumem.ErrSyntax},
		{"shape null", stRaw(`{"a": {"dtype": "U8", "shape": null, "data_offsets": [0, 1]}}`, 1), `safetensors["a"].shape`, gpumem.ErrSyntax},
		{"entry not an object", stRaw(`{"a": [1]}`, 0), `safetensors["a"]`, gpumem.ErrSyntax},
		{"dtype a number", stRaw(`{"a": {"dtype": 1, "shape": [1], "data_offsets": [0, 1]}}`, 1), `safetensors["a"].dtype`, gpumem.ErrSyntax},
		{"dim above int64", stRaw(`{"a": {"dtype": "U8", "shape": [9223372036854775808], "data_offsets": [0, 1]}}`, 1), `safetensors["a"].shape`, gpumem.ErrRange},
		{"exponent dim", stRaw(`{"a": {"dtype": "U8", "shape": [1e0], "data_offsets": [0, 1]}}`, 1), `safetensors["a"].shape`, gpumem.ErrSyntax},
		{"three offsets", stRaw(`{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]}}`, 1), `safetensors["a"].data_offsets`, gpumem.ErrSyntax},
		{"nested 200 deep", stRaw(`{"a": {"x": `+strings.Repeat("[", 200)+strings.Repeat("]", 200)+`, "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}`, 1), "safetensors.header", gpumem.ErrSyntax},
		{"leading zero", stRaw(`{"a": {"dtype": "U8", "shape": [01], "data_offsets": [0, 1]}}`, 1), "safetensors.header", gpumem.ErrSyntax},
		{"bad literal", stRaw(`{"a": {"x": tru, "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}`, 1), "safetensors.header", gpumem.ErrSyntax},
		{"control character", stRaw("{\"a\x01\": {}}", 0), "safetensors.header", gpumem.ErrSyntax},
		{"bad escape", stRaw(`{"a\q": {}}`, 0), "safetensors.header", gpumem.ErrSyntax},
		{"missing colon", stRaw(`{"a" {}}`, 0), "safetensors.header", gpumem.ErrSyntax},
		{"trailing comma", stRaw(`{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},}`, 1), "safetensors.header", gpumem.ErrSyntax},
		{"unterminated string", stRaw(`{"a`, 0), "safetensors.header", gpumem.ErrSyntax},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromSafetensors(bytes.NewReader(tc.file), int64(len(tc.file)))
			t.Log(err)
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

// TestFromSafetensorsJSON: the header is JSON as encoding/json reads
// it: escapes, unknown keys of any type (skipped), keys in any order,
// white space anywhere.
func TestFromSafetensorsJSON(t *testing.T) {
	t.Parallel()
	header := "{ \"__metadata__\" : {\"format\":\"pt\"},\n\"a\\u00e9\\\"\\n\" :{\"data_offsets\":[0,4],\r\n" +
		`"extra": {"x": [1, -2.5e+3, true, false, null, "s\u0000", {}, []]}, "shape": [ 1 ], "dtype": "F32"},` +
		`"b": {"dtype": "BF16", "shape": [2, 0], "data_offsets": [4, 4]}, "c": {"dtype": "U8", "shape": [], "data_offsets": [4, 5]}}` + " \n\t\r "
	require.True(t, json.Valid([]byte(header)))
	data := stRaw(header, 5)
	s, err := FromSafetensors(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	require.Len(t, s.Inventory, 3)
	assert.Equal(t, gpumem.Tensor{Name: "aé\"\n", Shape: []int64{1}, DType: gpumem.FP32}, s.Inventory[0])
	assert.Equal(t, gpumem.Tensor{Name: "b", Shape: []int64{2, 0}, DType: gpumem.BF16}, s.Inventory[1])
	assert.Equal(t, gpumem.Tensor{Name: "c", Shape: []int64{}, DType: gpumem.UINT8}, s.Inventory[2])
	// A name of 200 KB spans the scanner's 64 KiB windows.
	long := strings.Repeat("x", 200_000) + `\u00e9`
	data = stRaw(`{"`+long+`": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}`, 1)
	s, err = FromSafetensors(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("x", 200_000)+"é", s.Inventory[0].Name)
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
			{"mapped twice", `{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}`, `index.weight_map["a"]`, gpumem.ErrInvalid},
			{"weight_map twice", `{"weight_map": {"a": "x.safetensors"}, "weight_map": {}}`, "index.weight_map", gpumem.ErrSyntax},
			{"shard a number", `{"weight_map": {"a": 1}}`, `index.weight_map["a"]`, gpumem.ErrSyntax},
			{"trailing data", `{"weight_map": {"a": "x.safetensors"}} x`, "index", gpumem.ErrSyntax},
			{"not an object", `[]`, "index", gpumem.ErrSyntax},
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
	// Crafted headers: rank 9 and 100, 200 tensors, an escaped name,
	// unknown keys nested deep, a duplicate name. (The million-tensor and
	// 49-million-dimension headers are FuzzSafetensorsGenerated's seeds.)
	for _, g := range []genFile{rankFile(9), rankFile(100), manyTensorsFile(200)} {
		b := make([]byte, g.size)
		_, _ = g.ReadAt(b, 0)
		f.Add(b)
	}
	f.Add(stRaw(`{"a\u00e9": {"x": [[[{"y": null}]]], "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}`, 1))
	f.Add(stRaw(`{"a": {"x": `+strings.Repeat("[", 130)+strings.Repeat("]", 130)+`}}`, 0))
	f.Add(stRaw(`{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}`, 2))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSafetensors(t, bytes.NewReader(data), int64(len(data)), data)
	})
}

// checkSafetensors reads a file and checks FromSafetensors's
// invariants: an error is a *FieldError naming a field; an accepted
// header is valid JSON (when data holds it) whose keys are the tensors'
// names, each of at most 8 dimensions, and the inventory's bytes equal
// the data buffer.
func checkSafetensors(t *testing.T, r io.ReaderAt, size int64, data []byte) {
	s, err := FromSafetensors(r, size)
	if err != nil {
		requireFieldError(t, err)
		return
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		t.Fatalf("reading the header length of an accepted file: %v", err)
	}
	n := int64(binary.LittleEndian.Uint64(lenBuf[:]))
	if len(s.Inventory) > maxSafetensorsTensors {
		t.Fatalf("accepted %d tensors", len(s.Inventory))
	}
	for _, tn := range s.Inventory {
		if len(tn.Shape) > maxSafetensorsRank {
			t.Fatalf("accepted %q of rank %d", tn.Name, len(tn.Shape))
		}
	}
	if data != nil {
		// encoding/json agrees: the header is JSON and its keys, less
		// __metadata__, are the names.
		header := data[8 : 8+n]
		var m map[string]json.RawMessage
		if err := json.Unmarshal(header, &m); err != nil {
			t.Fatalf("accepted a header encoding/json refuses: %v", err)
		}
		delete(m, "__metadata__")
		if len(m) != len(s.Inventory) {
			t.Fatalf("encoding/json reads %d tensors, FromSafetensors %d", len(m), len(s.Inventory))
		}
		for _, tn := range s.Inventory {
			if _, ok := m[tn.Name]; !ok {
				t.Fatalf("tensor %q is not a key of the header", tn.Name)
			}
		}
	}
	// Round trip: the inventory's bytes equal the data buffer.
	b, err := s.WeightsBytes()
	if err != nil {
		t.Fatalf("WeightsBytes: %v", err)
	}
	if int64(b) != size-8-n {
		t.Fatalf("inventory holds %d bytes, data buffer %d", b, size-8-n)
	}
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
	f.Add([]byte(`{"metadata": {"x": [1, {"y": "z"}]}, "weight_map": {"a": "x", "a": "y"}}`))
	f.Add([]byte(`{"weight_map": {"a\u0000": "model-00001-of-00002.safetensors"}} `))
	f.Fuzz(func(t *testing.T, index []byte) {
		m := fstest.MapFS{}
		for k, v := range fsys {
			m[k] = v
		}
		m["ckpt/model.safetensors.index.json"] = &fstest.MapFile{Data: index}
		s, err := FromSafetensorsIndex(m, "ckpt/model.safetensors.index.json")
		if err != nil {
			requireFieldError(t, err)
			return
		}
		if !json.Valid(index) {
			t.Fatalf("accepted an index encoding/json refuses")
		}
		if s.Params() <= 0 {
			t.Fatalf("accepted index with Params() = %d", s.Params())
		}
	})
}

// genFile is a virtual safetensors file: the 8-byte header length, then
// prefix, count fixed-width units unit(0), unit(1), ..., suffix, and
// zeros up to size. It holds headers of up to 100 MB without allocating
// them.
type genFile struct {
	prefix, suffix string
	unit           func(i int) string // all of the same length
	count          int
	size           int64
}

func (g genFile) headerLen() int64 {
	w := 0
	if g.count > 0 {
		w = len(g.unit(0))
	}
	return int64(len(g.prefix) + g.count*w + len(g.suffix))
}

func (g genFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	w := int64(0)
	if g.count > 0 {
		w = int64(len(g.unit(0)))
	}
	hl := g.headerLen()
	lenBuf := binary.LittleEndian.AppendUint64(nil, uint64(hl))
	pre, units := 8+int64(len(g.prefix)), 8+int64(len(g.prefix))+int64(g.count)*w
	n := 0
	for n < len(p) && off < g.size {
		var src string
		var at int64 // offset of src[0]
		switch {
		case off < 8:
			src, at = string(lenBuf), 0
		case off < pre:
			src, at = g.prefix, 8
		case off < units:
			i := (off - pre) / w
			src, at = g.unit(int(i)), pre+i*w
		case off < 8+hl:
			src, at = g.suffix, units
		default:
			k := min(int64(len(p)-n), g.size-off)
			clear(p[n : n+int(k)])
			n, off = n+int(k), off+k
			continue
		}
		k := copy(p[n:], src[off-at:])
		n, off = n+k, off+int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// rankFile is a header whose one tensor "w" has a shape of dims 1s.
func rankFile(dims int) genFile {
	g := genFile{prefix: `{"w": {"dtype": "U8", "shape": [`, unit: func(int) string { return "1," }, count: dims - 1,
		suffix: `1], "data_offsets": [0, 1]}}`}
	g.size = 8 + g.headerLen() + 1
	return g
}

// manyTensorsFile is a header of count+1 empty U8 tensors "t0000000", ...,
// "end".
func manyTensorsFile(count int) genFile {
	g := genFile{prefix: `{`, count: count,
		unit:   func(i int) string { return fmt.Sprintf(`"t%07d":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},`, i) },
		suffix: `"end":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`}
	g.size = 8 + g.headerLen()
	return g
}

// TestFromSafetensorsLimits: rank and tensor count are bounded, and a
// header at the 100 MB cap is refused at the first element past a
// bound.
func TestFromSafetensorsLimits(t *testing.T) {
	t.Parallel()
	s, err := FromSafetensors(rankFile(8), rankFile(8).size)
	require.NoError(t, err, "rank 8")
	assert.Len(t, s.Inventory[0].Shape, 8)

	tests := []struct {
		name  string
		file  genFile
		field string
		kind  error
		value any
	}{
		{"rank 9", rankFile(9), `safetensors["w"].shape`, gpumem.ErrRange, []int64{1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"rank 49 million", rankFile(49_000_000), `safetensors["w"].shape`, gpumem.ErrRange, []int64{1, 1, 1, 1, 1, 1, 1, 1, 1}},
		// Refused at tensor 2^17+1 (so the first 2^17 passed), long
		// before the header's end.
		{"a million tensors", manyTensorsFile(1_000_000), "safetensors.header", gpumem.ErrRange, maxSafetensorsTensors + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.LessOrEqual(t, tc.file.headerLen(), int64(maxSafetensorsHeader))
			_, err := FromSafetensors(tc.file, tc.file.size)
			t.Log(err)
			require.ErrorIs(t, err, tc.kind)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field, "%v", err)
			assert.Equal(t, tc.value, fe.Value, "%v", err)
		})
	}
}

// TestFromSafetensorsAllocation: a 98 MB header claiming a
// 49-million-dimension shape costs what the parser reads before the
// rank bound, not the header. (Not parallel: it measures the process's
// allocations.)
func TestFromSafetensorsAllocation(t *testing.T) {
	f := rankFile(49_000_000)
	var err error
	n := heapBytes(func() { _, err = FromSafetensors(f, f.size) })
	require.ErrorIs(t, err, gpumem.ErrRange)
	assert.Less(t, n, uint64(1<<20), "allocated %d bytes", n)
}

func TestSafetensorsNilReader(t *testing.T) {
	t.Parallel()
	_, err := FromSafetensors(nil, 64)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "safetensors", fe.Field)

	_, err = FromSafetensorsIndex(nil, "model.safetensors.index.json")
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "fsys", fe.Field)
}
