package budget

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// quantModel prepares Llama-2-7B (or name) with f's quantization.
func quantModel(t *testing.T, name string, f model.Finetune) Model {
	t.Helper()
	s, ok := model.Lookup(name)
	require.True(t, ok, name)
	f.Model = s
	m, err := NewModel(f)
	require.NoError(t, err)
	return m
}

// TestQuantKernels: the kernels' memory for Llama-2-7B's linears (q, k,
// v, o: 4096 → 4096; gate, up: 4096 → 11008; down: 11008 → 4096), by
// hand from the libraries' sources.
func TestQuantKernels(t *testing.T) {
	t.Parallel()
	t.Run("gptq exllamav2 scratch", func(t *testing.T) {
		t.Parallel()
		m := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.INT4, Method: "gptq"})
		// gate/up: temp_dq 4096·11008·2 + 128 = 90,177,664; temp_fwd
		// 11008·2048·8·4 + 128 = 721,420,416; together 811,598,080
		// (down: 90,177,664 + 268,435,584, smaller), rounded to 512:
		// 811,598,336.
		assert.Equal(t, gpumem.Bytes(811_598_336), m.quant.scratch(false))
		assert.Zero(t, m.quant.scratch(true), "exllamav2 refuses training")
		b, err := Estimate(Job{Model: m, Mode: Prefill, Precision: FP16, Batch: 1, SeqLen: 128, Attention: model.SDPA})
		require.NoError(t, err)
		// The cuBLAS workspace (8,519,680) and the scratch, no transient.
		assert.Equal(t, gpumem.Bytes(8_519_680+811_598_336), b.Workspace)
	})
	t.Run("awq dequantizes from 1024 tokens", func(t *testing.T) {
		t.Parallel()
		m := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.INT4, Method: "awq"})
		// 2048 tokens in bf16: the weight in fp16 (4096·11008·2 =
		// 90,177,536) and the input cast to fp16 (2048·in·2): largest for
		// down_proj, 2048·11008·2 = 45,088,768 → 135,266,304.
		fwd, bwd := m.quant.transients(2048, gpumem.BF16, false)
		assert.Equal(t, gpumem.Bytes(135_266_304), fwd)
		assert.Zero(t, bwd)
		// In fp16 no cast: the weight alone.
		fwd, _ = m.quant.transients(2048, gpumem.FP16, false)
		assert.Equal(t, gpumem.Bytes(90_177_536), fwd)
		// 1023 tokens run the GEMM kernel: nothing beyond the output.
		fwd, _ = m.quant.transients(1023, gpumem.FP16, false)
		assert.Zero(t, fwd)
	})
	t.Run("llm.int8", func(t *testing.T) {
		t.Parallel()
		m := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.INT8})
		// Per token: the fp16 cast of a bf16 input (2·in), CA (in), SCA
		// (4), the int32 product (4·out). gate/up: 8192 + 4096 + 4 +
		// 44,032 = 56,324 (down 22,016 + 11,008 + 4 + 16,384 = 49,412);
		// 2048 tokens: 115,351,552.
		fwd, _ := m.quant.transients(2048, gpumem.BF16, false)
		assert.Equal(t, gpumem.Bytes(115_351_552), fwd)
	})
	t.Run("nf4 backward", func(t *testing.T) {
		t.Parallel()
		m := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.NF4, Blockwise: gpumem.Blockwise{Nested: true},
			LoRA: model.LoRA{Rank: 8}})
		// Forward: the fused gemm_4bit (bitsandbytes 0.50), nothing.
		// Backward: the weight dequantized to bf16 (4096·11008·2 =
		// 90,177,536) and its absmax in fp32 (704,512 blocks · 4 =
		// 2,818,048): 92,995,584.
		fwd, bwd := m.quant.transients(2048, gpumem.BF16, true)
		assert.Zero(t, fwd)
		assert.Equal(t, gpumem.Bytes(92_995_584), bwd)
	})
	t.Run("fp4 unfused, fp32 compute", func(t *testing.T) {
		t.Parallel()
		// bitsandbytes before 0.50 with bnb_4bit_compute_dtype float32 on
		// fp16 weights (load_in_4bit's 2023 defaults), 40 tokens:
		// gate/up dequantized to fp16 (4096·11008·2 = 90,177,536) and
		// cast to fp32 (180,355,072); the input and output in fp32
		// (40·(4096 + 11008)·4 = 2,416,640): 272,949,248.
		m := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.FP4, Unquantized: gpumem.FP16,
			ComputeDType: gpumem.FP32, Unfused: true})
		fwd, _ := m.quant.transients(40, gpumem.FP16, false)
		assert.Equal(t, gpumem.Bytes(272_949_248), fwd)
		// One token takes gemv_4bit: the casts only, 1·15,104·4 = 60,416
		// (118 blocks of 512).
		fwd, _ = m.quant.transients(1, gpumem.FP16, false)
		assert.Equal(t, gpumem.Bytes(60_416), fwd)
		// Fused (0.50): the casts only.
		f := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.FP4, Unquantized: gpumem.FP16, ComputeDType: gpumem.FP32})
		fwd, _ = f.quant.transients(40, gpumem.FP16, false)
		assert.Equal(t, gpumem.Bytes(2_416_640), fwd)
	})
	t.Run("fp8 act_quant", func(t *testing.T) {
		t.Parallel()
		m := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.FP8E4M3, FP8Block: [2]int64{128, 128}})
		// The fp8 input (in bytes per token) and one fp32 scale per 128
		// inputs: down_proj 11008 + 4·86 = 11,352 per token; 2048 tokens
		// 23,248,896.
		fwd, _ := m.quant.transients(2048, gpumem.BF16, false)
		assert.Equal(t, gpumem.Bytes(23_248_896), fwd)
		// fp8 weights stay 1 byte whatever the precision.
		b, err := Estimate(Job{Model: m, Mode: Load, Precision: BF16})
		require.NoError(t, err)
		c, err := Estimate(Job{Model: m, Mode: Load, Precision: FP32})
		require.NoError(t, err)
		// fp32 doubles only the unquantized rest: the embedding and the
		// head (2·32000·4096·2 = 524,288,000 more bytes) and 65 norms
		// (8,192 more each).
		assert.Equal(t, gpumem.Bytes(524_288_000+65*8_192), c.Weights-b.Weights)
		assert.Less(t, b.Weights, 8*gpumem.GiB)
	})
	t.Run("an unquantized model has none", func(t *testing.T) {
		t.Parallel()
		m := quantModel(t, "llama-2-7b", model.Finetune{})
		fwd, bwd := m.quant.transients(2048, gpumem.BF16, true)
		assert.Zero(t, fwd+bwd+m.quant.scratch(false))
	})
}

