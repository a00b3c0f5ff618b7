package leak

import (
	"strconv"
	"strings"
)

// String describes the message on one line, with every number it stated or
// that was derived from stated ones (OOM.Known), under the names
// MarshalJSON gives them:
//
//	pytorch CUDA out of memory on device 0: requested 2.00 GiB, capacity 23.64 GiB, free 1.12 GiB, ...
//
// An allocator warning says "warning" instead of "out of memory", a message
// cut short ends in "(truncated)", and the zero OOM is "no out-of-memory
// message". Programs read the fields, after OOM.Known.
func (o OOM) String() string {
	if o == (OOM{}) {
		return "no out-of-memory message"
	}
	var s strings.Builder
	s.WriteString(o.Framework.String())
	s.WriteString(" ")
	s.WriteString(o.Backend.String())
	if o.Warning {
		s.WriteString(" allocator warning")
	} else {
		s.WriteString(" out of memory")
	}
	if o.Known(FieldDevice) {
		s.WriteString(" on device ")
		s.WriteString(strconv.Itoa(o.Device))
	}
	sep := ": "
	for _, f := range [...]struct {
		f Field
		v func() string
	}{
		{FieldRequested, o.Requested.String},
		{FieldCapacity, o.Capacity.String},
		{FieldFree, o.Free.String},
		{FieldAllocated, o.Allocated.String},
		{FieldReserved, o.Reserved.String},
		{FieldReservedUnallocated, o.ReservedUnallocated.String},
		{FieldPrivatePools, o.PrivatePools.String},
		{FieldAllowed, o.Allowed.String},
		{FieldSelf, o.Self.String},
		{FieldOther, o.Other.String},
		{FieldProcesses, o.OtherProcesses().String},
	} {
		if !o.Known(f.f) {
			continue
		}
		s.WriteString(sep)
		s.WriteString(f.f.String())
		s.WriteString(" ")
		s.WriteString(f.v())
		sep = ", "
	}
	if o.Truncated {
		s.WriteString(" (truncated)")
	}
	return s.String()
}

// String is the advice's text: what to change and why, with the numbers.
func (a Advice) String() string { return a.Text }

// String is the cause and the sentence that decides it, then the ranked
// advice, one per line:
//
//	fragmentation: 6.20 GiB is reserved but unallocated (28.2% of reserved), ...
//	  - set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: ...
func (d Diagnosis) String() string {
	var s strings.Builder
	s.WriteString(d.Cause.String())
	if d.Reason != "" {
		s.WriteString(": ")
		s.WriteString(d.Reason)
	}
	for _, a := range d.Advice {
		s.WriteString("\n  - ")
		s.WriteString(a.Text)
	}
	return s.String()
}

// String is the report's Reason: its verdict in one sentence with the
// numbers ("linear leak over 36 samples: 9.55 GiB → 11.18 GiB, 4.77 MiB per
// step (Theil–Sen), ...").
func (r Report) String() string { return r.Reason }

// String is the forecast's Reason ("linear leak reaches 22.35 GiB at step
// 2800 (range 2800–2800)").
func (f Forecast) String() string { return f.Reason }
