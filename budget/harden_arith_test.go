package budget

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// hardenJob is a small valid training job for the checks below.
func hardenJob(t *testing.T) Job {
	t.Helper()
	return Job{Model: lookupModel(t, "llama-3.2-1b", nil), Mode: Training, Precision: BF16Master,
		Optimizer: optimizer.AdamW{Impl: optimizer.Fused}, Batch: 1, SeqLen: 512, Attention: model.Flash}
}

// requireField checks that err is a *gpumem.FieldError for field wrapping
// kind.
func requireField(t *testing.T, err error, field string, kind error) {
	t.Helper()
	var fe *gpumem.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v, want a *gpumem.FieldError for %s", err, field)
	}
	if fe.Field != field || !errors.Is(err, kind) {
		t.Fatalf("error %v (field %q), want field %q wrapping %v", err, fe.Field, field, kind)
	}
}

// A NaN or infinite Overhead.Fragmentation used to pass validation: NaN
// made the fragmentation term math.MinInt64 on amd64, a negative peak
// that Fits accepted on a 1-byte GPU. Every non-finite value is now
// rejected, by Estimate and by Allocate, naming the field.
func TestOverheadFragmentationFinite(t *testing.T) {
	t.Parallel()
	tiny := gpumem.Device{Name: "one byte", Capacity: 1}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 10.5} {
		j := hardenJob(t)
		j.Overhead.Fragmentation = f
		b, err := Estimate(j)
		if err == nil {
			_, fits := Fits(b, tiny)
			t.Fatalf("Fragmentation %v: Estimate accepted it (device peak %d, fits a 1-byte GPU: %v)", f, b.Device(), fits)
		}
		requireField(t, err, "Job.Overhead.Fragmentation", gpumem.ErrInvalid)
		_, err = Allocate(80*gpumem.GiB, j, nil)
		requireField(t, err, "Job.Overhead.Fragmentation", gpumem.ErrInvalid)
	}
	// The documented values still pass: negative (none), zero
	// (default), up to 10.
	for _, f := range []float64{-1, -0.5, 0, 0.05, 10} {
		j := hardenJob(t)
		j.Overhead.Fragmentation = f
		b, err := Estimate(j)
		if err != nil {
			t.Fatalf("Fragmentation %v: %v", f, err)
		}
		if b.Fragmentation < 0 || b.Device() < b.Allocated() {
			t.Errorf("Fragmentation %v: fragmentation %d, device %d below allocated %d", f, b.Fragmentation, b.Device(), b.Allocated())
		}
	}
}

// Each bad Overhead field is named on its own.
func TestOverheadFieldsNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o     Overhead
		field string
		kind  error
	}{
		{Overhead{Context: -1}, "Job.Overhead.Context", gpumem.ErrInvalid},
		{Overhead{Workspace: -1}, "Job.Overhead.Workspace", gpumem.ErrInvalid},
		{Overhead{Workspaces: -1}, "Job.Overhead.Workspaces", gpumem.ErrInvalid},
		// 2^62 bytes × 4 workspaces wrapped to 0 bytes.
		{Overhead{Workspace: 1 << 62, Workspaces: 4}, "Job.Overhead.Workspaces", gpumem.ErrRange},
		// Zero Workspaces means 2 for training: 2^62 × 2 wraps too.
		{Overhead{Workspace: 1 << 62}, "Job.Overhead.Workspace", gpumem.ErrRange},
	} {
		j := hardenJob(t)
		j.Overhead = c.o
		_, err := Estimate(j)
		requireField(t, err, c.field, c.kind)
	}
}

