package accuracy

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// stateJob decodes a job of the published vocabulary on llama-3.2-1b,
// with extra fields spliced in.
func stateJob(t *testing.T, extra string) *Job {
	t.Helper()
	j := new(Job)
	require.NoError(t, json.Unmarshal([]byte(`{"model": "llama-3.2-1b", "catalog": "llama-3.2-1b", "kind": "causal",
		"mode": "train", "batch": 1, "seq": 512, "precision": "bf16", "optimizer": "adamw", "attention": "sdpa"`+extra+`}`), j))
	return j
}

// TestJobRealStackFields: loss, logits_to_keep, frozen and optimizer
// none reach budget.Job, and values that make no sense name their field.
func TestJobRealStackFields(t *testing.T) {
	b, err := stateJob(t, `, "loss": "chunked:4"`).Budget()
	require.NoError(t, err)
	require.Equal(t, model.Loss{Kind: model.ChunkedLoss, Chunks: 4}, b.Loss)

	b, err = stateJob(t, `, "optimizer": "none"`).Budget()
	require.NoError(t, err)
	require.Equal(t, budget.NoStep, b.Gradients)
	require.Nil(t, b.Optimizer)

	b, err = stateJob(t, `, "optimizer": "none", "frozen": true`).Budget()
	require.NoError(t, err)
	require.Equal(t, budget.InputGradients, b.Gradients)

	var inference Job
	require.NoError(t, json.Unmarshal([]byte(`{"model": "llama-3.2-1b", "catalog": "llama-3.2-1b", "kind": "causal",
		"mode": "prefill", "batch": 1, "seq": 512, "precision": "bf16", "attention": "sdpa", "logits_to_keep": 1}`), &inference))
	b, err = inference.Budget()
	require.NoError(t, err)
	require.Equal(t, 1, b.LogitsToKeep)

	for _, tc := range []struct{ extra, field string }{
		{`, "loss": "chunked:0"`, "job.loss"},
		{`, "loss": "focal"`, "job.loss"},
		{`, "frozen": true`, "job.optimizer"},
		{`, "optimizer": "none", "frozen": true, "lora_rank": 8`, "job.frozen"},
		{`, "optimizer": "none", "optimizer_impl": "fused"`, "job.optimizer_impl"},
		{`, "logits_to_keep": -1`, "job.logits_to_keep"},
	} {
		_, err := stateJob(t, tc.extra).Budget()
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe, tc.extra)
		require.Equal(t, tc.field, fe.Field, tc.extra)
	}
	inference.Frozen = true
	_, err = inference.Budget()
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "job.frozen", fe.Field)
}

// TestFeatures: a case's features follow from its job's fields, not
// from its id, and a job that sets none is plain.
func TestFeatures(t *testing.T) {
	require.Equal(t, []string{Plain}, Features(stateJob(t, ""), Allocated))
	j := stateJob(t, `, "loss": "chunked", "optimizer_in_backward": true, "offload_activations": true,
		"checkpointing": "full", "optimizer": "adamw8bit", "compile": true`)
	require.Equal(t, []string{FeatureChunkedLoss, FeatureOptimizerInBwd, FeatureEightBit, FeatureOffloadAct,
		FeatureCheckpointing, FeatureCompile}, Features(j, Allocated))
	j = stateJob(t, `, "optimizer": "sgd", "momentum": 0.9, "optimizer_impl": "forloop"`)
	require.Equal(t, []string{FeatureOptimizerImpl + "forloop", FeatureMomentum, FeatureContext}, Features(j, Device))
	j = stateJob(t, `, "lora_rank": 8, "quant": "nf4", "optimizer": "paged_adamw_32bit", "loss": "liger"`)
	require.Equal(t, []string{FeatureFusedLoss, FeaturePaged, FeatureQuant + "nf4", FeatureLoRA}, Features(j, Reserved))
}

