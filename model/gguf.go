package model

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// GGUF format constants (ggml-org/ggml docs/gguf.md; ggml.h
// GGML_MAX_DIMS, GGML_MAX_NAME).
const (
	ggufMagic            = 0x46554747 // "GGUF" little-endian
	ggufDefaultAlignment = 32
	ggufMaxDims          = 4
	ggufMaxName          = 64
	ggufMaxDepth         = 8 // nested arrays
	ggufMaxKeptString    = 1 << 16
	ggufHeaderSize       = 24 // magic, version, tensor_count, metadata_kv_count
)

// Limits of FromGGUF, each checked before anything is allocated or
// skipped. Real files are far below them: a few dozen keys of under 64
// bytes, a vocabulary of at most a few hundred thousand tokens, chat
// templates of tens of KiB, under 50 MB of metadata in all.
const (
	// ggufMaxKey bounds the length of a metadata key.
	ggufMaxKey = 64 << 10
	// ggufMaxString bounds one metadata string value; it leaves room
	// for a whole tokenizer.json stored as tokenizer.huggingface.json
	// (gguf.md), tens of MB for a vocabulary of 256k tokens.
	ggufMaxString = 64 << 20
	// ggufMaxArray bounds the elements of one metadata array (the
	// largest are vocabularies and BPE merges: under 10^6).
	ggufMaxArray = 1 << 24
	// ggufMaxKV bounds metadata_kv_count.
	ggufMaxKV = 1 << 16
	// ggufMaxMetadata bounds the bytes of all metadata pairs together.
	ggufMaxMetadata = 256 << 20
	// ggufMaxKeptKey bounds the keys whose values FromGGUF keeps;
	// longer keys are read and dropped.
	ggufMaxKeptKey = 256
	// ggufInitialTensors bounds the room reserved for tensor_count
	// tensors before they are read.
	ggufInitialTensors = 1024
)

// GGUF metadata value types (gguf.md "gguf_metadata_value_type").
const (
	ggufU8 uint32 = iota
	ggufI8
	ggufU16
	ggufI16
	ggufU32
	ggufI32
	ggufF32
	ggufBool
	ggufString
	ggufArray
	ggufU64
	ggufI64
	ggufF64
)

var ggufFixedSize = [...]int64{ggufU8: 1, ggufI8: 1, ggufU16: 2, ggufI16: 2, ggufU32: 4, ggufI32: 4,
	ggufF32: 4, ggufBool: 1, ggufString: 0, ggufArray: 0, ggufU64: 8, ggufI64: 8, ggufF64: 8}

// ggufReader reads a GGUF header sequentially, never past size, nor
// past limit (the end of the metadata while it is read). It reads r
// through its own buffer: small reads decode from the buffer without
// an allocation or a call through an interface, and skips past the
// buffer move the offset without reading what they skip.
type ggufReader struct {
	r        io.ReaderAt
	buf      []byte // buf[pos:end] holds the file's bytes from base+pos on
	pos, end int
	base     int64 // file offset of buf[0]
	size     int64
	limit    int64
	key      []byte // the metadata key being read, for error messages
}

// ggufBufSize is the reader's buffer: it holds the longest read FromGGUF
// makes (a key of ggufMaxKey, a kept string of ggufMaxKeptString bytes).
const ggufBufSize = max(ggufMaxKey, ggufMaxKeptString)

func newGGUFReader(r io.ReaderAt, size int64) *ggufReader {
	return &ggufReader{r: r, buf: make([]byte, min(size, ggufBufSize)), size: size, limit: size}
}

var errGGUFShort = errors.New("unexpected end of file")

// ggufLimitError is a length or count above one of FromGGUF's limits.
type ggufLimitError struct {
	n    uint64 // the value claimed
	kind error  // gpumem.ErrRange, or gpumem.ErrInvalid for ggml's own bounds
	msg  string
}

func (e *ggufLimitError) Error() string { return e.msg }

// bound returns a *ggufLimitError when n, a what counted in units,
// exceeds limit.
func bound(what string, n uint64, limit int64, units string, kind error) error {
	if n > uint64(limit) {
		return &ggufLimitError{n: n, kind: kind, msg: what + " exceeds the limit of " + strconv.FormatInt(limit, 10) + " " + units}
	}
	return nil
}

