package budget

import (
	"math"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/gpumem/gpumem"
)

// Observation is one job that ran, with the peaks measured while it ran:
// the input of [Calibrate]. A scheduler fills it from its own fleet: the
// Breakdown it stored when it admitted the job (or the Job itself), and
// whatever its telemetry measured: NVML's per-process usage for Device,
// and torch.cuda.max_memory_allocated and max_memory_reserved when the
// job reports them. A measured figure that is zero is taken as not
// measured.
type Observation struct {
	// Name identifies the observation (a job id, a row of a data set);
	// it is informational.
	Name string
	// Job is the job that ran. Calibrate estimates it when neither
	// Allocated nor Predicted is given. Its zero value means no job.
	Job Job
	// Predicted is the Breakdown gpumem predicted for the job, as
	// [Estimate] returned it. When it is non-zero it is used instead of
	// estimating Job. Only its allocated level is used: its Fragmentation
	// and Context are what Calibrate refits.
	Predicted Breakdown
	// Allocated is the measured peak of live tensors
	// (torch.cuda.max_memory_allocated), in bytes; zero: not measured.
	// When given it is used instead of the prediction, so the fit sees
	// the allocator and the driver alone.
	Allocated gpumem.Bytes
	// Reserved is the measured peak the caching allocator held
	// (torch.cuda.max_memory_reserved), in bytes; zero: not measured.
	Reserved gpumem.Bytes
	// Device is the measured peak memory of the process as the driver
	// shows it (NVML usedGpuMemory, the nvidia-smi process column), in
	// bytes; zero: not measured.
	Device gpumem.Bytes
}

// calibrateRcond is the smallest ratio of the design matrix's singular
// values that Calibrate accepts: below it the observations cannot tell
// the context from fragmentation (for example when every observation
// measures only Device and all have the same allocated size).
const calibrateRcond = 1e-6

