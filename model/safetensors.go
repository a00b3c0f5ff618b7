package model

import (
	"encoding/binary"
	"io"
	"sort"
	"strconv"

	"github.com/gpumem/gpumem"
)

// maxSafetensorsHeader is the reference parser's MAX_HEADER_SIZE
// (huggingface/safetensors safetensors/src/tensor.rs): a header above it
// is rejected before anything is allocated.
const maxSafetensorsHeader = 100_000_000

// Limits of the safetensors readers beyond the reference parser's, so
// that a header within the 100 MB cap cannot cost more than its size.
const (
	// maxSafetensorsTensors bounds the tensors of one file's header.
	// Published checkpoints of a few hundred GB (Qwen3-235B-A22B,
	// DeepSeek-V3) hold under 100,000 tensors across all their shards,
	// and a shard a few thousand.
	maxSafetensorsTensors = 1 << 17
	// maxSafetensorsRank bounds a tensor's dimensions; real
	// checkpoints have at most 5 (3-D convolution kernels).
	maxSafetensorsRank = 8
)

// safetensorsDTypes are the dtype names of the safetensors format (rust
// enum Dtype in safetensors/src/tensor.rs).
var safetensorsDTypes = map[string]gpumem.DType{
	"BOOL": gpumem.BOOL, "U8": gpumem.UINT8, "I8": gpumem.INT8, "I16": gpumem.INT16, "U16": gpumem.UINT16,
	"F16": gpumem.FP16, "BF16": gpumem.BF16, "I32": gpumem.INT32, "U32": gpumem.UINT32, "F32": gpumem.FP32,
	"F64": gpumem.FP64, "I64": gpumem.INT64, "U64": gpumem.UINT64, "C64": gpumem.C64,
	"F8_E5M2": gpumem.FP8E5M2, "F8_E4M3": gpumem.FP8E4M3, "F8_E8M0": gpumem.FP8E8M0,
	"F8_E4M3FNUZ": gpumem.FP8E4M3FNUZ, "F8_E5M2FNUZ": gpumem.FP8E5M2FNUZ,
	"F6_E2M3": gpumem.FP6E2M3, "F6_E3M2": gpumem.FP6E3M2, "F4": gpumem.FP4,
}

// stTensor is one header entry with its byte range.
type stTensor struct {
	t          gpumem.Tensor
	begin, end int64
}

// FromSafetensors reads the header of a .safetensors file of size bytes
// and returns its exact inventory: every tensor's name, shape and dtype
// (Spec.Inventory), with shape facts inferred from the names where they
// follow Hugging Face conventions (see [InferSpec]).
//
// Only the first 8 + N bytes are read, N being the header length, which
// must not exceed 100,000,000 (the reference parser's cap) or the file.
// The header is decoded as it is read, and refused at the first element
// past a bound: at most 131,072 (2^17) tensors, each of at most 8
// dimensions, every name given once. Every tensor's data_offsets must
// hold exactly dtype × shape bytes, and the tensors must tile the data
// buffer without holes or overlaps up to the end of the file, as the
// reference parser requires. Errors are *gpumem.FieldError values
// naming the tensor and its field ("safetensors[\"w\"].shape"); a nil r
// is an error of field "safetensors".
func FromSafetensors(r io.ReaderAt, size int64) (Spec, error) {
	if r == nil {
		return Spec{}, gpumem.Errorf("safetensors", nil, gpumem.ErrInvalid, "nil reader")
	}
	if size < 0 {
		return Spec{}, gpumem.Errorf("safetensors.size", size, gpumem.ErrInvalid, "negative file size")
	}
	ts, err := readSafetensors(io.NewSectionReader(r, 0, size), size, "safetensors")
	if err != nil {
		return Spec{}, err
	}
	inv := make([]gpumem.Tensor, len(ts))
	for i, t := range ts {
		inv[i] = t.t
	}
	s := InferSpec(inv)
	if s.Family == "" {
		s.Family = "safetensors"
	}
	return s, nil
}

// readSafetensors parses a safetensors header from r, the start of a
// file of size bytes. field prefixes error fields ("safetensors",
// "shard(model-00001-of-00002.safetensors)").
func readSafetensors(r io.Reader, size int64, field string) ([]stTensor, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, gpumem.Errorf(field+".header_length", size, gpumem.ErrSyntax, "file of %d bytes is shorter than the 8-byte header length", size)
	}
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, gpumem.Errorf(field+".header_length", nil, gpumem.ErrSyntax, "reading: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxSafetensorsHeader {
		return nil, gpumem.Errorf(field+".header_length", n, gpumem.ErrRange, "exceeds the %d-byte cap", maxSafetensorsHeader)
	}
	if int64(n) > size-8 {
		return nil, gpumem.Errorf(field+".header_length", n, gpumem.ErrSyntax, "beyond the end of the %d-byte file", size)
	}
	js := newJSONScanner(io.LimitReader(r, int64(n)), field+".header")
	if len(js.head) == 0 || js.head[0] != '{' {
		return nil, gpumem.Errorf(field+".header", js.head, gpumem.ErrSyntax, "does not start with '{'")
	}
	var ts []stTensor
	seen := map[string]bool{}
	sawMeta := false
	err := js.object(field+".header", "a JSON object", func(name string) error {
		if name == "__metadata__" {
			if sawMeta {
				return gpumem.Errorf(field+".__metadata__", nil, gpumem.ErrSyntax, "given twice")
			}
			sawMeta = true
			return js.stringMap(field+".__metadata__", func(string, string) error { return nil })
		}
		if len(ts) == maxSafetensorsTensors {
			return gpumem.Errorf(field+".header", len(ts)+1, gpumem.ErrRange, "more than %d tensors", maxSafetensorsTensors)
		}
		if seen[name] {
			return gpumem.Errorf(field+"["+strconv.Quote(name)+"]", name, gpumem.ErrInvalid, "duplicate tensor name")
		}
		seen[name] = true
		t, err := js.stEntry(field, name)
		if err != nil {
			return err
		}
		ts = append(ts, t)
		return nil
	})
	if err == nil {
		err = js.end()
	}
	if err != nil {
		return nil, err
	}
	// The reference parser sorts by offsets and requires the tensors to
	// tile [0, buffer length) exactly.
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].begin != ts[j].begin {
			return ts[i].begin < ts[j].begin
		}
		if ts[i].end != ts[j].end {
			return ts[i].end < ts[j].end
		}
		return ts[i].t.Name < ts[j].t.Name
	})
	var at int64
	for _, t := range ts {
		if t.begin != at {
			return nil, gpumem.Errorf(field+"["+strconv.Quote(t.t.Name)+"].data_offsets", []int64{t.begin, t.end}, gpumem.ErrInvalid,
				"starts at %d, want %d: the buffer has a hole or an overlap", t.begin, at)
		}
		at = t.end
	}
	if data := size - 8 - int64(n); at != data {
		return nil, gpumem.Errorf(field+".data_offsets", at, gpumem.ErrInvalid,
			"tensors end at byte %d of a %d-byte data buffer", at, data)
	}
	return ts, nil
}

