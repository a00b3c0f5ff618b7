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

// gpuCol is one per-GPU memory column.
type gpuCol struct {
	idx     int          // column, 1-based
	dev     int          // the GPU's index
	percent bool         // a percentage of the device memory
	unit    gpumem.Bytes // of a size
}

// lightningColumn reads Lightning's per-GPU column, normalised by
// headerName: "gpu_id: N/memory.used (MB)" is "gpu_id_N_memory_used"
// once parseHeader has folded "gpu_id: " (Lightning's get_gpu_memory_map
// and GPUStatsMonitor, pytorch_lightning/utilities/memory.py and
// callbacks/gpu_stats_monitor.py: nvidia-smi --query-gpu=memory.used
// --format=csv,nounits, whose figures are MiB though labelled "MB").
// memory.free is not a usage and is not read.
func lightningColumn(name string) (dev int, ok bool) {
	rest, found := strings.CutPrefix(name, "gpu_id_")
	if !found {
		return 0, false
	}
	num, metric, found := strings.Cut(rest, "_")
	d, err := strconv.Atoi(num)
	if !found || err != nil || d < 0 || d > 1023 || metric != "memory_used" {
		return 0, false
	}
	return d, true
}

// wandbColumn reads a W&B system-metrics column name, normalised by
// headerName ("system_gpu_0_memoryallocatedbytes"; exports write
// "system.gpu.0.…", the UI "system/gpu.0.…", history() without "system."):
// gpu.N.memoryAllocatedBytes is the GPU's used memory in bytes,
// gpu.N.memoryAllocated the same as a percentage of its memory (W&B's
// system-metrics reference, https://docs.wandb.ai/ref/system-metrics).
// gpu.N.memory is the memory controller's busy time in percent, not a
// size: it is not read.
func wandbColumn(name string) (dev int, percent, ok bool) {
	name = strings.TrimPrefix(name, "system_")
	rest, found := strings.CutPrefix(name, "gpu_")
	if !found {
		return 0, false, false
	}
	num, metric, found := strings.Cut(rest, "_")
	d, err := strconv.Atoi(num)
	if !found || err != nil || d < 0 || d > 1023 {
		return 0, false, false
	}
	switch metric {
	case "memoryallocatedbytes":
		return d, false, true
	case "memoryallocated":
		return d, true, true
	}
	return 0, false, false
}

// csvMem is one memory column: where, its unit from the header (0 when
// the header states none) and whether it is a running peak.
type csvMem struct {
	idx  int
	unit gpumem.Bytes
	peak bool
}

// memColumns maps a memory column's normalised header name to the Sample
// field it fills and whether it is a running peak. Names are lower case
// with '.', '-', '/' and blanks folded to '_', unit suffixes removed.
var memColumns = map[string]struct {
	col  Column
	peak bool
}{
	// Memory as the device or a script reports it for the process.
	"memory_used": {ColUsed, false}, "used_memory": {ColUsed, false}, "mem_used": {ColUsed, false},
	"used_mem": {ColUsed, false}, "memory": {ColUsed, false}, "mem": {ColUsed, false},
	"gpu_mem": {ColUsed, false}, "gpu_memory": {ColUsed, false}, "gpu_memory_used": {ColUsed, false},
	"gpu_mem_used": {ColUsed, false}, "gpu_used_memory": {ColUsed, false}, "vram": {ColUsed, false},
	"vram_used": {ColUsed, false}, "used_vram": {ColUsed, false}, "cuda_mem": {ColUsed, false},
	"cuda_memory": {ColUsed, false}, "memory_usage": {ColUsed, false}, "mem_usage": {ColUsed, false},
	"gpu_memory_usage": {ColUsed, false}, "gpu_mem_usage": {ColUsed, false}, "device_memory": {ColUsed, false},
	"device_memory_used": {ColUsed, false}, "fb_used": {ColUsed, false}, "fb_memory_used": {ColUsed, false},
	// PyTorch's allocated (tensors) and reserved (caching allocator).
	"memory_allocated": {ColAllocated, false}, "allocated": {ColAllocated, false}, "mem_allocated": {ColAllocated, false},
	"allocated_memory": {ColAllocated, false}, "cuda_memory_allocated": {ColAllocated, false}, "alloc": {ColAllocated, false},
	"gpu_memory_allocated": {ColAllocated, false}, "gpu_allocated": {ColAllocated, false}, "allocated_mem": {ColAllocated, false},
	"memory_reserved": {ColReserved, false}, "reserved": {ColReserved, false}, "mem_reserved": {ColReserved, false},
	"reserved_memory": {ColReserved, false}, "cuda_memory_reserved": {ColReserved, false}, "memory_cached": {ColReserved, false},
	"cached": {ColReserved, false}, "gpu_memory_reserved": {ColReserved, false}, "gpu_reserved": {ColReserved, false},
	// Running peaks (max_memory_allocated and the like).
	"max_memory_allocated": {ColAllocated, true}, "max_allocated": {ColAllocated, true}, "peak_allocated": {ColAllocated, true},
	"peak_memory": {ColAllocated, true}, "peak_mem": {ColAllocated, true}, "max_mem": {ColAllocated, true},
	"max_memory": {ColAllocated, true}, "peak_memory_allocated": {ColAllocated, true}, "max_mem_allocated": {ColAllocated, true},
	"max_memory_reserved": {ColReserved, true}, "max_reserved": {ColReserved, true}, "peak_reserved": {ColReserved, true},
	"peak_memory_reserved": {ColReserved, true},
}

