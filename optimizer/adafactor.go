package optimizer

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Adafactor is the Adafactor optimizer (Shazeer & Stern, "Adafactor:
// Adaptive Learning Rates with Sublinear Memory Cost", 2018, §3): for a
// tensor of two or more dimensions the second moment is factored into a
// row vector and a column vector over the last two dimensions; vectors
// and scalars keep it in full.
//
// The zero value follows Hugging Face transformers'
// transformers.optimization.Adafactor (src/transformers/optimization.py,
// the implementation behind Trainer's optim="adafactor"), with its
// default beta1=None. Per tensor of shape (..., r, c), created at the
// first step:
//
//   - exp_avg_sq_row: shape[:-1], Π(...)·r elements; exp_avg_sq_col:
//     shape[:-2]+shape[-1:], Π(...)·c elements (≥ 2 dimensions);
//   - exp_avg_sq, like the tensor (fewer than 2 dimensions);
//   - exp_avg, like the tensor, when FirstMoment (beta1 is not None);
//   - RMS, a 0-dim tensor on the device (state["RMS"] = self._rms(p)
//     returns tensor.norm(2)/sqrt(numel)), 4 bytes;
//   - step, a Python int: no tensor.
//
// transformers upcasts 16-bit gradients ("if grad.dtype in
// {torch.float16, torch.bfloat16}: grad = grad.float()") and creates the
// state with .to(grad), so the state is float32 for fp16/bf16 parameters
// and in the parameter's dtype otherwise. For an n×m fp32 matrix that is
// (n+m)·4 + 4 bytes, against Adam's 8nm + 4.
//
// With Torch set it follows torch.optim.Adafactor (PyTorch ≥ 2.5,
// torch/optim/_adafactor.py): row_var (shape with the last dimension 1)
// and col_var (shape with the second-to-last 1) for ≥ 2-D tensors, else
// variance like the tensor, all in the gradient's (= parameter's) dtype;
// step is a float32 scalar on the CPU; there is no first moment and no
// RMS tensor.
type Adafactor struct {
	// Torch models torch.optim.Adafactor instead of transformers'.
	Torch bool
	// FirstMoment models transformers' beta1 set to a number (not None),
	// which adds exp_avg like the tensor. torch.optim.Adafactor has no
	// first moment; setting both is an error.
	FirstMoment bool
	// Foreach models torch.optim.Adafactor(foreach=True). PyTorch
	// defaults Adafactor to the for-loop implementation unless foreach is
	// explicitly True ("As Adafactor is commonly used when memory is
	// prohibitive, Adafactor will default to the slower single tensor
	// for-loop implementation"); transformers' has only a loop.
	Foreach bool
}

// String returns "transformers.Adafactor" or "torch.optim.Adafactor".
func (o Adafactor) String() string {
	if o.Torch {
		return "torch.optim.Adafactor"
	}
	return "transformers.Adafactor"
}

func (o Adafactor) check() error {
	if o.Torch && o.FirstMoment {
		return gpumem.Errorf("Adafactor.FirstMoment", true, gpumem.ErrUnsupported, "torch.optim.Adafactor keeps no first moment")
	}
	if o.Foreach && !o.Torch {
		return gpumem.Errorf("Adafactor.Foreach", true, gpumem.ErrUnsupported, "transformers' Adafactor has no foreach implementation")
	}
	return nil
}

// stateDType is the dtype of the state of p.
func (o Adafactor) stateDType(p param) gpumem.DType {
	if !o.Torch && (p.dtype == gpumem.FP16 || p.dtype == gpumem.BF16) {
		return gpumem.FP32
	}
	return p.dtype
}

// factors returns the element counts of the row and column factors of a
// tensor with at least two dimensions.
func factors(p param) (row, col int64, err error) {
	s := p.t.Shape
	k := len(s)
	row, ok1 := checked.MulAll(s[:k-1]...)
	lead, ok2 := checked.MulAll(s[:k-2]...)
	col, ok3 := checked.Mul(lead, s[k-1])
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, gpumem.Errorf(tensorField(p.t, "Shape"), s, gpumem.ErrRange, "factored state size overflows int64")
	}
	return row, col, nil
}

