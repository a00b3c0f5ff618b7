package leak

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
)

// TestSeriesAndTrend: Series gives the points Analyze fitted (warm-up
// dropped, sorted by the axis, other devices and OOM lines left out) and
// Trend the Theil–Sen line through them.
func TestSeriesAndTrend(t *testing.T) {
	var samples []Sample
	// 30 steps of a linear leak, 256 MiB per step from 10 GiB, given in
	// reverse order; device 1 and an OOM line must not be read.
	for i := 29; i >= 0; i-- {
		samples = append(samples, Sample{Step: int64(100 + 10*i), Has: ColStep | ColAllocated,
			Allocated: 10*gpumem.GiB + gpumem.Bytes(i)*256*gpumem.MiB})
		samples = append(samples, Sample{Step: int64(100 + 10*i), Has: ColStep | ColAllocated, Device: 1, Allocated: gpumem.GiB})
	}
	samples = append(samples, Sample{Step: 500, Has: ColStep, OOM: true})
	r, err := Analyze(samples, nil)
	if err != nil {
		t.Fatal(err)
	}
	pts := r.Series(samples, nil)
	if r.WarmUp != 3 || len(pts) != r.Samples || len(pts) != 27 {
		t.Fatalf("warm-up %d, %d points, report %d samples; want 3, 27, 27", r.WarmUp, len(pts), r.Samples)
	}
	for i, p := range pts {
		// The warm-up is the first three lines of the log (steps 390,
		// 380, 370): the rest, sorted, runs from step 100.
		step := 100 + 10*i
		want := 10*gpumem.GiB + gpumem.Bytes(i)*256*gpumem.MiB
		if p.X != float64(step) || p.Bytes != want {
			t.Fatalf("point %d = %+v, want step %d, %v", i, p, step, want)
		}
		y, ok := r.Trend(p.X)
		if !ok || math.Abs(y-float64(want)) > 1 {
			t.Errorf("Trend(%v) = %v, %v; want %v (the series is exactly linear)", p.X, y, ok, want)
		}
	}
	// The line reaches the capacity where the forecast says.
	r2, _ := Analyze(samples, &Options{Capacity: 24 * gpumem.GiB})
	if y, _ := r2.Trend(r2.OOM.Step); !r2.OOM.OK || math.Abs(y-float64(24*gpumem.GiB)) > float64(256*gpumem.MiB) {
		t.Errorf("Trend at the forecast OOM step %v = %v, want about 24 GiB", r2.OOM.Step, y)
	}
	// On a time axis X is seconds after the first sample.
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	var timed []Sample
	for i := range 5 {
		timed = append(timed, Sample{Time: t0.Add(time.Duration(i) * time.Minute), Has: ColTime | ColUsed, Used: gpumem.Bytes(i+1) * gpumem.GiB})
	}
	r3, _ := Analyze(timed, nil)
	pts = r3.Series(timed, nil)
	if len(pts) != 5 || pts[4].X != 240 || pts[4].Bytes != 5*gpumem.GiB {
		t.Errorf("time axis: %+v", pts)
	}
	// Too little data: no line.
	short, _ := Analyze(timed[:1], nil)
	if _, ok := short.Trend(0); ok {
		t.Error("Trend of one sample: ok")
	}
	if strings.TrimSpace(short.Reason) == "" {
		t.Error("no reason for the short series")
	}
}
