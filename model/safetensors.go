package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

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

// maxJSONDepth bounds the nesting of the values the safetensors readers
// skip (serde_json's recursion limit).
const maxJSONDepth = 128

// jsonScanner reads one JSON document (RFC 8259) from a stream without
// holding any value whole, so that every count and length is checked as
// it grows. Malformed JSON is an ErrSyntax error of the whole document
// (field); a well-formed value of the wrong type is one of the field
// that wanted it.
type jsonScanner struct {
	r     io.Reader
	err   error  // the reader's error, once it has returned one
	arr   []byte // the window's storage
	win   []byte // bytes read and not yet scanned from pos
	pos   int
	off   int64  // bytes before win[0]
	field string // "safetensors.header", "index"
	head  string // the document's first bytes, the value of its syntax errors
	tok   []byte // scratch for a string or number spanning windows
}

func newJSONScanner(r io.Reader, field string) *jsonScanner {
	s := &jsonScanner{r: r, arr: make([]byte, 64<<10), field: field}
	s.fill()
	s.head = truncate(string(s.win[:min(len(s.win), 64)]))
	return s
}

// fill reads the next window once win is scanned; false at the end.
func (s *jsonScanner) fill() bool {
	if s.pos < len(s.win) {
		return true
	}
	s.off += int64(len(s.win))
	s.win, s.pos = s.win[:0], 0
	for s.err == nil {
		n, err := s.r.Read(s.arr)
		s.err = err
		if n > 0 {
			s.win = s.arr[:n]
			return true
		}
	}
	return false
}

func (s *jsonScanner) syntax(format string, args ...any) error {
	return gpumem.Errorf(s.field, s.head, gpumem.ErrSyntax, "invalid JSON at byte %d: "+format, append([]any{s.off + int64(s.pos)}, args...)...)
}

// peek skips white space and returns the next byte, not consumed.
func (s *jsonScanner) peek() (byte, error) {
	for {
		for ; s.pos < len(s.win); s.pos++ {
			if c := s.win[s.pos]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				return c, nil
			}
		}
		if !s.fill() {
			return 0, s.syntax("unexpected end")
		}
	}
}

// end checks that only white space follows the document's value.
func (s *jsonScanner) end() error {
	if c, err := s.peek(); err == nil {
		return s.syntax("%q after the top-level value", c)
	}
	return nil
}

// describe names the kind of value starting with c, for type errors.
func describe(c byte) string {
	switch {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == '-' || '0' <= c && c <= '9':
		return "number"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	}
	return strconv.QuoteRune(rune(c))
}

// open consumes the opening delimiter want of the value of field, or
// returns a type error wanting what.
func (s *jsonScanner) open(want byte, field, what string) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c != want {
		return gpumem.Errorf(field, describe(c), gpumem.ErrSyntax, "want %s", what)
	}
	s.pos++
	return nil
}

// more reads the separator after an element of an object or array
// closed by close: true for ',', false for close.
func (s *jsonScanner) more(close byte) (bool, error) {
	c, err := s.peek()
	if err != nil {
		return false, err
	}
	s.pos++
	switch c {
	case ',':
		return true, nil
	case close:
		return false, nil
	}
	return false, s.syntax("%q where ',' or %q belongs", c, close)
}

// empty consumes close if it comes next: the object or array is empty.
func (s *jsonScanner) empty(close byte) (bool, error) {
	c, err := s.peek()
	if err != nil || c != close {
		return false, err
	}
	s.pos++
	return true, nil
}

// object reads an object, calling member with each key and the scanner
// at its value, which member must read.
func (s *jsonScanner) object(field, what string, member func(key string) error) error {
	if err := s.open('{', field, what); err != nil {
		return err
	}
	if done, err := s.empty('}'); done || err != nil {
		return err
	}
	for {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c != '"' {
			return s.syntax("%q where a key belongs", c)
		}
		key, err := s.str(true)
		if err != nil {
			return err
		}
		if c, err = s.peek(); err != nil {
			return err
		}
		if c != ':' {
			return s.syntax("%q where ':' belongs", c)
		}
		s.pos++
		if err := member(key); err != nil {
			return err
		}
		if more, err := s.more('}'); !more || err != nil {
			return err
		}
	}
}

