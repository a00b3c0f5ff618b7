package request

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// describe names j's model for people: its name, else its family, with
// anything unprintable escaped (a name comes from a config.json).
func Describe(j budget.Job) string {
	s := j.Model.Spec()
	if s.Name != "" {
		return Clean(s.Name)
	}
	return Clean(s.Family)
}

// clean returns s for printing: unchanged when every rune is printable,
// else with the unprintable ones (control and format characters, line
// breaks, bytes that are not UTF-8) escaped as strconv.Quote does.
func Clean(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			q := strconv.Quote(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}

// DidYouMean returns "; did you mean X?" naming the candidates closest to
// s (see closest), each written by quote, or "" when none is close.
func DidYouMean(s string, candidates []string, quote func(string) string) string {
	return suggestion(closest(s, candidates), quote)
}

// suggestion returns "; did you mean A, B or C?" with each name written
// by quote, or "" for none.
func suggestion(near []string, quote func(string) string) string {
	if len(near) == 0 {
		return ""
	}
	q := make([]string, len(near))
	for i, c := range near {
		q[i] = quote(c)
	}
	list := q[0]
	if len(q) > 1 {
		list = strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
	}
	return "; did you mean " + list + "?"
}

// closest returns the candidates nearest to s, ignoring case: those at
// the smallest edit distance (Damerau–Levenshtein, a swap of neighbours
// counting one) when it is at most 1 for names of up to 4 characters and
// at most 2 for longer ones; else those s is a prefix of, or that are a
// prefix of s (at least 3 characters), when there are at most three.
func closest(s string, candidates []string) []string {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return nil
	}
	limit := 2
	if len([]rune(s)) <= 4 {
		limit = 1
	}
	best, near := limit+1, []string(nil)
	for _, c := range candidates {
		d := editDistance(s, strings.ToLower(c))
		switch {
		case d > limit:
		case d < best:
			best, near = d, []string{c}
		case d == best:
			near = append(near, c)
		}
	}
	if len(near) > 0 {
		return near[:min(len(near), 3)]
	}
	var prefix []string
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if len(s) >= 3 && strings.HasPrefix(lc, s) || len(lc) >= 3 && strings.HasPrefix(s, lc) {
			prefix = append(prefix, c)
		}
	}
	if len(prefix) > 3 {
		return nil
	}
	return prefix
}

// editDistance is the optimal-string-alignment distance between a and b
// in runes: insertions, deletions, substitutions and swaps of two
// neighbours each count one.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	prev2 := make([]int, len(y)+1)
	prev := make([]int, len(y)+1)
	cur := make([]int, len(y)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(x); i++ {
		cur[0] = i
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(y)]
}

// SuggestModel returns "; did you mean ...?" for a model name that is not
// in the catalog (for a Hugging Face repository, its name after the
// owner), or "".
func SuggestModel(name string) string {
	var names []string
	for _, s := range model.Catalog() {
		names = append(names, s.Name)
	}
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return DidYouMean(name, names, strconv.Quote)
}

