package budget

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// levels returns the reserved and device peaks that an overhead predicts
// for an allocated peak a, as Estimate composes them:
// reserved = a·(1+f), device = reserved + Context.
func levels(a float64, ov Overhead) (reserved, device float64) {
	ov = ov.resolve(false, gpumem.Device{})
	reserved = a * (1 + ov.Fragmentation)
	return reserved, reserved + float64(ov.Context)
}

// synthetic returns n observations of jobs whose allocated peaks are
// spread log-uniformly over [512 MiB, 72 GiB], with reserved and device
// peaks made by truth and multiplied by (1 + ε), ε ~ N(0, noise²),
// independently for each level. which says what is measured: "ARD"
// (all three), "D" (device only, the allocated level predicted), "R"
// (reserved only, predicted), "AR".
func synthetic(n int, truth Overhead, noise float64, which string, seed uint64) []Observation {
	rng := rand.New(rand.NewPCG(seed, 1))
	obs := make([]Observation, n)
	for i := range obs {
		a := math.Exp(math.Log(512<<20) + rng.Float64()*(math.Log(72<<30)-math.Log(512<<20)))
		r := a * (1 + truth.Fragmentation) * (1 + noise*rng.NormFloat64())
		r = max(r, a)
		d := (r + float64(truth.Context)) * (1 + noise*rng.NormFloat64())
		d = max(d, r)
		o := Observation{Name: fmt.Sprintf("synthetic-%d", i)}
		if strings.Contains(which, "A") {
			o.Allocated = gpumem.Bytes(a)
		} else {
			o.Predicted = Breakdown{Weights: gpumem.Bytes(a)}
		}
		if strings.Contains(which, "R") {
			o.Reserved = gpumem.Bytes(math.Ceil(r))
		}
		if strings.Contains(which, "D") {
			o.Device = gpumem.Bytes(math.Ceil(d))
		}
		obs[i] = o
	}
	return obs
}

// TestCalibrateSynthetic fits observations generated from a known
// overhead, with and without noise, and checks that the fit recovers it.
// Tolerances: exact data must come back to the byte (context) and 1e-9
// (fragmentation); with 1% noise on each level over 60 observations the
// standard error of f is about 0.01/√60 ≈ 0.0013, so ±0.006 is over 4σ,
// and the context, which only the small jobs pin down, is held to ±15%.
func TestCalibrateSynthetic(t *testing.T) {
	t.Parallel()
	truth := Overhead{Context: 1408237568 /* 1343 MiB */, Fragmentation: 0.07}
	cases := []struct {
		name       string
		which      string
		noise      float64
		n          int
		fragTol    float64
		ctxRelTol  float64
		wantCtx    bool
		wantNoFrag bool
	}{
		{name: "exact/all levels", which: "ARD", n: 5, fragTol: 1e-9, ctxRelTol: 1e-9, wantCtx: true},
		{name: "exact/device only", which: "D", n: 5, fragTol: 1e-6, ctxRelTol: 1e-6, wantCtx: true},
		{name: "exact/reserved only", which: "R", n: 3, fragTol: 1e-9},
		{name: "noisy/all levels", which: "ARD", noise: 0.01, n: 60, fragTol: 0.006, ctxRelTol: 0.15, wantCtx: true},
		{name: "noisy/device only", which: "D", noise: 0.01, n: 60, fragTol: 0.006, ctxRelTol: 0.15, wantCtx: true},
		{name: "noisy/allocated and reserved", which: "AR", noise: 0.01, n: 60, fragTol: 0.006},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := synthetic(tc.n, truth, tc.noise, tc.which, 42)
			got, err := Calibrate(obs)
			require.NoError(t, err)
			t.Logf("Calibrate(%d %q observations, noise %.0f%%) = context %s, fragmentation %.5f (truth %s, %.5f)",
				tc.n, tc.which, 100*tc.noise, got.Context.String(), got.Fragmentation, truth.Context.String(), truth.Fragmentation)
			assert.InDelta(t, truth.Fragmentation, got.Fragmentation, tc.fragTol, "Fragmentation")
			if tc.wantCtx {
				assert.InEpsilon(t, float64(truth.Context), float64(got.Context), tc.ctxRelTol+1e-12, "Context")
			} else {
				assert.Zero(t, got.Context, "Context without device measurements stays the default")
			}
			assert.Zero(t, got.Workspace, "Workspace")
			assert.Zero(t, got.Workspaces, "Workspaces")
		})
	}
}

