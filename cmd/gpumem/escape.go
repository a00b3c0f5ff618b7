package main

// escapeWriter: output that escapes control characters from untrusted input
// before it reaches a terminal.

import (
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// escapeWriter writes what it is given with control characters escaped:
// C0 controls but newline and tab, DEL and C1 controls as \xNN or \u00NN,
// bytes that are not UTF-8 as \xNN. Escape sequences from a config.json,
// a log or a file name are then printed, not obeyed; JSON output, whose
// encoder already escapes C0 controls, stays valid JSON (a C1 control in
// a string becomes its \u00NN escape). A rune split between two writes is
// held until the next write or Flush.
type escapeWriter struct {
	mu   sync.Mutex // gpumem serve may log from several goroutines
	w    io.Writer
	held []byte // the start of a rune the last write ended in
	buf  []byte
	err  error
}

func (e *escapeWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return 0, e.err
	}
	data := p
	if len(e.held) > 0 {
		data = append(e.held, p...)
		e.held = nil
	}
	out := e.buf[:0]
	for i := 0; i < len(data); {
		c := data[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				out = fmt.Appendf(out, "\\x%02x", c)
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		if !utf8.FullRune(data[i:]) {
			e.held = append([]byte(nil), data[i:]...)
			break
		}
		r, n := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = fmt.Appendf(out, "\\x%02x", c)
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, "\\u%04x", r)
		default:
			out = append(out, data[i:i+n]...)
		}
		i += n
	}
	e.buf = out
	if _, err := e.w.Write(out); err != nil {
		e.err = err
		return 0, err
	}
	return len(p), nil
}

// Flush writes a rune the last write left incomplete, escaped.
func (e *escapeWriter) Flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.held) == 0 || e.err != nil {
		return
	}
	var out []byte
	for _, c := range e.held {
		out = fmt.Appendf(out, "\\x%02x", c)
	}
	e.held = nil
	_, e.err = e.w.Write(out)
}
