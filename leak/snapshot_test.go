package leak

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// snapshotJob describes a synthetic training job whose memory snapshot
// buildSnapshot writes in the documented format of
// torch.cuda.memory._snapshot() (see snapshot.go).
type snapshotJob struct {
	iters    int
	weights  int64 // allocated once before the loop, kept
	acts     int   // activations per iteration, each actSize, freed at the iteration's end
	actSize  int64
	leak     int64 // bytes kept per iteration (a list of tensors that grows), 0: none
	segments bool  // include the segments at the snapshot
	timeUS   bool  // trace entries carry time_us
	oomAt    int   // iteration after which an "oom" entry is recorded, 0: none
}

func frames(fs ...[3]string) []map[string]any {
	out := []map[string]any{}
	for _, f := range fs {
		out = append(out, map[string]any{"filename": f[0], "line": json.Number(f[1]), "name": f[2]})
	}
	return out
}

// buildSnapshot writes the snapshot of job as JSON.
func buildSnapshot(t testing.TB, job snapshotJob) []byte {
	t.Helper()
	const seg = int64(0x7f0000000000)
	var trace []map[string]any
	now := int64(1_700_000_000_000_000)
	add := func(e map[string]any) {
		if job.timeUS {
			now += 1000
			e["time_us"] = now
		}
		e["stream"] = 0
		trace = append(trace, e)
	}
	add(map[string]any{"action": "segment_alloc", "addr": seg, "size": int64(8 << 30)})
	next := seg
	leakNext := seg + 4<<30
	alloc := func(size int64, fr []map[string]any) int64 {
		a := next
		next += size
		add(map[string]any{"action": "alloc", "addr": a, "size": size, "frames": fr})
		return a
	}
	weightFrames := frames([3]string{"/usr/lib/python3/site-packages/torch/nn/modules/module.py", "1160", "to"}, [3]string{"/home/u/train.py", "12", "main"})
	actFrames := frames([3]string{"??", "0", "c10::cuda::CUDACachingAllocator::malloc"}, [3]string{"/usr/lib/python3/site-packages/torch/nn/modules/linear.py", "116", "forward"}, [3]string{"/home/u/model.py", "30", "forward"})
	leakFrames := frames([3]string{"/usr/lib/python3/site-packages/torch/_tensor.py", "40", "wrapped"}, [3]string{"/home/u/train.py", "57", "train_step"}, [3]string{"/home/u/train.py", "80", "main"})
	kept := []int64{}
	w := alloc(job.weights, weightFrames)
	kept = append(kept, job.weights)
	_ = w
	for it := 1; it <= job.iters; it++ {
		var acts []int64
		for range job.acts {
			acts = append(acts, alloc(job.actSize, actFrames))
		}
		if job.leak > 0 {
			// Kept tensors come from their own range of the segment.
			add(map[string]any{"action": "alloc", "addr": leakNext, "size": job.leak, "frames": leakFrames})
			leakNext += job.leak
			kept = append(kept, job.leak)
		}
		for _, a := range acts {
			add(map[string]any{"action": "free_requested", "addr": a, "size": job.actSize})
			add(map[string]any{"action": "free_completed", "addr": a, "size": job.actSize})
		}
		next -= int64(job.acts) * job.actSize // the freed blocks are reused
		if it == job.oomAt {
			add(map[string]any{"action": "oom", "size": int64(40 << 30), "device_free": int64(1 << 30)})
		}
	}
	snap := map[string]any{"device_traces": []any{trace}}
	if job.segments {
		var blocks []map[string]any
		var used int64
		for _, k := range kept {
			blocks = append(blocks, map[string]any{"size": k, "requested_size": k, "address": seg + used, "state": "active_allocated", "frames": []any{}})
			used += k
		}
		blocks = append(blocks, map[string]any{"size": int64(8<<30) - used, "requested_size": 0, "address": seg + used, "state": "inactive", "frames": []any{}})
		snap["segments"] = []any{map[string]any{"device": 0, "address": seg, "total_size": int64(8 << 30), "stream": 0,
			"segment_type": "large", "allocated_size": used, "active_size": used, "blocks": blocks}}
	}
	b, err := json.Marshal(snap)
	require.NoError(t, err)
	return b
}

