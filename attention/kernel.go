package attention

import (
	"math"

	"github.com/gpumem/gpumem"
)

// Kernel is the memory model of one attention implementation: for a
// [Shape], the bytes it keeps for backward and the transient peaks of its
// forward and backward. All three figures count live tensor bytes
// (PyTorch's memory_allocated before the caching allocator rounds them)
// and are zero-allocation for valid shapes.
//
// # Contract
//
// The kernel is the attention core: it starts from q, k and v (after the
// projections and RoPE, before any repeat_kv) and ends with the output o
// (before the output projection). With I = [Inputs](s) and O = [Output](s):
//
//   - Saved(s) is the bytes the kernel's autograd graph keeps from the end
//     of the forward until its backward, counted once per storage. It
//     INCLUDES q, k and v when the kernel keeps them (every kernel does, or
//     keeps copies in their place: repeat_kv expansions, fp32 upcasts,
//     padded copies), so a caller summing a layer must not count the
//     post-RoPE q, k, v again. It EXCLUDES the output o, which the output
//     projection saves as its input (same storage for the fused kernels, a
//     contiguous copy for eager). Zero when s.NoGrad.
//   - Forward(s) is the peak, during the forward call, of the bytes
//     allocated by the kernel above what was live at entry (q, k, v and
//     everything before are not counted). It INCLUDES the output o and the
//     tensors that become part of Saved, since the call allocates them.
//     The live bytes at the forward peak are therefore base + Forward(s),
//     where base holds q, k and v.
//   - Backward(s) is the peak, during the kernel's backward, of the bytes
//     allocated above what was live at entry (the Saved tensors and the
//     output gradient dO are not counted). It INCLUDES the input gradients
//     dq, dk, dv that the backward returns and every workspace, and it
//     subtracts saved tensors where the autograd engine frees them before
//     the peak. Zero when s.NoGrad.
//
// # Composition
//
// A budget that walks a layer does, with base the bytes live before q, k
// and v exist:
//
//	forward,  at the attention call:  base + Inputs(s) + Forward(s)
//	forward,  after the call:         base + Saved(s) + Output(s)    (q, k, v now live only through Saved)
//	backward, at the attention call:  base' + Saved(s) + Output(s) + Backward(s)   (Output: dO)
//	backward, after the call:         base' + Inputs(s)              (dq, dk, dv)
//
// where base' is whatever else the backward holds at that point. Nothing
// is counted twice: the model must not list the post-RoPE q, k, v or the
// softmax among its own saved tensors, and counts the output once, as the
// output projection's saved input. [Peak] is the first and third lines for
// one call with base = base' = 0.
//
// Implementations must return a *gpumem.FieldError wrapping
// gpumem.ErrInvalid for an invalid shape, gpumem.ErrUnsupported for a
// shape the real kernel rejects, and gpumem.ErrRange on overflow, and must
// not panic.
//
// A Kernel is a kernel with its options (an fp32 softmax, FlashAttention-3,
// chunks of heads). The choice an estimate of a whole model takes,
// model.Attention (Hugging Face's attn_implementation), names three
// of them: model.Eager is [Eager], model.SDPA is [MemEfficient] and
// model.Flash is [Flash].
type Kernel interface {
	// Saved returns the bytes kept for backward, q, k, v included, the
	// output excluded.
	Saved(s Shape) (gpumem.Bytes, error)
	// Forward returns the peak bytes allocated during the forward above
	// the inputs, output and saved tensors included.
	Forward(s Shape) (gpumem.Bytes, error)
	// Backward returns the peak bytes allocated during the backward above
	// the saved tensors and dO, input gradients and workspaces included.
	Backward(s Shape) (gpumem.Bytes, error)
}

// Peak returns the most bytes live at once when k runs one forward and
// one backward in isolation, counting q, k and v, the output and its
// gradient:
//
//	max(Inputs + Forward, Saved + Output + Backward)
//
// and only Inputs + Forward when s.NoGrad. It is the figure the inverse
// helpers ([LongestSeqLen], [MaxHeadChunk]) compare with a budget.
func Peak(k Kernel, s Shape) (gpumem.Bytes, error) {
	f, err := figuresOf(k, s)
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes(f.peak()), nil
}

