package leak

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/gpumem/gpumem"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Shape is the form of a memory series.
type Shape uint8

// Shapes that [Analyze] tells apart.
const (
	ShapeInsufficient Shape = iota // fewer usable samples than Options.MinSamples
	ShapeFlat                      // no growth beyond noise
	ShapeSaturating                // growth in the first half that levels off (warm-up, cache filling)
	ShapeStepChange                // one jump, flat before and after (a larger batch, an eval pass)
	ShapeLinear                    // steady growth: a linear leak
	ShapeAccelerating              // growth that speeds up: an accelerating leak
	ShapeSawtooth                  // repeated rises and releases (cache flushes, eval/train alternation)
	ShapeDeclining                 // memory falls
	ShapeIrregular                 // none of the above
	// ShapeRising is a short series (2 to Options.MinSamples − 1
	// samples) that rises beyond the flat tolerance: too few samples to
	// test the growth, so never a leak verdict.
	ShapeRising
)

// String returns the shape's name ("accelerating leak").
func (s Shape) String() string {
	switch s {
	case ShapeInsufficient:
		return "not enough data"
	case ShapeFlat:
		return "flat"
	case ShapeSaturating:
		return "saturating warm-up"
	case ShapeStepChange:
		return "step change"
	case ShapeLinear:
		return "linear leak"
	case ShapeAccelerating:
		return "accelerating leak"
	case ShapeSawtooth:
		return "sawtooth"
	case ShapeDeclining:
		return "declining"
	case ShapeRising:
		return "rising (too few samples for a verdict)"
	}
	return "irregular"
}

// Axis is what the trend is measured against.
type Axis uint8

// Axes.
const (
	AxisIndex Axis = iota // sample number (neither step nor time in every sample)
	AxisStep              // training step
	AxisTime              // seconds since the first sample
)

// Options tunes [Analyze]. The zero value, and a nil *Options, mean the
// defaults.
type Options struct {
	// Capacity is the device memory the forecast runs to. Default: the
	// largest Capacity among the samples (nvidia-smi memory.total), else
	// no forecast.
	Capacity gpumem.Bytes
	// Column is the memory column to analyze (ColUsed, ColReserved or
	// ColAllocated). Default: the one most samples have, preferring
	// Used, then Reserved, then Allocated.
	Column Column
	// WarmUp is the number of leading samples to drop. Default (0):
	// 10% of the samples when there are at least 20, else none; −1: none.
	WarmUp int
	// MinSamples is the fewest samples a leak verdict is given on.
	// Default 5, at least 3. A series of 2 to MinSamples − 1 samples is
	// described (growth per step between the samples, its range, a
	// forecast at that rate) with Report.Short set and no verdict; one of
	// fewer than 2 is ShapeInsufficient.
	MinSamples int
	// Significance is the one-sided p-value below which growth counts as
	// a leak and curvature as acceleration, in (0, 1). Default (zero)
	// 0.01; Analyze refuses NaN and values outside [0, 1).
	Significance float64
	// Device selects one GPU when the samples name several (nvidia-smi
	// rows with an index column). Default 0: GPU 0.
	Device int
	// Run selects one run of a log whose steps restart (Sample.Run: a
	// prose narrative that tells two runs). Default 0: the first.
	Run int
	// StepUnit names what Sample.Step counts, for Report.Unit, the reason
	// and the forecast: "step" (default, also for ""), "iteration",
	// "epoch", "sample" or "event" (an allocator trace entry of a PyTorch
	// memory snapshot) (ReadReport.StepUnit).
	StepUnit string
}

func (o *Options) withDefaults() Options {
	var v Options
	if o != nil {
		v = *o
	}
	if v.MinSamples < 3 {
		v.MinSamples = 5
	}
	if v.Significance == 0 {
		v.Significance = 0.01
	}
	return v
}

