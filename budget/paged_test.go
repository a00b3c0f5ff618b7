package budget

import (
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Qwen2.5-0.5B (hidden 896, 24 layers, 14 heads of 64, 2 KV heads,
// intermediate 4864, vocab 151936, tied): the tensors bitsandbytes pages
// are those of at least 100,000 elements (get_state_buffer: "p.numel() <
// 1e5" stays a device tensor): per layer q_proj and o_proj 896·896 =
// 802,816, k_proj and v_proj 128·896 = 114,688, gate, up and down
// 4864·896 = 4,358,144, so 2·802,816 + 2·114,688 + 3·4,358,144 =
// 14,909,440 elements; ×24 = 357,826,560, plus the embedding 151936·896 =
// 136,134,656: 493,961,216 paged elements. Biases (896, 128) and norms
// (896) are under the threshold.
const (
	qwenPagedElems = 493_961_216
	qwenEmbedElems = 136_134_656
)

// TestPagedOptimizerLevels checks that the paged state of bitsandbytes'
// paged optimizers is at the device level and out of the allocated and
// reserved levels, byte for byte, and that Fits counts of it only the
// largest tensor's.
func TestPagedOptimizerLevels(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "qwen2.5-0.5b", nil)
	for _, tc := range []struct {
		name         string
		paged, plain optimizer.Optimizer
		bytesPerElem int64 // state1 + state2 of a paged tensor
		inBackward   bool
		wantPaged    gpumem.Bytes
		wantResident gpumem.Bytes
	}{
		// 8-bit: state1 and state2 uint8, 2 bytes per element:
		// 2·493,961,216 = 987,922,432; the embedding 2·136,134,656 =
		// 272,269,312.
		{name: "8bit", paged: optimizer.AdamW8bit{Paged: true}, plain: optimizer.AdamW8bit{},
			wantPaged: 987_922_432, wantResident: 272_269_312},
		// 32-bit (bnb.optim.PagedAdamW's optim_bits=32): 8 bytes per
		// element: 8·493,961,216 = 3,951,689,728; 8·136,134,656 =
		// 1,089,077,248.
		{name: "32bit", paged: optimizer.AdamW8bit{Paged: true, Bits32: true}, plain: optimizer.AdamW8bit{Bits32: true},
			wantPaged: 3_951_689_728, wantResident: 1_089_077_248},
		// torchtune's optimizer_in_bwd: one optimizer per parameter, the
		// same buffers.
		{name: "32bit in backward", paged: optimizer.AdamW8bit{Paged: true, Bits32: true}, plain: optimizer.AdamW8bit{Bits32: true},
			inBackward: true, wantPaged: 3_951_689_728, wantResident: 1_089_077_248},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := trainJob(m)
			j.OptimizerInBackward = tc.inBackward
			j.Optimizer = tc.plain
			plain, err := Estimate(j)
			require.NoError(t, err)
			j.Optimizer = tc.paged
			b, err := Estimate(j)
			require.NoError(t, err)

			assert.Equal(t, tc.wantPaged, b.Paged)
			assert.Equal(t, tc.wantResident, b.PagedResident)
			assert.Zero(t, plain.Paged)
			require.Equal(t, plain.Phase, b.Phase)
			// Allocated loses exactly the paged state; the rest of the
			// optimizer state (norms, biases) stays in Optimizer.
			assert.Equal(t, plain.Optimizer-tc.wantPaged, b.Optimizer)
			assert.Equal(t, plain.Allocated()-tc.wantPaged, b.Allocated())
			assert.Equal(t, b.Allocated()+b.Fragmentation, b.Reserved())
			// Device: reserved, context and every paged byte.
			assert.Equal(t, b.Reserved()+b.Context+tc.wantPaged, b.Device())
			assert.Equal(t, componentSum(b), b.Device())
			// Required: the largest paged tensor's state only.
			assert.Equal(t, b.Reserved()+b.Context+tc.wantResident, b.Required())
			assert.Equal(t, plain.Device(), plain.Required())

			d := gpumem.Device{Capacity: b.Required()}
			short, ok := Fits(b, d)
			assert.True(t, ok, "a job whose paged state can page out fits")
			assert.Zero(t, short)
			d.Capacity--
			short, ok = Fits(b, d)
			assert.False(t, ok)
			assert.Equal(t, gpumem.Bytes(1), short)
			assert.InDelta(t, 1.0, Utilization(b, gpumem.Device{Capacity: b.Required()}), 1e-12)
		})
	}
}

// TestPagedOptimizerOffload: with the optimizer offloaded the paged state
// is host memory like the rest.
func TestPagedOptimizerOffload(t *testing.T) {
	t.Parallel()
	j := trainJob(lookupModel(t, "qwen2.5-0.5b", nil))
	j.Optimizer = optimizer.AdamW8bit{Paged: true}
	b, err := Estimate(j)
	require.NoError(t, err)
	j.Offload = OffloadOptimizer
	off, err := Estimate(j)
	require.NoError(t, err)
	assert.Zero(t, off.Paged)
	assert.Zero(t, off.PagedResident)
	assert.Zero(t, off.Optimizer)
	assert.Equal(t, b.Optimizer+b.Paged, off.Host)
	assert.Equal(t, off.Device(), off.Required())
}

// TestPagedOptimizerAllocs: a paged optimizer keeps Estimate
// allocation-free.
func TestPagedOptimizerAllocs(t *testing.T) {
	j := trainJob(lookupModel(t, "qwen2.5-0.5b", nil))
	j.Optimizer = optimizer.AdamW8bit{Paged: true}
	if n := testing.AllocsPerRun(50, func() { _, _ = Estimate(j) }); n != 0 {
		t.Fatalf("Estimate with a paged optimizer: %v allocations", n)
	}
	j.OptimizerInBackward = true
	if n := testing.AllocsPerRun(50, func() { _, _ = Estimate(j) }); n != 0 {
		t.Fatalf("Estimate with a paged optimizer in backward: %v allocations", n)
	}
}

// TestPagedJSON: required_peak appears with a paged optimizer only, and
// paged_optimizer is a component.
func TestPagedJSON(t *testing.T) {
	t.Parallel()
	b := Breakdown{Weights: 100, Paged: 40, PagedResident: 10, Context: 5}
	out, err := b.MarshalJSON()
	require.NoError(t, err)
	assert.Contains(t, string(out), `"device_peak":145`)
	assert.Contains(t, string(out), `"required_peak":115`)
	assert.Contains(t, string(out), `"paged_optimizer":40`)
	b.Paged, b.PagedResident = 0, 0
	out, err = b.MarshalJSON()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "required_peak")
}

// TestPagedDominant: the paged state, which can page out, is never the
// component a job that does not fit is told to shrink.
func TestPagedDominant(t *testing.T) {
	t.Parallel()
	b := Breakdown{Weights: 100, Optimizer: 30, Paged: 400, PagedResident: 50}
	assert.Equal(t, Component{"weights", 100}, b.Dominant())
}
