package optimizer

import (
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Lion is the Lion optimizer (Chen et al., "Symbolic Discovery of
// Optimization Algorithms", 2023) as lucidrains/lion-pytorch implements
// it (lion_pytorch/lion_pytorch.py): one exp_avg = torch.zeros_like(p)
// per tensor, no step counter. State = parameter bytes.
//
// The zero value is lion_pytorch.Lion with its defaults (use_triton=False).
type Lion struct {
	// StateDType is the dtype of exp_avg; the zero value follows the
	// parameter.
	StateDType gpumem.DType
	// Foreach models lion_pytorch.foreach.Lion, which clones every
	// exp_avg at once (updates = [t.clone() for t in exp_avgs]).
	Foreach bool
	// Triton models use_triton=True: the update is one kernel, no
	// temporaries.
	Triton bool
}

// String returns "lion_pytorch.Lion".
func (o Lion) String() string { return "lion_pytorch.Lion" }

func (o Lion) check() error {
	if o.Foreach && o.Triton {
		return gpumem.Errorf("Lion.Triton", true, gpumem.ErrInvalid, "the foreach and triton variants are separate classes; choose one")
	}
	return checkStateDType("Lion", o.StateDType)
}

// AppendSlots implements [Layout].
func (o Lion) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	if err := o.check(); err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	d, err := stateDType("Lion", o.StateDType, p)
	if err != nil {
		return dst, err
	}
	return append(dst, full("exp_avg", p, d)), nil
}

// State implements [Optimizer].
func (o Lion) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]. The loop's update_fn builds
// exp_avg.clone() and then .add(grad, ...) (not in place): two
// state-sized tensors at once, freed when update_fn returns. The foreach
// variant holds one clone per tensor; Triton none.
func (o Lion) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o Lion) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o Lion) transientOf(ts seq) (gpumem.Bytes, error) {
	if err := o.check(); err != nil {
		return 0, err
	}
	moment := func(p param) (int64, error) {
		d, err := stateDType("Lion", o.StateDType, p)
		if err != nil {
			return 0, err
		}
		return bytesOf(p.n, d)
	}
	switch {
	case o.Triton:
		return loopTransient(ts, func(param) (temps, error) { return temps{}, nil })
	case o.Foreach:
		return sumTransient(ts, moment)
	}
	return loopTransient(ts, func(p param) (temps, error) {
		m, err := moment(p)
		if err != nil {
			return temps{}, err
		}
		two, err := scale(2, m)
		return temps{peak: two}, err
	})
}

// LAMB is the LAMB optimizer (You et al., "Large Batch Optimization for
// Deep Learning: Training BERT in 76 minutes", 2020) as timm implements it
// (timm/optim/lamb.py, "a pure pytorch variant of FusedLAMB (NvLamb
// variant)") and NVIDIA apex's FusedLAMB: exp_avg and exp_avg_sq =
// torch.zeros_like(p) per tensor. The step counter is one CPU scalar per
// parameter group (group['step']), not per tensor, so it is not counted.
// State = 2 × parameter bytes.
//
// The zero value is timm's Lamb on its single-tensor path.
type LAMB struct {
	// StateDType is the dtype of the moments; the zero value follows the
	// parameter.
	StateDType gpumem.DType
	// Fused models apex.optimizers.FusedLAMB: one multi-tensor kernel,
	// no temporaries.
	Fused bool
}

// String returns "timm.optim.Lamb" or "apex.optimizers.FusedLAMB".
func (o LAMB) String() string {
	if o.Fused {
		return "apex.optimizers.FusedLAMB"
	}
	return "timm.optim.Lamb"
}

// AppendSlots implements [Layout].
func (o LAMB) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	if err := checkStateDType("LAMB", o.StateDType); err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	d, err := stateDType("LAMB", o.StateDType, p)
	if err != nil {
		return dst, err
	}
	return append(dst, full("exp_avg", p, d), full("exp_avg_sq", p, d)), nil
}

// State implements [Optimizer].
func (o LAMB) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]. timm's _single_tensor_lamb holds the
// clipped gradient (grad / clip_grad_norm; max_grad_norm defaults to
// 1.0), exp_avg_sq.sqrt() and the quotient denom at once (three
// state-sized tensors), and denom and update stay referenced into the
// next tensor's iteration. Not modelled: timm's chunked foreach path
// (foreach=None resolves to it on CUDA), whose lists hold at most a few
// tensors at a time. Fused: 0.
func (o LAMB) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o LAMB) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o LAMB) transientOf(ts seq) (gpumem.Bytes, error) {
	if err := checkStateDType("LAMB", o.StateDType); err != nil {
		return 0, err
	}
	return loopTransient(ts, func(p param) (temps, error) {
		if o.Fused {
			return temps{}, nil
		}
		d, err := stateDType("LAMB", o.StateDType, p)
		if err != nil {
			return temps{}, err
		}
		m, err := bytesOf(p.n, d)
		if err != nil {
			return temps{}, err
		}
		peak, err := scale(3, m)
		if err != nil {
			return temps{}, err
		}
		carry, err := scale(2, m)
		return temps{peak: peak, carry: carry}, err
	})
}

// DefaultMuonAux lists, comma-separated, the name fragments that [Muon]
// sends to its auxiliary AdamW when its Aux field is empty: input
// embeddings and output heads, which Muon's reference README says to
// optimize with AdamW ("Other parameters, such as embeddings, classifier
// heads, and hidden gains/biases should be optimized using standard
// AdamW"). "embed" and "lm_head" are Hugging Face's names, "wte"/"wpe"
// GPT-2's, "embd" GGUF's token_embd.
const DefaultMuonAux = "embed,embd,lm_head,wte,wpe"

