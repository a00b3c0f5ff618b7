package attention_test

import (
	"fmt"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
)

// TestZeroAlloc: the figures of every kernel, wrappers included, and the
// KV cache size cost no allocation for valid input, so a scheduler can
// call them per job and per node freely.
func TestZeroAlloc(t *testing.T) {
	s := attention.Shape{Batch: 4, Heads: 32, KVHeads: 8, QueryLen: 4096, KeyLen: 4096, HeadDim: 128, DType: gpumem.BF16, Dropout: 0.1}
	for _, k := range builtins() {
		if !usable(k, s) {
			continue
		}
		k := k
		for _, f := range []struct {
			name string
			fn   func(attention.Shape) (gpumem.Bytes, error)
		}{
			{"Saved", k.Saved}, {"Forward", k.Forward}, {"Backward", k.Backward},
			{"Peak", func(s attention.Shape) (gpumem.Bytes, error) { return attention.Peak(k, s) }},
		} {
			if n := testing.AllocsPerRun(100, func() { _, _ = f.fn(s) }); n != 0 {
				t.Errorf("%T%+v.%s allocates %.1f times per call, want 0", k, k, f.name, n)
			}
		}
	}
	kv := attention.KVCache{Layers: 62, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16, BlockTokens: 16,
		Windows: make([]int, 62)}
	for i := range kv.Windows {
		kv.Windows[i] = []int{1024, 0}[i%2]
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = kv.Bytes(8, 100000) }); n != 0 {
		t.Errorf("KVCache.Bytes allocates %.1f times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.Validate() }); n != 0 {
		t.Errorf("Shape.Validate allocates %.1f times per call, want 0", n)
	}
}

func BenchmarkKernels(b *testing.B) {
	s := attention.Shape{Batch: 4, Heads: 64, KVHeads: 8, QueryLen: 8192, KeyLen: 8192, HeadDim: 128, DType: gpumem.BF16}
	for _, k := range []attention.Kernel{
		attention.Eager{SoftmaxFP32: true, ExpandKV: true, Mask4D: true},
		attention.Math{},
		attention.Flash{},
		attention.MemEfficient{},
		attention.HeadChunked{Heads: 8, Inner: attention.Eager{SoftmaxFP32: true}},
		attention.QueryChunked{Rows: 1024, Inner: attention.Math{}},
		attention.SlidingWindow{Window: 4096, Inner: attention.Eager{}},
	} {
		b.Run(fmt.Sprintf("%T", k), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = attention.Peak(k, s)
			}
		})
	}
}

func BenchmarkMaxSeqLen(b *testing.B) {
	s := attention.Shape{Batch: 1, Heads: 64, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = attention.MaxSeqLen(attention.Eager{SoftmaxFP32: true, ExpandKV: true}, s, 80*gpumem.GiB)
	}
}

func BenchmarkMaxHeadChunk(b *testing.B) {
	s := attention.Shape{Batch: 1, Heads: 64, QueryLen: 32768, KeyLen: 32768, HeadDim: 128, DType: gpumem.FP16, NoGrad: true}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = attention.MaxHeadChunk(attention.Eager{SoftmaxFP32: true}, s, 40*gpumem.GiB)
	}
}

func BenchmarkKVCacheBytes(b *testing.B) {
	kv := attention.KVCache{Layers: 80, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16, BlockTokens: 16}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = kv.Bytes(64, 131072)
	}
}
