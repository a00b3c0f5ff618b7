package leak

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
)

// This file reads tables: nvidia-smi --format=csv output, CSV files that
// training scripts and loggers write with their own headers, and bare
// columns of numbers.

// csvSpec is what a header says about the columns (index+1; 0 = absent).
type csvSpec struct {
	delim    byte // ',', '\t', ';', or ' ' for runs of blanks
	n        int  // fields per row
	time     int
	timeMS   bool // a numeric time column in milliseconds ("time_ms")
	step     int
	stepUnit string // "step", "iteration" or "epoch"
	device   int
	capacity int
	capUnit  gpumem.Bytes
	mem      [3]csvMem // Used, Allocated, Reserved
	// Per-GPU memory columns: W&B's system.gpu.N.memoryAllocatedBytes or
	// system.gpu.N.memoryAllocated (a percentage of the device memory),
	// Lightning's "gpu_id: N/memory.used (MB)".
	gpus []gpuCol
}

// smiTime is nvidia-smi's timestamp layout.
const smiTime = "2006/01/02 15:04:05.000"

// looksLikeSMIRow reports a header-less nvidia-smi row: a timestamp then
// comma-separated fields.
func looksLikeSMIRow(t string) bool {
	first, rest, ok := strings.Cut(t, ",")
	if !ok || !strings.Contains(rest, ",") && !strings.Contains(rest, "MiB") {
		return false
	}
	_, err := time.Parse(smiTime, strings.TrimSpace(first))
	return err == nil
}

// csvRow reads a row of the current table. It returns ok=false without
// error for a line that is not a row (another field count: the table has
// ended) and for a row without a memory figure.
func (p *sampleParser) csvRow(t string, n int) (Sample, bool, error) {
	if !p.csv {
		// Header-less nvidia-smi rows follow the documented query order
		// timestamp, memory.used, memory.total; values without unit are
		// MiB (nvidia-smi's nounits).
		p.csv = true
		p.spec = csvSpec{delim: ',', time: 1, mem: [3]csvMem{{idx: 2, unit: gpumem.MiB}}, capacity: 3, capUnit: gpumem.MiB}
		p.spec.n = len(splitFields(t, ','))
		if p.spec.n < 3 {
			p.spec.capacity = 0
		}
	}
	fields := splitFields(t, p.spec.delim)
	if len(fields) != p.spec.n {
		// Not a row (a log line between tables); leave table mode.
		p.csv = false
		return Sample{}, false, nil
	}
	sp := &p.spec
	s := Sample{Line: n}
	get := func(col int) string { return fields[col-1] }
	if sp.time > 0 {
		tm, ok := tableTime(get(sp.time), sp.timeMS)
		if !ok {
			tm, ok = p.timeOfDay(get(sp.time))
		}
		if !ok {
			return s, false, gpumem.Errorf(lineField(n), get(sp.time), gpumem.ErrSyntax, "time: want %s, 2006-01-02 15:04:05, RFC 3339, a time of day or seconds", smiTime)
		}
		s.Time = tm
		s.Has |= ColTime
	}
	if sp.step > 0 {
		f := get(sp.step)
		if i := strings.IndexByte(f, '/'); i > 0 {
			f = f[:i] // "3/100": epoch 3 of 100
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			return s, false, gpumem.Errorf(lineField(n), get(sp.step), gpumem.ErrSyntax, "%s: want a whole number", sp.stepUnit)
		}
		s.Step = int64(v)
		s.Has |= ColStep
	}
	if sp.device > 0 {
		d, err := strconv.Atoi(get(sp.device))
		if err != nil || d < 0 {
			return s, false, gpumem.Errorf(lineField(n), get(sp.device), gpumem.ErrSyntax, "GPU index")
		}
		s.Device = d
	}
	for k, m := range sp.mem {
		if m.idx == 0 {
			continue
		}
		f := get(m.idx)
		if f == "" {
			continue // an empty cell (an evaluation row of a logger's table)
		}
		v, err := p.tableSize(f, m.unit)
		if err != nil {
			return s, false, gpumem.Errorf(lineField(n), f, gpumem.ErrSyntax, "memory column %d: %v", m.idx, err)
		}
		switch k {
		case 0:
			s.Used, s.Has = v, s.Has|ColUsed
		case 1:
			s.Allocated, s.Has = v, s.Has|ColAllocated
		default:
			s.Reserved, s.Has = v, s.Has|ColReserved
		}
		s.Peak = s.Peak || m.peak
	}
	if len(sp.gpus) > 0 {
		return p.wandbRow(s, fields, n)
	}
	if sp.capacity > 0 {
		// A capacity that does not read is left out: it is not the series.
		if v, err := p.tableSize(get(sp.capacity), sp.capUnit); err == nil && v > 0 {
			s.Capacity = v
			s.Has |= ColCapacity
		}
	}
	if s.Has&ColMemory == 0 {
		return s, false, nil
	}
	return s, true, nil
}

