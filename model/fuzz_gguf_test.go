package model

import (
	"testing"
)

// FuzzGGUFSparse reads a header followed by zeros up to a claimed file
// size of up to 4 TiB, so that lengths and counts may be as large as the
// file claims without the fuzzer writing them out: a key of 2^40 bytes
// in a 2 TiB file once allocated 1 TiB.
func FuzzGGUFSparse(f *testing.F) {
	f.Add(tinyGGUF(f), uint64(0))
	for _, seed := range ggufCraftedSeeds() {
		f.Add(seed, uint64(2<<40))
		f.Add(seed, uint64(64<<20))
	}
	f.Add(cat(ggufHead(0, 1), le64(1<<40)), uint64(2<<40))
	f.Add(cat(ggufHead(1, 0), le64(1<<40)), uint64(2<<40))
	f.Add(ggufHead(1<<20, 0), uint64(1<<30))
	f.Add(ggufHead(0, 1<<16), uint64(1<<30))
	f.Fuzz(func(t *testing.T, head []byte, size uint64) {
		size = max(size%(4<<40), uint64(len(head)))
		checkGGUF(t, sparseFile{size: int64(size), parts: []sparsePart{{0, head}}}, int64(size))
	})
}
