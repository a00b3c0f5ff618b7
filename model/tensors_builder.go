package model

// The tensor builder: how a family's build function names and appends
// weights, norms and repeated layers.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// builder collects (or only counts) the tensors of a Spec. Counting mode
// keeps no names, which makes Params cheap for large MoE models. Folding
// mode (and counting, which implies it) builds one layer of each kind
// and one expert of each block, each tensor standing for mult of them,
// so that its cost follows the distinct layer shapes, not the layer
// count.
type builder struct {
	count   bool
	fold    bool
	limit   int64 // maximum tensors; 0 means no limit
	prefix  string
	dt      gpumem.DType
	out     []gpumem.Tensor
	runs    []Run // the output of folding mode
	mult    int64 // tensors each added one stands for (folding); 0 means 1
	layers  int64 // of mult, the layers of a stack (folding); 0 means 1
	n       int64 // elements so far
	tensors int64
	err     error
}

var errTooMany = errors.New("too many tensors")

func (b *builder) addT(dt gpumem.DType, name string, shape ...int64) {
	b.addTP(dt, "", name, shape...)
}

// addTP adds the tensor prefix+name; the name is only built when
// collecting, so that counting allocates little.
func (b *builder) addTP(dt gpumem.DType, prefix, name string, shape ...int64) {
	if b.err != nil {
		return
	}
	e, ok := checked.MulAll(shape...)
	if !ok {
		b.err = fmt.Errorf("tensor %s%s%s of shape %v overflows int64 elements", b.prefix, prefix, name, slices.Clone(shape))
		return
	}
	m := max(b.mult, 1)
	if e, ok = checked.Mul(e, m); !ok {
		b.err = fmt.Errorf("parameter count overflows int64 at tensor %s%s%s", b.prefix, prefix, name)
		return
	}
	if b.n, ok = checked.Add(b.n, e); !ok {
		b.err = fmt.Errorf("parameter count overflows int64 at tensor %s%s%s", b.prefix, prefix, name)
		return
	}
	if b.tensors, ok = checked.Add(b.tensors, m); !ok || (b.limit > 0 && b.tensors > b.limit) {
		b.err = fmt.Errorf("%w: more than %d", errTooMany, b.limit)
		return
	}
	switch {
	case b.count:
	case b.fold:
		b.runs = append(b.runs, Run{Tensor: gpumem.Tensor{Name: b.prefix + prefix + name, Shape: slices.Clone(shape), DType: dt},
			Count: m, Layers: max(b.layers, 1)})
	default:
		b.out = append(b.out, gpumem.Tensor{Name: b.prefix + prefix + name, Shape: slices.Clone(shape), DType: dt})
	}
}

func (b *builder) add(name string, shape ...int64) { b.addTP(b.dt, "", name, shape...) }

func (b *builder) addP(prefix, name string, shape ...int64) { b.addTP(b.dt, prefix, name, shape...) }

// linear adds an nn.Linear(in, out): weight [out, in] and optionally
// bias [out].
func (b *builder) linear(name string, out, in int64, bias bool) { b.linearP("", name, out, in, bias) }

// linearP is linear for the module prefix+name; names are built only
// when collecting.
func (b *builder) linearP(prefix, name string, out, in int64, bias bool) {
	if b.count {
		b.addTP(b.dt, "", "", out, in)
		if bias {
			b.addTP(b.dt, "", "", out)
		}
		return
	}
	b.addP(prefix, name+".weight", out, in)
	if bias {
		b.addP(prefix, name+".bias", out)
	}
}

// norm adds a norm over dim: weight, and bias for LayerNorm.
func (b *builder) norm(name string, dim int64, kind Norm) { b.normP("", name, dim, kind) }

// normP is norm for the module prefix+name.
func (b *builder) normP(prefix, name string, dim int64, kind Norm) {
	if b.count {
		b.addTP(b.dt, "", "", dim)
		if kind == LayerNorm {
			b.addTP(b.dt, "", "", dim)
		}
		return
	}
	b.addP(prefix, name+".weight", dim)
	if kind == LayerNorm {
		b.addP(prefix, name+".bias", dim)
	}
}

// repeat adds fn(i) for i in [0, n). Counting and folding run fn once,
// each tensor standing for n, since the repeated blocks (experts) are
// identical but for the index in their names.
func (b *builder) repeat(n int64, fn func(i int64)) {
	if !(b.count || b.fold) || n <= 1 {
		for i := int64(0); i < n && b.err == nil; i++ {
			fn(i)
		}
		return
	}
	saved := b.mult
	m, ok := checked.Mul(max(saved, 1), n)
	if !ok {
		b.err = errors.New("parameter count overflows int64 in repeated blocks")
		return
	}
	b.mult = m
	fn(0)
	b.mult = saved
}

// stack adds the n layers of a stack, fn(i) for layer i. Counting and
// folding build one layer of each kind (class(i), nil: all alike) at
// its first index, each tensor standing for the layers of that kind;
// only class is evaluated per layer.
func (b *builder) stack(n int64, class func(i int64) int, fn func(i int64)) {
	if !(b.count || b.fold) || n <= 1 {
		for i := int64(0); i < n && b.err == nil; i++ {
			fn(i)
		}
		return
	}
	type kind struct{ first, count int64 }
	var kinds []kind // in order of first appearance
	if class == nil {
		kinds = []kind{{0, n}}
	} else {
		var index [4]int // class → kinds index + 1; classes are small
		for i := int64(0); i < n; i++ {
			c := class(i)
			if index[c] == 0 {
				kinds = append(kinds, kind{i, 0})
				index[c] = len(kinds)
			}
			kinds[index[c]-1].count++
		}
	}
	savedM, savedL := b.mult, b.layers
	for _, k := range kinds {
		m, ok := checked.Mul(max(savedM, 1), k.count)
		if !ok {
			b.err = errors.New("parameter count overflows int64 in repeated layers")
			break
		}
		b.mult, b.layers = m, k.count
		fn(k.first)
		if b.err != nil {
			break
		}
	}
	b.mult, b.layers = savedM, savedL
}

func (b *builder) sub(prefix string, s *Spec) {
	saved, dt := b.prefix, b.dt
	b.prefix += prefix
	s.build(b)
	b.prefix, b.dt = saved, dt
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
