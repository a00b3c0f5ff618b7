package gpumem

import (
	"strconv"

	"github.com/gpumem/gpumem/internal/checked"
)

// Tensor is a named tensor shape with its storage format: one entry of a
// model's inventory, an optimizer state, or an activation.
//
// Shape is row-major, outermost dimension first, as PyTorch and
// safetensors write it (GGUF's ggml order is reversed on reading). An empty
// Shape is a scalar of one element.
type Tensor struct {
	Name  string
	Shape []int64
	DType DType
}

// Elems returns the number of elements, the product of Shape. It fails if
// a dimension is negative or the product overflows int64.
func (t Tensor) Elems() (int64, error) {
	for i, d := range t.Shape {
		if d < 0 {
			return 0, Errorf(t.field("Shape", i), d, ErrInvalid, "negative dimension")
		}
	}
	n, ok := checked.MulAll(t.Shape...)
	if !ok {
		return 0, Errorf(t.field("Shape", -1), t.Shape, ErrRange, "element count overflows int64")
	}
	return n, nil
}

// Bytes returns the storage of the tensor: [DType.Size] of its elements.
// For a block format (Q4_K, MXFP4, ...) every row, the innermost
// dimension, must be a whole number of blocks, as ggml requires; a tensor
// that breaks this is rejected rather than sized wrongly.
func (t Tensor) Bytes() (Bytes, error) {
	n, err := t.Elems()
	if err != nil {
		return 0, err
	}
	if !t.DType.Valid() {
		return 0, Errorf(t.field("DType", -1), t.DType, ErrInvalid, "not a storage format")
	}
	if be, _ := t.DType.Block(); be > 1 && dtypes[t.DType].gguf >= 0 && len(t.Shape) > 0 && n > 0 {
		// Packed sub-byte types (NF4, INT4, FP4, FP6) are flattened
		// before packing; ggml's block formats are row-wise.
		if row := t.Shape[len(t.Shape)-1]; row%be != 0 {
			return 0, Errorf(t.field("Shape", len(t.Shape)-1), row, ErrInvalid,
				"a row of %s must be a multiple of its %d-element block", t.DType, be)
		}
	}
	b, err := t.DType.Size(n)
	if err != nil {
		return 0, Errorf(t.field("Shape", -1), t.Shape, ErrRange, "%d elements of %s overflow int64 bytes", n, t.DType)
	}
	return b, nil
}

func (t Tensor) field(f string, i int) string {
	name := "Tensor"
	if t.Name != "" {
		name = "Tensor(" + t.Name + ")"
	}
	if i < 0 {
		return name + "." + f
	}
	return name + "." + f + "[" + strconv.Itoa(i) + "]"
}