// stEntry reads one tensor's entry, an object of dtype, shape and
// data_offsets (other keys are skipped, as the reference parser does).
// Field names are built only for errors.
func (s *jsonScanner) stEntry(field, name string) (stTensor, error) {
	f := func(key string) string {
		if key == "" {
			return field + "[" + strconv.Quote(name) + "]"
		}
		return field + "[" + strconv.Quote(name) + "]." + key
	}
	var dtype string
	var haveDType bool
	var shape, offsets []int64
	c, err := s.peek()
	if err != nil {
		return stTensor{}, err
	}
	if c != '{' {
		return stTensor{}, gpumem.Errorf(f(""), describe(c), gpumem.ErrSyntax, "want a tensor entry: an object with dtype, shape and data_offsets")
	}
	err = s.object("", "", func(key string) error {
		var err error
		switch key {
		case "dtype":
			if haveDType {
				return gpumem.Errorf(f(key), nil, gpumem.ErrSyntax, "given twice")
			}
			c, err := s.peek()
			if err != nil {
				return err
			}
			if c != '"' {
				return gpumem.Errorf(f(key), describe(c), gpumem.ErrSyntax, "want a string")
			}
			dtype, err = s.str(true)
			haveDType = true
			return err
		case "shape":
			if shape != nil {
				return gpumem.Errorf(f(key), nil, gpumem.ErrSyntax, "given twice")
			}
			shape, err = s.ints(f, key, maxSafetensorsRank, gpumem.ErrRange, "more than "+strconv.Itoa(maxSafetensorsRank)+" dimensions")
		case "data_offsets":
			if offsets != nil {
				return gpumem.Errorf(f(key), nil, gpumem.ErrSyntax, "given twice")
			}
			offsets, err = s.ints(f, key, 2, gpumem.ErrSyntax, "want [begin, end]")
		default:
			err = s.skip(1)
		}
		return err
	})
	if err != nil {
		return stTensor{}, err
	}
	var dt *string
	if haveDType {
		dt = &dtype
	}
	return checkSTEntry(f, name, dt, shape, offsets)
}

// checkSTEntry checks one entry's fields against each other; f names
// them.
func checkSTEntry(f func(key string) string, name string, dtype *string, shape, offsets []int64) (stTensor, error) {
	if dtype == nil {
		return stTensor{}, gpumem.Errorf(f("dtype"), nil, gpumem.ErrSyntax, "missing")
	}
	dt, ok := safetensorsDTypes[*dtype]
	if !ok {
		return stTensor{}, gpumem.Errorf(f("dtype"), *dtype, gpumem.ErrUnsupported, "not a safetensors dtype")
	}
	if shape == nil {
		return stTensor{}, gpumem.Errorf(f("shape"), nil, gpumem.ErrSyntax, "missing")
	}
	if len(offsets) != 2 {
		return stTensor{}, gpumem.Errorf(f("data_offsets"), offsets, gpumem.ErrSyntax, "want [begin, end]")
	}
	begin, end := offsets[0], offsets[1]
	if begin < 0 || end < begin {
		return stTensor{}, gpumem.Errorf(f("data_offsets"), offsets, gpumem.ErrInvalid, "want 0 <= begin <= end")
	}
	t := gpumem.Tensor{Name: name, Shape: shape, DType: dt}
	elems, err := t.Elems()
	if err != nil {
		return stTensor{}, gpumem.Errorf(f("shape"), shape, gpumem.ErrInvalid, "%v", err)
	}
	if be, _ := dt.Block(); be > 1 && elems%be != 0 {
		// safetensors: n_elements × bitsize must be whole bytes.
		return stTensor{}, gpumem.Errorf(f("shape"), shape, gpumem.ErrInvalid, "%d elements of %s are not a whole number of bytes", elems, *dtype)
	}
	want, err := dt.Size(elems)
	if err != nil {
		return stTensor{}, gpumem.Errorf(f("shape"), shape, gpumem.ErrRange, "%v", err)
	}
	if end-begin != int64(want) {
		return stTensor{}, gpumem.Errorf(f("data_offsets"), offsets, gpumem.ErrInvalid,
			"hold %d bytes, but %s %v takes %d", end-begin, *dtype, shape, int64(want))
	}
	return stTensor{t: t, begin: begin, end: end}, nil
}
