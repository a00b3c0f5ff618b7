package budget

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// deepConfig is a config.json of 65,536 small layers: 190 bytes that once
// cost a service two seconds and 1.3 GB to prepare.
const deepConfig = `{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"num_hidden_layers":65536,"vocab_size":1000}`

// TestNewModelCostFollowsLayerKinds: preparing a model costs its distinct
// layer kinds, not its layer count. The 65,536-layer model allocates as
// little as a 2-layer one of the same shape (it allocated 12 million
// times before layers were folded).
func TestNewModelCostFollowsLayerKinds(t *testing.T) {
	allocs := func(layers string) float64 {
		s, err := model.FromHFConfig(strings.NewReader(strings.Replace(deepConfig, "65536", layers, 1)))
		if err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(3, func() {
			if _, err := ModelOf(s); err != nil {
				t.Fatal(err)
			}
		})
	}
	deep, shallow := allocs("65536"), allocs("2")
	if deep > shallow+10 {
		t.Errorf("NewModel allocates %.0f times for 65,536 layers, %.0f for 2", deep, shallow)
	}
}

// TestNewModelFoldedEqualsFull: for every catalog model and the common
// fine-tuning setups, the Model prepared from the folded inventory
// estimates exactly what the Model prepared from every tensor does
// (forced by a Train predicate, which disables folding), in training and
// inference, on one GPU and over a pipeline-, tensor- and
// expert-parallel layout.
func TestNewModelFoldedEqualsFull(t *testing.T) {
	setups := map[string]func(s model.Spec) (folded, full model.Finetune){
		"full": func(s model.Spec) (model.Finetune, model.Finetune) {
			return model.Finetune{Model: s}, model.Finetune{Model: s, Train: func(gpumem.Tensor) bool { return true }}
		},
		"qlora": func(s model.Spec) (model.Finetune, model.Finetune) {
			f := model.Finetune{Model: s, LoRA: model.LoRA{Rank: 8, Targets: []string{model.AllLinear}}, Quant: gpumem.NF4,
				Blockwise: gpumem.Blockwise{Block: 64, Nested: true}}
			g := f
			g.Train = func(gpumem.Tensor) bool { return false }
			return f, g
		},
	}
	for _, s := range model.Catalog() {
		for name, setup := range setups {
			folded, full := setup(s)
			a, errA := NewModel(folded)
			b, errB := NewModel(full)
			if (errA == nil) != (errB == nil) {
				t.Errorf("%s %s: folded error %v, full error %v", s.Name, name, errA, errB)
				continue
			}
			if errA != nil {
				continue // QLoRA of a model with no linear layer to adapt
			}
			if diff := cmp.Diff(b.groups, a.groups, cmp.AllowUnexported(group{})); diff != "" {
				t.Errorf("%s %s: groups differ (-full +folded):\n%s", s.Name, name, diff)
			}
			if a.layerElems != b.layerElems || a.params != b.params || a.tensors != b.tensors ||
				a.trainableParams != b.trainableParams || a.trainableTensors != b.trainableTensors {
				t.Errorf("%s %s: folded %d/%d params, %d/%d tensors, layer %d; full %d/%d, %d/%d, %d", s.Name, name,
					a.params, a.trainableParams, a.tensors, a.trainableTensors, a.layerElems,
					b.params, b.trainableParams, b.tensors, b.trainableTensors, b.layerElems)
			}
			for _, mode := range []Mode{Training, Prefill, Generation} {
				for _, par := range []Parallel{{}, {DataParallel: 2, Stage: 3}, {TensorParallel: 2, PipelineParallel: 2}} {
					ja := Job{Model: a, Mode: mode, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Batch: 1, SeqLen: 128, Generate: 16, Parallel: par}
					jb := ja
					jb.Model = b
					ea, errA := Estimate(ja)
					eb, errB := Estimate(jb)
					if (errA == nil) != (errB == nil) || (errA == nil && !cmp.Equal(ea, eb)) {
						t.Errorf("%s %s %v %+v: folded %v (%v), full %v (%v)", s.Name, name, mode, par, ea.Device(), errA, eb.Device(), errB)
					}
				}
			}
		}
	}
}

// BenchmarkNewModelDeep prepares the 65,536-layer model of deepConfig
// and estimates one training step.
func BenchmarkNewModelDeep(b *testing.B) {
	s, err := model.FromHFConfig(strings.NewReader(deepConfig))
	if err != nil {
		b.Fatal(err)
	}
	benchmarkNewModel(b, s)
}

// BenchmarkNewModelDeepSeekV3 prepares DeepSeek-V3 (61 layers × 256
// experts, about 92,000 tensors) and estimates one training step.
func BenchmarkNewModelDeepSeekV3(b *testing.B) {
	s, ok := model.Lookup("deepseek-v3")
	if !ok {
		b.Fatal("no deepseek-v3 in the catalog")
	}
	benchmarkNewModel(b, s)
}

func benchmarkNewModel(b *testing.B, s model.Spec) {
	b.ReportAllocs()
	for b.Loop() {
		m, err := ModelOf(s)
		if err != nil {
			b.Fatal(err)
		}
		j := Job{Model: m, Mode: Training, Batch: 1, SeqLen: 512, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}}
		if _, err := Estimate(j); err != nil {
			b.Fatal(err)
		}
	}
}