// TestCalibrateJobs fills observations with Jobs only (the scheduler that
// kept the job spec, not the prediction): Calibrate estimates each job
// and must recover the overhead that made the device figures.
func TestCalibrateJobs(t *testing.T) {
	t.Parallel()
	spec, ok := model.Lookup("gpt2")
	require.True(t, ok)
	m := mustModel(t, spec)
	truth := Overhead{Context: 900 * gpumem.MiB, Fragmentation: 0.12}
	var obs []Observation
	for _, batch := range []int{1, 2, 4, 8, 16} {
		j := Job{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.SDPA,
			Batch: batch, SeqLen: 1024}
		b, err := Estimate(j)
		require.NoError(t, err)
		_, d := levels(float64(b.Allocated()), truth)
		obs = append(obs, Observation{Name: fmt.Sprintf("gpt2-b%d", batch), Job: j, Device: gpumem.Bytes(math.Round(d))})
	}
	got, err := Calibrate(obs)
	require.NoError(t, err)
	assert.InDelta(t, truth.Fragmentation, got.Fragmentation, 1e-6)
	assert.InDelta(t, float64(truth.Context), float64(got.Context), float64(gpumem.MiB)/10)
}

// TestCalibrateBounds checks the bounds f ≥ 0 (reserved equal to
// allocated gives "none", −1) and the refit of the context with f = 0.
func TestCalibrateBounds(t *testing.T) {
	t.Parallel()
	obs := []Observation{
		{Allocated: 10 * gpumem.GiB, Reserved: 10 * gpumem.GiB, Device: 11 * gpumem.GiB},
		{Allocated: 20 * gpumem.GiB, Reserved: 20 * gpumem.GiB, Device: 21 * gpumem.GiB},
	}
	got, err := Calibrate(obs)
	require.NoError(t, err)
	assert.Equal(t, Overhead{Context: gpumem.GiB, Fragmentation: -1}, got)

	// Predictions above the measured reserved level: the unconstrained
	// fit is negative, the result is none, and the context is refit.
	obs = []Observation{
		{Predicted: Breakdown{Weights: 21 * gpumem.GiB}, Reserved: 20 * gpumem.GiB, Device: 21 * gpumem.GiB},
		{Predicted: Breakdown{Weights: 42 * gpumem.GiB}, Reserved: 40 * gpumem.GiB, Device: 41 * gpumem.GiB},
	}
	got, err = Calibrate(obs)
	require.NoError(t, err)
	assert.Equal(t, -1.0, got.Fragmentation)
	assert.Equal(t, gpumem.GiB, got.Context)
}

