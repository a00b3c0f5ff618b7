package leak

import (
	"math"
	"slices"
	"strings"

	"github.com/gpumem/gpumem"
)

// This file reads memory figures out of prose: what people write in an
// issue when they have no log ("At iter 99 the model uses 3200mb of GPU
// memory, at iter 219 it jumps to 7000mb", "it goes from 10GB to 23GB
// after 5 epochs", "GPU memory usage is only 22%", "第一个epoch占用2.59，
// 第二个epoch突增到了7G"). Such a reading is less sure than a log line's,
// and ReadReport.Confidence says how much less and why.

// Confidence is how sure a reading of the input is.
type Confidence uint8

// Confidence levels of [ReadReport].
const (
	// ConfidenceHigh: every figure comes from a log format whose memory
	// key, unit and step are on the line.
	ConfidenceHigh Confidence = iota
	// ConfidenceMedium: a unit was assumed for unit-less figures, or
	// figures were read from prose that states, for each, its unit, its
	// position (step, iteration, epoch or the start) and the GPU.
	ConfidenceMedium
	// ConfidenceLow: prose where something had to be inferred: a
	// figure without a position (read in the order of the text), a text
	// that does not say the memory is the GPU's, a unit taken from
	// another figure of the sentence, a percentage turned into bytes, or
	// a labelled number the log does not call memory.
	ConfidenceLow
)

// String returns "high", "medium" or "low".
func (c Confidence) String() string {
	switch c {
	case ConfidenceHigh:
		return "high"
	case ConfidenceMedium:
		return "medium"
	}
	return "low"
}

// Why a reading is less than sure: ReadReport.ConfidenceWhy.
const (
	whyAssumed  = "a unit was assumed for figures without one"
	whyProse    = "figures were read from prose"
	whyNoPos    = "some figures state no step, iteration or epoch: read in the order of the text"
	whyNoGPU    = "the text does not say the memory is the GPU's"
	whyBorrowed = "a figure without a unit took the unit of another figure in its sentence"
	whyPercent  = "percentages were turned into bytes with the device's capacity"
	whyLabelled = "numbers after a repeated label that does not name memory were read as memory"
	whyRuns     = "the steps restart: the text tells several runs, analyzed one at a time (Options.Run)"
)

// proseFig is one figure read from a sentence.
type proseFig struct {
	line     int
	value    gpumem.Bytes
	pct      float64 // a percentage of the device when > 0 (value unset)
	pos      int64
	kind     string // "iteration", "step", "epoch": pos is one; "start": the beginning; "": none
	gpu      bool   // the text names the GPU
	borrowed bool   // unit from another figure of the sentence
	oom      bool   // an out-of-memory report at pos, no figure
}

// maybeProse reports a line that may hold a prose memory figure: at
// least four blanks (five words), a figure (a digit followed by a size
// unit's first letter or '%') and one of proseCues. Most lines fail the
// first pass; the cues are compared only where one may start.
func maybeProse(line string, context bool) bool {
	fig, blanks := false, 0
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case isDigit(c):
			fig = fig || figureAfter(line, i+1)
		case c == ' ' || c >= 0x80: // CJK text has no blanks between words
			blanks++
		}
	}
	if !fig || blanks < 4 {
		return false
	}
	return context || hasCue(line)
}

// hasCue reports one of proseCues in line.
func hasCue(line string) bool {
	for i := 0; i < len(line); i++ {
		for _, cue := range cuesByFirst[line[i]] {
			if hasCueAt(line, i, cue) {
				return true
			}
		}
	}
	return false
}

