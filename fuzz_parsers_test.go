package gpumem

import (
	"encoding/json"
	"testing"
)

// FuzzParseDType reads arbitrary dtype names: an error, or a valid DType
// whose name reads back as itself.
func FuzzParseDType(f *testing.F) {
	for _, s := range []string{"fp32", "bf16", "float16", "torch.bfloat16", "Q4_K", "q4_k_m", "nf4", "fp8_e4m3", "", "F16", "int8", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDType(s)
		if err != nil {
			return
		}
		if !d.Valid() {
			t.Fatalf("ParseDType(%q) = %v, not a valid dtype", s, d)
		}
		back, err := ParseDType(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDType(%q) = %v, whose name %q reads as %v, %v", s, d, d.String(), back, err)
		}
	})
}

// FuzzBytesJSON decodes arbitrary JSON values as Bytes: an error, or a
// size that is not negative and encodes and decodes to itself.
func FuzzBytesJSON(f *testing.F) {
	for _, s := range []string{`"80GiB"`, `85899345920`, `"79.15 GiB"`, `null`, `-5`, `"0.` + "1234567890123456789012345678901234567890123" + `GiB"`, `1e40`, `"\u0038GB"`, `""`, `"8 EiB"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Bytes
		if err := json.Unmarshal(data, &b); err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("%s decodes to a negative size %d", data, b)
		}
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("Marshal(%d): %v", b, err)
		}
		var again Bytes
		if err := json.Unmarshal(enc, &again); err != nil || again != b {
			t.Fatalf("%s → %d → %s → %d, %v", data, b, enc, again, err)
		}
	})
}

// FuzzParseComputeCapability: a capability that parses prints as one
// that parses back to itself.
func FuzzParseComputeCapability(f *testing.F) {
	for _, s := range []string{"8.0", "sm_90a", "120", "sm86", "", "9.", ".9", "8.0.0", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseComputeCapability(s)
		if err != nil {
			return
		}
		if c.IsZero() || c.Major < 1 || c.Minor < 0 || c.Minor > 9 {
			t.Fatalf("ParseComputeCapability(%q) = %+v", s, c)
		}
		back, err := ParseComputeCapability(c.String())
		if err != nil || back != c {
			t.Fatalf("ParseComputeCapability(%q) = %v, whose String %q reads as %v, %v", s, c, c.String(), back, err)
		}
	})
}
