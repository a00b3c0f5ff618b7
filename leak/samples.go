package leak

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
)

// Column is a set of the values a [Sample] holds.
type Column uint8

// Columns of a Sample.
const (
	ColStep      Column = 1 << iota // Sample.Step
	ColTime                         // Sample.Time
	ColAllocated                    // Sample.Allocated
	ColReserved                     // Sample.Reserved
	ColUsed                         // Sample.Used
	ColCapacity                     // Sample.Capacity
)

// ColMemory is any of the memory columns.
const ColMemory = ColAllocated | ColReserved | ColUsed

// Sample is one reading of a job's memory.
//
// Allocated and Reserved are PyTorch's meanings (tensors; the caching
// allocator's hold); Used is memory as the device or a log reports it for
// the process (nvidia-smi memory.used, or a log's unqualified "Memory=").
type Sample struct {
	Step      int64     // training step or iteration, when ColStep
	Time      time.Time // when the sample was taken, when ColTime
	Device    int       // GPU index when the source names one (nvidia-smi "index"), else 0
	Run       int       // 0, or the number of a later run when a narrative's steps restart (Options.Run)
	Line      int       // 1-based line of the input it was read from
	Has       Column    // which fields are set
	Peak      bool      // memory columns are running peaks (max_memory_allocated, max_mem, Max_MA): they never decrease
	OOM       bool      // the line reports an out-of-memory failure at Step (no memory values)
	Allocated gpumem.Bytes
	Reserved  gpumem.Bytes
	Used      gpumem.Bytes
	Capacity  gpumem.Bytes // device capacity when the source states it (nvidia-smi memory.total)
}

// Limits on what ParseSamples reads; beyond them it fails rather than
// allocate without bound.
const (
	MaxLineBytes = 1 << 20    // longest line read
	MaxSamples   = 10_000_000 // most samples returned
)

// ParseSamples reads memory samples from a log, detecting the format line
// by line:
//
//   - free-form training logs with a step and a memory value with units
//     anywhere on the line ("Step 100: Loss=2.34, Memory=18.2GB",
//     "iter 20 | mem 10.5 GiB", "global_step=300 allocated=1.2GiB");
//   - nvidia-smi --query-gpu=…memory.used… --format=csv, with or without
//     the header and with or without units (nounits: MiB);
//   - torch.cuda.memory_stats() dumps as JSON or Python dict repr
//     ("allocated_bytes.all.current", "reserved_bytes.all.current"), one
//     sample per dump, and memory_allocated()/memory_reserved() lines;
//   - torch.cuda.memory_summary() tables (the Cur Usage of "Allocated
//     memory" and "GPU reserved memory");
//   - DeepSpeed see_memory_usage lines ("MA 1.2 GB Max_MA 1.3 GB CA 1.5 GB
//     Max_CA 2 GB"; DeepSpeed divides by 1024³, so its GB are GiB);
//   - mmdetection/mmengine "Epoch [e][i/n] … memory: 3795" and detectron2
//     "iter: 19 … max_mem: 2345M": running peaks of max_memory_allocated in
//     MiB, marked Peak.
//
// Units follow [gpumem.ParseBytes] ("18.2GB" is 18.2·10⁹ bytes, "GiB"
// binary) except a bare K/M/G, which tools print for binary units. A value
// without unit is bytes when it is an integer of at least 2^20, else MiB.
// A line reporting an out-of-memory failure at a step ("Step 1000: CUDA
// OOM") becomes a Sample with OOM set. Lines without a memory value are
// skipped. Errors are *[gpumem.FieldError] values naming the line; a
// nil r is an error of field "reader".
func ParseSamples(r io.Reader) ([]Sample, error) {
	out, _, err := readSamples(r, true, ReadOptions{})
	return out, err
}

func lineField(n int) string { return "line " + strconv.Itoa(n) }

// sampleParser keeps the state of multi-line formats.
type sampleParser struct {
	out []Sample
	// CSV columns, set by a header (nvidia-smi's or a logger's own).
	csv       bool
	spec      csvSpec
	stats     Sample // pending memory_stats / memory_summary sample
	statsOpen bool
	statsUnit string // step unit of the pending sample
	lastStep  int64

	unit     gpumem.Bytes // ReadOptions.Unit: unit of unit-less CSV and bare values, 0 = assume
	capacity gpumem.Bytes // ReadOptions.Capacity: device memory, for percentages
	assumed  bool         // a unit-less value was read by the assumption
	used     bool         // the current line was read (a sample, a header, part of a dump)
	stepUnit string       // unit of the step of the sample being emitted
	units    map[string]int
	host     bool // the current line reports host (CPU) memory: skipped as such

	// A step read from a line without memory, for the memory lines that
	// follow without their own.
	pendStep int64
	pendUnit string
	pendOK   bool

	pairBuf []pair // reused by pairs, line after line

	// Prose: the figures read from sentences, resolved at the end
	// (finishProse), and the scratch of the current line.
	prose     []proseFig
	memSeen   bool           // a line spoke of memory: prose figures after it are memory figures
	pctText   map[int]string // lines with prose percentages, by number, for the report
	tokBuf    []ptoken
	figBuf    []clauseFig
	posBuf    []clausePos
	clauseBuf [][2]int
	assignBuf []clausePos
	// "Label: N" lines, read as a last resort (finishLabelled).
	labelled []labelledNum

	// Time-of-day cells without a date ("03:27:19.000", xpu-smi dump):
	// the offset from the first such row, a day added each time the
	// clock goes back (past midnight).
	todFirst, todLast time.Duration
	todDays           int64
	todOK             bool
}

func (p *sampleParser) emit(s Sample) {
	p.out = append(p.out, s)
	p.used = true
	if s.Has&ColStep != 0 {
		p.lastStep = s.Step
		if p.units == nil {
			p.units = map[string]int{}
		}
		u := p.stepUnit
		if u == "" {
			u = "step"
		}
		p.units[u]++
	}
}