// TestCalibrateErrors checks that every bad input is a *gpumem.FieldError
// naming the field, wrapping the right category, and never a panic.
func TestCalibrateErrors(t *testing.T) {
	t.Parallel()
	spec, ok := model.Lookup("gpt2")
	require.True(t, ok)
	m := mustModel(t, spec)
	good := Observation{Allocated: 10 * gpumem.GiB, Reserved: 11 * gpumem.GiB, Device: 12 * gpumem.GiB}
	cases := []struct {
		name  string
		obs   []Observation
		field string
		kind  error
	}{
		{"nil", nil, "observations", gpumem.ErrInvalid},
		{"negative allocated", []Observation{good, {Allocated: -1, Reserved: gpumem.GiB}}, "Observation[1].Allocated", gpumem.ErrRange},
		{"negative reserved", []Observation{{Allocated: 1, Reserved: -5}}, "Observation[0].Reserved", gpumem.ErrRange},
		{"negative device", []Observation{{Allocated: 1, Device: -5}}, "Observation[0].Device", gpumem.ErrRange},
		{"reserved below allocated", []Observation{{Allocated: 2 * gpumem.GiB, Reserved: gpumem.GiB}}, "Observation[0].Reserved", gpumem.ErrInvalid},
		{"device below reserved", []Observation{{Allocated: gpumem.GiB, Reserved: 3 * gpumem.GiB, Device: 2 * gpumem.GiB}}, "Observation[0].Device", gpumem.ErrInvalid},
		{"device below allocated", []Observation{{Allocated: 3 * gpumem.GiB, Device: 2 * gpumem.GiB}}, "Observation[0].Device", gpumem.ErrInvalid},
		{"no allocated level", []Observation{good, {Name: "lonely", Reserved: gpumem.GiB}}, "Observation[1]", gpumem.ErrInvalid},
		{"predicted without allocated", []Observation{{Predicted: Breakdown{Context: gpumem.GiB}, Device: 2 * gpumem.GiB}}, "Observation[0].Predicted", gpumem.ErrInvalid},
		{"job Estimate rejects", []Observation{{Job: Job{Model: m, Mode: Training, Precision: BF16}, Reserved: gpumem.GiB}}, "Observation[0].Job", gpumem.ErrInvalid},
		{"nothing but allocated", []Observation{{Allocated: gpumem.GiB}, {Allocated: 2 * gpumem.GiB}}, "observations", gpumem.ErrInvalid},
		{"one device-only", []Observation{{Allocated: gpumem.GiB, Device: 2 * gpumem.GiB}}, "observations", gpumem.ErrInvalid},
		{"device-only, one size", []Observation{
			{Allocated: gpumem.GiB, Device: 2 * gpumem.GiB},
			{Allocated: gpumem.GiB, Device: 2*gpumem.GiB + gpumem.MiB},
		}, "observations", gpumem.ErrInvalid},
		{"no room for a context", []Observation{
			{Predicted: Breakdown{Weights: 10 * gpumem.GiB}, Device: 10 * gpumem.GiB},
			{Predicted: Breakdown{Weights: 20 * gpumem.GiB}, Device: 20 * gpumem.GiB},
			{Allocated: 10 * gpumem.GiB, Reserved: 11 * gpumem.GiB},
		}, "Overhead.Context", gpumem.ErrRange},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Calibrate(tc.obs)
			require.Error(t, err)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field, "Calibrate() error = %v", err)
			assert.ErrorIs(t, err, tc.kind)
		})
	}
	// A job's own validation error stays reachable.
	_, err := Calibrate([]Observation{{Job: Job{Model: m, Mode: Training, Precision: BF16}, Reserved: gpumem.GiB}})
	var inner *gpumem.FieldError
	require.ErrorAs(t, errors.Unwrap(err), &inner)
}

// FuzzCalibrate: no input panics, and a fit returns a usable overhead.
func FuzzCalibrate(f *testing.F) {
	f.Add(int64(10<<30), int64(11<<30), int64(12<<30), int64(20<<30), int64(0), int64(22<<30))
	f.Add(int64(1), int64(0), int64(2), int64(1), int64(0), int64(2))
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(0), int64(0))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(1), int64(1), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, a1, r1, d1, a2, r2, d2 int64) {
		obs := []Observation{
			{Allocated: gpumem.Bytes(a1), Reserved: gpumem.Bytes(r1), Device: gpumem.Bytes(d1)},
			{Predicted: Breakdown{Weights: gpumem.Bytes(a2)}, Reserved: gpumem.Bytes(r2), Device: gpumem.Bytes(d2)},
		}
		ov, err := Calibrate(obs)
		if err != nil {
			var fe *gpumem.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Calibrate() error %v is not a *gpumem.FieldError", err)
			}
			return
		}
		if ov.Context < 0 || math.IsNaN(ov.Fragmentation) || math.IsInf(ov.Fragmentation, 0) {
			t.Fatalf("Calibrate() = %+v, want a non-negative context and a finite fragmentation", ov)
		}
	})
}

// publishedObservation is a published measurement turned into an
// Observation, with the group (source family) used to split the data.
type publishedObservation struct {
	group string
	obs   Observation
}

