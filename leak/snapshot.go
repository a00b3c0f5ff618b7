package leak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
)

// This file reads PyTorch's memory snapshots: the dictionary
// torch.cuda.memory._snapshot() returns and _dump_snapshot() pickles,
// converted to JSON (pytorch/pytorch torch/cuda/memory.py at
// 00b65a04a2d30e498eedcb1e3476abd547f428f1, the Snapshot, Segment, Block,
// Frame and TraceEntry types of _snapshot's docstring; the trace is
// replayed as torch/cuda/_memory_viz.py's trace() does, at
// 0044eb6704e63eec2a52110f4b1a44331e3d4342):
//
//	{"segments": [{"device": 0, "address": …, "total_size": …, "stream": …,
//	   "allocated_size": …, "blocks": [{"size": …, "requested_size": …,
//	   "address": …, "state": "active_allocated" | "active_awaiting_free" |
//	   "inactive", "frames": [{"filename", "line", "name"}]}]}],
//	 "device_traces": [[{"action": "alloc" | "free_requested" |
//	   "free_completed" | "segment_alloc" | "segment_free" | "segment_map" |
//	   "segment_unmap" | "oom" | "snapshot" | "annotate", "addr": …,
//	   "size": …, "stream": …, "frames": […], "time_us": …,
//	   "device_free": … (oom only)}], …]}
//
// The trace exists when _record_memory_history(enabled="all") was on; it
// is a ring buffer of the last max_entries events. A bare list of trace
// entries (one device's trace) is read as device 0's.

// SnapshotInfo is what a PyTorch memory snapshot says beyond its samples
// (ReadReport.Snapshot).
type SnapshotInfo struct {
	Device       int          // the device whose trace was read (the first with entries)
	Devices      int          // device traces in the snapshot
	Entries      int          // trace entries of that device
	Allocs       int          // "alloc" entries
	Frees        int          // "free_completed" entries (or "free_requested" when the trace has no completed frees)
	UnknownFrees int          // frees of blocks allocated before the trace's first entry (the ring buffer's start)
	OOMs         int          // "oom" entries
	Segments     int          // segments of the device at the snapshot
	Reserved     gpumem.Bytes // sum of their total_size: reserved memory at the snapshot
	Allocated    gpumem.Bytes // sum of their active_allocated blocks: allocated memory at the snapshot
	// Absolute is true when the segments give the allocated level at the
	// snapshot, so the history is in absolute bytes; else it is relative
	// to its lowest point.
	Absolute bool
	// Window is how many entries each sample covers: 1 when the trace
	// has at most MaxSnapshotSamples events, else the history is the
	// lowest live level of each window of that many entries (the floor
	// between iterations, which a leak raises).
	Window int
	// Survivors are the allocations of the trace never freed by its end,
	// and SurvivorBytes their size.
	Survivors     int
	SurvivorBytes gpumem.Bytes
	// Holders groups the survivors by the allocating frame, the most
	// bytes first (at most MaxHolders).
	Holders []Holder
}

// Holder is a frame whose allocations survive to the end of the trace.
type Holder struct {
	Frame string   // "train.py:57:train_step": the first frame outside torch, else the first frame, else "<no frames>"
	Stack []string // up to 4 frames from the allocation site outwards
	Count int      // surviving allocations
	Bytes gpumem.Bytes
	// Spread is in how many tenths of the trace (by entry) this frame
	// left survivors: an allocation kept once (a model, an optimizer
	// state) has 1; one kept at every iteration has up to 10.
	Spread int
	// Growing is Spread ≥ 3: survivors left all along the trace, the
	// mark of memory that grows per iteration.
	Growing bool
}

// Limits of the snapshot reader.
const (
	MaxSnapshotSamples = 4000 // samples of a trace's history
	MaxHolders         = 8    // holders kept
)

type snapFrame struct {
	Filename string          `json:"filename"`
	Line     json.RawMessage `json:"line"`
	Name     string          `json:"name"`
}

// snapNum is a JSON number of a snapshot, read without allocating: an
// unsigned integer, or why it is not one.
type snapNum struct {
	v   uint64
	set bool // present and not null
	neg bool // a negative integer
	bad bool // not an integer (a fraction, a string, out of range)
}