// Retained returns the bytes that k hands back to the caller beyond the
// output and that outlive the backward: the attention probabilities of
// [Eager] with KeepWeights (output_attentions=True), which a model keeps
// for every layer until the caller drops its outputs. In training they are
// the same storage as part of Saved; under NoGrad they are the only thing
// a layer leaves behind. Zero for kernels that return only the output.
func Retained(k Kernel, s Shape) (gpumem.Bytes, error) {
	f, err := figuresOf(k, s)
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes(f.retained), nil
}

// figs is the breakdown every built-in kernel computes, in bytes.
type figs struct {
	inQ      int64 // bytes of the given q kept for backward (by reference)
	inKV     int64 // bytes of the given k and v kept for backward (by reference)
	own      int64 // bytes the kernel allocates and keeps for backward
	fwd      int64 // Forward: peak above entry, output and own saved included
	bwd      int64 // Backward: peak above saved + dO, input gradients included
	out      int64 // bytes of the output o
	inputs   int64 // bytes of q, k, v as given (Inputs)
	grads    int64 // bytes of dq, dk, dv (equal to inputs)
	retained int64 // bytes handed back beyond o (KeepWeights)
}

func (f figs) saved() int64 { return f.inQ + f.inKV + f.own }

func (f figs) peak() int64 {
	p := f.inputs + f.fwd
	if b := f.saved() + f.out + f.bwd; b > p {
		p = b
	}
	return p
}

// figurer is implemented by the built-in kernels; wrappers use it to see
// which parts of Saved are references to their inputs.
type figurer interface {
	figures(s Shape) (figs, error)
}

// figuresOf returns the breakdown of any Kernel. A kernel outside this
// package is taken at its word: its Saved is treated as its own
// allocation (no input references), which can only overstate a wrapper's
// total.
func figuresOf(k Kernel, s Shape) (figs, error) {
	if k == nil {
		return figs{}, gpumem.Errorf("Kernel", nil, gpumem.ErrInvalid, "no kernel")
	}
	if fk, ok := k.(figurer); ok {
		return fk.figures(s)
	}
	d, err := dimsOf(s)
	if err != nil {
		return figs{}, err
	}
	sv, err := k.Saved(s)
	if err != nil {
		return figs{}, err
	}
	fw, err := k.Forward(s)
	if err != nil {
		return figs{}, err
	}
	bw, err := k.Backward(s)
	if err != nil {
		return figs{}, err
	}
	in := (d.q + 2*d.kv) * d.e
	return figs{own: int64(sv), fwd: int64(fw), bwd: int64(bw), out: d.q * d.e, inputs: in, grads: in}, nil
}

// tally follows the live bytes of a kernel's timeline relative to its
// entry and records their maximum. Frees may take live below zero (saved
// tensors released during backward). Sizes are bounded by dimsOf, so the
// sums cannot overflow; bad guards the arithmetic anyway.
type tally struct {
	live, peak int64
	bad        bool
}

func (t *tally) alloc(n int64) {
	if n < 0 || t.live > math.MaxInt64-n {
		t.bad = true
		return
	}
	t.live += n
	if t.live > t.peak {
		t.peak = t.live
	}
}

func (t *tally) free(n int64) { t.live -= n }

// savedOf, forwardOf and backwardOf adapt a built-in kernel's figures to
// its three public methods.
func savedOf(f figs, err error) (gpumem.Bytes, error) {
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes(f.saved()), nil
}

func forwardOf(f figs, err error) (gpumem.Bytes, error) {
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes(f.fwd), nil
}

func backwardOf(f figs, err error) (gpumem.Bytes, error) {
	if err != nil {
		return 0, err
	}
	return gpumem.Bytes(f.bwd), nil
}

// roundUp returns x rounded up to a multiple of m (m > 0, x ≥ 0).
func roundUp(x, m int64) int64 { return (x + m - 1) / m * m }
