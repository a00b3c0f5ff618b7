package leak

// Fitting a series: Theil–Sen and least-squares slopes, the quadratic
// fit, and the classification of the curve's shape.

import (
	"math"
	"slices"

	"github.com/gpumem/gpumem"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

func value(s Sample, c Column) gpumem.Bytes {
	switch c {
	case ColAllocated:
		return s.Allocated
	case ColReserved:
		return s.Reserved
	}
	return s.Used
}

// theilSenMax is the most points Theil–Sen pairs exactly; longer series
// are thinned to this many evenly spaced points (O(n²) pairs otherwise).
const theilSenMax = 400

// theilSen returns the median of the pairwise slopes (y_j − y_i)/(x_j −
// x_i) over pairs with x_j > x_i (Sen 1968).
func theilSen(x, y []float64) float64 {
	n := len(x)
	step := 1.0
	m := n
	if n > theilSenMax {
		m = theilSenMax
		step = float64(n-1) / float64(m-1)
	}
	pick := func(k int) int { return int(math.Round(float64(k) * step)) }
	slopes := make([]float64, 0, m*(m-1)/2)
	for a := 0; a < m; a++ {
		i := pick(a)
		for b := a + 1; b < m; b++ {
			j := pick(b)
			if dx := x[j] - x[i]; dx > 0 {
				slopes = append(slopes, (y[j]-y[i])/dx)
			}
		}
	}
	if len(slopes) == 0 {
		return 0
	}
	return median(slopes)
}

// interceptMedianMax is the most residuals whose median gives the
// Theil–Sen intercept; longer series are thinned evenly (sorting every
// residual of a million samples costs more than the rest of Analyze).
const interceptMedianMax = 10000

// interceptMedian returns the median of y − slope·x (the Theil–Sen
// intercept).
func interceptMedian(x, y []float64, slope float64) float64 {
	n := len(x)
	m := min(n, interceptMedianMax)
	res := make([]float64, m)
	for k := range res {
		i := k
		if n > m {
			i = int(int64(k) * int64(n-1) / int64(m-1))
		}
		res[k] = y[i] - slope*x[i]
	}
	return median(res)
}

// median returns the median of v, reordering v.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func olsSlope(x, y []float64) float64 {
	if len(x) < 2 || x[len(x)-1] == x[0] {
		return 0
	}
	_, b := stat.LinearRegression(x, y, nil, false)
	return b
}

// quadFit fits y = q0 + q1·z + q2·z², z = (x − mean)/scale, by least
// squares (normal equations solved with gonum/mat), and returns the
// residual sum of squares.
func quadFit(x, y []float64, mean, scale float64) ([3]float64, float64, bool) {
	var q [3]float64
	if len(x) < 3 || scale <= 0 {
		return q, 0, false
	}
	var s [5]float64
	var t [3]float64
	for i := range x {
		z := (x[i] - mean) / scale
		zk := 1.0
		for k := 0; k < 5; k++ {
			s[k] += zk
			if k < 3 {
				t[k] += zk * y[i]
			}
			zk *= z
		}
	}
	a := mat.NewDense(3, 3, []float64{s[0], s[1], s[2], s[1], s[2], s[3], s[2], s[3], s[4]})
	b := mat.NewVecDense(3, t[:])
	var sol mat.VecDense
	if err := sol.SolveVec(a, b); err != nil {
		return q, 0, false
	}
	q = [3]float64{sol.AtVec(0), sol.AtVec(1), sol.AtVec(2)}
	rss := 0.0
	for i := range x {
		z := (x[i] - mean) / scale
		e := y[i] - (q[0] + q[1]*z + q[2]*z*z)
		rss += e * e
	}
	return q, rss, true
}

// flatTolerance is growth indistinguishable from noise: 2% of the mean
// level, and at least 32 MiB for reserved and used memory (the caching
// allocator's 2 MiB / 20 MiB segment rounding makes smaller steps
// common) or 512 bytes for allocated memory, which counts the bytes of
// live blocks exactly, each rounded up to kMinBlockSize = 512 bytes
// (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize,
// kSmallBuffer, kLargeBuffer).
func flatTolerance(meanY float64, col Column) float64 {
	floor := float64(32 * gpumem.MiB)
	if col == ColAllocated {
		floor = 512
	}
	return math.Max(0.02*meanY, floor)
}