// UnmarshalJSON implements [json.Unmarshaler].
func (n *snapNum) UnmarshalJSON(b []byte) error {
	*n = snapNum{set: string(b) != "null"}
	if !n.set {
		return nil
	}
	d := b
	if len(d) > 0 && d[0] == '-' {
		n.neg, d = true, d[1:]
	}
	var v uint64
	for _, c := range d {
		if c < '0' || c > '9' || v > (math.MaxUint64-9)/10 {
			// 1e3 or 2.0 from a converter: an integer all the same.
			f, err := strconv.ParseFloat(string(b), 64)
			if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<63 {
				n.bad = true
				return nil
			}
			n.neg, n.v = f < 0, uint64(math.Abs(f))
			return nil
		}
		v = v*10 + uint64(c-'0')
	}
	n.bad = len(d) == 0
	n.v = v
	return nil
}

// snapAction is a trace entry's action.
type snapAction uint8

const (
	actNone snapAction = iota // missing
	actAlloc
	actFreeRequested
	actFreeCompleted
	actOOM
	actOther // segment actions, snapshot, annotate, and actions of later releases
)

// UnmarshalJSON implements [json.Unmarshaler].
func (a *snapAction) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*a = actNone
		return nil
	}
	if len(b) < 2 || b[0] != '"' {
		return fmt.Errorf("action %.20s is not a string", b)
	}
	switch string(b[1 : len(b)-1]) {
	case "alloc":
		*a = actAlloc
	case "free_requested":
		*a = actFreeRequested
	case "free_completed":
		*a = actFreeCompleted
	case "oom":
		*a = actOOM
	case "":
		*a = actNone
	default:
		*a = actOther
	}
	return nil
}

type snapBlock struct {
	Size  snapNum `json:"size"`
	State string  `json:"state"`
}

type snapSegment struct {
	Device    snapNum     `json:"device"`
	TotalSize snapNum     `json:"total_size"`
	Blocks    []snapBlock `json:"blocks"`
}

type snapEntry struct {
	Action snapAction      `json:"action"`
	Addr   snapNum         `json:"addr"`
	Size   snapNum         `json:"size"`
	TimeUS snapNum         `json:"time_us"`
	Frames json.RawMessage `json:"frames"` // decoded for the survivors only
}

type snapFile struct {
	Segments     []snapSegment `json:"segments"`
	DeviceTraces [][]snapEntry `json:"device_traces"`
}

// looksLikeSnapshot reports JSON that holds a snapshot's keys or a list
// of trace entries.
func looksLikeSnapshot(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n\ufeff")
	if len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return false
	}
	head := t[:min(len(t), 4096)]
	if t[0] == '{' {
		return bytes.Contains(t, []byte(`"device_traces"`)) || (bytes.Contains(head, []byte(`"segments"`)) && bytes.Contains(t, []byte(`"blocks"`)))
	}
	return bytes.Contains(head, []byte(`"action"`))
}

// maxSnapSize bounds a size in a snapshot (1 PiB): beyond it the sums of
// a trace could overflow, and no device holds it.
const maxSnapSize = 1 << 50

// snapSize reads a block, segment or trace size; field names it in an
// error (a function, so that the name is built only then).
func snapSize(n snapNum, field func() string) (int64, error) {
	switch {
	case !n.set:
		return 0, gpumem.Errorf(field(), "", gpumem.ErrSyntax, "missing")
	case n.bad:
		return 0, gpumem.Errorf(field(), "", gpumem.ErrSyntax, "want a non-negative integer")
	case n.neg && n.v > 0:
		return 0, gpumem.Errorf(field(), -int64(min(n.v, 1<<62)), gpumem.ErrRange, "negative")
	case n.v > maxSnapSize:
		return 0, gpumem.Errorf(field(), n.v, gpumem.ErrRange, "larger than 1 PiB")
	}
	return int64(n.v), nil
}

// snapAddr reads an address: any unsigned 64-bit integer.
func snapAddr(n snapNum, field func() string) (uint64, error) {
	switch {
	case !n.set:
		return 0, gpumem.Errorf(field(), "", gpumem.ErrSyntax, "missing")
	case n.bad || n.neg && n.v > 0:
		return 0, gpumem.Errorf(field(), "", gpumem.ErrSyntax, "want an unsigned integer address")
	}
	return n.v, nil
}