// deviceKey is a GPU name as gpumem.LookupDevice matches it: lower case,
// without the vendor and brand words, letters and digits only.
func deviceKey(name string) string {
	var b strings.Builder
	for _, w := range strings.Fields(strings.ToLower(name)) {
		switch w {
		case "nvidia", "tesla", "geforce", "amd", "instinct", "radeon", "quadro":
			continue
		}
		for _, r := range w {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}

// SuggestGPU returns "; did you mean ...?" for a GPU name the catalog
// does not know, or "". Candidates are the names one edit away (a letter
// or digit inserted, deleted, changed, or two swapped) that
// gpumem.LookupDevice resolves, which covers the short forms (h100,
// rtx4090); the catalog's names that start with the name typed ("rtx
// 4000" for the RTX 4000 Ada); failing both, the names within closest's
// edit distance. Names that start with it come first, then the nearest;
// at most three.
func SuggestGPU(name string) string {
	key := deviceKey(name)
	if key == "" || len(key) > 32 {
		return ""
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	hits := map[string]bool{}
	try := func(k string) {
		if d, ok := gpumem.LookupDevice(k); ok {
			hits[d.Name] = true
		}
	}
	for i := 0; i <= len(key); i++ {
		for _, c := range alphabet {
			try(key[:i] + string(c) + key[i:])
			if i < len(key) {
				try(key[:i] + string(c) + key[i+1:])
			}
		}
		if i < len(key) {
			try(key[:i] + key[i+1:])
		}
		if i+1 < len(key) {
			try(key[:i] + key[i+1:i+2] + key[i:i+1] + key[i+2:])
		}
	}
	limit := 2
	if len(key) <= 4 {
		limit = 1
	}
	type cand struct {
		name   string
		prefix bool
		dist   int
	}
	var cs, near []cand
	for _, d := range gpumem.Devices() {
		k := deviceKey(d.Name)
		c := cand{d.Name, len(key) >= 3 && strings.HasPrefix(k, key), editDistance(key, k)}
		switch {
		case hits[d.Name] || c.prefix:
			cs = append(cs, c)
		case c.dist <= limit:
			near = append(near, c)
		}
	}
	if len(cs) == 0 {
		cs = near // no short form or prefix: the nearest full names
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].prefix != cs[j].prefix {
			return cs[i].prefix
		}
		return cs[i].dist < cs[j].dist
	})
	var names []string
	for _, c := range cs[:min(len(cs), 3)] {
		names = append(names, c.name)
	}
	return suggestion(names, strconv.Quote)
}

// LargestName is the --model (and request "model") that asks plan for
// the largest GPT-by-size model that fits instead of planning a given
// one.
const LargestName = "gpt:largest"

// LargestPlaceholder is the model the job is built with before
// budget.LargestModel replaces it (its smallest size).
const LargestPlaceholder = "gpt:125m"

// IsLargest says whether name asks for the largest model.
func IsLargest(name string) bool {
	return strings.EqualFold(strings.TrimSpace(name), LargestName)
}

// minBareBytes is the smallest number without a unit a size flag takes,
// as bytes (1 MiB): below it a bare number is refused, since it is almost
// surely GiB or GB (--memory 80) and no GPU has less memory; from it up
// it is unambiguous bytes (--memory 85899345920, as the service's
// integer sizes).
const minBareBytes = 1 << 20

// unitHint suggests the units a bare number t (f) may have meant: GiB or
// GB, and first MiB for a number of thousands (nvidia-smi's unit:
// --memory 81920 is an 80 GiB card).
func unitHint(t string, f float64) string {
	if f >= 1024 {
		return fmt.Sprintf("give %sMiB (nvidia-smi's unit), %sGiB (2^30 bytes) or %sGB (10^9 bytes)", t, t, t)
	}
	return fmt.Sprintf("give %sGiB (2^30 bytes) or %sGB (10^9 bytes)", t, t)
}

// ParseSize reads the size flag --name: a positive amount with a unit
// ("80GiB", "24GB", "512B"), or an integer of bytes from minBareBytes up.
// A smaller bare number is refused with the units it may have meant, and
// zero with an example.
func ParseSize(name, v, example string) (gpumem.Bytes, error) {
	t := strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(t, 64); err == nil && strings.Trim(t, "0123456789.") == "" {
		switch {
		case f == 0:
			return 0, fmt.Errorf("%w: --%s %q: want a size of at least 1B, such as %s", ErrUsage, name, v, example)
		case f < minBareBytes || strings.Contains(t, "."):
			return 0, fmt.Errorf("%w: --%s %q: a number without a unit; %s", ErrUsage, name, v, unitHint(t, f))
		}
	}
	b, err := gpumem.ParseBytes(v)
	if err != nil {
		return 0, fmt.Errorf("%w: --%s: %v", ErrUsage, name, err)
	}
	if b < 1 {
		return 0, fmt.Errorf("%w: --%s %q: want a size of at least 1B, such as %s", ErrUsage, name, v, example)
	}
	return b, nil
}
