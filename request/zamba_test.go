package request_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/request"
)

// TestZambaDefaultAttention: transformers' Zamba has no SDPA path, so a
// Zamba job's default sdpa reads as eager and the job estimates; a
// Zamba2 job keeps sdpa.
func TestZambaDefaultAttention(t *testing.T) {
	for family, want := range map[string]model.Attention{"zamba": model.Eager, "zamba2": model.SDPA} {
		s, err := model.FromHFConfig(strings.NewReader(`{"model_type": "` + family + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		var f request.Flags
		fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse([]string{"--train", "--batch", "1", "--seq", "1024"}); err != nil {
			t.Fatal(err)
		}
		j, _, err := f.JobFor(s)
		if err != nil {
			t.Fatalf("%s: %v", family, err)
		}
		if j.Attention != want {
			t.Errorf("%s: attention %s, want %s", family, j.Attention, want)
		}
		if _, err := budget.Estimate(j); err != nil {
			t.Fatalf("%s: %v", family, err)
		}
	}
}