func (p *sampleParser) flushStats() {
	if p.statsOpen && p.stats.Has&ColMemory != 0 {
		p.stepUnit = "step"
		if p.stats.Has&ColStep == 0 {
			p.stats.Step = int64(len(p.out))
			p.stats.Has |= ColStep
			p.stepUnit = "sample"
		}
		p.emit(p.stats)
	}
	p.stats = Sample{}
	p.statsOpen = false
}

func (p *sampleParser) line(line string, n int) error {
	t := strings.TrimSpace(line)
	if t == "" || t[0] == '#' {
		// A '#' comment (a log's "# source: …" line) never gives a
		// sample, whatever figures it quotes.
		return nil
	}
	// A CSV header: nvidia-smi's, or a logger's own.
	if spec, ok := parseHeader(t); ok {
		if !spec.hasMemory() && p.proseLine(t, n) {
			// A sentence with commas is no table header.
			return nil
		}
		p.csv, p.spec = true, spec
		p.used = spec.hasMemory() // a header without a memory column is skipped, and shown
		return nil
	}
	if p.csv && !p.spec.hasMemory() {
		// A row of a table without a memory column ("step,loss" then
		// "1,2.0") gives nothing, and is not a bare "step value" row.
		if fields := splitFields(t, p.spec.delim); len(fields) == p.spec.n && allNumbers(fields) {
			return nil
		}
		p.csv = false
	}
	if p.csv || looksLikeSMIRow(t) {
		if s, ok, err := p.csvRow(t, n); err != nil || ok {
			if ok {
				p.stepUnit = p.spec.stepUnit
				p.emit(s)
			}
			return err
		}
		if p.csv {
			// A row of the table without a memory figure: read, no sample.
			return nil
		}
	}
	// torch.cuda.memory_stats() keys, possibly one per line.
	if strings.Contains(t, "allocated_bytes.all.current") || strings.Contains(t, "reserved_bytes.all.current") {
		p.used = true
		return p.statsLine(t, n)
	}
	// torch.cuda.memory_summary() rows.
	if strings.HasPrefix(t, "|") {
		return p.summaryRow(t, n)
	}
	// YOLO's training rows without their header.
	if s, ok := yoloRow(t, n); ok {
		p.stepUnit = "epoch"
		p.emit(s)
		return nil
	}
	// Bare columns of numbers: "value" or "step value".
	if s, ok, err := p.bareRow(t, n); err != nil || ok {
		if ok {
			p.stepUnit = "step"
			p.emit(s)
		}
		return err
	}
	return p.freeForm(line, n)
}

// statsLine reads "allocated_bytes.all.current" and
// "reserved_bytes.all.current" values; a repeated key starts a new dump.
func (p *sampleParser) statsLine(t string, n int) error {
	for _, key := range [...]struct {
		name string
		col  Column
	}{{"allocated_bytes.all.current", ColAllocated}, {"reserved_bytes.all.current", ColReserved}} {
		i := strings.Index(t, key.name)
		if i < 0 {
			continue
		}
		j := i + len(key.name)
		for j < len(t) && (t[j] == '"' || t[j] == '\'' || t[j] == ':' || t[j] == ',' || t[j] == ' ' || t[j] == '=') {
			j++
		}
		v, _, ok := readSize(t, j)
		if !ok {
			return gpumem.Errorf(lineField(n), t, gpumem.ErrSyntax, "%s without a byte count", key.name)
		}
		if p.statsOpen && p.stats.Has&key.col != 0 {
			p.flushStats()
		}
		if !p.statsOpen {
			p.stats = Sample{Line: n}
			p.statsOpen = true
		}
		if key.col == ColAllocated {
			p.stats.Allocated = v
		} else {
			p.stats.Reserved = v
		}
		p.stats.Has |= key.col
	}
	if p.stats.Has&(ColAllocated|ColReserved) == ColAllocated|ColReserved {
		p.flushStats()
	}
	return nil
}

// summaryRow reads the Cur Usage column of memory_summary()'s "Allocated
// memory" and "GPU reserved memory" rows.
func (p *sampleParser) summaryRow(t string, n int) error {
	cells := strings.Split(strings.Trim(t, "|"), "|")
	if len(cells) < 2 {
		return nil
	}
	label := strings.TrimSpace(cells[0])
	var col Column
	switch label {
	case "Allocated memory":
		col = ColAllocated
	case "GPU reserved memory":
		col = ColReserved
	default:
		// nvidia-smi's table: the Memory-Usage cell "3210MiB /  8192MiB".
		if u, c, ok := usedOfTotal(t); ok {
			p.emit(Sample{Line: n, Used: u, Capacity: c, Has: ColUsed | ColCapacity})
		}
		return nil
	}
	cur := strings.TrimSpace(cells[1])
	v, err := parseSummarySize(cur)
	if err != nil {
		return gpumem.Errorf(lineField(n), cur, gpumem.ErrSyntax, "memory_summary %s: %v", label, err)
	}
	if p.statsOpen && p.stats.Has&col != 0 {
		p.flushStats()
	}
	if !p.statsOpen {
		p.stats = Sample{Line: n}
		p.statsOpen = true
	}
	if col == ColAllocated {
		p.stats.Allocated = v
	} else {
		p.stats.Reserved = v
	}
	p.stats.Has |= col
	p.used = true
	if col == ColReserved {
		p.flushStats()
	}
	return nil
}