// hasCueAt reports cue at line[i:], ignoring ASCII case.
func hasCueAt(line string, i int, cue string) bool {
	if i+len(cue) > len(line) {
		return false
	}
	for j := 0; j < len(cue); j++ {
		c := line[i+j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != cue[j] {
			return false
		}
	}
	return true
}

// figureAfter reports a size unit or '%' at line[j:] after a number:
// "mb", " GB", "+ GB", "k MB", "G,", "%", "gigabytes".
func figureAfter(line string, j int) bool {
	if j < len(line) && (line[j] == ' ' || line[j] == '+') {
		j++
	}
	if j < len(line) && line[j] == ' ' {
		j++
	}
	if j+1 < len(line) && line[j]|0x20 == 'k' && line[j+1] == ' ' {
		j += 2 // "10k MB"
	}
	if j >= len(line) {
		return false
	}
	switch line[j] | 0x20 {
	case 'g', 'm', 'k', 't':
		if j+1 == len(line) || !isLetter(line[j+1]) {
			return true
		}
		switch line[j+1] | 0x20 {
		case 'b', 'i', 'e':
			return true
		}
	case '%' | 0x20:
		return line[j] == '%'
	case 'b':
		return strings.HasPrefix(line[j:], "byte")
	}
	return false
}

// proseLine reads the memory figures of a prose line into p.prose. It
// reports whether the line gave any.
func (p *sampleParser) proseLine(line string, n int) bool {
	if len(line) < 12 || len(line) > 4096 {
		return false
	}
	if !maybeProse(line, p.memSeen) {
		// A line about memory without a figure ("GPU memory keeps
		// growing") makes the next lines' figures memory figures.
		if !p.memSeen && len(line) < 1024 && hasCue(line) {
			p.memSeen = true
		}
		return false
	}
	toks := tokenize(line, p.tokBuf)
	p.tokBuf = toks
	words, mem, gpu, host := 0, false, false, false
	for i, t := range toks {
		switch t.kind {
		case 'w':
			if len(t.s) >= 2 {
				words++
			}
			// "GPU RAM" is the GPU's.
			if t.s == "ram" && i > 0 && toks[i-1].kind == 'w' && toks[i-1].has(fGPU) {
				gpu = true
				continue
			}
		case 'c':
			words++
		default:
			continue
		}
		mem = mem || t.has(fMem)
		gpu = gpu || t.has(fGPU)
		host = host || t.has(fHost)
	}
	if words < 5 || !(mem || p.memSeen) {
		return false
	}
	if mem {
		p.memSeen = true
	}
	if host && !gpu {
		p.host = true
		return false
	}
	before := len(p.prose)
	// Sentences end at '.', '!', '?', ';' (or 。！？；); clauses at ',', '(' and ')'.
	start := 0
	for i := 0; i <= len(toks); i++ {
		if i == len(toks) || (toks[i].kind == 'p' && (toks[i].s == "." || toks[i].s == "!" || toks[i].s == "?" || toks[i].s == ";")) {
			p.sentence(toks[start:i], n, gpu)
			start = i + 1
		}
	}
	if len(p.prose) > before {
		p.used = true
		for _, f := range p.prose[before:] {
			if f.pct > 0 {
				if p.pctText == nil {
					p.pctText = map[int]string{}
				}
				p.pctText[n] = exampleText(line) // for the report, if no capacity turns up
				break
			}
		}
		return true
	}
	return false
}

// sentence reads one sentence's figures.
func (p *sampleParser) sentence(toks []ptoken, n int, gpu bool) {
	if len(toks) == 0 {
		return
	}
	for _, t := range toks {
		if t.kind == 'w' && t.has(fCond) {
			return
		}
	}
	// The sentence's figures and positions, clause by clause (the
	// parser's scratch slices, kept from line to line).
	figs, poss, clauses := p.figBuf[:0], p.posBuf[:0], p.clauseBuf[:0] // clauses: figs and poss counts at each clause's end
	defer func() { p.figBuf, p.posBuf, p.clauseBuf = figs, poss, clauses }()
	closeClause := func() { clauses = append(clauses, [2]int{len(figs), len(poss)}) }
	unit := gpumem.Bytes(0) // a unit of the sentence, for unit-less figures
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind == 'p' && (t.s == "," || t.s == ";" || t.s == "(" || t.s == ")") {
			closeClause()
			continue
		}
		if t.kind == 'w' && (t.s == "but" || t.s == "however" || t.s == "then") {
			closeClause()
			continue
		}
		if pos, ok, skip := readPos(toks, i); ok {
			poss = append(poss, clausePos{at: i, pos: pos.pos, kind: pos.kind, first: pos.first})
			i += skip
			continue
		}
		if t.kind == 'w' && t.has(fStart) || t.kind == 'c' && (t.s == "开" || t.s == "初") && i+1 < len(toks) && (toks[i+1].s == "始") {
			poss = append(poss, clausePos{at: i, kind: "start"})
			continue
		}
		if t.kind != 'n' || math.IsNaN(t.v) {
			continue
		}
		f, end, ok := readFig(toks, i)
		if !ok {
			continue
		}
		if f.value > 0 || f.pct > 0 {
			if u := figUnit(toks, i); u > 0 {
				unit = u
			}
		}
		if f.value > 0 || f.pct > 0 || f.unitless > 0 {
			f.at = i
			figs = append(figs, f)
		}
		i = end - 1
	}
	closeClause()
	// A unit-less figure after a memory verb takes the sentence's unit;
	// without one it keeps its place (and position) but gives no sample.
	for k := range figs {
		if figs[k].unitless > 0 && unit > 0 {
			figs[k].value = gpumem.Bytes(math.Ceil(figs[k].unitless * float64(unit)))
			figs[k].borrowed = true
		}
	}
	// Assign positions clause by clause; a clause with a position and no
	// figure hands it to the next clauses of the sentence.
	var pend clausePos
	pendOK := false
	f0, p0 := 0, 0
	for _, c := range clauses {
		cf, cp := figs[f0:c[0]], poss[p0:c[1]]
		f0, p0 = c[0], c[1]
		if len(cf) == 0 {
			if len(cp) > 0 {
				pend, pendOK = cp[len(cp)-1], true
				if oomWords(toks) && pend.kind != "start" && pend.kind != "" {
					p.prose = append(p.prose, proseFig{line: n, pos: pend.pos, kind: pend.kind, gpu: gpu, oom: true})
					pendOK = false
				}
			}
			continue
		}
		if cap(p.assignBuf) < len(cf) {
			p.assignBuf = make([]clausePos, len(cf))
		}
		assign := p.assignBuf[:len(cf)]
		clear(assign)
		nExplicit, firstExplicit := 0, clausePos{}
		for _, q := range cp {
			if q.kind != "start" {
				if nExplicit == 0 {
					firstExplicit = q
				}
				nExplicit++
			}
		}
		switch {
		case len(cp) == 1 && cp[0].first > 0 && int(cp[0].first) == len(cf):
			// "A -- B -- C at the first three iterations".
			for i := range cf {
				assign[i] = clausePos{pos: int64(i + 1), kind: cp[0].kind}
			}
		case len(cp) == len(cf):
			copy(assign, cp)
		case len(cf) == 2 && nExplicit == 1 && fromTo(toks, cf[0].at, cf[1].at):
			// "from 10k MB to 20k MB after nearly 100 steps".
			assign[0] = clausePos{kind: "start"}
			assign[1] = firstExplicit
		case len(cf) == 1 && nExplicit >= 1:
			assign[0] = firstExplicit
		case len(cf) == 1 && len(cp) == 1:
			assign[0] = cp[0]
		case len(cp) == 0 && len(cf) == 1 && pendOK:
			assign[0] = pend
		default:
			// Each figure takes the nearest position before it, if any.
			for i, f := range cf {
				for _, q := range cp {
					if q.at < f.at {
						assign[i] = q
					}
				}
			}
		}
		for i, f := range cf {
			if assign[i].first > 0 {
				assign[i] = clausePos{} // "the first N" that does not match the figures
			}
			if f.value == 0 && f.pct == 0 {
				continue
			}
			p.prose = append(p.prose, proseFig{line: n, value: f.value, pct: f.pct, pos: assign[i].pos, kind: assign[i].kind, gpu: gpu, borrowed: f.borrowed})
		}
		pendOK = false
	}
}

