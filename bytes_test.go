package gpumem

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ceilRat returns ceil(num/den · unit) computed with math/big, an
// implementation independent of ParseBytes' 128-bit arithmetic.
func ceilRat(t *testing.T, dec string, unit int64) Bytes {
	t.Helper()
	r, ok := new(big.Rat).SetString(dec)
	require.True(t, ok, dec)
	r.Mul(r, new(big.Rat).SetInt64(unit))
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	require.True(t, q.IsInt64())
	return Bytes(q.Int64())
}

func TestParseBytesAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Bytes
	}{
		// Plain integers and the bytes words.
		{"0", 0},
		{"4096", 4096},
		{"  4096\t", 4096},
		{"0 bytes", 0}, // PyTorch format_size below 1 KiB
		{"512 bytes", 512},
		{"1024 bytes", 1024},
		{"1 byte", 1},
		{"17B", 17},
		{"17 B", 17},
		{"9223372036854775807", math.MaxInt64},
		// IEC, with and without "B", with and without a space.
		{"80GiB", 80 << 30},
		{"80 GiB", 80 << 30},
		{"80Gi", 80 << 30},
		{"1KiB", 1024},
		{"1Ki", 1024},
		{"3MiB", 3 << 20},
		{"2TiB", 2 << 40},
		{"1PiB", 1 << 50},
		{"81559MiB", 81559 << 20}, // nvidia-smi memory.total of an H100 80GB HBM3
		{"81559 MiB", 81559 << 20},
		{"1024.00 KiB", 1 << 20}, // PyTorch prints 1 MiB this way
		{"1024.00 MiB", 1 << 30},
		{"80giB", 80 << 30}, // the prefix letter in either case
		{"80gB", 80e9},
		// SI.
		{"80GB", 80e9},
		{"80 GB", 80e9},
		{"1kB", 1000},
		{"1KB", 1000},
		{"5MB", 5e6},
		{"2TB", 2e12},
		{"1PB", 1e15},
		{"7K", 7000},
		{"7M", 7e6},
		{"7G", 7e9},
		{"7T", 7e12},
		{"18.2GB", 18_200_000_000},
		// Fractions: exact, rounded up to a whole byte.
		{"1.5GiB", 3 << 29},
		{"0.5", 1},
		{"0.4 bytes", 1},
		{"2.", 2},
		{".5KiB", 512},
		{"1.000000000000000000000000GiB", 1 << 30}, // trailing zeros do not take the slow path
		{"0.001KiB", 2}, // 1.024 bytes → 2
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseBytes(tc.in)
			require.NoError(t, err)
			if got != tc.want {
				t.Errorf("ParseBytes(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

// TestParseBytesFractionsExact checks fractional sizes against math/big.
func TestParseBytesFractionsExact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, dec string
		unit    int64
	}{
		{"79.15 GiB", "79.15", int64(GiB)}, // H100 "total capacity" in an OOM message
		{"23.69 GiB", "23.69", int64(GiB)}, // RTX 3090 "total capacity" (LLaVA on a 24 GB card)
		{"2.50 GiB", "2.50", int64(GiB)},
		{"14.60 GiB", "14.60", int64(GiB)},
		{"103.00 MiB", "103.00", int64(MiB)},
		{"0.1 KB", "0.1", int64(KB)},
		{"3.14159 TB", "3.14159", int64(TB)},
		{"1.0000000000000000001 GiB", "1.0000000000000000001", int64(GiB)},                         // 19 digits: fast path
		{"1.00000000000000000001 GiB", "1.00000000000000000001", int64(GiB)},                       // 20 digits: big path
		{"0.99999999999999999999999999 TiB", "0.99999999999999999999999999", int64(TiB)},           // rounds to exactly 1 TiB
		{"8191.9999999999999999999999999999 TiB", "8191.9999999999999999999999999999", int64(TiB)}, // near the top
	}
	for _, tc := range tests {
		got, err := ParseBytes(tc.in)
		require.NoError(t, err, tc.in)
		if want := ceilRat(t, tc.dec, tc.unit); got != want {
			t.Errorf("ParseBytes(%q) = %d, want %d", tc.in, got, want)
		}
	}
	// A worked value, spelled out: 79.15 × 2^30 = 84986665369.6.
	got, err := ParseBytes("79.15 GiB")
	require.NoError(t, err)
	if got != 84986665370 {
		t.Errorf("ParseBytes(\"79.15 GiB\") = %d, want 84986665370", got)
	}
}

func TestParseBytesRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		kind error
	}{
		{"", ErrSyntax},
		{"   ", ErrSyntax},
		{"GiB", ErrSyntax},
		{".", ErrSyntax},
		{". GiB", ErrSyntax},
		{"abc", ErrSyntax},
		{"NaN", ErrSyntax},
		{"Inf", ErrSyntax},
		{"+Inf", ErrSyntax},
		{"+5GB", ErrSyntax},
		{"1e9", ErrUnit},
		{"1,024 MiB", ErrUnit},
		{"1.2.3GB", ErrUnit},
		{"-1", ErrRange},
		{"-5GiB", ErrRange},
		{"9223372036854775808", ErrRange},
		{"99999999999999999999999", ErrRange},
		{"8388608TiB", ErrRange}, // 2^63 bytes
		{"8388607.99999999999999999999999999999999999 TiB", ErrRange}, // rounds up to 2^63
		{"80gib", ErrUnit}, // lower-case b is bits
		{"9.3EB", ErrUnit},
		{"32Gb", ErrUnit},
		{"32 Gb", ErrUnit},
		{"100Mbit", ErrUnit},
		{"100Mbits", ErrUnit},
		{"8kb", ErrUnit},
		{"1Kib", ErrUnit},
		{"1b", ErrUnit},
		{"1 bit", ErrUnit},
		{"4 GiBs", ErrUnit},
		{"4 XB", ErrUnit},
		{"4 GiB extra", ErrUnit},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseBytes(tc.in)
			if err == nil {
				t.Fatalf("ParseBytes(%q) = %d, want error %v", tc.in, got, tc.kind)
			}
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.in, pe.Input)
			assert.Equal(t, "ParseBytes", pe.Func)
			if !errors.Is(err, tc.kind) {
				t.Errorf("ParseBytes(%q) error = %v, want it to wrap %v", tc.in, err, tc.kind)
			}
		})
	}
}

func TestParseBytesErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := ParseBytes("32Gb")
	require.Error(t, err)
	assert.Equal(t, `gpumem.ParseBytes: parsing "32Gb": invalid unit: "Gb" is bits; gpumem counts bytes (write GB)`, err.Error())
}

func TestBytesExact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   Bytes
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1000, "1000B"},
		{KiB, "1KiB"},
		{1536 * MiB, "1536MiB"},
		{80 * GiB, "80GiB"},
		{80 * GB, "78125000KiB"}, // 80e9 = 78125000 × 1024
		{3 * TiB, "3TiB"},
		{1 << 50, "1024TiB"},
		{-2 * GiB, "-2GiB"},
		{math.MaxInt64, "9223372036854775807B"},
		{math.MinInt64, "-8388608TiB"},
	}
	for _, tc := range tests {
		if got := tc.in.Exact(); got != tc.want {
			t.Errorf("Bytes(%d).Exact() = %q, want %q", int64(tc.in), got, tc.want)
		}
	}
}

// TestBytesRoundTrip checks ParseBytes(b.Exact()) == b on powers of two,
// their neighbours, multiples of every unit, and a deterministic spread.
func TestBytesRoundTrip(t *testing.T) {
	t.Parallel()
	var cases []Bytes
	for s := 0; s < 63; s++ {
		p := Bytes(1) << s
		cases = append(cases, p, p-1, p+1)
		if s < 62 {
			cases = append(cases, 3*p/2)
		}
	}
	for _, u := range []Bytes{KiB, MiB, GiB, TiB, KB, MB, GB, TB} {
		for k := Bytes(1); k < 2000; k += 7 {
			cases = append(cases, k*u)
		}
	}
	x := uint64(0x9E3779B97F4A7C15)
	for range 10000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		cases = append(cases, Bytes(x>>1))
	}
	cases = append(cases, math.MaxInt64)
	for _, b := range cases {
		got, err := ParseBytes(b.Exact())
		if err != nil || got != b {
			t.Fatalf("ParseBytes(%q) = %d, %v, want %d", b.Exact(), got, err, int64(b))
		}
	}
}

