package gpumem

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Bytes is an amount of memory in bytes. It is signed, like
// [time.Duration], because differences such as free − need are meaningful
// when negative: a shortfall is a negative headroom, not a wrapped-around
// 16 EiB.
//
// The zero value is zero bytes. The largest representable amount is
// [math.MaxInt64] bytes (8 EiB).
type Bytes int64

// Binary (IEC) and decimal (SI) units. GiB is 2^30 bytes, as PyTorch,
// nvidia-smi's MiB and most of the field count; GB is 10^9 bytes, as
// vendors' data sheets and the ZeRO paper count.
const (
	Byte Bytes = 1
	KiB        = 1 << 10 * Byte
	MiB        = 1 << 20 * Byte
	GiB        = 1 << 30 * Byte
	TiB        = 1 << 40 * Byte

	KB = 1000 * Byte
	MB = 1000 * KB
	GB = 1000 * MB
	TB = 1000 * GB
)

// String returns b for display, as [time.Duration.String] does a
// duration: two decimals in the largest IEC unit not above it
// ("15.19 GiB", "512.00 MiB", "80.00 GiB", "-3.00 GiB"), or a whole
// number of bytes below 1 KiB ("37 B"), as PyTorch's allocator prints
// sizes. fmt's %v and %s use it. It rounds: the exact count is
// [Bytes.Int64] (or fmt's %d), and [Bytes.Exact] writes it in a unit;
// [ParseBytes] reads String's result back to within half a unit in the
// last decimal.
func (b Bytes) String() string { return b.human(1024, iecUnits) }

// Int64 returns b as a number of bytes, exactly.
func (b Bytes) Int64() int64 { return int64(b) }

// Exact returns b exactly, in the largest IEC unit that divides it
// evenly, or in bytes: "80GiB", "1536MiB", "512KiB", "1000B", "0B",
// "-2GiB", "16311470208B". It is what [Bytes.MarshalText] writes, and
// [ParseBytes] reads it back to the same value for every b >= 0.
func (b Bytes) Exact() string {
	var buf [24]byte
	return string(b.appendString(buf[:0]))
}

func (b Bytes) appendString(dst []byte) []byte {
	u := uint64(b)
	if b < 0 {
		dst = append(dst, '-')
		u = -u // two's complement; exact for math.MinInt64 too
	}
	unit := "B"
	switch {
	case u == 0:
	case u%uint64(TiB) == 0:
		u, unit = u/uint64(TiB), "TiB"
	case u%uint64(GiB) == 0:
		u, unit = u/uint64(GiB), "GiB"
	case u%uint64(MiB) == 0:
		u, unit = u/uint64(MiB), "MiB"
	case u%uint64(KiB) == 0:
		u, unit = u/uint64(KiB), "KiB"
	}
	dst = strconv.AppendUint(dst, u, 10)
	return append(dst, unit...)
}

// GiB returns b as a floating-point number of GiB (2^30 bytes).
func (b Bytes) GiB() float64 { return b.in(GiB) }

// MiB returns b as a floating-point number of MiB (2^20 bytes).
func (b Bytes) MiB() float64 { return b.in(MiB) }

// GB returns b as a floating-point number of GB (10^9 bytes).
func (b Bytes) GB() float64 { return b.in(GB) }

// in divides in two steps, like time.Duration.Hours, so that the integer
// part is exact even for amounts beyond 2^53 bytes.
func (b Bytes) in(unit Bytes) float64 {
	whole, rem := b/unit, b%unit
	return float64(whole) + float64(rem)/float64(unit)
}

// HumanSI is like [Bytes.String] in decimal units ("54.00 GB"), as
// vendors' data sheets and many papers print sizes.
func (b Bytes) HumanSI() string { return b.human(1000, siUnits) }

