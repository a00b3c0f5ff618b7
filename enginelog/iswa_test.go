package enginelog

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestParseISWA reads llama.cpp's two caches of a sliding-window model
// (testdata/llamacpp/swa, the real llama.cpp on the CPU): the non-SWA
// cache's 1024 cells as the context, the SWA cache's 768, and each
// device's KV buffer and the whole cache as one figure, the sum of the
// two caches' (1.00 + 3.75 MiB); --swa-full's line sets SWAFull.
func TestParseISWA(t *testing.T) {
	read := func(name string) *Log {
		f, err := os.Open("../testdata/llamacpp/swa/" + name)
		require.NoError(t, err)
		defer f.Close()
		l, err := Parse(f)
		require.NoError(t, err)
		return l
	}
	l := read("gemma3-tiny-c1024-ub512-faoff-swa-s1.log")
	assert.Equal(t, LlamaCpp, l.Engine)
	assert.Equal(t, 1024, l.Params.KVSize)
	assert.Equal(t, 768, l.Params.SWAKVSize)
	assert.False(t, l.Params.SWAFull)
	var kvBuf, kvSelf []gpumem.Bytes
	for _, f := range l.Figures {
		switch f.Kind {
		case KVBuffer:
			assert.Equal(t, "CPU", f.Device)
			kvBuf = append(kvBuf, f.Bytes)
		case KVSelf:
			kvSelf = append(kvSelf, f.Bytes)
		}
	}
	want := gpumem.Bytes(4.75 * (1 << 20))
	assert.Equal(t, []gpumem.Bytes{want}, kvBuf)
	assert.Equal(t, []gpumem.Bytes{want}, kvSelf)

	full := read("gemma3-tiny-c4096-ub512-faoff-swa-full-s1.log")
	assert.True(t, full.Params.SWAFull)
	assert.Equal(t, 4096, full.Params.SWAKVSize)
}
