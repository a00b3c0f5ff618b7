package budget

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJambaCache checks a Jamba model's generation cache: keys and
// values of its 4 attention layers (layers 4, 12, 20, 28 of 32: 8 KV
// heads of 128) for every token, beside the conv and ssm states of its
// 28 Mamba layers (8192 channels × (4 + 16)), whatever the length.
func TestJambaCache(t *testing.T) {
	t.Parallel()
	s, ok := model.Lookup("jamba-v0.1")
	require.True(t, ok)
	assert.Equal(t, int64(4), s.AttentionLayers())
	assert.True(t, s.JambaAttention(12))
	assert.False(t, s.JambaAttention(13))
	m, err := NewModel(model.Finetune{Model: s})
	require.NoError(t, err)
	for _, seq := range []int{1000, 8000} {
		j := Job{Model: m, Mode: Generation, Precision: BF16, Batch: 2, SeqLen: seq, Generate: 24}
		got, err := kvCache(&j, gpumem.BF16, nil)
		require.NoError(t, err)
		kv := int64(4 * 2 * 8 * 128 * 2 * (seq + 24) * 2)
		state := int64(28 * 2 * 8192 * 20 * 2)
		assert.Equal(t, gpumem.Bytes(kv+state), got, "seq %d", seq)
	}
	// A Mamba-2 model caches Mamba2Cache's states only.
	s2, err := model.FromHFConfig(strings.NewReader(`{"model_type": "mamba2", "hidden_size": 96, "num_hidden_layers": 3,
		"vocab_size": 1000, "state_size": 16, "num_heads": 12, "head_dim": 16, "n_groups": 2}`))
	require.NoError(t, err)
	m2, err := NewModel(model.Finetune{Model: s2})
	require.NoError(t, err)
	got, err := kvCache(&Job{Model: m2, Mode: Generation, Precision: BF16, Batch: 4, SeqLen: 4096}, gpumem.BF16, nil)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(3*4*(256*4+12*16*16)*2), got)
}

// TestMambaKernelJob checks that Job.SSMKernel reaches the activation
// model: a training step of mamba-130m whose peak is in backward holds
// far more activations under the sequential kernel, whose blocks save
// more than ten times the fused kernel's (model.Spec.Activations), and
// the fused kernel is the default.
func TestMambaKernelJob(t *testing.T) {
	t.Parallel()
	s, ok := model.Lookup("mamba-130m")
	require.True(t, ok)
	m, err := NewModel(model.Finetune{Model: s})
	require.NoError(t, err)
	acts := map[model.SSMKernel]gpumem.Bytes{}
	for _, k := range []model.SSMKernel{model.FusedSSM, model.SequentialSSM} {
		b, err := Estimate(Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Batch: 8, SeqLen: 2048, SSMKernel: k})
		require.NoError(t, err)
		acts[k] = b.Activations
		assert.Positive(t, int64(b.Activations), "%v", k)
	}
	f, err := s.Activations(model.Workload{Batch: 8, SeqLen: 2048, DType: gpumem.BF16, Train: true})
	require.NoError(t, err)
	q, err := s.Activations(model.Workload{Batch: 8, SeqLen: 2048, DType: gpumem.BF16, Train: true, SSMKernel: model.SequentialSSM})
	require.NoError(t, err)
	assert.Greater(t, q.LayersTotal(), 10*f.LayersTotal())
	assert.Greater(t, acts[model.SequentialSSM], 10*acts[model.FusedSSM])
	def, err := Estimate(Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Batch: 8, SeqLen: 2048})
	require.NoError(t, err)
	assert.Equal(t, acts[model.FusedSSM], def.Activations)
}

