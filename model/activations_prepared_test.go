package model_test

import (
	"reflect"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestActivationModel checks that a prepared Spec answers as the Spec
// does, figures and errors, for every catalog model under workloads that
// take the layouts' branches (training and inference, checkpointing, a
// frozen base, tensor and context parallelism, an invalid workload), and
// that it allocates nothing with room in the buffer.
func TestActivationModel(t *testing.T) {
	workloads := []model.Workload{
		{Batch: 2, SeqLen: 256, EncoderLen: 128, DType: gpumem.BF16, Train: true},
		{Batch: 1, SeqLen: 1024, DType: gpumem.FP16, Checkpointing: model.FullCheckpointing, Train: true, Dropout: true},
		{Batch: 4, SeqLen: 512, DType: gpumem.FP32, Train: true, FrozenBase: model.FrozenBase{Rank: 16}},
		{Batch: 8, SeqLen: 128, DType: gpumem.BF16, Labels: true},
		{Batch: 2, SeqLen: 4096, DType: gpumem.BF16, Train: true, TensorParallel: 2, SequenceParallel: true, ContextParallel: 2},
		{Batch: 0, SeqLen: 256},
	}
	compared, models := 0, 0
	for _, s := range model.Catalog() {
		m, err := model.NewActivationModel(s)
		if want := s.CheckActivations(); !reflect.DeepEqual(err, want) {
			t.Fatalf("%s: NewActivationModel error %v, CheckActivations %v", s.Name, err, want)
		}
		if err != nil {
			continue
		}
		models++
		if !reflect.DeepEqual(m.Spec(), s) {
			t.Fatalf("%s: the prepared Spec differs", s.Name)
		}
		for i, w := range workloads {
			if s.Family == "llava" && w.Batch > 0 {
				w.Images = 1
			}
			want, werr := s.Activations(w)
			var buf [16]model.LayerActivations
			got, gerr := m.AppendActivations(buf[:0], w)
			if !reflect.DeepEqual(gerr, werr) {
				t.Errorf("%s, workload %d: error %v, the Spec's %v", s.Name, i, gerr, werr)
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, workload %d: the prepared Spec's figures differ:\n%+v\n%+v", s.Name, i, got, want)
			}
			if werr == nil {
				compared++
			}
		}
	}
	t.Logf("%d catalog models prepared, %d estimates compared", models, compared)
	if models < 20 || compared < 3*models {
		t.Errorf("only %d models prepared and %d estimates compared", models, compared)
	}
	s, _ := model.Lookup("llama-3-8b")
	m, err := model.NewActivationModel(s)
	if err != nil {
		t.Fatal(err)
	}
	var buf [16]model.LayerActivations
	w := workloads[0]
	if allocs := testing.AllocsPerRun(20, func() { _, _ = m.AppendActivations(buf[:0], w) }); allocs != 0 {
		t.Errorf("ActivationModel.AppendActivations with room allocates %v times", allocs)
	}
	bad := s
	bad.Heads = 0
	if _, err := model.NewActivationModel(bad); err == nil {
		t.Error("NewActivationModel takes a Spec with no heads")
	}
}