func TestBytesFloatViews(t *testing.T) {
	t.Parallel()
	assert.InEpsilon(t, 79.15, MustParseBytes("79.15 GiB").GiB(), 1e-10) // rounded up to a byte
	assert.InEpsilon(t, 1.5, (1536 * KiB).MiB(), 1e-15)
	assert.InEpsilon(t, 80.0, (80 * GB).GB(), 1e-15)
	// Exact integer part beyond 2^53 bytes.
	assert.Equal(t, float64(1<<33-1), (Bytes(math.MaxInt64) >> 30 << 30).GiB(), "the GiB view of 2^63-2^30 bytes")
	assert.Equal(t, -2.5, (-5 * GiB / 2).GiB())
}

// TestBytesString checks the display form, and that fmt shows it for %v
// and %s and the exact count for %d.
func TestBytesString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      Bytes
		iec, si string
	}{
		{0, "0 B", "0 B"},
		{37, "37 B", "37 B"},
		{1023, "1023 B", "1.02 kB"},
		{1024, "1.00 KiB", "1.02 kB"},
		{MustParseBytes("14.6 GiB"), "14.60 GiB", "15.68 GB"},
		{512 * MiB, "512.00 MiB", "536.87 MB"},
		{MiB - 1, "1.00 MiB", "1.05 MB"}, // 1023.999 KiB rounds up into the next unit
		{54 * GB, "50.29 GiB", "54.00 GB"},
		{-3 * GiB, "-3.00 GiB", "-3.22 GB"},
		{2 * TiB, "2.00 TiB", "2.20 TB"},
	}
	for _, tc := range tests {
		if got := tc.in.String(); got != tc.iec {
			t.Errorf("Bytes(%d).String() = %q, want %q", int64(tc.in), got, tc.iec)
		}
		if got := tc.in.HumanSI(); got != tc.si {
			t.Errorf("Bytes(%d).HumanSI() = %q, want %q", int64(tc.in), got, tc.si)
		}
		// Human is lossy but reads back within half of its last digit.
		if tc.in > 0 {
			back, err := ParseBytes(tc.in.String())
			require.NoError(t, err)
			assert.InEpsilon(t, float64(tc.in), float64(back), 0.005, "ParseBytes(%q)", tc.in.String())
		}
	}
	b := MustParseBytes("15.19 GiB")
	assert.Equal(t, "15.19 GiB 15.19 GiB 16310138307 16310138307", fmt.Sprintf("%v %s %d %d", b, b, b, b.Int64()))
}

func TestBytesText(t *testing.T) {
	t.Parallel()
	type job struct {
		Need Bytes `json:"need"`
	}
	out, err := json.Marshal(job{Need: 80 * GiB})
	require.NoError(t, err)
	assert.Equal(t, `{"need":"80GiB"}`, string(out))

	for _, in := range []string{`{"need":"80GiB"}`, `{"need":"85899345920"}`, `{"need":85899345920}`, `{"need":"80 GiB"}`} {
		var j job
		require.NoError(t, json.Unmarshal([]byte(in), &j), in)
		assert.Equal(t, 80*GiB, j.Need, in)
	}
	var j job
	err = json.Unmarshal([]byte(`{"need":"32Gb"}`), &j)
	require.ErrorIs(t, err, ErrUnit)
	err = json.Unmarshal([]byte(`{"need":-5}`), &j)
	require.ErrorIs(t, err, ErrRange)
	err = json.Unmarshal([]byte(`{"need":1e9}`), &j)
	require.Error(t, err)
}

