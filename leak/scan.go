package leak

import (
	"math/bits"
	"strings"

	"github.com/gpumem/gpumem"
)

// This file holds the allocation-free scanning helpers shared by the
// parsers: whitespace-tolerant keyword matching and size reading through
// [gpumem.ParseBytes].

// isSpace reports whether c is white space that may separate words of a
// message (log viewers and e-mail quoting wrap long OOM messages).
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// match reports where kw ends when it occurs in s at i. A space in kw
// matches a run of one or more white-space bytes in s, so that wrapped
// and re-flowed messages still match. It returns -1 when kw does not
// occur at i.
func match(s string, i int, kw string) int {
	for j := 0; j < len(kw); j++ {
		if kw[j] == ' ' {
			if i >= len(s) || !isSpace(s[i]) {
				return -1
			}
			i = skipSpace(s, i)
			continue
		}
		if i >= len(s) || s[i] != kw[j] {
			return -1
		}
		i++
	}
	return i
}

// matchAny tries each keyword at i and returns the end of the first that
// matches and its index, or (-1, -1).
func matchAny(s string, i int, kws ...string) (end, which int) {
	for k, kw := range kws {
		if e := match(s, i, kw); e >= 0 {
			return e, k
		}
	}
	return -1, -1
}

// find returns the index of the first occurrence of kw in s at or after
// from, with the white-space tolerance of [match], and the index just
// past it; (-1, -1) when there is none.
func find(s string, from int, kw string) (start, end int) {
	first := kw
	if sp := strings.IndexByte(kw, ' '); sp >= 0 {
		first = kw[:sp]
	}
	for from <= len(s) {
		k := strings.Index(s[from:], first)
		if k < 0 {
			return -1, -1
		}
		at := from + k
		if e := match(s, at, kw); e >= 0 {
			return at, e
		}
		from = at + 1
	}
	return -1, -1
}

// findWithin is find limited to s[from:limit].
func findWithin(s string, from, limit int, kw string) (start, end int) {
	if limit > len(s) {
		limit = len(s)
	}
	if from > limit {
		return -1, -1
	}
	st, e := find(s[:limit], from, kw)
	return st, e
}

// readInt reads a decimal integer at i (after optional spaces). It
// returns the value, the index after it and whether digits were found.
// Values beyond 2^62 are rejected.
func readInt(s string, i int) (int64, int, bool) {
	i = skipSpace(s, i)
	start := i
	var v int64
	for i < len(s) && isDigit(s[i]) {
		if v > 1<<62/10 {
			return 0, i, false
		}
		v = v*10 + int64(s[i]-'0')
		i++
	}
	return v, i, i > start
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// readSize reads a size such as "2.50 GiB", "0 bytes", "3206250496B" or
// "7406166528" at i (after optional spaces) with [gpumem.ParseBytes]. The
// unit is the run of letters after the number and at most one blank. It
// returns the index after the size, or ok=false (and i unchanged) when no
// well-formed size is there. It does not allocate for sizes ParseBytes
// accepts.
func readSize(s string, i int) (b gpumem.Bytes, end int, ok bool) {
	j := skipSpace(s, i)
	start := j
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j == start {
		return 0, i, false
	}
	if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
		j++
		for j < len(s) && isDigit(s[j]) {
			j++
		}
	}
	numEnd := j
	k := j
	for k < len(s) && (s[k] == ' ' || s[k] == '\t') && k-numEnd < 4 {
		k++
	}
	u := k
	for u < len(s) && isLetter(s[u]) {
		u++
	}
	end = numEnd
	if u > k && isUnit(s[k:u]) {
		end = u
	}
	v, err := gpumem.ParseBytes(s[start:end])
	if err != nil {
		return 0, i, false
	}
	return v, end, true
}

