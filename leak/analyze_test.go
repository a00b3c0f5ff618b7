package leak

import (
	"math"
	"os"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func llavaLeak(t testing.TB) []Sample {
	t.Helper()
	f, err := os.Open("testdata/logs/llava-24gb-leak.log")
	require.NoError(t, err)
	defer f.Close()
	s, err := ParseSamples(f)
	require.NoError(t, err)
	return s
}

// TestAnalyzeLLaVALeak checks the leaking log of LLaVA on a 24 GB card
// (docs/scenarios.md): the guide's answer finds
// the per-100-step growth rising from 0.3 to 1.3 GB ("growth is
// accelerating") and the job dies at step 1000. On a 24 GB card (the
// guide's OOM message: 23.69 GiB total capacity; and 24 GiB) the forecast
// must fall between steps 950 and 1100.
func TestAnalyzeLLaVALeak(t *testing.T) {
	t.Parallel()
	s := llavaLeak(t)
	for _, capacity := range []gpumem.Bytes{gpumem.MustParseBytes("23.69 GiB"), 24 * gpumem.GiB} {
		r, err := Analyze(s, &Options{Capacity: capacity})
		require.NoError(t, err)
		assert.Equal(t, ShapeAccelerating, r.Shape, r.Reason)
		assert.True(t, r.Leak)
		assert.True(t, r.Accelerating)
		assert.Equal(t, AxisStep, r.Axis)
		assert.Equal(t, 9, r.Samples)
		assert.True(t, r.ObservedOOM)
		assert.EqualValues(t, 1000, r.ObservedOOMStep)
		require.True(t, r.OOM.OK, r.OOM.Reason)
		if r.OOM.Step < 950 || r.OOM.Step > 1100 {
			t.Errorf("Analyze(the LLaVA leak, %v).OOM.Step = %.0f, want 950..1100", capacity, r.OOM.Step)
		}
		if r.OOM.Low > r.OOM.Step || r.OOM.High < r.OOM.Step || r.OOM.Low < 900 {
			t.Errorf("range %.0f..%.0f does not hold %.0f", r.OOM.Low, r.OOM.High, r.OOM.Step)
		}
		// Average growth 6.0 GB over 800 steps = 7.5 MB/step; Theil–Sen
		// lies between the first (3 MB) and last (13 MB) rates.
		assert.Greater(t, r.BytesPerStep, 3e6)
		assert.Less(t, r.BytesPerStep, 13e6)
		assert.Greater(t, r.SecondSlope, 2*r.FirstSlope)
		t.Logf("capacity %v: %s", capacity, r.Reason)
	}
}

func series(n int, f func(i int) float64) []Sample {
	s := make([]Sample, n)
	for i := range s {
		s[i] = Sample{Step: int64(i * 10), Used: gpumem.Bytes(f(i)), Has: ColStep | ColUsed, Line: i + 1}
	}
	return s
}

func TestAnalyzeShapes(t *testing.T) {
	t.Parallel()
	g := float64(gpumem.GiB)
	noise := func(i int) float64 { return float64((i*7919)%13-6) * 1e6 } // ±6 MB, deterministic
	tests := []struct {
		name string
		s    []Sample
		want Shape
		leak bool
	}{
		{"flat", series(100, func(i int) float64 { return 10*g + noise(i) }), ShapeFlat, false},
		{"linear leak", series(100, func(i int) float64 { return 10*g + float64(i)*50e6 + noise(i) }), ShapeLinear, true},
		{"accelerating leak", series(100, func(i int) float64 { return 10*g + float64(i*i)*1e6 + noise(i) }), ShapeAccelerating, true},
		{"saturating warm-up", series(100, func(i int) float64 { return 10*g + 4*g*(1-math.Exp(-float64(i)/8)) + noise(i) }), ShapeSaturating, false},
		{"step change", series(100, func(i int) float64 {
			if i < 60 {
				return 10*g + noise(i)
			}
			return 13*g + noise(i)
		}), ShapeStepChange, false},
		{"sawtooth", series(100, func(i int) float64 { return 10*g + float64(i%20)*200e6 }), ShapeSawtooth, false},
		{"declining", series(100, func(i int) float64 { return 20*g - float64(i)*50e6 + noise(i) }), ShapeDeclining, false},
		{"insufficient", series(1, func(i int) float64 { return g }), ShapeInsufficient, false},
		{"short flat", series(3, func(i int) float64 { return g }), ShapeFlat, false},
		{"short rising", series(4, func(i int) float64 { return g + float64(i)*g }), ShapeRising, false},
		{"short declining", series(2, func(i int) float64 { return 4*g - float64(i)*g }), ShapeDeclining, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := Analyze(tc.s, &Options{WarmUp: -1})
			require.NoError(t, err)
			if r.Shape != tc.want || r.Leak != tc.leak {
				t.Errorf("Analyze(%s) = %v leak=%v, want %v leak=%v (%s)", tc.name, r.Shape, r.Leak, tc.want, tc.leak, r.Reason)
			}
		})
	}
}