// parseSummarySize reads memory_summary's sizes: "1234 MiB", "0 B" in
// current releases; PyTorch 1.x's _format_size printed the same
// 1024-based amounts as "KB", "MB", "GB" (seen in R-Drop #9), read here
// as KiB, MiB, GiB.
func parseSummarySize(s string) (gpumem.Bytes, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), " ")
	unit = strings.TrimSpace(unit)
	var bin gpumem.Bytes
	switch unit {
	case "KB":
		bin = gpumem.KiB
	case "MB":
		bin = gpumem.MiB
	case "GB":
		bin = gpumem.GiB
	case "TB":
		bin = gpumem.TiB
	default:
		return gpumem.ParseBytes(s)
	}
	if _, err := gpumem.ParseBytes(num); err != nil {
		return 0, err
	}
	if v := scaleDecimal(num, bin, -1); v >= 0 {
		return v, nil
	}
	return 0, gpumem.ErrRange
}

// pair is one "key sep value [unit]" found on a free-form line.
type pair struct {
	key string // lower-case
	// words are the key and the words just before it, separated from it
	// by single blanks only, oldest first, lower case, at most 4: "max
	// allocated: 1" gives ["max" "allocated"]; a key resolves to its
	// longest known suffix ("Training epoch 0" is an epoch).
	words  [4]string
	nwords int
	num    string       // the number as written
	unit   string       // the unit as written, or ""
	hunit  gpumem.Bytes // the unit in brackets after the key ("'memory_allocated (GB)': 3.82"), or 0
	// tnum and tunit are the total of a "used/total" figure ("Peak
	// Mem.: 5.2/23.7 GiB"): the device capacity, in tunit, which is also
	// the used figure's unit when it has none of its own.
	tnum, tunit string
	end         int
}

// pairs finds key/value pairs: an identifier, optional blanks, an
// optional unit in brackets, an optional closing quote, an optional ':'
// or '=', blanks, a number and an optional unit.
func pairs(line string, ps []pair) []pair {
	ps = ps[:0]
	var prevBuf [3]string
	prev := prevBuf[:0] // words before the current one, blank-separated
	prevEnd := -1
	i := 0
	for i < len(line) {
		c := line[i]
		if !(isLetter(c) || c == '_') || (i > 0 && isIdent(line[i-1])) {
			i++
			continue
		}
		k := i
		for k < len(line) && (isIdent(line[k]) || line[k] == '.') {
			k++
		}
		key := strings.ToLower(strings.TrimRight(line[i:k], "."))
		if prevEnd < 0 || i-prevEnd > 2 || strings.Trim(line[prevEnd:i], " ") != "" {
			prev = prev[:0]
		}
		j := k
		for j < len(line) && (line[j] == ' ' || line[j] == '\t') {
			j++
		}
		var hunit gpumem.Bytes
		if j < len(line) && (line[j] == '(' || line[j] == '[') {
			// "'memory_allocated (GB)': 3.82": the unit in brackets, kept
			// only when a ':' or '=' follows.
			if e := strings.IndexAny(line[j:min(len(line), j+8)], ")]"); e > 1 {
				if u, ok := headerUnits[strings.ToLower(strings.TrimSpace(line[j+1:j+e]))]; ok {
					t := j + e + 1
					for t < len(line) && (line[t] == '"' || line[t] == '\'' || line[t] == ' ') {
						t++
					}
					if t < len(line) && (line[t] == ':' || line[t] == '=') {
						hunit, j = u, t
					}
				}
			}
		}
		if hunit == 0 && j < len(line) && (line[j] == '"' || line[j] == '\'') && j+1 < len(line) && (line[j+1] == ':' || line[j+1] == '=') {
			j++ // a quoted dict key: "'loss': 0.5"
		}
		if j < len(line) && (line[j] == ':' || line[j] == '=') {
			j++
			for j < len(line) && (line[j] == ' ' || line[j] == '\t' || line[j] == '"' || line[j] == '\'') {
				j++
			}
		}
		st := j
		for j < len(line) && isDigit(line[j]) {
			j++
		}
		if j == st {
			if len(prev) == 3 {
				prev = append(prev[:0], prev[1:]...)
			}
			prev = append(prev, key)
			prevEnd = k
			i = k
			continue
		}
		if j+1 < len(line) && line[j] == '.' && isDigit(line[j+1]) {
			j++
			for j < len(line) && isDigit(line[j]) {
				j++
			}
		}
		num := line[st:j]
		u := j
		for u < len(line) && (line[u] == ' ' || line[u] == '\t') && u-j < 2 {
			u++
		}
		ue := u
		for ue < len(line) && isLetter(line[ue]) {
			ue++
		}
		unit := ""
		end := j
		if ue > u && (isUnit(line[u:ue]) || looksLikeUnit(line[u:ue])) {
			unit = line[u:ue]
			end = ue
		}
		q := pair{key: key, num: num, unit: unit, hunit: hunit, end: end}
		if tn, tu, te, ok := ofTotal(line, end); ok {
			q.tnum, q.tunit, q.end = tn, tu, te
			if q.unit == "" {
				q.unit = tu
			}
			end = te
		}
		q.nwords = copy(q.words[:], prev)
		q.words[q.nwords] = key
		q.nwords++
		ps = append(ps, q)
		prev, prevEnd = prev[:0], -1
		i = end
	}
	return ps
}

// looksLikeUnit reports a word that is meant as a size unit but that
// ParseBytes may reject ("Gb", "mb", "GiBs"), so that the error names it
// rather than the value being read without unit.
func looksLikeUnit(w string) bool {
	if len(w) < 2 || len(w) > 4 || !strings.ContainsRune("kKmMgGtTpP", rune(w[0])) {
		return false
	}
	switch strings.ToLower(w[1:]) {
	case "b", "ib", "bit", "bs":
		return true
	}
	return false
}

func isIdent(c byte) bool { return isLetter(c) || isDigit(c) || c == '_' }