// isUnit reports whether w is a size unit that ParseBytes reads (so that
// "4096 allowed" reads 4096 bytes and stops before "allowed").
func isUnit(w string) bool {
	switch w {
	case "B", "bytes", "byte", "Bytes",
		"KiB", "MiB", "GiB", "TiB", "PiB", "Ki", "Mi", "Gi", "Ti",
		"kB", "KB", "MB", "GB", "TB", "PB", "K", "M", "G", "T", "k":
		return true
	}
	return false
}

// readGroupedSize reads a byte count written with thousands separators,
// "3,635,267,072 bytes", as CuPy prints it. It copies the digits into a
// stack buffer and parses them with ParseBytes.
func readGroupedSize(s string, i int) (gpumem.Bytes, int, bool) {
	j := skipSpace(s, i)
	var buf [32]byte
	n := 0
	for j < len(s) && (isDigit(s[j]) || (s[j] == ',' && j+1 < len(s) && isDigit(s[j+1]) && n > 0)) {
		if s[j] != ',' {
			if n == len(buf) {
				return 0, i, false
			}
			buf[n] = s[j]
			n++
		}
		j++
	}
	if n == 0 {
		return 0, i, false
	}
	if e := match(s, j, " bytes"); e >= 0 {
		j = e
	}
	v, err := gpumem.ParseBytes(string(buf[:n]))
	if err != nil {
		return 0, i, false
	}
	return v, j, true
}

// anchorKeywords holds each anchor's keyword, and anchorByte[j] the
// anchors whose keyword can have a given byte at j, one bit per anchor,
// for j < 3: a keyword's first two bytes are literal, and its third is
// literal or a space, which any white-space byte matches (see [match]).
var anchorKeywords, anchorByte = anchorTables()

func anchorTables() (kws [anchorLast + 1]string, b [3][256]uint32) {
	for k := anchorFirst; k <= anchorLast; k++ {
		kw := k.keyword()
		if len(kw) < 3 || kw[0] == ' ' || kw[1] == ' ' {
			panic("leak: anchor keyword " + kw + " does not start with two literal bytes")
		}
		kws[k] = kw
		for j := range b {
			if kw[j] != ' ' {
				b[j][kw[j]] |= 1 << k
				continue
			}
			for c := range 256 {
				if isSpace(byte(c)) {
					b[j][c] |= 1 << k
				}
			}
		}
	}
	return kws, b
}

// anchorScan finds every anchor of every format in one pass over s: at
// each position, the anchors whose keyword's first three bytes can be
// there (anchorByte, carried along the text so that each byte is looked
// up once) are matched in full with [match]. It yields the same (anchor,
// position) pairs as searching s for each keyword in turn with [find],
// ordered by position and then by anchor, and does not allocate.
type anchorScan struct {
	s       string
	at      int    // where the pending anchors are tried
	from    int    // where the search for the next candidate resumes
	pending uint32 // anchors still to try at at
}

// next returns the next anchor found, where its keyword starts and ends,
// or ok=false at the end of s.
func (sc *anchorScan) next() (k anchor, at, end int, ok bool) {
	s := sc.s
	for {
		for sc.pending != 0 {
			k = anchor(bits.TrailingZeros32(sc.pending))
			sc.pending &= sc.pending - 1
			if e := match(s, sc.at, anchorKeywords[k]); e >= 0 {
				return k, sc.at, e, true
			}
		}
		if sc.from+2 >= len(s) {
			sc.from = len(s)
			return 0, 0, 0, false
		}
		// m01: anchors whose first two bytes are at i-2 and i-1; m0:
		// those whose first byte is at i-1.
		i := sc.from + 2
		m0 := anchorByte[0][s[i-1]]
		m01 := anchorByte[0][s[i-2]] & anchorByte[1][s[i-1]]
		for ; i < len(s); i++ {
			c := s[i]
			if m := m01 & anchorByte[2][c]; m != 0 {
				sc.pending = m
				break
			}
			m01 = m0 & anchorByte[1][c]
			m0 = anchorByte[0][c]
		}
		if sc.pending == 0 {
			sc.from = len(s)
			return 0, 0, 0, false
		}
		sc.at, sc.from = i-2, i-1
	}
}
