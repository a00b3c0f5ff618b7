package budget

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// TestKeptInputs: bitsandbytes < 0.43.2 keeps the 4-bit layers' inputs
// until the graph is freed, and a loop that holds the previous step
// (litgpt's) carries them, with the previous logits, into the next
// forward. Llama-2-7B QLoRA, batch 2 × 512 tokens, bf16.
func TestKeptInputs(t *testing.T) {
	t.Parallel()
	ft := model.Finetune{Quant: gpumem.NF4, Unfused: true, LoRA: model.LoRA{Rank: 8}}
	plain := quantModel(t, "llama-2-7b", ft)
	ft.KeepsInputs = true
	keeps := quantModel(t, "llama-2-7b", ft)
	// 745,472 elements per token (model.TestKeptInputs) · 1024 tokens ·
	// 2 bytes = 1,526,726,656.
	kept, ok := keeps.quant.keptInputs(1024, gpumem.BF16)
	require.True(t, ok)
	assert.Equal(t, gpumem.Bytes(1_526_726_656), kept)
	// Under an fp32 compute dtype the kept input is the fp32 cast.
	ft.ComputeDType = gpumem.FP32
	m32 := quantModel(t, "llama-2-7b", ft)
	kept32, _ := m32.quant.keptInputs(1024, gpumem.BF16)
	assert.Equal(t, 2*kept, kept32)

	// On a trained base's activations (LitGPTLoRA) every linear saves
	// its input within the step anyway.
	job := func(m Model, held bool) Job {
		return Job{Model: m, Mode: Training, Precision: BF16, Batch: 2, SeqLen: 512, Attention: model.SDPA,
			Optimizer: optimizer.AdamW{}, HoldsPreviousStep: held, LoRACode: LitGPTLoRA}
	}
	est := func(j Job) Breakdown {
		b, err := Estimate(j)
		require.NoError(t, err)
		return b
	}
	// On the frozen base (the default code) the 4-bit linears keep the
	// inputs that a frozen weight's op would not save
	// (model.FrozenBase.KeptInputs): the forward lies between the
	// frozen base without them and the trained base.
	frozenJob := func(m Model) Job { j := job(m, false); j.LoRACode = FrozenBaseLoRA; return j }
	fzPlain, fzKeeps := est(frozenJob(plain)), est(frozenJob(keeps))
	assert.Greater(t, fzKeeps.Phases[Forward], fzPlain.Phases[Forward])
	assert.Less(t, fzKeeps.Phases[Forward], est(job(keeps, false)).Phases[Forward])
	// Without the held step the kept inputs change only the end of
	// backward: the forward and the start of backward are as before.
	base, keptOnly := est(job(plain, false)), est(job(keeps, false))
	assert.Equal(t, base.Phases[Forward], keptOnly.Phases[Forward])

	// Held: the forward adds the kept inputs and the previous logits
	// (until the new ones are assigned), or the kept inputs beside the
	// new logits and the larger of the previous logits and the loss's
	// fp32 upcast (until the new loss is).
	j := job(keeps, false)
	act, err := activations(&j, gpumem.BF16)
	require.NoError(t, err)
	kFwd, _ := keeps.quant.transients(1024, gpumem.BF16, true)
	body := act.saved - act.logits
	before := max(body+act.forward+kFwd, body+act.logits+act.lossForward)
	after := max(body+kept+act.forward+kFwd+act.logits, body+kept+act.logits+max(act.logits, act.lossForward))
	held := est(job(keeps, true))
	assert.Equal(t, after-before, held.Phases[Forward]-keptOnly.Phases[Forward])
	assert.Greater(t, held.Allocated(), keptOnly.Allocated())
	// The optimizer step of a held step still has its logits and kept
	// inputs.
	assert.Equal(t, kept+act.logits, held.Phases[Step]-keptOnly.Phases[Step])
	// Held without kept inputs: the previous logits only.
	heldPlain := est(job(plain, true))
	assert.Equal(t, max(body+act.forward+kFwd+act.logits, body+act.logits+max(act.logits, act.lossForward))-before,
		heldPlain.Phases[Forward]-base.Phases[Forward])

	// The kept inputs are sized for a whole model: a split one is refused.
	tp := job(keeps, false)
	tp.Parallel = Parallel{TensorParallel: 2}
	_, err = Estimate(tp)
	var pe *gpumem.FieldError
	require.True(t, errors.As(err, &pe), "%v", err)
	assert.Equal(t, "Job.Parallel", pe.Field)
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)

	inf := job(keeps, true)
	inf.Mode, inf.Optimizer = Prefill, nil
	_, err = Estimate(inf)
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	assert.Equal(t, "Job.HoldsPreviousStep", fe.Field)
}

// TestQuantFrom: Lightning quantizes from fp16, so a bf16 job's
// dequantized weight is the fp16 copy and its bf16 cast at once:
// gate/up 4096·11008·(2+2) = 180,355,072 in backward.
func TestQuantFrom(t *testing.T) {
	t.Parallel()
	m := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.NF4, QuantFrom: gpumem.FP16, LoRA: model.LoRA{Rank: 8}})
	_, bwd := m.quant.transients(1024, gpumem.BF16, true)
	assert.Equal(t, gpumem.Bytes(180_355_072), bwd)
	same := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.NF4, LoRA: model.LoRA{Rank: 8}})
	_, bwd = same.quant.transients(1024, gpumem.BF16, true)
	assert.Equal(t, gpumem.Bytes(90_177_536), bwd)
}
