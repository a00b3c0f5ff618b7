package optimizer

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// Impl selects which of PyTorch's implementations of an optimizer runs
// the step. It decides the step's temporaries, not the persistent state
// (except that Fused moves the step counter onto the device).
type Impl uint8

const (
	// Foreach is the multi-tensor implementation (foreach=True): each
	// temporary is a list with one tensor per parameter, all alive at
	// once. It is PyTorch ≥ 2.0's default when every parameter is on a
	// CUDA device (foreach=None resolves through
	// _default_to_fused_or_foreach in torch/optim/optimizer.py).
	Foreach Impl = iota
	// ForLoop is the single-tensor implementation (foreach=False), the
	// default of PyTorch 1.13 ("if foreach is None: foreach = False" in
	// torch/optim/adam.py and siblings) and of CPU parameters. Its
	// temporaries are those of one parameter at a time.
	ForLoop
	// Fused is the fused CUDA kernel (fused=True): no temporaries, and
	// the step counter lives on the device.
	Fused
)

// String returns "foreach", "forloop" or "fused".
func (i Impl) String() string {
	switch i {
	case Foreach:
		return "foreach"
	case ForLoop:
		return "forloop"
	case Fused:
		return "fused"
	}
	return "Impl(" + strconv.Itoa(int(i)) + ")"
}

func checkImpl(typ string, i Impl, fusedOK bool) error {
	switch {
	case i > Fused:
		return gpumem.Errorf(typ+".Impl", i, gpumem.ErrInvalid, "unknown implementation")
	case i == Fused && !fusedOK:
		return gpumem.Errorf(typ+".Impl", i, gpumem.ErrUnsupported, "this optimizer has no fused implementation")
	}
	return nil
}

// SGD is torch.optim.SGD (torch/optim/sgd.py, checked in 1.13 and 2.x).
//
// With momentum 0 it keeps no state: 1.13 stores
// state['momentum_buffer'] = None, which is no tensor. With momentum it
// keeps momentum_buffer = torch.clone(grad).detach() from the first step,
// in the gradient's dtype, which is the parameter's. No step counter.
//
// The zero value is PyTorch's default: lr only, no momentum, no state.
type SGD struct {
	// Momentum is the momentum factor, >= 0. Zero (PyTorch's default)
	// keeps no state.
	Momentum float64
	// Nesterov is nesterov=True, which needs Momentum > 0 (PyTorch
	// raises "Nesterov momentum requires a momentum and zero
	// dampening"). It changes the step's temporaries, not the state.
	Nesterov bool
	// StateDType is the dtype of momentum_buffer. The zero value follows
	// the parameter, as torch.clone(grad) does; BF16 models a bf16
	// momentum buffer kept for fp32 weights.
	StateDType gpumem.DType
	// Impl is the implementation; it does not change SGD's memory.
	Impl Impl
}

// String returns "torch.optim.SGD".
func (o SGD) String() string { return "torch.optim.SGD" }

func (o SGD) check() error {
	if err := checkCoef("SGD", "Momentum", o.Momentum); err != nil {
		return err
	}
	if o.Nesterov && o.Momentum == 0 {
		return gpumem.Errorf("SGD.Nesterov", true, gpumem.ErrInvalid, "Nesterov momentum requires a momentum (Momentum > 0)")
	}
	if err := checkStateDType("SGD", o.StateDType); err != nil {
		return err
	}
	return checkImpl("SGD", o.Impl, true)
}

// AppendSlots implements [Layout].
func (o SGD) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	if err := o.check(); err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	if o.Momentum == 0 {
		return dst, nil
	}
	d, err := stateDType("SGD", o.StateDType, p)
	if err != nil {
		return dst, err
	}
	return append(dst, full("momentum_buffer", p, d)), nil
}

// State implements [Optimizer]: Momentum > 0 keeps one tensor like the
// parameter, otherwise nothing.
func (o SGD) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]. SGD updates in place, except that
// the for-loop implementation with Nesterov builds grad =
// grad.add(buf, alpha=momentum), one gradient-sized tensor in the
// parameter's dtype, dropped when the next iteration rebinds grad =
// grads[i] before building its own (_single_tensor_sgd,
// torch/optim/sgd.py, torch 2.x); the foreach implementation adds the
// buffers into the gradients in place (torch._foreach_add_(device_grads,
// bufs, alpha=momentum)), and the fused kernel allocates nothing.
// Not modelled: the gradient-sized copy that weight_decay ≠ 0 makes
// (grad.add(param), _foreach_add(device_grads, device_params)).
func (o SGD) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o SGD) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o SGD) transientOf(ts seq) (gpumem.Bytes, error) {
	if err := o.check(); err != nil {
		return 0, err
	}
	if o.Nesterov && o.Impl == ForLoop {
		return loopTransient(ts, func(p param) (temps, error) {
			g, err := bytesOf(p.n, p.dtype)
			return temps{peak: g}, err
		})
	}
	return loopTransient(ts, func(param) (temps, error) { return temps{}, nil })
}