func TestParseBytesAllocs(t *testing.T) {
	for _, in := range []string{"79.15 GiB", "80GB", "512 bytes", "81559 MiB"} {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := ParseBytes(in); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("ParseBytes(%q) allocates %v times, want 0", in, allocs)
		}
	}
	b := 80 * GiB
	if allocs := testing.AllocsPerRun(100, func() { _ = b.GiB() }); allocs != 0 {
		t.Errorf("Bytes.GiB allocates %v times, want 0", allocs)
	}
}

// refSize is the shape of a size as ParseBytes reads it, taken apart by a
// regular expression rather than by ParseBytes' scanner.
var refSize = regexp.MustCompile(`^([0-9]*)(?:\.([0-9]*))?[ \t]*((?s).*)$`)

// refParseBytes is a reference for ParseBytes: the number is read by
// math/big as an exact rational, multiplied by the unit and rounded up.
// ok is false for input ParseBytes must reject: no digits, an unknown
// unit, more than maxFracDigits decimal places (trailing zeros aside),
// or a value above math.MaxInt64.
func refParseBytes(s string) (Bytes, bool) {
	m := refSize.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil || m[1] == "" && m[2] == "" {
		return 0, false
	}
	if len(strings.TrimRight(m[2], "0")) > maxFracDigits {
		return 0, false
	}
	mult, err := parseUnit(m[3])
	if err != nil {
		return 0, false
	}
	r, ok := new(big.Rat).SetString(m[1] + "." + m[2] + "0")
	if !ok {
		return 0, false
	}
	r.Mul(r, new(big.Rat).SetUint64(mult))
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 0, false
	}
	return Bytes(q.Int64()), true
}

// TestParseBytesFractionsRandom compares ParseBytes with the math/big
// reference on fractions of every length up to the limit, in every unit,
// with digits biased towards 0 and 9 so that carries and exact
// boundaries (0.4999…, 0.5000…1) come up often.
func TestParseBytesFractionsRandom(t *testing.T) {
	t.Parallel()
	units := []string{"", "B", "K", "KiB", "M", "MiB", "G", "GiB", "T", "TiB", "P", "PiB"}
	wholes := []string{"", "0", "1", "7", "79", "1023", "8191", "8388607", "9223372036854775807", "9223372036"}
	x := uint64(0x243F6A8885A308D3)
	next := func(n uint64) uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x % n
	}
	var buf []byte
	for range 50000 {
		buf = append(buf[:0], wholes[next(uint64(len(wholes)))]...)
		buf = append(buf, '.')
		k := int(next(maxFracDigits + 3)) // 0 ... maxFracDigits+2 digits
		for range k {
			switch next(4) {
			case 0:
				buf = append(buf, '0')
			case 1:
				buf = append(buf, '9')
			default:
				buf = append(buf, byte('0'+next(10)))
			}
		}
		if next(4) == 0 {
			buf = append(buf, ' ')
		}
		buf = append(buf, units[next(uint64(len(units)))]...)
		in := string(buf)
		want, ok := refParseBytes(in)
		got, err := ParseBytes(in)
		switch {
		case ok && (err != nil || got != want):
			t.Fatalf("ParseBytes(%q) = %d, %v, want %d", in, got, err, want)
		case !ok && err == nil:
			t.Fatalf("ParseBytes(%q) = %d, want an error", in, got)
		case !ok && !errors.Is(err, ErrRange) && !errors.Is(err, ErrSyntax):
			t.Fatalf("ParseBytes(%q) error %v, want ErrRange or ErrSyntax", in, err)
		}
	}
}

