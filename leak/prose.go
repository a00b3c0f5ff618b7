package leak

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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

// ptoken is a token of a prose line.
type ptoken struct {
	kind  byte // 'n' number, 'w' word (lower case), 'c' CJK rune, 'p' punctuation
	s     string
	v     float64 // a number's value
	isInt bool
	space bool      // blank before the token
	info  *wordInfo // what the word is (wordInfos), nil for most
}

// has reports a word class of the token.
func (t *ptoken) has(f uint16) bool { return t.info != nil && t.info.flags&f != 0 }

// wordInfo is what a word of prose is, from the word lists below, looked
// up once per token.
type wordInfo struct {
	flags uint16
	pos   string       // posWords' step unit
	num   int64        // numberWords', ordinalWords' or cjkNumerals' value
	unit  gpumem.Bytes // proseUnits'
}

// Word classes.
const (
	fMem uint16 = 1 << iota
	fGPU
	fHost
	fCond
	fStart
	fMemVerb
	fNumber
	fOrdinal
	fCJKNum
	fUnit
	fPos
)

var wordInfos = func() map[string]*wordInfo {
	m := map[string]*wordInfo{}
	get := func(w string) *wordInfo {
		if m[w] == nil {
			m[w] = &wordInfo{}
		}
		return m[w]
	}
	for w, set := range map[uint16]map[string]bool{fMem: memWords, fGPU: gpuWords, fHost: hostWords, fCond: condWords, fStart: startWords, fMemVerb: memVerbs} {
		for k := range set {
			get(k).flags |= w
		}
	}
	for k, v := range numberWords {
		get(k).flags |= fNumber
		get(k).num = v
	}
	for k, v := range ordinalWords {
		get(k).flags |= fOrdinal
		get(k).num = v
	}
	for k, v := range cjkNumerals {
		get(k).flags |= fCJKNum
		get(k).num = v
	}
	for k, u := range proseUnits {
		get(k).flags |= fUnit
		get(k).unit = u
	}
	for k, u := range posWords {
		get(k).flags |= fPos
		get(k).pos = u
	}
	return m
}()

// tokenize splits a normalized line into tokens. Markdown emphasis and
// backquotes are dropped; full-width punctuation is folded to ASCII.
func tokenize(line string, buf []ptoken) []ptoken {
	toks := buf[:0]
	space := true
	for i := 0; i < len(line); {
		r, w := utf8.DecodeRuneInString(line[i:])
		switch {
		case r == ' ' || r == '\t' || r == '\u3000' || r == '\u00a0':
			space = true
			i += w
			continue
		case r == '*' && i+1 < len(line) && line[i+1] == '*', r == '`', r == '_' && i+1 < len(line) && line[i+1] == '_':
			// markdown emphasis, code: no token, no blank
			if r == '`' {
				i++
			} else {
				i += 2
			}
			continue
		case r < 128 && isDigit(byte(r)):
			j := i
			for j < len(line) && (isDigit(line[j]) || (line[j] == ',' && j+3 < len(line) && isDigit(line[j+1]) && isDigit(line[j+2]) && isDigit(line[j+3]) && (j+4 == len(line) || !isDigit(line[j+4])))) {
				j++
			}
			isInt := true
			if j+1 < len(line) && line[j] == '.' && isDigit(line[j+1]) {
				isInt = false
				j++
				for j < len(line) && isDigit(line[j]) {
					j++
				}
			}
			num := strings.ReplaceAll(line[i:j], ",", "")
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || math.IsInf(v, 0) {
				v = math.NaN()
			}
			toks = append(toks, ptoken{kind: 'n', s: num, v: v, isInt: isInt, space: space})
			i = j
		case r < 128 && isLetter(byte(r)):
			j := i
			for j < len(line) && (isLetter(line[j]) || line[j] == '\'') {
				j++
			}
			if j < len(line) && (line[j] == '_' || isDigit(line[j])) && j-i > 1 {
				// An identifier ("llama_kv_cache_init", "yolov3"): one token
				// that is no word of prose.
				for j < len(line) && isIdent(line[j]) {
					j++
				}
				toks = append(toks, ptoken{kind: 'p', s: "id", space: space})
				i = j
				space = false
				continue
			}
			w := lowerASCII(line[i:j])
			toks = append(toks, ptoken{kind: 'w', s: w, space: space, info: wordInfos[w]})
			i = j
		case r >= 0x2E80 && unicode.Is(unicode.Han, r):
			toks = append(toks, ptoken{kind: 'c', s: line[i : i+w], space: space, info: wordInfos[line[i:i+w]]})
			i += w
		default:
			s := line[i : i+w]
			switch r {
			case '，', '、':
				s = ","
			case '。', '！', '？':
				s = "."
			case '；':
				s = ";"
			case '：':
				s = ":"
			case '（':
				s = "("
			case '）':
				s = ")"
			case '～', '~':
				s = "~"
			}
			if r == utf8.RuneError && w == 1 {
				s = "?"
			}
			toks = append(toks, ptoken{kind: 'p', s: s, space: space})
			i += w
		}
		space = false
	}
	return toks
}