// off is the offset of the next byte to read.
func (g *ggufReader) off() int64 { return g.base + int64(g.pos) }

func (g *ggufReader) remaining() int64 { return g.size - g.off() }

// need checks that n more bytes are in the file and within the limit.
func (g *ggufReader) need(n int64) error {
	if n < 0 || n > g.remaining() {
		return errGGUFShort
	}
	if n > g.limit-g.off() {
		return &ggufLimitError{n: uint64(n), kind: gpumem.ErrRange, msg: strconv.FormatInt(n, 10) + " more bytes of metadata after " +
			strconv.FormatInt(g.off()-ggufHeaderSize, 10) + " exceed the limit of " + strconv.Itoa(ggufMaxMetadata) + " bytes in all"}
	}
	return nil
}

// fill makes n ≤ len(buf) bytes, which need has checked are in the file,
// available at buf[pos:].
func (g *ggufReader) fill(n int) error {
	if g.end-g.pos >= n {
		return nil
	}
	k := copy(g.buf, g.buf[g.pos:g.end])
	g.base += int64(g.pos)
	g.pos, g.end = 0, k
	for g.end < n {
		want := min(int64(len(g.buf)-g.end), g.size-g.base-int64(g.end))
		if want <= 0 {
			return errGGUFShort
		}
		m, err := g.r.ReadAt(g.buf[g.end:g.end+int(want)], g.base+int64(g.end))
		if m <= 0 || int64(m) > want {
			return errGGUFShort
		}
		g.end += m
		if err != nil && g.end < n {
			return errGGUFShort
		}
	}
	return nil
}

// bytes reads n bytes; the slice is valid until the next read. Callers
// bound n first (by ggufBufSize at most).
func (g *ggufReader) bytes(n int64) ([]byte, error) {
	if err := g.need(n); err != nil {
		return nil, err
	}
	if n > int64(len(g.buf)) {
		return nil, errors.New("read of " + strconv.FormatInt(n, 10) + " bytes exceeds the reader's buffer")
	}
	if err := g.fill(int(n)); err != nil {
		return nil, err
	}
	b := g.buf[g.pos : g.pos+int(n)]
	g.pos += int(n)
	return b, nil
}

// skip moves n bytes ahead; past the buffer it reads nothing.
func (g *ggufReader) skip(n int64) error {
	if err := g.need(n); err != nil {
		return err
	}
	if n <= int64(g.end-g.pos) {
		g.pos += int(n)
		return nil
	}
	g.base = g.off() + n
	g.pos, g.end = 0, 0
	return nil
}