// memKey is what a free-form key names: a memory column (a running peak
// or not), the device capacity, or a step.
type memKey struct {
	col      Column // ColAllocated, ColReserved, ColUsed, ColCapacity, or ColStep
	peak     bool
	rank     int    // a step key's rank: global_step over step over epoch
	stepUnit string // a step key's unit
	// unit is the unit the framework prints a figure of this key in
	// without writing it (torchtune's GiB); 0: the usual unit-less rule.
	unit gpumem.Bytes
}

// freeKeys are the keys of free-form lines, by name as [pair] words joined
// with '_' give it. Current values are preferred over running peaks of
// the same column (Megatron's report_memory prints both: "allocated: …
// | max allocated: …"; the current value is the series that grows under
// a leak, the peak only records the largest batch).
var freeKeys = map[string]memKey{
	// Memory as a log reports it for the process (nvidia-smi-like).
	"memory": {col: ColUsed}, "mem": {col: ColUsed}, "gpu_mem": {col: ColUsed}, "gpu_memory": {col: ColUsed},
	"vram": {col: ColUsed}, "cuda_mem": {col: ColUsed}, "cuda_memory": {col: ColUsed}, "memory_used": {col: ColUsed},
	"used": {col: ColUsed}, "gpu": {col: ColUsed}, "memory_usage": {col: ColUsed}, "current_memory_usage": {col: ColUsed},
	"current_memory": {col: ColUsed}, "gpu_memory_usage": {col: ColUsed}, "gpu_memory_used": {col: ColUsed},
	"occupied_memory": {col: ColUsed}, "used_memory": {col: ColUsed}, "gpu_mem_used": {col: ColUsed},
	// A process's working set (Windows' resident memory, psutil's wset),
	// as per-iteration tables print it ("79 | Working: 622.36 MB").
	"working": {col: ColUsed}, "working_set": {col: ColUsed},
	// PyTorch's allocated (tensors); RETURNN's "alloc cur".
	"allocated": {col: ColAllocated}, "alloc": {col: ColAllocated}, "memory_allocated": {col: ColAllocated},
	"mem_allocated": {col: ColAllocated}, "ma": {col: ColAllocated}, "allocated_memory": {col: ColAllocated},
	"alloc_cur": {col: ColAllocated}, "alloc_current": {col: ColAllocated}, "current_allocated": {col: ColAllocated},
	// DeepSpeed timer.py's "MemAllocated=0.02GB, MaxMemAllocated=0.02GB"
	// (memory_allocated() / 1024**3: GiB, like see_memory_usage).
	"memallocated": {col: ColAllocated}, "maxmemallocated": {col: ColAllocated, peak: true},
	// Running peaks of allocated memory (detectron2 max_mem, MLX "Peak mem").
	"max_mem": {col: ColAllocated, peak: true}, "max_memory_allocated": {col: ColAllocated, peak: true},
	"max_allocated": {col: ColAllocated, peak: true}, "peak_allocated": {col: ColAllocated, peak: true},
	"peak_memory": {col: ColAllocated, peak: true}, "peak_mem": {col: ColAllocated, peak: true},
	"max_memory": {col: ColAllocated, peak: true}, "alloc_peak": {col: ColAllocated, peak: true},
	"max_alloc": {col: ColAllocated, peak: true}, "max_ma": {col: ColAllocated, peak: true},
	// The caching allocator's reserved memory and its peaks.
	"reserved": {col: ColReserved}, "memory_reserved": {col: ColReserved}, "mem_reserved": {col: ColReserved},
	"ca": {col: ColReserved}, "cached": {col: ColReserved}, "memory_cached": {col: ColReserved},
	"reserved_memory": {col: ColReserved}, "reserved_cur": {col: ColReserved}, "reserved_current": {col: ColReserved},
	"max_memory_reserved": {col: ColReserved, peak: true}, "max_reserved": {col: ColReserved, peak: true},
	"peak_reserved": {col: ColReserved, peak: true}, "reserved_peak": {col: ColReserved, peak: true},
	"max_cached": {col: ColReserved, peak: true}, "max_ca": {col: ColReserved, peak: true},
	// torchtune's get_memory_stats (torchtune/training/memory.py, main:
	// max_memory_allocated / max_memory_reserved divided by 1024**3),
	// logged as "peak_memory_alloc:52.00… peak_memory_reserved:52.00…"
	// without a unit: GiB, running peaks. peak_memory_active (the
	// active_bytes.all.peak of memory_stats) is neither column.
	"peak_memory_alloc":    {col: ColAllocated, peak: true, unit: gpumem.GiB},
	"peak_memory_reserved": {col: ColReserved, peak: true, unit: gpumem.GiB},
	// Device capacity (HF/optimum-habana "total_memory_available (GB)").
	"total_memory_available": {col: ColCapacity}, "total_memory": {col: ColCapacity}, "memory_total": {col: ColCapacity},
	// Steps.
	"global_step": {col: ColStep, rank: 5, stepUnit: "step"}, "step": {col: ColStep, rank: 3, stepUnit: "step"},
	"steps": {col: ColStep, rank: 3, stepUnit: "step"}, "batch": {col: ColStep, rank: 3, stepUnit: "step"},
	"iter": {col: ColStep, rank: 3, stepUnit: "iteration"}, "iteration": {col: ColStep, rank: 3, stepUnit: "iteration"},
	"iters": {col: ColStep, rank: 3, stepUnit: "iteration"}, "it": {col: ColStep, rank: 3, stepUnit: "iteration"},
	"epoch": {col: ColStep, rank: 1, stepUnit: "epoch"},
}

