package model

import (
	"errors"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// ggufKeptInts are the "<arch>." keys FromGGUF reads.
var ggufKeptInts = map[string]bool{
	"block_count": true, "embedding_length": true, "feed_forward_length": true,
	"attention.head_count": true, "attention.head_count_kv": true, "attention.key_length": true,
	"context_length": true, "attention.sliding_window": true, "expert_count": true,
	"expert_used_count": true, "vocab_size": true,
}

// ggufKeep tells which values of key FromGGUF keeps: integers of
// general.alignment and of the "<arch>." keys it reads, and the
// general.architecture and general.name strings.
func ggufKeep(key []byte) (keepInt, keepStr bool) {
	if len(key) > ggufMaxKeptKey {
		return false, false
	}
	switch string(key) {
	case "general.alignment":
		return true, false
	case "general.architecture", "general.name":
		return false, true
	}
	_, rest, ok := strings.Cut(string(key), ".")
	return ok && ggufKeptInts[rest], false
}

// ggufIndexField names the i-th metadata pair or tensor ("gguf.tensor[3]")
// before its key or name is read.
func ggufIndexField(what string, i uint64) string {
	return "gguf." + what + "[" + strconv.FormatUint(i, 10) + "]"
}

// ggufKeyField names a metadata pair by its key.
func ggufKeyField(key []byte) string {
	return "gguf.metadata[" + strconv.Quote(truncate(string(key))) + "]"
}

// ggufTensorField names a tensor by its name.
func ggufTensorField(name string) string { return "gguf.tensor[" + strconv.Quote(name) + "]" }

// FromGGUF reads the header of a GGUF file (version 2 or 3) of size
// bytes: its metadata and tensor infos. It returns the exact inventory
// (Spec.Inventory, with ggml's dimension order reversed to row-major and
// each tensor's ggml type, quantized ones included) and the architecture
// from the "<arch>.*" metadata keys: block_count, embedding_length,
// feed_forward_length, attention.head_count(_kv), attention.key_length,
// context_length, expert_count, expert_used_count,
// attention.sliding_window. Family is general.architecture.
//
// Counts and string lengths are bounded by the file size and by these
// limits before anything is allocated or skipped; a file beyond one is
// rejected with a *gpumem.FieldError naming the field or key and the
// value claimed:
//
//   - at most 65,536 metadata pairs (metadata_kv_count);
//   - a key of at most 64 KiB;
//   - a string value of at most 64 MiB (only general.architecture and
//     general.name are kept, each when at most 64 KiB);
//   - an array of at most 2^24 elements, nested at most 8 deep (array
//     payloads, such as tokenizer vocabularies, are skipped by length);
//   - at most 256 MiB of metadata pairs in all;
//   - at most 2^20 tensors, whose infos are kept as they are read (a
//     claimed tensor_count reserves room for at most 1,024);
//   - a tensor name of at most 63 bytes (ggml's GGML_MAX_NAME, 64, with
//     the terminating NUL) and at
//     most 4 dimensions (GGML_MAX_DIMS).
//
// Tensor offsets must be aligned (general.alignment, default 32) and
// follow each other as ggml lays them out, within the file. A nil r is
// an error of field "gguf".
//
// FromGGUF reads r in 64 KiB blocks and skips array payloads without
// reading past its buffer; it allocates once per tensor (its name) and a
// few times per file. Measured (BenchmarkFromGGUFLlama3: a Llama-3-8B
// Q4_K_M header of 7.76 MB, 128,256 tokens, 280,147 merges, 291 tensors,
// held in memory; Intel Xeon, 2 shared cores, linux/amd64, Go 1.26):
// 316 allocations and 2.5 ms at best, where a reader with a
// bufio.Reader and field names built for every tensor made 1,993 and
// took 16.9 ms.
func FromGGUF(r io.ReaderAt, size int64) (Spec, error) {
	if r == nil {
		return Spec{}, gpumem.Errorf("gguf", nil, gpumem.ErrInvalid, "nil reader")
	}
	if size < 0 {
		return Spec{}, gpumem.Errorf("gguf.size", size, gpumem.ErrInvalid, "negative file size")
	}
	g := newGGUFReader(r, size)
	fail := func(field string, value any, err error) (Spec, error) {
		if le := (*ggufLimitError)(nil); errors.As(err, &le) {
			return Spec{}, gpumem.Errorf(field, le.n, le.kind, "%v (at byte %d)", err, g.off())
		}
		kind := gpumem.ErrSyntax
		if !errors.Is(err, errGGUFShort) {
			kind = gpumem.ErrInvalid
		}
		return Spec{}, gpumem.Errorf(field, value, kind, "%v (at byte %d)", err, g.off())
	}
	magic, err := g.u32()
	if err != nil {
		return fail("gguf.magic", nil, err)
	}
	if magic != ggufMagic {
		return Spec{}, gpumem.Errorf("gguf.magic", magic, gpumem.ErrSyntax, "not a GGUF file")
	}
	version, err := g.u32()
	if err != nil {
		return fail("gguf.version", nil, err)
	}
	if version != 2 && version != 3 {
		return Spec{}, gpumem.Errorf("gguf.version", version, gpumem.ErrUnsupported, "only GGUF versions 2 and 3 are read")
	}
	nTensors, err := g.u64()
	if err != nil {
		return fail("gguf.tensor_count", nil, err)
	}
	nKV, err := g.u64()
	if err != nil {
		return fail("gguf.metadata_kv_count", nil, err)
	}
	// Smallest encodings: a KV is an 8-byte key length + type + 1 byte;
	// a tensor info is name length + n_dims + type + offset.
	if nKV > ggufMaxKV {
		return Spec{}, gpumem.Errorf("gguf.metadata_kv_count", nKV, gpumem.ErrRange, "above the limit of %d pairs", ggufMaxKV)
	}
	if nKV > uint64(g.remaining()/13) {
		return Spec{}, gpumem.Errorf("gguf.metadata_kv_count", nKV, gpumem.ErrRange, "more pairs than the %d-byte file can hold", size)
	}
	if nTensors > uint64(g.remaining()/24) || nTensors > maxTensors {
		return Spec{}, gpumem.Errorf("gguf.tensor_count", nTensors, gpumem.ErrRange, "more tensors than the %d-byte file can hold (or above %d)", size, maxTensors)
	}
	g.limit = min(size, ggufHeaderSize+ggufMaxMetadata)
	kv := map[string]ggufValue{}
	for i := uint64(0); i < nKV; i++ {
		// Field names are built only for an error.
		n, err := g.strLen("key length", ggufMaxKey, gpumem.ErrRange)
		if err != nil {
			return fail(ggufIndexField("metadata", i)+".key", nil, err)
		}
		key, err := g.bytes(n)
		if err != nil {
			return fail(ggufIndexField("metadata", i)+".key", n, err)
		}
		// The key outlives the buffer's bytes: reading its value may
		// refill the buffer.
		g.key = append(g.key[:0], key...)
		keepInt, keepStr := ggufKeep(g.key)
		keyStr := ""
		if keepInt || keepStr {
			keyStr = string(g.key)
		}
		typ, err := g.u32()
		if err != nil {
			return fail(ggufKeyField(g.key)+".type", nil, err)
		}
		v, err := g.value(typ, 0, keepStr)
		if err != nil {
			return fail(ggufKeyField(g.key), typ, err)
		}
		if (keepInt && v.isInt) || (keepStr && v.isStr) {
			kv[keyStr] = v
		}
	}
	g.limit = size
	alignment := int64(ggufDefaultAlignment)
	if v, ok := kv["general.alignment"]; ok {
		if !v.isInt || v.i <= 0 || v.i&(v.i-1) != 0 || v.i > 1<<30 {
			return Spec{}, gpumem.Errorf("gguf.metadata[\"general.alignment\"]", v.i, gpumem.ErrInvalid, "must be a power of two")
		}
		alignment = v.i
	}
	type info struct {
		t      gpumem.Tensor
		offset int64
	}
	// The claimed count reserves little: the slices grow as tensors are
	// actually read.
	infos := make([]info, 0, min(nTensors, ggufInitialTensors))
	seen := make(map[string]bool, min(nTensors, ggufInitialTensors))
	// Shapes are cut from shared slabs of ggufMaxDims per tensor, each
	// capped at its own length so that appending to one copies it.
	var dims []int64
	for i := uint64(0); i < nTensors; i++ {
		// ggml keeps a name in char[GGML_MAX_NAME] with its NUL:
		// gguf_init refuses one of GGML_MAX_NAME bytes or more.
		name, err := g.str("name length", ggufMaxName-1, gpumem.ErrInvalid)
		if err != nil {
			return fail(ggufIndexField("tensor", i)+".name", nil, err)
		}
		if seen[name] {
			return Spec{}, gpumem.Errorf(ggufTensorField(name), name, gpumem.ErrInvalid, "duplicate tensor name")
		}
		seen[name] = true
		nd, err := g.u32()
		if err != nil {
			return fail(ggufTensorField(name)+".n_dimensions", nil, err)
		}
		if nd > ggufMaxDims {
			return Spec{}, gpumem.Errorf(ggufTensorField(name)+".n_dimensions", nd, gpumem.ErrInvalid, "more than %d dimensions", ggufMaxDims)
		}
		if cap(dims)-len(dims) < int(nd) {
			dims = make([]int64, 0, ggufMaxDims*min(nTensors-i, ggufInitialTensors))
		}
		shape := dims[len(dims) : len(dims)+int(nd) : len(dims)+int(nd)]
		dims = dims[:len(dims)+int(nd)]
		for d := range shape {
			ne, err := g.u64()
			if err != nil {
				return fail(ggufTensorField(name)+".dimensions", nil, err)
			}
			if ne > math.MaxInt64 {
				return Spec{}, gpumem.Errorf(ggufTensorField(name)+".dimensions", ne, gpumem.ErrRange, "dimension exceeds int64")
			}
			shape[int(nd)-1-d] = int64(ne) // ggml ne[0] is the innermost
		}
		typ, err := g.u32()
		if err != nil {
			return fail(ggufTensorField(name)+".type", nil, err)
		}
		dt, err := gpumem.DTypeFromGGUF(typ)
		if err != nil {
			return Spec{}, gpumem.Errorf(ggufTensorField(name)+".type", typ, gpumem.ErrUnsupported, "unknown or removed ggml type")
		}
		off, err := g.u64()
		if err != nil {
			return fail(ggufTensorField(name)+".offset", nil, err)
		}
		if off > math.MaxInt64 || int64(off)%alignment != 0 {
			return Spec{}, gpumem.Errorf(ggufTensorField(name)+".offset", off, gpumem.ErrInvalid, "not a multiple of the alignment %d", alignment)
		}
		infos = append(infos, info{gpumem.Tensor{Name: name, Shape: shape, DType: dt}, int64(off)})
	}
	dataStart, ok := checked.CeilDiv(g.off(), alignment)
	if ok {
		dataStart, ok = checked.Mul(dataStart, alignment)
	}
	if !ok || dataStart > size {
		return Spec{}, gpumem.Errorf("gguf.tensor_data", dataStart, gpumem.ErrSyntax, "beyond the end of the %d-byte file", size)
	}
	// ggml (gguf.cpp) requires each tensor at the running offset, each
	// padded to the alignment, and the data within the file.
	inv := make([]gpumem.Tensor, len(infos))
	var at int64
	for i, in := range infos {
		b, err := in.t.Bytes()
		if err != nil {
			return Spec{}, gpumem.Errorf(ggufTensorField(in.t.Name)+".dimensions", in.t.Shape, gpumem.ErrInvalid, "%v", err)
		}
		if in.offset != at {
			return Spec{}, gpumem.Errorf(ggufTensorField(in.t.Name)+".offset", in.offset, gpumem.ErrInvalid, "want %d: tensors must follow each other", at)
		}
		padded, ok := checked.CeilDiv(int64(b), alignment)
		if ok {
			padded, ok = checked.Mul(padded, alignment)
		}
		var end int64
		if ok {
			end, ok = checked.Add(dataStart, in.offset)
		}
		if ok {
			end, ok = checked.Add(end, int64(b))
		}
		if !ok || end > size {
			return Spec{}, gpumem.Errorf(ggufTensorField(in.t.Name)+".offset", in.offset, gpumem.ErrSyntax, "%d bytes of data beyond the end of the %d-byte file", int64(b), size)
		}
		at += padded
		inv[i] = in.t
	}
	s := InferSpec(inv)
	if v, ok := kv["general.architecture"]; ok && v.isStr && v.s != "" {
		s.Family = v.s
	} else {
		s.Family = "gguf"
	}
	if v, ok := kv["general.name"]; ok && v.isStr {
		s.Name = v.s
	}
	arch := s.Family + "."
	num := func(key string) int64 {
		if v, ok := kv[arch+key]; ok && v.isInt && v.i > 0 && v.i <= maxDim {
			return v.i
		}
		return 0
	}
	if n := num("block_count"); n > 0 {
		s.Layers = n
	}
	if n := num("embedding_length"); n > 0 {
		s.Hidden = n
	}
	if n := num("feed_forward_length"); n > 0 {
		s.Intermediate = n
	}
	s.Heads = num("attention.head_count")
	s.KVHeads = num("attention.head_count_kv")
	if s.KVHeads == 0 {
		s.KVHeads = s.Heads
	}
	s.HeadDim = num("attention.key_length")
	if s.HeadDim == 0 && s.Heads > 0 {
		s.HeadDim = s.Hidden / s.Heads
	}
	s.MaxPositions = num("context_length")
	s.SlidingWindow = num("attention.sliding_window")
	if n := num("expert_count"); n > 0 {
		s.MoE.Experts = n
		s.MoE.Active = num("expert_used_count")
	}
	if n := num("vocab_size"); n > 0 && s.Vocab == 0 {
		s.Vocab = n
	}
	ggufFlags(&s, inv)
	return s, nil
}

// ggufFlags sets the gated-MLP flag and the norm kind from the tensor
// names llama.cpp gives them (src/llama-arch.cpp LLM_TENSOR_NAMES,
// ggml-org/llama.cpp at 5a44f27e): a block with "blk.N.ffn_gate" (or the
// experts' "ffn_gate_exps") runs a gated feed-forward (LLM_FFN_SILU with
// LLM_FFN_PAR in llm_build_llama); "blk.N.attn_norm" with an
// "attn_norm.bias" is a LayerNorm (gpt2, falcon), without one an RMSNorm
// (llama, mistral, qwen2, gemma: build_norm with LLM_NORM_RMS and a
// weight only). Names the reader does not recognise leave them as
// InferSpec set them.
func ggufFlags(s *Spec, inv []gpumem.Tensor) {
	var gate, norm, normBias bool
	for _, t := range inv {
		name, ok := strings.CutPrefix(t.Name, "blk.")
		if !ok {
			continue
		}
		_, rest, ok := strings.Cut(name, ".")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(rest, "ffn_gate.") || strings.HasPrefix(rest, "ffn_gate_exps."):
			gate = true
		case rest == "attn_norm.weight":
			norm = true
		case rest == "attn_norm.bias":
			normBias = true
		}
	}
	if gate {
		s.Gated = true
	}
	switch {
	case norm && normBias:
		s.Norm = LayerNorm
	case norm:
		s.Norm = RMSNorm
	}
}