// TestSummarizeFeatures: a case counts under each of its features, and
// the groups keep the source and the level apart.
func TestSummarizeFeatures(t *testing.T) {
	cases := []Case{
		{Source: Published, ID: "a", Label: Allocated, Measured: 100, Predicted: 110, Features: []string{"x", "y"}},
		{Source: Published, ID: "b", Label: Allocated, Measured: 100, Predicted: 90, Features: []string{"x"}},
		{Source: Measured, ID: "c", Label: Allocated, Measured: 100, Predicted: 100, Features: []string{"x"}},
	}
	gs := SummarizeFeatures(cases)
	require.Len(t, gs, 3)
	require.Equal(t, Group{Source: Measured, Key: "x", Label: Allocated, N: 1, WorstID: "c"}, gs[0])
	require.Equal(t, "x", gs[1].Key)
	require.Equal(t, 2, gs[1].N)
	require.InDelta(t, 0.5, gs[1].Under, 1e-12)
	require.Equal(t, "y", gs[2].Key)
	require.Equal(t, 1, gs[2].N)
	require.InDelta(t, 0.1, gs[2].Worst, 1e-12)
}

// TestWithLoad: a figure whose window holds the load takes the larger of
// the load's and the run's peaks. lit-gpt's int8 Falcon-7B: the load of
// the quantized head sets it; without with_load the estimate is the
// generation's, which is lower.
func TestWithLoad(t *testing.T) {
	stated, err := ReadPublished(testdata, "published")
	require.NoError(t, err)
	i := slices.IndexFunc(stated, func(s Stated) bool { return s.ID == "litgpt-quant-falcon7b-int8" })
	require.GreaterOrEqual(t, i, 0)
	s := stated[i]
	require.True(t, s.Job.WithLoad)
	with := Compare(nil, []Stated{s}).Cases[0]
	s.Job.WithLoad = false
	without := Compare(nil, []Stated{s}).Cases[0]
	require.Equal(t, "loaded", with.Phase)
	require.Greater(t, with.Predicted, without.Predicted)
	require.Contains(t, with.Features, FeatureWithLoad)
	require.NotContains(t, without.Features, FeatureWithLoad)
}

// TestJobLlamaCpp: runtime and llamacpp reach budget.Job, misplaced or
// misspelt options name their field, and a kv_cache figure is compared
// with the estimate's KV cache: llama.cpp's q8_0 cache for
// Qwen2.5-Coder-32B at 32768 cells is 4352 MiB to the byte.
func TestJobLlamaCpp(t *testing.T) {
	j := stateJob(t, `, "mode": "generate", "generate": 1, "optimizer": null, "runtime": "llama.cpp",
		"llamacpp": {"ctx_size": 4096, "flash_attn": true, "cache_type_k": "q8_0", "cache_type_v": "q4_0"}`)
	b, err := j.Budget()
	require.NoError(t, err)
	require.Equal(t, budget.LlamaCpp, b.Runtime)
	require.Equal(t, budget.LlamaCppOptions{Context: 4096, FlashAttention: true, CacheK: gpumem.Q8_0, CacheV: gpumem.Q4_0}, b.LlamaCpp)
	require.Equal(t, []string{FeatureKVDType + "q8_0", FeatureKVDType + "q4_0", FeatureRuntime + "llama.cpp"}, Features(j, KVCache))

	for _, tc := range []struct{ extra, field string }{
		{`, "mode": "generate", "generate": 1, "optimizer": null, "llamacpp": {"ctx_size": 4096}`, "job.llamacpp"},
		{`, "mode": "generate", "generate": 1, "optimizer": null, "runtime": "llama.cpp", "llamacpp": {"cache_type_k": "q9"}`, "job.llamacpp.cache_type_k"},
		{`, "mode": "generate", "generate": 1, "optimizer": null, "runtime": "onnx"`, "job.runtime"},
	} {
		_, err := stateJob(t, tc.extra).Budget()
		var fe *gpumem.FieldError
		require.ErrorAs(t, err, &fe, tc.extra)
		require.Equal(t, tc.field, fe.Field, tc.extra)
	}

	stated, err := ReadPublished(testdata, "published")
	require.NoError(t, err)
	i := slices.IndexFunc(stated, func(s Stated) bool { return s.ID == "llamacpp-issue11200-qwen25coder32b-q8kv-ctx32768" })
	require.GreaterOrEqual(t, i, 0)
	c := Compare(nil, stated[i:i+1]).Cases[0]
	require.Equal(t, KVCache, c.Label)
	require.Equal(t, gpumem.Bytes(4352<<20), c.Measured)
	require.Equal(t, c.Measured, c.Predicted)
}