// stepColumns maps a step column's name to its unit; a rank orders them
// when a table has several (global_step over epoch).
var stepColumns = map[string]struct {
	unit string
	rank int
}{
	"global_step": {"step", 5}, "step": {"step", 4}, "steps": {"step", 4}, "train_step": {"step", 4},
	"trainer_global_step": {"step", 5}, "batch": {"step", 3}, "batch_idx": {"step", 3},
	"iter": {"iteration", 4}, "iteration": {"iteration", 4}, "iters": {"iteration", 4}, "it": {"iteration", 4},
	"epoch": {"epoch", 1}, "epochs": {"epoch", 1},
}

// timeColumns are the names of a time column: a timestamp, or a number of
// seconds (milliseconds with a _ms suffix).
var timeColumns = map[string]bool{
	"timestamp": true, "time": true, "datetime": true, "date_time": true, "wall_time": true, "walltime": true,
	"elapsed": true, "elapsed_time": true, "seconds": true, "secs": true, "sec": true, "t": true,
	"relative_time": true, "runtime": true, "time_s": true, "elapsed_s": true, "time_ms": true, "elapsed_ms": true,
}

var (
	deviceColumns   = map[string]bool{"index": true, "gpu_index": true, "gpu_id": true, "device": true, "device_id": true, "gpu_idx": true}
	capacityColumns = map[string]bool{"memory_total": true, "total_memory": true, "mem_total": true, "gpu_memory_total": true, "vram_total": true, "fb_total": true}
)

// headerUnits maps a unit as a header writes it (lower case) to bytes.
// Decimal and binary prefixes keep their meaning, as in gpumem.ParseBytes:
// "_mb" and "(MB)" are 10⁶ bytes, "[MiB]" 2²⁰.
var headerUnits = map[string]gpumem.Bytes{
	"b": 1, "byte": 1, "bytes": 1,
	"kb": gpumem.KB, "kib": gpumem.KiB, "mb": gpumem.MB, "mib": gpumem.MiB,
	"gb": gpumem.GB, "gib": gpumem.GiB, "tb": gpumem.TB, "tib": gpumem.TiB,
}

// headerName normalises a header field: its name and the unit it states
// ("memory.used [MiB]", "mem_used_mb", "GPU Memory (GB)"); unit is 0 when
// there is none, and bad is set when the bracket holds something other
// than a size unit ("[%]").
func headerName(f string) (name string, unit gpumem.Bytes, bad bool) {
	f = strings.ToLower(strings.Trim(strings.TrimSpace(f), `"'`))
	for _, br := range [...][2]byte{{'[', ']'}, {'(', ')'}} {
		if i := strings.IndexByte(f, br[0]); i >= 0 {
			if j := strings.IndexByte(f[i:], br[1]); j > 0 {
				u := strings.TrimSpace(f[i+1 : i+j])
				var ok bool
				if unit, ok = headerUnits[u]; !ok {
					bad = true
				}
				f = f[:i] + f[i+j+1:]
			}
		}
	}
	f = strings.Map(func(r rune) rune {
		switch r {
		case '.', '-', '/', ' ', '\t':
			return '_'
		}
		return r
	}, strings.TrimSpace(f))
	f = strings.Trim(f, "_")
	if unit == 0 {
		if i := strings.LastIndexByte(f, '_'); i > 0 {
			if u, ok := headerUnits[f[i+1:]]; ok {
				f, unit = f[:i], u
			}
		}
	}
	return f, unit, bad
}