// AppendSlots implements [Layout].
func (o Adafactor) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	if err := o.check(); err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	d := o.stateDType(p)
	factored := len(t.Shape) >= 2
	if o.Torch {
		dst = append(dst, stepScalar(false))
		if !factored {
			return append(dst, full("variance", p, d)), nil
		}
		row, col, err := factors(p)
		if err != nil {
			return dst, err
		}
		return append(dst,
			Slot{Name: "row_var", Elems: row, DType: d},
			Slot{Name: "col_var", Elems: col, DType: d}), nil
	}
	if o.FirstMoment {
		dst = append(dst, full("exp_avg", p, d))
	}
	if factored {
		row, col, err := factors(p)
		if err != nil {
			return dst, err
		}
		dst = append(dst,
			Slot{Name: "exp_avg_sq_row", Elems: row, DType: d},
			Slot{Name: "exp_avg_sq_col", Elems: col, DType: d})
	} else {
		dst = append(dst, full("exp_avg_sq", p, d))
	}
	return append(dst, Slot{Name: "RMS", Elems: 1, DType: d}), nil
}

// State implements [Optimizer].
func (o Adafactor) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer], from a reading of the two
// implementations (transformers' vectors of r + c elements counted,
// torch's neglected):
//
//   - transformers: for a 16-bit parameter, float32 copies of the
//     gradient and the parameter (2 × 4n bytes); then update =
//     grad**2 + eps[0] builds two full tensors in the state dtype, and
//     _approx_sq_grad (or exp_avg_sq.rsqrt()) another while update is
//     alive, so two state-sized tensors at the peak; for a factored
//     tensor that product torch.mul(r_factor, c_factor) is made while
//     its two factors (r elements, and c, in the state dtype) are alive
//     too; without a first moment, update stays referenced until the
//     next tensor allocates its own. (Measured on the CPU under torch
//     2.6 with transformers v4.57.1: the step of a tied 4096×128 fp32
//     embedding rises 2·2,097,152 + (4096+128)·4 bytes, plus one 4-byte
//     scalar, over its start: testdata/measured/cpu, the adafactor
//     rows.)
//   - torch, for loop: var_estimate = row_var @ col_var (one tensor like
//     the parameter) for ≥ 2-D tensors, grad*grad and variance.clone()
//     (two) for vectors, each referenced until the next tensor's;
//   - torch, foreach: one var_estimate per tensor, all at once ("the
//     foreach implementation uses ~ sizeof(params) more peak memory").
func (o Adafactor) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o Adafactor) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o Adafactor) transientOf(ts seq) (gpumem.Bytes, error) {
	if err := o.check(); err != nil {
		return 0, err
	}
	if o.Torch && o.Foreach {
		return sumTransient(ts, func(p param) (int64, error) {
			if len(p.t.Shape) >= 2 {
				if _, _, err := factors(p); err != nil {
					return 0, err
				}
			}
			return bytesOf(p.n, p.dtype)
		})
	}
	return loopTransient(ts, func(p param) (temps, error) {
		if len(p.t.Shape) >= 2 {
			if _, _, err := factors(p); err != nil {
				return temps{}, err
			}
		}
		m, err := bytesOf(p.n, o.stateDType(p))
		if err != nil {
			return temps{}, err
		}
		k := int64(2)
		if o.Torch && len(p.t.Shape) >= 2 {
			k = 1
		}
		peak, err := scale(k, m)
		if err != nil {
			return temps{}, err
		}
		if o.Torch {
			return temps{peak: peak, carry: peak}, nil
		}
		if len(p.t.Shape) >= 2 {
			// _approx_sq_grad's r_factor and c_factor beside the two
			// full tensors (src/transformers/optimization.py, v4.57.1).
			row, col, _ := factors(p)
			vec, err := bytesOf(row+col, o.stateDType(p))
			if err != nil {
				return temps{}, err
			}
			if peak, err = addBytes(peak, vec); err != nil {
				return temps{}, err
			}
		}
		carry := m
		if o.FirstMoment {
			carry = 0
		}
		if p.dtype == gpumem.FP16 || p.dtype == gpumem.BF16 {
			up, err := bytesOf(p.n, gpumem.FP32)
			if err != nil {
				return temps{}, err
			}
			if up, err = scale(2, up); err != nil {
				return temps{}, err
			}
			if peak, err = addBytes(peak, up); err != nil {
				return temps{}, err
			}
		}
		return temps{peak: peak, carry: carry}, nil
	})
}

// addBytes returns a+b, reporting overflow.
func addBytes(a, b int64) (int64, error) {
	v, ok := checked.Add(a, b)
	if !ok {
		return 0, gpumem.Errorf("bytes", a, gpumem.ErrRange, "temporary bytes overflow int64")
	}
	return v, nil
}