// TestReadSnapshotLeak: a job that keeps one tensor per iteration leaks;
// the live history is read from the trace, the level from the segments,
// and the frame that holds the growth is named.
func TestReadSnapshotLeak(t *testing.T) {
	t.Parallel()
	job := snapshotJob{iters: 40, weights: 500 << 20, acts: 3, actSize: 64 << 20, leak: 8 << 20, segments: true, timeUS: true}
	got, rep, err := ReadSamples(bytes.NewReader(buildSnapshot(t, job)), nil)
	require.NoError(t, err)
	require.NotNil(t, rep.Snapshot)
	sn := rep.Snapshot
	assert.Equal(t, "event", rep.StepUnit)
	assert.Equal(t, 1+job.iters*(job.acts+1), sn.Allocs)
	assert.Equal(t, job.iters*job.acts, sn.Frees)
	assert.Equal(t, 0, sn.UnknownFrees)
	assert.True(t, sn.Absolute)
	assert.Equal(t, gpumem.Bytes(job.weights+int64(job.iters)*job.leak), sn.Allocated)
	assert.Equal(t, gpumem.Bytes(8<<30), sn.Reserved)
	// The last sample is the snapshot's allocated level; the first the
	// weights.
	assert.Equal(t, sn.Allocated, got[len(got)-1].Allocated)
	assert.Equal(t, gpumem.Bytes(job.weights), got[0].Allocated)
	assert.NotZero(t, got[0].Has&ColTime)
	assert.Equal(t, 1+job.iters, sn.Survivors)
	require.NotEmpty(t, sn.Holders)
	top := sn.Holders[0]
	assert.Equal(t, "train.py:57:train_step", top.Frame)
	assert.Equal(t, []string{"train.py:57:train_step", "train.py:80:main"}, top.Stack)
	assert.Equal(t, job.iters, top.Count)
	assert.Equal(t, gpumem.Bytes(int64(job.iters)*job.leak), top.Bytes)
	assert.Equal(t, 10, top.Spread)
	assert.True(t, top.Growing)
	// The weights survive too, allocated once: not growing.
	require.Len(t, sn.Holders, 2)
	assert.Equal(t, "train.py:12:main", sn.Holders[1].Frame)
	assert.False(t, sn.Holders[1].Growing)

	r, err := Analyze(got, &Options{StepUnit: rep.StepUnit})
	require.NoError(t, err)
	assert.Equal(t, ColAllocated, r.Column)
	assert.True(t, r.Leak, r.Reason)
	assert.Contains(t, r.Reason, "per event")
	j, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.Contains(t, string(j), `"frame":"train.py:57:train_step"`)
	assert.Contains(t, string(j), `"growing":true`)
}

// TestReadSnapshotNoLeak: the same job without the kept tensor is flat
// under its per-iteration sawtooth, and only the weights survive.
func TestReadSnapshotNoLeak(t *testing.T) {
	t.Parallel()
	for _, segments := range []bool{true, false} {
		job := snapshotJob{iters: 40, weights: 500 << 20, acts: 3, actSize: 64 << 20, segments: segments}
		got, rep, err := ReadSamples(bytes.NewReader(buildSnapshot(t, job)), nil)
		require.NoError(t, err)
		sn := rep.Snapshot
		require.NotNil(t, sn)
		assert.Equal(t, segments, sn.Absolute)
		if !segments {
			// Relative to the lowest point: the weights' allocation is 0.
			assert.Equal(t, gpumem.Bytes(0), got[0].Allocated)
		}
		assert.Zero(t, got[0].Has&ColTime)
		assert.Equal(t, 1, sn.Survivors)
		require.Len(t, sn.Holders, 1)
		assert.False(t, sn.Holders[0].Growing)
		r, err := Analyze(got, &Options{StepUnit: rep.StepUnit})
		require.NoError(t, err)
		assert.False(t, r.Leak, r.Reason)
	}
}