// Report is the analysis of a memory series, with the numbers behind it.
// Slopes are in bytes per unit of Axis (per step, per second, per sample).
type Report struct {
	Samples int    // samples analyzed, after warm-up removal
	WarmUp  int    // leading samples dropped
	Column  Column // the memory column analyzed
	Axis    Axis
	// StepUnit is what a step counts when Axis is AxisStep
	// (Options.StepUnit, default "step"); see [Report.Unit].
	StepUnit string
	Peak     bool // the column is a running peak: growth is not read as a leak

	Shape Shape
	// Short is a series of 2 to Options.MinSamples − 1 samples: Shape is
	// flat, rising, declining or irregular, BytesPerStep the Theil–Sen
	// slope of those samples, SlopeLow and SlopeHigh the least and most
	// growth per Axis unit between consecutive samples (the bound), and
	// Confidence the OLS one with n − 2 degrees of freedom (NaN, JSON
	// null, for 2 samples); Leak is always false.
	Short               bool
	SlopeLow, SlopeHigh float64
	MinSamples          int     // Options.MinSamples in effect: the fewest samples a verdict needs
	Runs                int     // distinct Sample.Run values among the samples (1 for most logs)
	Run                 int     // the run analyzed (Options.Run)
	Leak                bool    // significant growth (linear or accelerating), not a running peak
	Accelerating        bool    // the growth rate increases significantly
	Confidence          float64 // 1 − the one-sided p-value of the OLS slope being > 0

	BytesPerStep float64 // Theil–Sen slope (median of pairwise slopes), bytes per Axis unit
	BytesPerHour float64 // growth per hour when samples carry times, else 0
	OLSSlope     float64 // least-squares slope (gonum stat.LinearRegression)
	OLSStdErr    float64 // its standard error
	RSquared     float64 // of the linear fit
	Curvature    float64 // second derivative of the quadratic fit, bytes per Axis unit²
	FirstSlope   float64 // OLS slope of the first half
	SecondSlope  float64 // OLS slope of the second half

	First, Last, Min, Max gpumem.Bytes // observed values

	Capacity        gpumem.Bytes // from Options or the samples; 0 if unknown
	OOM             Forecast     // Forecast(Capacity)
	ObservedOOM     bool         // the log reports an OOM
	ObservedOOMStep int64        // its step, when ObservedOOM and the log has steps

	Reason string // one sentence with the numbers

	fit fitState
}

// fitState keeps what Forecast needs.
type fitState struct {
	x0, xLast, xMean, xScale float64 // axis origin, last x (relative), centering and scaling of the quadratic
	tsIntercept, tsSlope     float64 // Theil–Sen line (relative x)
	q                        [3]float64
	lastY                    float64
	secondSlope              float64
	timeOrigin               time.Time
	secondsPerX              float64 // when the axis is steps and samples carry times
	hasTime                  bool
	growing                  bool
	accelerating             bool
}