// proseUnits are the units people write after a figure, in lower case.
// Bare k/m/g are binary, as tools print them (see ParseSamples); "mb",
// "gb" and the spelled-out units are decimal, as gpumem.ParseBytes reads
// MB and GB. A bare "B" is not a unit here: "a 7B model" counts
// parameters.
var proseUnits = map[string]gpumem.Bytes{
	"byte": 1, "bytes": 1, // a bare B is a count in prose ("7B parameters")
	"k": gpumem.KiB, "kb": gpumem.KB, "kib": gpumem.KiB, "kilobytes": gpumem.KB,
	"m": gpumem.MiB, "mb": gpumem.MB, "mib": gpumem.MiB, "megabytes": gpumem.MB, "megabyte": gpumem.MB,
	"g": gpumem.GiB, "gb": gpumem.GB, "gib": gpumem.GiB, "gigabytes": gpumem.GB, "gigabyte": gpumem.GB, "gigs": gpumem.GB,
	"t": gpumem.TiB, "tb": gpumem.TB, "tib": gpumem.TiB, "terabytes": gpumem.TB,
}

// maxProsePos is the largest step a sentence is read to give (a larger
// number is an identifier or a typo, not a step).
const maxProsePos = 1e12

// posWords are the words that count steps in prose, with the step unit.
var posWords = map[string]string{
	"iter": "iteration", "iters": "iteration", "iteration": "iteration", "iterations": "iteration",
	"step": "step", "steps": "step", "epoch": "epoch", "epochs": "epoch",
}

var numberWords = map[string]int64{
	"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
	"eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "a": 1, "an": 1,
}

var ordinalWords = map[string]int64{
	"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10,
}

