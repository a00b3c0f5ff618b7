package attention_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
)

func valid() attention.Shape {
	return attention.Shape{Batch: 2, Heads: 8, KVHeads: 2, QueryLen: 128, KeyLen: 128, HeadDim: 64, DType: gpumem.BF16}
}

// builtins returns one kernel of every kind, with options on, for the
// tests that must hold for all of them.
func builtins() []attention.Kernel {
	return []attention.Kernel{
		attention.Eager{},
		attention.Eager{SoftmaxFP32: true},
		attention.Eager{SoftmaxFP32: true, CastBeforeSoftmax: true, ExpandKV: true, Mask4D: true, KeepWeights: true},
		attention.Eager{CPUDropout: true, ExpandKV: true},
		attention.Math{},
		attention.Math{ReducedPrecision: true},
		attention.Flash{},
		attention.Flash{Version: 3},
		attention.MemEfficient{},
		attention.MemEfficient{Mask4D: true},
		attention.HeadChunked{Heads: 4, Inner: attention.Eager{SoftmaxFP32: true, ExpandKV: true}},
		attention.HeadChunked{Heads: 2, Inner: attention.Flash{}},
		attention.QueryChunked{Rows: 48, Inner: attention.Eager{SoftmaxFP32: true}},
		attention.QueryChunked{Rows: 32, Inner: attention.Math{}},
		attention.SlidingWindow{Window: 16, Inner: attention.Eager{}},
	}
}

func TestShapeValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*attention.Shape)
		field string
		kind  error
	}{
		{"batch", func(s *attention.Shape) { s.Batch = 0 }, "Shape.Batch", gpumem.ErrInvalid},
		{"heads", func(s *attention.Shape) { s.Heads = -1 }, "Shape.Heads", gpumem.ErrInvalid},
		{"kv negative", func(s *attention.Shape) { s.KVHeads = -2 }, "Shape.KVHeads", gpumem.ErrInvalid},
		{"kv above heads", func(s *attention.Shape) { s.KVHeads = 16 }, "Shape.KVHeads", gpumem.ErrInvalid},
		{"kv not dividing", func(s *attention.Shape) { s.KVHeads = 3 }, "Shape.KVHeads", gpumem.ErrInvalid},
		{"query", func(s *attention.Shape) { s.QueryLen = 0 }, "Shape.QueryLen", gpumem.ErrInvalid},
		{"key", func(s *attention.Shape) { s.KeyLen = -5 }, "Shape.KeyLen", gpumem.ErrInvalid},
		{"head dim", func(s *attention.Shape) { s.HeadDim = 0 }, "Shape.HeadDim", gpumem.ErrInvalid},
		{"dtype zero", func(s *attention.Shape) { s.DType = gpumem.Invalid }, "Shape.DType", gpumem.ErrInvalid},
		{"dtype int", func(s *attention.Shape) { s.DType = gpumem.INT8 }, "Shape.DType", gpumem.ErrUnsupported},
		{"dtype block", func(s *attention.Shape) { s.DType = gpumem.Q4_K }, "Shape.DType", gpumem.ErrUnsupported},
		{"dropout one", func(s *attention.Shape) { s.Dropout = 1 }, "Shape.Dropout", gpumem.ErrInvalid},
		{"dropout NaN", func(s *attention.Shape) { s.Dropout = math.NaN() }, "Shape.Dropout", gpumem.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := valid()
			tc.edit(&s)
			err := s.Validate()
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			require.ErrorIs(t, err, tc.kind)
			// Every kernel reports the same field, and none panics.
			for _, k := range append(builtins(), attention.HeadChunked{Heads: 3, Inner: attention.Flash{}}) {
				_, err := k.Saved(s)
				require.ErrorAs(t, err, &fe, "%T", k)
				assert.Equal(t, tc.field, fe.Field, "%#v", k)
				_, err = k.Forward(s)
				require.ErrorIs(t, err, tc.kind)
				_, err = k.Backward(s)
				require.ErrorIs(t, err, tc.kind)
			}
		})
	}
	require.NoError(t, valid().Validate())
	mha := valid()
	mha.KVHeads = 0 // zero means Heads
	require.NoError(t, mha.Validate())
}

