package leak

// A CSV header: which column holds memory, step, time and device
// (nvidia-smi, Lightning, W&B and plain tables).

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

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