// array reads an array, calling elem with the scanner at each element.
func (s *jsonScanner) array(field, what string, elem func() error) error {
	if err := s.open('[', field, what); err != nil {
		return err
	}
	if done, err := s.empty(']'); done || err != nil {
		return err
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		if more, err := s.more(']'); !more || err != nil {
			return err
		}
	}
}

// str reads a string (the scanner at its opening quote); when !keep it
// checks it and returns "".
func (s *jsonScanner) str(keep bool) (string, error) {
	s.pos++
	s.tok = s.tok[:0]
	spans := false // the string spans windows: its bytes are in s.tok
	plain := true  // no escapes, ASCII only
	for {
		i := s.pos
		for ; i < len(s.win); i++ {
			c := s.win[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			if c >= 0x80 {
				plain = false
			}
		}
		seg := s.win[s.pos:i]
		s.pos = i
		if i == len(s.win) {
			s.tok = append(s.tok, seg...)
			spans = true
			if !s.fill() {
				return "", s.syntax("unexpected end in a string")
			}
			continue
		}
		c := s.win[i]
		s.pos++
		switch {
		case c == '"':
			if spans || !plain {
				s.tok = append(s.tok, seg...)
				seg = s.tok
			}
			if plain {
				switch string(seg) { // the keys of every entry, not allocated
				case "dtype":
					return "dtype", nil
				case "shape":
					return "shape", nil
				case "data_offsets":
					return "data_offsets", nil
				}
				if !keep {
					return "", nil
				}
				return string(seg), nil
			}
			// Escapes and UTF-8 as encoding/json reads them.
			var out string
			raw := append(append([]byte{'"'}, seg...), '"')
			if err := json.Unmarshal(raw, &out); err != nil {
				return "", s.syntax("bad string: %v", err)
			}
			return out, nil
		case c == '\\':
			plain, spans = false, true
			s.tok = append(s.tok, seg...)
			if !s.fill() {
				return "", s.syntax("unexpected end in a string")
			}
			s.tok = append(s.tok, c, s.win[s.pos])
			s.pos++
		default:
			return "", s.syntax("control character %#x in a string", c)
		}
	}
}

// run reads the longest run of bytes in set into s.tok.
func (s *jsonScanner) run(set func(byte) bool) {
	s.tok = s.tok[:0]
	for {
		i := s.pos
		for i < len(s.win) && set(s.win[i]) {
			i++
		}
		s.tok = append(s.tok, s.win[s.pos:i]...)
		s.pos = i
		if i < len(s.win) || !s.fill() {
			return
		}
	}
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }

// number reads a number into s.tok and reports whether it is an integer
// (no fraction or exponent).
func (s *jsonScanner) number() (isInt bool, err error) {
	s.run(isNumberByte)
	isInt, ok := jsonNumber(s.tok)
	if !ok {
		return false, s.syntax("bad number %q", truncate(string(s.tok)))
	}
	return isInt, nil
}

// jsonNumber checks b against RFC 8259's number grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(b []byte) (isInt, ok bool) {
	i := 0
	digits := func() int {
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false, false
	}
	isInt = true
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false, false
		}
		isInt = false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false, false
		}
		isInt = false
	}
	return isInt, i == len(b)
}

