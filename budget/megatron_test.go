package budget

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// rankParams returns the parameters the rank v holds (every parameter
// is trained in these tests).
func rankParams(m *Model, v *rankView) int64 { return m.rankTrainable(v) }

// Under tensor parallelism every matrix and the vocabulary split; the
// norms stay whole. Llama-2-7B: 6,738,415,616 parameters of which
// 2·32·4096 + 4096 = 266,240 are RMSNorm weights.
func TestTensorParallelParams(t *testing.T) {
	m := lookupModel(t, "llama-2-7b", nil)
	total, _ := m.Params()
	const norms = 2*32*4096 + 4096
	for _, tp := range []int{1, 2, 4, 8} {
		v := Parallel{TensorParallel: tp}.view(&m, false)
		want := (total-norms)/int64(tp) + norms
		if got := rankParams(&m, &v); got != want {
			t.Errorf("t=%d: %d parameters per rank, want (%d − %d)/%d + %d = %d", tp, got, total, norms, tp, norms, want)
		}
	}
}

// With 8 KV heads over 16 ranks each rank keeps one KV head of k_proj and
// v_proj (8192×128 each): Llama-2-70B, 80 layers.
func TestTensorParallelKVReplicated(t *testing.T) {
	m := lookupModel(t, "llama-2-70b", nil)
	v8 := Parallel{TensorParallel: 8}.view(&m, false)
	v16 := Parallel{TensorParallel: 16}.view(&m, false)
	// From 8 to 16 ranks everything split halves except k and v, which
	// stay at one head (8192·128 elements each, per layer).
	total, _ := m.Params()
	const norms = 2*80*8192 + 8192
	const kv = 2 * 80 * 8192 * 128 // per rank at both degrees
	p8, p16 := rankParams(&m, &v8), rankParams(&m, &v16)
	if want := (total-norms)/8 + norms; p8 != want {
		t.Errorf("t=8: %d, want %d", p8, want)
	}
	if want := (p8-norms-kv)/2 + norms + kv; p16 != want {
		t.Errorf("t=16: %d, want %d (k and v replicated, one head per rank)", p16, want)
	}
}

// Pipeline stages: the first holds the embedding and ceil(L/p) blocks,
// the last the blocks, final norm and head.
func TestPipelineStageParams(t *testing.T) {
	m := lookupModel(t, "llama-2-7b", nil)
	first := Parallel{PipelineParallel: 4}.view(&m, false)
	last := Parallel{PipelineParallel: 4}.view(&m, true)
	const layer = 4*4096*4096 + 3*4096*11008 + 2*4096
	const embed = 32000 * 4096
	if got, want := rankParams(&m, &first), int64(embed+8*layer); got != want {
		t.Errorf("first stage %d, want %d", got, want)
	}
	if got, want := rankParams(&m, &last), int64(8*layer+4096+embed); got != want {
		t.Errorf("last stage %d, want %d", got, want)
	}
}

