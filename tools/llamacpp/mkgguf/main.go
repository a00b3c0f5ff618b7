// Command mkgguf writes a GGUF file (version 3) of a llama-architecture
// model of the given shape (or, with -arch, a gemma2 or gemma3 one: the
// sliding-window architectures, with their <arch>.attention.sliding_window
// and key_length keys and the extra norms of llama.cpp's gemma2 and gemma3
// graphs: post_attention_norm, post_ffw_norm, and gemma3's attn_q_norm and
// attn_k_norm): the metadata llama.cpp needs to load it (the
// <arch>.* hyperparameters and a SentencePiece-style vocabulary of
// placeholder tokens with the 256 byte tokens), the tensors of
// llm_build_llama with their llama.cpp names and ggml types, and zero
// weights. The data section is written as a hole (the file is sparse),
// so a header of an 8B model takes a few MB of disk.
//
// The tensor types follow llama-quantize: -type f32, f16 or q8_0 store
// every matrix in that type; q4_k_m stores them in Q4_K, output.weight
// in Q6_K and attn_v and ffn_down in Q6_K in the layers where
// use_more_bits holds (i < n/8, i >= 7n/8, (i − n/8) % 3 == 2:
// src/llama-quant.cpp llama_tensor_get_type). Norms are F32.
//
//	go run ./tools/llamacpp/mkgguf -o llama-3.1-8b-q4km.gguf -name Meta-Llama-3.1-8B-Instruct \
//	    -layers 32 -embd 4096 -ff 14336 -heads 32 -kv-heads 8 -vocab 128256 -ctx 131072 -type q4_k_m
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
)

const (
	ggmlF32  = 0
	ggmlF16  = 1
	ggmlQ8_0 = 8
	ggmlQ4_K = 12
	ggmlQ6_K = 14
)

// rowBytes is the bytes of a row of n elements of type t.
func rowBytes(t uint32, n uint64) uint64 {
	switch t {
	case ggmlF32:
		return 4 * n
	case ggmlF16:
		return 2 * n
	case ggmlQ8_0:
		return n / 32 * 34
	case ggmlQ4_K:
		return n / 256 * 144
	case ggmlQ6_K:
		return n / 256 * 210
	}
	panic("type")
}

type tensor struct {
	name string
	ne   []uint64 // ggml order: ne[0] is the row length
	typ  uint32
}

func (t tensor) bytes() uint64 {
	rows := uint64(1)
	for _, d := range t.ne[1:] {
		rows *= d
	}
	return rows * rowBytes(t.typ, t.ne[0])
}

type writer struct {
	w   *bufio.Writer
	n   uint64
	err error
}

func (w *writer) raw(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
		w.n += uint64(len(b))
	}
}
func (w *writer) u32(v uint32) { w.raw(binary.LittleEndian.AppendUint32(nil, v)) }
func (w *writer) u64(v uint64) { w.raw(binary.LittleEndian.AppendUint64(nil, v)) }
func (w *writer) str(s string) { w.u64(uint64(len(s))); w.raw([]byte(s)) }

type kv struct {
	key string
	val any
}

func (w *writer) kv(k kv) {
	w.str(k.key)
	switch v := k.val.(type) {
	case uint32:
		w.u32(4)
		w.u32(v)
	case float32:
		w.u32(6)
		w.raw(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)))
	case string:
		w.u32(8)
		w.str(v)
	case []string:
		w.u32(9)
		w.u32(8)
		w.u64(uint64(len(v)))
		for _, s := range v {
			w.str(s)
		}
	case []float32:
		w.u32(9)
		w.u32(6)
		w.u64(uint64(len(v)))
		for _, f := range v {
			w.raw(binary.LittleEndian.AppendUint32(nil, math.Float32bits(f)))
		}
	case []int32:
		w.u32(9)
		w.u32(5)
		w.u64(uint64(len(v)))
		for _, x := range v {
			w.u32(uint32(x))
		}
	default:
		panic(k.key)
	}
}