// Calibrate fits the [Overhead] terms that connect the three levels of
// memory (allocated, reserved, device) to observations of real jobs:
// the allocator's fragmentation factor f and the additive per-process
// constant C, in the model that [Estimate] applies:
//
//	reserved = (1 + f) · A
//	device   = (1 + f) · A + C
//
// A is the observation's allocated level: the measured Allocated when
// given, else the allocated level of Predicted, else that of
// Estimate(Job). C is everything the driver counts beyond the caching
// allocator: the CUDA context and loaded kernels, and any library memory
// allocated outside PyTorch (cuDNN, NCCL). The cuBLAS workspaces that
// PyTorch allocates through its allocator are part of A, as Estimate
// counts them (Breakdown.Workspace); when A is predicted, f and C also
// absorb the estimate's own bias at the allocated level, which is what a
// scheduler that compares Breakdown.Device with free memory wants.
//
// Each measured level gives one equation, written as a relative error so
// that large and small jobs weigh alike, and the terms minimize the sum
// of their squares, in two stages:
//
//  1. f, from every observation that measures Reserved, with residuals
//     ((1+f)·A − R) / R: f = Σ (A/R)·((R−A)/R) / Σ (A/R)².
//  2. C, with that f, from every observation that measures Device, with
//     residuals (R + C − D) / D where Reserved is measured and
//     ((1+f)·A + C − D) / D where it is not: C = Σ (1/D)·e / Σ (1/D)²,
//     e being the residual at C = 0.
//
// The stages keep the fragmentation a property of the allocator: the
// observations that measure only Device, whose allocated level is often a
// prediction, cannot bend it, and the context absorbs what they add.
//
// When no observation measures Reserved, f and C are fitted together
// from the device-level equations (linear least squares by singular value
// decomposition, gonum/mat), which needs two or more observations of
// different allocated sizes. The bounds f ≥ 0 and C > 0 hold for
// every real process: a fit with f < 0 is taken as f = 0 (the context
// refit with it), and a fit with C ≤ 0 is an error.
//
// The result sets Fragmentation (a fit of exactly zero is returned as −1,
// which Overhead reads as none) and, when some observation measures
// Device, Context, rounded up to a whole byte. The fields the
// observations do not determine, and Workspace and Workspaces, are left
// zero, which Estimate reads as the defaults.
//
// Observations that measure neither Reserved nor Device carry no
// information about the overhead and are skipped. Calibrate returns a
// *gpumem.FieldError naming the observation and field for a negative
// measurement, for measurements that contradict each other (reserved
// below allocated, device below reserved or allocated), for an
// observation without any allocated level, for a job Estimate rejects,
// and for too few or degenerate observations. It does not panic.
func Calibrate(obs []Observation) (Overhead, error) {
	if len(obs) == 0 {
		return Overhead{}, gpumem.Errorf("observations", 0, gpumem.ErrInvalid, "no observations to fit")
	}
	// reservedRows are y = frag·f; deviceRows are y = frag·f + ctx·C
	// (frag is zero where Reserved is measured).
	var reservedRows, deviceRows []calRow
	for i := range obs {
		o := &obs[i]
		field := "Observation[" + strconv.Itoa(i) + "]"
		if err := o.check(field); err != nil {
			return Overhead{}, err
		}
		if o.Reserved == 0 && o.Device == 0 {
			continue
		}
		a, err := o.allocated(field)
		if err != nil {
			return Overhead{}, err
		}
		d := float64(o.Device)
		if o.Reserved > 0 {
			r := float64(o.Reserved)
			reservedRows = append(reservedRows, calRow{frag: a / r, y: (r - a) / r})
			if o.Device > 0 {
				deviceRows = append(deviceRows, calRow{ctx: gib / d, y: (d - r) / d})
			}
			continue
		}
		deviceRows = append(deviceRows, calRow{frag: a / d, ctx: gib / d, y: (d - a) / d})
	}
	var f, c float64
	var err error
	switch {
	case len(reservedRows) == 0 && len(deviceRows) == 0:
		return Overhead{}, gpumem.Errorf("observations", len(obs), gpumem.ErrInvalid,
			"too few observations: none measures Reserved or Device")
	case len(reservedRows) == 0 && len(deviceRows) < 2:
		return Overhead{}, gpumem.Errorf("observations", len(deviceRows), gpumem.ErrInvalid,
			"too few observations: one device-level measurement cannot separate the context from fragmentation; "+
				"measure Reserved too, or give two or more jobs of different sizes")
	case len(reservedRows) == 0:
		// Device level only: f and C together.
		if f, c, err = solveOverhead(deviceRows); err != nil {
			return Overhead{}, err
		}
		if f < 0 {
			f = 0
			c = solveContext(deviceRows, f)
		}
	default:
		f = solveFragmentation(reservedRows)
		if f < 0 {
			f = 0
		}
		if len(deviceRows) > 0 {
			c = solveContext(deviceRows, f)
		}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || math.IsNaN(c) || math.IsInf(c, 0) {
		return Overhead{}, gpumem.Errorf("observations", len(obs), gpumem.ErrRange, "the fit is not finite")
	}
	ov := Overhead{Fragmentation: f}
	if f == 0 {
		ov.Fragmentation = -1 // none
	}
	if len(deviceRows) > 0 {
		bytes := math.Ceil(c * gib)
		switch {
		case !(bytes > 0):
			return Overhead{}, gpumem.Errorf("Overhead.Context", int64(bytes), gpumem.ErrRange,
				"the fitted context is not positive: the device measurements are at or below the reserved level")
		case bytes >= math.MaxInt64:
			return Overhead{}, gpumem.Errorf("Overhead.Context", c, gpumem.ErrRange, "the fitted context overflows")
		}
		ov.Context = gpumem.Bytes(bytes)
	}
	return ov, nil
}

// gib scales the context column to GiB, so that both columns of the
// design matrix are of order one.
const gib = float64(gpumem.GiB)

// calRow is one equation of the fit: y = frag·f + ctx·C, with C in GiB.
type calRow struct{ frag, ctx, y float64 }

// check validates the measured figures of one observation.
func (o *Observation) check(field string) error {
	for _, m := range [...]struct {
		name string
		v    gpumem.Bytes
	}{{"Allocated", o.Allocated}, {"Reserved", o.Reserved}, {"Device", o.Device}} {
		if m.v < 0 {
			return gpumem.Errorf(field+"."+m.name, m.v, gpumem.ErrRange, "a measured peak must not be negative")
		}
	}
	if o.Reserved > 0 && o.Allocated > o.Reserved {
		return gpumem.Errorf(field+".Reserved", o.Reserved, gpumem.ErrInvalid,
			"below the measured Allocated %d: the caching allocator holds every allocated byte", o.Allocated)
	}
	if o.Device > 0 && o.Reserved > o.Device {
		return gpumem.Errorf(field+".Device", o.Device, gpumem.ErrInvalid,
			"below the measured Reserved %d: the driver counts everything the allocator holds", o.Reserved)
	}
	if o.Device > 0 && o.Allocated > o.Device {
		return gpumem.Errorf(field+".Device", o.Device, gpumem.ErrInvalid,
			"below the measured Allocated %d: the driver counts every allocated byte", o.Allocated)
	}
	return nil
}

// allocated returns the observation's allocated level: measured,
// predicted, or estimated from the job.
func (o *Observation) allocated(field string) (float64, error) {
	if o.Allocated > 0 {
		return float64(o.Allocated), nil
	}
	if o.Predicted != (Breakdown{}) {
		a := o.Predicted.Allocated()
		if a <= 0 {
			return 0, gpumem.Errorf(field+".Predicted", a, gpumem.ErrInvalid, "the predicted allocated peak must be positive")
		}
		return float64(a), nil
	}
	if o.Job.Mode == 0 && o.Job.Model.params == 0 {
		return 0, gpumem.Errorf(field, o.Name, gpumem.ErrInvalid,
			"needs an allocated level: a measured Allocated, a Predicted breakdown or a Job")
	}
	b, err := Estimate(o.Job)
	if err != nil {
		return 0, gpumem.Errorf(field+".Job", o.Name, gpumem.ErrInvalid, "estimating the job: %w", err)
	}
	return float64(b.Allocated()), nil
}

// solveFragmentation is the least-squares f of y = frag·f:
// Σ frag·y / Σ frag². Every row has frag > 0.
func solveFragmentation(rows []calRow) float64 {
	var num, den float64
	for _, r := range rows {
		num += r.frag * r.y
		den += r.frag * r.frag
	}
	return num / den
}

// solveContext is the least-squares C (in GiB) of y − frag·f = ctx·C
// for a given f. Every row has ctx > 0.
func solveContext(rows []calRow, f float64) float64 {
	var num, den float64
	for _, r := range rows {
		num += r.ctx * (r.y - r.frag*f)
		den += r.ctx * r.ctx
	}
	return num / den
}

// solveOverhead is the least-squares (f, C) of y = frag·f + ctx·C, C in
// GiB, by singular value decomposition; it fails when the rows cannot
// tell the two terms apart.
func solveOverhead(rows []calRow) (f, c float64, err error) {
	x := mat.NewDense(len(rows), 2, nil)
	y := mat.NewVecDense(len(rows), nil)
	for i, r := range rows {
		x.Set(i, 0, r.frag)
		x.Set(i, 1, r.ctx)
		y.SetVec(i, r.y)
	}
	var svd mat.SVD
	if !svd.Factorize(x, mat.SVDThin) {
		return 0, 0, gpumem.Errorf("observations", len(rows), gpumem.ErrInvalid, "the least-squares problem could not be factorized")
	}
	if svd.Rank(calibrateRcond) < 2 {
		return 0, 0, gpumem.Errorf("observations", len(rows), gpumem.ErrInvalid,
			"the observations cannot separate the context from fragmentation: "+
				"measure Reserved too, or give jobs of different sizes")
	}
	var sol mat.VecDense
	svd.SolveVecTo(&sol, y, 2)
	return sol.AtVec(0), sol.AtVec(1), nil
}