// Adam is torch.optim.Adam (torch/optim/adam.py; 1.13 lines 211-223 and
// the 2.x _init_group), created lazily at the first step:
//
//   - step: a float32 scalar, 4 bytes, on the CPU; on the device when
//     Capturable or Fused ("Deliberately host `step` on CPU if both
//     capturable and fused are off");
//   - exp_avg and exp_avg_sq: torch.zeros_like(p), like the parameter;
//   - max_exp_avg_sq, the same, with AMSGrad.
//
// So State = 2 × (parameter bytes) + 4 B, or 3 × with AMSGrad.
//
// The zero value is PyTorch ≥ 2.0's default on CUDA: state in the
// parameter's dtype, no amsgrad, foreach implementation.
type Adam struct {
	// StateDType is the dtype of the moment tensors. The zero value
	// follows the parameter (zeros_like): fp32 for fp32 or AMP-trained
	// weights, bf16 for pure-bf16 weights. Set FP32 to model fp32 states
	// kept for 16-bit weights by a wrapper (master weights excepted).
	StateDType gpumem.DType
	// AMSGrad keeps max_exp_avg_sq too.
	AMSGrad bool
	// Capturable (CUDA-graph safe) keeps the step counter on the device.
	Capturable bool
	// Impl is the implementation; see [Impl].
	Impl Impl
}

// AdamW is torch.optim.AdamW (torch/optim/adamw.py; 1.13 lines 144-152).
// Its weight decay is applied to the parameter in place, so its memory is
// Adam's; see [Adam] for the fields.
type AdamW Adam

// String returns "torch.optim.Adam".
func (o Adam) String() string { return "torch.optim.Adam" }

// String returns "torch.optim.AdamW".
func (o AdamW) String() string { return "torch.optim.AdamW" }

func (o Adam) check(name string) error {
	if err := checkStateDType(name, o.StateDType); err != nil {
		return err
	}
	return checkImpl(name, o.Impl, true)
}

func (o Adam) appendSlots(name string, dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	if err := o.check(name); err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	d, err := stateDType(name, o.StateDType, p)
	if err != nil {
		return dst, err
	}
	dst = append(dst, stepScalar(o.Capturable || o.Impl == Fused),
		full("exp_avg", p, d), full("exp_avg_sq", p, d))
	if o.AMSGrad {
		dst = append(dst, full("max_exp_avg_sq", p, d))
	}
	return dst, nil
}

// transient models the temporaries of adam.py's three implementations:
//
//   - ForLoop: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//     holds two state-sized tensors at once (the sqrt and the quotient),
//     and denom stays referenced until the next parameter's is built;
//   - Foreach: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs) is one
//     state-sized tensor per parameter, all at once (the OOM site
//     reported from _multi_tensor_adam);
//   - Fused: none.
//
// Not modelled: Adam's (not AdamW's) weight_decay ≠ 0 copies the gradient
// first (grad.add(param)); in the foreach path that copy is freed
// ("del device_grads") before exp_avg_sq_sqrt is allocated.
func (o Adam) transient(name string, ts seq) (gpumem.Bytes, error) {
	if err := o.check(name); err != nil {
		return 0, err
	}
	moment := func(p param) (int64, error) {
		d, err := stateDType(name, o.StateDType, p)
		if err != nil {
			return 0, err
		}
		return bytesOf(p.n, d)
	}
	switch o.Impl {
	case Fused:
		return loopTransient(ts, func(param) (temps, error) { return temps{}, nil })
	case ForLoop:
		return loopTransient(ts, func(p param) (temps, error) {
			m, err := moment(p)
			if err != nil {
				return temps{}, err
			}
			two, err := scale(2, m)
			return temps{peak: two, carry: m}, err
		})
	}
	return sumTransient(ts, moment)
}

// AppendSlots implements [Layout].
func (o Adam) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	return o.appendSlots("Adam", dst, t)
}

// State implements [Optimizer].
func (o Adam) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]; see the note on [Adam.Impl].
func (o Adam) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o Adam) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o Adam) transientOf(ts seq) (gpumem.Bytes, error) {
	return o.transient("Adam", ts)
}

// AppendSlots implements [Layout].
func (o AdamW) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	return Adam(o).appendSlots("AdamW", dst, t)
}

// State implements [Optimizer].
func (o AdamW) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer], as [Adam.Transient].
func (o AdamW) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o AdamW) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o AdamW) transientOf(ts seq) (gpumem.Bytes, error) {
	return Adam(o).transient("AdamW", ts)
}

