package leak

import (
	"fmt"
	"sync"

	"github.com/gpumem/gpumem"
)

// AlertKind says what a [Detector] noticed.
type AlertKind uint8

// Alert kinds.
const (
	AlertThreshold AlertKind = iota + 1 // memory crossed Threshold × Capacity
	AlertGrowth                         // a leak whose forecast OOM is within Horizon
	AlertOOM                            // a sample reported an out-of-memory failure
)

// String returns the kind's name ("growth").
func (k AlertKind) String() string {
	switch k {
	case AlertThreshold:
		return "threshold"
	case AlertGrowth:
		return "growth"
	case AlertOOM:
		return "oom"
	}
	return "none"
}

// Alert is a warning from a [Detector].
type Alert struct {
	Kind     AlertKind
	Sample   Sample       // the sample that raised it
	Value    gpumem.Bytes // its memory in the watched column
	Capacity gpumem.Bytes
	Report   Report // the window's analysis (AlertGrowth)
	Message  string
}

// DetectorOptions tunes a [Detector]. The zero value, and nil, mean the
// defaults.
type DetectorOptions struct {
	// Capacity of the device. Default: taken from samples that carry it
	// (nvidia-smi memory.total); without it only growth alerts without a
	// forecast and OOM alerts are raised.
	Capacity gpumem.Bytes
	// Threshold is the share of Capacity that raises AlertThreshold.
	// Default 0.90, also for a value outside (0, 1] or NaN.
	Threshold float64
	// Window is the number of recent samples analyzed. Default 64, at
	// least 8 and at most 65536.
	Window int
	// Horizon is how far ahead (in steps, seconds or samples: the
	// window's axis) a forecast OOM raises AlertGrowth. Default: as far
	// as the window spans, also for a value that is not positive or is
	// NaN; +Inf raises it for any forecast OOM.
	Horizon float64
	// Column to watch. Default: the first sample's Used, else Reserved,
	// else Allocated.
	Column Column
	// Device is the GPU index to watch; samples of other devices are
	// ignored. Default 0.
	Device int
}

// maxWindow bounds the ring a Detector allocates.
const maxWindow = 1 << 16

// Detector watches memory samples as they arrive, as a sidecar does, and
// raises alerts before the crash. It keeps the last Window samples, is
// safe for concurrent use, starts no goroutines and never reads the
// clock: samples carry their own steps or times.
//
// Alerts are edge-triggered: a threshold or growth alert is raised once
// and again only after the condition has cleared. Add returns at most one
// alert, in the order OOM, threshold, growth; a growth alert held back by
// a threshold alert comes with the next sample.
type Detector struct {
	mu       sync.Mutex
	opt      DetectorOptions
	buf      []Sample // ring of the last Window samples
	next     int
	full     bool
	aboveThr bool
	growing  bool
}

// NewDetector returns a Detector with the given options. The zero
// Detector is NewDetector(nil).
func NewDetector(opts *DetectorOptions) *Detector {
	d := &Detector{}
	d.init(opts)
	return d
}

func (d *Detector) init(opts *DetectorOptions) {
	var o DetectorOptions
	if opts != nil {
		o = *opts
	}
	if !(o.Threshold > 0 && o.Threshold <= 1) { // NaN too
		o.Threshold = 0.90
	}
	if !(o.Horizon > 0) { // NaN too
		o.Horizon = 0
	}
	if o.Window < 8 {
		o.Window = 64
	}
	o.Window = min(o.Window, maxWindow)
	d.opt, d.buf = o, make([]Sample, o.Window)
}

// Add records a sample and returns an alert when it raises one.
func (d *Detector) Add(s Sample) (Alert, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.buf == nil {
		d.init(nil)
	}
	if s.OOM {
		return Alert{Kind: AlertOOM, Sample: s, Message: fmt.Sprintf("out of memory reported (%s)", s)}, true
	}
	if d.opt.Column == 0 {
		switch {
		case s.Has&ColUsed != 0:
			d.opt.Column = ColUsed
		case s.Has&ColReserved != 0:
			d.opt.Column = ColReserved
		case s.Has&ColAllocated != 0:
			d.opt.Column = ColAllocated
		default:
			return Alert{}, false
		}
	}
	if s.Has&d.opt.Column == 0 || s.Device != d.opt.Device {
		return Alert{}, false
	}
	if d.opt.Capacity == 0 && s.Has&ColCapacity != 0 {
		d.opt.Capacity = s.Capacity
	}
	d.buf[d.next] = s
	d.next = (d.next + 1) % len(d.buf)
	if d.next == 0 {
		d.full = true
	}
	v := value(s, d.opt.Column)
	capa := d.opt.Capacity

	if capa > 0 {
		thr := gpumem.Bytes(d.opt.Threshold * float64(capa))
		if v >= thr {
			if !d.aboveThr {
				d.aboveThr = true
				return Alert{Kind: AlertThreshold, Sample: s, Value: v, Capacity: capa,
					Message: fmt.Sprintf("memory %s is %.0f%% of %s", v.String(), 100*float64(v)/float64(capa), capa.String())}, true
			}
		} else {
			d.aboveThr = false
		}
	}

	window := d.window()
	if len(window) < 8 {
		return Alert{}, false
	}
	r, err := Analyze(window, &Options{Capacity: capa, Column: d.opt.Column, WarmUp: -1, MinSamples: 8, Device: d.opt.Device})
	if err != nil || !r.Leak {
		d.growing = false
		return Alert{}, false
	}
	horizon := d.opt.Horizon
	if horizon <= 0 {
		horizon = r.fit.xLast
	}
	now := r.fit.x0 + r.fit.xLast
	soon := capa == 0 || (r.OOM.OK && r.OOM.Step-now <= horizon)
	if !soon {
		d.growing = false
		return Alert{}, false
	}
	if d.growing {
		return Alert{}, false
	}
	d.growing = true
	msg := fmt.Sprintf("%s: %s", r.Shape, r.Reason)
	return Alert{Kind: AlertGrowth, Sample: s, Value: v, Capacity: capa, Report: r, Message: msg}, true
}

// window returns the buffered samples, oldest first.
func (d *Detector) window() []Sample {
	if !d.full {
		return append([]Sample(nil), d.buf[:d.next]...)
	}
	out := make([]Sample, 0, len(d.buf))
	out = append(out, d.buf[d.next:]...)
	return append(out, d.buf[:d.next]...)
}
