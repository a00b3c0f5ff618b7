package leak

import (
	"sync"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDetectorLLaVALeak replays the leaking log of LLaVA on a 24 GB card
// (docs/scenarios.md) into a Detector on a 24 GiB card: it must warn
// before the OOM at step 1000 (the guide's memory monitor: warn before
// the crash).
func TestDetectorLLaVALeak(t *testing.T) {
	t.Parallel()
	d := NewDetector(&DetectorOptions{Capacity: 24 * gpumem.GiB, Window: 8})
	var alerts []Alert
	for _, s := range llavaLeak(t) {
		if a, ok := d.Add(s); ok {
			alerts = append(alerts, a)
		}
	}
	require.NotEmpty(t, alerts)
	var growth, thr, oom bool
	for _, a := range alerts {
		switch a.Kind {
		case AlertGrowth:
			growth = true
			assert.Less(t, a.Sample.Step, int64(1000))
		case AlertThreshold:
			thr = true
			assert.Less(t, a.Sample.Step, int64(1000))
		case AlertOOM:
			oom = true
		}
	}
	assert.True(t, growth, "no growth alert: %v", alerts)
	assert.True(t, thr, "no threshold alert: %v", alerts) // 24.2 GB ≥ 90% of 24 GiB
	assert.True(t, oom)
}

func TestDetectorFlatNoAlert(t *testing.T) {
	t.Parallel()
	d := NewDetector(nil)
	for _, s := range series(200, func(i int) float64 { return 10e9 + float64(i%3)*1e6 }) {
		s.Capacity, s.Has = 80*gpumem.GiB, s.Has|ColCapacity
		if a, ok := d.Add(s); ok {
			t.Fatalf("Add(%v) raised %v on a flat series", s, a)
		}
	}
}

func TestDetectorConcurrent(t *testing.T) {
	t.Parallel()
	d := NewDetector(&DetectorOptions{Capacity: 80 * gpumem.GiB})
	s := series(400, func(i int) float64 { return 10e9 + float64(i)*1e8 })
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(s); i += 4 {
				d.Add(s[i])
			}
		}()
	}
	wg.Wait()
}

// TestDetectorZeroValue: a Detector declared without NewDetector works
// as NewDetector(nil) does instead of panicking on its empty ring.
func TestDetectorZeroValue(t *testing.T) {
	t.Parallel()
	var zero Detector
	d := NewDetector(nil)
	for _, s := range llavaLeak(t) {
		s.Capacity, s.Has = 24*gpumem.GiB, s.Has|ColCapacity
		var got, want Alert
		var gotOK, wantOK bool
		require.NotPanics(t, func() { got, gotOK = zero.Add(s) })
		want, wantOK = d.Add(s)
		require.Equal(t, wantOK, gotOK, "sample %v", s)
		assert.Equal(t, want.Kind, got.Kind, "sample %v", s)
	}
}