var cjkNumerals = map[string]int64{"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}

var startWords = map[string]bool{
	"beginning": true, "begin": true, "began": true, "begins": true, "start": true, "starts": true, "started": true,
	"starting": true, "initially": true, "initial": true, "开": true, "初": true,
}

// memWords put a line about memory; gpuWords say it is the GPU's; host
// words that it is the machine's.
var memWords = map[string]bool{
	"memory": true, "vram": true, "mem": true, "usage": true, "uses": true, "used": true, "takes": true,
	"consumes": true, "consumption": true, "occupies": true, "occupied": true, "allocated": true, "reserved": true,
	"gigabytes": true, "megabytes": true, "显": true, "占": true, "存": true,
}

var gpuWords = map[string]bool{"gpu": true, "gpus": true, "vram": true, "cuda": true, "显": true, "graphics": true}

var hostWords = map[string]bool{"ram": true, "cpu": true, "host": true, "swap": true, "rss": true, "resident": true, "内": true}

// condWords make a sentence an extrapolation or a hypothesis, not a
// reading.
var condWords = map[string]bool{"will": true, "would": true, "if": true, "could": true, "should": true, "might": true}

// memVerbs are the words after which a figure without a unit is a memory
// figure ("第一个epoch占用2.59").
var memVerbs = map[string]bool{"占": true, "用": true, "uses": true, "takes": true, "consumes": true, "occupies": true, "using": true}

// lowerASCII is strings.ToLower for ASCII letters, allocating only when
// the word has an upper-case letter.
func lowerASCII(w string) string {
	for i := 0; i < len(w); i++ {
		if 'A' <= w[i] && w[i] <= 'Z' {
			return strings.ToLower(w)
		}
	}
	return w
}

// proseCues are texts one of which a prose line about memory holds
// (matched without regard to ASCII case): a cheap test before the line
// is cut into words.
var proseCues = [...]string{"mem", "vram", "gpu", "usage", "use", "take", "consum", "occup", "alloc", "reserv", "byte", "\xe5\x8d\xa0", "\xe6\x98\xbe"} // 占, 显

// cuesByFirst lists proseCues by their first byte, either case.
var cuesByFirst = func() (t [256][]string) {
	for _, c := range proseCues {
		t[c[0]] = append(t[c[0]], c)
		if 'a' <= c[0] && c[0] <= 'z' {
			t[c[0]-'a'+'A'] = append(t[c[0]-'a'+'A'], c)
		}
	}
	return t
}()

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

// clauseFig is a figure of a clause before its position is known.
type clauseFig struct {
	at       int // token index in the sentence
	value    gpumem.Bytes
	pct      float64
	unitless float64 // a figure after a memory verb with no unit: its number
	borrowed bool
}

type clausePos struct {
	at    int
	pos   int64
	kind  string
	first int64 // "the first N iterations": N, else 0
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

// oomWords reports a sentence that says the job ran out of memory.
func oomWords(toks []ptoken) bool {
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].s == "out" && toks[i+1].s == "of" && toks[i+2].s == "memory" {
			return true
		}
	}
	for _, t := range toks {
		if t.s == "oom" {
			return true
		}
	}
	return false
}

// fromTo reports "from A … to B" around the figures at a and b.
func fromTo(toks []ptoken, a, b int) bool {
	from, to := false, false
	for i := max(0, a-3); i < a; i++ {
		from = from || toks[i].s == "from"
	}
	for i := a + 1; i < b; i++ {
		to = to || toks[i].s == "to"
	}
	return from && to
}

// readPos reads a position at toks[i]: "iter 99", "epoch 2-5", "after 900
// steps", "the 10,000th iteration", "in one epoch", "my first epoch",
// "the first six iterations", "第二个epoch". It returns how many more
// tokens it used.
func readPos(toks []ptoken, i int) (clausePos, bool, int) {
	t := toks[i]
	kw := func(j int) (string, bool) {
		if j < len(toks) && toks[j].kind == 'w' {
			return toks[j].info.posUnit()
		}
		return "", false
	}
	switch t.kind {
	case 'w':
		if u, ok := t.info.posUnit(); ok {
			j := i + 1
			for j < len(toks) && toks[j].kind == 'p' && (toks[j].s == "#" || toks[j].s == ":" || toks[j].s == "=") {
				j++
			}
			if j < len(toks) && toks[j].kind == 'n' && toks[j].isInt && toks[j].v <= maxProsePos && !isFigure(toks, j) {
				end := j
				// "2-5", "6/100": the first number.
				if j+2 < len(toks) && toks[j+1].kind == 'p' && (toks[j+1].s == "-" || toks[j+1].s == "/") && toks[j+2].kind == 'n' {
					end = j + 2
				}
				return clausePos{pos: int64(toks[j].v), kind: u}, true, end - i
			}
			return clausePos{}, false, 0
		}
		if t.has(fOrdinal) {
			v := t.info.num
			if u, ok := kw(i + 1); ok {
				return clausePos{pos: v, kind: u}, true, 1
			}
			// "the first six iterations"
			if i+2 < len(toks) {
				var nn int64
				if toks[i+1].kind == 'w' && toks[i+1].has(fNumber) {
					nn = toks[i+1].info.num
				} else if toks[i+1].kind == 'n' && toks[i+1].isInt && toks[i+1].v <= 10000 {
					nn = int64(toks[i+1].v)
				}
				if u, ok := kw(i + 2); ok && nn > 1 {
					return clausePos{kind: u, first: nn}, true, 2
				}
			}
		}
		if t.has(fNumber) && t.s != "a" && t.s != "an" {
			v := t.info.num
			if u, ok := kw(i + 1); ok && !rateBefore(toks, i) {
				return clausePos{pos: v, kind: u}, true, 1
			}
		}
	case 'n':
		if !t.isInt || !(t.v <= maxProsePos) || rateBefore(toks, i) {
			return clausePos{}, false, 0
		}
		j := i + 1
		if j < len(toks) && toks[j].kind == 'w' && !toks[j].space && (toks[j].s == "st" || toks[j].s == "nd" || toks[j].s == "rd" || toks[j].s == "th") {
			j++
		}
		if u, ok := kw(j); ok {
			return clausePos{pos: int64(t.v), kind: u}, true, j - i
		}
	case 'c':
		// 第N个epoch
		if t.s == "第" && i+2 < len(toks) {
			ok := toks[i+1].kind == 'c' && toks[i+1].has(fCJKNum)
			var v, nv int64
			if ok {
				v = toks[i+1].info.num
			}
			if !ok && toks[i+1].kind == 'n' && toks[i+1].isInt && toks[i+1].v <= maxProsePos {
				nv, ok = int64(toks[i+1].v), true
			} else {
				nv = v
			}
			if ok {
				j := i + 2
				if j < len(toks) && toks[j].s == "个" {
					j++
				}
				if u, ok := kw(j); ok {
					return clausePos{pos: nv, kind: u}, true, j - i
				}
			}
		}
	}
	return clausePos{}, false, 0
}

