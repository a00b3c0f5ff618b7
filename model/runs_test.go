package model_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// digits replaces the layer and expert indices of a tensor name.
var digits = regexp.MustCompile(`\.[0-9]+\.`)

func runKey(t gpumem.Tensor) string {
	n := t.Name
	for {
		m := digits.ReplaceAllString(n, ".#.")
		if m == n {
			break
		}
		n = m
	}
	return fmt.Sprintf("%s %v %s", n, t.Shape, t.DType)
}

// expandKeys counts the tensors of ts by runKey.
func tensorKeys(ts []gpumem.Tensor) map[string]int64 {
	m := map[string]int64{}
	for _, t := range ts {
		m[runKey(t)]++
	}
	return m
}

func runKeys(rs []model.Run) map[string]int64 {
	m := map[string]int64{}
	for _, r := range rs {
		m[runKey(r.Tensor)] += r.Count
	}
	return m
}

// TestRunsFoldTensors: for every catalog model, the folded inventory
// stands for exactly the tensors of the full one (same names but for
// indices, shapes, dtypes and counts), and a layer holds Count/Layers of
// each run.
func TestRunsFoldTensors(t *testing.T) {
	for _, s := range model.Catalog() {
		t.Run(s.Name, func(t *testing.T) {
			ts, rs := s.Tensors(), s.Runs()
			if len(rs) == 0 || len(ts) == 0 {
				t.Fatalf("%d tensors, %d runs", len(ts), len(rs))
			}
			want, got := tensorKeys(ts), runKeys(rs)
			if len(want) != len(got) {
				t.Fatalf("%d distinct tensors, %d in runs", len(want), len(got))
			}
			for k, n := range want {
				if got[k] != n {
					t.Errorf("%s: %d tensors, runs stand for %d", k, n, got[k])
				}
			}
			var elems int64
			for _, r := range rs {
				e, _ := r.Tensor.Elems()
				elems += e * r.Count
				if r.Layers < 1 || r.Count%r.Layers != 0 {
					t.Errorf("%s: count %d over %d layers", r.Tensor.Name, r.Count, r.Layers)
				}
			}
			if elems != s.Params() {
				t.Errorf("runs hold %d elements, Params %d", elems, s.Params())
			}
			if s.LM().Layers > 1 && len(rs) >= len(ts) {
				t.Errorf("%d runs for %d tensors: nothing folded", len(rs), len(ts))
			}
		})
	}
}

// TestRunsDeepStack: a 65,536-layer stack folds to one layer's tensors.
func TestRunsDeepStack(t *testing.T) {
	cfg := `{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"num_hidden_layers":65536,"vocab_size":1000}`
	s, err := model.FromHFConfig(strings.NewReader(cfg))
	if err != nil {
		t.Fatal(err)
	}
	rs := s.Runs()
	// embed, 9 per layer (q, k, v, o, gate, up, down, 2 norms), norm, head
	if len(rs) != 12 {
		t.Fatalf("%d runs, want 12", len(rs))
	}
	if r := rs[1]; r.Count != 65536 || r.Layers != 65536 || r.Tensor.Name != "model.layers.0.self_attn.q_proj.weight" {
		t.Errorf("first layer run = %s ×%d over %d layers", r.Tensor.Name, r.Count, r.Layers)
	}
}

// TestFinetuneRunsFold: the folded inventory of a fine-tuning setup
// (LoRA, QLoRA, FP8, frozen parts) stands for the same tensors, and the
// same trainable ones, as Tensors and Trainable list.
func TestFinetuneRunsFold(t *testing.T) {
	lookup := func(name string) model.Spec {
		s, ok := model.Lookup(name)
		if !ok {
			t.Fatalf("no catalog model %q", name)
		}
		return s
	}
	cases := map[string]model.Finetune{
		"full llama":      {Model: lookup("llama-3.2-1b")},
		"lora qwen moe":   {Model: lookup("qwen1.5-moe-a2.7b"), LoRA: model.LoRA{Rank: 8, Targets: []string{model.AllLinear}}},
		"qlora llama":     {Model: lookup("llama-2-7b"), LoRA: model.LoRA{Rank: 16}, Quant: gpumem.NF4, Blockwise: gpumem.Blockwise{Block: 64, Nested: true}},
		"fp8 deepseek":    {Model: lookup("deepseek-v2-lite"), Quant: gpumem.FP8E4M3, FP8Block: [2]int64{128, 128}, LoRA: model.LoRA{Rank: 4, Targets: []string{"q_proj"}}},
		"t5 lora":         {Model: lookup("t5-small"), LoRA: model.LoRA{Rank: 8}},
		"frozen vision":   {Model: lookup("llava-1.5-7b"), Train: model.FreezeParts("vision")},
		"layer target":    {Model: lookup("llama-3.2-1b"), LoRA: model.LoRA{Rank: 8, Targets: []string{"layers.3.self_attn.q_proj"}}},
		"last layer only": {Model: lookup("gpt2"), Train: func(t gpumem.Tensor) bool { return strings.Contains(t.Name, ".h.11.") }},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			ts, err := f.Tensors()
			if err != nil {
				t.Fatal(err)
			}
			tr, err := f.Trainable()
			if err != nil {
				t.Fatal(err)
			}
			all, trainable, err := f.Runs()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what string
				ts   []gpumem.Tensor
				rs   []model.Run
			}{{"all", ts, all}, {"trainable", tr, trainable}} {
				want, got := tensorKeys(c.ts), runKeys(c.rs)
				if len(want) != len(got) || len(c.ts) == 0 {
					t.Fatalf("%s: %d distinct tensors, %d in runs", c.what, len(want), len(got))
				}
				for k, n := range want {
					if got[k] != n {
						t.Errorf("%s: %s: %d tensors, runs stand for %d", c.what, k, n, got[k])
					}
				}
			}
		})
	}
}