// resolveKey returns the longest known suffix of a pair's words ("max
// allocated" before "allocated"). A figure qualified as free, available
// or total ("free memory: 3GB"), or as the host's ("RAM used", "CPU
// memory", "RSS", "swap"), is not a GPU memory column.
func resolveKey(q pair) (memKey, string, bool) {
	var buf [96]byte
	words := q.words[:q.nwords]
	for i := range words {
		// The words joined with '_', '.' folded ("memory.used"), in a
		// stack buffer: the map lookup does not allocate.
		b := buf[:0]
		for j, w := range words[i:] {
			if j > 0 {
				b = append(b, '_')
			}
			for k := 0; k < len(w); k++ {
				c := w[k]
				if c == '.' {
					c = '_'
				}
				b = append(b, c)
			}
		}
		if k, ok := freeKeys[string(b)]; ok {
			name := words[len(words)-1]
			if i < len(words)-1 {
				name = string(b)
			}
			if k.col&ColMemory != 0 {
				for _, w := range words[:i] {
					switch w {
					case "free", "available", "total", "avail", "ram", "cpu", "host", "rss", "swap", "virtual", "system", "sys":
						return memKey{}, "", false
					}
				}
			}
			return k, name, true
		}
	}
	return memKey{}, "", false
}

// hostMarkers are texts of lines that report host (CPU) memory: DeepSpeed
// see_memory_usage's second line, mmengine's periodic "Memory
// information" line (available_memory, used_memory, … of the machine),
// and scripts' own CPU lines.
var hostMarkers = [...]string{"CPU Virtual Memory", "Memory info of CPU", "Memory information available_memory", "CPU memory", "cpu_memory", "CPU RAM", "Host memory", "host memory"}

func hostLine(line string) bool {
	// Every marker holds "emory" or "CPU": two scans of most lines.
	if !strings.Contains(line, "emory") && !strings.Contains(line, "CPU") {
		return false
	}
	for _, m := range hostMarkers {
		if strings.Contains(line, m) {
			return true
		}
	}
	return false
}

// leadingBarStep reads the row number of a table printed as "79 |
// Working: 622.36 MB | …": an integer, blanks, a '|'.
func leadingBarStep(line string) (int64, bool) {
	i := skipSpace(line, 0)
	if i >= len(line) || !isDigit(line[i]) {
		return 0, false
	}
	v, j, ok := readInt(line, i)
	if !ok {
		return 0, false
	}
	j = skipSpace(line, j)
	return v, j < len(line) && line[j] == '|' && j+1 < len(line) && line[j+1] != '|'
}

// afterIterations reads Megatron report_memory's "(after N iterations)".
func afterIterations(line string) (int64, bool) {
	i := strings.Index(line, "after ")
	if i < 0 {
		return 0, false
	}
	v, j, ok := readInt(line, i+len("after "))
	if !ok || !strings.HasPrefix(line[j:], " iteration") {
		return 0, false
	}
	return v, true
}

// freeForm reads a training-log line.
func (p *sampleParser) freeForm(line string, n int) error {
	if hostLine(line) {
		p.host = true
		return nil
	}
	if gs := lightningGPUs(line); len(gs) > 0 {
		return p.lightningLine(line, n, gs)
	}
	p.pairBuf = pairs(line, p.pairBuf)
	ps := p.pairBuf
	s := Sample{Line: n}
	stepRank := 0
	stepUnit := ""
	setStep := func(v int64, rank int, unit string) {
		if rank > stepRank {
			s.Step, stepRank, stepUnit = v, rank, unit
			s.Has |= ColStep
		}
	}
	deepspeed := false
	mmdet := false
	for _, q := range ps {
		if q.key == "max_ma" || q.key == "max_ca" || q.key == "memallocated" {
			deepspeed = true
		}
	}
	// TensorFlow's get_memory_info: {'current': N, 'peak': N} bytes, or a
	// script's "GPU:0: current: 0.18, peak: 2.55".
	tfInfo := strings.Contains(line, "current") && (strings.Contains(line, "GPU") || strings.Contains(line, "memory_info") || strings.Contains(line, "'peak'") || strings.Contains(line, `"peak"`))
	if e, it, per, ok := mmdetEpoch(line); ok {
		setStep((e-1)*per+it, 4, "iteration")
		mmdet = true
	}
	if it, ok := mmcvIter(line); ok {
		setStep(it, 4, "iteration")
		mmdet = true
	}
	if v, ok := afterIterations(line); ok {
		setStep(v, 4, "iteration")
	}
	if v, ok := leadingBarStep(line); ok {
		setStep(v, 2, "step")
	}
	var peakCols Column
	for _, q := range ps {
		k, name, ok := resolveKey(q)
		if !ok && tfInfo {
			switch q.key {
			case "current":
				k, name, ok = memKey{col: ColAllocated}, "current", true
			case "peak":
				k, name, ok = memKey{col: ColAllocated, peak: true}, "peak", true
			}
		}
		if !ok {
			continue
		}
		if k.col == ColStep {
			if v, err := strconv.ParseInt(q.num, 10, 64); err == nil {
				setStep(v, k.rank, k.stepUnit)
			}
			continue
		}
		col, peak := k.col, k.peak
		if mmdet && name == "memory" {
			col, peak = ColAllocated, true
		}
		if (name == "ma" || name == "ca" || name == "max_ma" || name == "max_ca") && !deepspeed {
			continue
		}
		if name == "gpu" && q.unit == "" {
			continue
		}
		if s.Has&col != 0 && (peak || peakCols&col == 0) {
			continue // a current value is kept over a later peak
		}
		var v gpumem.Bytes
		var err error
		switch {
		case q.unit == "" && (q.hunit != 0 || k.unit != 0):
			u := q.hunit
			if u == 0 {
				u = k.unit
			}
			if v = scaleDecimal(q.num, u, -1); v < 0 {
				err = gpumem.ErrRange
			}
		case q.unit == "" && p.unit != 0 && (name == "current" || name == "peak"):
			// TensorFlow figures printed without a unit take
			// ReadOptions.Unit when it is given.
			if v = scaleDecimal(q.num, p.unit, -1); v < 0 {
				err = gpumem.ErrRange
			}
		default:
			v, err = sampleSize(q, deepspeed)
		}
		if err != nil {
			return gpumem.Errorf(lineField(n), q.num+q.unit, gpumem.ErrSyntax, "%s: %v", q.key, err)
		}
		switch col {
		case ColUsed:
			s.Used = v
		case ColAllocated:
			s.Allocated = v
		case ColReserved:
			s.Reserved = v
		case ColCapacity:
			s.Capacity = v
		}
		s.Has |= col
		if q.tnum != "" && col&ColMemory != 0 && s.Has&ColCapacity == 0 {
			if c, err := sampleSize(pair{num: q.tnum, unit: q.tunit}, deepspeed); err == nil && c >= v {
				s.Capacity = c
				s.Has |= ColCapacity
			}
		}
		if peak {
			peakCols |= col
		} else {
			peakCols &^= col
		}
	}
	// The sample is a running peak when every memory figure read is one.
	s.Peak = s.Has&ColMemory != 0 && peakCols&ColMemory == s.Has&ColMemory
	if tm, ok := leadingTime(line); ok {
		s.Time = tm
		s.Has |= ColTime
	}
	if s.Has&ColMemory == 0 {
		if u, c, ok := usedOfTotal(line); ok {
			s.Used, s.Capacity = u, c
			s.Has |= ColUsed | ColCapacity
		}
	}
	if s.Has&ColMemory == 0 && p.proseLine(line, n) {
		return nil
	}
	if s.Has&ColMemory == 0 {
		if s.Has&(ColStep|ColTime) != 0 && reportsOOM(line) {
			s.OOM = true
			p.stepUnit = stepUnit
			p.emit(s)
			return nil
		}
		if s.Has&ColStep != 0 {
			// A step line without memory ("epoch 1/50 - it 6/100 - loss:
			// 2.47", "Iteration 19/500"): memory lines that follow without
			// a step of their own take it.
			p.pendStep, p.pendUnit, p.pendOK = s.Step, stepUnit, true
		}
		return nil
	}
	// DeepSpeed's lines number themselves in order ("sample"): a step
	// carried from an engine line would mix two axes.
	if s.Has&ColStep == 0 && p.pendOK && !deepspeed {
		s.Step, stepUnit = p.pendStep, p.pendUnit
		s.Has |= ColStep
	}
	if deepspeed && s.Has&ColStep == 0 {
		s.Step = int64(len(p.out))
		s.Has |= ColStep
		stepUnit = "sample"
	}
	p.stepUnit = stepUnit
	p.emit(s)
	return nil
}

