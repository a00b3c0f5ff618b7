package leak

import (
	"fmt"
	"math"

	"github.com/gpumem/gpumem"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// analyzeShort describes a series of 2 to MinSamples − 1 samples (x
// sorted and relative to the first, span > 0): what can be said without a
// significance test that has the degrees of freedom to mean something.
//
//   - the shape: flat when the range is within the flat tolerance (as for longer
//     series: see flatTolerance), declining or rising when
//     the net change (last − first) is beyond it, else irregular;
//   - the growth per step: the Theil–Sen slope of the samples (for two,
//     the one slope), and as its bound the least and the most growth per
//     step between consecutive samples (SlopeLow, SlopeHigh);
//   - the OLS confidence with n − 2 degrees of freedom for 3 or 4
//     samples; none (NaN) for 2.
//
// A short series is never a leak: one rise between a handful of readings
// is also what a warm-up, a larger batch or an evaluation pass gives.
func analyzeShort(r *Report, x, y []float64, meanY float64) {
	r.Short = true
	n := len(x)
	r.BytesPerStep = theilSen(x, y)
	r.fit.tsSlope = r.BytesPerStep
	r.fit.tsIntercept = interceptMedian(x, y, r.BytesPerStep)
	r.SlopeLow, r.SlopeHigh = math.Inf(1), math.Inf(-1)
	for i := 1; i < n; i++ {
		dx := x[i] - x[i-1]
		if dx <= 0 {
			continue
		}
		s := (y[i] - y[i-1]) / dx
		r.SlopeLow, r.SlopeHigh = math.Min(r.SlopeLow, s), math.Max(r.SlopeHigh, s)
	}
	if math.IsInf(r.SlopeLow, 0) { // every step shared (not reached: span > 0)
		r.SlopeLow, r.SlopeHigh = r.BytesPerStep, r.BytesPerStep
	}
	alpha, beta := stat.LinearRegression(x, y, nil, false)
	r.OLSSlope = beta
	r.RSquared = stat.RSquared(x, y, nil, alpha, beta)
	r.Confidence = math.NaN()
	if n == 2 {
		r.RSquared = math.NaN() // a line through two points: no fit to speak of
	}
	if n >= 3 {
		rss, sxx, mx := 0.0, 0.0, stat.Mean(x, nil)
		for i := range x {
			e := y[i] - alpha - beta*x[i]
			rss += e * e
			sxx += (x[i] - mx) * (x[i] - mx)
		}
		p := 1.0
		if sxx > 0 {
			r.OLSStdErr = math.Sqrt(rss / float64(n-2) / sxx)
			switch {
			case r.OLSStdErr > 0:
				p = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 2)}.Survival(beta / r.OLSStdErr)
			case beta > 0:
				p = 0
			}
		}
		r.Confidence = 1 - p
	}
	tol := flatTolerance(meanY, r.Column)
	net := y[n-1] - y[0]
	switch {
	case float64(r.Max-r.Min) <= tol:
		r.Shape = ShapeFlat
	case net < -tol:
		r.Shape = ShapeDeclining
	case net > tol:
		r.Shape = ShapeRising
		r.fit.growing = true
	default:
		r.Shape = ShapeIrregular
	}
	r.fit.secondSlope = r.BytesPerStep
}

// shortForecast is Forecast for a short rising series: where the
// Theil–Sen line of its few samples reaches c, with the range given by
// the most and the least growth between consecutive samples (a rate that
// the next samples may well not keep: the reason says so).
func (r Report) shortForecast(c float64, capacity gpumem.Bytes) Forecast {
	f := Forecast{}
	xl := r.fit.xLast
	if r.fit.tsSlope <= 0 {
		f.Reason = "the trend does not reach the capacity"
		return f
	}
	central := math.Max((c-r.fit.tsIntercept)/r.fit.tsSlope, xl)
	lo, hi := central, central
	for _, s := range []float64{r.SlopeLow, r.SlopeHigh} {
		if s > 0 {
			v := xl + (c-r.fit.lastY)/s
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if r.SlopeLow <= 0 {
		hi = math.Inf(1) // one interval did not grow: no upper bound
	}
	f.OK = true
	f.Step = r.fit.x0 + central
	f.Low = r.fit.x0 + lo
	f.High = r.fit.x0 + hi
	r.fillTime(&f)
	f.Reason = fmt.Sprintf("at the rate of %d samples, %s would be reached at %s (an extrapolation from too few samples to test)", r.Samples, capacity.String(), r.At(f.Step))
	return f
}

// describeShort is the reason of a short series.
func describeShort(r *Report, unit string) string {
	conf := "no confidence with 2 samples"
	if !math.IsNaN(r.Confidence) {
		conf = fmt.Sprintf("confidence %.3f with %d degrees of freedom", r.Confidence, r.Samples-2)
	}
	s := fmt.Sprintf("%s over %d samples: %s → %s, %s per %s (Theil–Sen; between consecutive samples %s to %s per %s), %s; %d samples are needed for a leak verdict",
		r.Shape, r.Samples, r.First.String(), r.Last.String(), signedHuman(r.BytesPerStep), unit,
		signedHuman(r.SlopeLow), signedHuman(r.SlopeHigh), unit, conf, r.MinSamples)
	if r.Peak {
		s += "; running-peak column: growth means a new largest batch, not a leak"
	}
	if r.OOM.OK {
		hi := "no upper bound"
		if !math.IsInf(r.OOM.High, 0) {
			hi = fmt.Sprintf("%.0f", r.OOM.High)
		}
		s += fmt.Sprintf("; at this rate OOM at %s (%.0f–%s)", r.At(r.OOM.Step), r.OOM.Low, hi)
	}
	return s
}

// signedHuman writes a growth rate with its sign ("+1.00 GiB", "-2.00
// MiB", "0 B").
func signedHuman(v float64) string {
	b := gpumem.Bytes(math.Round(math.Abs(v)))
	switch {
	case v > 0 && b > 0:
		return "+" + b.String()
	case v < 0 && b > 0:
		return "-" + b.String()
	}
	return b.String()
}
