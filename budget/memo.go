package budget

import (
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/optimizer"
)

// A Model's figures that depend only on the model, the precision policy,
// the rank's view of a parallel layout and the optimizer — the bytes of
// its weights, gradients and master copies as a rank holds them, what
// the head's and embeddings' backward make, the optimizer's state and
// step — are computed once per Model, on the first Estimate that needs
// them, and kept: an Estimate then reads them instead of walking the
// tensor groups and asking the optimizer about each. They are the same
// functions of the same arguments, so the answers are unchanged
// (TestEstimateDifferential); a Model is immutable, so nothing goes
// stale.
//
// The tables are copied on write and read without a lock (atomic
// pointers), so that Estimate stays allocation-free and safe for
// concurrent use once the figures of its job are in; each holds at most
// memoLimit entries, beyond which figures are computed per call as
// before.
type memo struct {
	mu   sync.Mutex // serializes writers
	figs atomic.Pointer[[]figEntry]
	opts atomic.Pointer[[]optEntry]
}

const memoLimit = 64

// rankKey is what a rank's model figures depend on: the precision
// policy (the weights', gradients', stepped and compute dtypes) and the
// rank's view (hasV false: the whole model).
type rankKey struct {
	prec Precision
	hasV bool
	v    rankView
}

func keyOf(p Precision, v *rankView) rankKey {
	k := rankKey{prec: p}
	if v != nil {
		k.hasV, k.v = true, *v
	}
	return k
}

// sized is a byte count and the error computing it returned.
type sized struct {
	b   gpumem.Bytes
	err error
}

func sizedOf(b gpumem.Bytes, err error) sized { return sized{b, err} }

// rankFigures are a rank's model figures under a precision policy (the
// dtypes are Precision.dtypes': weights w, gradients g, compute c).
type rankFigures struct {
	weights        sized // weightsOf(w): every tensor as stored
	casts          sized // casts(c): autocast's copies of the floating-point tensors
	trainableCasts sized // trainableCasts(c)
	fp8            sized // Transformer Engine's fp8 copies of the trainable tensors
	grads          sized // weightsOf(g, trainable)
	master         sized // fp32 master copies of the trainable tensors
	kept           sized // weightsOf(w, below zero3Persistence): what ZeRO-3 keeps whole
	layerW, layerG sized // layerWeights(w), layerWeights(g)
	layerC         sized // layerWeights(c): one layer's autocast casts
	bucket         gpumem.Bytes
	// The step's composition (gradients in g).
	outsideEncoder, headGrads, embedGrads, tied gpumem.Bytes
	tiedDecoder                                 bool
	// outsideEncoderC is gradsOutsideEncoder(c): the casts of the
	// weights outside an encoder, released before the encoder's backward.
	outsideEncoderC gpumem.Bytes
}

func (m *Model) computeFigures(p Precision, v *rankView) rankFigures {
	wDT, gDT, _, cDT := p.dtypes()
	var f rankFigures
	f.weights = sizedOf(m.weightsOf(wDT, false, false, v, 0))
	f.casts = sizedOf(m.casts(cDT, v))
	f.trainableCasts = sizedOf(m.trainableCasts(cDT, v))
	f.fp8 = sizedOf(m.weightsOf(gpumem.FP8E4M3, true, false, v, 0))
	f.grads = sizedOf(m.weightsOf(gDT, true, false, v, 0))
	f.master = sizedOf(m.weightsOf(gpumem.FP32, true, false, v, 0))
	f.kept = sizedOf(m.weightsOf(wDT, false, false, v, zero3Persistence))
	f.layerW = sizedOf(m.layerWeights(wDT, v))
	f.layerG = sizedOf(m.layerWeights(gDT, v))
	f.bucket = m.bucket(gDT, v)
	f.outsideEncoder = m.gradsOutsideEncoder(gDT, v)
	f.outsideEncoderC = m.gradsOutsideEncoder(cDT, v)
	f.layerC = sizedOf(m.layerWeights(cDT, v))
	f.headGrads = m.headGrads(gDT, v)
	f.embedGrads = m.embedGrads(gDT, v)
	f.tied, f.tiedDecoder = m.tiedGrad(gDT, v)
	return f
}

