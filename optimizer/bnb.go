package optimizer

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Constants of bitsandbytes' 8-bit optimizers, from
// bitsandbytes/optim/optimizer.py (Optimizer2State.init_state and
// get_state_buffer) and bitsandbytes/functional.py (create_dynamic_map):
const (
	// bnbBlock is the block-wise quantization block: one fp32 absmax per
	// 256 elements ("blocksize = 256" since PR #1365, released in 0.44.0;
	// 2048 before, as in the paper's experiments).
	bnbBlock = 256
	// bnbMin8bit is min_8bit_size's default: tensors with fewer elements
	// keep fp32 state ("if p.numel() < config['min_8bit_size']: dtype =
	// torch.float32").
	bnbMin8bit = 4096
	// bnbPagedMin is the size from which a paged optimizer allocates a
	// state buffer in unified memory ("if not self.is_paged or p.numel()
	// < 1e5: return torch.zeros_like(...)", else F.get_paged).
	bnbPagedMin = 100_000
	// bnbQmapEntries is the length of a dynamic quantization map:
	// create_dynamic_map asserts len(data) == 2**total_bits with
	// total_bits = 8, as a float32 tensor.
	bnbQmapEntries = 256
)

// Adam8bit is bitsandbytes' Adam8bit and, with Paged, PagedAdam8bit
// (bitsandbytes/optim/adam.py over Optimizer2State in
// bitsandbytes/optim/optimizer.py, read at 0.50.x; block size checked
// against 0.44.0). Per tensor of n elements, created at the first step:
//
//   - n >= Min8bitSize: state1 and state2, uint8 like the parameter (n
//     bytes each), and absmax1 and absmax2, float32 of ceil(n/Block)
//     elements each; so 2n + 8·ceil(n/256) bytes by default;
//   - n < Min8bitSize: state1 and state2 in float32 (8n bytes), whatever
//     the parameter's dtype;
//   - step is a Python int: no tensor.
//
// The two 256-entry float32 quantization maps (qmap1 "dynamic", qmap2
// "udynamic") are one tensor each per optimizer and device, referenced by
// every 8-bit tensor's state: 2 KiB once, reported by AppendShared and
// counted by [Total], not by State.
//
// Paged variants allocate state1 and state2 of tensors with at least
// 100,000 elements in CUDA unified memory ([Managed]), which
// torch.cuda.memory_allocated does not see and the driver may evict to
// the host under pressure; absmax stays on the device.
//
// The update is one fused kernel per tensor (optimizer_update_8bit_blockwise
// or optimizer_update_32bit), so Transient is 0.
//
// The zero value is bnb.optim.Adam8bit with its defaults.
type Adam8bit struct {
	// Block is the number of elements per absmax. Zero means 256
	// (bitsandbytes >= 0.44.0); set 2048 for older releases.
	Block int64
	// Min8bitSize is min_8bit_size: tensors with fewer elements keep
	// 32-bit state. Zero means bitsandbytes' default, 4096.
	Min8bitSize int64
	// Paged models the Paged* variants.
	Paged bool
	// Bits32 models the 32-bit variants (Adam32bit, PagedAdam32bit,
	// optim_bits=32): float32 state1 and state2 for every tensor.
	Bits32 bool
}

// AdamW8bit is bitsandbytes' AdamW8bit and, with Paged, PagedAdamW8bit
// (bitsandbytes/optim/adamw.py): the same state as [Adam8bit], whose
// fields it shares; weight decay is applied inside the kernel.
type AdamW8bit Adam8bit

func (o Adam8bit) name(w string) string {
	s := "bnb.optim."
	if o.Paged {
		s += "Paged"
	}
	s += "Adam" + w
	if o.Bits32 {
		return s + "32bit"
	}
	return s + "8bit"
}

// String returns "bnb.optim.Adam8bit", "bnb.optim.PagedAdam8bit",
// "bnb.optim.Adam32bit" or "bnb.optim.PagedAdam32bit".
func (o Adam8bit) String() string { return o.name("") }

// String returns "bnb.optim.AdamW8bit", "bnb.optim.PagedAdamW8bit",
// "bnb.optim.AdamW32bit" or "bnb.optim.PagedAdamW32bit".
func (o AdamW8bit) String() string { return Adam8bit(o).name("W") }

func (o Adam8bit) settings(tn string) (block, min8 int64, err error) {
	block, min8 = o.Block, o.Min8bitSize
	if block < 0 {
		return 0, 0, gpumem.Errorf(tn+".Block", block, gpumem.ErrInvalid, "must be positive")
	}
	if block == 0 {
		block = bnbBlock
	}
	if min8 < 0 {
		return 0, 0, gpumem.Errorf(tn+".Min8bitSize", min8, gpumem.ErrInvalid, "must not be negative")
	}
	if min8 == 0 {
		min8 = bnbMin8bit
	}
	return block, min8, nil
}

