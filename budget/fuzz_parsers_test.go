package budget

import "testing"

// FuzzParsePrecision reads arbitrary precision names: an error, or a
// policy whose printed name reads back as itself.
func FuzzParsePrecision(f *testing.F) {
	for _, s := range []string{"fp32", "bf16-mixed", "amp", "16-mixed", "bf16-master", "deepspeed-bf16", "bf16", "fp8", "", "BF16", "fp16 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrecision(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		back, err := ParsePrecision(p.String())
		if err != nil || back != p {
			t.Fatalf("ParsePrecision(%q) = %v, whose name reads as %v, %v", s, p, back, err)
		}
	})
}