type figEntry struct {
	key rankKey
	f   rankFigures
}

// figures returns the rank v's model figures under p, computed on the
// first call for (p, v).
func (m *Model) figures(p Precision, v *rankView) *rankFigures {
	k := keyOf(p, v)
	if m.memo == nil {
		f := m.computeFigures(p, v)
		return &f
	}
	if t := m.memo.figs.Load(); t != nil {
		for i := range *t {
			if (*t)[i].key == k {
				return &(*t)[i].f
			}
		}
	}
	f := m.computeFigures(p, v)
	m.memo.mu.Lock()
	defer m.memo.mu.Unlock()
	var old []figEntry
	if t := m.memo.figs.Load(); t != nil {
		old = *t
	}
	if len(old) < memoLimit {
		t := make([]figEntry, len(old), len(old)+1)
		copy(t, old)
		t = append(t, figEntry{k, f})
		m.memo.figs.Store(&t)
	}
	return &f
}

// optKey is what the optimizer's figures depend on: the optimizer (a
// value of a comparable type of package optimizer), the precision
// policy (stepped and gradient dtypes), the rank, and whether each
// parameter steps inside backward.
type optKey struct {
	opt   optimizer.Optimizer
	rank  rankKey
	inBwd bool
}

// optFigures are optimizer's and optimizerInBackward's answers and the
// first error they met.
type optFigures struct {
	state, step gpumem.Bytes
	paged       pagedFigures
	inBwd       inBwdFigures
	err         error
}

type optEntry struct {
	key optKey
	f   optFigures
}

// optimizerPkg is the package whose optimizers are kept: plain values,
// whose equality is equality of their settings.
var optimizerPkg = reflect.TypeOf(optimizer.AdamW{}).PkgPath()

// memoizable reports whether an optimizer's figures may be kept under
// its value: a type of package optimizer whose fields are all plain
// values (no pointer, slice, map, function, channel or interface that
// could change behind an equal value).
func memoizable(o optimizer.Optimizer) bool {
	t := reflect.TypeOf(o)
	return t != nil && t.PkgPath() == optimizerPkg && plainValue(t)
}

func plainValue(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	case reflect.Array:
		return plainValue(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if !plainValue(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

// optimizerFigures returns the optimizer's figures for j on the rank v
// with state stepped in sdt and gradients in gdt (Job.OptimizerInBackward
// chooses optimizerInBackward's), computed on the first call for the
// same optimizer, precision and rank, and records their error in a.
func (a *accumulator) optimizerFigures(j *Job, v *rankView, gdt, sdt gpumem.DType) *optFigures {
	m := &j.Model
	k := optKey{opt: j.Optimizer, rank: keyOf(j.Precision, v), inBwd: j.OptimizerInBackward}
	var f *optFigures
	if m.memo != nil {
		if t := m.memo.opts.Load(); t != nil {
			for i := range *t {
				// Only memoizable (comparable) optimizers are stored, so
				// an optimizer of another type compares unequal without
				// comparing values.
				if (*t)[i].key == k {
					f = &(*t)[i].f
					break
				}
			}
		}
	}
	if f == nil {
		f = computeOptimizer(j, v, gdt, sdt)
		if m.memo != nil && memoizable(j.Optimizer) {
			m.memo.storeOpt(k, *f)
		}
	}
	if f.err != nil {
		a.add(0, f.err)
	}
	return f
}

func computeOptimizer(j *Job, v *rankView, gdt, sdt gpumem.DType) *optFigures {
	var acc accumulator
	var f optFigures
	if j.OptimizerInBackward {
		f.state, f.inBwd, f.paged = acc.optimizerInBackward(j, gdt, sdt)
	} else {
		f.state, f.step, f.paged = acc.optimizer(j, v, sdt)
	}
	f.err = acc.err
	return &f
}

func (mm *memo) storeOpt(k optKey, f optFigures) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	var old []optEntry
	if t := mm.opts.Load(); t != nil {
		old = *t
	}
	if len(old) >= memoLimit {
		return
	}
	t := make([]optEntry, len(old), len(old)+1)
	copy(t, old)
	t = append(t, optEntry{k, f})
	mm.opts.Store(&t)
}
