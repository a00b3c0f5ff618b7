package leak

// key=value memory logs: the pairs on a line, which key names which column,
// and the sizes they hold.

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

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