// A huge Overhead.Context used to wrap the device peak negative, so that
// the job fitted anywhere; the peak now saturates at math.MaxInt64 and
// fits nowhere.
func TestOverheadContextSaturates(t *testing.T) {
	t.Parallel()
	j := hardenJob(t)
	j.Overhead.Context = math.MaxInt64
	b, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	if b.Device() != math.MaxInt64 {
		t.Errorf("Device %d, want math.MaxInt64", b.Device())
	}
	if b.Allocated() <= 0 || b.Reserved() <= 0 || b.Reserved() == math.MaxInt64 {
		t.Errorf("Allocated %d, Reserved %d: the context is not part of them", b.Allocated(), b.Reserved())
	}
	h100, _ := gpumem.LookupDevice("h100")
	if s, ok := Fits(b, h100); ok || s <= 0 {
		t.Errorf("Fits = %d, %v on an H100, want a positive shortfall", s, ok)
	}
	if u := Utilization(b, h100); math.IsInf(u, 0) || math.IsNaN(u) || u <= 1 {
		t.Errorf("Utilization = %v, want finite and above 1", u)
	}
}

// The sums of a Breakdown are exact when they fit and saturate when they
// do not, never wrapping; Total always equals Device.
func TestBreakdownSumsSaturate(t *testing.T) {
	t.Parallel()
	const hi, lo = math.MaxInt64, math.MinInt64
	for i, c := range []struct {
		b                       Breakdown
		alloc, reserved, device int64
	}{
		{Breakdown{Weights: 1, Gradients: 2, Fragmentation: 3, Context: 4}, 3, 6, 10},
		{Breakdown{Weights: hi, Gradients: hi}, hi, hi, hi},
		{Breakdown{Weights: hi, Workspace: 1, Context: 1}, hi, hi, hi},
		{Breakdown{Weights: hi - 1, Fragmentation: 1, Context: 1}, hi - 1, hi, hi},
		{Breakdown{Weights: 1 << 62, Fragmentation: 1 << 62, Context: 1 << 62}, 1 << 62, hi, hi},
		// Exact before saturating: 2·MaxInt64 + MinInt64 = MaxInt64 − 1.
		{Breakdown{Weights: hi, Gradients: hi, Optimizer: lo}, hi - 1, hi - 1, hi - 1},
		{Breakdown{Weights: lo, Gradients: -1}, lo, lo, lo},
		{Breakdown{Weights: hi, Context: lo}, hi, hi, -1},
	} {
		b := c.b
		if got := int64(b.Allocated()); got != c.alloc {
			t.Errorf("case %d: Allocated %d, want %d", i, got, c.alloc)
		}
		if got := int64(b.Reserved()); got != c.reserved {
			t.Errorf("case %d: Reserved %d, want %d", i, got, c.reserved)
		}
		if got := int64(b.Device()); got != c.device {
			t.Errorf("case %d: Device %d, want %d", i, got, c.device)
		}
		if got := int64(b.device()); got != c.device {
			t.Errorf("case %d: device %d, want %d", i, got, c.device)
		}
	}
}

// Fits and Utilization on extreme breakdowns and devices: no wrap, no
// NaN or Inf, and a job needing the most bytes fits nowhere.
func TestFitsUtilizationExtremes(t *testing.T) {
	t.Parallel()
	const hi, lo = math.MaxInt64, math.MinInt64
	huge := Breakdown{Weights: hi, Context: hi}
	for _, d := range []gpumem.Device{
		{Capacity: 1},
		{Capacity: hi - 1},
		{Capacity: 0},
		{Capacity: 0, Reserved: hi, Used: hi},
		{Capacity: 80 * gpumem.GiB, Used: lo},
		{Capacity: lo},
	} {
		if s, ok := Fits(huge, d); ok || s <= 0 {
			t.Errorf("Fits(MaxInt64 bytes, %+v) = %d, %v, want a positive shortfall", d, s, ok)
		}
		if u := Utilization(huge, d); math.IsNaN(u) || math.IsInf(u, 0) || u < 1 {
			t.Errorf("Utilization(MaxInt64 bytes, %+v) = %v, want finite, at least 1", d, u)
		}
		if u := Utilization(Breakdown{}, d); u != 0 {
			t.Errorf("Utilization(nothing, %+v) = %v, want 0", d, u)
		}
	}
	// The saturated need fits only a device with math.MaxInt64 bytes
	// free, as documented.
	if s, ok := Fits(huge, gpumem.Device{Capacity: hi}); !ok || s != 0 {
		t.Errorf("Fits(MaxInt64 bytes, MaxInt64 free) = %d, %v, want 0, true", s, ok)
	}
	// A device with nothing free: the largest finite utilization for a
	// job that needs anything, as documented.
	if u := Utilization(Breakdown{Weights: 1}, gpumem.Device{}); u != math.MaxFloat64 {
		t.Errorf("Utilization(1 byte, zero-capacity device) = %v, want math.MaxFloat64", u)
	}
	// Over-committed by a lot: the shortfall saturates instead of
	// wrapping.
	d := gpumem.Device{Capacity: 0, Reserved: hi, Used: hi}
	if s, ok := Fits(Breakdown{Weights: 1 << 40}, d); ok || s != hi {
		t.Errorf("Fits(1 TiB, %+v) = %d, %v, want math.MaxInt64, false", d, s, ok)
	}
	// A negative total (hand-made; Estimate never returns one) does not
	// make a negative utilization.
	if u := Utilization(Breakdown{Weights: -5}, gpumem.Device{Capacity: 10}); u != 0 {
		t.Errorf("Utilization(−5 bytes) = %v, want 0", u)
	}
}

