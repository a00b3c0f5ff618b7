package optimizer

import (
	"math"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// param is a validated trainable tensor.
type param struct {
	t     gpumem.Tensor
	n     int64 // elements
	dtype gpumem.DType
}

// tensorField names a field of t the way gpumem.Tensor's own errors do.
func tensorField(t gpumem.Tensor, f string) string {
	if t.Name != "" {
		return "Tensor(" + t.Name + ")." + f
	}
	return "Tensor." + f
}

// inspect validates a trainable tensor: a well-formed shape and a plain
// floating-point storage format. Quantized and integer tensors have no
// gradient in PyTorch (bitsandbytes' Params4bit, GPTQ int32 packs), so an
// optimizer never sees them; passing one is a mistake in the trainable
// set, reported rather than sized.
func inspect(t gpumem.Tensor) (param, error) {
	n, err := t.Elems()
	if err != nil {
		return param{}, err
	}
	if !t.DType.Valid() {
		return param{}, gpumem.Errorf(tensorField(t, "DType"), t.DType, gpumem.ErrInvalid, "not a storage format")
	}
	if !t.DType.IsFloat() || t.DType.IsQuantized() {
		return param{}, gpumem.Errorf(tensorField(t, "DType"), t.DType, gpumem.ErrUnsupported,
			"a trainable tensor must be floating point; quantized and integer weights get no gradient and no optimizer state")
	}
	if _, err := t.DType.Size(n); err != nil {
		return param{}, gpumem.Errorf(tensorField(t, "Shape"), t.Shape, gpumem.ErrRange, "tensor bytes overflow int64")
	}
	return param{t: t, n: n, dtype: t.DType}, nil
}

// stateDType resolves a StateDType setting: the zero value follows the
// parameter (torch.zeros_like(p)); anything else must be a plain
// floating-point format.
func stateDType(typ string, set gpumem.DType, p param) (gpumem.DType, error) {
	if set == gpumem.Invalid {
		return p.dtype, nil
	}
	if err := checkStateDType(typ, set); err != nil {
		return gpumem.Invalid, err
	}
	return set, nil
}

// checkStateDType validates the StateDType field of the optimizer type
// typ. Field names are built only on error, so that State does not
// allocate.
func checkStateDType(typ string, set gpumem.DType) error {
	if set == gpumem.Invalid {
		return nil
	}
	if !set.Valid() {
		return gpumem.Errorf(typ+".StateDType", set, gpumem.ErrInvalid, "unknown state dtype")
	}
	if !set.IsFloat() || set.IsQuantized() {
		return gpumem.Errorf(typ+".StateDType", set, gpumem.ErrUnsupported, "optimizer state must be a plain floating-point format (fp32, bf16, fp16, ...)")
	}
	return nil
}

// checkCoef validates the coefficient field typ.name, such as momentum:
// finite and >= 0.
func checkCoef(typ, name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return gpumem.Errorf(typ+"."+name, v, gpumem.ErrInvalid, "must be finite")
	}
	if v < 0 {
		return gpumem.Errorf(typ+"."+name, v, gpumem.ErrInvalid, "must not be negative")
	}
	return nil
}

// full is a state tensor shaped like the parameter.
func full(name string, p param, d gpumem.DType) Slot {
	return Slot{Name: name, Elems: p.n, DType: d, Where: Device}
}

// stepScalar is PyTorch's per-parameter step counter: a 0-dim (1.13
// fused/capturable: shape (1,)) float32 tensor, 4 bytes, on the CPU
// unless capturable or fused puts it on the parameter's device. Its dtype
// is _get_scalar_dtype(), float32 unless the default dtype is float64.
func stepScalar(onDevice bool) Slot {
	where := Host
	if onDevice {
		where = Device
	}
	return Slot{Name: "step", Elems: 1, DType: gpumem.FP32, Where: where}
}

// bytesOf returns the bytes of n elements of d, reporting overflow.
func bytesOf(n int64, d gpumem.DType) (int64, error) {
	b, err := d.Size(n)
	if err != nil {
		return 0, gpumem.Errorf("elements", n, gpumem.ErrRange, "temporary bytes overflow int64")
	}
	return int64(b), nil
}

// scale returns k·b, reporting overflow.
func scale(k, b int64) (int64, error) {
	v, ok := checked.Mul(k, b)
	if !ok {
		return 0, gpumem.Errorf("elements", b, gpumem.ErrRange, "temporary bytes overflow int64")
	}
	return v, nil
}

// temps is what one tensor's update allocates: peak is the temporary
// bytes live at the worst moment of its update; carry is what stays
// referenced after it (a Python local rebound only in the next
// iteration, after that iteration has allocated its own).
type temps struct{ peak, carry int64 }

