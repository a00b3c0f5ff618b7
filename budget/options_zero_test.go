package budget

import (
	"math"
	"reflect"
	"testing"
)

// optionValues returns values for a field of kind k: zero-like and not,
// -0 and NaN for floats.
func optionValues(t reflect.Type) []reflect.Value {
	var out []reflect.Value
	add := func(f func(v reflect.Value)) {
		v := reflect.New(t).Elem()
		f(v)
		out = append(out, v)
	}
	switch t.Kind() {
	case reflect.Bool:
		add(func(v reflect.Value) { v.SetBool(true) })
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		add(func(v reflect.Value) { v.SetInt(1) })
		add(func(v reflect.Value) { v.SetInt(-1) })
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		add(func(v reflect.Value) { v.SetUint(1) })
	case reflect.Float32, reflect.Float64:
		for _, x := range []float64{1, -1, math.Copysign(0, -1), math.NaN(), math.Inf(-1), 5e-324} {
			add(func(v reflect.Value) { v.SetFloat(x) })
		}
	case reflect.Array:
		for i := 0; i < t.Len(); i++ {
			for _, e := range optionValues(t.Elem()) {
				add(func(v reflect.Value) { v.Index(i).Set(e) })
			}
		}
	default:
		panic("optionValues: no values for kind " + t.Kind().String())
	}
	return out
}

// TestOptionsIsZero checks the options' isZero against Go's == with the
// zero struct, setting each field in turn (so a field added to the struct
// and not to isZero fails it).
func TestOptionsIsZero(t *testing.T) {
	check := func(name string, typ reflect.Type, isZero func(reflect.Value) bool) {
		zero := reflect.New(typ).Elem()
		if !isZero(zero) {
			t.Errorf("%s{}.isZero() = false", name)
		}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			for _, x := range optionValues(f.Type) {
				v := reflect.New(typ).Elem()
				v.Field(i).Set(x)
				want := v.Interface() == zero.Interface()
				if got := isZero(v); got != want {
					t.Errorf("%s with %s = %v: isZero %v, == gives %v", name, f.Name, x, got, want)
				}
			}
		}
	}
	check("LlamaCppOptions", reflect.TypeOf(LlamaCppOptions{}), func(v reflect.Value) bool {
		o := v.Interface().(LlamaCppOptions)
		return o.isZero()
	})
	check("VLLMOptions", reflect.TypeOf(VLLMOptions{}), func(v reflect.Value) bool {
		o := v.Interface().(VLLMOptions)
		return o.isZero()
	})
}