// TestParseBytesLongFractions: a fraction of more than maxFracDigits
// decimal places is rejected (ErrRange) however long, and trailing zeros
// do not count; neither case allocates beyond the error, so the work is
// linear in the input and no big-number arithmetic runs.
func TestParseBytesLongFractions(t *testing.T) { // not parallel: AllocsPerRun
	places := strings.Repeat("7", maxFracDigits)
	ok := "0." + places + " GiB"
	want := ceilRat(t, "0."+places, int64(GiB))
	got, err := ParseBytes(ok)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// The same with a million trailing zeros is the same size.
	zeros := "0." + places + strings.Repeat("0", 1_000_000) + " GiB"
	got, err = ParseBytes(zeros)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	for _, in := range []string{
		"0." + places + "1 GiB",                                       // one place too many
		"1." + strings.Repeat("3", 1_000_000) + " GiB",                // a million places
		"1." + strings.Repeat("0", 1_000_000) + "1",                   // a million places, mostly zeros
		"0." + places + "1" + strings.Repeat("0", 1000) + " bytes",    // trailing zeros after the 41st place
		"8191.99999999999999999999999999999999999999999999999999 TiB", // 50 places
	} {
		_, err := ParseBytes(in)
		var pe *ParseError
		require.ErrorAs(t, err, &pe, "%.60q", in)
		assert.Equal(t, in, pe.Input)
		assert.ErrorIs(t, err, ErrRange, "%.60q", in)
		assert.Contains(t, err.Error(), "decimal places")
	}

	for _, in := range []string{ok, zeros, "8388606." + strings.Repeat("9", maxFracDigits) + " TiB"} {
		if allocs := testing.AllocsPerRun(10, func() { _, _ = ParseBytes(in) }); allocs != 0 {
			t.Errorf("ParseBytes(%.60q...) allocates %v times, want 0", in, allocs)
		}
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"0", "80GiB", "79.15 GiB", "80GB", "512 bytes", "1.5Ki", "32Gb", "-1", "9223372036854775807",
		"0.99999999999999999999999999 TiB", "1e9", ".5", "NaN", "8191.9999 TiB",
		"0.4999999999999999999999999999999999999999 KiB", "8388607.9999999999999999999999999999999999999 TiB",
		"1." + strings.Repeat("1", 41)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBytes(s)
		want, ok := refParseBytes(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Input != s {
				t.Fatalf("ParseBytes(%q) error %v is not a *ParseError with the input", s, err)
			}
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) && !errors.Is(err, ErrUnit) {
				t.Fatalf("ParseBytes(%q) error %v wraps no category", s, err)
			}
			if ok {
				t.Fatalf("ParseBytes(%q): %v; math/big reads %d", s, err, want)
			}
			return
		}
		if !ok || b != want {
			t.Fatalf("ParseBytes(%q) = %d; math/big reads %d (valid: %v)", s, b, want, ok)
		}
		if b < 0 {
			t.Fatalf("ParseBytes(%q) = %d, negative", s, b)
		}
		back, err := ParseBytes(b.Exact())
		if err != nil || back != b {
			t.Fatalf("ParseBytes(%q) = %d; ParseBytes(%q) = %d, %v", s, b, b.Exact(), back, err)
		}
	})
}

func BenchmarkParseBytes(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseBytes("79.15 GiB"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseBytesDigits shows how the time grows with the length of
// the fraction: "digits=N" is N non-zero decimal places (rejected beyond
// maxFracDigits), "zeros=N" a short fraction followed by N zeros
// (accepted); both should grow at most linearly in N.
func BenchmarkParseBytesDigits(b *testing.B) {
	for _, n := range []int{2, 19, 40, 1_000, 10_000, 100_000} {
		in := "1." + strings.Repeat("7", n) + " GiB"
		b.Run("digits="+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				_, _ = ParseBytes(in)
			}
		})
	}
	for _, n := range []int{100, 10_000, 1_000_000} {
		in := "1.5" + strings.Repeat("0", n) + " GiB"
		b.Run("zeros="+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := ParseBytes(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBytesString(b *testing.B) {
	b.ReportAllocs()
	v := 81559 * MiB
	for b.Loop() {
		_ = v.String()
	}
}
