package budget

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestCompileSavedSet checks the compiled blocks' saved set against the
// partitioner's rules written out by hand (model/compile.go) for Llama
// 3.2 3B in bf16 with flash attention, batch 2 × 4096: each of the two
// RMSNorms keeps its bf16 input instead of the fp32 copy and the
// normalized rows (4 bytes per element less), and the SwiGLU MLP does not
// keep SiLU(gate) (2 bytes per T·I element less): (2·4·h + 2·I) bytes per
// token and layer.
func TestCompileSavedSet(t *testing.T) {
	t.Parallel()
	s, ok := model.Lookup("llama-3.2-3b")
	require.True(t, ok)
	w := model.Workload{Batch: 2, SeqLen: 4096, DType: gpumem.BF16, Attention: model.Flash, Train: true}
	eager, err := s.Activations(w)
	require.NoError(t, err)
	w.Compile = model.CompileLayers
	compiled, err := s.Activations(w)
	require.NoError(t, err)
	const T, h, I, L = 2 * 4096, 3072, 8192, 28
	assert.Equal(t, gpumem.Bytes(L*T*(2*4*h+2*I)), eager.LayersTotal()-compiled.LayersTotal())
	// The head and the loss are untouched by compiling the layers.
	assert.Equal(t, eager.Head, compiled.Head)
	assert.Equal(t, eager.LossGrad, compiled.LossGrad)

	// The whole model: the final norm as the blocks' (4·T·h less), the
	// loss keeps the bf16 logits and two fp32 row statistics instead of
	// the fp32 log-probabilities, makes no fp32 copy in forward, and its
	// backward holds the logits' gradient in their own dtype and the zero
	// gradient autograd materializes for the logits the model returns.
	const V = 128256
	w.Compile = model.CompileModel
	whole, err := s.Activations(w)
	require.NoError(t, err)
	assert.Equal(t, compiled.LayersTotal(), whole.LayersTotal())
	assert.Equal(t, eager.FinalNorm-4*T*h, whole.FinalNorm)
	assert.Equal(t, eager.Head-4*T*V+8*T, whole.Head)
	assert.Zero(t, whole.LogitsFP32)
	// and the zero gradients of the DynamicCache's k and v it returns.
	const KV, d = 8, 128
	assert.Equal(t, gpumem.Bytes(2*2*T*V+L*(2+2)*T*KV*d), whole.LossGrad)
	assert.True(t, whole.LogitsSaved)

	// torchtune's compile_loss on the unchunked output, which the model
	// upcasts itself: the loss saves that fp32 copy, so the saved bytes
	// are eager's (plus the two row statistics), and its backward holds
	// the fp32 gradient beside it (4 bytes per logit, against eager's 8).
	w.Compile = model.CompileLayers | model.CompileLoss
	tt, err := s.Activations(w)
	require.NoError(t, err)
	assert.Equal(t, eager.Head+8*T, tt.Head)
	assert.Zero(t, tt.LogitsFP32) // the upcast is the saved copy, in Head
	assert.Equal(t, gpumem.Bytes(4*T*V), tt.LossGrad)
	assert.False(t, tt.LogitsSaved)
}

// TestCompileEstimate: compiling lowers the estimate of a Llama training
// step, the chunked loss compiled keeps the chunks' logits to its
// backward.
func TestCompileEstimate(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-3b", nil)
	j := trainJob(m)
	j.Attention, j.Batch, j.SeqLen = model.Flash, 2, 4096
	eager, err := Estimate(j)
	require.NoError(t, err)
	for _, c := range []model.Compile{model.CompileLayers, model.CompileLayers | model.CompileLoss, model.CompileModel} {
		j.Compile = c
		b, err := Estimate(j)
		require.NoError(t, err, c)
		assert.Less(t, b.Allocated(), eager.Allocated(), c)
	}
	j.Loss = model.Loss{Kind: model.ChunkedLoss, Chunks: 8}
	j.Compile = model.CompileLayers | model.CompileLoss
	b, err := Estimate(j)
	require.NoError(t, err)
	// The loss backward moment: the bf16 chunks (saved by the compiled
	// loss) and one chunk's bf16 gradient.
	const TV = 8192 * 128256
	assert.Equal(t, gpumem.Bytes(2*TV+2*TV/8), b.Logits)
}

// TestCompileAllocs: Estimate stays allocation-free with compilation.
func TestCompileAllocs(t *testing.T) {
	j := trainJob(lookupModel(t, "llama-3.2-3b", nil))
	j.Compile = model.CompileLayers | model.CompileLoss
	j.Loss = model.Loss{Kind: model.ChunkedLoss, Chunks: 8}
	_, err := Estimate(j)
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }))
}

// TestCompileErrors: compilation the model does not derive is refused
// with an error naming Job.Compile.
func TestCompileErrors(t *testing.T) {
	t.Parallel()
	llama := lookupModel(t, "llama-3.2-3b", nil)
	gpt2 := lookupModel(t, "gpt2", nil)
	tests := []struct {
		name string
		edit func(*Job)
		want error
	}{
		{"vllm", func(j *Job) { j.Mode, j.Runtime, j.Optimizer = Generation, VLLM, nil; j.Generate = 16 }, gpumem.ErrUnsupported},
		{"llama.cpp", func(j *Job) { j.Mode, j.Runtime, j.Optimizer = Generation, LlamaCpp, nil; j.Generate = 16 }, gpumem.ErrUnsupported},
		{"inference", func(j *Job) { j.Mode, j.Optimizer = Prefill, nil }, gpumem.ErrUnsupported},
		{"eager attention", func(j *Job) { j.Attention = model.Eager }, gpumem.ErrUnsupported},
		{"gpt-2 blocks", func(j *Job) { j.Model = gpt2 }, gpumem.ErrUnsupported},
		{"liger loss", func(j *Job) {
			j.Compile = model.CompileLayers | model.CompileLoss
			j.Loss = model.Loss{Kind: model.FusedLinearLoss}
		}, gpumem.ErrUnsupported},
		{"unknown scope", func(j *Job) { j.Compile = model.CompileHead }, gpumem.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := trainJob(llama)
			j.Compile = model.CompileLayers
			tc.edit(&j)
			_, err := Estimate(j)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.want), "%v", err)
			var fe *gpumem.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, "Job.Compile", fe.Field, "%v", err)
		})
	}
}

// BenchmarkEstimateCompile estimates Llama 3.2 3B's training step eager
// and with torchtune's compilation (layers and loss).
func BenchmarkEstimateCompile(b *testing.B) {
	j := trainJob(lookupModel(b, "llama-3.2-3b", nil))
	j.Attention, j.Batch, j.SeqLen = model.Flash, 2, 4096
	for _, c := range []model.Compile{0, model.CompileLayers | model.CompileLoss} {
		j.Compile = c
		b.Run(c.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Estimate(j); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