// ofTotal reads the "/total unit" after a figure that ends at i: "5.2/23.7
// GiB", "0.1GB/24GB", "103 / 16384 MB", "3210MiB /  8192MiB". The total
// must carry a size unit; it returns the total's number and unit and
// where it ends.
func ofTotal(line string, i int) (num, unit string, end int, ok bool) {
	j := i
	for j < len(line) && line[j] == ' ' && j-i < 2 {
		j++
	}
	if j >= len(line) || line[j] != '/' {
		return "", "", 0, false
	}
	j = skipSpace(line, j+1)
	st := j
	for j < len(line) && isDigit(line[j]) {
		j++
	}
	if j == st {
		return "", "", 0, false
	}
	if j+1 < len(line) && line[j] == '.' && isDigit(line[j+1]) {
		j += 2
		for j < len(line) && isDigit(line[j]) {
			j++
		}
	}
	num = line[st:j]
	u := j
	for u < len(line) && line[u] == ' ' && u-j < 2 {
		u++
	}
	ue := u
	for ue < len(line) && isLetter(line[ue]) {
		ue++
	}
	if ue == u || !isUnit(line[u:ue]) || line[u:ue] == "k" {
		return "", "", 0, false
	}
	return num, line[u:ue], ue, true
}

// usedOfTotal reads a line's only memory figure when it is a used/total
// pair of sizes without a key: nvidia-smi's Memory-Usage cell ("3210MiB
// /  8192MiB"), gpustat's "103 / 16384 MB", prose "0.1GB/24GB VRAM used".
// The first is the device's used memory, the second its capacity; a
// unit-less used figure takes the total's unit. Lines that name the host
// (RAM, CPU, swap, disk) and progress bars ("%|", "/s") are not read.
func usedOfTotal(line string) (used, capacity gpumem.Bytes, ok bool) {
	if strings.Contains(line, "%|") || strings.Contains(line, "/s") || !strings.Contains(line, "/") {
		return 0, 0, false
	}
	for w := range strings.FieldsFuncSeq(line, func(r rune) bool { return !isIdentRune(r) }) {
		for _, h := range [...]string{"ram", "cpu", "host", "swap", "disk", "rss"} {
			if strings.EqualFold(w, h) {
				return 0, 0, false
			}
		}
	}
	for i := 0; i < len(line); i++ {
		if !isDigit(line[i]) || (i > 0 && (isIdent(line[i-1]) || line[i-1] == '.' || line[i-1] == '/')) {
			continue
		}
		j := i
		for j < len(line) && isDigit(line[j]) {
			j++
		}
		if j+1 < len(line) && line[j] == '.' && isDigit(line[j+1]) {
			j += 2
			for j < len(line) && isDigit(line[j]) {
				j++
			}
		}
		num := line[i:j]
		ue := j
		for ue < len(line) && isLetter(line[ue]) {
			ue++
		}
		unit := line[j:ue]
		if unit != "" && (!isUnit(unit) || unit == "k") {
			i = ue
			continue
		}
		tn, tu, _, ok := ofTotal(line, ue)
		if !ok {
			i = ue
			continue
		}
		if unit == "" {
			unit = tu
		}
		u, err1 := sampleSize(pair{num: num, unit: unit}, false)
		c, err2 := sampleSize(pair{num: tn, unit: tu}, false)
		if err1 != nil || err2 != nil || u > c {
			return 0, 0, false
		}
		return u, c, true
	}
	return 0, 0, false
}