// finishProse turns the prose figures into samples: steps when every
// figure has a position of one kind (the start counting as 0), else the
// order of the text; a new Run each time the steps go back; percentages
// against ReadOptions.Capacity, else a capacity the log states. It
// returns the reasons the reading is less than sure, and the lines whose
// only figures were percentages without a capacity.
func (p *sampleParser) finishProse() (why []string, noCapacity []int) {
	if len(p.prose) == 0 {
		return nil, nil
	}
	why = append(why, whyProse)
	kind := ""
	steps := true
	for _, f := range p.prose {
		switch f.kind {
		case "start":
		case "":
			steps = false
		default:
			if kind != "" && kind != f.kind {
				steps = false
			}
			kind = f.kind
		}
	}
	if kind == "" {
		steps = false
	}
	capacity := p.capacity
	if capacity == 0 {
		for _, s := range p.out {
			if s.Has&ColCapacity != 0 && s.Capacity > capacity {
				capacity = s.Capacity
			}
		}
	}
	noGPU, borrowed, pct, noPos := false, false, false, !steps
	run := 0
	var last int64 = math.MinInt64
	lineHas := map[int]bool{}
	pctOnly := map[int]bool{}
	for _, f := range p.prose {
		if f.oom && !steps {
			continue
		}
		s := Sample{Line: f.line, OOM: f.oom}
		if steps {
			s.Step = f.pos
			if f.kind == "start" {
				s.Step = 0
			}
			if s.Step < last {
				run++
			}
			last = s.Step
			s.Run = run
			s.Has |= ColStep
		}
		if !f.oom {
			v := f.value
			if f.pct > 0 {
				if capacity == 0 {
					if !lineHas[f.line] {
						pctOnly[f.line] = true
					}
					continue
				}
				v = gpumem.Bytes(math.Ceil(f.pct * float64(capacity) / 100))
				s.Capacity = capacity
				s.Has |= ColCapacity
				pct = true
			}
			s.Used = v
			s.Has |= ColUsed
			lineHas[f.line] = true
			delete(pctOnly, f.line)
			noGPU = noGPU || !f.gpu
			borrowed = borrowed || f.borrowed
		}
		if steps {
			if p.units == nil {
				p.units = map[string]int{}
			}
			p.units[kind]++
		}
		p.out = append(p.out, s)
	}
	if noPos {
		why = append(why, whyNoPos)
	}
	if noGPU {
		why = append(why, whyNoGPU)
	}
	if borrowed {
		why = append(why, whyBorrowed)
	}
	if pct {
		why = append(why, whyPercent)
	}
	if run > 0 {
		why = append(why, whyRuns)
	}
	for l := range pctOnly {
		noCapacity = append(noCapacity, l)
	}
	slices.Sort(noCapacity)
	return why, noCapacity
}