var (
	iecUnits = [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	siUnits  = [...]string{"kB", "MB", "GB", "TB", "PB", "EB"}
)

func (b Bytes) human(base float64, units [6]string) string {
	v := math.Abs(float64(b))
	if v < base {
		return strconv.FormatInt(int64(b), 10) + " B"
	}
	i := -1
	for v >= base && i < len(units)-1 {
		v /= base
		i++
	}
	// Move up when rounding to two decimals reaches the next unit
	// ("1024.00 KiB" reads better as "1.00 MiB").
	if math.Round(v*100)/100 >= base && i < len(units)-1 {
		v /= base
		i++
	}
	if b < 0 {
		v = -v
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " " + units[i]
}

// MarshalText implements [encoding.TextMarshaler] with [Bytes.Exact], so
// that text and JSON encodings keep the exact count.
func (b Bytes) MarshalText() ([]byte, error) {
	return b.appendString(make([]byte, 0, 24)), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseBytes].
func (b *Bytes) UnmarshalText(text []byte) error {
	v, err := ParseBytes(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// UnmarshalJSON accepts a JSON string read by [ParseBytes] ("80GiB") or a
// JSON integer number of bytes (85899345920), so that both hand-written
// and machine-written job files decode.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	s := strings.TrimSpace(string(data))
	if len(s) >= 2 && s[0] == '"' {
		u, err := strconv.Unquote(s)
		if err != nil {
			return &ParseError{Func: "ParseBytes", Input: s, Err: ErrSyntax}
		}
		return b.UnmarshalText([]byte(u))
	}
	if s == "null" {
		return nil
	}
	return b.UnmarshalText([]byte(s))
}

// ParseBytes parses a size such as "80GiB", "79.15 GiB", "80GB", "512
// bytes" or "4096".
//
// The unit decides the base: "KiB MiB GiB TiB PiB" and "Ki Mi Gi Ti Pi"
// are binary (powers of 1024); "kB KB MB GB TB PB" and bare "K M G T P"
// are decimal (powers of 1000); "B", "byte", "bytes" or no unit is bytes.
// The prefix letter may be in either case. One or more spaces may separate
// the number from the unit, as PyTorch prints "79.15 GiB".
//
// A decimal fraction is exact: "79.15 GiB" is 79.15·2^30 computed in
// integers, rounded up to a whole byte (a size that holds the amount).
// It may have at most 40 decimal places, not counting trailing zeros
// ("0.1000" has one); a longer one is rejected with [ErrRange], since a
// byte count needs no such precision and an unbounded one would let a
// request make the parser work for nothing.
//
// Bit units ("Gb", "Mbit", "kb"), unknown units, signs, exponents,
// NaN/Inf, empty input and amounts above [math.MaxInt64] bytes are
// rejected with a *[ParseError] wrapping [ErrUnit], [ErrSyntax] or
// [ErrRange].
//
// ParseBytes takes time linear in the length of s and does not allocate
// unless it fails.
func ParseBytes(s string) (Bytes, error) {
	in := s
	s = strings.TrimSpace(s)
	fail := func(kind error, detail string) (Bytes, error) {
		return 0, &ParseError{Func: "ParseBytes", Input: in, Err: fmt.Errorf("%w: %s", kind, detail)}
	}
	if s == "" {
		return fail(ErrSyntax, "empty size")
	}
	switch s[0] {
	case '-':
		return fail(ErrRange, "negative size")
	case '+':
		return fail(ErrSyntax, "sign not allowed")
	}

	i := 0
	var whole uint64
	for ; i < len(s) && isDigit(s[i]); i++ {
		hi, lo := bits.Mul64(whole, 10)
		lo, carry := bits.Add64(lo, uint64(s[i]-'0'), 0)
		if hi != 0 || carry != 0 || lo > math.MaxInt64 {
			return fail(ErrRange, "size exceeds 8 EiB")
		}
		whole = lo
	}
	intDigits := i
	frac := ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		frac = s[i+1 : j]
		i = j
	}
	if intDigits == 0 && frac == "" {
		return fail(ErrSyntax, "no digits")
	}

	mult, err := parseUnit(strings.TrimLeft(s[i:], " \t"))
	if err != nil {
		return 0, &ParseError{Func: "ParseBytes", Input: in, Err: err}
	}

	hi, total := bits.Mul64(whole, mult)
	if hi != 0 || total > math.MaxInt64 {
		return fail(ErrRange, "size exceeds 8 EiB")
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > maxFracDigits {
		return fail(ErrRange, strconv.Itoa(len(frac))+" decimal places; at most "+strconv.Itoa(maxFracDigits)+" are accepted")
	}
	if frac != "" {
		// total ≤ MaxInt64 and the fraction adds at most mult ≤ 2^50:
		// the sum cannot wrap a uint64.
		total += fracCeil(frac, mult)
		if total > math.MaxInt64 {
			return fail(ErrRange, "size exceeds 8 EiB")
		}
	}
	return Bytes(total), nil
}

// MustParseBytes is like ParseBytes but panics on error. It is meant for
// tests and for constants in examples.
func MustParseBytes(s string) Bytes {
	b, err := ParseBytes(s)
	if err != nil {
		panic(err)
	}
	return b
}

// maxFracDigits is the most decimal places ParseBytes accepts, trailing
// zeros aside.
const maxFracDigits = 40

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// fracCeil returns ceil(0.frac × mult) for a string of decimal digits. It
// multiplies the fraction by mult as on paper, one digit at a time from
// the right: the carry out of the first decimal place is the whole part
// of the product, and the product has a fractional part exactly when a
// digit it writes is non-zero. The carry stays below mult, so for any
// mult below 2^60 no step overflows; the work is linear in len(frac)
// and allocation-free.
func fracCeil(frac string, mult uint64) uint64 {
	var carry uint64
	inexact := false
	for i := len(frac) - 1; i >= 0; i-- {
		t := uint64(frac[i]-'0')*mult + carry
		inexact = inexact || t%10 != 0
		carry = t / 10
	}
	if inexact {
		carry++
	}
	return carry
}

// parseUnit returns the multiplier of a unit suffix.
func parseUnit(u string) (uint64, error) {
	switch u {
	case "", "B":
		return 1, nil
	}
	if strings.EqualFold(u, "byte") || strings.EqualFold(u, "bytes") {
		return 1, nil
	}
	if strings.EqualFold(u, "b") || strings.EqualFold(u, "bit") || strings.EqualFold(u, "bits") {
		return 0, fmt.Errorf("%w: %q is bits; gpumem counts bytes (B)", ErrUnit, u)
	}
	var exp int
	switch u[0] {
	case 'k', 'K':
		exp = 1
	case 'm', 'M':
		exp = 2
	case 'g', 'G':
		exp = 3
	case 't', 'T':
		exp = 4
	case 'p', 'P':
		exp = 5
	default:
		return 0, fmt.Errorf("%w: unknown unit %q", ErrUnit, u)
	}
	dec := uint64(1)
	for range exp {
		dec *= 1000
	}
	bin := uint64(1) << (10 * exp)
	switch tail := u[1:]; tail {
	case "iB", "i", "IB", "I":
		return bin, nil
	case "B", "":
		return dec, nil
	case "b", "bit", "bits":
		return 0, fmt.Errorf("%w: %q is bits; gpumem counts bytes (write %cB)", ErrUnit, u, u[0]&^0x20)
	case "ib", "Ib", "ibit", "ibits":
		return 0, fmt.Errorf("%w: %q is bits; gpumem counts bytes (write %ciB)", ErrUnit, u, u[0]&^0x20)
	}
	return 0, fmt.Errorf("%w: unknown unit %q", ErrUnit, u)
}
