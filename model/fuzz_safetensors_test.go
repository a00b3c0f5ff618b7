package model

import (
	"strings"
	"testing"
)

// FuzzSafetensorsGenerated reads headers of up to 100 MB built from a
// prefix, count copies of a unit (its "#" replaced by the copy's
// 7-digit index, so that names differ) and a suffix: the million-tensor
// and 49-million-dimension headers that once cost gigabytes, and what
// the fuzzer makes of them, without storing them in the corpus.
func FuzzSafetensorsGenerated(f *testing.F) {
	f.Add(`{`, `"t#":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},`, `"end":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, uint32(1_000_000))
	f.Add(`{"w": {"dtype": "U8", "shape": [`, `1,`, `1], "data_offsets": [0, 1]}}`, uint32(49_000_000))
	f.Add(`{"w": {"dtype": "U8", "shape": [`, `1,`, `1], "data_offsets": [0, 1]}}`, uint32(7))
	f.Add(`{"w": {"x": `, `[`, `]}}`, uint32(100_000))
	f.Add(`{"__metadata__": {`, `"k#": "v",`, `"end": ""}}`, uint32(10_000))
	f.Add(`{"`, `x`, `": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}`, uint32(200_000))
	f.Fuzz(func(t *testing.T, prefix, unit, suffix string, count uint32) {
		if unit == "" {
			count = 0
		}
		g := genFile{prefix: prefix, suffix: suffix, count: int(count)}
		if i := strings.IndexByte(unit, '#'); i >= 0 {
			g.unit = func(n int) string { return unit[:i] + padIndex(n) + unit[i+1:] }
		} else {
			g.unit = func(int) string { return unit }
		}
		if g.headerLen() > maxSafetensorsHeader {
			g.count = (maxSafetensorsHeader - len(prefix) - len(suffix)) / len(g.unit(0))
			if g.count < 0 {
				t.Skip("prefix and suffix above the header cap")
			}
		}
		// The data buffer: what the header would need if every tensor
		// took one byte, at most 1 GiB; FromSafetensors only reads the
		// header.
		g.size = 8 + g.headerLen() + int64(min(g.count, 1<<30))
		checkSafetensors(t, g, g.size, nil)
	})
}

// padIndex is n in 7 digits (mod 10^7), so that units keep one length.
func padIndex(n int) string {
	var b [7]byte
	for i := 6; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[:])
}