func TestAnalyzePeakIsNotLeak(t *testing.T) {
	t.Parallel()
	s := series(50, func(i int) float64 { return 1e9 + float64(i)*20e6 })
	for i := range s {
		s[i].Allocated, s[i].Used, s[i].Has, s[i].Peak = s[i].Used, 0, ColStep|ColAllocated, true
	}
	r, err := Analyze(s, nil)
	require.NoError(t, err)
	assert.Equal(t, ShapeLinear, r.Shape)
	assert.False(t, r.Leak, "a running peak must not be read as a leak")
	assert.True(t, r.Peak)
}

func TestAnalyzeTimeAxis(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2024, 1, 15, 10, 0, 0, 0, time.UTC)
	var s []Sample
	for i := range 60 {
		s = append(s, Sample{Time: t0.Add(time.Duration(i) * time.Minute), Used: gpumem.Bytes(10e9 + float64(i)*100e6), Capacity: 24 * gpumem.GiB, Has: ColTime | ColUsed | ColCapacity})
	}
	r, err := Analyze(s, &Options{WarmUp: -1})
	require.NoError(t, err)
	assert.Equal(t, AxisTime, r.Axis)
	assert.Equal(t, ShapeLinear, r.Shape)
	assert.InEpsilon(t, 6e9, r.BytesPerHour, 1e-6) // 100 MB per minute
	require.True(t, r.OOM.OK)
	require.True(t, r.OOM.HasTime)
	// 24 GiB = 25.77e9: (25.77e9 − 10e9)/100e6 ≈ 157.7 minutes.
	want := t0.Add(time.Duration((float64(24*gpumem.GiB) - 10e9) / 100e6 * float64(time.Minute)))
	assert.WithinDuration(t, want, r.OOM.Time, time.Second)
}

func TestAnalyzeOptionsErrors(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Column: ColStep}, {Capacity: -1}, {WarmUp: -2}} {
		_, err := Analyze(llavaLeak(t), &o)
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe, "Analyze(%+v)", o)
	}
}

// TestAnalyzeMillion checks the answer on a million samples; how fast it
// comes is BenchmarkAnalyzeMillion's business, not a test's.
func TestAnalyzeMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	s := series(1_000_000, func(i int) float64 { return 1e10 + float64(i)*1000 + float64((i*7919)%1000) })
	r, err := Analyze(s, &Options{Capacity: 80 * gpumem.GiB})
	require.NoError(t, err)
	assert.Equal(t, ShapeLinear, r.Shape)
	assert.InEpsilon(t, 100.0, r.BytesPerStep, 1e-3) // 1000 bytes per 10 steps
}

// BenchmarkAnalyzeMillion is the speed target of Analyze: a million
// samples in well under a second.
func BenchmarkAnalyzeMillion(b *testing.B) {
	s := series(1_000_000, func(i int) float64 { return 1e10 + float64(i)*100 })
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Analyze(s, nil)
	}
}

func TestAnalyzeDevice(t *testing.T) {
	t.Parallel()
	var s []Sample
	for i := range 40 {
		// GPU 0 flat, GPU 1 leaking, interleaved as nvidia-smi prints them.
		s = append(s, Sample{Step: int64(i), Device: 0, Used: 10 * gpumem.GiB, Has: ColStep | ColUsed})
		s = append(s, Sample{Step: int64(i), Device: 1, Used: 10*gpumem.GiB + gpumem.Bytes(i)*100*gpumem.MiB, Has: ColStep | ColUsed})
	}
	r0, err := Analyze(s, nil)
	require.NoError(t, err)
	r1, err := Analyze(s, &Options{Device: 1})
	require.NoError(t, err)
	assert.Equal(t, ShapeFlat, r0.Shape)
	assert.Equal(t, ShapeLinear, r1.Shape)
}

func TestAnalyzeSawtoothLeak(t *testing.T) {
	t.Parallel()
	// Allocated memory that rises and is released every 20 samples, on a
	// baseline that keeps 200 MB more after each release.
	s := series(200, func(i int) float64 { return 8e9 + float64(i/20)*200e6 + float64(i%20)*150e6 })
	r, err := Analyze(s, &Options{WarmUp: -1, Capacity: 24 * gpumem.GiB})
	require.NoError(t, err)
	assert.Equal(t, ShapeSawtooth, r.Shape)
	assert.True(t, r.Leak, r.Reason)
	require.True(t, r.OOM.OK, r.OOM.Reason)
	assert.Greater(t, r.OOM.Step, float64(s[len(s)-1].Step))

	flat := series(200, func(i int) float64 { return 8e9 + float64(i%20)*150e6 })
	r, err = Analyze(flat, &Options{WarmUp: -1, Capacity: 24 * gpumem.GiB})
	require.NoError(t, err)
	assert.Equal(t, ShapeSawtooth, r.Shape)
	assert.False(t, r.Leak)
	assert.False(t, r.OOM.OK)
}