// tableTime reads a time cell: nvidia-smi's layout, "2006-01-02
// 15:04:05[.frac]", RFC 3339, or a number of seconds (ms when ms) from an
// arbitrary origin.
func tableTime(f string, ms bool) (time.Time, bool) {
	if tm, err := time.Parse(smiTime, f); err == nil {
		return tm, true
	}
	if tm, err := time.Parse(time.RFC3339Nano, f); err == nil {
		return tm, true
	}
	if tm, ok := leadingTime(f); ok {
		return tm, true
	}
	v, err := strconv.ParseFloat(f, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v > 1e11 {
		return time.Time{}, false
	}
	if ms {
		v /= 1000
	}
	return time.Unix(0, 0).UTC().Add(time.Duration(v * 1e9)), true
}

// timeOfDay reads a time cell without a date, "15:04:05[.frac]" (xpu-smi
// dump's Timestamp), as the time since the first such row, on the Unix
// epoch: a time earlier than the row before is on the next day (the
// clock passed midnight), so the axis only runs forward.
func (p *sampleParser) timeOfDay(f string) (time.Time, bool) {
	if len(f) < 8 || f[2] != ':' || f[5] != ':' {
		return time.Time{}, false
	}
	tm, err := time.Parse("15:04:05", f[:8])
	if err != nil {
		return time.Time{}, false
	}
	d := time.Duration(tm.Hour())*time.Hour + time.Duration(tm.Minute())*time.Minute + time.Duration(tm.Second())*time.Second
	if rest := f[8:]; rest != "" {
		if (rest[0] != '.' && rest[0] != ',') || len(rest) < 2 {
			return time.Time{}, false
		}
		var frac, scale int64 = 0, 1
		for k := 1; k < len(rest); k++ {
			if !isDigit(rest[k]) {
				return time.Time{}, false
			}
			if scale < 1e9 {
				frac = frac*10 + int64(rest[k]-'0')
				scale *= 10
			}
		}
		d += time.Duration(frac * (1e9 / scale))
	}
	if !p.todOK {
		p.todFirst, p.todLast, p.todDays, p.todOK = d, d, 0, true
	}
	if d < p.todLast {
		if p.todDays >= 1<<16 {
			return time.Time{}, false // 179 years of midnights: not a clock
		}
		p.todDays++
	}
	p.todLast = d
	off := d - p.todFirst + time.Duration(p.todDays)*24*time.Hour
	return time.Unix(0, 0).UTC().Add(off), true
}

// errNotAvailable is nvidia-smi's "[N/A]".
var errNotAvailable = errors.New("not available")

// tableSize reads a memory cell: a number with a unit ("1234 MiB",
// "3.35G": bare K/M/G are binary, as tools print them), else a number in
// the header's unit, else in ReadOptions.Unit, else by the assumption (an
// integer of at least 2^20 is bytes, anything else MiB), which is noted.
func (p *sampleParser) tableSize(f string, unit gpumem.Bytes) (gpumem.Bytes, error) {
	if f == "[N/A]" || f == "N/A" || f == "[Not Supported]" {
		return 0, errNotAvailable
	}
	num, u := f, ""
	if i := strings.IndexFunc(f, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }); i >= 0 {
		num, u = f[:i], strings.TrimSpace(f[i:])
	}
	if num == "" || strings.Count(num, ".") > 1 || num[len(num)-1] == '.' || num[0] == '.' {
		return 0, gpumem.ErrSyntax
	}
	if u != "" {
		if !isUnit(u) && !looksLikeUnit(u) {
			return 0, gpumem.ErrUnit
		}
		return sampleSize(pair{num: num, unit: u}, false)
	}
	if unit == 0 {
		unit = p.unit
	}
	if unit == 0 {
		p.assumed = true
		return sampleSize(pair{num: num}, false)
	}
	v := scaleDecimal(num, unit, -1)
	if v < 0 {
		return 0, gpumem.ErrRange
	}
	return v, nil
}

