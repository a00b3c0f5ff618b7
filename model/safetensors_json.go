package model

// A bounded streaming JSON scanner for the safetensors header: depth, size
// and count limits, no reflection.

import (
	"encoding/json"
	"io"
	"strconv"

	"github.com/gpumem/gpumem"
)

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