// publishedObservations returns the rows of testdata/published/peaks.jsonl
// that measure the reserved or device level of a job whose allocated
// level is either measured in the same run or predicted by Estimate from
// a stated configuration. Rows left out, and why:
//   - titan-* (FSDP over 8 and 128 GPUs: Estimate does not model sharding
//     yet), cosmosrl-* (configuration unstated, and the torch and NVML
//     figures are printed in different, ambiguous units);
//   - tt-llama2-7b-qlora-* (the notes say the training peak is probably
//     the initialization transient, bf16 weights materialized before
//     quantization, which Estimate does not model);
//   - aoq-*-int8wo/int4wo (torchao weight-only int8/int4 storage is not a
//     Finetune.Quant format);
//   - tt-issue1185-* (which statistic, and GB or GiB, is not known).
func publishedObservations(t *testing.T) []publishedObservation {
	t.Helper()
	rows := loadPublished(t)
	val := func(id string) gpumem.Bytes {
		r, ok := rows[id]
		require.True(t, ok, id)
		return gpumem.Bytes(r.Value)
	}
	spec := func(name string) model.Spec {
		s, ok := model.Lookup(name)
		require.True(t, ok, name)
		return s
	}
	estimate := func(id string, j Job) Breakdown {
		b, err := Estimate(j)
		require.NoError(t, err, id)
		return b
	}
	var out []publishedObservation
	add := func(group string, o Observation) { out = append(out, publishedObservation{group, o}) }

	// hf-anatomy: bert-large-uncased (AutoModelForSequenceClassification,
	// 2 labels: BertModel with its pooler and a classifier), seq 512,
	// V100-16GB, NVML "used" after trainer.train(), HF Trainer of
	// January 2022: dropout 0.1, eager attention, torch ≤ 1.10 optimizers
	// looping over tensors.
	bertSpec := spec("bert-large")
	bertSpec.Head = model.HeadSeqCls
	bert := mustModel(t, bertSpec)
	add("hf-anatomy", Observation{Name: "hf-anatomy-cuda-context-v100",
		Predicted: Breakdown{Weights: 512}, // torch.ones((1, 1)): one 512-byte block
		Device:    val("hf-anatomy-cuda-context-v100")})
	add("hf-anatomy", Observation{Name: "hf-anatomy-bert-large-load-v100",
		Predicted: Breakdown{Weights: gpumem.Bytes(4 * bert.params)},
		Device:    val("hf-anatomy-bert-large-load-v100")})
	for _, c := range []struct {
		id        string
		batch, ga int
		prec      Precision
		opt       optimizer.Optimizer
		ckpt      model.Checkpointing
	}{
		{"hf-anatomy-bert-large-bs4-fp32-adamw", 4, 1, FP32, optimizer.AdamW{Impl: optimizer.ForLoop}, model.NoCheckpointing},
		{"hf-anatomy-bert-large-bs1-ga4-fp32-adamw", 1, 4, FP32, optimizer.AdamW{Impl: optimizer.ForLoop}, model.NoCheckpointing},
		{"hf-anatomy-bert-large-bs1-ga4-gc-fp32-adamw", 1, 4, FP32, optimizer.AdamW{Impl: optimizer.ForLoop}, model.FullCheckpointing},
		{"hf-anatomy-bert-large-bs4-fp16-adamw", 4, 1, FP16Mixed, optimizer.AdamW{Impl: optimizer.ForLoop}, model.NoCheckpointing},
		{"hf-anatomy-bert-large-bs1-ga4-gc-fp16-adamw", 1, 4, FP16Mixed, optimizer.AdamW{Impl: optimizer.ForLoop}, model.FullCheckpointing},
		{"hf-anatomy-bert-large-bs4-fp32-adafactor", 4, 1, FP32, optimizer.Adafactor{}, model.NoCheckpointing},
		{"hf-anatomy-bert-large-bs1-ga4-gc-fp16-adafactor", 1, 4, FP16Mixed, optimizer.Adafactor{}, model.FullCheckpointing},
		{"hf-anatomy-bert-large-bs4-fp32-adam8bit", 4, 1, FP32, optimizer.Adam8bit{}, model.NoCheckpointing},
		{"hf-anatomy-bert-large-bs1-ga4-gc-fp16-adam8bit", 1, 4, FP16Mixed, optimizer.Adam8bit{}, model.FullCheckpointing},
	} {
		j := Job{Model: bert, Mode: Training, Precision: c.prec, Optimizer: c.opt, Attention: model.Eager,
			Batch: c.batch, SeqLen: 512, GradAccum: c.ga, Checkpointing: c.ckpt, Dropout: true}
		add("hf-anatomy", Observation{Name: c.id, Predicted: estimate(c.id, j), Device: val(c.id)})
	}

	// torchtune, allocated and reserved measured together after model
	// initialization (GB = 1e9 before August 2024, GiB after).
	add("tt-init", Observation{Name: "tt-llama2-7b-lora-init",
		Allocated: val("tt-llama2-7b-lora-init-alloc"), Reserved: val("tt-llama2-7b-lora-init-reserved")})
	add("tt-init", Observation{Name: "tt-llama32-3b-lora-init",
		Allocated: val("tt-llama32-3b-lora-init-alloc"), Reserved: val("tt-llama32-3b-lora-init-reserved")})
	// torchtune RFC #389: the setup peak allocated, and the reserved bytes
	// read after setup, which the caching allocator keeps from the peak
	// (a lower bound of the peak reserved).
	add("tt-init", Observation{Name: "tt-rfc389-llama2-7b-bf16-setup",
		Allocated: val("tt-rfc389-llama2-7b-bf16-setup-peak"), Reserved: val("tt-rfc389-llama2-7b-bf16-setup-reserved")})

	// torchtune LoRA tutorial, llama2/7B_lora_single_device: bf16 base and
	// adapters, batch 2, sequences of at most 512 (512 taken),
	// activation checkpointing, accumulation over 64 micro-batches,
	// torch AdamW, sdpa; max_memory_reserved.
	llama2 := spec("llama-2-7b")
	all := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}
	for _, c := range []struct {
		id      string
		rank    int64
		targets []string
	}{
		{"tt-llama2-7b-lora-qv-r8", 8, []string{"q_proj", "v_proj"}},
		{"tt-llama2-7b-lora-all-r8", 8, all},
		{"tt-llama2-7b-lora-qv-r64", 64, []string{"q_proj", "v_proj"}},
		{"tt-llama2-7b-lora-all-r64", 64, all},
	} {
		m, err := NewModel(model.Finetune{Model: llama2, LoRA: model.LoRA{Rank: c.rank, Targets: c.targets, DType: gpumem.BF16}})
		require.NoError(t, err, c.id)
		j := Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Attention: model.SDPA,
			Batch: 2, SeqLen: 512, GradAccum: 64, Checkpointing: model.FullCheckpointing}
		add("tt-lora", Observation{Name: c.id, Predicted: estimate(c.id, j), Reserved: val(c.id)})
	}

	// torchao generate.py, bf16, batch 1, prompt "Hello, my name is" (6
	// Llama tokens with BOS), 100 new tokens; max_memory_reserved.
	for _, c := range []struct{ id, model string }{
		{"aoq-llama2-7b-bf16-generate", "llama-2-7b"},
		{"aoq-llama3-8b-bf16-generate", "llama-3-8b"},
	} {
		j := Job{Model: mustModel(t, spec(c.model)), Mode: Generation, Precision: BF16, Attention: model.SDPA,
			Batch: 1, SeqLen: 6, Generate: 100}
		add("aoq", Observation{Name: c.id, Predicted: estimate(c.id, j), Reserved: val(c.id)})
	}

	// compressed-tensors #587: one OOM message with all three levels
	// (current values at the failed allocation).
	add("ct587", Observation{Name: "ct587-oom",
		Allocated: gpumem.MustParseBytes("75.31GiB"), Reserved: gpumem.MustParseBytes("77.14GiB"),
		Device: val("ct587-oom-process-total-79gib")})
	return out
}

