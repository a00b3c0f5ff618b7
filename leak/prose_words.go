package leak

// The words of memory prose: the tokenizer and the word lists (memory, GPU,
// host, numbers, ordinals, units, cues) it tags words with.

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumem/gpumem"
)

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