// quantized reports whether a tensor of n elements gets 8-bit state.
func (o Adam8bit) quantized(n, min8 int64) bool { return !o.Bits32 && n >= min8 }

func (o Adam8bit) appendSlots(tn string, dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	return o.appendStates(tn, 2, dst, t)
}

// appendStates appends the slots of Optimizer2State (states = 2) or
// Optimizer1State (states = 1).
func (o Adam8bit) appendStates(tn string, states int, dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	block, min8, err := o.settings(tn)
	if err != nil {
		return dst, err
	}
	p, err := inspect(t)
	if err != nil {
		return dst, err
	}
	where := Device
	if o.Paged && p.n >= bnbPagedMin {
		where = Managed
	}
	if !o.quantized(p.n, min8) {
		dst = append(dst, Slot{Name: "state1", Elems: p.n, DType: gpumem.FP32, Where: where})
		if states == 2 {
			dst = append(dst, Slot{Name: "state2", Elems: p.n, DType: gpumem.FP32, Where: where})
		}
		return dst, nil
	}
	blocks, _ := checked.CeilDiv(p.n, block)
	dst = append(dst,
		Slot{Name: "state1", Elems: p.n, DType: gpumem.UINT8, Where: where},
		Slot{Name: "absmax1", Elems: blocks, DType: gpumem.FP32, Where: Device})
	if states == 2 {
		dst = append(dst,
			Slot{Name: "state2", Elems: p.n, DType: gpumem.UINT8, Where: where},
			Slot{Name: "absmax2", Elems: blocks, DType: gpumem.FP32, Where: Device})
	}
	return dst, nil
}

func (o Adam8bit) appendShared(tn string, dst []Slot, ts []gpumem.Tensor) ([]Slot, error) {
	return o.appendSharedN(tn, 2, dst, ts)
}

func (o Adam8bit) appendSharedN(tn string, states int, dst []Slot, ts []gpumem.Tensor) ([]Slot, error) {
	_, min8, err := o.settings(tn)
	if err != nil {
		return dst, err
	}
	for _, t := range ts {
		p, err := inspect(t)
		if err != nil {
			return dst, err
		}
		if o.quantized(p.n, min8) {
			dst = append(dst, Slot{Name: "qmap1", Elems: bnbQmapEntries, DType: gpumem.FP32, Where: Device})
			if states == 2 {
				dst = append(dst, Slot{Name: "qmap2", Elems: bnbQmapEntries, DType: gpumem.FP32, Where: Device})
			}
			return dst, nil
		}
	}
	return dst, nil
}

func (o Adam8bit) transient(tn string, ts seq) (gpumem.Bytes, error) {
	if _, _, err := o.settings(tn); err != nil {
		return 0, err
	}
	return loopTransient(ts, func(param) (temps, error) { return temps{}, nil })
}

// managed returns the bytes of the state of t in unified memory: state1
// (and state2 when states is 2) of a paged optimizer for a tensor of at
// least 100,000 elements (get_state_buffer in
// bitsandbytes/optim/optimizer.py, which allocates state1 and state2
// through it; absmax and the quantization maps stay device tensors).
func (o Adam8bit) managed(tn string, states int, t gpumem.Tensor) (gpumem.Bytes, error) {
	_, min8, err := o.settings(tn)
	if err != nil || !o.Paged {
		return 0, err
	}
	p, err := inspect(t)
	if err != nil || p.n < bnbPagedMin {
		return 0, err
	}
	dt := gpumem.UINT8
	if !o.quantized(p.n, min8) {
		dt = gpumem.FP32
	}
	one, err := dt.Size(p.n)
	if err != nil {
		return 0, err
	}
	if states == 1 {
		return one, nil
	}
	two, ok := checked.Add(int64(one), int64(one))
	if !ok {
		return 0, gpumem.Errorf(tn+".State", t.Name, gpumem.ErrRange, "state bytes overflow int64")
	}
	return gpumem.Bytes(two), nil
}

// ManagedState implements [PagedState]: with Paged, state1 and state2
// of a tensor of at least 100,000 elements.
func (o Adam8bit) ManagedState(t gpumem.Tensor) (gpumem.Bytes, error) {
	return o.managed("Adam8bit", 2, t)
}

// ManagedState implements [PagedState], as [Adam8bit.ManagedState].
func (o AdamW8bit) ManagedState(t gpumem.Tensor) (gpumem.Bytes, error) {
	return Adam8bit(o).managed("AdamW8bit", 2, t)
}

