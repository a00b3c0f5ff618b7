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

func BenchmarkLongestSeqLen(b *testing.B) {
	s := attention.Shape{Batch: 1, Heads: 64, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = attention.LongestSeqLen(attention.Eager{SoftmaxFP32: true, ExpandKV: true}, s, 80*gpumem.GiB)
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

// FuzzKernels feeds arbitrary shapes and options to every kernel: no
// panic, and either an error or non-negative figures.
func FuzzKernels(f *testing.F) {
	f.Add(2, 8, 2, 128, 128, 64, uint8(gpumem.BF16), false, 0.1, false, 4, 32, 16)
	f.Add(1, 1, 0, 1, 1, 1, uint8(gpumem.FP32), true, 0.0, true, 1, 1, 1)
	f.Add(1<<30, 1<<20, 1, 1<<30, 1<<30, 1<<30, uint8(gpumem.FP16), true, 0.5, false, 1<<40, 1<<50, 1<<62)
	f.Fuzz(func(t *testing.T, b, h, hk, sq, sk, d int, dt uint8, causal bool, p float64, noGrad bool, hc, rows, win int) {
		s := attention.Shape{Batch: b, Heads: h, KVHeads: hk, QueryLen: sq, KeyLen: sk, HeadDim: d,
			DType: gpumem.DType(dt), Causal: causal, Dropout: p, NoGrad: noGrad}
		kernels := append(builtins(),
			attention.HeadChunked{Heads: hc, Inner: attention.Eager{SoftmaxFP32: true}},
			attention.QueryChunked{Rows: rows, Inner: attention.Flash{}},
			attention.SlidingWindow{Window: win, Inner: attention.Math{}},
		)
		for _, k := range kernels {
			for _, fn := range []func(attention.Shape) (gpumem.Bytes, error){k.Saved, k.Forward, k.Backward} {
				v, err := fn(s)
				if err == nil && v < 0 {
					t.Fatalf("%T%+v: negative figure %d for %+v", k, k, v, s)
				}
			}
			if p, err := attention.Peak(k, s); err == nil && p < 0 {
				t.Fatalf("Peak %T: negative %d", k, p)
			}
		}
	})
}

// FuzzKVCache: arbitrary caches and lengths never panic nor go negative.
func FuzzKVCache(f *testing.F) {
	f.Add(32, 8, 128, 0, uint8(gpumem.BF16), 16, uint8(0), 576, 4096, 8, 100000)
	f.Add(1, 1, 1, 1, uint8(gpumem.Q4_0), 1<<62, uint8(1), 1, 1<<62, 1<<40, 1<<62)
	f.Fuzz(func(t *testing.T, layers, kvh, hd, vhd int, dt uint8, block int, layout uint8, latent, window, batch, tokens int) {
		c := attention.KVCache{Layers: layers, KVHeads: kvh, HeadDim: hd, ValueHeadDim: vhd, DType: gpumem.DType(dt),
			BlockTokens: block, Layout: attention.Layout(layout), LatentDim: latent}
		if layers > 0 && layers < 64 {
			c.Windows = make([]int, layers)
			for i := range c.Windows {
				c.Windows[i] = window * (i % 2)
			}
		}
		if v, err := c.Bytes(batch, tokens); err == nil && v < 0 {
			t.Fatalf("%+v: negative bytes %d", c, v)
		}
		if n, err := c.MaxTokens(batch, gpumem.Bytes(tokens)); err == nil && n < 1 {
			t.Fatalf("%+v: MaxTokens %d", c, n)
		}
	})
}