// heldOutError returns the mean absolute relative error of the reserved
// and device peaks predicted under ov for the observations, one term per
// measured level, each predicted from the allocated level alone: over
// all levels, and over the reserved and the device levels apart.
func heldOutError(t *testing.T, obs []Observation, ov Overhead) (all, reserved, device float64) {
	t.Helper()
	var sumR, sumD float64
	nR, nD := 0, 0
	for i := range obs {
		o := &obs[i]
		a, err := o.allocated("test")
		require.NoError(t, err)
		r, d := levels(a, ov)
		if o.Reserved > 0 {
			sumR += math.Abs(r-float64(o.Reserved)) / float64(o.Reserved)
			nR++
		}
		if o.Device > 0 {
			sumD += math.Abs(d-float64(o.Device)) / float64(o.Device)
			nD++
		}
	}
	mean := func(s float64, n int) float64 {
		if n == 0 {
			return math.NaN()
		}
		return s / float64(n)
	}
	return mean(sumR+sumD, nR+nD), mean(sumR, nR), mean(sumD, nD)
}

// TestCalibratePublished fits the overhead on half of the published rows
// that measure reserved or device peaks (alternate rows of each source
// family, so both halves mix the families) and compares, on the other
// half, the mean absolute relative error of the fitted overhead with that
// of the defaults; then the halves swap. The fit may not be worse than
// the defaults over all held-out levels of either half.
//
// What the data support (logged, figures as of this test's writing): the
// device level improves from about 20% to 7–11% error, because the
// defaults' 426 MiB context is far below the 1343 MiB measured on the
// V100 (CUDA 11.2, eager module loading) that supplies every device-only
// row; the reserved level stays at about 3.5–4% either way, since the
// fitted fragmentation (0.038 to 0.054 on the halves) is close to the default 0.05. The
// fitted context mostly describes that one V100 setup, so these rows do
// not justify changing the defaults for current GPUs.
func TestCalibratePublished(t *testing.T) {
	t.Parallel()
	all := publishedObservations(t)
	var halves [2][]Observation
	seen := map[string]int{}
	for _, p := range all {
		halves[seen[p.group]%2] = append(halves[seen[p.group]%2], p.obs)
		seen[p.group]++
	}
	full := append(slices.Clone(halves[0]), halves[1]...)
	ov, err := Calibrate(full)
	require.NoError(t, err)
	e, eR, eD := heldOutError(t, full, ov)
	d, dR, dD := heldOutError(t, full, Overhead{})
	t.Logf("fit on all %d observations: context %s, fragmentation %.4f; in-sample mean |error| %.1f%% (reserved %.1f%%, device %.1f%%), defaults %.1f%% (%.1f%%, %.1f%%)",
		len(full), ov.Context.String(), ov.Fragmentation, 100*e, 100*eR, 100*eD, 100*d, 100*dR, 100*dD)
	for k := range halves {
		train, test := halves[k], halves[1-k]
		ov, err := Calibrate(train)
		require.NoError(t, err, "half %d", k)
		e, eR, eD := heldOutError(t, test, ov)
		d, dR, dD := heldOutError(t, test, Overhead{})
		t.Logf("fit on half %d (%d observations): context %s, fragmentation %.4f; held-out half (%d): mean |error| %.1f%% (reserved %.1f%%, device %.1f%%), defaults %.1f%% (%.1f%%, %.1f%%)",
			k, len(train), ov.Context.String(), ov.Fragmentation, len(test), 100*e, 100*eR, 100*eD, 100*d, 100*dR, 100*dD)
		assert.LessOrEqual(t, e, d, "held-out error of the fit on half %d exceeds the defaults'", k)
	}
	for _, p := range all {
		a, err := p.obs.allocated("test")
		require.NoError(t, err)
		r, d := levels(a, ov)
		if p.obs.Reserved > 0 {
			t.Logf("%-44s reserved measured %9s, default %+6.1f%%, fitted %+6.1f%%", p.obs.Name, p.obs.Reserved.String(),
				100*(func() float64 { r0, _ := levels(a, Overhead{}); return r0 })()/float64(p.obs.Reserved)-100,
				100*r/float64(p.obs.Reserved)-100)
		}
		if p.obs.Device > 0 {
			t.Logf("%-44s device   measured %9s, default %+6.1f%%, fitted %+6.1f%%", p.obs.Name, p.obs.Device.String(),
				100*(func() float64 { _, d0 := levels(a, Overhead{}); return d0 })()/float64(p.obs.Device)-100,
				100*d/float64(p.obs.Device)-100)
		}
	}
}

// Three jobs measured on one node: torch's peaks and NVML's process
// usage. Calibrate fits the fragmentation from reserved against
// allocated, and the context from device against reserved.
func ExampleCalibrate() {
	obs := []Observation{
		{Name: "job-1", Allocated: 10 * gpumem.GiB, Reserved: 10*gpumem.GiB + 819*gpumem.MiB, Device: 11*gpumem.GiB + 283*gpumem.MiB},
		{Name: "job-2", Allocated: 20 * gpumem.GiB, Reserved: 21*gpumem.GiB + 614*gpumem.MiB, Device: 22*gpumem.GiB + 78*gpumem.MiB},
		{Name: "job-3", Allocated: 40 * gpumem.GiB, Reserved: 43*gpumem.GiB + 205*gpumem.MiB, Device: 43*gpumem.GiB + 693*gpumem.MiB},
	}
	ov, err := Calibrate(obs)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("context %s, fragmentation %.3f\n", ov.Context.String(), ov.Fragmentation)
	// Output:
	// context 488.00 MiB, fragmentation 0.080
}