func classify(r *Report, x, y []float64, meanY, p, alpha float64) Shape {
	n := len(y)
	tol := flatTolerance(meanY, r.Column)
	rng := float64(r.Max - r.Min)
	growth := r.BytesPerStep * r.fit.xLast
	// Sawtooth: at least two releases of a quarter of the range.
	if !r.Peak && rng > tol {
		drops := 0
		for i := 1; i < n; i++ {
			if y[i-1]-y[i] >= 0.25*rng {
				drops++
			}
		}
		if drops >= 2 {
			return ShapeSawtooth
		}
	}
	if rng <= tol || (math.Abs(growth) <= tol && p >= alpha) {
		return ShapeFlat
	}
	// Step change: one rise holds at least half the range and the
	// segments on either side are flat.
	big, at := 0.0, 0
	for i := 1; i < n; i++ {
		if d := y[i] - y[i-1]; d > big {
			big, at = d, i
		}
	}
	if big >= 0.5*rng && at >= 2 && n-at >= 2 {
		before := math.Abs(olsSlope(x[:at], y[:at]) * (x[at-1] - x[0]))
		after := math.Abs(olsSlope(x[at:], y[at:]) * (x[n-1] - x[at]))
		if before <= tol && after <= tol {
			return ShapeStepChange
		}
	}
	if growth < -tol {
		return ShapeDeclining
	}
	// Saturating: the second half barely grows while the first did.
	h := n / 2
	secondGrowth := r.SecondSlope * (x[n-1] - x[h])
	firstGrowth := r.FirstSlope * (x[h] - x[0])
	if firstGrowth > tol && secondGrowth <= math.Max(tol, 0.2*firstGrowth) {
		return ShapeSaturating
	}
	if p < alpha && growth > tol {
		if r.Accelerating {
			return ShapeAccelerating
		}
		return ShapeLinear
	}
	return ShapeIrregular
}

// sawtoothTrend looks at a sawtooth's troughs (the level left after each
// release): when they rise significantly the series leaks under its
// cycles. The forecast then follows the peaks, which reach the capacity
// first, with the troughs' slope.
func sawtoothTrend(r *Report, x, y []float64, meanY, alpha float64) {
	var tx, ty, px, py []float64
	for i := 1; i+1 < len(y); i++ {
		if y[i] < y[i-1] && y[i] <= y[i+1] {
			tx, ty = append(tx, x[i]), append(ty, y[i])
		}
		if y[i] >= y[i-1] && y[i] > y[i+1] {
			px, py = append(px, x[i]), append(py, y[i])
		}
	}
	if len(tx) < 4 || len(px) < 2 {
		return
	}
	a, b := stat.LinearRegression(tx, ty, nil, false)
	rss, sxx, mx := 0.0, 0.0, stat.Mean(tx, nil)
	for i := range tx {
		e := ty[i] - a - b*tx[i]
		rss += e * e
		sxx += (tx[i] - mx) * (tx[i] - mx)
	}
	if sxx == 0 || b <= 0 {
		return
	}
	p := 0.0
	if se := math.Sqrt(rss / float64(len(tx)-2) / sxx); se > 0 {
		p = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(tx) - 2)}.Survival(b / se)
	}
	if p >= alpha || b*(tx[len(tx)-1]-tx[0]) <= flatTolerance(meanY, r.Column) {
		return
	}
	r.Leak = !r.Peak
	r.fit.growing = true
	r.BytesPerStep = b
	r.fit.tsSlope = b
	// The peaks' line with the troughs' slope.
	r.fit.tsIntercept = interceptMedian(px, py, b)
	r.fit.lastY = slices.Max(py[max(0, len(py)-2):])
	r.fit.secondSlope = b
}