// Muon is the Muon optimizer as KellerJordan/Muon implements it
// (muon.py, SingleDeviceMuonWithAuxAdam and MuonWithAuxAdam, read at
// commit 857d1ad): hidden weight matrices (≥ 2-D) get Muon, a momentum
// SGD whose update is orthogonalized by a Newton–Schulz iteration, and
// every other tensor an AdamW run inside the same optimizer, as the
// README's recipe splits them ("hidden_weights = [p for p in
// model.body.parameters() if p.ndim >= 2]", head and embeddings to Adam).
//
//   - Muon tensors: momentum_buffer = torch.zeros_like(p); no step;
//   - AdamW tensors: exp_avg and exp_avg_sq = torch.zeros_like(p); step
//     is a Python int (no tensor).
//
// A tensor goes to AdamW if it has fewer than two dimensions or its name
// contains one of Aux. The distributed MuonWithAuxAdam creates a Muon
// tensor's momentum_buffer only on the rank that updates it (round
// robin), so its per-rank Muon state is about 1/world of State's;
// the AdamW state is replicated.
type Muon struct {
	// Aux lists, comma-separated, the name fragments that send a ≥ 2-D
	// tensor to AdamW. Empty means [DefaultMuonAux]; "none" sends every
	// ≥ 2-D tensor to Muon. A string keeps Muon comparable.
	Aux string
	// StateDType is the dtype of the buffers; the zero value follows the
	// parameter.
	StateDType gpumem.DType
}

// String returns "muon.MuonWithAuxAdam".
func (o Muon) String() string { return "muon.MuonWithAuxAdam" }

// UsesMuon reports whether t is updated by Muon rather than the
// auxiliary AdamW.
func (o Muon) UsesMuon(t gpumem.Tensor) bool {
	if len(t.Shape) < 2 {
		return false
	}
	aux := o.Aux
	switch aux {
	case "":
		aux = DefaultMuonAux
	case "none":
		return true
	}
	for aux != "" {
		var frag string
		frag, aux, _ = strings.Cut(aux, ",")
		if frag = strings.TrimSpace(frag); frag != "" && strings.Contains(t.Name, frag) {
			return false
		}
	}
	return true
}

// AppendSlots implements [Layout].
func (o Muon) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	if err := checkStateDType("Muon", o.StateDType); err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	d, err := stateDType("Muon", o.StateDType, p)
	if err != nil {
		return dst, err
	}
	if o.UsesMuon(t) {
		return append(dst, full("momentum_buffer", p, d)), nil
	}
	return append(dst, full("exp_avg", p, d), full("exp_avg_sq", p, d)), nil
}

// State implements [Optimizer].
func (o Muon) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// nsShape returns the batch and the short and long sides of the matrix
// that zeropower_via_newtonschulz5 orthogonalizes: a 4-D convolution
// filter is viewed as (out, in·kh·kw); other tensors are batched over
// their leading dimensions.
func nsShape(s []int64) (batch, r, c int64, ok bool) {
	k := len(s)
	if k == 4 {
		batch, r = 1, s[0]
		c, ok = checked.MulAll(s[1:]...)
	} else {
		batch, ok = checked.MulAll(s[:k-2]...)
		r, c = s[k-2], s[k-1]
	}
	if r > c {
		r, c = c, r
	}
	return batch, r, c, ok
}

// Transient implements [Optimizer], from a reading of muon.py:
//
//   - Muon tensor (r ≤ c the sides of its matrix): within a
//     Newton–Schulz iteration, X = a*X + B@X holds the old X, a*X, B@X
//     and the sum (four r×c) beside A = X@X.mT and B (two r×r), all in
//     bfloat16: 2·(4rc + 2r²) bytes per matrix of the batch; the
//     returned update (r×c bf16) stays referenced into the next tensor;
//   - AdamW tensor: adam_update builds grad.square() and then buf1c,
//     buf2c, buf2c.sqrt()+eps and the quotient (four tensors like the
//     parameter at the peak); the update stays referenced into the next.
func (o Muon) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o Muon) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o Muon) transientOf(ts seq) (gpumem.Bytes, error) {
	if err := checkStateDType("Muon", o.StateDType); err != nil {
		return 0, err
	}
	return loopTransient(ts, func(p param) (temps, error) {
		overflow := gpumem.Errorf(tensorField(p.t, "Shape"), p.t.Shape, gpumem.ErrRange, "Newton–Schulz temporaries overflow int64")
		if o.UsesMuon(p.t) {
			batch, r, c, ok := nsShape(p.t.Shape)
			rc, ok1 := checked.Mul(r, c)
			rr, ok2 := checked.Mul(r, r)
			rc4, ok3 := checked.Mul(rc, 4)
			rr2, ok4 := checked.Mul(rr, 2)
			per, ok5 := checked.Add(rc4, rr2)
			elems, ok6 := checked.Mul(per, batch)
			upd, ok7 := checked.Mul(rc, batch)
			if !(ok && ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
				return temps{}, overflow
			}
			peak, err := bytesOf(elems, gpumem.BF16)
			if err != nil {
				return temps{}, overflow
			}
			carry, err := bytesOf(upd, gpumem.BF16)
			if err != nil {
				return temps{}, overflow
			}
			return temps{peak: peak, carry: carry}, nil
		}
		d, err := stateDType("Muon", o.StateDType, p)
		if err != nil {
			return temps{}, err
		}
		m, err := bytesOf(p.n, d)
		if err != nil {
			return temps{}, err
		}
		peak, err := scale(4, m)
		return temps{peak: peak, carry: m}, err
	})
}
