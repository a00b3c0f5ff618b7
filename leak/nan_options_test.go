package leak

import (
	"errors"
	"math"
	"testing"

	"github.com/gpumem/gpumem"
)

// TestDetectorNaNOptions: a NaN Threshold or Horizon is the default, not
// a threshold of MinInt64 bytes that alerts on every sample, nor a
// horizon no forecast is within.
func TestDetectorNaNOptions(t *testing.T) {
	t.Parallel()
	d := NewDetector(&DetectorOptions{Capacity: 80 * gpumem.GiB, Threshold: math.NaN()})
	for _, s := range series(50, func(i int) float64 { return 10e9 + float64(i%3)*1e6 }) {
		if a, ok := d.Add(s); ok {
			t.Fatalf("Threshold NaN: Add(%v) raised %v on a flat series far below capacity", s, a)
		}
	}
	kinds := func(o DetectorOptions) map[AlertKind]bool {
		d := NewDetector(&o)
		got := map[AlertKind]bool{}
		for _, s := range llavaLeak(t) {
			if a, ok := d.Add(s); ok {
				got[a.Kind] = true
			}
		}
		return got
	}
	want := kinds(DetectorOptions{Capacity: 24 * gpumem.GiB, Window: 8})
	for _, h := range []float64{math.NaN(), math.Inf(-1), -5} {
		got := kinds(DetectorOptions{Capacity: 24 * gpumem.GiB, Window: 8, Horizon: h})
		if got[AlertGrowth] != want[AlertGrowth] || !want[AlertGrowth] {
			t.Errorf("Horizon %v: growth alert %v, default %v", h, got[AlertGrowth], want[AlertGrowth])
		}
	}
}

// TestAnalyzeSignificance: a NaN or out-of-range Significance is an
// error naming the field, not a test that never finds a leak.
func TestAnalyzeSignificance(t *testing.T) {
	t.Parallel()
	s := series(40, func(i int) float64 { return 1e10 + float64(i)*1e8 })
	for _, p := range []float64{math.NaN(), math.Inf(1), -0.5, 1, 2} {
		_, err := Analyze(s, &Options{Significance: p})
		var fe *gpumem.FieldError
		if !errors.As(err, &fe) || fe.Field != "Options.Significance" || !errors.Is(err, gpumem.ErrInvalid) {
			t.Errorf("Significance %v: %v", p, err)
		}
	}
	r, err := Analyze(s, &Options{Significance: 0.05})
	if err != nil || !r.Leak {
		t.Errorf("Significance 0.05 on a linear leak: leak %v, %v", r.Leak, err)
	}
}
