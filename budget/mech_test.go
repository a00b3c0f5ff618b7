package budget

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestTiedEmbeddingEndOfBackward: GPT-2 (head tied to wte) trained in
// fp32 with gradients kept and nothing stepped, batch 1 × 8: the end of
// backward holds every gradient plus the head's and the embedding's
// V×h gradients before their sum becomes .grad, 2·50257·768·4 bytes
// (rounded to 512), beside only what the embedding saved; an untied
// model has no such moment.
func TestTiedEmbeddingEndOfBackward(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "gpt2", nil)
	j := Job{Model: m, Mode: Training, Precision: FP32, Gradients: NoStep, Batch: 1, SeqLen: 8}
	b, err := Estimate(j)
	require.NoError(t, err)
	all, err := m.weights(gpumem.FP32, true)
	require.NoError(t, err)
	tied := gpumem.Bytes(roundAlloc(50257 * 768 * 4))
	got, dec := m.tiedGrad(gpumem.FP32, nil)
	require.Equal(t, tied, got)
	require.False(t, dec)
	require.Equal(t, Backward, b.Phase)
	require.Equal(t, all+2*tied, b.Gradients)
	act, err := activations(&j, gpumem.FP32)
	require.NoError(t, err)
	require.Equal(t, act.ids, b.Activations)

	// Frozen embedding (LoRA): nothing to sum.
	lora := lookupModel(t, "gpt2", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 8} })
	got, _ = lora.tiedGrad(gpumem.FP32, nil)
	require.Zero(t, got)
	untied := lookupModel(t, "llama-2-7b", nil)
	got, _ = untied.tiedGrad(gpumem.FP32, nil)
	require.Zero(t, got)
	// Whisper's decoder embedding (tied to proj_out) sums before the
	// encoder's backward; T5's shared table, which the encoder reads too,
	// at the very end.
	whisper := lookupModel(t, "whisper-small", nil)
	got, dec = whisper.tiedGrad(gpumem.FP32, nil)
	require.Equal(t, gpumem.Bytes(roundAlloc(51865*768*4)), got)
	require.True(t, dec)
	t5 := lookupModel(t, "t5-small", nil)
	got, dec = t5.tiedGrad(gpumem.FP32, nil)
	require.Positive(t, got)
	require.False(t, dec)
}

// TestKeepLogits: a loop that holds the output keeps the bf16 logits
// through the blocks' backward and the optimizer step; the Trainer's
// default frees them before backward. Llama-3-8B, batch 1 × 512, SDPA:
// T·V = 512 · 128256.
func TestKeepLogits(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3-8b", nil)
	j := trainJob(m)
	j.Batch, j.SeqLen = 1, 512
	trainer, err := Estimate(j)
	require.NoError(t, err)
	j.KeepLogits = true
	kept, err := Estimate(j)
	require.NoError(t, err)
	logits := gpumem.Bytes(2 * 512 * 128256)
	require.Equal(t, trainer.Phases[Step]+logits, kept.Phases[Step])
	require.Equal(t, Step, kept.Phase)
	require.Equal(t, logits, kept.Logits)
	require.Zero(t, trainer.Logits)

	j.Mode, j.Optimizer = Prefill, nil
	_, err = Estimate(j)
	var fe *gpumem.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "Job.KeepLogits", fe.Field)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
}

// TestAutocastInferenceCasts: under torch.autocast a pass without
// gradients caches the bf16 casts of the parameters that require grad
// (a loaded model's: all of them) until the context exits; a frozen
// model's casts are transients of their ops, and a pure-bf16 job has
// none.
func TestAutocastInferenceCasts(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "gpt2", nil)
	j := Job{Model: m, Mode: Prefill, Precision: BF16Mixed, Attention: model.SDPA, Batch: 1, SeqLen: 64}
	b, err := Estimate(j)
	require.NoError(t, err)
	w32, err := m.weights(gpumem.FP32, false)
	require.NoError(t, err)
	w16, err := m.weights(gpumem.BF16, false)
	require.NoError(t, err)
	require.Equal(t, w32+w16, b.Weights)
	frozen := lookupModel(t, "gpt2", func(f *model.Finetune) { f.Train = func(gpumem.Tensor) bool { return false } })
	j.Model = frozen
	b, err = Estimate(j)
	require.NoError(t, err)
	require.Equal(t, w32, b.Weights)
}

// TestStepOracle reads the CPU measurements of tools/oracle/step.py
// (testdata/oracle/step.json) that the composition rests on: keeping the
// output through backward raises the peak by exactly the fp32 logits
// (4·B·T·V: the Trainer's loss backward runs without them), and a tied
// head's backward ends with every gradient plus two V×h gradients
// (Model.tiedGrad, to 64 bytes), an untied one's with every gradient
// plus less than 1% of one.
func TestStepOracle(t *testing.T) {
	raw, err := os.ReadFile("../testdata/oracle/step.json")
	require.NoError(t, err)
	var rec struct {
		Logits struct {
			Vocab       int64 `json:"vocab"`
			Batch       int64 `json:"batch"`
			Seq         int64 `json:"seq"`
			TrainerPeak int64 `json:"trainer_peak"`
			KeptPeak    int64 `json:"kept_peak"`
		} `json:"logits_holder"`
		Tied struct {
			Vocab       int64 `json:"vocab"`
			Hidden      int64 `json:"hidden"`
			TiedPeak    int64 `json:"tied_peak"`
			TiedGrads   int64 `json:"tied_grad_bytes"`
			UntiedPeak  int64 `json:"untied_peak"`
			UntiedGrads int64 `json:"untied_grad_bytes"`
		} `json:"tied"`
	}
	require.NoError(t, json.Unmarshal(raw, &rec))
	l := rec.Logits
	require.Positive(t, l.Vocab)
	require.Equal(t, 4*l.Batch*l.Seq*l.Vocab, l.KeptPeak-l.TrainerPeak)
	d := rec.Tied
	vh := 4 * d.Vocab * d.Hidden
	require.Positive(t, vh)
	extra := d.TiedPeak - d.TiedGrads - 2*vh
	require.True(t, extra >= 0 && extra <= 64, "tied: %d bytes beyond the gradients and 2·V·h·4", extra)
	require.Less(t, d.UntiedPeak-d.UntiedGrads, vh/100)
}