// Analyze fits the trend of a memory series and classifies it.
//
// Method: the series is the chosen column against steps (when every
// sample has one), else times, else sample numbers; leading warm-up
// samples are dropped. The slope is estimated robustly by Theil–Sen
// (median of pairwise slopes; on at most 400 evenly spaced samples) and by
// least squares (gonum stat.LinearRegression) whose t statistic gives the
// one-sided p-value of growth (Student's t, n−2 degrees of freedom).
// Curvature comes from a least-squares quadratic on the centred axis; it
// counts as acceleration when the F test of the quadratic term
// (1, n−3 degrees of freedom) is significant, the term is positive and the
// second half's slope exceeds the first half's. Samples with OOM set are
// not fitted; the first one is reported as ObservedOOM.
//
// Analyze returns Shape ShapeInsufficient, not an error, below
// Options.MinSamples; it returns an error for invalid options.
func Analyze(samples []Sample, opts *Options) (Report, error) {
	o := opts.withDefaults()
	var r Report
	switch o.Column {
	case 0, ColUsed, ColReserved, ColAllocated:
	default:
		return r, gpumem.Errorf("Options.Column", o.Column, gpumem.ErrInvalid, "want ColUsed, ColReserved or ColAllocated")
	}
	if o.Capacity < 0 {
		return r, gpumem.Errorf("Options.Capacity", o.Capacity, gpumem.ErrRange, "negative capacity")
	}
	if o.Device < 0 {
		return r, gpumem.Errorf("Options.Device", o.Device, gpumem.ErrRange, "negative device index")
	}
	if !(o.Significance > 0 && o.Significance < 1) { // NaN too
		return r, gpumem.Errorf("Options.Significance", o.Significance, gpumem.ErrInvalid, "want a p-value in (0, 1), or 0 for 0.01")
	}
	if o.WarmUp < -1 {
		return r, gpumem.Errorf("Options.WarmUp", o.WarmUp, gpumem.ErrRange, "want −1, 0 (automatic) or a count")
	}
	switch o.StepUnit {
	case "":
		o.StepUnit = "step"
	case "step", "iteration", "epoch", "sample", "event":
	default:
		return r, gpumem.Errorf("Options.StepUnit", o.StepUnit, gpumem.ErrInvalid, `want "step", "iteration", "epoch", "sample" or "event"`)
	}
	r.StepUnit = o.StepUnit
	r.Capacity = o.Capacity
	for _, s := range samples {
		if s.OOM && !r.ObservedOOM {
			r.ObservedOOM = true
			r.ObservedOOMStep = s.Step
		}
		if o.Capacity == 0 && s.Has&ColCapacity != 0 && s.Capacity > r.Capacity {
			r.Capacity = s.Capacity
		}
	}
	if o.Run < 0 {
		return r, gpumem.Errorf("Options.Run", o.Run, gpumem.ErrRange, "negative run index")
	}
	r.MinSamples = o.MinSamples
	r.Run = o.Run
	runs := map[int]bool{}
	for _, s := range samples {
		runs[s.Run] = true
	}
	r.Runs = max(1, len(runs))
	r.Column = o.Column
	if r.Column == 0 {
		r.Column = pickColumn(samples)
	}
	// The usable samples.
	use := usable(samples, r.Column, o.Device, o.Run)
	allStep, allTime := true, true
	for _, s := range use {
		allStep = allStep && s.Has&ColStep != 0
		allTime = allTime && s.Has&ColTime != 0
		r.Peak = r.Peak || s.Peak
	}
	switch {
	case len(use) > 0 && allStep:
		r.Axis = AxisStep
	case len(use) > 0 && allTime:
		r.Axis = AxisTime
	}
	warm := o.WarmUp
	switch {
	case warm == -1:
		warm = 0
	case warm == 0 && len(use) >= 20:
		warm = len(use) / 10
	}
	if warm > len(use) {
		warm = len(use)
	}
	r.WarmUp = warm
	use = use[warm:]
	r.Samples = len(use)
	if len(use) < 2 {
		r.Shape = ShapeInsufficient
		r.Reason = fmt.Sprintf("%d usable sample(s): at least 2 are needed to say how memory moves, %d for a leak verdict", len(use), o.MinSamples)
		r.OOM = Forecast{Reason: "not enough data"}
		return r, nil
	}
	n := len(use)
	x := make([]float64, n)
	y := make([]float64, n)
	r.fit.timeOrigin = use[0].Time
	for i, s := range use {
		x[i] = axisX(s, r.Axis, use[0].Time, i)
		y[i] = float64(value(s, r.Column))
	}
	// Sort by x (logs may interleave); keep pairs together.
	if !slices.IsSorted(x) {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmpFloat(x[a], x[b]) })
		x2, y2 := make([]float64, n), make([]float64, n)
		for i, j := range idx {
			x2[i], y2[i] = x[j], y[j]
		}
		x, y = x2, y2
	}
	r.fit.x0 = x[0]
	for i := range x {
		x[i] -= r.fit.x0
	}
	span := x[n-1]
	if span <= 0 {
		r.Shape = ShapeInsufficient
		r.Reason = "all samples share one step or time"
		r.OOM = Forecast{Reason: "not enough data"}
		return r, nil
	}
	r.fit.xLast = span
	r.fit.lastY = y[n-1]
	r.First, r.Last = gpumem.Bytes(y[0]), gpumem.Bytes(y[n-1])
	minY, maxY := slices.Min(y), slices.Max(y)
	r.Min, r.Max = gpumem.Bytes(minY), gpumem.Bytes(maxY)
	meanY := stat.Mean(y, nil)
	if n < o.MinSamples {
		analyzeShort(&r, x, y, meanY)
		r.OOM = r.Forecast(r.Capacity)
		r.Reason = describe(&r)
		return r, nil
	}

	// Robust slope.
	r.BytesPerStep = theilSen(x, y)
	r.fit.tsSlope = r.BytesPerStep
	r.fit.tsIntercept = interceptMedian(x, y, r.BytesPerStep)

	// Least squares and its significance.
	alpha, beta := stat.LinearRegression(x, y, nil, false)
	r.OLSSlope = beta
	r.RSquared = stat.RSquared(x, y, nil, alpha, beta)
	rssLin, sxx := 0.0, 0.0
	mx := stat.Mean(x, nil)
	for i := range x {
		e := y[i] - alpha - beta*x[i]
		rssLin += e * e
		sxx += (x[i] - mx) * (x[i] - mx)
	}
	p := 1.0
	if n > 2 && sxx > 0 {
		r.OLSStdErr = math.Sqrt(rssLin / float64(n-2) / sxx)
		switch {
		case r.OLSStdErr > 0:
			t := beta / r.OLSStdErr
			p = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 2)}.Survival(t)
		case beta > 0:
			p = 0
		}
	}
	r.Confidence = 1 - p

	// Halves.
	h := n / 2
	r.FirstSlope = olsSlope(x[:h+n%2], y[:h+n%2])
	r.SecondSlope = olsSlope(x[h:], y[h:])
	r.fit.secondSlope = r.SecondSlope

	// Quadratic on the centred, scaled axis.
	r.fit.xMean = mx
	r.fit.xScale = math.Sqrt(sxx / float64(n))
	q, rssQuad, okQ := quadFit(x, y, mx, r.fit.xScale)
	pQuad := 1.0
	if okQ {
		r.fit.q = q
		r.Curvature = 2 * q[2] / (r.fit.xScale * r.fit.xScale)
		if n > 3 && rssQuad > 0 {
			f := (rssLin - rssQuad) / (rssQuad / float64(n-3))
			if f > 0 {
				pQuad = distuv.F{D1: 1, D2: float64(n - 3)}.Survival(f)
			}
		} else if n > 3 && rssLin > 0 {
			pQuad = 0
		}
	}
	r.Accelerating = okQ && q[2] > 0 && pQuad < o.Significance && r.SecondSlope > r.FirstSlope && p < o.Significance

	// Times for per-hour rates and forecasts.
	if r.Axis == AxisTime {
		r.fit.hasTime = true
		r.fit.secondsPerX = 1
	} else if allTime {
		tx := make([]float64, n)
		ts := make([]float64, n)
		for i, s := range use {
			tx[i] = float64(i)
			if r.Axis == AxisStep {
				tx[i] = float64(s.Step) - r.fit.x0
			}
			ts[i] = s.Time.Sub(use[0].Time).Seconds()
		}
		_, b := stat.LinearRegression(tx, ts, nil, false)
		if b > 0 {
			r.fit.hasTime = true
			r.fit.secondsPerX = b
		}
	}
	if r.fit.hasTime {
		r.BytesPerHour = r.BytesPerStep / r.fit.secondsPerX * 3600
	}

	r.Shape = classify(&r, x, y, meanY, p, o.Significance)
	r.Leak = !r.Peak && (r.Shape == ShapeLinear || r.Shape == ShapeAccelerating)
	r.fit.growing = r.Shape == ShapeLinear || r.Shape == ShapeAccelerating
	r.fit.accelerating = r.Shape == ShapeAccelerating
	if r.Shape == ShapeSawtooth {
		sawtoothTrend(&r, x, y, meanY, o.Significance)
	}
	r.OOM = r.Forecast(r.Capacity)
	r.Reason = describe(&r)
	return r, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pickColumn returns the memory column most samples have, preferring