// int reads an integer element of the field f(key).
func (s *jsonScanner) int(f func(string) string, key string) (int64, error) {
	c, err := s.peek()
	if err != nil {
		return 0, err
	}
	if c != '-' && (c < '0' || c > '9') {
		return 0, gpumem.Errorf(f(key), describe(c), gpumem.ErrSyntax, "want an integer")
	}
	isInt, err := s.number()
	if err != nil {
		return 0, err
	}
	if !isInt {
		return 0, gpumem.Errorf(f(key), truncate(string(s.tok)), gpumem.ErrSyntax, "not an integer")
	}
	v, err := strconv.ParseInt(string(s.tok), 10, 64)
	if err != nil {
		return 0, gpumem.Errorf(f(key), truncate(string(s.tok)), gpumem.ErrRange, "not a 64-bit integer")
	}
	return v, nil
}

// literal reads true, false or null.
func (s *jsonScanner) literal() error {
	s.run(isLower)
	switch string(s.tok) {
	case "true", "false", "null":
		return nil
	}
	return s.syntax("bad literal %q", truncate(string(s.tok)))
}

// skip reads one value of any type, nested at most maxJSONDepth deep.
func (s *jsonScanner) skip(depth int) error {
	if depth > maxJSONDepth {
		return s.syntax("values nested more than %d deep", maxJSONDepth)
	}
	c, err := s.peek()
	if err != nil {
		return err
	}
	switch {
	case c == '{':
		return s.object(s.field, "", func(string) error { return s.skip(depth + 1) })
	case c == '[':
		return s.array(s.field, "", func() error { return s.skip(depth + 1) })
	case c == '"':
		_, err := s.str(false)
		return err
	case c == '-' || '0' <= c && c <= '9':
		_, err := s.number()
		return err
	case 'a' <= c && c <= 'z':
		return s.literal()
	}
	return s.syntax("%q where a value belongs", c)
}

// stringMap reads an object of strings, calling add for each pair.
func (s *jsonScanner) stringMap(field string, add func(k, v string) error) error {
	return s.object(field, "an object of strings", func(k string) error {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c != '"' {
			return gpumem.Errorf(field+"["+strconv.Quote(k)+"]", describe(c), gpumem.ErrSyntax, "want a string")
		}
		v, err := s.str(true)
		if err != nil {
			return err
		}
		return add(k, v)
	})
}