// TestSSMRuntimeRefused checks that the serving runtimes refuse
// state-space and hybrid models, naming the field, instead of treating
// them as transformers.
func TestSSMRuntimeRefused(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"mamba-130m", "jamba-v0.1"} {
		s, ok := model.Lookup(name)
		require.True(t, ok)
		m, err := NewModel(model.Finetune{Model: s})
		require.NoError(t, err)
		for _, rt := range []Runtime{LlamaCpp, VLLM, SGLang} {
			_, err := Estimate(Job{Model: m, Mode: Generation, Precision: BF16, Batch: 1, SeqLen: 512, Runtime: rt})
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe, "%s %v", name, rt)
			assert.Equal(t, "Job.Runtime", fe.Field)
			assert.ErrorIs(t, err, gpumem.ErrUnsupported)
		}
	}
}

// TestJambaEstimate checks that a Jamba-v0.1 generation job is
// estimated end to end with its hybrid cache, and that training with the
// sequential kernel holds more activations than with the fused one.
func TestJambaEstimate(t *testing.T) {
	t.Parallel()
	s, ok := model.Lookup("jamba-v0.1")
	require.True(t, ok)
	m, err := NewModel(model.Finetune{Model: s})
	require.NoError(t, err)
	j := Job{Model: m, Mode: Generation, Precision: BF16, Batch: 2, SeqLen: 8000, Generate: 24, Attention: model.Flash}
	b, err := Estimate(j)
	require.NoError(t, err)
	want, err := kvCache(&j, gpumem.BF16, nil)
	require.NoError(t, err)
	assert.Equal(t, want, b.KVCache)
	acts := map[model.SSMKernel]gpumem.Bytes{}
	for _, k := range []model.SSMKernel{model.FusedSSM, model.SequentialSSM} {
		a, err := s.Activations(model.Workload{Batch: 1, SeqLen: 4096, DType: gpumem.BF16, Train: true, Attention: model.Flash, SSMKernel: k})
		require.NoError(t, err)
		acts[k] = a.LayersTotal()
	}
	assert.Greater(t, acts[model.SequentialSSM], 3*acts[model.FusedSSM])
}

// TestSSMEstimateAllocs checks that Estimate stays allocation-free for
// the state-space and hybrid models, training and generation, with both
// kernels.
func TestSSMEstimateAllocs(t *testing.T) {
	for _, j := range ssmJobs(t) {
		if n := testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }); n != 0 {
			t.Errorf("%s %v %v: %v allocations", j.Model.spec.Family, j.Mode, j.SSMKernel, n)
		}
	}
}

// BenchmarkSSMEstimate times Estimate over mamba-130m, a Mamba-2 model
// and Jamba-v0.1, training and generation, with both kernels.
func BenchmarkSSMEstimate(b *testing.B) {
	jobs := ssmJobs(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, j := range jobs {
			if _, err := Estimate(j); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func ssmJobs(tb testing.TB) []Job {
	tb.Helper()
	mamba2, err := model.FromHFConfig(strings.NewReader(`{"model_type": "mamba2", "hidden_size": 2560, "num_hidden_layers": 64,
		"vocab_size": 50288, "num_heads": 80, "head_dim": 64, "n_groups": 1, "tie_word_embeddings": true}`))
	require.NoError(tb, err)
	var jobs []Job
	for _, s := range []model.Spec{must(tb, "mamba-130m"), mamba2, must(tb, "jamba-v0.1")} {
		m, err := NewModel(model.Finetune{Model: s})
		require.NoError(tb, err)
		for _, k := range []model.SSMKernel{model.FusedSSM, model.SequentialSSM} {
			jobs = append(jobs,
				Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Batch: 1, SeqLen: 2048, Attention: model.Flash, SSMKernel: k},
				Job{Model: m, Mode: Generation, Precision: BF16, Batch: 4, SeqLen: 4096, Generate: 128, Attention: model.Flash, SSMKernel: k})
		}
	}
	return jobs
}

func must(tb testing.TB, name string) model.Spec {
	s, ok := model.Lookup(name)
	require.True(tb, ok, name)
	return s
}
