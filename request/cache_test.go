package request

import (
	"reflect"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/model"
)

// TestModelKeyCoversFinetune fails when model.Finetune or model.LoRA
// gains a field: JobFor may then fill it, and modelKey must say it.
func TestModelKeyCoversFinetune(t *testing.T) {
	fields := func(v any) []string {
		var names []string
		t := reflect.TypeOf(v)
		for i := range t.NumField() {
			names = append(names, t.Field(i).Name)
		}
		return names
	}
	for _, c := range []struct {
		v    any
		want []string
	}{
		{model.Finetune{}, []string{"Model", "LoRA", "Quant", "QuantizeHead", "Method", "GroupSize", "Unquantized", "ComputeDType", "Unfused",
			"KeepsInputs", "QuantFrom", "Blockwise", "FP8Block", "Train"}},
		{model.LoRA{}, []string{"Rank", "Targets", "DType"}},
	} {
		if got := fields(c.v); !slices.Equal(got, c.want) {
			t.Errorf("%T has fields %v; modelKey covers %v: add the new ones to modelKey and modelCache.prepare", c.v, got, c.want)
		}
	}
}
