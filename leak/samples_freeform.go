package leak

// Free-form training logs: progress bars, "used of total" figures, and the
// step and time a line gives.

import (
	"strconv"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
)

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
