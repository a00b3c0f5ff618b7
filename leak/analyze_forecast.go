package leak

// Forecasting when a rising series reaches the device's capacity.

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpumem/gpumem"
)

// Forecast is when memory is expected to reach a capacity.
type Forecast struct {
	OK        bool    // the trend reaches the capacity
	Step      float64 // Axis value (step, seconds since the first sample, or sample number; see Report.Unit) where it does
	Low, High float64 // range of that value: the quadratic and the linear extrapolations, and the OLS slope ± 2 standard errors
	Time      time.Time
	TimeLow   time.Time
	TimeHigh  time.Time
	HasTime   bool
	Reason    string
}

// Forecast returns when the fitted trend reaches capacity: for an
// accelerating series the quadratic's crossing (earliest) and the second
// half's straight line (latest); for a linear one the Theil–Sen line, with
// the OLS slope ± 2 standard errors as range. A series that does not grow
// gets OK false.
func (r Report) Forecast(capacity gpumem.Bytes) Forecast {
	f := Forecast{}
	c := float64(capacity)
	switch {
	case capacity <= 0:
		f.Reason = "no capacity given"
		return f
	case r.Shape == ShapeInsufficient:
		f.Reason = "not enough data"
		return f
	case r.fit.lastY >= c:
		f.OK = true
		f.Step = r.fit.x0 + r.fit.xLast
		f.Low, f.High = f.Step, f.Step
		f.Reason = fmt.Sprintf("the last sample (%s) is already at or above %s", gpumem.Bytes(r.fit.lastY).String(), capacity.String())
		r.fillTime(&f)
		return f
	case !r.fit.growing:
		f.Reason = fmt.Sprintf("memory is not growing (%s)", r.Shape)
		return f
	}
	xl := r.fit.xLast
	if r.Short {
		return r.shortForecast(c, capacity)
	}
	var cands []float64
	lin := math.Inf(1)
	if r.fit.tsSlope > 0 {
		lin = (c - r.fit.tsIntercept) / r.fit.tsSlope
		lin = math.Max(lin, xl)
		cands = append(cands, lin)
	}
	for _, s := range []float64{r.OLSSlope - 2*r.OLSStdErr, r.OLSSlope + 2*r.OLSStdErr} {
		if s > 0 {
			cands = append(cands, xl+(c-r.fit.lastY)/s)
		}
	}
	central := lin
	if r.fit.accelerating {
		if xq, ok := r.quadCrossing(c); ok {
			central = xq
			cands = append(cands, xq)
		}
		if r.fit.secondSlope > 0 {
			cands = append(cands, xl+(c-r.fit.lastY)/r.fit.secondSlope)
		}
	}
	if math.IsInf(central, 1) || len(cands) == 0 {
		f.Reason = "the trend does not reach the capacity"
		return f
	}
	f.OK = true
	f.Step = r.fit.x0 + central
	f.Low = r.fit.x0 + slices.Min(cands)
	f.High = r.fit.x0 + slices.Max(cands)
	r.fillTime(&f)
	f.Reason = fmt.Sprintf("%s reaches %s at %s (range %.0f–%.0f)", r.Shape, capacity.String(), r.At(f.Step), f.Low, f.High)
	return f
}

// quadCrossing returns the first x ≥ xLast where the quadratic reaches c.
func (r Report) quadCrossing(c float64) (float64, bool) {
	q := r.fit.q
	a, b, cc := q[2], q[1], q[0]-c
	var roots []float64
	if a == 0 {
		if b == 0 {
			return 0, false
		}
		roots = append(roots, -cc/b)
	} else {
		disc := b*b - 4*a*cc
		if disc < 0 {
			return 0, false
		}
		sq := math.Sqrt(disc)
		roots = append(roots, (-b-sq)/(2*a), (-b+sq)/(2*a))
	}
	zLast := (r.fit.xLast - r.fit.xMean) / r.fit.xScale
	best := math.Inf(1)
	for _, z := range roots {
		if z >= zLast && z < best {
			best = z
		}
	}
	if math.IsInf(best, 1) {
		return 0, false
	}
	return r.fit.xMean + best*r.fit.xScale, true
}

func (r Report) fillTime(f *Forecast) {
	if !r.fit.hasTime {
		return
	}
	at := func(x float64) time.Time {
		sec := (x - r.fit.x0) * r.fit.secondsPerX
		if math.IsNaN(sec) || math.Abs(sec) > 1e11 {
			return time.Time{}
		}
		return r.fit.timeOrigin.Add(time.Duration(sec * 1e9))
	}
	f.HasTime = true
	f.Time, f.TimeLow, f.TimeHigh = at(f.Step), at(f.Low), at(f.High)
}