// Run is Count consecutive parameters of the same dtype and shape: the
// identical layers of a transformer, visited one after the other. A
// caller that keeps its inventory as runs (a 70B Llama is a few dozen
// runs for 723 tensors) gets the step's temporaries from
// [RunTransient.TransientRuns] in time proportional to the runs.
type Run struct {
	Tensor gpumem.Tensor
	// Count is the number of tensors in the run, at least 1.
	Count int64
}

// RunTransient is implemented by optimizers that compute Transient over
// runs of identical tensors; every optimizer of this package does. The
// result equals Transient of the expanded list.
type RunTransient interface {
	TransientRuns(rs []Run) (gpumem.Bytes, error)
}

// TransientRuns returns o.Transient of the tensors rs describes: through
// [RunTransient] when o implements it, otherwise by expanding the runs
// (which allocates).
func TransientRuns(o Optimizer, rs []Run) (gpumem.Bytes, error) {
	if r, ok := o.(RunTransient); ok {
		return r.TransientRuns(rs)
	}
	var n int64
	for i, r := range rs {
		if r.Count < 1 || r.Count > 1<<24 {
			return 0, gpumem.Errorf("Run["+strconv.Itoa(i)+"].Count", r.Count, gpumem.ErrInvalid, "must be in [1, 2^24]")
		}
		n += r.Count
		if n > 1<<24 {
			return 0, gpumem.Errorf("Run.Count", n, gpumem.ErrRange, "more than 2^24 tensors")
		}
	}
	ts := make([]gpumem.Tensor, 0, n)
	for _, r := range rs {
		for k := int64(0); k < r.Count; k++ {
			ts = append(ts, r.Tensor)
		}
	}
	return o.Transient(ts)
}

// seq is the tensors a Transient visits: a list, or runs.
type seq struct {
	ts []gpumem.Tensor
	rs []Run
}

func (s seq) len() int {
	if s.rs != nil {
		return len(s.rs)
	}
	return len(s.ts)
}

// at returns the i-th tensor, or run, and how many tensors it stands
// for; the callers reject counts below 1 with badCount.
func (s seq) at(i int) (gpumem.Tensor, int64) {
	if s.rs == nil {
		return s.ts[i], 1
	}
	return s.rs[i].Tensor, s.rs[i].Count
}

func badCount(i int, n int64) error {
	return gpumem.Errorf("Run["+strconv.Itoa(i)+"].Count", n, gpumem.ErrInvalid, "must be at least 1")
}

// eachRun walks ts: f sizes each tensor unlike the one before it (a
// tensor like its predecessor — k and v, gate and up, the norms — has
// the same temporaries, so f's result is reused), and visit receives
// that result and the entry's tensor count; visit reports false when a
// sum overflows.
func eachRun[T any](ts seq, f func(p param) (T, error), visit func(v T, count int64) bool) error {
	var v T
	var last gpumem.Tensor
	for i := range ts.len() {
		t, count := ts.at(i)
		if count < 1 {
			return badCount(i, count)
		}
		if i == 0 || !sameStorage(t, last) {
			p, err := inspect(t)
			if err != nil {
				return err
			}
			if v, err = f(p); err != nil {
				return err
			}
		}
		last = t
		if !visit(v, count) {
			return gpumem.Errorf("optimizer.Transient", ts.len(), gpumem.ErrRange, "temporary bytes overflow int64")
		}
	}
	return nil
}

// loopTransient is the temporary peak of a for-loop ("single tensor")
// implementation: max over i of peak_i + carry_{i-1}, in the given order.
func loopTransient(ts seq, f func(p param) (temps, error)) (gpumem.Bytes, error) {
	var best, prev int64
	err := eachRun(ts, f, func(tt temps, count int64) bool {
		v, ok := checked.Add(tt.peak, prev)
		best = max(best, v)
		if count > 1 {
			// The rest of the run follows a tensor like itself.
			var ok2 bool
			v, ok2 = checked.Add(tt.peak, tt.carry)
			best, ok = max(best, v), ok && ok2
		}
		prev = tt.carry
		return ok
	})
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes(best), nil
}

// sumTransient is the temporary peak of a foreach (multi-tensor)
// implementation: the per-tensor temporaries all live at once, one list
// per (device, dtype) group. Summing over every tensor is exact for one
// group, the usual case of a model in one dtype on one device, and an
// upper bound otherwise.
func sumTransient(ts seq, f func(p param) (int64, error)) (gpumem.Bytes, error) {
	var sum int64
	err := eachRun(ts, f, func(b, count int64) bool {
		v, ok := checked.Mul(b, count)
		if ok {
			sum, ok = checked.Add(sum, v)
		}
		return ok
	})
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes(sum), nil
}

// sameStorage reports whether a and b have the same dtype and shape, and
// so the same per-tensor temporaries.
func sameStorage(a, b gpumem.Tensor) bool {
	if a.DType != b.DType || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i, d := range a.Shape {
		if b.Shape[i] != d {
			return false
		}
	}
	return true
}
