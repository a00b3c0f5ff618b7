package budget

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLlamaGraphLayersRepeat: the allocator's layout repeats from the
// third layer on, so replaying the first three layers and the last gives
// the peak of the whole graph (here up to twelve layers) for shapes from
// the CPU runs' to Llama-3-8B's and Qwen2.5-14B's, with flash attention
// and without, at small and long contexts.
func TestLlamaGraphLayersRepeat(t *testing.T) {
	shapes := []llamaGraph{
		{embd: 512, qDim: 512, kv: 128, ff: 1024, vocab: 2048, heads: 8},
		{embd: 768, qDim: 768, kv: 256, ff: 2048, vocab: 4096, heads: 12},
		{embd: 4096, qDim: 4096, kv: 1024, ff: 14336, vocab: 128256, heads: 32},
		{embd: 4096, qDim: 4096, kv: 4096, ff: 11008, vocab: 32000, heads: 32},
		{embd: 5120, qDim: 5120, kv: 1024, ff: 13824, vocab: 152064, heads: 40},
		{embd: 2048, qDim: 2048, kv: 512, ff: 8192, vocab: 128256, heads: 32},
	}
	for _, sh := range shapes {
		for _, c := range []struct {
			ub, nKV    int64
			flash      bool
			host, idx  bool
			withOutput bool
		}{
			{512, 1024, true, true, true, true}, {512, 1024, false, true, true, true},
			{128, 4096, false, false, true, true}, {2048, 8192, true, false, true, true},
			{256, 32768, false, false, false, true}, {512, 8192, true, false, true, false},
		} {
			g := sh
			g.ub, g.nKV, g.flash, g.host, g.idx, g.unusedEmbd, g.output, g.layers = c.ub, c.nKV, c.flash, c.host, c.idx, c.host, c.withOutput, 12
			want, ok := g.peakN(12)
			require.True(t, ok)
			got, ok := g.peak()
			require.True(t, ok)
			assert.Equal(t, want, got, "n_embd %d, n_ubatch %d, n_kv %d, flash %v", g.embd, c.ub, c.nKV, c.flash)
		}
	}
}

// TestLlamaGraphAllocator: the free list's best fit and merging, by hand.
func TestLlamaGraphAllocator(t *testing.T) {
	var a gallocr
	a.n = 1
	x := a.alloc(1000) // padded to 1024
	y := a.alloc(200)  // 256
	z := a.alloc(300)  // 384
	assert.Equal(t, []int64{0, 1024, 1280}, []int64{x, y, z})
	a.free(x, 1000)
	a.free(z, 300) // merges into the last block
	assert.Equal(t, 2, a.n)
	assert.Equal(t, int64(0), a.alloc(900), "the hole at 0 fits")
	assert.Equal(t, int64(1280), a.alloc(2000), "no hole fits: the end")
	a.free(y, 200)
	assert.Equal(t, int64(1280+2048), a.max)
	assert.Equal(t, int64(1024), a.alloc(100), "the freed 256 bytes at 1024, merged with nothing")
}

// TestLlamaGraphOverflow: a graph whose tensors pass 4 PiB is an
// overflow, not a wrapped size.
func TestLlamaGraphOverflow(t *testing.T) {
	g := llamaGraph{embd: 1 << 20, qDim: 1 << 20, kv: 1 << 20, ff: 1 << 22, vocab: 1 << 22, heads: 1 << 10,
		nKV: 1 << 40, ub: 1 << 20, layers: 2, output: true}
	_, ok := g.peak()
	assert.False(t, ok)
	g = llamaGraph{embd: 512, qDim: 512, kv: 128, ff: 1024, vocab: 2048, heads: 8, nKV: 1024, ub: 512, layers: 1, output: true}
	p, ok := g.peak()
	assert.True(t, ok)
	assert.Positive(t, p)
}

// BenchmarkLlamaCppCompute: one replay of Llama-3-8B's worst-case graph
// (four layers and the output), allocation-free.
func BenchmarkLlamaCppCompute(b *testing.B) {
	g := llamaGraph{embd: 4096, qDim: 4096, kv: 1024, ff: 14336, vocab: 128256, heads: 32,
		nKV: 8192, ub: 512, flash: true, layers: 32, output: true, idx: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := g.peak(); !ok {
			b.Fatal("overflow")
		}
	}
}