// Korthikanti et al. 2022, eq. 5 and 6 with the interleaved factor
// (§4.2.3): the first pipeline stage of GPT-3 175B (t = 8, p = 8, m = 3,
// micro-batch 1, s = 2048; Table 3) keeps (sbhL/t)·34·(1 + (p−1)/(p·m))
// bytes of block activations under sequence parallelism and selective
// recomputation, and (sbhL/t)(34 + 5as/h)(1 + (p−1)/(pm)) without the
// recomputation. The per-op model adds only the LayerNorms' fp32
// statistics (16 bytes per token and layer, /t) and the 2-byte attention
// scale, which the paper leaves out.
func TestKorthikantiPipelineFirstStage(t *testing.T) {
	const s, b, h, a, L, tp, pp, vm = 2048, 1, 12288, 96, 96, 8, 8, 3
	cfg := fmt.Sprintf(`{"model_type": "gpt2", "n_embd": %d, "n_head": %d, "n_layer": %d, "vocab_size": 51200,
		"n_positions": 2048, "activation_function": "gelu", "torch_dtype": "bfloat16"}`, h, a, L)
	spec, err := model.FromHFConfig(strings.NewReader(cfg))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ModelOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		policy   model.Checkpointing
		perLayer int64 // Table 2's per-layer bytes, before the extras
		extra    int64
	}{
		{model.SelectiveCheckpointing, 34 * s * b * h / tp, 16 * s * b / tp},
		{model.NoCheckpointing, 34*s*b*h/tp + 5*a*s*s*b/tp, 16*s*b/tp + 2},
	} {
		j := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.Adam{}, Batch: b, SeqLen: s,
			GradAccum: 64, Dropout: true, Checkpointing: c.policy,
			Parallel: Parallel{TensorParallel: tp, SequenceParallel: true, PipelineParallel: pp, VirtualStages: vm}}
		f, err := activations(&j, gpumem.BF16)
		if err != nil {
			t.Fatal(err)
		}
		v := j.Parallel.view(&j.Model, false)
		got := f.stage(&j, &v).blocks
		// L/p layers × (p·m + p − 1)/m micro-batches' worth.
		want := (c.perLayer + c.extra) * (L / pp) * (pp*vm + pp - 1) / vm
		if int64(got) != want {
			t.Errorf("%v: first stage keeps %d bytes of blocks, Korthikanti eq. 5/6 with the extras %d", c.policy, got, want)
		}
		paper := float64(c.perLayer) * L * (1 + float64(pp-1)/float64(pp*vm))
		if r := float64(got)/paper - 1; r < 0 || r > 0.01 {
			t.Errorf("%v: %.4f%% from the paper's figure %.4g GiB", c.policy, 100*r, paper/(1<<30))
		}
		// The whole estimate runs, with the first stage the most loaded.
		br, err := Estimate(j)
		if err != nil {
			t.Fatal(err)
		}
		if br.Stage != 0 {
			t.Errorf("%v: most loaded stage %d, want the first", c.policy, br.Stage)
		}
	}
}

// Tensor and sequence parallelism, expert parallelism and pipeline
// stages each lower the per-rank estimate of a large job, in the order
// the paper's Table 2 implies.
func TestParallelEstimateOrdering(t *testing.T) {
	m := lookupModel(t, "llama-2-70b", nil)
	base := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{Impl: optimizer.Fused},
		Batch: 1, SeqLen: 4096, Attention: model.Flash, GradAccum: 8}
	at := func(p Parallel) Breakdown {
		j := base
		j.Parallel = p
		b, err := Estimate(j)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		return b
	}
	one := at(Parallel{})
	tp := at(Parallel{TensorParallel: 8})
	sp := at(Parallel{TensorParallel: 8, SequenceParallel: true})
	pp := at(Parallel{TensorParallel: 8, SequenceParallel: true, PipelineParallel: 4})
	z := at(Parallel{DataParallel: 4, Stage: 1, TensorParallel: 8, SequenceParallel: true, PipelineParallel: 4})
	if !(one.Device() > tp.Device() && tp.Device() > sp.Device() && sp.Device() > pp.Device() && pp.Device() > z.Device()) {
		t.Errorf("per-rank device bytes not decreasing: 1 GPU %v, TP8 %v, +SP %v, +PP4 %v, +ZeRO-1 DP4 %v",
			one.Device(), tp.Device(), sp.Device(), pp.Device(), z.Device())
	}
	if tp.Activations == sp.Activations {
		t.Errorf("sequence parallelism left the activations at %v", tp.Activations)
	}
	// Model states shrink by the number of model-parallel ranks, up to the
	// replicated norms and the allocator's rounding.
	if r := float64(one.Master) / float64(tp.Master); r < 7.99 || r > 8.01 {
		t.Errorf("master weights shrink %.3f× under TP 8", r)
	}
}

