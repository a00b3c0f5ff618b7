package optimizer

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
)

// opaque hides the RunTransient method, to exercise the expanding path.
type opaque struct{ Optimizer }

// TransientRuns equals Transient of the expanded list, for every
// optimizer, through the method and through the expanding fallback, in
// every stepped dtype.
func TestTransientRuns(t *testing.T) {
	t.Parallel()
	for _, dt := range []gpumem.DType{gpumem.FP32, gpumem.BF16} {
		// A small Llama-like inventory: embeddings, then layers whose
		// tensors repeat (q/o, k/v, gate/up), then the head.
		rs := []Run{
			{tensor("model.embed_tokens.weight", dt, 1000, 64), 1},
			{tensor("model.layers.0.self_attn.q_proj.weight", dt, 64, 64), 1},
			{tensor("model.layers.0.self_attn.k_proj.weight", dt, 16, 64), 2},
			{tensor("model.layers.0.self_attn.o_proj.weight", dt, 64, 64), 1},
			{tensor("model.layers.0.mlp.gate_proj.weight", dt, 172, 64), 2},
			{tensor("model.layers.0.mlp.down_proj.weight", dt, 64, 172), 1},
			{tensor("model.layers.0.input_layernorm.weight", dt, 64), 2},
			{tensor("model.layers.1.self_attn.q_proj.weight", dt, 64, 64), 7},
			{tensor("model.norm.weight", dt, 64), 1},
			{tensor("lm_head.weight", dt, 1000, 64), 1},
		}
		var ts []gpumem.Tensor
		for _, r := range rs {
			for range r.Count {
				ts = append(ts, r.Tensor)
			}
		}
		for _, o := range allOptimizers() {
			want, err := o.Transient(ts)
			if err != nil {
				t.Fatalf("%v: %v", o, err)
			}
			if _, ok := o.(RunTransient); !ok {
				t.Errorf("%T does not implement RunTransient", o)
			}
			for _, via := range []Optimizer{o, opaque{o}} {
				got, err := TransientRuns(via, rs)
				if err != nil {
					t.Fatalf("%v: %v", o, err)
				}
				if got != want {
					t.Errorf("%v %v (%T): TransientRuns = %d, Transient = %d", o, dt, via, got, want)
				}
			}
		}
	}
}

func TestTransientRunsBadCount(t *testing.T) {
	t.Parallel()
	rs := []Run{{tensor("w", gpumem.FP32, 4, 4), 1}, {tensor("w", gpumem.FP32, 4, 4), 0}}
	for _, via := range []Optimizer{AdamW{}, opaque{AdamW{}}} {
		_, err := TransientRuns(via, rs)
		var fe *gpumem.FieldError
		if !errors.As(err, &fe) || fe.Field != "Run[1].Count" || !errors.Is(err, gpumem.ErrInvalid) {
			t.Errorf("%T: count 0: got %v, want a FieldError on Run[1].Count wrapping ErrInvalid", via, err)
		}
	}
}