func TestKernelOptionErrors(t *testing.T) {
	t.Parallel()
	s := valid()
	tests := []struct {
		name  string
		k     attention.Kernel
		s     attention.Shape
		field string
		kind  error
	}{
		{"flash version", attention.Flash{Version: 4}, s, "Flash.Version", gpumem.ErrInvalid},
		{"flash head dim", attention.Flash{}, func() attention.Shape { s := s; s.HeadDim = 512; return s }(), "Shape.HeadDim", gpumem.ErrUnsupported},
		{"fa3 dropout", attention.Flash{Version: 3}, func() attention.Shape { s := s; s.Dropout = 0.1; return s }(), "Shape.Dropout", gpumem.ErrUnsupported},
		{"fa3 head dim", attention.Flash{Version: 3}, func() attention.Shape { s := s; s.HeadDim = 60; return s }(), "Shape.HeadDim", gpumem.ErrUnsupported},
		{"head chunk zero", attention.HeadChunked{Inner: attention.Flash{}}, s, "HeadChunked.Heads", gpumem.ErrInvalid},
		{"head chunk straddles groups", attention.HeadChunked{Heads: 3, Inner: attention.Flash{}}, s, "HeadChunked.Heads", gpumem.ErrInvalid},
		{"head chunk nil", attention.HeadChunked{Heads: 2}, s, "HeadChunked.Inner", gpumem.ErrInvalid},
		{"rows zero", attention.QueryChunked{Inner: attention.Flash{}}, s, "QueryChunked.Rows", gpumem.ErrInvalid},
		{"rows nil", attention.QueryChunked{Rows: 4}, s, "QueryChunked.Inner", gpumem.ErrInvalid},
		{"window zero", attention.SlidingWindow{Inner: attention.Flash{}}, s, "SlidingWindow.Window", gpumem.ErrInvalid},
		{"window nil", attention.SlidingWindow{Window: 4}, s, "SlidingWindow.Inner", gpumem.ErrInvalid},
		{"overflow", attention.Eager{}, func() attention.Shape {
			s := s
			s.Batch, s.QueryLen, s.KeyLen = 1<<20, 1<<20, 1<<20
			return s
		}(), "Shape", gpumem.ErrRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.k.Saved(tc.s)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			require.ErrorIs(t, err, tc.kind)
			_, err = attention.Peak(tc.k, tc.s)
			require.ErrorIs(t, err, tc.kind)
		})
	}
	_, err := attention.Peak(nil, s)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
}

// fig is the three figures of a kernel for one shape.
type fig struct{ saved, fwd, bwd gpumem.Bytes }

func figsOf(t *testing.T, k attention.Kernel, s attention.Shape) fig {
	t.Helper()
	sv, err := k.Saved(s)
	require.NoError(t, err, "%#v %+v", k, s)
	fw, err := k.Forward(s)
	require.NoError(t, err)
	bw, err := k.Backward(s)
	require.NoError(t, err)
	return fig{sv, fw, bw}
}