// TestQLoRAWeights: the QLoRA job's weights with the frozen bf16 rest
// (Finetune.Unquantized) against the precision policy's fp32.
func TestQLoRAWeights(t *testing.T) {
	t.Parallel()
	f := model.Finetune{LoRA: model.LoRA{Rank: 64}, Quant: gpumem.NF4, Blockwise: gpumem.Blockwise{Nested: true}}
	old := quantModel(t, "llama-3.1-8b", f)
	f.Unquantized = gpumem.BF16
	fixed := quantModel(t, "llama-3.1-8b", f)
	job := func(m Model) Breakdown {
		b, err := Estimate(Job{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Batch: 1, SeqLen: 512,
			Attention: model.SDPA, Checkpointing: model.FullCheckpointing})
		require.NoError(t, err)
		return b
	}
	b, a := job(old), job(fixed)
	// The embedding and the head (128256·4096 each) drop from fp32 to
	// bf16, and autocast no longer keeps their bf16 copies: 2·2·
	// 1,050,673,152 bytes fewer; each of the 65 norms of 4096 drops from
	// fp32 (16,384) plus its bf16 cast (8,192) to bf16 (8,192): 16,384
	// fewer.
	assert.Equal(t, gpumem.Bytes(4*1_050_673_152+65*16_384), b.Weights-a.Weights)
	assert.InDelta(t, 5.46, float64(a.Weights)/float64(gpumem.GiB), 0.01)
	// The quantization constants are not parameters: Llama-3.1-8B's
	// 8,030,261,248 and the 27,262,976 adapter weights.
	total, trainable := fixed.Params()
	assert.Equal(t, int64(8_030_261_248+27_262_976), total)
	assert.Equal(t, int64(27_262_976), trainable)
}

// TestKVOptions: the cache's dtype and paging.
func TestKVOptions(t *testing.T) {
	m := quantModel(t, "llama-3.1-8b", model.Finetune{})
	gen := func(kv gpumem.DType, block int) Breakdown {
		b, err := Estimate(Job{Model: m, Mode: Generation, Precision: BF16, Attention: model.SDPA, Batch: 4, SeqLen: 2000,
			Generate: 500, KVDType: kv, KVBlock: block})
		require.NoError(t, err)
		return b
	}
	// 32 layers · (K, V) · 8 heads · 128 · 2 bytes = 131,072 bytes per
	// token; 4 sequences of 2500 tokens: 1,310,720,000.
	bf16 := gen(0, 0)
	assert.Equal(t, gpumem.Bytes(1_310_720_000), bf16.KVCache)
	assert.Equal(t, bf16.KVCache/2, gen(gpumem.FP8E4M3, 0).KVCache, "fp8 halves the cache")
	assert.Equal(t, bf16.KVCache/2, gen(gpumem.INT8, 0).KVCache)
	// Q8_0: 34 bytes per 32 elements: 1024-element rows of 1088 bytes.
	assert.Equal(t, bf16.KVCache/2048*1088, gen(gpumem.Q8_0, 0).KVCache)
	// Blocks of 16: 2500 tokens take ceil(2500/16) = 157 blocks, 2512
	// slots: 4·2512·131,072 = 1,317,011,456.
	assert.Equal(t, gpumem.Bytes(1_317_011_456), gen(0, 16).KVCache)
	// Allocation-free with the options set.
	j := Job{Model: m, Mode: Generation, Precision: BF16, Batch: 4, SeqLen: 2000, Generate: 500, KVDType: gpumem.FP8E4M3, KVBlock: 16}
	require.Zero(t, testing.AllocsPerRun(20, func() { _, _ = Estimate(j) }))
}

