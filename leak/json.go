package leak

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/gpumem/gpumem"
)

// This file gives the results JSON forms for tools (the gpumem oom and
// leak commands): sizes are integers of bytes, and a number the input did
// not give is null rather than zero.

// String returns the action's snake-case name ("expandable_segments").
func (a Action) String() string {
	switch a {
	case ActionExpandableSegments:
		return "expandable_segments"
	case ActionMaxSplitSize:
		return "max_split_size_mb"
	case ActionLowerBatch:
		return "lower_batch"
	case ActionCheckpointing:
		return "checkpointing"
	case ActionFlashAttention:
		return "flash_attention"
	case ActionOptimizer8bit:
		return "optimizer_8bit"
	case ActionFreeOtherProcess:
		return "free_other_process"
	case ActionRaiseLimit:
		return "raise_limit"
	case ActionShard:
		return "shard"
	case ActionChunk:
		return "chunk"
	case ActionFrameworkSetting:
		return "framework_setting"
	}
	return "none"
}

// String returns the field's snake-case name ("reserved_unallocated"),
// the key [OOM.MarshalJSON] writes it under.
func (f Field) String() string {
	switch f {
	case FieldDevice:
		return "device"
	case FieldRequested:
		return "requested"
	case FieldCapacity:
		return "capacity"
	case FieldFree:
		return "free"
	case FieldAllocated:
		return "allocated"
	case FieldReserved:
		return "reserved"
	case FieldReservedUnallocated:
		return "reserved_unallocated"
	case FieldPrivatePools:
		return "private_pools"
	case FieldAllowed:
		return "allowed"
	case FieldSelf:
		return "self"
	case FieldOther:
		return "other"
	case FieldProcesses:
		return "other_processes"
	}
	return "fields(" + strconv.Itoa(int(f)) + ")"
}

// fieldList returns the names of the fields in f, lowest bit first.
func fieldList(f Field) []string {
	out := []string{}
	for b := FieldDevice; b <= FieldProcesses; b <<= 1 {
		if f&b != 0 {
			out = append(out, b.String())
		}
	}
	return out
}

type jsonProcess struct {
	PID   int64 `json:"pid"`
	Bytes int64 `json:"bytes"`
}

type jsonOOM struct {
	Found               bool          `json:"found"`
	Framework           string        `json:"framework"`
	Backend             string        `json:"backend"`
	Era                 string        `json:"era"`
	Device              *int          `json:"device"`
	Requested           *int64        `json:"requested"`
	Capacity            *int64        `json:"capacity"`
	Free                *int64        `json:"free"`
	Allocated           *int64        `json:"allocated"`
	Reserved            *int64        `json:"reserved"`
	ReservedUnallocated *int64        `json:"reserved_unallocated"`
	PrivatePools        *int64        `json:"private_pools"`
	Allowed             *int64        `json:"allowed"`
	Self                *int64        `json:"self"`
	Other               *int64        `json:"other"`
	OtherProcesses      []jsonProcess `json:"other_processes"`
	Stated              []string      `json:"stated"`
	Derived             []string      `json:"derived"`
	Truncated           bool          `json:"truncated"`
	Warning             bool          `json:"warning"`
}

// MarshalJSON writes the message's numbers as integers of bytes: "found"
// (true for an out-of-memory error, false for an allocator warning),
// "warning" (OOM.Warning), "framework", "backend", "era", "device", "requested",
// "capacity", "free", "allocated", "reserved", "reserved_unallocated",
// "private_pools", "allowed", "self", "other", "other_processes"
// ([{"pid","bytes"}]), "stated" and "derived" (field names) and
// "truncated". A number neither stated nor derived is null.
func (o OOM) MarshalJSON() ([]byte, error) {
	known := o.Stated | o.Derived
	size := func(f Field, v gpumem.Bytes) *int64 {
		if known&f == 0 {
			return nil
		}
		n := int64(v)
		return &n
	}
	j := jsonOOM{
		Found:               o.Framework != FrameworkUnknown && !o.Warning,
		Framework:           o.Framework.String(),
		Backend:             o.Backend.String(),
		Era:                 o.Era.String(),
		Requested:           size(FieldRequested, o.Requested),
		Capacity:            size(FieldCapacity, o.Capacity),
		Free:                size(FieldFree, o.Free),
		Allocated:           size(FieldAllocated, o.Allocated),
		Reserved:            size(FieldReserved, o.Reserved),
		ReservedUnallocated: size(FieldReservedUnallocated, o.ReservedUnallocated),
		PrivatePools:        size(FieldPrivatePools, o.PrivatePools),
		Allowed:             size(FieldAllowed, o.Allowed),
		Self:                size(FieldSelf, o.Self),
		Other:               size(FieldOther, o.Other),
		OtherProcesses:      []jsonProcess{},
		Stated:              fieldList(o.Stated),
		Derived:             fieldList(o.Derived),
		Truncated:           o.Truncated,
		Warning:             o.Warning,
	}
	if o.Stated&FieldDevice != 0 {
		d := o.Device
		j.Device = &d
	}
	for _, p := range o.ProcessList() {
		j.OtherProcesses = append(j.OtherProcesses, jsonProcess{PID: p.PID, Bytes: int64(p.Used)})
	}
	return json.Marshal(j)
}