// posUnit returns a step word's unit.
func (w *wordInfo) posUnit() (string, bool) {
	if w == nil || w.flags&fPos == 0 {
		return "", false
	}
	return w.pos, true
}

// rateBefore reports "per", "each" or "every" just before toks[i].
func rateBefore(toks []ptoken, i int) bool {
	if i > 0 && toks[i-1].kind == 'w' {
		switch toks[i-1].s {
		case "per", "each", "every":
			return true
		}
	}
	return false
}

// isFigure reports a number followed by a size unit or '%'.
func isFigure(toks []ptoken, i int) bool {
	return figUnit(toks, i) > 0 || (i+1 < len(toks) && toks[i+1].s == "%")
}

// figUnit returns the unit after the number at toks[i] ("3200mb", "10k
// MB", "19+ GB"), or 0.
func figUnit(toks []ptoken, i int) gpumem.Bytes {
	j := i + 1
	mult := gpumem.Bytes(1)
	if j < len(toks) && toks[j].kind == 'p' && toks[j].s == "+" {
		j++
	}
	if j+1 < len(toks) && toks[j].kind == 'w' && toks[j].s == "k" && !toks[j].space && toks[j+1].kind == 'w' {
		if toks[j+1].has(fUnit) {
			mult = 1000
			j++
		}
	}
	if j < len(toks) && toks[j].kind == 'w' {
		if toks[j].has(fUnit) {
			return toks[j].info.unit * mult
		}
	}
	return 0
}

