package budget

// How llama.cpp stores the weights: the bytes of a group of tensors in the
// GGUF file and their aligned spans.

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// storedBytes is the bytes of g's tensors as the model stores them (a
// quantized base in its type, the rest in the spec's dtype), as an
// engine loads a checkpoint; what names the figure in an overflow error.
func (m *Model) storedBytes(g *group, what string) (int64, error) {
	d := g.fixed
	if d == gpumem.Invalid {
		d = m.spec.DType
	}
	b, err := d.Size(g.elems)
	if err != nil {
		return 0, err
	}
	total, ok := checked.Mul(int64(b), g.count)
	if !ok {
		return 0, errOverflow(what)
	}
	return total, nil
}

// ggufAlignment is GGUF_DEFAULT_ALIGNMENT (ggml/include/gguf.h): tensor
// data offsets are multiples of it unless general.alignment says
// otherwise.
const ggufAlignment = 32

// ggufSpan is the bytes of a GGUF file's data section from the start of
// the first tensor keep selects to the end of the last, the tensors laid
// out in inv's order, each at an offset aligned to align (gguf's
// writer). It is zero when keep selects none.
func ggufSpan(inv []gpumem.Tensor, align int64, keep func(*gpumem.Tensor) bool) (gpumem.Bytes, error) {
	var off, first, last int64 = 0, -1, 0
	for i := range inv {
		t := &inv[i]
		b, err := t.Bytes()
		if err != nil {
			return 0, err
		}
		if keep(t) {
			if first < 0 {
				first = off
			}
			last = off + int64(b)
		}
		end, ok := checked.Add(off, int64(b))
		if !ok {
			return 0, errOverflow("GGUF data")
		}
		off = (end + align - 1) / align * align
	}
	if first < 0 {
		return 0, nil
	}
	return gpumem.Bytes(last - first), nil
}
