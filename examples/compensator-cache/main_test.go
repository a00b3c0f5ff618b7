package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// TestRun runs the program and checks its figures: the write-up's rule
// recomputed by hand, every cache size and chunk the program allows
// fits and one more does not, and the accumulation limit's trigger.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	text := out.String()
	r, err := analyze()
	require.NoError(t, err)
	room := usable(r.GPU.Free())

	for _, row := range r.Rows {
		// The write-up's _get_adaptive_cache_size, in integers:
		// min(max_cache_size, int(1.0 / (d·4 / 1024**3)), 5000).
		want := min(int64(seedMaxCache), (1<<30)/(4*row.FeatureDim), seedHardCap)
		if row.Seed != want {
			t.Errorf("feature_dim %d: write-up's rule = %d, want %d", row.FeatureDim, row.Seed, want)
		}
		if want := (int64(1) << 30) / (4 * row.FeatureDim); row.OneGiB != want {
			t.Errorf("feature_dim %d: 1 GiB holds %d, want %d", row.FeatureDim, row.OneGiB, want)
		}
		n := row.Left.Buffers[0].Entries
		fits := func(entries int64) bool {
			j := row.Left.Job
			j.Buffers = []budget.Buffer{{Name: "cached_Z", Entries: entries, EntryBytes: row.Entry, Elastic: true}}
			b, err := budget.Estimate(j)
			require.NoError(t, err)
			return b.Device() <= room
		}
		if !fits(n) {
			t.Errorf("feature_dim %d: %d entries do not fit %v", row.FeatureDim, n, room.String())
		}
		if n < cacheEntries && fits(n+1) {
			t.Errorf("feature_dim %d: %d entries + 1 still fit %v", row.FeatureDim, n, room.String())
		}
		require.Contains(t, text, fmt.Sprintf(" %12d %12d %12d ", row.Seed, row.OneGiB, n))
	}
	// The table shows both outcomes: the whole cache fits, and memory
	// stops it.
	if r.Rows[0].Left.Buffers[0].Entries != cacheEntries {
		t.Errorf("at the backbone's feature_dim the GPU holds %d entries, want all %d", r.Rows[0].Left.Buffers[0].Entries, cacheEntries)
	}
	if last := r.Rows[len(r.Rows)-1]; last.Left.Reason != budget.ReasonMemory {
		t.Errorf("widest feature_dim stopped by %v, want memory", last.Left.Reason)
	}

	// The accumulation limit.
	if want := r.LimitBytes / r.PerBatch; r.LimitBatches != int64(want) {
		t.Errorf("4 GiB holds %d batches, want %d", r.LimitBatches, want)
	}
	require.NotZero(t, r.TriggerBatch, "the limit never triggers")
	alloc := func(batch int) gpumem.Bytes {
		j := r.Job
		j.Batch = batch
		b, err := budget.Estimate(j)
		require.NoError(t, err)
		return b.Allocated()
	}
	if alloc(r.TriggerBatch) <= r.LimitBytes || alloc(r.TriggerBatch-1) > r.LimitBytes {
		t.Errorf("trigger batch %d: allocated %v, at %d: %v; want the first above %v",
			r.TriggerBatch, alloc(r.TriggerBatch).String(), r.TriggerBatch-1, alloc(r.TriggerBatch-1).String(), r.LimitBytes.String())
	}
	if loaderB >= r.TriggerBatch {
		t.Errorf("the limit triggers at batch %d, at or below the loader's %d: the report says it does not", r.TriggerBatch, loaderB)
	}

	// The chunk.
	if want := gpumem.Bytes(seedChunkOld * taskFeats * r.FeatureDim * 4); r.ChunkOld != want {
		t.Errorf("chunk %d = %v, want %v", seedChunkOld, r.ChunkOld, want)
	}
	if r.ChunkMax < 1 || gpumem.Bytes(r.ChunkMax)*r.ChunkRow > r.Left ||
		(r.ChunkMax < seedNSamples && gpumem.Bytes(r.ChunkMax+1)*r.ChunkRow <= r.Left) {
		t.Errorf("largest chunk %d of %v in %v", r.ChunkMax, r.ChunkRow, r.Left)
	}
	if r.Left != room-r.Need.Device() {
		t.Errorf("memory left = %v, want %v − %v", r.Left, room, r.Need.Device())
	}
	for _, s := range []string{r.ChunkOld.String(), r.ChunkNew.String(), r.Left.String(), fmt.Sprintf("a chunk of %d", r.ChunkMax)} {
		require.Contains(t, text, s)
	}
}
