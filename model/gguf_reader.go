package model

// The bounded GGUF reader: the header's limits, its value types and
// buffered reads.

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
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