// TestHandDerived checks kernels against figures worked out by hand from
// the allocation sequences quoted in each kernel's documentation, for
// shapes small enough to follow. Sizes: N = b·h·s_q·s_k score elements,
// Q = b·h·s_q·d, K = b·h_kv·s_k·d.
func TestHandDerived(t *testing.T) {
	t.Parallel()
	// b=2, h=4, s_q=8, s_k=16, d=8: N = 1024, Q = 512, K = 1024.
	small := attention.Shape{Batch: 2, Heads: 4, QueryLen: 8, KeyLen: 16, HeadDim: 8, DType: gpumem.FP32}
	smallBF := small
	smallBF.DType = gpumem.BF16
	drop := small
	drop.Dropout = 0.1
	// b=1, h=8, h_kv=2, s=100, d=64, bf16: Q = 51200, K = 12800.
	gqa := attention.Shape{Batch: 1, Heads: 8, KVHeads: 2, QueryLen: 100, KeyLen: 100, HeadDim: 64, DType: gpumem.BF16}
	tests := []struct {
		name string
		k    attention.Kernel
		s    attention.Shape
		want fig
	}{
		// fp32: saved q+k+v (4Q+8K) + probs 4N; forward peak = scores and
		// their scaled copy, 2·4N (= probs + raw and contiguous output,
		// 4N + 8Q); backward: dP 4N + dV 4K, then dS 4N while dP dies...
		{"eager fp32", attention.Eager{}, small, fig{
			saved: 4*512 + 8*1024 + 4*1024,
			fwd:   2 * 4 * 1024,
			// the dO copy (4Q) dies after dV (4K) and dP (4N) exist; then dS
			// (4N): peak dV + dP + dS = 12288.
			bwd: 4*1024 + 4*1024 + 4*1024,
		}},
		// dropout adds the bool mask (N) and the dropped probabilities (4N).
		// dropout adds the bool mask (N) and the dropped probabilities (4N).
		{"eager fp32 dropout", attention.Eager{}, drop, fig{
			saved: 4*512 + 8*1024 + 4*1024 + 1024 + 4*1024,
			// at the end: softmax 4N + dropped 4N + mask N + the raw and the
			// contiguous output 2·4Q.
			fwd: 4*1024 + 4*1024 + 1024 + 2*4*512,
			// torch.matmul copies the transposed dO (4Q, b > 1), then dV 4K
			// and dP 4N; the copy dies and the dropped probabilities are
			// released (−4N) before dropout's backward allocates 4N again.
			bwd: 4*512 + 4*1024 + 4*1024,
		}},
		// bf16 with an fp32 softmax (SoftMax.cpp copies bf16 to fp32 first):
		// saved 2Q+4K + 4N (fp32 softmax) + 2N (cast copy); forward peak =
		// scores 2N + fp32 copy 4N + fp32 softmax 4N.
		{"eager bf16 softmax fp32", attention.Eager{SoftmaxFP32: true}, smallBF, fig{
			saved: 2*512 + 4*1024 + 4*1024 + 2*1024,
			fwd:   2*1024 + 4*1024 + 4*1024,
			// dP 2N + dV 2K; the saved cast copy is released (−2N); the
			// cast's backward makes 4N and dP dies; softmax backward makes
			// 4N more: 2K + 4N + 4N − 2N.
			bwd: 2*1024 + 4*1024 + 4*1024 - 2*1024,
		}},
		// FlashAttention-2, GQA: saved q, k, v + lse (4·b·h·s_q) + rng 16;
		// forward = out + lse + rng; backward = dq, dk, dv + softmax_d
		// (4·b·h·128) + dq_accum (4·b·128·h·64) + dk, dv expanded (2·2·b·s·h·d).
		{"flash2 gqa", attention.Flash{}, gqa, fig{
			saved: 2*51200 + 4*12800 + 4*8*100 + 16,
			fwd:   2*51200 + 4*8*100 + 16,
			bwd:   2*51200 + 4*12800 + 4*8*128 + 4*128*8*64 + 2*2*100*8*64,
		}},
		// FlashAttention-3 (sm90, d_r = 64, kBlockM = 128, kBlockN = 128):
		// backward adds softmax_d and lse_log2 (2·4·b·h·128), dq_accum
		// (4·b·h·128·64), the dq semaphore (4·1·b·h), and for GQA dk/dv_accum
		// (2·4·b·h_kv·128·64) with their semaphores (2·4·1·b·h_kv).
		{"flash3 gqa", attention.Flash{Version: 3}, gqa, fig{
			saved: 2*51200 + 4*12800 + 4*8*100,
			fwd:   2*51200 + 4*8*100,
			bwd:   2*51200 + 4*12800 + 2*4*8*128 + 4*8*128*64 + 4*8 + 2*4*2*128*64 + 2*4*2,
		}},
		// Memory-efficient, GQA expanded by repeat_kv: saved q (2Q), the
		// expansions (2·2·Q), lse (4·b·h·128 padded to 32 → 128) and the
		// philox scalars; backward: grads of q and the expansions (6Q),
		// delta (4·b·h·128) and the gradQ workspace (4·b·h·128·64).
		{"memefficient gqa", attention.MemEfficient{}, gqa, fig{
			saved: 2*51200 + 2*2*51200 + 4*8*128 + 16,
			fwd:   2*2*51200 + 2*51200 + 4*8*128 + 16,
			bwd:   3*2*51200 + 4*8*128 + 4*8*128*64,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := figsOf(t, tc.k, tc.s)
			assert.Equal(t, tc.want, got, "%#v", tc.k)
		})
	}
}