type jsonAdvice struct {
	Action string `json:"action"`
	Text   string `json:"text"`
}

// MarshalJSON writes "cause", "reason", "requested", "free", "shortfall",
// "reserved_unallocated", "other_processes_bytes", "outside",
// "fragmentation" (null when unknown) and "advice" ([{"action","text"}]).
func (d Diagnosis) MarshalJSON() ([]byte, error) {
	var frag *float64
	if d.Fragmentation >= 0 {
		f := d.Fragmentation
		frag = &f
	}
	adv := make([]jsonAdvice, 0, len(d.Advice))
	for _, a := range d.Advice {
		adv = append(adv, jsonAdvice{Action: a.Action.String(), Text: a.Text})
	}
	return json.Marshal(struct {
		Cause               string       `json:"cause"`
		Reason              string       `json:"reason"`
		Requested           int64        `json:"requested"`
		Free                int64        `json:"free"`
		Shortfall           int64        `json:"shortfall"`
		ReservedUnallocated int64        `json:"reserved_unallocated"`
		OtherProcessesBytes int64        `json:"other_processes_bytes"`
		Outside             int64        `json:"outside"`
		Fragmentation       *float64     `json:"fragmentation"`
		Advice              []jsonAdvice `json:"advice"`
	}{d.Cause.String(), d.Reason, int64(d.Requested), int64(d.Free), int64(d.Shortfall), int64(d.ReservedUnallocated),
		int64(d.OtherProcesses), int64(d.Outside), frag, adv})
}

// finite returns a pointer to f, or nil when f is NaN or infinite.
func finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// MarshalJSON writes "samples", "warm_up", "axis", "axis_unit" (what
// bytes_per_step and oom_step count: "step", "iteration", "epoch",
// "second" or "sample"; see [Report.Unit]), "shape", "leak",
// "accelerating", "peak", "confidence", "bytes_per_step",
// "bytes_per_hour" (null without times), "r_squared", "curvature",
// "capacity" (null when unknown), "oom_step", "oom_low", "oom_high" and
// "oom_time" (null without a forecast), "observed_oom_step" (null when the
// log reports none), "short" (2 to min_samples − 1 samples: no verdict),
// "slope_low" and "slope_high" (a short series' least and most growth
// between consecutive samples, else null), "min_samples" (the fewest a
// verdict needs), "runs" and "run" (runs in the log, the one analyzed)
// and "reason". "confidence" is null for a series of 2 samples.
func (r Report) MarshalJSON() ([]byte, error) {
	var capa *int64
	if r.Capacity > 0 {
		c := int64(r.Capacity)
		capa = &c
	}
	var step, lo, hi *float64
	var when *time.Time
	if r.OOM.OK {
		step, lo, hi = finite(math.Round(r.OOM.Step)), finite(math.Round(r.OOM.Low)), finite(math.Round(r.OOM.High))
		if r.OOM.HasTime && !r.OOM.Time.IsZero() {
			t := r.OOM.Time
			when = &t
		}
	}
	var perHour *float64
	if r.fit.hasTime {
		perHour = finite(r.BytesPerHour)
	}
	var observed *int64
	if r.ObservedOOM {
		s := r.ObservedOOMStep
		observed = &s
	}
	var slopeLow, slopeHigh *float64
	if r.Short {
		slopeLow, slopeHigh = finite(r.SlopeLow), finite(r.SlopeHigh)
	}
	axis := map[Axis]string{AxisIndex: "sample", AxisStep: "step", AxisTime: "second"}[r.Axis]
	return json.Marshal(struct {
		Samples         int        `json:"samples"`
		WarmUp          int        `json:"warm_up"`
		Axis            string     `json:"axis"`
		AxisUnit        string     `json:"axis_unit"`
		Shape           string     `json:"shape"`
		Leak            bool       `json:"leak"`
		Accelerating    bool       `json:"accelerating"`
		Peak            bool       `json:"peak"`
		Confidence      *float64   `json:"confidence"`
		BytesPerStep    *float64   `json:"bytes_per_step"`
		BytesPerHour    *float64   `json:"bytes_per_hour"`
		RSquared        *float64   `json:"r_squared"`
		Curvature       *float64   `json:"curvature"`
		Capacity        *int64     `json:"capacity"`
		OOMStep         *float64   `json:"oom_step"`
		OOMLow          *float64   `json:"oom_low"`
		OOMHigh         *float64   `json:"oom_high"`
		OOMTime         *time.Time `json:"oom_time"`
		ObservedOOMStep *int64     `json:"observed_oom_step"`
		Short           bool       `json:"short"`
		SlopeLow        *float64   `json:"slope_low"`
		SlopeHigh       *float64   `json:"slope_high"`
		MinSamples      int        `json:"min_samples"`
		Runs            int        `json:"runs"`
		Run             int        `json:"run"`
		Reason          string     `json:"reason"`
	}{r.Samples, r.WarmUp, axis, r.Unit(), r.Shape.String(), r.Leak, r.Accelerating, r.Peak, finite(r.Confidence),
		finite(r.BytesPerStep), perHour, finite(r.RSquared), finite(r.Curvature), capa, step, lo, hi, when, observed,
		r.Short, slopeLow, slopeHigh, r.MinSamples, r.Runs, r.Run, r.Reason})
}