// headerChars are the bytes a header field may hold.
func headerChar(c byte) bool {
	return isLetter(c) || isDigit(c) || strings.IndexByte("_.-/ \t[]()%#\"'", c) >= 0
}

// parseHeader reads a CSV header naming at least one memory column: every
// field a name (letters first, no number, no '=' or ':'), separated by
// commas, tabs, semicolons or blanks.
func parseHeader(t string) (csvSpec, bool) {
	var spec csvSpec
	// Lightning's per-GPU columns hold a ':' ("gpu_id: 0/memory.used
	// (MB)"); folded, they read like any other name.
	if strings.Contains(t, "gpu_id: ") {
		t = strings.ReplaceAll(t, "gpu_id: ", "gpu_id_")
	}
	if h := strings.TrimLeft(t, `"' `); h == "" || !isLetter(h[0]) && h[0] != '_' || strings.ContainsAny(t, "=:|") {
		return spec, false // most log lines: no allocation
	}
	switch {
	case strings.IndexByte(t, ',') >= 0:
		spec.delim = ','
	case strings.IndexByte(t, '\t') >= 0:
		spec.delim = '\t'
	case strings.IndexByte(t, ';') >= 0:
		spec.delim = ';'
	default:
		spec.delim = ' '
		if last := t[len(t)-1]; last == '.' || last == '!' || last == '?' {
			return spec, false // a sentence ("GPU memory keeps growing."), not a header
		}
	}
	fields := splitFields(t, spec.delim)
	if len(fields) > 256 {
		return spec, false
	}
	spec.n = len(fields)
	stepRank := 0
	for i, f := range fields {
		for j := 0; j < len(f); j++ {
			if !headerChar(f[j]) {
				return spec, false
			}
		}
		if f == "" {
			continue
		}
		if _, err := strconv.ParseFloat(f, 64); err == nil {
			return spec, false
		}
		name, unit, bad := headerName(f)
		if name == "" || !isLetter(name[0]) {
			return spec, false
		}
		if d, pct, ok := wandbColumn(name); ok {
			spec.gpus = append(spec.gpus, gpuCol{idx: i + 1, dev: d, percent: pct, unit: 1})
			continue
		}
		if d, ok := lightningColumn(name); ok {
			spec.gpus = append(spec.gpus, gpuCol{idx: i + 1, dev: d, unit: gpumem.MiB})
			continue
		}
		if m, ok := memColumns[name]; ok && !bad {
			k := map[Column]int{ColUsed: 0, ColAllocated: 1, ColReserved: 2}[m.col]
			// A current value wins over a running peak of the same kind.
			if spec.mem[k].idx == 0 || spec.mem[k].peak && !m.peak {
				spec.mem[k] = csvMem{idx: i + 1, unit: unit, peak: m.peak}
			}
			continue
		}
		if s, ok := stepColumns[name]; ok && s.rank > stepRank {
			spec.step, spec.stepUnit, stepRank = i+1, s.unit, s.rank
			continue
		}
		switch {
		case timeColumns[name] && spec.time == 0:
			spec.time = i + 1
			spec.timeMS = strings.HasSuffix(name, "_ms")
		case deviceColumns[name] && spec.device == 0:
			spec.device = i + 1
		case capacityColumns[name] && spec.capacity == 0 && !bad:
			spec.capacity, spec.capUnit = i+1, unit
		}
	}
	if !spec.hasMemory() {
		// A table without a memory column: its rows are recognised (and
		// give nothing) when it is comma-, tab- or semicolon-separated
		// with at least two columns; blank-separated words are prose.
		return spec, spec.delim != ' ' && spec.n >= 2
	}
	if spec.delim == ' ' && spec.n < 2 && !strings.ContainsAny(t, "_.[(") {
		return spec, false // one plain word ("Memory") is not a table
	}
	return spec, true
}

// splitFields splits a CSV line at delim; a field in double quotes may
// hold the delimiter and "" for a quote. Fields are trimmed of blanks and
// quotes. delim ' ' splits at runs of blanks.
func splitFields(t string, delim byte) []string {
	if delim == ' ' {
		return strings.Fields(t)
	}
	var out []string
	var b strings.Builder
	quoted := false
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '"' && quoted && i+1 < len(t) && t[i+1] == '"':
			b.WriteByte('"')
			i++
		case c == '"':
			quoted = !quoted
		case c == delim && !quoted:
			out = append(out, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	return append(out, strings.TrimSpace(b.String()))
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