// readSnapshot reads a snapshot (or a list of trace entries) into samples
// of allocated memory, one per trace event or per window of events.
func readSnapshot(data []byte) ([]Sample, *SnapshotInfo, error) {
	var f snapFile
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	var err error
	if len(t) > 0 && t[0] == '[' {
		var tr []snapEntry
		err = json.Unmarshal(t, &tr)
		f.DeviceTraces = [][]snapEntry{tr}
	} else {
		err = json.Unmarshal(t, &f)
	}
	if err != nil {
		return nil, nil, gpumem.Errorf("snapshot", "", gpumem.ErrSyntax, "not a PyTorch memory snapshot in JSON: %v", err)
	}
	info := &SnapshotInfo{Devices: len(f.DeviceTraces)}
	for i, tr := range f.DeviceTraces {
		if len(tr) > 0 {
			info.Device = i
			break
		}
	}
	for i, s := range f.Segments {
		if s.Device.set {
			d, err := snapSize(s.Device, func() string { return fmt.Sprintf("segments[%d].device", i) })
			if err != nil {
				return nil, nil, err
			}
			if d != int64(info.Device) {
				continue
			}
		}
		ts, err := snapSize(s.TotalSize, func() string { return fmt.Sprintf("segments[%d].total_size", i) })
		if err != nil {
			return nil, nil, err
		}
		info.Segments++
		if info.Reserved += gpumem.Bytes(ts); info.Reserved > maxSnapSize*1024 {
			return nil, nil, gpumem.Errorf(fmt.Sprintf("segments[%d].total_size", i), ts, gpumem.ErrRange, "the segments add up to more than 1 EiB")
		}
		for j, b := range s.Blocks {
			if b.State != "active_allocated" {
				continue
			}
			sz, err := snapSize(b.Size, func() string { return fmt.Sprintf("segments[%d].blocks[%d].size", i, j) })
			if err != nil {
				return nil, nil, err
			}
			if info.Allocated += gpumem.Bytes(sz); info.Allocated > maxSnapSize*1024 {
				return nil, nil, gpumem.Errorf(fmt.Sprintf("segments[%d].blocks[%d].size", i, j), sz, gpumem.ErrRange, "the blocks add up to more than 1 EiB")
			}
		}
	}
	var trace []snapEntry
	if info.Device < len(f.DeviceTraces) {
		trace = f.DeviceTraces[info.Device]
	}
	info.Entries = len(trace)
	if len(trace) == 0 {
		return nil, info, nil
	}
	// Frees: the completed ones, or the requested ones when the trace was
	// recorded with skip_actions=["free_completed"].
	freeAction := actFreeRequested
	for _, e := range trace {
		if e.Action == actFreeCompleted {
			freeAction = actFreeCompleted
			break
		}
	}
	type liveBlock struct {
		size  int64
		entry int
	}
	live := map[uint64]liveBlock{}
	var cur int64 // live bytes relative to the trace's start
	type point struct {
		entry int
		live  int64
		oom   bool
	}
	pts := make([]point, 0, min(len(trace), 1<<16))
	withTime := true
	for i, e := range trace {
		field := func(key string) func() string {
			return func() string { return fmt.Sprintf("device_traces[%d][%d].%s", info.Device, i, key) }
		}
		switch e.Action {
		case actAlloc:
			addr, err := snapAddr(e.Addr, field("addr"))
			if err != nil {
				return nil, nil, err
			}
			sz, err := snapSize(e.Size, field("size"))
			if err != nil {
				return nil, nil, err
			}
			if old, ok := live[addr]; ok {
				cur -= old.size // an address reused without its free in the buffer
			}
			live[addr] = liveBlock{size: sz, entry: i}
			if cur += sz; cur > maxSnapSize*1024 {
				return nil, nil, gpumem.Errorf(field("size")(), sz, gpumem.ErrRange, "live allocations add up to more than 1 EiB")
			}
			info.Allocs++
		case freeAction:
			addr, err := snapAddr(e.Addr, field("addr"))
			if err != nil {
				return nil, nil, err
			}
			sz, err := snapSize(e.Size, field("size"))
			if err != nil {
				return nil, nil, err
			}
			if _, ok := live[addr]; !ok {
				info.UnknownFrees++
			}
			delete(live, addr)
			cur -= sz
			info.Frees++
		case actOOM:
			info.OOMs++
			pts = append(pts, point{entry: i, live: cur, oom: true})
			continue
		case actNone:
			return nil, nil, gpumem.Errorf(field("action")(), "", gpumem.ErrSyntax, "missing")
		default:
			// free_requested when completed frees are recorded, segment
			// actions, snapshot, annotate, and actions of later releases:
			// no change of allocated memory.
			continue
		}
		if !e.TimeUS.set || e.TimeUS.bad || e.TimeUS.neg {
			withTime = false
		}
		pts = append(pts, point{entry: i, live: cur})
	}
	if len(pts) == 0 {
		return nil, info, nil
	}
	// The level: the segments' allocated bytes at the snapshot are the
	// trace's last level; without segments, the lowest point is 0.
	offset := -slices.MinFunc(pts, func(a, b point) int { return cmpInt64(a.live, b.live) }).live
	if info.Segments > 0 {
		off := int64(info.Allocated) - cur
		if low := slices.MinFunc(pts, func(a, b point) int { return cmpInt64(a.live, b.live) }).live; low+off >= 0 {
			offset = off
			info.Absolute = true
		}
	}
	// Samples: every event, or the lowest level of each window.
	window := 1
	if len(pts) > MaxSnapshotSamples {
		window = (len(pts) + MaxSnapshotSamples - 1) / MaxSnapshotSamples
	}
	info.Window = window
	out := make([]Sample, 0, len(pts)/window+1)
	for w := 0; w < len(pts); w += window {
		end := min(len(pts), w+window)
		best := -1
		for k := w; k < end; k++ {
			p := pts[k]
			if p.oom {
				out = append(out, Sample{Step: int64(p.entry), Has: ColStep, OOM: true, Device: info.Device})
				continue
			}
			if best < 0 || p.live < pts[best].live {
				best = k
			}
		}
		if best < 0 {
			continue
		}
		p := pts[best]
		s := Sample{Step: int64(p.entry), Allocated: gpumem.Bytes(p.live + offset), Has: ColStep | ColAllocated, Device: info.Device}
		if withTime && trace[p.entry].TimeUS.v < 1<<62 {
			s.Time = time.UnixMicro(int64(trace[p.entry].TimeUS.v)).UTC()
			s.Has |= ColTime
		}
		out = append(out, s)
	}
	// Survivors and the frames that hold them.
	type group struct {
		h      Holder
		tenths [10]bool
	}
	groups := map[string]*group{}
	for _, b := range live {
		info.Survivors++
		info.SurvivorBytes += gpumem.Bytes(b.size)
		var frames []snapFrame
		_ = json.Unmarshal(trace[b.entry].Frames, &frames) // frames that do not read: "<no frames>"
		frame, stack := holderFrame(frames)
		g := groups[frame]
		if g == nil {
			g = &group{h: Holder{Frame: frame, Stack: stack}}
			groups[frame] = g
		}
		g.h.Count++
		g.h.Bytes += gpumem.Bytes(b.size)
		g.tenths[b.entry*10/len(trace)] = true
	}
	for _, g := range groups {
		for _, t := range g.tenths {
			if t {
				g.h.Spread++
			}
		}
		g.h.Growing = g.h.Spread >= 3
		info.Holders = append(info.Holders, g.h)
	}
	slices.SortFunc(info.Holders, func(a, b Holder) int {
		if a.Growing != b.Growing {
			if a.Growing {
				return -1
			}
			return 1
		}
		if c := cmpInt64(int64(b.Bytes), int64(a.Bytes)); c != 0 {
			return c
		}
		return strings.Compare(a.Frame, b.Frame)
	})
	if len(info.Holders) > MaxHolders {
		info.Holders = info.Holders[:MaxHolders]
	}
	return out, info, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// holderFrame names an allocation by its first frame outside PyTorch
// (a frame of the user's code), in _memory_viz's "file:line:name" form.
func holderFrame(frames []snapFrame) (string, []string) {
	if len(frames) == 0 {
		return "<no frames>", nil
	}
	format := func(f snapFrame) string {
		name := f.Filename
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		line := strings.Trim(string(f.Line), `"`)
		return name + ":" + line + ":" + f.Name
	}
	pick := 0
	for i, f := range frames {
		if strings.HasSuffix(f.Filename, ".py") && !strings.Contains(f.Filename, "/torch/") {
			pick = i
			break
		}
	}
	var stack []string
	for _, f := range frames[pick:min(len(frames), pick+4)] {
		stack = append(stack, format(f))
	}
	return format(frames[pick]), stack
}
