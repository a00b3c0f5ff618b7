package budget

import (
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// FuzzEstimateFeatures combines the knobs of the training and serving
// stacks (loss, logits kept, gradients, the step in backward, activation
// offloading, the KV cache's storage and pages, load-only, quantized and
// task-head models): a consistent breakdown or an error naming a field,
// never a panic. (Allocations are checked by TestEstimateFeaturesAllocFree:
// the fuzzing engine's own goroutines allocate while a target runs.)
func FuzzEstimateFeatures(f *testing.F) {
	models := []Model{
		lookupModel(f, "llama-3.2-1b", nil),
		lookupModel(f, "llama-3.2-1b", func(ft *model.Finetune) {
			ft.LoRA = model.LoRA{Rank: 8}
			ft.Quant, ft.Blockwise = gpumem.NF4, gpumem.Blockwise{Block: 64, Nested: true}
		}),
		lookupModel(f, "llama-3.2-1b", func(ft *model.Finetune) {
			ft.Model.Head, ft.Model.Labels = model.HeadSeqCls, 2
		}),
		lookupModel(f, "bert-base", nil),
		lookupModel(f, "qwen1.5-moe-a2.7b", nil),
	}
	losses := []model.Loss{{}, {Kind: model.ChunkedLoss, Chunks: 8}, {Kind: model.FusedLinearLoss}, {Kind: model.CutCrossEntropyLoss}, {Kind: model.ChunkedLoss}}
	kvs := []gpumem.DType{gpumem.Invalid, gpumem.FP8E4M3, gpumem.INT8, gpumem.Q4_0, gpumem.NF4}
	opts := []optimizer.Optimizer{nil, optimizer.AdamW{}, optimizer.AdamW8bit{}, optimizer.SGD{Momentum: 0.9}}
	f.Add(uint8(0), uint8(1), uint8(0), uint8(1), uint8(0), 0, 0, false, false, uint8(0), 1, 512, 0)
	f.Add(uint8(1), uint8(1), uint8(1), uint8(1), uint8(0), 0, 0, true, false, uint8(3), 2, 1024, 0)
	f.Add(uint8(0), uint8(3), uint8(0), uint8(0), uint8(1), 0, 16, false, false, uint8(0), 4, 256, 64)
	f.Add(uint8(4), uint8(2), uint8(0), uint8(0), uint8(0), 1, 0, false, false, uint8(0), 1, 128, 0)
	f.Add(uint8(0), uint8(4), uint8(0), uint8(0), uint8(0), 0, 0, false, false, uint8(0), 0, 0, 0)
	f.Fuzz(func(t *testing.T, mi, mode, loss, opt, kv uint8, keep, block int, inBwd, offload bool, grads uint8, batch, seq, gen int) {
		j := Job{Model: models[int(mi)%len(models)], Mode: Mode(mode % 5), Precision: BF16Mixed, Loss: losses[int(loss)%len(losses)],
			Optimizer: opts[int(opt)%len(opts)], KVDType: kvs[int(kv)%len(kvs)], LogitsToKeep: keep, KVBlock: block,
			OptimizerInBackward: inBwd, OffloadActivations: offload, Gradients: Gradients(grads % 4),
			Checkpointing: model.FullCheckpointing, Attention: model.Flash, Batch: batch, SeqLen: seq, Generate: gen}
		b, ok := fuzzEstimate(t, j)
		if !ok {
			return
		}
		for name, v := range map[string]gpumem.Bytes{"weights": b.Weights, "gradients": b.Gradients, "optimizer": b.Optimizer,
			"activations": b.Activations, "logits": b.Logits, "kv": b.KVCache, "workspace": b.Workspace} {
			if v < 0 {
				t.Fatalf("%s = %d in %+v", name, v, b)
			}
		}
	})
}

// TestEstimateFeaturesAllocFree: Estimate allocates nothing with the
// knobs of the training and serving stacks set.
func TestEstimateFeaturesAllocFree(t *testing.T) {
	lookup := func(name string) model.Spec {
		s, ok := model.Lookup(name)
		if !ok {
			t.Fatalf("no catalog model %q", name)
		}
		return s
	}
	llama := lookupModel(t, "llama-3.2-1b", nil)
	qlora, err := NewModel(model.Finetune{Model: lookup("llama-3.2-1b"), LoRA: model.LoRA{Rank: 8},
		Quant: gpumem.NF4, Blockwise: gpumem.Blockwise{Block: 64, Nested: true}})
	if err != nil {
		t.Fatal(err)
	}
	bert := lookupModel(t, "bert-base", nil)
	train := Job{Model: llama, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Batch: 2, SeqLen: 1024,
		Attention: model.Flash, Checkpointing: model.FullCheckpointing}
	for name, j := range map[string]Job{
		"chunked loss":       func() Job { j := train; j.Loss = model.Loss{Kind: model.ChunkedLoss, Chunks: 8}; return j }(),
		"liger loss":         func() Job { j := train; j.Loss = model.Loss{Kind: model.FusedLinearLoss}; return j }(),
		"step in backward":   func() Job { j := train; j.OptimizerInBackward = true; return j }(),
		"offload, bert, sgd": {Model: bert, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.SGD{Momentum: 0.9}, OffloadActivations: true, Checkpointing: model.FullCheckpointing, Batch: 2, SeqLen: 512},
		"frozen":             func() Job { j := train; j.Optimizer, j.Gradients = nil, InputGradients; return j }(),
		"qlora":              func() Job { j := train; j.Model = qlora; return j }(),
		"fp8 paged kv":       {Model: llama, Mode: Generation, Precision: BF16, Batch: 4, SeqLen: 1000, Generate: 100, KVDType: gpumem.FP8E4M3, KVBlock: 16},
		"logits kept":        {Model: llama, Mode: Prefill, Precision: BF16, Batch: 4, SeqLen: 1000, LogitsToKeep: 1},
		"load":               {Model: qlora, Mode: Load, Precision: BF16},
	} {
		if _, err := Estimate(j); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if n := testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }); n != 0 {
			t.Errorf("%s: %v allocations per Estimate", name, n)
		}
	}
}