// Expert parallelism divides the routed experts only.
func TestExpertParallelWeights(t *testing.T) {
	spec, ok := model.Lookup("mixtral-8x7b")
	if !ok {
		t.Fatal("mixtral-8x7b not in the catalog")
	}
	m, err := ModelOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	v1 := Parallel{}.view(&m, false)
	v8 := Parallel{DataParallel: 8, ExpertParallel: 8}.view(&m, false)
	var experts int64
	for i := range m.groups {
		if g := &m.groups[i]; g.expert {
			experts += g.elems * g.count
		}
	}
	total := rankParams(&m, &v1)
	if got, want := rankParams(&m, &v8), total-experts+experts/8; got != want || experts == 0 {
		t.Errorf("EP 8: %d parameters per rank, want %d (experts %d)", got, want, experts)
	}
}

// DeepSpeed ZeRO-3 keeps small tensors whole and gathers up to
// max_live_parameters; FSDP FULL_SHARD gathers two blocks.
func TestZeRO3Transients(t *testing.T) {
	m := lookupModel(t, "llama-2-70b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{Impl: optimizer.Fused}, Batch: 1, SeqLen: 2048,
		Attention: model.Flash, Checkpointing: model.FullCheckpointing, Parallel: Parallel{DataParallel: 64, Stage: 3}}
	ds, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	j.Parallel.FSDP = true
	fsdp, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := m.weights(gpumem.BF16, false)
	small, _ := m.weightsOf(gpumem.BF16, false, false, nil, zero3Persistence)
	live, _ := gpumem.BF16.Size(zero3MaxLive + zero3Prefetch)
	if want := partition(full-small, 64) + small + live; ds.Weights != want {
		t.Errorf("ZeRO-3 weights %v, want shard %v + persistent %v + live %v", ds.Weights, partition(full-small, 64), small, live)
	}
	layer, _ := m.layerWeights(gpumem.BF16, nil)
	if want := partition(full, 64) + 2*layer; fsdp.Weights != want {
		t.Errorf("FSDP weights %v, want shard + two blocks %v", fsdp.Weights, want)
	}
}

// Parameter offload (ZeRO-Infinity) moves the rank's partition of the
// weights and gradients to the host: the GPU keeps the persistent small
// tensors, the live gathered parameters and one reduce bucket.
func TestOffloadParams(t *testing.T) {
	m := lookupModel(t, "llama-2-70b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{Impl: optimizer.Fused}, Batch: 1, SeqLen: 2048,
		Attention: model.Flash, Checkpointing: model.FullCheckpointing, Parallel: Parallel{DataParallel: 8, Stage: 3},
		Offload: OffloadOptimizer}
	opt, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	j.Offload |= OffloadParams
	both, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := m.weights(gpumem.BF16, false)
	small, _ := m.weightsOf(gpumem.BF16, false, false, nil, zero3Persistence)
	live, _ := gpumem.BF16.Size(zero3MaxLive + zero3Prefetch)
	if want := small + live; both.Weights != want {
		t.Errorf("GPU weights %v, want persistent %v + live %v", both.Weights, small, live)
	}
	grads, _ := m.weights(gpumem.BF16, true)
	if want := opt.Host + partition(full-small, 8) + partition(grads, 8); both.Host != want {
		t.Errorf("host %v, want optimizer %v + weight and gradient partitions = %v", both.Host, opt.Host, want)
	}
	if both.Device() >= opt.Device() {
		t.Errorf("parameter offload did not lower the GPU peak: %v vs %v", both.Device(), opt.Device())
	}
	j.Parallel.Stage = 2
	if _, err := Estimate(j); !errors.Is(err, gpumem.ErrInvalid) {
		t.Errorf("parameter offload at stage 2: %v, want ErrInvalid", err)
	}
}

// BenchmarkEstimateParallel: a 70B job over TP 8 × PP 4 × DP 2 with
// ZeRO-1 (two stages estimated, the rank's optimizer shapes built).
func BenchmarkEstimateParallel(b *testing.B) {
	m := lookupModel(b, "llama-2-70b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{Impl: optimizer.Fused},
		Batch: 1, SeqLen: 4096, Attention: model.Flash, GradAccum: 8,
		Parallel: Parallel{DataParallel: 2, Stage: 1, TensorParallel: 8, SequenceParallel: true, PipelineParallel: 4}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Estimate(j); err != nil {
			b.Fatal(err)
		}
	}
}
