package optimizer

import (
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Optimizer sizes the memory an optimizer keeps for the tensors it trains.
//
// State returns the persistent state the optimizer keeps for one
// trainable tensor after its first step, in bytes: what
// Σ numel·element_size over the tensors in PyTorch's opt.state[p] gives.
// It counts every state tensor wherever it lives, including the 4-byte
// step counters PyTorch keeps on the CPU; [Describe] splits the total by
// [Location]. State shared by all tensors (bitsandbytes' quantization
// maps) is not counted per tensor; [Total] and [Describe] add it once.
//
// Transient returns the largest amount of temporary device memory one
// step allocates on top of the persistent state, for the tensors in the
// order the optimizer visits them (the order of model.parameters()).
//
// String names the implementation followed, as its users spell it
// ("torch.optim.AdamW", "bnb.optim.PagedAdamW8bit").
//
// Implementations never panic on bad input: a negative dimension, an
// overflowing shape or an invalid setting is an error wrapping one of
// gpumem's categories ([gpumem.ErrInvalid], [gpumem.ErrRange],
// [gpumem.ErrUnsupported]) and naming the field.
type Optimizer interface {
	State(t gpumem.Tensor) (gpumem.Bytes, error)
	Transient(ts []gpumem.Tensor) (gpumem.Bytes, error)
	String() string
}

// Location says where a state tensor lives.
type Location uint8

const (
	// Device memory of the accelerator that holds the parameter.
	Device Location = iota
	// Host memory: PyTorch keeps the per-tensor step counter of Adam,
	// AdamW, Adagrad, RMSprop and Adafactor on the CPU unless capturable
	// or fused is set ("Deliberately host `step` on CPU", torch/optim).
	Host
	// Managed is CUDA unified memory (cudaMallocManaged), which
	// bitsandbytes' paged optimizers use for large state buffers. The
	// driver pages it between host and device on demand, so
	// torch.cuda.max_memory_allocated does not count it, yet it takes
	// device memory while resident (bitsandbytes prefetches it before
	// each update).
	Managed
)

// String returns "device", "host" or "managed".
func (l Location) String() string {
	switch l {
	case Device:
		return "device"
	case Host:
		return "host"
	case Managed:
		return "managed"
	}
	return "Location(" + strconv.Itoa(int(l)) + ")"
}

// Slot is one state tensor the optimizer keeps for a parameter.
type Slot struct {
	// Name is the key in the implementation's per-parameter state:
	// "exp_avg", "exp_avg_sq", "step", "state1", "absmax1", "row_var".
	Name string
	// Elems is its number of elements.
	Elems int64
	// DType is its storage format.
	DType gpumem.DType
	// Where is where it lives.
	Where Location
}

// Bytes returns the storage of the slot.
func (s Slot) Bytes() (gpumem.Bytes, error) { return s.DType.Size(s.Elems) }

// Layout is implemented by the optimizers of this package: it lists the
// state tensors behind [Optimizer.State]. AppendSlots appends the slots
// kept for t to dst and returns the extended slice, like strconv's
// Append functions, so that a caller can reuse a buffer.
type Layout interface {
	AppendSlots(dst []Slot, t gpumem.Tensor) ([]Slot, error)
}

// PagedState is implemented by optimizers that can keep part of their
// state in CUDA unified memory ([Managed]): bitsandbytes' paged
// optimizers. ManagedState returns the part of [Optimizer.State] of t
// that lives there (0 when the optimizer is not paged or t is too small
// to be paged). It is the sum of the [Managed] slots of [Layout], without
// building them, so that a budget can split the state without
// allocating.
//
// Such state is not allocated through PyTorch's caching allocator:
// bitsandbytes' get_paged (bitsandbytes/functional.py) wraps the pointer
// cget_managed_ptr returns (cudaMallocManaged with cudaMemAttachHost,
// csrc/pythonInterface.cpp) in torch.frombuffer, a CPU tensor to
// PyTorch, so torch.cuda.memory_allocated and memory_reserved never
// count it; nvidia-smi does, once the step has migrated it to the GPU.
type PagedState interface {
	ManagedState(t gpumem.Tensor) (gpumem.Bytes, error)
}

// SharedState is implemented by optimizers that keep state once per
// optimizer rather than per tensor, as bitsandbytes keeps one 256-entry
// quantization map per state and device. Given the whole trainable set,
// SharedBytes returns the bytes of that state and AppendShared appends
// its slots to dst.
type SharedState interface {
	SharedBytes(ts []gpumem.Tensor) (gpumem.Bytes, error)
	AppendShared(dst []Slot, ts []gpumem.Tensor) ([]Slot, error)
}

// Total returns the persistent state of opt for the trainable tensors
// ts: the sum of opt.State over ts plus the state shared by all of them
// (see [SharedState]). Pass only trainable tensors: frozen parameters
// (a LoRA base model, a frozen vision tower) have no gradient, so
// PyTorch's optimizers never create state for them.
//
// Total does not allocate for the optimizers of this package.
func Total(opt Optimizer, ts []gpumem.Tensor) (gpumem.Bytes, error) {
	if opt == nil {
		return 0, gpumem.Errorf("optimizer", nil, gpumem.ErrInvalid, "nil Optimizer")
	}
	var sum int64
	for _, t := range ts {
		b, err := opt.State(t)
		if err != nil {
			return 0, err
		}
		var ok bool
		if sum, ok = checked.Add(sum, int64(b)); !ok {
			return 0, gpumem.Errorf("optimizer.Total", len(ts), gpumem.ErrRange, "state bytes overflow int64")
		}
	}
	if s, ok := opt.(SharedState); ok {
		b, err := s.SharedBytes(ts)
		if err != nil {
			return 0, err
		}
		if sum, ok = checked.Add(sum, int64(b)); !ok {
			return 0, gpumem.Errorf("optimizer.Total", len(ts), gpumem.ErrRange, "state bytes overflow int64")
		}
	}
	return gpumem.Bytes(sum), nil
}

// Part is the state of one trainable tensor.
type Part struct {
	// Name is the tensor's name.
	Name string
	// Bytes is [Optimizer.State] of the tensor.
	Bytes gpumem.Bytes
	// Slots lists the state tensors, when the optimizer implements
	// [Layout]; otherwise it is nil.
	Slots []Slot
}

// Breakdown is the optimizer memory of a trainable set, per tensor and by
// location, for a budget that composes components.
type Breakdown struct {
	// Optimizer is the optimizer's String.
	Optimizer string
	// Parts has one entry per trainable tensor, in the order given.
	Parts []Part
	// Shared lists state kept once per optimizer (see [SharedState]).
	Shared []Slot
	// State is the persistent total: Σ Parts[i].Bytes + Σ Shared bytes,
	// equal to [Total].
	State gpumem.Bytes
	// Device, Host and Managed split State by [Location]. Optimizers
	// that do not implement [Layout] count everything on the device.
	Device, Host, Managed gpumem.Bytes
	// Transient is [Optimizer.Transient] of the trainable set: the
	// temporaries of one step, on the device, on top of State.
	Transient gpumem.Bytes
}

// Describe returns the [Breakdown] of opt for the trainable tensors ts.
func Describe(opt Optimizer, ts []gpumem.Tensor) (Breakdown, error) {
	if opt == nil {
		return Breakdown{}, gpumem.Errorf("optimizer", nil, gpumem.ErrInvalid, "nil Optimizer")
	}
	bd := Breakdown{Optimizer: opt.String(), Parts: make([]Part, 0, len(ts))}
	lay, hasLayout := opt.(Layout)
	var loc [3]int64
	add := func(where Location, b gpumem.Bytes) error {
		var ok bool
		if int(where) >= len(loc) {
			where = Device
		}
		if loc[where], ok = checked.Add(loc[where], int64(b)); !ok {
			return gpumem.Errorf("optimizer.Describe", len(ts), gpumem.ErrRange, "state bytes overflow int64")
		}
		return nil
	}
	for _, t := range ts {
		p := Part{Name: t.Name}
		b, err := opt.State(t)
		if err != nil {
			return Breakdown{}, err
		}
		p.Bytes = b
		if hasLayout {
			if p.Slots, err = lay.AppendSlots(nil, t); err != nil {
				return Breakdown{}, err
			}
			for _, s := range p.Slots {
				sb, err := s.Bytes()
				if err != nil {
					return Breakdown{}, err
				}
				if err := add(s.Where, sb); err != nil {
					return Breakdown{}, err
				}
			}
		} else if err := add(Device, b); err != nil {
			return Breakdown{}, err
		}
		bd.Parts = append(bd.Parts, p)
	}
	if s, ok := opt.(SharedState); ok {
		var err error
		if bd.Shared, err = s.AppendShared(nil, ts); err != nil {
			return Breakdown{}, err
		}
		for _, sl := range bd.Shared {
			sb, err := sl.Bytes()
			if err != nil {
				return Breakdown{}, err
			}
			if err := add(sl.Where, sb); err != nil {
				return Breakdown{}, err
			}
		}
	}
	sum, ok := checked.Add(loc[Device], loc[Host])
	if ok {
		sum, ok = checked.Add(sum, loc[Managed])
	}
	if !ok {
		return Breakdown{}, gpumem.Errorf("optimizer.Describe", len(ts), gpumem.ErrRange, "state bytes overflow int64")
	}
	bd.Device, bd.Host, bd.Managed = gpumem.Bytes(loc[Device]), gpumem.Bytes(loc[Host]), gpumem.Bytes(loc[Managed])
	bd.State = gpumem.Bytes(sum)
	tr, err := opt.Transient(ts)
	if err != nil {
		return Breakdown{}, err
	}
	bd.Transient = tr
	return bd, nil
}

// sumSlots returns the total bytes of slots.
func sumSlots(slots []Slot) (gpumem.Bytes, error) {
	var sum int64
	for _, s := range slots {
		b, err := s.Bytes()
		if err != nil {
			return 0, err
		}
		var ok bool
		if sum, ok = checked.Add(sum, int64(b)); !ok {
			return 0, gpumem.Errorf("optimizer.State", s.Name, gpumem.ErrRange, "state bytes overflow int64")
		}
	}
	return gpumem.Bytes(sum), nil
}
