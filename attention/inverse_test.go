package attention_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
)

func TestLongestSeqLen(t *testing.T) {
	t.Parallel()
	base := attention.Shape{Batch: 2, Heads: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16}
	limits := []gpumem.Bytes{64 * gpumem.MiB, gpumem.GiB, 10 * gpumem.GiB, 80 * gpumem.GiB}
	for _, k := range builtins() {
		for _, limit := range limits {
			t.Run(fmt.Sprintf("%T%+v/%v", k, k, limit), func(t *testing.T) {
				t.Parallel()
				if !usable(k, func() attention.Shape { s := base; s.QueryLen, s.KeyLen = 1, 1; return s }()) {
					t.Skip("kernel rejects the shape")
				}
				n, err := attention.LongestSeqLen(k, base, limit)
				require.NoError(t, err)
				at := func(n int) gpumem.Bytes {
					s := base
					s.QueryLen, s.KeyLen = n, n
					p, err := attention.Peak(k, s)
					require.NoError(t, err)
					return p
				}
				assert.LessOrEqual(t, at(n), limit, "MaxSeqLen = %d fits", n)
				assert.Greater(t, at(n+1), limit, "MaxSeqLen + 1 = %d does not fit", n+1)
			})
		}
	}
}

func TestLargestBatch(t *testing.T) {
	t.Parallel()
	s := attention.Shape{Heads: 12, QueryLen: 1500, KeyLen: 1500, HeadDim: 64, DType: gpumem.FP16}
	k := attention.Eager{SoftmaxFP32: true, CastBeforeSoftmax: true}
	n, err := attention.LargestBatch(k, s, 24*gpumem.GiB)
	require.NoError(t, err)
	s.Batch = n
	p, _ := attention.Peak(k, s)
	assert.LessOrEqual(t, p, 24*gpumem.GiB)
	s.Batch = n + 1
	p, _ = attention.Peak(k, s)
	assert.Greater(t, p, 24*gpumem.GiB)
}

func TestLongestSeqLenErrors(t *testing.T) {
	t.Parallel()
	s := attention.Shape{Batch: 1, Heads: 32, HeadDim: 128, DType: gpumem.BF16}
	_, err := attention.LongestSeqLen(attention.Eager{}, s, 1000)
	require.ErrorIs(t, err, gpumem.ErrDoesNotFit)
	bad := s
	bad.HeadDim = 0
	_, err = attention.LongestSeqLen(attention.Eager{}, bad, gpumem.GiB)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	_, err = attention.LongestSeqLen(attention.Flash{Version: 9}, s, gpumem.GiB)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	// Linear memory and an enormous budget: the search stops at 2^40 or at
	// the largest representable length without failing.
	n, err := attention.LongestSeqLen(attention.Flash{}, s, 1<<62)
	require.NoError(t, err)
	assert.Positive(t, n)
}

func TestMaxHeadChunk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		inner attention.Kernel
		s     attention.Shape
		limit gpumem.Bytes
	}{
		{"32k-token block attention, 40 GiB", attention.Eager{SoftmaxFP32: true},
			attention.Shape{Batch: 1, Heads: 32, QueryLen: 32768, KeyLen: 32768, HeadDim: 128, DType: gpumem.FP16, NoGrad: true}, 40 * gpumem.GiB},
		{"32k-token block attention, 80 GiB", attention.Eager{SoftmaxFP32: true},
			attention.Shape{Batch: 1, Heads: 32, QueryLen: 32768, KeyLen: 32768, HeadDim: 128, DType: gpumem.FP16, NoGrad: true}, 80 * gpumem.GiB},
		{"gqa groups of 4, training", attention.Eager{ExpandKV: true},
			attention.Shape{Batch: 1, Heads: 32, KVHeads: 8, QueryLen: 8192, KeyLen: 8192, HeadDim: 128, DType: gpumem.BF16}, 40 * gpumem.GiB},
		{"everything fits", attention.Flash{},
			attention.Shape{Batch: 1, Heads: 16, QueryLen: 4096, KeyLen: 4096, HeadDim: 64, DType: gpumem.BF16}, 80 * gpumem.GiB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := attention.MaxHeadChunk(tc.inner, tc.s, tc.limit)
			require.NoError(t, err)
			p, err := attention.Peak(attention.HeadChunked{Heads: c, Inner: tc.inner}, tc.s)
			require.NoError(t, err)
			assert.LessOrEqual(t, p, tc.limit, "chunk %d fits", c)
			for bigger := c + 1; bigger <= tc.s.Heads; bigger++ {
				p, err := attention.Peak(attention.HeadChunked{Heads: bigger, Inner: tc.inner}, tc.s)
				if err != nil {
					require.ErrorIs(t, err, gpumem.ErrInvalid, "only invalid chunk sizes are skipped")
					continue
				}
				assert.Greater(t, p, tc.limit, "chunk %d does not fit", bigger)
			}
		})
	}
	s := attention.Shape{Batch: 1, Heads: 32, QueryLen: 32768, KeyLen: 32768, HeadDim: 128, DType: gpumem.FP16, NoGrad: true}
	_, err := attention.MaxHeadChunk(attention.Eager{SoftmaxFP32: true}, s, gpumem.GiB)
	require.ErrorIs(t, err, gpumem.ErrDoesNotFit)
	_, err = attention.MaxHeadChunk(nil, s, gpumem.GiB)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	_, err = attention.MaxHeadChunk(attention.Flash{Version: 7}, s, gpumem.GiB)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
}