// ints reads the array of at most limit integers under key of an
// object whose fields f names; element limit+1 is an error of kind
// tooLong saying what.
func (s *jsonScanner) ints(f func(string) string, key string, limit int, tooLong error, what string) ([]int64, error) {
	c, err := s.peek()
	if err != nil {
		return nil, err
	}
	if c != '[' {
		return nil, gpumem.Errorf(f(key), describe(c), gpumem.ErrSyntax, "want an array of integers")
	}
	out := []int64{}
	err = s.array("", "", func() error {
		v, err := s.int(f, key)
		if err != nil {
			return err
		}
		if len(out) == limit {
			return gpumem.Errorf(f(key), append(out, v), tooLong, "%s (the first %d shown)", what, limit+1)
		}
		out = append(out, v)
		return nil
	})
	return out, err
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

// FromSafetensorsIndex reads a sharded checkpoint: the index file (a
// model.safetensors.index.json with its "weight_map") and the header of
// every shard it names, all from fsys, with shard names relative to the
// index's directory. It checks that every mapped tensor is in its shard
// and that no shard holds an unmapped tensor. Shards are read through
// io.ReaderAt when fsys's files provide it, and only their headers are
// read either way, with [FromSafetensors]'s limits.
//
// The index may hold at most 100,000,000 bytes and map at most 1,048,576
// (2^20) tensors, each once; it is decoded as it is read, so a larger
// map is refused at its first entry past the bound. A nil fsys is an
// error of field "fsys".
func FromSafetensorsIndex(fsys fs.FS, index string) (Spec, error) {
	if fsys == nil {
		return Spec{}, gpumem.Errorf("fsys", nil, gpumem.ErrInvalid, "nil file system")
	}
	f, err := fsys.Open(index)
	if err != nil {
		return Spec{}, gpumem.Errorf("index", index, gpumem.ErrInvalid, "%v", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSafetensorsHeader+1))
	f.Close()
	if err != nil {
		return Spec{}, gpumem.Errorf("index", index, gpumem.ErrSyntax, "reading: %v", err)
	}
	if len(data) > maxSafetensorsHeader {
		return Spec{}, gpumem.Errorf("index", index, gpumem.ErrRange, "larger than %d bytes", maxSafetensorsHeader)
	}
	weightMap, err := readIndex(data)
	if err != nil {
		return Spec{}, err
	}
	if len(weightMap) == 0 {
		return Spec{}, gpumem.Errorf("index.weight_map", nil, gpumem.ErrInvalid, "missing or empty")
	}
	shards := map[string][]string{}
	for tensor, shard := range weightMap {
		shards[shard] = append(shards[shard], tensor)
	}
	names := make([]string, 0, len(shards))
	for s := range shards {
		names = append(names, s)
	}
	sort.Strings(names)
	dir := path.Dir(index)
	var inv []gpumem.Tensor
	for _, shard := range names {
		field := "index.weight_map[" + strconv.Quote(shard) + "]"
		p := path.Join(dir, shard)
		if strings.Contains(shard, "/") || strings.Contains(shard, `\`) || !fs.ValidPath(p) {
			return Spec{}, gpumem.Errorf(field, shard, gpumem.ErrInvalid, "shard must be a file name beside the index")
		}
		ts, err := readShard(fsys, p, "shard("+shard+")")
		if err != nil {
			return Spec{}, err
		}
		mapped := map[string]bool{}
		for _, tn := range shards[shard] {
			mapped[tn] = true
		}
		for _, t := range ts {
			if !mapped[t.t.Name] {
				return Spec{}, gpumem.Errorf("shard("+shard+")["+strconv.Quote(t.t.Name)+"]", shard, gpumem.ErrInvalid, "tensor not mapped to this shard by the index")
			}
			delete(mapped, t.t.Name)
			inv = append(inv, t.t)
		}
		for tn := range mapped {
			return Spec{}, gpumem.Errorf("index.weight_map["+strconv.Quote(tn)+"]", shard, gpumem.ErrInvalid, "tensor not found in its shard")
		}
	}
	s := InferSpec(inv)
	if s.Family == "" {
		s.Family = "safetensors"
	}
	return s, nil
}

// readIndex decodes an index file's weight_map, skipping its other keys.
func readIndex(data []byte) (map[string]string, error) {
	js := newJSONScanner(bytes.NewReader(data), "index")
	var wm map[string]string
	err := js.object("index", "a JSON object", func(key string) error {
		if key != "weight_map" {
			return js.skip(1)
		}
		if wm != nil {
			return gpumem.Errorf("index.weight_map", nil, gpumem.ErrSyntax, "given twice")
		}
		wm = map[string]string{}
		return js.stringMap("index.weight_map", func(tensor, shard string) error {
			if _, ok := wm[tensor]; ok {
				return gpumem.Errorf("index.weight_map["+strconv.Quote(tensor)+"]", shard, gpumem.ErrInvalid, "tensor mapped twice")
			}
			if len(wm) == maxTensors {
				return gpumem.Errorf("index.weight_map", len(wm)+1, gpumem.ErrRange, "more than %d tensors", maxTensors)
			}
			wm[tensor] = shard
			return nil
		})
	})
	if err == nil {
		err = js.end()
	}
	return wm, err
}

func readShard(fsys fs.FS, p, field string) ([]stTensor, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, gpumem.Errorf(field, p, gpumem.ErrInvalid, "%v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, gpumem.Errorf(field, p, gpumem.ErrInvalid, "%v", err)
	}
	return readSafetensors(f, st.Size(), field)
}

// InferSpec returns a Spec whose Inventory is inv, with the shape facts
// that Hugging Face and GGUF tensor names reveal: the family whose
// checkpoint names they are (see [GuessFamily]), layers (highest layer
// index + 1), vocabulary and hidden size (from the token embedding),
// feed-forward size, routed experts, tied embeddings (no separate output
// head) and the dominant dtype. Heads and head size cannot be told apart
// from projection shapes alone; they are filled only where a per-head
// norm (qwen3, gemma3 q_norm) gives the head size. Take them from a
// config when one exists.
func InferSpec(inv []gpumem.Tensor) Spec {
	s := Spec{Inventory: inv}
	byDType := map[gpumem.DType]int64{}
	experts := map[int64]bool{}
	hasHead := false
	var qRows, kRows, qNorm, stacked int64
	for _, t := range inv {
		if n, err := t.Bytes(); err == nil {
			byDType[t.DType] += int64(n)
		}
		if l, ok := layerIndex(t.Name); ok && int64(l)+1 > s.Layers {
			s.Layers = int64(l) + 1
		}
		if e, ok := expertIndex(t.Name); ok && len(experts) <= maxTensors {
			experts[e] = true
		}
		name := t.Name
		switch {
		case len(t.Shape) == 2 && s.Vocab == 0 && hasSuffixAny(name, "embed_tokens.weight", "wte.weight",
			"word_embeddings.weight", "embed_in.weight", "token_embd.weight", "shared.weight", "token_embedding.weight"):
			// GGUF stores token_embd as [vocab, hidden] after reversal too.
			s.Vocab, s.Hidden = t.Shape[0], t.Shape[1]
		case hasSuffixAny(name, "lm_head.weight", "embed_out.weight", "proj_out.weight") || name == "output.weight":
			hasHead = true
		}
		if strings.Contains(name, "_exps.") && len(t.Shape) == 3 && t.Shape[0] > stacked {
			// GGUF stacks a layer's experts in one [experts, out, in] tensor.
			stacked = t.Shape[0]
		}
		if l, ok := layerIndex(name); ok && l == 0 && len(t.Shape) == 1 && hasSuffixAny(name, "self_attn.q_norm.weight", "attn_q_norm.weight") {
			qNorm = t.Shape[0]
		}
		if l, ok := layerIndex(name); ok && l == 0 && len(t.Shape) == 2 {
			switch {
			case hasSuffixAny(name, "self_attn.q_proj.weight", "attn_q.weight"):
				qRows = t.Shape[0]
			case hasSuffixAny(name, "self_attn.k_proj.weight", "attn_k.weight"):
				kRows = t.Shape[0]
			case hasSuffixAny(name, "mlp.up_proj.weight", "mlp.c_fc.weight", ".fc1.weight", "dense_h_to_4h.weight", "ffn_up.weight", "intermediate.dense.weight"):
				if s.Intermediate == 0 {
					s.Intermediate = t.Shape[0]
					if strings.HasSuffix(name, "c_fc.weight") && t.Shape[0] == s.Hidden {
						s.Intermediate = t.Shape[1] // GPT-2 Conv1D [in, out]
					}
				}
			}
		}
	}
	if s.Vocab > 0 {
		s.TiedEmbeddings = !hasHead
	}
	if qNorm > 0 && qRows > 0 && kRows > 0 && qRows%qNorm == 0 && kRows%qNorm == 0 {
		s.HeadDim, s.Heads, s.KVHeads = qNorm, qRows/qNorm, kRows/qNorm
	}
	s.MoE.Experts = max(int64(len(experts)), stacked)
	s.Family = GuessFamily(inv)
	var best int64 = -1
	for d, b := range byDType {
		if b > best || (b == best && d < s.DType) {
			s.DType, best = d, b
		}
	}
	return s
}

func hasSuffixAny(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// expertIndex finds N in "...experts.N..." (HF per-expert tensors).
func expertIndex(name string) (int64, bool) {
	i := strings.Index(name, ".experts.")
	if i < 0 {
		return 0, false
	}
	rest := name[i+len(".experts."):]
	seg, _, _ := strings.Cut(rest, ".")
	if seg == "" || len(seg) > 9 || strings.Trim(seg, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(seg, 10, 64)
	return n, err == nil
}

// GuessFamily returns the Hugging Face model_type whose checkpoint tensor
// names inv carries ("llama" for model.layers.N.self_attn.q_proj with
// mlp.gate_proj, "gpt2" for transformer.h.N.attn.c_attn, ...), or "" when
// the names match none. Llama-style names shared by several families
// (mistral, qwen2 without biases, gemma) read as "llama"; the layouts are
// the same.
func GuessFamily(inv []gpumem.Tensor) string {
	has := func(sub string) bool {
		for _, t := range inv {
			if strings.Contains(t.Name, sub) {
				return true
			}
		}
		return false
	}
	switch {
	case has("vision_tower.") && has("multi_modal_projector.linear_"):
		return "llava"
	case has("vision_tower.") && has("mm_input_projection_weight"):
		return "gemma3"
	case has("kv_a_proj_with_mqa"):
		if has("e_score_correction_bias") {
			return "deepseek_v3"
		}
		return "deepseek_v2"
	case has("block_sparse_moe.experts."):
		return "mixtral"
	case has("mlp.shared_expert_gate"):
		return "qwen2_moe"
	case has("mlp.experts.") && has("self_attn.q_norm"):
		return "qwen3_moe"
	case has("self_attn.qkv_proj") && has("mlp.gate_up_proj"):
		return "phi3"
	case has("self_attn.dense") && has("final_layernorm"):
		return "phi"
	case has("pre_feedforward_layernorm") && has("self_attn.q_norm"):
		return "gemma3_text"
	case has("pre_feedforward_layernorm"):
		return "gemma2"
	case has("self_attn.q_norm") && has("mlp.gate_proj"):
		return "qwen3"
	case has("self_attn.q_proj.bias") && has("mlp.gate_proj") && !has("self_attn.o_proj.bias"):
		return "qwen2"
	case has("model.layers.") && has("mlp.gate_proj"):
		return "llama"
	case has("transformer.h.") && has("attn.c_attn"):
		if has("transformer.h.0.attn.c_attn.weight") && cAttnIsLinear(inv) {
			return "gpt_bigcode"
		}
		return "gpt2"
	case has("transformer.word_embeddings") && has("query_key_value"):
		return "falcon"
	case has("gpt_neox."):
		return "gpt_neox"
	case has("model.decoder.embed_positions") && has("self_attn_layer_norm") && !has("encoder"):
		return "opt"
	case has("model.encoder.conv1"):
		return "whisper"
	case has("encoder.block.") && has("shared.weight"):
		return "t5"
	case has("bert.embeddings"):
		return "bert"
	case has("roberta.embeddings"):
		return "roberta"
	case has("vit.embeddings"):
		return "vit"
	case has("text_model.") && has("vision_model.") && has("logit_scale"):
		return "clip"
	case has("vision_model.embeddings.class_embedding"):
		return "clip_vision_model"
	case has("vision_model.embeddings.patch_embedding") && has("vision_model.encoder.layers."):
		return "siglip_vision_model"
	case has("transformer_blocks.") && has("norm1.linear") && has("patch_embed.text_proj"):
		return "cogvideox"
	}
	return ""
}

// cAttnIsLinear tells GPTBigCode's nn.Linear c_attn ([out, in], out >
// in) from GPT-2's Conv1D ([in, 3·in]).
func cAttnIsLinear(inv []gpumem.Tensor) bool {
	for _, t := range inv {
		if strings.HasSuffix(t.Name, "h.0.attn.c_attn.weight") && len(t.Shape) == 2 {
			return t.Shape[0] > t.Shape[1]
		}
	}
	return false
}