// Used, Reserved, Allocated on ties.
func pickColumn(samples []Sample) Column {
	var nu, nr, na int
	for _, s := range samples {
		if s.Has&ColUsed != 0 {
			nu++
		}
		if s.Has&ColReserved != 0 {
			nr++
		}
		if s.Has&ColAllocated != 0 {
			na++
		}
	}
	switch {
	case nu >= nr && nu >= na && nu > 0:
		return ColUsed
	case nr >= na && nr > 0:
		return ColReserved
	case na > 0:
		return ColAllocated
	}
	return ColUsed
}

// usable returns the samples of device and run that carry column c and are not
// an out-of-memory report: the series Analyze reads (before warm-up).
func usable(samples []Sample, c Column, device, run int) []Sample {
	use := make([]Sample, 0, len(samples))
	for _, s := range samples {
		if s.OOM || s.Has&c == 0 || s.Device != device || s.Run != run {
			continue
		}
		use = append(use, s)
	}
	return use
}

// axisX is sample s's value on axis a: its step, its seconds after
// origin (the first usable sample's time), or its index i.
func axisX(s Sample, a Axis, origin time.Time, i int) float64 {
	switch a {
	case AxisStep:
		return float64(s.Step)
	case AxisTime:
		return s.Time.Sub(origin).Seconds()
	}
	return float64(i)
}