// TestWeightsLabel: a weights figure is compared with the estimate's
// weights, and an under-estimate of it misses the gate as an allocated
// one does. vLLM's "Loading model weights took 67.7229 GB" (GiB) for
// Llama-3.1-70B W8A8 against int8 linears with one fp32 scale per row.
func TestWeightsLabel(t *testing.T) {
	stated, err := ReadPublished(testdata, "published")
	require.NoError(t, err)
	i := slices.IndexFunc(stated, func(s Stated) bool { return s.ID == "vllm-pr12569-llama31-70b-w8a8-weights" })
	require.GreaterOrEqual(t, i, 0)
	set := Compare(nil, stated[i:i+1])
	require.Empty(t, set.Failures)
	c := set.Cases[0]
	require.Equal(t, Weights, c.Label)
	require.Contains(t, c.Features, FeatureQuant+"int8")
	require.InDelta(t, 0, c.Err(), 0.005, "estimated %s, measured %s", c.Predicted.String(), c.Measured.String())
	require.Empty(t, Check(set))

	// The same figure 10% larger: the estimate is more than 5% under.
	c.Measured = c.Measured * 11 / 10
	v := Check(Set{Cases: []Case{c}})
	require.Len(t, v, 1)
	require.Contains(t, v[0], "weights estimate")
}

// TestLoadParallel: a load job keeps its parallel layout (the weights of
// one rank): vLLM's "model weights take 7.48GiB" for Meta-Llama-3-8B at
// -tp 2 is half of the 14.96 GiB of -tp 1, and so is the estimate.
func TestLoadParallel(t *testing.T) {
	j := new(Job)
	require.NoError(t, json.Unmarshal([]byte(`{"model": "llama-3-8b", "catalog": "llama-3-8b", "kind": "causal",
		"mode": "load", "precision": "bf16", "attention": "sdpa", "parallel": {"TensorParallel": 2}}`), j))
	b, err := j.Budget()
	require.NoError(t, err)
	require.Equal(t, 2, b.Parallel.TensorParallel)

	stated, err := ReadPublished(testdata, "published")
	require.NoError(t, err)
	var got []Case
	for _, id := range []string{"vllm-llama3-8b-tp1-weights", "vllm-llama3-8b-tp2-weights"} {
		i := slices.IndexFunc(stated, func(s Stated) bool { return s.ID == id })
		require.GreaterOrEqual(t, i, 0, id)
		set := Compare(nil, stated[i:i+1])
		require.Empty(t, set.Failures)
		got = append(got, set.Cases[0])
	}
	for _, c := range got {
		require.InDelta(t, 0, c.Err(), 0.005, "%s: estimated %s, measured %s", c.ID, c.Predicted.String(), c.Measured.String())
	}
	require.InDelta(t, float64(got[0].Predicted)/2, float64(got[1].Predicted), float64(got[0].Predicted)/100)
}

// TestJobKeptInputs: bnb_keeps_inputs, bnb_quant_from and
// holds_previous_step reach model.Finetune and budget.Job, name their
// features, and a bad dtype names its field.
func TestJobKeptInputs(t *testing.T) {
	j := stateJob(t, `, "lora_rank": 8, "quant": "nf4", "bnb_unfused": true, "bnb_keeps_inputs": true,
		"bnb_quant_from": "fp16", "holds_previous_step": true, "optimizer": "paged_adamw_32bit"`)
	b, err := j.Budget()
	require.NoError(t, err)
	require.True(t, b.HoldsPreviousStep)
	f := Features(j, Allocated)
	require.Contains(t, f, FeatureKeptInputs)
	require.Contains(t, f, FeatureHeldStep)

	_, err = stateJob(t, `, "lora_rank": 8, "quant": "nf4", "bnb_quant_from": "fp12"`).Budget()
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "job.bnb_quant_from", fe.Field)
	// Kept inputs without the unfused kernels: model.Finetune refuses.
	_, err = stateJob(t, `, "lora_rank": 8, "quant": "nf4", "bnb_keeps_inputs": true`).Budget()
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Finetune.KeepsInputs", fe.Field)
}