// TestReadSnapshotWindows: a trace longer than MaxSnapshotSamples events
// is read as the lowest level of each window, which keeps a leak's rising
// floor and drops the per-iteration sawtooth.
func TestReadSnapshotWindows(t *testing.T) {
	t.Parallel()
	job := snapshotJob{iters: 3000, weights: 100 << 20, acts: 2, actSize: 32 << 20, leak: 1 << 20}
	got, rep, err := ReadSamples(bytes.NewReader(buildSnapshot(t, job)), nil)
	require.NoError(t, err)
	sn := rep.Snapshot
	events := sn.Allocs + sn.Frees
	assert.Equal(t, (events+MaxSnapshotSamples-1)/MaxSnapshotSamples, sn.Window)
	assert.LessOrEqual(t, len(got), MaxSnapshotSamples)
	r, err := Analyze(got, &Options{StepUnit: rep.StepUnit})
	require.NoError(t, err)
	assert.True(t, r.Leak, r.Reason)
	assert.Equal(t, ShapeLinear, r.Shape, r.Reason)
	// 1 MiB kept per iteration of 7 trace entries (2 activations' alloc,
	// free_requested and free_completed, the kept alloc): 1 MiB / 7 per
	// entry.
	assert.InDelta(t, float64(1<<20)/7, r.BytesPerStep, float64(1<<20)/7*0.02)
}

// TestReadSnapshotOOMAndTraceList: an "oom" entry is an observed OOM; a
// bare list of trace entries is one device's trace.
func TestReadSnapshotOOMAndTraceList(t *testing.T) {
	t.Parallel()
	job := snapshotJob{iters: 10, weights: 1 << 30, acts: 2, actSize: 1 << 20, leak: 1 << 20, oomAt: 10}
	var snap struct {
		DeviceTraces [][]json.RawMessage `json:"device_traces"`
	}
	require.NoError(t, json.Unmarshal(buildSnapshot(t, job), &snap))
	list, err := json.Marshal(snap.DeviceTraces[0])
	require.NoError(t, err)
	got, rep, err := ReadSamples(bytes.NewReader(list), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Snapshot.OOMs)
	r, err := Analyze(got, &Options{StepUnit: rep.StepUnit})
	require.NoError(t, err)
	assert.True(t, r.ObservedOOM)
	assert.Equal(t, int64(len(snap.DeviceTraces[0])-1), r.ObservedOOMStep)
}

// TestReadSnapshotErrors: a snapshot without a trace, a pickle, and bad
// numbers give clear errors, never samples.
func TestReadSnapshotErrors(t *testing.T) {
	t.Parallel()
	_, _, err := ReadSamples(strings.NewReader(`{"segments": [{"total_size": 2097152, "blocks": []}], "device_traces": [[]]}`), nil)
	require.ErrorIs(t, err, ErrNoSamples)
	assert.Contains(t, err.Error(), "_record_memory_history")

	_, _, err = ReadSamples(bytes.NewReader([]byte("\x80\x04\x95\x10\x00\x00")), nil)
	require.ErrorIs(t, err, ErrNoSamples)
	assert.Contains(t, err.Error(), "pickle")

	for in, field := range map[string]string{
		`{"device_traces": [[{"action": "alloc", "addr": 1, "size": -5}]]}`:                  "device_traces[0][0].size",
		`{"device_traces": [[{"action": "alloc", "addr": "x", "size": 5}]]}`:                 "device_traces[0][0].addr",
		`{"device_traces": [[{"action": "free_completed", "size": 5}]]}`:                     "device_traces[0][0].addr",
		`{"device_traces": [[{"addr": 1, "size": 5}]]}`:                                      "device_traces[0][0].action",
		`{"segments": [{"total_size": 1.5, "blocks": []}], "device_traces": []}`:             "segments[0].total_size",
		`{"device_traces": [[{"action": "alloc", "addr": 1, "size": 5}]`:                     "snapshot",
		`{"device_traces": [[{"action": "alloc", "addr": 1, "size": 1152921504606846976}]]}`: "device_traces[0][0].size",
		`{"device_traces": [[{"action": "alloc", "addr": -1, "size": 5}]]}`:                  "device_traces[0][0].addr",
		`{"device_traces": [[{"action": 5, "addr": 1, "size": 5}]]}`:                         "snapshot",
		`{"device_traces": [[{"action": "alloc", "addr": 1, "size": 2.5}]]}`:                 "device_traces[0][0].size",
	} {
		_, _, err := ReadSamples(strings.NewReader(in), nil)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", in, err)
		assert.Equal(t, field, fe.Field, in)
	}
	// A memory_stats JSON dump is not a snapshot: still read as before.
	got, rep, err := ReadSamples(strings.NewReader(`{"allocated_bytes.all.current": 1048576, "reserved_bytes.all.current": 2097152}`), nil)
	require.NoError(t, err)
	assert.Nil(t, rep.Snapshot)
	require.Len(t, got, 1)
}