// Point is one sample of the series a Report fitted: X on the report's
// axis (see [Report.Unit]; seconds after the first sample on a time
// axis) and the bytes of the column analyzed.
type Point struct {
	X     float64
	Bytes gpumem.Bytes
}

// Series returns the points r was fitted to, sorted by X: the samples of
// the column r analyzed, after its warm-up, read as Analyze read them.
// samples and opts must be those given to Analyze. It allocates; Analyze
// does not keep the series.
func (r Report) Series(samples []Sample, opts *Options) []Point {
	o := opts.withDefaults()
	use := usable(samples, r.Column, o.Device, o.Run)
	if r.WarmUp >= len(use) {
		return nil
	}
	use = use[r.WarmUp:]
	pts := make([]Point, len(use))
	for i, s := range use {
		pts[i] = Point{X: axisX(s, r.Axis, use[0].Time, i), Bytes: value(s, r.Column)}
	}
	slices.SortStableFunc(pts, func(a, b Point) int { return cmpFloat(a.X, b.X) })
	return pts
}

// Trend returns the fitted line's memory in bytes at x on the report's
// axis: the Theil–Sen line (BytesPerStep through the median intercept)
// that the report's slope and linear forecast use. ok is false when
// there was too little data to fit one.
func (r Report) Trend(x float64) (bytes float64, ok bool) {
	if r.Shape == ShapeInsufficient || r.Samples == 0 {
		return 0, false
	}
	return r.fit.tsIntercept + r.fit.tsSlope*(x-r.fit.x0), true
}

func describe(r *Report) string {
	if r.Shape == ShapeInsufficient {
		return r.Reason
	}
	if r.Runs > 1 {
		return fmt.Sprintf("run %d of %d (the steps restart): %s", r.Run+1, r.Runs, describeRun(r))
	}
	return describeRun(r)
}

func describeRun(r *Report) string {
	unit := r.Unit()
	if r.Short {
		return describeShort(r, unit)
	}
	s := fmt.Sprintf("%s over %d samples: %s → %s, %s per %s (Theil–Sen), R² %.2f, confidence %.3f",
		r.Shape, r.Samples, r.First.String(), r.Last.String(), gpumem.Bytes(math.Round(r.BytesPerStep)).String(), unit, r.RSquared, r.Confidence)
	if r.Accelerating {
		s += fmt.Sprintf("; slope rose from %s to %s per %s", gpumem.Bytes(math.Round(r.FirstSlope)).String(), gpumem.Bytes(math.Round(r.SecondSlope)).String(), unit)
	}
	if r.Peak {
		s += "; running-peak column: growth means a new largest batch, not a leak"
	}
	if r.OOM.OK {
		s += fmt.Sprintf("; OOM at %s (%.0f–%.0f)", r.At(r.OOM.Step), r.OOM.Low, r.OOM.High)
	}
	return s
}

// Unit returns what the axis counts, the unit of BytesPerStep, of the
// slopes and of Forecast.Step: Report.StepUnit ("step", "iteration",
// "epoch", "sample") when Axis is AxisStep, "second" (since the first
// sample) for AxisTime, "sample" for AxisIndex.
func (r Report) Unit() string {
	switch r.Axis {
	case AxisStep:
		if r.StepUnit == "" {
			return "step"
		}
		return r.StepUnit
	case AxisTime:
		return "second"
	}
	return "sample"
}

// At writes a value of the axis with its unit: "epoch 34", "iteration
// 1200", "5230 s after the first sample".
func (r Report) At(x float64) string {
	if r.Axis == AxisTime {
		return fmt.Sprintf("%.0f s after the first sample", x)
	}
	return fmt.Sprintf("%s %.0f", r.Unit(), x)
}

// LogValue implements [slog.LogValuer].
func (r Report) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("shape", r.Shape.String()),
		slog.Int("samples", r.Samples),
		slog.Bool("leak", r.Leak),
		slog.Float64("bytes_per_step", r.BytesPerStep),
		slog.Bool("accelerating", r.Accelerating),
		slog.Bool("oom", r.OOM.OK),
		slog.Float64("oom_step", r.OOM.Step),
	)
}