func isIdentRune(r rune) bool { return r < 128 && isIdent(byte(r)) }

// sampleSize converts a pair's value to bytes (see ParseSamples).
func sampleSize(q pair, deepspeed bool) (gpumem.Bytes, error) {
	var bin gpumem.Bytes
	switch q.unit {
	case "":
		if !strings.Contains(q.num, ".") {
			if v, err := strconv.ParseInt(q.num, 10, 64); err == nil && v >= 1<<20 {
				return gpumem.Bytes(v), nil
			}
		}
		bin = gpumem.MiB
	case "K", "k":
		bin = gpumem.KiB
	case "M":
		bin = gpumem.MiB
	case "G":
		bin = gpumem.GiB
	case "T":
		bin = gpumem.TiB
	case "KB", "MB", "GB":
		if deepspeed {
			switch q.unit {
			case "KB":
				bin = gpumem.KiB
			case "MB":
				bin = gpumem.MiB
			default:
				bin = gpumem.GiB
			}
		}
	}
	if bin != 0 {
		v := scaleDecimal(q.num, bin, -1)
		if v < 0 {
			return 0, gpumem.ErrRange
		}
		return v, nil
	}
	return gpumem.ParseBytes(q.num + q.unit)
}

// mmdetEpoch reads mmdetection's "Epoch [e][i/n]" and mmengine's
// "Epoch(train) [e][ i/n]".
func mmdetEpoch(line string) (epoch, iter, per int64, ok bool) {
	i := strings.Index(line, "Epoch")
	if i < 0 {
		return 0, 0, 0, false
	}
	j := i + len("Epoch")
	if strings.HasPrefix(line[j:], "(train)") {
		j += len("(train)")
	}
	j = skipSpace(line, j)
	if j >= len(line) || line[j] != '[' {
		return 0, 0, 0, false
	}
	e, j, ok1 := readInt(line, j+1)
	if !ok1 || j+1 >= len(line) || line[j] != ']' || line[j+1] != '[' {
		return 0, 0, 0, false
	}
	it, j, ok2 := readInt(line, j+2)
	if !ok2 || j >= len(line) || line[j] != '/' {
		return 0, 0, 0, false
	}
	n, j, ok3 := readInt(line, j+1)
	if !ok3 || j >= len(line) || line[j] != ']' || e < 1 || n < 1 {
		return 0, 0, 0, false
	}
	return e, it, n, true
}

// mmcvIter reads the iteration of mmcv's IterBasedRunner TextLoggerHook
// line "Iter [1100/40000]\tlr: …, memory: 19873, …" and mmengine's
// "Iter(train) [ 50/40000]" (mmcv/runner/hooks/logger/text.py, v1.x:
// log_str = f'Iter [{log_dict["iter"]}/{runner.max_iters}]\t'; its
// memory: is _get_max_memory, torch.cuda.max_memory_allocated() / (1024
// * 1024): MiB, a running peak of allocated, as in the Epoch lines).
func mmcvIter(line string) (int64, bool) {
	i := strings.Index(line, "Iter")
	if i < 0 || (i > 0 && isIdent(line[i-1])) {
		return 0, false
	}
	j := i + len("Iter")
	if strings.HasPrefix(line[j:], "(train)") {
		j += len("(train)")
	}
	j = skipSpace(line, j)
	if j >= len(line) || line[j] != '[' {
		return 0, false
	}
	it, j, ok := readInt(line, j+1)
	if !ok || j >= len(line) || line[j] != '/' {
		return 0, false
	}
	n, j, ok := readInt(line, j+1)
	if !ok || j >= len(line) || line[j] != ']' || n < 1 {
		return 0, false
	}
	return it, true
}

// leadingTime parses a timestamp at the start of a line: "2024-01-15
// 10:00:00", with 'T', a fraction after '.' or ',', or in brackets.
func leadingTime(line string) (time.Time, bool) {
	t := strings.TrimLeft(line, "[ ")
	if len(t) < 19 || !isDigit(t[0]) || t[4] != '-' {
		return time.Time{}, false
	}
	head := []byte(t[:19])
	if head[10] == 'T' {
		head[10] = ' '
	}
	tm, err := time.Parse("2006-01-02 15:04:05", string(head))
	if err != nil {
		return time.Time{}, false
	}
	rest := t[19:]
	if len(rest) > 1 && (rest[0] == '.' || rest[0] == ',') && isDigit(rest[1]) {
		k := 1
		var frac, scale int64 = 0, 1
		for k < len(rest) && isDigit(rest[k]) && scale < 1e9 {
			frac = frac*10 + int64(rest[k]-'0')
			scale *= 10
			k++
		}
		tm = tm.Add(time.Duration(frac * (1e9 / scale)))
	}
	return tm, true
}

// reportsOOM reports whether a log line announces an out-of-memory
// failure.
func reportsOOM(line string) bool {
	if _, ok := ParseOOM(line); ok {
		return true
	}
	return strings.Contains(line, " OOM") || strings.Contains(line, "out of memory") || strings.Contains(line, "OutOfMemoryError")
}

