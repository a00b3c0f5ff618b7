package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// tinyLlama is the geometry of the GGUF files these tests write: a llama
// of 2 blocks, hidden 256 (a whole K-quant block of 256 weights per row),
// 4 heads of 64, 2 KV heads, intermediate 512, vocabulary 512.
const (
	tinyLayers, tinyHidden, tinyHeads, tinyKVHeads, tinyFFN, tinyVocab = 2, 256, 4, 2, 512, 512
)

// writeLlamaGGUF writes a GGUF v3 file of tinyLlama as llama.cpp names its
// tensors (src/llama-arch.cpp), with the 2-D weights in dt, the norms in
// F32 and the data zero-filled, and returns its path.
func writeLlamaGGUF(t *testing.T, dt gpumem.DType) string {
	t.Helper()
	id, ok := dt.GGUFType()
	require.True(t, ok, dt)
	type tensor struct {
		name string
		ne   []uint64
		typ  uint32
		dt   gpumem.DType
	}
	mat := func(name string, in, out uint64) tensor { return tensor{name, []uint64{in, out}, id, dt} }
	vec := func(name string, n uint64) tensor { return tensor{name, []uint64{n}, 0, gpumem.FP32} }
	ts := []tensor{mat("token_embd.weight", tinyHidden, tinyVocab), vec("output_norm.weight", tinyHidden), mat("output.weight", tinyHidden, tinyVocab)}
	kvDim := uint64(tinyKVHeads * tinyHidden / tinyHeads)
	for i := range tinyLayers {
		p := "blk." + string(rune('0'+i)) + "."
		ts = append(ts, vec(p+"attn_norm.weight", tinyHidden),
			mat(p+"attn_q.weight", tinyHidden, tinyHidden), mat(p+"attn_k.weight", tinyHidden, kvDim),
			mat(p+"attn_v.weight", tinyHidden, kvDim), mat(p+"attn_output.weight", tinyHidden, tinyHidden),
			vec(p+"ffn_norm.weight", tinyHidden), mat(p+"ffn_gate.weight", tinyHidden, tinyFFN),
			mat(p+"ffn_up.weight", tinyHidden, tinyFFN), mat(p+"ffn_down.weight", tinyFFN, tinyHidden))
	}
	var b []byte
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	kvs := []struct {
		key string
		val any
	}{
		{"general.architecture", "llama"}, {"general.name", "tiny-" + dt.String()},
		{"llama.block_count", uint32(tinyLayers)}, {"llama.embedding_length", uint32(tinyHidden)},
		{"llama.feed_forward_length", uint32(tinyFFN)}, {"llama.attention.head_count", uint32(tinyHeads)},
		{"llama.attention.head_count_kv", uint32(tinyKVHeads)}, {"llama.context_length", uint32(2048)},
	}
	u32(0x46554747) // "GGUF"
	u32(3)
	u64(uint64(len(ts)))
	u64(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.key)
		switch v := kv.val.(type) {
		case string:
			u32(8)
			str(v)
		case uint32:
			u32(4)
			u32(v)
		}
	}
	const align = 32
	var off uint64
	for _, tn := range ts {
		str(tn.name)
		u32(uint32(len(tn.ne)))
		n := uint64(1)
		for _, d := range tn.ne {
			u64(d)
			n *= d
		}
		u32(tn.typ)
		u64(off)
		be, bb := tn.dt.Block()
		size := n / uint64(be) * uint64(bb)
		off += (size + align - 1) / align * align
	}
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	b = append(b, make([]byte, off)...)
	path := filepath.Join(t.TempDir(), "tiny-"+dt.String()+".gguf")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// TestEstimateGGUFEveryType runs `estimate --gguf FILE --infer` on a GGUF
// file of each floating-point and quantized ggml type the reader knows:
// before an inference job stopped asking whether a tensor trains, every
// quantized file exited 2 with "a Q4_K tensor cannot be trained".
// Training the same file is still refused, and inspect counts no
// quantized tensor as trainable.
func TestEstimateGGUFEveryType(t *testing.T) {
	var n int
	for id := uint32(0); id < 64; id++ {
		dt, err := gpumem.DTypeFromGGUF(id)
		if err != nil || !dt.IsFloat() {
			continue
		}
		n++
		t.Run(dt.String(), func(t *testing.T) {
			path := writeLlamaGGUF(t, dt)
			var out, errOut bytes.Buffer
			code := run([]string{"estimate", "--gguf", path, "--infer", "--seq", "128", "--json"}, strings.NewReader(""), &out, &errOut)
			require.Equal(t, exitOK, code, errOut.String())
			var got map[string]any
			require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())

			if dt.IsQuantized() {
				out.Reset()
				errOut.Reset()
				code = run([]string{"estimate", "--gguf", path, "--train", "--seq", "128"}, strings.NewReader(""), &out, &errOut)
				assert.Equal(t, exitBadInput, code)
				assert.Contains(t, errOut.String(), "cannot be trained")

				out.Reset()
				errOut.Reset()
				code = run([]string{"inspect", "--gguf", path, "--json"}, strings.NewReader(""), &out, &errOut)
				require.Equal(t, exitOK, code, errOut.String())
				var r struct {
					Params          int64 `json:"params"`
					TrainableParams int64 `json:"trainable_params"`
				}
				require.NoError(t, json.Unmarshal(out.Bytes(), &r))
				// Only the F32 norms can train: 2 per block and output_norm,
				// (2·2 + 1) · 256 = 1,280 elements.
				assert.Equal(t, int64((2*tinyLayers+1)*tinyHidden), r.TrainableParams)
			}
		})
	}
	// F32, F16, BF16, F64 and the 29 block formats of dtype.go.
	assert.GreaterOrEqual(t, n, 30)
}