func main() {
	out := flag.String("o", "", "output file")
	name := flag.String("name", "synthetic-llama", "general.name")
	layers := flag.Uint64("layers", 2, "block_count")
	embd := flag.Uint64("embd", 256, "embedding_length")
	ff := flag.Uint64("ff", 512, "feed_forward_length")
	heads := flag.Uint64("heads", 4, "attention.head_count")
	kvHeads := flag.Uint64("kv-heads", 2, "attention.head_count_kv")
	vocab := flag.Uint64("vocab", 512, "tokens (at least 259)")
	ctx := flag.Uint64("ctx", 4096, "context_length")
	typ := flag.String("type", "f16", "f32, f16, q8_0 or q4_k_m")
	tied := flag.Bool("tied", false, "no output.weight (the output layer reuses token_embd)")
	arch := flag.String("arch", "llama", "llama, gemma2 or gemma3")
	swa := flag.Uint64("swa", 0, "with -arch gemma2 or gemma3: attention.sliding_window")
	headDimFlag := flag.Uint64("head-dim", 0, "attention.key_length and value_length (default embd / heads)")
	flag.Parse()
	if *arch != "llama" && *arch != "gemma2" && *arch != "gemma3" {
		fmt.Fprintln(os.Stderr, "mkgguf: -arch: want llama, gemma2 or gemma3")
		os.Exit(2)
	}
	if *arch != "llama" && *swa == 0 {
		fmt.Fprintln(os.Stderr, "mkgguf: -arch "+*arch+" needs -swa, the sliding window")
		os.Exit(2)
	}
	if *out == "" || *vocab < 259 || *heads == 0 || *embd%*heads != 0 {
		fmt.Fprintln(os.Stderr, "mkgguf: give -o, -vocab of at least 259, and -embd a multiple of -heads")
		os.Exit(2)
	}
	var mat, outType uint32
	q4km := false
	switch *typ {
	case "f32":
		mat = ggmlF32
	case "f16":
		mat = ggmlF16
	case "q8_0":
		mat = ggmlQ8_0
	case "q4_k_m":
		mat, q4km = ggmlQ4_K, true
	default:
		fmt.Fprintln(os.Stderr, "mkgguf: -type: want f32, f16, q8_0 or q4_k_m")
		os.Exit(2)
	}
	outType = mat
	if q4km {
		outType = ggmlQ6_K
	}
	n, e, f := *layers, *embd, *ff
	headDim := e / *heads
	if *headDimFlag > 0 {
		headDim = *headDimFlag
	}
	kvDim := headDim * *kvHeads
	qDim := headDim * *heads

	tokens := make([]string, *vocab)
	scores := make([]float32, *vocab)
	types := make([]int32, *vocab)
	tokens[0], tokens[1], tokens[2] = "<unk>", "<s>", "</s>"
	types[0], types[1], types[2] = 2, 3, 3 // UNKNOWN, CONTROL
	for i := 0; i < 256; i++ {
		tokens[3+i] = fmt.Sprintf("<0x%02X>", i)
		types[3+i] = 6 // BYTE
	}
	for i := 259; i < len(tokens); i++ {
		tokens[i] = fmt.Sprintf("▁t%d", i)
		types[i] = 1 // NORMAL
		scores[i] = -float32(i)
	}
	a := *arch + "."
	kvs := []kv{
		{"general.architecture", *arch},
		{"general.name", *name},
		{a + "block_count", uint32(n)},
		{a + "context_length", uint32(*ctx)},
		{a + "embedding_length", uint32(e)},
		{a + "feed_forward_length", uint32(f)},
		{a + "attention.head_count", uint32(*heads)},
		{a + "attention.head_count_kv", uint32(*kvHeads)},
		{a + "rope.freq_base", float32(500000)},
		{a + "attention.layer_norm_rms_epsilon", float32(1e-5)},
		{a + "rope.dimension_count", uint32(headDim)},
		{a + "vocab_size", uint32(*vocab)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.bos_token_id", uint32(1)},
		{"tokenizer.ggml.eos_token_id", uint32(2)},
		{"tokenizer.ggml.unknown_token_id", uint32(0)},
		{"general.alignment", uint32(32)},
	}
	if *arch != "llama" {
		kvs = append(kvs, kv{a + "attention.sliding_window", uint32(*swa)},
			kv{a + "attention.key_length", uint32(headDim)}, kv{a + "attention.value_length", uint32(headDim)})
	}
	var ts []tensor
	if !*tied {
		ts = append(ts, tensor{"output.weight", []uint64{e, *vocab}, outType})
	}
	ts = append(ts, tensor{"output_norm.weight", []uint64{e}, ggmlF32},
		tensor{"token_embd.weight", []uint64{e, *vocab}, mat})
	for i := uint64(0); i < n; i++ {
		more := mat
		if q4km && (i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2) {
			more = ggmlQ6_K
		}
		p := fmt.Sprintf("blk.%d.", i)
		if *arch == "gemma3" {
			ts = append(ts, tensor{p + "attn_k_norm.weight", []uint64{headDim}, ggmlF32},
				tensor{p + "attn_q_norm.weight", []uint64{headDim}, ggmlF32})
		}
		if *arch != "llama" {
			ts = append(ts, tensor{p + "post_attention_norm.weight", []uint64{e}, ggmlF32},
				tensor{p + "post_ffw_norm.weight", []uint64{e}, ggmlF32})
		}
		ts = append(ts,
			tensor{p + "attn_k.weight", []uint64{e, kvDim}, mat},
			tensor{p + "attn_norm.weight", []uint64{e}, ggmlF32},
			tensor{p + "attn_output.weight", []uint64{qDim, e}, mat},
			tensor{p + "attn_q.weight", []uint64{e, qDim}, mat},
			tensor{p + "attn_v.weight", []uint64{e, kvDim}, more},
			tensor{p + "ffn_down.weight", []uint64{f, e}, more},
			tensor{p + "ffn_gate.weight", []uint64{e, f}, mat},
			tensor{p + "ffn_norm.weight", []uint64{e}, ggmlF32},
			tensor{p + "ffn_up.weight", []uint64{e, f}, mat})
	}
	file, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkgguf:", err)
		os.Exit(1)
	}
	w := &writer{w: bufio.NewWriterSize(file, 1<<20)}
	w.raw([]byte("GGUF"))
	w.u32(3)
	w.u64(uint64(len(ts)))
	w.u64(uint64(len(kvs)))
	for _, k := range kvs {
		w.kv(k)
	}
	const align = 32
	var off uint64
	for _, t := range ts {
		w.str(t.name)
		w.u32(uint32(len(t.ne)))
		for _, d := range t.ne {
			w.u64(d)
		}
		w.u32(t.typ)
		w.u64(off)
		off += (t.bytes() + align - 1) / align * align
	}
	if pad := (align - w.n%align) % align; pad > 0 {
		w.raw(make([]byte, pad))
	}
	if w.err == nil {
		w.err = w.w.Flush()
	}
	if w.err == nil {
		w.err = file.Truncate(int64(w.n + off)) // the zero weights, as a hole
	}
	if cerr := file.Close(); w.err == nil {
		w.err = cerr
	}
	if w.err != nil {
		fmt.Fprintln(os.Stderr, "mkgguf:", w.err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d tensors, %d bytes of header, %d of data\n", *out, len(ts), w.n, off)
}