// TestLoad: a Load job holds the weights and the CUDA context.
func TestLoad(t *testing.T) {
	m := quantModel(t, "llama-3.1-8b", model.Finetune{})
	b, err := Estimate(Job{Model: m, Mode: Load, Precision: BF16})
	require.NoError(t, err)
	p, err := Estimate(Job{Model: m, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 16})
	require.NoError(t, err)
	assert.Equal(t, p.Weights, b.Weights)
	assert.Equal(t, b.Weights+DefaultContext(gpumem.Device{}, CUDAVersion{}, LoadingDefault), b.Device())
	assert.Equal(t, Loaded, b.Phase)
	assert.Equal(t, b.Weights, b.Phases[Loaded])
	assert.Equal(t, "loaded", b.Phase.String())
	assert.Equal(t, "load", Load.String())
	// GPTQ allocates its scratch at load.
	g := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.INT4, Method: "gptq"})
	b, err = Estimate(Job{Model: g, Mode: Load, Precision: FP16, Batch: 1, SeqLen: 1})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(811_598_336), b.Workspace)
	require.Zero(t, testing.AllocsPerRun(20, func() { _, _ = Estimate(Job{Model: g, Mode: Load, Precision: FP16}) }))
	// bitsandbytes quantizes as it loads: Llama-3.1-8B's gate/up/down
	// (14336·4096 = 58,720,256 weights) in bf16, 117,440,512 bytes, and
	// with double quantization their fp32 absmax (917,504 blocks · 4 =
	// 3,670,016): 121,110,528. LLM.int8 converts to fp16 first: the
	// same 117,440,512.
	nf4 := quantModel(t, "llama-3.1-8b", model.Finetune{Quant: gpumem.NF4, Blockwise: gpumem.Blockwise{Nested: true}})
	b, err = Estimate(Job{Model: nf4, Mode: Load, Precision: BF16})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(121_110_528), b.Workspace)
	assert.Equal(t, b.Weights+b.Workspace+DefaultContext(gpumem.Device{}, CUDAVersion{}, LoadingDefault), b.Device())
	i8 := quantModel(t, "llama-3.1-8b", model.Finetune{Quant: gpumem.INT8})
	b, err = Estimate(Job{Model: i8, Mode: Load, Precision: BF16})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(117_440_512), b.Workspace)
}

// TestQuantJobErrors: options that make no sense name their field.
func TestQuantJobErrors(t *testing.T) {
	t.Parallel()
	m := quantModel(t, "llama-2-7b", model.Finetune{})
	gptq := quantModel(t, "llama-2-7b", model.Finetune{Quant: gpumem.INT4, Method: "gptq"})
	tests := []struct {
		name  string
		j     Job
		field string
	}{
		{"kv dtype nf4", Job{Model: m, Mode: Generation, Precision: BF16, Batch: 1, SeqLen: 1, Generate: 1, KVDType: gpumem.NF4}, "Job.KVDType"},
		{"kv dtype prefill", Job{Model: m, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 1, KVDType: gpumem.FP8E4M3}, "Job.KVDType"},
		{"kv block prefill", Job{Model: m, Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 1, KVBlock: 16}, "Job.KVBlock"},
		{"kv block negative", Job{Model: m, Mode: Generation, Precision: BF16, Batch: 1, SeqLen: 1, Generate: 1, KVBlock: -1}, "Job.KVBlock"},
		{"load batch", Job{Model: m, Mode: Load, Precision: BF16, Batch: 4}, "Job.Batch"},
		{"load optimizer", Job{Model: m, Mode: Load, Precision: BF16, Optimizer: optimizer.AdamW{}}, "Job.Optimizer"},
		{"load generate", Job{Model: m, Mode: Load, Precision: BF16, Generate: 3}, "Job.Generate"},
		{"train gptq without adapters", Job{Model: gptq, Mode: Training, Precision: BF16, Batch: 1, SeqLen: 1, Optimizer: optimizer.AdamW{}}, "Job.Model"},
		{"mode", Job{Model: m, Mode: Load + 1, Precision: BF16, Batch: 1, SeqLen: 1}, "Job.Mode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Estimate(tc.j)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
		})
	}
}

// TestLoadNotPlanned: Allocate, LargestBatch and LongestSeqLen refuse a Load
// job by its mode.
func TestLoadNotPlanned(t *testing.T) {
	t.Parallel()
	m := quantModel(t, "gpt2", model.Finetune{})
	j := Job{Model: m, Mode: Load, Precision: BF16}
	for _, f := range []func() error{
		func() error { _, err := Allocate(80*gpumem.GiB, j, nil); return err },
		func() error { _, err := LargestBatch(j, 80*gpumem.GiB); return err },
		func() error { _, err := LongestSeqLen(j, 80*gpumem.GiB); return err },
	} {
		var fe *gpumem.FieldError
		require.ErrorAs(t, f(), &fe)
		assert.Equal(t, "Job.Mode", fe.Field)
	}
}