type jsonSkipped struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
	Text   string `json:"text"`
	Detail string `json:"detail,omitempty"`
}

// MarshalJSON writes "lines", "read", "skipped", "skipped_by_reason"
// ({"no_memory_figure", "malformed", "too_long", "host_memory"}), "examples"
// ([{"line", "reason", "text", "detail"}]), "samples", "step_unit" (null
// when no sample has a step), "assumed_unit" (null when no unit was
// assumed), "prose_samples", "confidence" ("high", "medium" or "low"),
// "confidence_why" (why not high) and "snapshot" (a PyTorch memory
// snapshot's trace: "device", "entries", "allocs", "frees",
// "unknown_frees", "ooms", "segments", "reserved", "allocated",
// "absolute", "window", "survivors", "survivor_bytes" and "holders"
// ([{"frame", "stack", "count", "bytes", "spread", "growing"}]); null for
// other inputs).
func (r ReadReport) MarshalJSON() ([]byte, error) {
	by := make(map[string]int, numSkipReasons)
	for i, c := range r.ByReason {
		by[SkipReason(i).String()] = c
	}
	ex := make([]jsonSkipped, 0, len(r.Examples))
	for _, e := range r.Examples {
		ex = append(ex, jsonSkipped{e.Line, e.Reason.String(), e.Text, e.Detail})
	}
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return json.Marshal(struct {
		Lines    int            `json:"lines"`
		Read     int            `json:"read"`
		Skipped  int            `json:"skipped"`
		ByReason map[string]int `json:"skipped_by_reason"`
		Examples []jsonSkipped  `json:"examples"`
		Samples  int            `json:"samples"`
		StepUnit *string        `json:"step_unit"`
		Assumed  *string        `json:"assumed_unit"`
		Prose    int            `json:"prose_samples"`
		Conf     string         `json:"confidence"`
		Why      []string       `json:"confidence_why"`
		Snapshot *jsonSnapshot  `json:"snapshot"`
	}{r.Lines, r.Read, r.Skipped, by, ex, r.Samples, str(r.StepUnit), str(r.Assumed), r.Prose, r.Confidence.String(),
		append([]string{}, r.ConfidenceWhy...), snapshotJSON(r.Snapshot)})
}

type jsonHolder struct {
	Frame   string   `json:"frame"`
	Stack   []string `json:"stack"`
	Count   int      `json:"count"`
	Bytes   int64    `json:"bytes"`
	Spread  int      `json:"spread"`
	Growing bool     `json:"growing"`
}

type jsonSnapshot struct {
	Device        int          `json:"device"`
	Devices       int          `json:"devices"`
	Entries       int          `json:"entries"`
	Allocs        int          `json:"allocs"`
	Frees         int          `json:"frees"`
	UnknownFrees  int          `json:"unknown_frees"`
	OOMs          int          `json:"ooms"`
	Segments      int          `json:"segments"`
	Reserved      int64        `json:"reserved"`
	Allocated     int64        `json:"allocated"`
	Absolute      bool         `json:"absolute"`
	Window        int          `json:"window"`
	Survivors     int          `json:"survivors"`
	SurvivorBytes int64        `json:"survivor_bytes"`
	Holders       []jsonHolder `json:"holders"`
}

func snapshotJSON(s *SnapshotInfo) *jsonSnapshot {
	if s == nil {
		return nil
	}
	j := &jsonSnapshot{s.Device, s.Devices, s.Entries, s.Allocs, s.Frees, s.UnknownFrees, s.OOMs, s.Segments,
		int64(s.Reserved), int64(s.Allocated), s.Absolute, s.Window, s.Survivors, int64(s.SurvivorBytes), []jsonHolder{}}
	for _, h := range s.Holders {
		j.Holders = append(j.Holders, jsonHolder{h.Frame, append([]string{}, h.Stack...), h.Count, int64(h.Bytes), h.Spread, h.Growing})
	}
	return j
}