// Adagrad is torch.optim.Adagrad (torch/optim/adagrad.py). It creates
// its state in the constructor, for every parameter passed, not lazily:
// step = torch.tensor(0.0) (float32 on the CPU; on the device when
// fused) and sum = torch.full_like(p, initial_accumulator_value). So
// State = parameter bytes + 4 B.
//
// The zero value is PyTorch ≥ 2.0's default on CUDA (foreach).
type Adagrad struct {
	// StateDType is the dtype of sum; the zero value follows the
	// parameter.
	StateDType gpumem.DType
	// Impl is the implementation: ForLoop holds std = sum.sqrt().add_(eps)
	// for one parameter (kept until the next one's is built), Foreach one
	// per parameter, Fused none.
	Impl Impl
}

// String returns "torch.optim.Adagrad".
func (o Adagrad) String() string { return "torch.optim.Adagrad" }

func (o Adagrad) check() error {
	if err := checkStateDType("Adagrad", o.StateDType); err != nil {
		return err
	}
	return checkImpl("Adagrad", o.Impl, true)
}

// AppendSlots implements [Layout].
func (o Adagrad) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	if err := o.check(); err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	d, err := stateDType("Adagrad", o.StateDType, p)
	if err != nil {
		return dst, err
	}
	return append(dst, stepScalar(o.Impl == Fused), full("sum", p, d)), nil
}

// State implements [Optimizer].
func (o Adagrad) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]; see [Adagrad.Impl].
func (o Adagrad) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o Adagrad) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o Adagrad) transientOf(ts seq) (gpumem.Bytes, error) {
	if err := o.check(); err != nil {
		return 0, err
	}
	return oneStateTemp(ts, o.Impl, "Adagrad", o.StateDType)
}

// oneStateTemp is the transient of an update that builds one state-sized
// temporary per parameter (Adagrad's std, RMSprop's avg).
func oneStateTemp(ts seq, impl Impl, typ string, set gpumem.DType) (gpumem.Bytes, error) {
	moment := func(p param) (int64, error) {
		d, err := stateDType(typ, set, p)
		if err != nil {
			return 0, err
		}
		return bytesOf(p.n, d)
	}
	switch impl {
	case Fused:
		return loopTransient(ts, func(param) (temps, error) { return temps{}, nil })
	case ForLoop:
		return loopTransient(ts, func(p param) (temps, error) {
			m, err := moment(p)
			return temps{peak: m, carry: m}, err
		})
	}
	return sumTransient(ts, moment)
}

// RMSprop is torch.optim.RMSprop (torch/optim/rmsprop.py): square_avg =
// zeros_like(p); momentum_buffer too when Momentum > 0; grad_avg too when
// Centered; and a step counter, which PyTorch 1.13 keeps as a Python int
// (state['step'] = 0, no tensor) and 2.x as a float32 scalar tensor
// (torch.zeros((), dtype=_get_scalar_dtype())) on the CPU, or on the
// device when capturable (set IntStep for 1.13).
//
// The zero value is PyTorch ≥ 2.0's default on CUDA: no momentum, not
// centered, foreach.
type RMSprop struct {
	// Momentum is the momentum factor, >= 0; > 0 keeps momentum_buffer.
	Momentum float64
	// Centered keeps grad_avg.
	Centered bool
	// StateDType is the dtype of the buffers; the zero value follows the
	// parameter.
	StateDType gpumem.DType
	// IntStep models PyTorch 1.13, whose step is a Python int.
	IntStep bool
	// Capturable (PyTorch 2.x) keeps the step counter on the device.
	Capturable bool
	// Impl is the implementation: the update builds avg =
	// square_avg.sqrt() (centered: square_avg.addcmul(...).sqrt_()), one
	// state-sized temporary per parameter (ForLoop: one at a time, kept
	// until the next; Foreach: all at once). RMSprop has no fused kernel.
	Impl Impl
}

// String returns "torch.optim.RMSprop".
func (o RMSprop) String() string { return "torch.optim.RMSprop" }

func (o RMSprop) check() error {
	if err := checkCoef("RMSprop", "Momentum", o.Momentum); err != nil {
		return err
	}
	if err := checkStateDType("RMSprop", o.StateDType); err != nil {
		return err
	}
	return checkImpl("RMSprop", o.Impl, false)
}

// AppendSlots implements [Layout].
func (o RMSprop) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	if err := o.check(); err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	d, err := stateDType("RMSprop", o.StateDType, p)
	if err != nil {
		return dst, err
	}
	if !o.IntStep {
		dst = append(dst, stepScalar(o.Capturable))
	}
	dst = append(dst, full("square_avg", p, d))
	if o.Momentum > 0 {
		dst = append(dst, full("momentum_buffer", p, d))
	}
	if o.Centered {
		dst = append(dst, full("grad_avg", p, d))
	}
	return dst, nil
}

// State implements [Optimizer].
func (o RMSprop) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]; see [RMSprop.Impl].
func (o RMSprop) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o RMSprop) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o RMSprop) transientOf(ts seq) (gpumem.Bytes, error) {
	if err := o.check(); err != nil {
		return 0, err
	}
	return oneStateTemp(ts, o.Impl, "RMSprop", o.StateDType)
}
