package model_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestEagerInferenceLiveSet: without a graph, a Llama block's eager
// attention holds q, k and v beside its input, and at the softmax
// (softmax(scores, dtype=torch.float32).to(query.dtype), whose CUDA
// dispatch aten/src/ATen/native/SoftMax.cpp reads fp16 scores directly
// but converts any other dtype to an fp32 copy first) the scores, the
// conversion and the fp32 result: 10 bytes per score in bf16; 8 in fp16
// (scores, result, then the cast copy); 8 in fp32 (scores and result,
// the conversion a no-op). Beside the blocks, the eager 4-D mask (b·s²
// in the compute dtype) and the rotary tables (2·b·s·d) live through
// the forward. The model's forward holds three hidden-size tensors
// through a layer's attention (inputs_embeds, the layer's input and
// input_layernorm's output: heldFourFamilies).
//
// Batch 1, seq 512, hidden 64, 4 heads of 16: P = 4·512² = 1,048,576
// scores; q, k, v and the three held tensors are 32,768 elements each;
// the MLP's 3·512·128 = 196,608 elements are smaller than the
// attention's.
func TestEagerInferenceLiveSet(t *testing.T) {
	s := model.Spec{Family: "llama", DType: gpumem.BF16, Layers: 2, Hidden: 64, Heads: 4, KVHeads: 4, HeadDim: 16,
		Intermediate: 128, Vocab: 100, Positions: 4096, Norm: model.RMSNorm, Gated: true}
	require.NoError(t, s.Validate())
	const P, x = 1 << 20, 32768
	for _, c := range []struct {
		dt       gpumem.DType
		e, score int64
	}{{gpumem.BF16, 2, 10}, {gpumem.FP16, 2, 8}, {gpumem.FP32, 4, 8}} {
		a, err := s.Activations(model.Workload{Batch: 1, SeqLen: 512, DType: c.dt})
		require.NoError(t, err)
		require.Equal(t, gpumem.Bytes(c.e*6*x+c.score*P), a.Layers[0].Forward, "%v", c.dt)
		require.Equal(t, gpumem.Bytes(c.e*512*512+2*c.e*512*16), a.Shared, "%v", c.dt)
	}
	// A fused kernel builds no 4-D float mask.
	a, err := s.Activations(model.Workload{Batch: 1, SeqLen: 512, Attention: model.SDPA})
	require.NoError(t, err)
	require.Equal(t, gpumem.Bytes(2*2*512*16), a.Shared)
}

// TestEagerNoGradOracle: the recorded CPU peaks of one Llama eager
// attention core under torch.no_grad (tools/oracle/step.py,
// testdata/oracle/step.json; the input and the mask exist before the
// window) equal the block's no-graph live set without the three
// hidden-size tensors the model holds through it (its input among them),
// to 16 bytes: q, k, v and 8 bytes per score in fp32, 10 in bf16 (CPU's
// softmax(dtype=float32) converts a bf16 input as CUDA's does).
func TestEagerNoGradOracle(t *testing.T) {
	raw, err := os.ReadFile("../testdata/oracle/step.json")
	require.NoError(t, err)
	var rec struct {
		Eager []struct {
			DType string `json:"dtype"`
			Batch int64  `json:"batch"`
			Heads int64  `json:"heads"`
			Seq   int64  `json:"seq"`
			Peak  int64  `json:"peak"`
		} `json:"eager_nograd"`
	}
	require.NoError(t, json.Unmarshal(raw, &rec))
	require.Len(t, rec.Eager, 2)
	for _, r := range rec.Eager {
		dt, e := gpumem.FP32, int64(4)
		if r.DType == "bf16" {
			dt, e = gpumem.BF16, 2
		}
		h := r.Heads * 16
		s := model.Spec{Family: "llama", DType: dt, Layers: 1, Hidden: h, Heads: r.Heads, KVHeads: r.Heads, HeadDim: 16,
			Intermediate: 64, Vocab: 100, Positions: 4096, Norm: model.RMSNorm, Gated: true}
		a, err := s.Activations(model.Workload{Batch: r.Batch, SeqLen: r.Seq, DType: dt})
		require.NoError(t, err)
		live := int64(a.Layers[0].Forward) - 3*e*r.Batch*r.Seq*h
		require.InDelta(t, float64(live), float64(r.Peak), 16, "%s: model %d, measured %d", r.DType, live, r.Peak)
	}
}

// TestBlockBackwardOracle: a Llama block's backward transient (the
// larger of the MLP's two T·I tensors over what it saved and the
// attention core's gradients less the MLP's saved tensors, released
// before the core's backward runs) against the recorded CPU peaks of
// tools/oracle/step.py (block_backward: fp32, sequence 256 and 512, MLP
// 172 and 2048 wide), which also hold the parameters' gradients made so
// far: within 0.85–1.12 of the measurement. Counting the whole block's
// saved tensors under the core's transient, and three T·I tensors for
// the MLP, was 1.27–1.64 times it.
func TestBlockBackwardOracle(t *testing.T) {
	raw, err := os.ReadFile("../testdata/oracle/step.json")
	require.NoError(t, err)
	var rec struct {
		Blocks []struct {
			Batch        int64 `json:"batch"`
			Seq          int64 `json:"seq"`
			Hidden       int64 `json:"hidden"`
			Heads        int64 `json:"heads"`
			HeadDim      int64 `json:"head_dim"`
			Intermediate int64 `json:"intermediate"`
			Peak         int64 `json:"backward_peak"`
		} `json:"block_backward"`
	}
	require.NoError(t, json.Unmarshal(raw, &rec))
	require.Len(t, rec.Blocks, 4)
	for _, r := range rec.Blocks {
		s := model.Spec{Family: "llama", DType: gpumem.FP32, Layers: 1, Hidden: r.Hidden, Heads: r.Heads, KVHeads: r.Heads,
			HeadDim: r.HeadDim, Intermediate: r.Intermediate, Vocab: 100, Positions: 4096, Norm: model.RMSNorm, Gated: true}
		a, err := s.Activations(model.Workload{Batch: r.Batch, SeqLen: r.Seq, DType: gpumem.FP32, Train: true})
		require.NoError(t, err)
		ratio := float64(a.Layers[0].Backward) / float64(r.Peak)
		require.True(t, ratio >= 0.85 && ratio <= 1.12, "seq %d, I %d: model %v, measured %d (%.3f)", r.Seq, r.Intermediate, a.Layers[0].Backward, r.Peak, ratio)
	}
}

// TestAutocastMask: under autocast a Llama prefill's eager mask is fp32
// (the dtype of the fp32 input embeddings), 4·b·s² bytes, where a pure
// bf16 one is 2·b·s².
func TestAutocastMask(t *testing.T) {
	s := mustLookup(t, "llama-2-7b")
	w := model.Workload{Batch: 2, SeqLen: 128, DType: gpumem.BF16}
	pure, err := s.Activations(w)
	require.NoError(t, err)
	w.Autocast = true
	amp, err := s.Activations(w)
	require.NoError(t, err)
	require.Equal(t, pure.Shared+2*2*128*128, amp.Shared)
}