// FuzzReadSnapshot: any JSON-looking input is read as a snapshot or
// refused with an error; samples never carry negative sizes and the
// counts add up.
func FuzzReadSnapshot(f *testing.F) {
	f.Add(string(buildSnapshot(f, snapshotJob{iters: 3, weights: 1 << 20, acts: 1, actSize: 1 << 10, leak: 512, segments: true, timeUS: true})))
	f.Add(`{"device_traces": [[{"action": "alloc", "addr": 1, "size": 5}, {"action": "free_completed", "addr": 2, "size": 9}]]}`)
	f.Add(`[{"action": "oom", "size": 1, "device_free": 0}]`)
	f.Add(`{"segments": [{"device": 3, "total_size": 1e3, "blocks": [{"size": 1e400, "state": "active_allocated"}]}], "device_traces": [[], [{"action":"alloc","addr":0,"size":0}]]}`)
	f.Add(`{"device_traces": [[{"action": "alloc", "addr": 18446744073709551615, "size": 9223372036854775807}, {"action": "alloc", "addr": 2, "size": 9223372036854775807}]]}`)
	f.Add("{\"device_traces\": \x00\xff")
	f.Add("\x80\x05garbage")
	f.Fuzz(func(t *testing.T, s string) {
		got, rep, err := ReadSamples(strings.NewReader(s), nil)
		if err != nil {
			var fe *gpumem.FieldError
			if !errors.Is(err, ErrNoSamples) && !errors.As(err, &fe) {
				t.Fatalf("error %v is neither ErrNoSamples nor a FieldError", err)
			}
			return
		}
		for _, x := range got {
			if x.Allocated < 0 || x.Used < 0 || x.Reserved < 0 {
				t.Fatalf("negative size in %v", x)
			}
		}
		if rep.Samples != len(got) {
			t.Fatalf("counts do not add up: %+v, %d samples", rep, len(got))
		}
		if sn := rep.Snapshot; sn != nil && (sn.Survivors < 0 || sn.SurvivorBytes < 0 || len(sn.Holders) > MaxHolders) {
			t.Fatalf("snapshot summary out of range: %+v", sn)
		}
		if _, err := Analyze(got, &Options{StepUnit: rep.StepUnit}); err != nil {
			t.Fatalf("Analyze: %v", err)
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatalf("json.Marshal(ReadReport): %v", err)
		}
	})
}

// BenchmarkReadSnapshot reads a snapshot of 20,000 iterations (140,000
// trace entries, about 15 MB of JSON) and analyzes its history.
func BenchmarkReadSnapshot(b *testing.B) {
	data := buildSnapshot(b, snapshotJob{iters: 20000, weights: 1 << 30, acts: 2, actSize: 64 << 20, leak: 1 << 20, segments: true, timeUS: true})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		got, rep, err := ReadSamples(bytes.NewReader(data), nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Analyze(got, &Options{StepUnit: rep.StepUnit}); err != nil {
			b.Fatal(err)
		}
	}
}