// String returns a one-line form of s for logs and test failures.
func (s Sample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %d:", s.Line)
	if s.Has&ColStep != 0 {
		fmt.Fprintf(&b, " step=%d", s.Step)
	}
	if s.Has&ColTime != 0 {
		fmt.Fprintf(&b, " time=%s", s.Time.Format(time.RFC3339Nano))
	}
	if s.Has&ColAllocated != 0 {
		fmt.Fprintf(&b, " allocated=%s", s.Allocated.String())
	}
	if s.Has&ColReserved != 0 {
		fmt.Fprintf(&b, " reserved=%s", s.Reserved.String())
	}
	if s.Has&ColUsed != 0 {
		fmt.Fprintf(&b, " used=%s", s.Used.String())
	}
	if s.Has&ColCapacity != 0 {
		fmt.Fprintf(&b, " capacity=%s", s.Capacity.String())
	}
	if s.Peak {
		b.WriteString(" peak")
	}
	if s.OOM {
		b.WriteString(" OOM")
	}
	return b.String()
}

// lightningGPU is one "gpu_id: N/memory.used (MB)': V" entry of a
// Lightning dict (get_gpu_memory_map, GPUStatsMonitor).
type lightningGPU struct {
	dev int
	num string
}

// lightningGPUs finds the memory.used entries of a Lightning GPU dict
// printed on a line: {'gpu_id: 0/memory.used (MB)': 1234.0, …}.
func lightningGPUs(line string) []lightningGPU {
	const key = "gpu_id: "
	var out []lightningGPU
	for i := 0; ; {
		k := strings.Index(line[i:], key)
		if k < 0 {
			return out
		}
		j := i + k + len(key)
		i = j
		d, e, ok := readInt(line, j)
		rest := line[e:]
		if !ok || d > 1023 || !strings.HasPrefix(rest, "/memory.used (MB)") {
			continue
		}
		e += len("/memory.used (MB)")
		for e < len(line) && (line[e] == '\'' || line[e] == '"' || line[e] == ':' || line[e] == ' ') {
			e++
		}
		st := e
		for e < len(line) && (isDigit(line[e]) || line[e] == '.') {
			e++
		}
		if e > st {
			out = append(out, lightningGPU{dev: int(d), num: line[st:e]})
		}
		i = e
	}
}

// lightningLine emits one sample per GPU of a Lightning GPU dict: Used in
// MiB (nvidia-smi's nounits figures, labelled "MB" by Lightning), Device
// N, with the line's step (a key such as "step" or "epoch" on the line,
// else the carried one).
func (p *sampleParser) lightningLine(line string, n int, gs []lightningGPU) error {
	s := Sample{Line: n}
	unit, rank := "", 0
	p.pairBuf = pairs(line, p.pairBuf)
	for _, q := range p.pairBuf {
		if k, _, ok := resolveKey(q); ok && k.col == ColStep && k.rank > rank {
			if v, err := strconv.ParseInt(q.num, 10, 64); err == nil {
				s.Step, s.Has, unit, rank = v, ColStep, k.stepUnit, k.rank
			}
		}
	}
	if s.Has&ColStep == 0 && p.pendOK {
		s.Step, s.Has, unit = p.pendStep, ColStep, p.pendUnit
	}
	if tm, ok := leadingTime(line); ok {
		s.Time = tm
		s.Has |= ColTime
	}
	for _, g := range gs {
		v := scaleDecimal(g.num, gpumem.MiB, -1)
		if v < 0 || strings.Count(g.num, ".") > 1 || g.num[0] == '.' || g.num[len(g.num)-1] == '.' {
			return gpumem.Errorf(lineField(n), g.num, gpumem.ErrSyntax, "gpu_id: %d/memory.used (MB): want a number", g.dev)
		}
		x := s
		x.Device, x.Used, x.Has = g.dev, v, s.Has|ColUsed
		p.stepUnit = unit
		p.emit(x)
	}
	return nil
}

// yoloRow reads a YOLOv5/YOLOv7/YOLOv8 training row without its header:
// "0/89  5.61G  0.07745  0.0277 …", the epoch over the last epoch, then
// GPU_mem, then the losses and counts. ultralytics/yolov5 train.py (and
// WongKinYiu/yolov7's, ultralytics' trainer) prints GPU_mem as
// f'{torch.cuda.memory_reserved() / 1E9:.3g}G': reserved memory in
// decimal GB, so the bare G here is 10⁹ bytes (unlike the bare G of
// other tools, binary), and the column is Reserved. At least three
// numbers must follow the memory cell.
func yoloRow(t string, n int) (Sample, bool) {
	if !isDigit(t[0]) || strings.IndexByte(t, '/') < 0 || strings.IndexByte(t, '/') > 12 {
		return Sample{}, false
	}
	// The first five blank-separated fields, without allocating.
	var fields [5]string
	nf := 0
	for i := 0; i < len(t) && nf < len(fields); {
		for i < len(t) && (t[i] == ' ' || t[i] == '\t') {
			i++
		}
		j := i
		for j < len(t) && t[j] != ' ' && t[j] != '\t' {
			j++
		}
		if j > i {
			fields[nf] = t[i:j]
			nf++
		}
		i = j
	}
	if nf < len(fields) {
		return Sample{}, false
	}
	ep, tot, ok := strings.Cut(fields[0], "/")
	e, err1 := strconv.ParseInt(ep, 10, 64)
	last, err2 := strconv.ParseInt(tot, 10, 64)
	if !ok || err1 != nil || err2 != nil || e < 0 || e > last+1 {
		return Sample{}, false
	}
	mem := fields[1]
	if len(mem) < 2 || mem[len(mem)-1] != 'G' {
		return Sample{}, false
	}
	v, err := strconv.ParseFloat(mem[:len(mem)-1], 64)
	if err != nil || !(v >= 0) || v > 1e6 {
		return Sample{}, false
	}
	for _, f := range fields[2:5] {
		if _, err := strconv.ParseFloat(f, 64); err != nil {
			return Sample{}, false
		}
	}
	return Sample{Line: n, Step: e, Reserved: gpumem.Bytes(math.Round(v * 1e9)), Has: ColStep | ColReserved}, true
}
