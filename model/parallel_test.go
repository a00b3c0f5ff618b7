package model_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// korthikanti is one row of Table 3 of Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models" (MLSys 2023,
// arXiv 2205.05198): the GPT-style models of their evaluation, with
// s = 2048 and v = 51200 (§5).
type korthikanti struct {
	name           string
	heads, hidden  int64
	layers, tp, pp int64
	micro          int64
}

var korthikantiTable3 = []korthikanti{
	{"22B", 64, 6144, 48, 8, 1, 4},
	{"175B (GPT-3)", 96, 12288, 96, 8, 8, 1},
	{"530B (MT-NLG)", 128, 20480, 105, 8, 35, 1},
	{"1T", 160, 25600, 128, 8, 64, 1},
}

// gptStyle is the Megatron GPT layer the paper counts: pre-LayerNorm,
// fused GeLU MLP of 4h, dropout after attention probabilities and after
// each sub-block, learned positions, 16-bit activations.
func gptStyle(t *testing.T, k korthikanti) model.Spec {
	t.Helper()
	cfg := fmt.Sprintf(`{"model_type": "gpt2", "n_embd": %d, "n_head": %d, "n_layer": %d,
		"vocab_size": 51200, "n_positions": 2048, "activation_function": "gelu", "torch_dtype": "bfloat16"}`,
		k.hidden, k.heads, k.layers)
	s, err := model.FromHFConfig(strings.NewReader(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKorthikantiTable2 checks the per-op model against Table 2 of
// Korthikanti et al. (activations per transformer layer, bytes):
//
//	tensor parallel                          sbh(10 + 24/t + 5as/(ht))
//	tensor + sequence parallel               sbh(34/t + 5as/(ht))
//	tensor parallel + selective recompute    sbh(10 + 24/t)
//	tensor + sequence + selective recompute  sbh(34/t)
//	full recomputation                       sbh·2 (sbh·2/t with SP)
//
// for the four models of their Table 3. The paper counts "only the main
// contributors" (§4.1); the per-op model also counts the LayerNorms'
// fp32 mean and rstd (8 bytes per row, two norms: 16·sb, /t under SP)
// and GPT-2's 0-dim attention scale (2 bytes, dropped with the
// attention core under selective recomputation). Beyond those two named
// terms the figures must agree to the byte.
func TestKorthikantiTable2(t *testing.T) {
	const s, e = 2048, 2
	for _, k := range korthikantiTable3 {
		spec := gptStyle(t, k)
		b, h, a, tp := k.micro, k.hidden, k.heads, k.tp
		sbh := s * b * h
		scores := 5 * a * s * s * b // 5as²b
		for _, c := range []struct {
			name     string
			sp       bool
			policy   model.Checkpointing
			t        int64
			want     int64
			lnRows   int64 // rows of LayerNorm statistics on the rank
			attScale int64
		}{
			{"no parallelism", false, model.NoCheckpointing, 1, 34*sbh + scores, s * b, e},
			{"tensor parallel", false, model.NoCheckpointing, tp, 10*sbh + 24*sbh/tp + scores/tp, s * b, e},
			{"tensor+sequence parallel", true, model.NoCheckpointing, tp, 34*sbh/tp + scores/tp, s * b / tp, e},
			{"tensor parallel+selective", false, model.SelectiveCheckpointing, tp, 10*sbh + 24*sbh/tp, s * b, 0},
			{"tensor+sequence+selective", true, model.SelectiveCheckpointing, tp, 34 * sbh / tp, s * b / tp, 0},
			{"full recomputation", false, model.FullCheckpointing, tp, 2 * sbh, 0, 0},
			{"full recomputation+sequence", true, model.FullCheckpointing, tp, 2 * sbh / tp, 0, 0},
		} {
			w := model.Workload{Batch: b, SeqLen: s, DType: gpumem.BF16, Dropout: true, Train: true,
				TensorParallel: c.t, SequenceParallel: c.sp, Checkpointing: c.policy}
			act, err := spec.Activations(w)
			if err != nil {
				t.Fatalf("%s %s: %v", k.name, c.name, err)
			}
			if len(act.Layers) != 1 || act.Layers[0].Count != k.layers {
				t.Fatalf("%s %s: layers %+v", k.name, c.name, act.Layers)
			}
			got := int64(act.Layers[0].Kept) - 16*c.lnRows - c.attScale
			if got != c.want {
				t.Errorf("%s, %s: per-layer %d bytes beyond the named extras, Korthikanti Table 2 gives %d (%+d)",
					k.name, c.name, got, c.want, got-c.want)
			}
		}
	}
}

// TestKorthikantiSavings checks §5's "selective activation recomputation
// ... can save 70% and 65% of the required memory for activations for
// the GPT-3 and MT-NLG models": 5as/h over 34 + 5as/h.
func TestKorthikantiSavings(t *testing.T) {
	for _, c := range []struct {
		k    korthikanti
		want float64
	}{{korthikantiTable3[1], 0.70}, {korthikantiTable3[2], 0.65}} {
		spec := gptStyle(t, c.k)
		w := model.Workload{Batch: 1, SeqLen: 2048, DType: gpumem.BF16, Dropout: true, Train: true,
			TensorParallel: c.k.tp, SequenceParallel: true}
		full, err := spec.Activations(w)
		if err != nil {
			t.Fatal(err)
		}
		w.Checkpointing = model.SelectiveCheckpointing
		sel, err := spec.Activations(w)
		if err != nil {
			t.Fatal(err)
		}
		saved := 1 - float64(sel.Layers[0].Kept)/float64(full.Layers[0].Kept)
		if saved < c.want-0.005 || saved > c.want+0.01 {
			t.Errorf("%s: selective recomputation saves %.3f of the layer's activations, the paper %.2f", c.k.name, saved, c.want)
		}
	}
}

// TestTensorParallelHead checks the vocab-parallel head: logits and loss
// tensors are 1/t per rank; token ids are not split.
func TestTensorParallelHead(t *testing.T) {
	spec := gptStyle(t, korthikantiTable3[0])
	w := model.Workload{Batch: 2, SeqLen: 2048, DType: gpumem.BF16, Train: true}
	one, err := spec.Activations(w)
	if err != nil {
		t.Fatal(err)
	}
	w.TensorParallel = 8
	eight, err := spec.Activations(w)
	if err != nil {
		t.Fatal(err)
	}
	if one.Logits != 8*eight.Logits || one.LossGrad != 8*eight.LossGrad || one.LogitsFP32 != 8*eight.LogitsFP32 {
		t.Errorf("logits %v→%v, loss grad %v→%v: want 1/8", one.Logits, eight.Logits, one.LossGrad, eight.LossGrad)
	}
	if one.TokenIDs != eight.TokenIDs {
		t.Errorf("token ids %v→%v: not split by tensor parallelism", one.TokenIDs, eight.TokenIDs)
	}
}

// TestGQAUnderTensorParallel: with fewer KV heads than ranks each rank
// keeps one KV head (Megatron replicates them), so Flash's saved k and v
// do not shrink below one head.
func TestGQAUnderTensorParallel(t *testing.T) {
	spec, ok := model.Lookup("llama-2-70b") // 64 heads, 8 KV heads
	if !ok {
		t.Fatal("llama-2-70b not in the catalog")
	}
	at := func(tp int64) model.LayerActivations {
		a, err := spec.Activations(model.Workload{Batch: 1, SeqLen: 4096, DType: gpumem.BF16, Train: true, Attention: model.Flash, TensorParallel: tp})
		if err != nil {
			t.Fatal(err)
		}
		return a.Layers[0]
	}
	l8, l16 := at(8), at(16)
	// From 8 to 16 ranks: q, out and the MLP halve; k and v (one head each
	// at both degrees) do not; the replicated norms and inputs do not.
	const s, e, d = 4096, 2, 128
	kv := int64(2 * e * s * d) // k and v of one head
	if diff := int64(l8.Saved - l16.Saved); diff <= 0 {
		t.Fatalf("16 ranks save %v ≥ 8 ranks %v", l16.Saved, l8.Saved)
	}
	// Check against the split of the tensors that do shrink: q (64/t heads),
	// out, the lse and the MLP (4 tensors of 28672/t).
	shrink := func(tp int64) int64 {
		return e*s*(64/tp)*d*2 + 4*s*(64/tp) + 4*e*s*(28672/tp)
	}
	if got, want := int64(l8.Saved-l16.Saved), shrink(8)-shrink(16); got != want {
		t.Errorf("8→16 ranks saves %d bytes per layer, want %d (k, v of %d bytes replicated)", got, want, kv)
	}
}

func TestParallelWorkloadErrors(t *testing.T) {
	spec, _ := model.Lookup("llama-2-7b")
	for _, c := range []struct {
		w     model.Workload
		field string
		kind  error
	}{
		{model.Workload{Batch: 1, SeqLen: 8, TensorParallel: 3, Train: true}, "Workload.TensorParallel", gpumem.ErrInvalid},
		{model.Workload{Batch: 1, SeqLen: 8, TensorParallel: -1, Train: true}, "Workload.TensorParallel", gpumem.ErrInvalid},
		{model.Workload{Batch: 1, SeqLen: 8, SequenceParallel: true, Train: true}, "Workload.SequenceParallel", gpumem.ErrInvalid},
		{model.Workload{Batch: 1, SeqLen: 8, ContextParallel: 2, Train: true}, "Workload.ContextParallel", gpumem.ErrUnsupported},
		{model.Workload{Batch: 1, SeqLen: 9, ContextParallel: 2, Attention: model.Flash, Train: true}, "Workload.ContextParallel", gpumem.ErrInvalid},
	} {
		_, err := spec.Activations(c.w)
		var fe *gpumem.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, c.kind) {
			t.Errorf("%+v: got %v, want a %v error on %s", c.w, err, c.kind, c.field)
		}
	}
}

// TestContextParallel: with flash attention a rank holds SeqLen/cp tokens
// of every per-token tensor.
func TestContextParallel(t *testing.T) {
	spec, _ := model.Lookup("llama-2-7b")
	w := model.Workload{Batch: 1, SeqLen: 8192, DType: gpumem.BF16, Train: true, Attention: model.Flash}
	short := w
	short.SeqLen = 2048
	want, err := spec.Activations(short)
	if err != nil {
		t.Fatal(err)
	}
	w.ContextParallel = 4
	got, err := spec.Activations(w)
	if err != nil {
		t.Fatal(err)
	}
	if got.Total() != want.Total() {
		t.Errorf("cp=4 over 8192 tokens: %v, want the 2048-token figure %v", got.Total(), want.Total())
	}
}