// Fleet.GPUs saturates instead of wrapping, and is zero for a fleet
// without nodes or GPUs.
func TestFleetGPUsSaturates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		f    Fleet
		want int
	}{
		{Fleet{Nodes: 4, GPUsPerNode: 8}, 32},
		{Fleet{Nodes: 1 << 32, GPUsPerNode: 1 << 32}, math.MaxInt}, // 2^64 wrapped to 0
		{Fleet{Nodes: math.MaxInt, GPUsPerNode: 3}, math.MaxInt},
		{Fleet{Nodes: -2, GPUsPerNode: 8}, 0},
		{Fleet{Nodes: 2, GPUsPerNode: 0}, 0},
		{Fleet{Nodes: math.MinInt, GPUsPerNode: -1}, 0},
	} {
		if got := c.f.GPUs(); got != c.want {
			t.Errorf("%+v.GPUs() = %d, want %d", c.f, got, c.want)
		}
	}
}

// Layouts validates its Fleet: an invalid one has no layouts (it used to
// return layouts of negative data parallelism, or to divide by zero when
// its tensor-parallel degree wrapped past 2^63).
func TestLayoutsInvalidFleet(t *testing.T) {
	t.Parallel()
	j := hardenJob(t)
	for _, f := range []Fleet{
		{},
		{Nodes: -1, GPUsPerNode: 8, Free: gpumem.GiB},
		{Nodes: 1, GPUsPerNode: 1 << 62, Free: gpumem.GiB},
		{Nodes: 1 << 40, GPUsPerNode: 8, Free: gpumem.GiB},
		{Nodes: 1, GPUsPerNode: 8, Free: 0},
	} {
		if got := Layouts(f, j); got != nil {
			t.Errorf("Layouts(%+v) = %d layouts, want nil", f, len(got))
		}
		if _, err := AllocateFleet(f, j, nil); !errors.Is(err, gpumem.ErrInvalid) {
			t.Errorf("AllocateFleet(%+v): %v, want ErrInvalid", f, err)
		}
	}
	if got := Layouts(Fleet{Nodes: 2, GPUsPerNode: 8, Free: gpumem.GiB}, j); len(got) == 0 {
		t.Error("Layouts of a valid fleet is empty")
	}
}

// SeqLen + Generate used to wrap before the token bound was checked, so
// the error quoted a negative token count; it now quotes the fields.
func TestTokensErrorNoWrap(t *testing.T) {
	t.Parallel()
	j := hardenJob(t)
	j.Mode, j.Optimizer = Generation, nil
	j.SeqLen, j.Generate = math.MaxInt, math.MaxInt
	_, err := Estimate(j)
	requireField(t, err, "Job.Batch", gpumem.ErrRange)
	if msg := err.Error(); strings.Contains(msg, "-") || !strings.Contains(msg, strconv.Itoa(math.MaxInt)) {
		t.Errorf("error %q, want the fields' values and no wrapped sum", msg)
	}
}