func (g *ggufReader) u32() (uint32, error) {
	if g.end-g.pos >= 4 && g.off()+4 <= g.limit {
		v := binary.LittleEndian.Uint32(g.buf[g.pos:])
		g.pos += 4
		return v, nil
	}
	b, err := g.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (g *ggufReader) u64() (uint64, error) {
	if g.end-g.pos >= 8 && g.off()+8 <= g.limit {
		v := binary.LittleEndian.Uint64(g.buf[g.pos:])
		g.pos += 8
		return v, nil
	}
	b, err := g.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// strLen reads a string length and bounds it by limit (reported as
// what) and then by the bytes left.
func (g *ggufReader) strLen(what string, limit int64, kind error) (int64, error) {
	n, err := g.u64()
	if err != nil {
		return 0, err
	}
	if err := bound(what, n, limit, "bytes", kind); err != nil {
		return 0, err
	}
	if n > uint64(g.remaining()) {
		return 0, errGGUFShort
	}
	return int64(n), nil
}

// str reads a string of at most limit bytes.
func (g *ggufReader) str(what string, limit int64, kind error) (string, error) {
	n, err := g.strLen(what, limit, kind)
	if err != nil {
		return "", err
	}
	b, err := g.bytes(n)
	return string(b), err
}

// skipStrings skips n strings of an array, each bounded as value bounds
// a string. Strings wholly in the buffer and within the limit are
// skipped in place; the others take strLen and skip.
func (g *ggufReader) skipStrings(n uint64) error {
	for i := uint64(0); i < n; i++ {
		// The buffered bytes within the limit end at stop.
		buf, pos, stop := g.buf, g.pos, g.end
		if lim := g.limit - g.base; lim < int64(stop) {
			stop = int(max(lim, 0))
		}
		for ; i < n && pos+8 <= stop; i++ {
			l := binary.LittleEndian.Uint64(buf[pos:])
			if l > uint64(stop-pos-8) {
				break
			}
			pos += 8 + int(l)
		}
		g.pos = pos
		if i == n {
			break
		}
		l, err := g.strLen("string length", ggufMaxString, gpumem.ErrRange)
		if err != nil {
			return err
		}
		if err := g.skip(l); err != nil {
			return err
		}
	}
	return nil
}

// ggufValue is a scalar metadata value kept for the architecture.
type ggufValue struct {
	i     int64
	isInt bool
	s     string
	isStr bool
}

// value reads (or skips) one value of type typ. It keeps integers, and
// strings of at most ggufMaxKeptString bytes when keepStr; arrays are
// skipped by length.
func (g *ggufReader) value(typ uint32, depth int, keepStr bool) (ggufValue, error) {
	switch typ {
	case ggufU8, ggufI8, ggufU16, ggufI16, ggufU32, ggufI32, ggufU64, ggufI64:
		size := ggufFixedSize[typ]
		b, err := g.bytes(size)
		if err != nil {
			return ggufValue{}, err
		}
		var v int64
		switch typ {
		case ggufU8:
			v = int64(b[0])
		case ggufI8:
			v = int64(int8(b[0]))
		case ggufU16:
			v = int64(binary.LittleEndian.Uint16(b))
		case ggufI16:
			v = int64(int16(binary.LittleEndian.Uint16(b)))
		case ggufU32:
			v = int64(binary.LittleEndian.Uint32(b))
		case ggufI32:
			v = int64(int32(binary.LittleEndian.Uint32(b)))
		case ggufU64:
			u := binary.LittleEndian.Uint64(b)
			if u > math.MaxInt64 {
				return ggufValue{}, nil
			}
			v = int64(u)
		case ggufI64:
			v = int64(binary.LittleEndian.Uint64(b))
		}
		return ggufValue{i: v, isInt: true}, nil
	case ggufF32, ggufF64, ggufBool:
		return ggufValue{}, g.skip(ggufFixedSize[typ])
	case ggufString:
		n, err := g.strLen("string length", ggufMaxString, gpumem.ErrRange)
		if err != nil {
			return ggufValue{}, err
		}
		if !keepStr || n > ggufMaxKeptString {
			return ggufValue{}, g.skip(n)
		}
		b, err := g.bytes(n)
		return ggufValue{s: string(b), isStr: true}, err
	case ggufArray:
		if depth >= ggufMaxDepth {
			return ggufValue{}, errors.New("arrays nested too deep")
		}
		et, err := g.u32()
		if err != nil {
			return ggufValue{}, err
		}
		n, err := g.u64()
		if err != nil {
			return ggufValue{}, err
		}
		if err := bound("array length", n, ggufMaxArray, "elements", gpumem.ErrRange); err != nil {
			return ggufValue{}, err
		}
		switch {
		case et >= uint32(len(ggufFixedSize)):
			return ggufValue{}, errors.New("unknown array element type " + strconv.FormatUint(uint64(et), 10))
		case ggufFixedSize[et] > 0:
			// n ≤ 2^24 elements of at most 8 bytes: no overflow.
			return ggufValue{}, g.skip(int64(n) * ggufFixedSize[et])
		default:
			// Strings (8-byte length each) or nested arrays (12-byte
			// header each): the count is bounded by the bytes left.
			if n > uint64(g.remaining()/8) {
				return ggufValue{}, errGGUFShort
			}
			if et == ggufString {
				return ggufValue{}, g.skipStrings(n)
			}
			for i := uint64(0); i < n; i++ {
				if _, err := g.value(et, depth+1, false); err != nil {
					return ggufValue{}, err
				}
			}
			return ggufValue{}, nil
		}
	}
	return ggufValue{}, errors.New("unknown value type " + strconv.FormatUint(uint64(typ), 10))
}

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