// TestModelBuffers: loading StarCoder holds its 64 MiB causal-mask
// buffer beside the weights (model.Spec.BufferBytes).
func TestModelBuffers(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "starcoder", nil)
	b, err := Estimate(Job{Model: m, Mode: Load, Precision: BF16})
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(8192*8192), b.Buffers)
}

// TestEncoderDecoderPhases: Whisper-small trained in fp32 (gradients
// kept, nothing stepped), batch 2, a 16-token decoder over 1500 encoder
// frames. The encoder's forward transient sits on what the encoder side
// saved, the decoder's on everything; backward reaches the encoder with
// the decoder's, the head's and the embeddings' gradients made and every
// encoder block still saved; in generation the encoder's pass precedes
// the KV cache.
func TestEncoderDecoderPhases(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "whisper-small", nil)
	j := Job{Model: m, Mode: Training, Precision: FP32, Gradients: NoStep, Attention: model.Eager, Batch: 2, SeqLen: 16}
	b, err := Estimate(j)
	require.NoError(t, err)
	act, err := activations(&j, gpumem.FP32)
	require.NoError(t, err)
	require.True(t, act.encoder)
	require.Positive(t, act.encBlocks)
	require.Greater(t, act.encForward, act.decForward)
	base := b.Weights + b.Buffers + b.Workspace
	body := act.saved - act.logits
	require.Equal(t, base+max(body+act.decForward, act.encBlocks+act.front+act.encForward, body+act.logits+act.lossForward), b.Phases[Forward])

	all, err := m.weights(gpumem.FP32, true)
	require.NoError(t, err)
	dec := m.gradsOutsideEncoder(gpumem.FP32, nil)
	require.True(t, dec > 0 && dec < all, "decoder-side gradients %v of %v", dec, all)
	require.GreaterOrEqual(t, b.Phases[Backward], base+dec+act.encBlocks+act.front+act.encBackward)

	g := Job{Model: m, Mode: Generation, Precision: FP32, Attention: model.Eager, Batch: 1, SeqLen: 4, Generate: 4}
	gb, err := Estimate(g)
	require.NoError(t, err)
	gact, err := activations(&g, gpumem.FP32)
	require.NoError(t, err)
	// The encoder's 1500-frame attention outweighs a few decoder steps'
	// cache: the peak is the encoder's pass, without a KV cache.
	require.Zero(t, gb.KVCache)
	require.Equal(t, gb.Weights+gb.Buffers+gb.Workspace+gact.saved-gact.logits+gact.encForward, gb.Phases[Decode])
	llama := lookupModel(t, "llama-2-7b", nil)
	require.Zero(t, llama.gradsOutsideEncoder(gpumem.FP32, nil))
}

// FuzzEstimateComposition: the loop's knobs (KeepLogits, EvalLoss) on a
// tied decoder and an encoder–decoder, in every mode and precision: an
// error names a field, totals stay consistent.
func FuzzEstimateComposition(f *testing.F) {
	var ms [2]Model
	for i, name := range []string{"gpt2", "whisper-small"} {
		s, _ := model.Lookup(name)
		m, err := ModelOf(s)
		if err != nil {
			f.Fatal(err)
		}
		ms[i] = m
	}
	f.Add(uint8(0), uint8(1), uint8(3), 2, 64, 0, true, false)
	f.Add(uint8(1), uint8(2), uint8(3), 1, 8, 4, false, true)
	f.Add(uint8(1), uint8(3), uint8(1), 4, 32, 0, false, false)
	f.Fuzz(func(t *testing.T, which, mode, prec uint8, batch, seq, gen int, keep, eval bool) {
		j := Job{Model: ms[which%2], Mode: Mode(mode), Precision: Precision(prec), Batch: batch, SeqLen: seq, Generate: gen,
			KeepLogits: keep, EvalLoss: eval, Attention: model.Eager}
		if j.Mode == Training {
			j.Gradients = NoStep
		}
		fuzzEstimate(t, j)
	})
}

// TestFirstBlockBackward: Llama-3.2-1B (head tied to the embedding),
// bf16, eager attention over 16384 tokens, gradients kept and nothing
// stepped: the peak is the first block's backward (the attention
// core's gradients), when the loss, the head and the final norm have
// released what they saved and made their gradients: the final norm's
// and the head's V×h contribution to the tied embedding.
func TestFirstBlockBackward(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16, Gradients: NoStep, Attention: model.Eager, Batch: 1, SeqLen: 16384}
	b, err := Estimate(j)
	require.NoError(t, err)
	act, err := activations(&j, gpumem.BF16)
	require.NoError(t, err)
	require.Equal(t, Backward, b.Phase)
	require.Equal(t, act.backward, b.Attention)
	norm := gpumem.Bytes(roundAlloc(2048 * 2))
	tied := gpumem.Bytes(roundAlloc(128256 * 2048 * 2))
	require.Equal(t, norm+tied, b.Gradients)
	require.Equal(t, act.saved-act.logits-act.headSaved, b.Activations)
	require.Positive(t, act.headSaved)
}