// ManagedState implements [PagedState]: with Paged, state1 of a tensor
// of at least 100,000 elements.
func (o Lion8bit) ManagedState(t gpumem.Tensor) (gpumem.Bytes, error) {
	return Adam8bit(o).managed("Lion8bit", 1, t)
}

// AppendSlots implements [Layout].
func (o Adam8bit) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	return o.appendSlots("Adam8bit", dst, t)
}

// AppendShared implements [SharedState]: the two quantization maps, if
// any tensor of ts gets 8-bit state.
func (o Adam8bit) AppendShared(dst []Slot, ts []gpumem.Tensor) ([]Slot, error) {
	return o.appendShared("Adam8bit", dst, ts)
}

// SharedBytes implements [SharedState]: 2 KiB if any tensor of ts gets
// 8-bit state, else 0.
func (o Adam8bit) SharedBytes(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [2]Slot
	slots, err := o.appendShared("Adam8bit", buf[:0], ts)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// State implements [Optimizer].
func (o Adam8bit) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]: 0, the update is a fused kernel.
func (o Adam8bit) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o Adam8bit) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o Adam8bit) transientOf(ts seq) (gpumem.Bytes, error) {
	return o.transient("Adam8bit", ts)
}

// AppendSlots implements [Layout].
func (o AdamW8bit) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	return Adam8bit(o).appendSlots("AdamW8bit", dst, t)
}

// AppendShared implements [SharedState], as [Adam8bit.AppendShared].
func (o AdamW8bit) AppendShared(dst []Slot, ts []gpumem.Tensor) ([]Slot, error) {
	return Adam8bit(o).appendShared("AdamW8bit", dst, ts)
}

// SharedBytes implements [SharedState], as [Adam8bit.SharedBytes].
func (o AdamW8bit) SharedBytes(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [2]Slot
	slots, err := Adam8bit(o).appendShared("AdamW8bit", buf[:0], ts)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// State implements [Optimizer].
func (o AdamW8bit) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]: 0, the update is a fused kernel.
func (o AdamW8bit) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o AdamW8bit) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o AdamW8bit) transientOf(ts seq) (gpumem.Bytes, error) {
	return Adam8bit(o).transient("AdamW8bit", ts)
}

// Lion8bit is bitsandbytes' Lion8bit and, with Paged, PagedLion8bit
// (bitsandbytes/optim/lion.py over Optimizer1State): Lion's single
// momentum as state1 with the same rules as [Adam8bit] — uint8 plus one
// float32 absmax1 per Block elements from Min8bitSize elements, float32
// below, unified memory for paged buffers from 100,000 elements — and
// one shared 256-entry float32 qmap1. Bits32 models Lion32bit and
// bnb.optim.Lion's default optim_bits=32 (Hugging Face's "lion_32bit").
type Lion8bit Adam8bit

// String returns "bnb.optim.Lion8bit", "bnb.optim.PagedLion8bit",
// "bnb.optim.Lion32bit" or "bnb.optim.PagedLion32bit".
func (o Lion8bit) String() string {
	s := "bnb.optim."
	if o.Paged {
		s += "Paged"
	}
	if o.Bits32 {
		return s + "Lion32bit"
	}
	return s + "Lion8bit"
}

// AppendSlots implements [Layout].
func (o Lion8bit) AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error) {
	return Adam8bit(o).appendStates("Lion8bit", 1, dst, t)
}

// AppendShared implements [SharedState]: qmap1, if any tensor of ts gets
// 8-bit state.
func (o Lion8bit) AppendShared(dst []Slot, ts []gpumem.Tensor) ([]Slot, error) {
	return Adam8bit(o).appendSharedN("Lion8bit", 1, dst, ts)
}

// SharedBytes implements [SharedState]: 1 KiB if any tensor of ts gets
// 8-bit state, else 0.
func (o Lion8bit) SharedBytes(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [2]Slot
	slots, err := Adam8bit(o).appendSharedN("Lion8bit", 1, buf[:0], ts)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// State implements [Optimizer].
func (o Lion8bit) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	var buf [8]Slot
	slots, err := o.AppendSlots(buf[:0], t)
	if err != nil {
		return 0, err
	}
	return sumSlots(slots)
}

// Transient implements [Optimizer]: 0, the update is a fused kernel.
func (o Lion8bit) Transient(ts []gpumem.Tensor) (gpumem.Bytes, error) {
	return o.transientOf(seq{ts: ts})
}

// TransientRuns implements [RunTransient], as Transient.
func (o Lion8bit) TransientRuns(rs []Run) (gpumem.Bytes, error) {
	return o.transientOf(seq{rs: rs})
}

// transientOf is Transient over a list of tensors or runs.
func (o Lion8bit) transientOf(ts seq) (gpumem.Bytes, error) {
	return Adam8bit(o).transient("Lion8bit", ts)
}