// bareRow reads a line of one number ("18.2", "1234 MiB") or two ("100
// 18.2GB", "100,18.2"): a memory value, or a step and a memory value.
func (p *sampleParser) bareRow(t string, n int) (Sample, bool, error) {
	if !isDigit(t[0]) || strings.ContainsAny(t, ":=-/|[](){}") {
		return Sample{}, false, nil // a log line (a timestamp, key=value): no allocation
	}
	fields := strings.FieldsFunc(t, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' || r == ';' })
	if len(fields) >= 2 && len(fields) <= 3 && isUnit(fields[len(fields)-1]) {
		// "100 2.5 GiB": the unit as its own word.
		fields = append(fields[:len(fields)-2], fields[len(fields)-2]+fields[len(fields)-1])
	}
	if len(fields) == 0 || len(fields) > 2 {
		return Sample{}, false, nil
	}
	val := fields[len(fields)-1]
	if !isDigit(val[0]) {
		return Sample{}, false, nil
	}
	s := Sample{Line: n}
	if len(fields) == 2 {
		st, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return Sample{}, false, nil
		}
		s.Step = st
		s.Has |= ColStep
	}
	// Digits, at most one '.' between digits, and an optional unit.
	i := 0
	for i < len(val) && isDigit(val[i]) {
		i++
	}
	if i+1 < len(val) && val[i] == '.' && isDigit(val[i+1]) {
		i++
		for i < len(val) && isDigit(val[i]) {
			i++
		}
	}
	if u := val[i:]; u != "" && !isUnit(u) && !looksLikeUnit(u) {
		return Sample{}, false, nil
	}
	v, err := p.tableSize(val, 0)
	if err != nil {
		return s, false, gpumem.Errorf(lineField(n), val, gpumem.ErrSyntax, "memory value: %v", err)
	}
	s.Used = v
	s.Has |= ColUsed
	return s, true, nil
}

// hasMemory reports whether the table has a memory column.
func (s *csvSpec) hasMemory() bool {
	return s.mem[0].idx != 0 || s.mem[1].idx != 0 || s.mem[2].idx != 0 || len(s.gpus) > 0
}

// allNumbers reports whether every field is a number or empty.
func allNumbers(fields []string) bool {
	for _, f := range fields {
		if f == "" {
			continue
		}
		if _, err := strconv.ParseFloat(f, 64); err != nil {
			return false
		}
	}
	return true
}

// wandbRow reads the per-GPU columns of a row (W&B, Lightning): one sample
// per GPU with a figure (Sample.Device = N of gpu.N, memory in Used),
// emitted in column order; the last is returned for the caller to emit.
// When a GPU has both columns the byte count is taken. A percentage needs
// ReadOptions.Capacity.
func (p *sampleParser) wandbRow(base Sample, fields []string, n int) (Sample, bool, error) {
	var out []Sample
	for _, g := range p.spec.gpus {
		f := fields[g.idx-1]
		if f == "" {
			continue // W&B rows hold either the run's metrics or the system's
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(v) || v < 0 || v*float64(max(g.unit, 1)) > 1<<62 {
			return base, false, gpumem.Errorf(lineField(n), f, gpumem.ErrSyntax, "GPU %d column %d: want a non-negative number", g.dev, g.idx)
		}
		var b gpumem.Bytes
		if g.percent {
			if p.capacity == 0 {
				return base, false, gpumem.Errorf(lineField(n), f, gpumem.ErrUnit, "W&B gpu.%d.memoryAllocated is a percentage of the device memory: give the capacity (ReadOptions.Capacity)", g.dev)
			}
			if v > 100 {
				return base, false, gpumem.Errorf(lineField(n), f, gpumem.ErrRange, "W&B gpu.%d.memoryAllocated: a percentage above 100", g.dev)
			}
			b = gpumem.Bytes(math.Ceil(v / 100 * float64(p.capacity)))
		} else {
			b = gpumem.Bytes(math.Ceil(v * float64(g.unit)))
		}
		k := -1
		for i := range out {
			if out[i].Device == g.dev {
				k = i
			}
		}
		if k >= 0 {
			if !g.percent {
				out[k].Used = b // bytes over a percentage
			}
			continue
		}
		s := base
		s.Device, s.Used, s.Has = g.dev, b, base.Has|ColUsed
		if g.percent {
			s.Capacity, s.Has = p.capacity, s.Has|ColCapacity
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return base, false, nil
	}
	p.stepUnit = p.spec.stepUnit
	for _, s := range out[:len(out)-1] {
		p.emit(s)
	}
	return out[len(out)-1], true, nil
}