func TestNoGrad(t *testing.T) {
	t.Parallel()
	for _, k := range builtins() {
		t.Run(fmt.Sprintf("%T%+v", k, k), func(t *testing.T) {
			t.Parallel()
			s := valid()
			s.Dropout = 0.1
			if _, err := k.Saved(s); errors.Is(err, gpumem.ErrUnsupported) {
				s.Dropout = 0 // FlashAttention-3
			}
			g := figsOf(t, k, s)
			s.NoGrad = true
			n := figsOf(t, k, s)
			assert.Zero(t, n.saved, "Saved under NoGrad")
			assert.Zero(t, n.bwd, "Backward under NoGrad")
			assert.LessOrEqual(t, n.fwd, g.fwd, "Forward(NoGrad) ≤ Forward")
			assert.Positive(t, n.fwd)
		})
	}
}

func TestRetained(t *testing.T) {
	t.Parallel()
	s := attention.Shape{Batch: 1, Heads: 2, QueryLen: 10, KeyLen: 10, HeadDim: 4, DType: gpumem.BF16, NoGrad: true}
	tests := []struct {
		k    attention.Kernel
		want gpumem.Bytes
	}{
		{attention.Eager{KeepWeights: true}, 2 * 200},
		{attention.Eager{KeepWeights: true, SoftmaxFP32: true}, 2 * 200}, // the cast copy is returned
		{attention.Eager{}, 0},
		{attention.Flash{}, 0},
		{attention.HeadChunked{Heads: 1, Inner: attention.Eager{KeepWeights: true}}, 2 * 200},
	}
	for _, tc := range tests {
		got, err := attention.Retained(tc.k, s)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "Retained(%#v)", tc.k)
	}
}

// external is a Kernel defined outside the package: wrappers must accept
// it through the public interface alone.
type external struct{}

func (external) Saved(s attention.Shape) (gpumem.Bytes, error)    { return attention.Inputs(s) }
func (external) Forward(s attention.Shape) (gpumem.Bytes, error)  { return attention.Output(s) }
func (external) Backward(s attention.Shape) (gpumem.Bytes, error) { return attention.Inputs(s) }

func TestExternalInner(t *testing.T) {
	t.Parallel()
	s := valid()
	for _, k := range []attention.Kernel{
		attention.HeadChunked{Heads: 4, Inner: external{}},
		attention.QueryChunked{Rows: 32, Inner: external{}},
		attention.SlidingWindow{Window: 16, Inner: external{}},
	} {
		f := figsOf(t, k, s)
		assert.Positive(t, f.fwd)
		_, err := attention.Peak(k, s)
		require.NoError(t, err)
	}
	var bad attention.Kernel = attention.HeadChunked{Heads: 4, Inner: external{}}
	s.Batch = 0
	_, err := bad.Saved(s)
	require.True(t, errors.Is(err, gpumem.ErrInvalid))
}
