package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/leak"
)

// usable is what a plan may use of free bytes: free less budget's
// default headroom.
func usable(free gpumem.Bytes) gpumem.Bytes {
	return free - gpumem.Bytes(budget.DefaultHeadroomFraction*float64(free))
}

// near reports whether got is within tol (a fraction) of want.
func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Abs(want) }

// TestRun runs the walk-through and checks each section's figures
// against the chapter's and against the library called directly.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	text := out.String()
	w, err := walkthrough()
	require.NoError(t, err)

	t.Run("footprint", func(t *testing.T) {
		f := w.Footprint
		// The chapter's 14.6 GB rounds the language model up to 7B; the
		// real inventory is within 4% below it.
		if g := f.Total.GB(); g > 14.6 || !near(g, 14.6, 0.04) {
			t.Errorf("LLaVA-1.5-7B fp16 weights = %.2f GB, want just under the chapter's 14.6", g)
		}
		var sum gpumem.Bytes
		for _, b := range f.Weights {
			sum += b
		}
		if sum != f.Total {
			t.Errorf("parts sum to %v, total %v", sum, f.Total)
		}
		if f.Scores != 512*gpumem.MiB {
			t.Errorf("attention matrix = %v, want 2048²·32·4 B = 512 MiB", f.Scores)
		}
		if f.ImageTokens != 576 {
			t.Errorf("image tokens at 336 px = %d, want 576", f.ImageTokens)
		}
		if !near(f.State13.GB(), 106.84, 0.001) {
			t.Errorf("13B AdamW model state = %.2f GB, want the chapter's 106.84 within 0.1%%", f.State13.GB())
		}
		// Eager saves more than flash; the chapter's 2.5x lies between.
		if !(f.Saved13[0] > f.Saved13[1] && float64(f.Saved13[0]) > 2.5*float64(f.Weights13) && float64(f.Saved13[1]) < 2.5*float64(f.Weights13)) {
			t.Errorf("13B activations eager %v, flash %v: want eager > 2.5x weights (%v) > flash", f.Saved13[0], f.Saved13[1], f.Weights13)
		}
		for _, s := range []string{f.Total.HumanSI(), (f.W + f.G + f.O).HumanSI(), f.State13.HumanSI(), f.Peak13[0].HumanSI(), f.Peak13[1].HumanSI()} {
			require.Contains(t, text, s)
		}
	})

	t.Run("plan", func(t *testing.T) {
		ft := w.Fit
		require.True(t, errors.Is(ft.Default, gpumem.ErrDoesNotFit))
		p := ft.Plan
		require.Equal(t, loraName, p.ModelName)
		need, err := budget.Estimate(p.Job)
		require.NoError(t, err)
		if need.Device() > usable(ft.GPU.Free()) {
			t.Errorf("plan needs %v, more than the %v usable", need.Device().String(), usable(ft.GPU.Free()).String())
		}
		next := p.Job
		next.Batch++
		more, err := budget.Estimate(next)
		require.NoError(t, err)
		if more.Device() <= usable(ft.GPU.Free()) {
			t.Errorf("plan's batch %d + 1 needs %v, which fits the %v usable", p.Batch, more.Device().String(), usable(ft.GPU.Free()).String())
		}
		if got := p.Batch * p.GradAccum; got < targetBatch {
			t.Errorf("batch %d × %d accumulation = %d, below the target %d", p.Batch, p.GradAccum, got, targetBatch)
		}
		require.Contains(t, text, fmt.Sprintf("micro-batch %d with %d accumulation steps", p.Batch, p.GradAccum))
		require.Contains(t, text, p.String()[:strings.IndexByte(p.String(), '\n')])
	})

	t.Run("oom", func(t *testing.T) {
		d := w.RTX3090Message.Diag
		if d.Cause != leak.CauseExhausted || math.Abs(100*d.Fragmentation-0.23) > 0.005 {
			t.Errorf("RTX 3090 message: %v, fragmentation %.4f; want exhaustion and the chapter's 0.23%%", d.Cause, d.Fragmentation)
		}
		v := w.Overrun
		require.Greater(t, v.Batch, w.Fit.Plan.Batch)
		o := v.Message.OOM
		// The message states sizes to 0.01 of their unit.
		for _, c := range []struct {
			name      string
			got, want gpumem.Bytes
		}{
			{"requested", o.Requested, v.Request},
			{"capacity", o.Capacity, w.Fit.GPU.Capacity},
			{"allocated", o.Allocated, v.Need.Allocated() - v.Request},
			{"reserved", o.Reserved, v.Need.Allocated() - v.Request + v.Need.Fragmentation},
		} {
			if diff := c.got - c.want; diff < -6*gpumem.MiB || diff > 6*gpumem.MiB {
				t.Errorf("built message: %s read back as %v, built from %v", c.name, c.got.String(), c.want.String())
			}
		}
		// The request overflows what the device has left.
		if o.Requested <= o.Free {
			t.Errorf("built message: request %v fits the %v free", o.Requested.String(), o.Free.String())
		}
		dd := v.Message.Diag
		if dd.Cause != leak.CauseExhausted || len(dd.Advice) == 0 || dd.Advice[0].Action != leak.ActionLowerBatch {
			t.Errorf("built message: cause %v, advice %v; want exhaustion, lower the batch first", dd.Cause, dd.Advice)
		}
		if v.Need.Device() <= w.Fit.GPU.Capacity {
			t.Errorf("micro-batch %d needs %v, within the %v capacity: no OOM", v.Batch, v.Need.Device().String(), w.Fit.GPU.Capacity.String())
		}
		require.Contains(t, text, "Tried to allocate "+formatSize(v.Request))
	})

	t.Run("leak", func(t *testing.T) {
		r := w.Leak.Report
		if r.Shape != leak.ShapeAccelerating || !r.Leak {
			t.Errorf("leaking log: %v (leak %v), want an accelerating leak", r.Shape, r.Leak)
		}
		if !r.OOM.OK || r.OOM.Step <= 900 || r.OOM.Step > 1000 || r.ObservedOOMStep != 1000 {
			t.Errorf("leaking log: forecast %v at step %.0f, observed %d; want between the last sample (900) and the OOM (1000)",
				r.OOM.OK, r.OOM.Step, r.ObservedOOMStep)
		}
		if len(w.Leak.SeedRates) != 8 || !near(w.Leak.SeedRates[0], 3e6, 0.01) || !near(w.Leak.SeedRates[7], 13e6, 0.01) {
			t.Errorf("growth between samples = %v, want the chapter's 3 ... 13 MB per step", w.Leak.SeedRates)
		}
		require.Contains(t, text, fmt.Sprintf("OOM forecast at step %.0f", r.OOM.Step))
	})
}

// TestFormatSize checks the allocator's size format on its tiers.
func TestFormatSize(t *testing.T) {
	for _, c := range []struct {
		b    gpumem.Bytes
		want string
	}{
		{0, "0 bytes"}, {1024, "1024 bytes"}, {1025, "1.00 KiB"}, {gpumem.MiB, "1024.00 KiB"},
		{20 * gpumem.MiB, "20.00 MiB"}, {gpumem.GiB, "1024.00 MiB"}, {gpumem.MustParseBytes("2.5GiB"), "2.50 GiB"},
	} {
		if got := formatSize(c.b); got != c.want {
			t.Errorf("formatSize(%d) = %q, want %q", int64(c.b), got, c.want)
		}
	}
}
