package leak

// Reading a figure and its position from prose: numbers with units, "from X
// to Y", rates and GPU positions.

import (
	"math"

	"github.com/gpumem/gpumem"
)

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