// readFig reads a figure at the number toks[i]: a size with its unit, a
// percentage, or a unit-less number after a memory verb. Deltas ("+0.12
// MB", "increases by 254MB"), rates ("100 MB / epoch", "254MB with each
// epoch"), capacities ("of 24GB") and figures qualified free, available
// or total are not figures of usage.
func readFig(toks []ptoken, i int) (clauseFig, int, bool) {
	t := toks[i]
	var f clauseFig
	end := i + 1
	// Part of an identifier ("fp16", "yolov3") or a version.
	if i > 0 && !t.space && (toks[i-1].kind == 'w' || toks[i-1].s == ".") {
		return f, end, false
	}
	// A log's "key: value" or "key = value": the structured readers'
	// business, not prose.
	if i > 0 && (toks[i-1].s == ":" || toks[i-1].s == "=") {
		return f, end, false
	}
	// A signed delta: "(+0.12 MB)", "-104".
	if i > 0 && !t.space && (toks[i-1].s == "+" || toks[i-1].s == "-") && (i < 2 || toks[i-2].kind != 'n') {
		return f, end, false
	}
	for k := max(0, i-3); k < i; k++ {
		switch toks[k].s {
		case "by", "free", "available", "total", "left", "remaining", "capacity", "of", "*", "=", "x", "×":
			return f, end, false
		}
	}
	u := figUnit(toks, i)
	switch {
	case u > 0:
		for end < len(toks) && (toks[end].s == "+" || toks[end].s == "k" && !toks[end].space) {
			end++
		}
		end++ // the unit
		v := t.v * float64(u)
		if v <= 0 || v > math.MaxInt64/2 {
			return f, end, false
		}
		f.value = gpumem.Bytes(math.Ceil(v))
	case end < len(toks) && toks[end].s == "%":
		end++
		if t.v <= 0 || t.v > 100 {
			return f, end, false
		}
		f.pct = t.v
	default:
		if i > 0 && toks[i-1].has(fMemVerb) && t.v > 0 && t.v < 1e6 {
			f.unitless = t.v
			return f, end, true
		}
		return f, end, false
	}
	// A rate or a capacity after the figure.
	for k := end; k < min(len(toks), end+3); k++ {
		switch toks[k].s {
		case "per", "each", "every", "/", "*", "=", "of":
			if toks[k].s == "of" && (k+1 >= len(toks) || toks[k+1].kind != 'n') {
				continue
			}
			return f, end, false
		}
	}
	return f, end, true
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

// labelledNum is a "Label: N" line ("Before model run: 1098").
type labelledNum struct {
	line  int
	label string
	num   string
}

// labelledLine reads "Label: N": a label of letters and blanks, a colon,
// one number, nothing else.
func labelledLine(t string) (label, num string, ok bool) {
	c := strings.IndexByte(t, ':')
	if c <= 0 || c > 60 {
		return "", "", false
	}
	label = strings.TrimSpace(t[:c])
	for i := 0; i < len(label); i++ {
		if !isLetter(label[i]) && label[i] != ' ' {
			return "", "", false
		}
	}
	num = strings.TrimSpace(t[c+1:])
	if label == "" || num == "" || len(num) > 20 {
		return "", "", false
	}
	dot := false
	for i := 0; i < len(num); i++ {
		switch {
		case isDigit(num[i]):
		case num[i] == '.' && !dot && i > 0 && i+1 < len(num):
			dot = true
		default:
			return "", "", false
		}
	}
	// A label that names another quantity is not memory.
	last := strings.ToLower(label[strings.LastIndexByte(label, ' ')+1:])
	switch last {
	case "loss", "lr", "acc", "accuracy", "epoch", "step", "iter", "iteration", "time", "speed", "throughput",
		"ppl", "perplexity", "norm", "reward", "score", "precision", "recall", "eta", "batch", "seed", "size", "count":
		return "", "", false
	}
	return label, num, true
}

// finishLabelled is the last resort of a log that gave no memory figure:
// when at least 2 lines share one "Label: N" label, their numbers are
// read as a bare column of memory in their order (the unit of bare
// columns: ReadOptions.Unit, else assumed). It returns the lines read.
func (p *sampleParser) finishLabelled() []int {
	if len(p.labelled) < 2 {
		return nil
	}
	for _, s := range p.out {
		if s.Has&ColMemory != 0 {
			return nil
		}
	}
	count := map[string]int{}
	best := ""
	for _, l := range p.labelled {
		count[l.label]++
		if count[l.label] > count[best] {
			best = l.label
		}
	}
	if count[best] < 2 {
		return nil
	}
	var lines []int
	for _, l := range p.labelled {
		if l.label != best {
			continue
		}
		v, err := p.tableSize(l.num, 0)
		if err != nil {
			continue
		}
		p.out = append(p.out, Sample{Line: l.line, Used: v, Has: ColUsed})
		lines = append(lines, l.line)
	}
	return lines
}
