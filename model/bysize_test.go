package model

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
)

// TestGPT3TableCounts: every row of the GPT-3 paper's Table 2.1 comes
// back from GPTBySize as its own shape, and its exact count is within
// the paper's rounding of n_params.
func TestGPT3TableCounts(t *testing.T) {
	for _, r := range GPT3Table {
		s, err := GPTBySize(r.Params)
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if s.Layers != r.Layers || s.Hidden != r.Hidden || s.Heads != r.Hidden/r.HeadDim || s.HeadDim != r.HeadDim {
			t.Errorf("%s: got %d×%d, %d heads of %d; want %d×%d, %d heads of %d", r.Name, s.Layers, s.Hidden, s.Heads, s.HeadDim, r.Layers, r.Hidden, r.Hidden/r.HeadDim, r.HeadDim)
		}
		got := s.Params()
		if got != gptCount(r.Layers, r.Hidden, GPTVocab, GPTContext) {
			t.Errorf("%s: Params %d, formula %d", r.Name, got, gptCount(r.Layers, r.Hidden, GPTVocab, GPTContext))
		}
		// The paper rounds n_params to two or three figures; the GPT-2
		// count is within 2% of each (Medium, 355.9M vs "350M", is the
		// furthest at +1.7%).
		d := float64(got)/float64(r.Params) - 1
		if d > 0.02 || d < -0.02 {
			t.Errorf("%s: %d is %.2f%% from %d", r.Name, got, 100*d, r.Params)
		}
		t.Logf("%s: %d×%d → %d (%.2f%%)", r.Name, s.Layers, s.Hidden, got, 100*d)
	}
}

// TestGPT175BExact: 96 layers of 12288 with the GPT-2 architecture.
// Per block 12·12288² + 13·12288 = 1,811,939,328 + 159,744 =
// 1,812,099,072; × 96 = 173,961,510,912. Token table 50257·12288 =
// 617,558,016; positions 2048·12288 = 25,165,824; final LayerNorm
// 2·12288 = 24,576. Total 174,604,259,328 (the paper's "175.0B").
func TestGPT175BExact(t *testing.T) {
	for _, name := range []string{"gpt:175b", "gpt:96x12288", "GPT:175B", "gpt:175000000000"} {
		s, ok := Lookup(name)
		if !ok {
			t.Fatalf("Lookup(%q) failed", name)
		}
		if got := s.Params(); got != 174_604_259_328 {
			t.Errorf("%s: Params %d, want 174604259328", name, got)
		}
		if s.Heads != 96 || s.HeadDim != 128 || s.Intermediate != 49152 || s.Positions != 2048 || !s.TiedEmbeddings {
			t.Errorf("%s: shape %+v", name, s)
		}
	}
}

// TestGPTBySizeTolerance: every size from 100M to 100T lands within
// GPTTolerance of the request.
func TestGPTBySizeTolerance(t *testing.T) {
	for p := int64(100e6); p <= 100e12; p = p * 11 / 10 {
		s, err := GPTBySize(p)
		if err != nil {
			t.Fatalf("%d: %v", p, err)
		}
		got := s.Params()
		if d := float64(got)/float64(p) - 1; d > GPTTolerance || d < -GPTTolerance {
			t.Errorf("%d: got %d (%d×%d), off by %.2f%%", p, got, s.Layers, s.Hidden, 100*d)
		}
	}
	// 1T: above 175B the aspect stays d_model = 128·n_layers.
	s, _ := GPTBySize(1e12)
	t.Logf("1T: %d×%d = %d", s.Layers, s.Hidden, s.Params())
	if r := float64(s.Hidden) / float64(s.Layers); r < 120 || r > 136 {
		t.Errorf("1T aspect %d/%d", s.Hidden, s.Layers)
	}
}

func TestParseGPTErrors(t *testing.T) {
	for _, name := range []string{"gpt:", "gpt:abc", "gpt:-5b", "gpt:1k", "gpt:1000t", "gpt:96x100", "gpt:0x128", "gpt:nanb", "gpt:inf", "gpt:x"} {
		_, ok, err := ParseGPT(name)
		if !ok || err == nil {
			t.Errorf("%q: ok %v err %v", name, ok, err)
			continue
		}
		var fe *gpumem.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%q: %v is not a FieldError", name, err)
		}
		if _, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) succeeded", name)
		}
	}
	if _, ok, err := ParseGPT("gpt2"); ok || err != nil {
		t.Errorf("gpt2: ok %v err %v", ok, err)
	}
}

// FuzzParseGPT: any name parses without panicking; a by-size model it
// accepts validates, and a size request lands within GPTTolerance.
func FuzzParseGPT(f *testing.F) {
	for _, s := range []string{"gpt:175b", "gpt:96x12288", "gpt:1.3b", "gpt:1t", "gpt:0x0", "gpt:1e9", "gpt:9999999999999999999x1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		s, ok, err := ParseGPT(name)
		if !ok || err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if s.Params() <= 0 {
			t.Fatalf("%q: no parameters", name)
		}
	})
}
