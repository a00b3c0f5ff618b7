package budget

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// OffloadOptimizer moves exactly the optimizer state and master copy to
// the host and takes them (and the step's temporaries) off the GPU peak.
func TestEstimateOffloadOptimizer(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := trainJob(m)
	j.Precision = BF16Master
	on, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	j.Offload = OffloadOptimizer
	off, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	// The state without the step transient: read it at a phase other than
	// the step, or from the fused optimizer's zero transient.
	if off.Optimizer != 0 || off.Master != 0 {
		t.Errorf("offloaded: optimizer %v, master %v on the GPU, want 0", off.Optimizer, off.Master)
	}
	state := on.Master + on.Optimizer
	if on.Phase == Step {
		// on.Optimizer includes the step transient; the host holds the state only.
		if off.Host <= 0 || off.Host > state {
			t.Errorf("host %v, want in (0, %v]", off.Host, state)
		}
	} else if off.Host != state {
		t.Errorf("host %v, want master + optimizer = %v", off.Host, state)
	}
	if off.Allocated() >= on.Allocated() {
		t.Errorf("offloading the optimizer did not lower the peak: %v → %v", on.Allocated(), off.Allocated())
	}
	if off.Device() != componentSum(off) {
		t.Errorf("Device %v != sum of the components %v: Host must not count", off.Device(), componentSum(off))
	}
}

// OffloadCopies keeps only the largest frozen copy on the GPU.
func TestEstimateOffloadCopies(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "qwen2.5-0.5b", nil)
	big := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.Train = func(gpumem.Tensor) bool { return false } })
	small := lookupModel(t, "qwen2.5-0.5b", func(f *model.Finetune) { f.Train = func(gpumem.Tensor) bool { return false } })
	j := trainJob(m)
	j.Copies = []Copy{{Name: "teacher", Model: big}, {Name: "reference", Model: small}}
	all, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	j.Offload = OffloadCopies
	one, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	bigW, err := big.weights(gpumem.BF16, false)
	if err != nil {
		t.Fatal(err)
	}
	if one.ExtraModels != bigW {
		t.Errorf("on-GPU copies %v, want the largest %v", one.ExtraModels, bigW)
	}
	if one.Host != all.ExtraModels {
		t.Errorf("host %v, want every copy %v", one.Host, all.ExtraModels)
	}
	if got := all.Allocated() - one.Allocated(); got != all.ExtraModels-bigW {
		t.Errorf("saving %v, want the smaller copy %v", got, all.ExtraModels-bigW)
	}
}

// HeadChunk divides eager attention's score transient in inference:
// the 32k-token block attention's 32 heads in chunks of 8 hold a quarter of the scores.
func TestEstimateHeadChunk(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-2-7b", nil)
	j := Job{Model: m, Mode: Prefill, Precision: FP16, Attention: model.Eager, Batch: 1, SeqLen: 8192}
	all, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	j.HeadChunk = 8
	chunked, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	// The scores of one layer: 32 heads × 8192², 8 bytes per element at
	// the fp16 softmax: the scores, the fp32 result, the fp16 cast copy.
	P := int64(32) * 8192 * 8192
	saved := gpumem.Bytes(8 * P * 3 / 4)
	if got := all.Allocated() - chunked.Allocated(); got != saved {
		t.Errorf("chunking 32 heads by 8 saves %v, want three quarters of the scores, %v", got, saved)
	}
	j.HeadChunk = -1
	if _, err := Estimate(j); !errors.Is(err, gpumem.ErrInvalid) {
		t.Errorf("HeadChunk -1: err = %v, want ErrInvalid", err)
	}
	j.HeadChunk = 0
	j.Offload = 8
	if _, err := Estimate(j); !errors.Is(err, gpumem.ErrInvalid) {
		t.Errorf("Offload 8: err = %v, want ErrInvalid", err)
	}
}

// Autocast casts only floating-point weights: a QLoRA model's NF4 base
// is dequantized per operation, never cached as a bf16 copy.
func TestEstimateAutocastSkipsQuantized(t *testing.T) {
	t.Parallel()
	q := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) {
		f.LoRA = model.LoRA{Rank: 16}
		f.Quant, f.Blockwise = gpumem.NF4, gpumem.Blockwise{Nested: true}
	})
	j := trainJob(q)
	j.Precision = BF16Mixed
	amp, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := q.weights(gpumem.FP32, false)
	all, _ := q.weights(gpumem.BF16, false) // every group, the NF4 ones in NF4
	nf4 := all
	casts, _ := q.casts(gpumem.BF16, nil)
	nf4 -= casts
	if nf4 <= 0 {
		t.Fatalf("no NF4 bytes: weights %v, casts %v", all, casts)
	}
	if amp.Phase != Step && amp.Weights != stored+casts {
		t.Errorf("weights at %v: %v, want stored %v + casts of the float tensors %v", amp.Phase, amp.Weights, stored, casts)
	}
}
