package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// modelFlags are the ways to name a model on the command line.
type modelFlags struct {
	name        string
	config      string
	safetensors string
	gguf        string
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.name, "model", "", "a model of the embedded catalog (e.g. llama-3-8b; --model list lists them), or a GPT by size: gpt:100b, gpt:96x12288 (layers x d_model)")
	fs.StringVar(&m.config, "config", "", "a Hugging Face config.json")
	fs.StringVar(&m.safetensors, "safetensors", "", "a .safetensors file, or a sharded model.safetensors.index.json (headers only are read)")
	fs.StringVar(&m.gguf, "gguf", "", "a .gguf file (header only is read)")
}

// load returns the Spec the flags name.
func (m *modelFlags) load() (model.Spec, error) {
	given := 0
	for _, v := range []string{m.name, m.config, m.safetensors, m.gguf} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return model.Spec{}, fmt.Errorf("%w: give one of --model, --config, --safetensors and --gguf", errUsage)
	case m.name == "list":
		names := make(catalogList, 0, 64)
		for _, s := range model.Catalog() {
			names = append(names, s.Name)
		}
		return model.Spec{}, names
	case m.name != "":
		if isLargest(m.name) {
			return model.Spec{}, fmt.Errorf("%w: --model %s: only gpumem plan searches for the largest model", errUsage, largestName)
		}
		if _, isGPT, err := model.ParseGPT(m.name); isGPT && err != nil {
			return model.Spec{}, fmt.Errorf("%w: --model %q: %v", errUsage, m.name, err)
		}
		s, ok := model.Lookup(m.name)
		if !ok {
			return model.Spec{}, fmt.Errorf("%w: --model %q: not in the catalog%s (try --model list, or --config)", errUsage, m.name, suggestModel(m.name))
		}
		return s, nil
	case m.config != "":
		f, err := os.Open(m.config)
		if err != nil {
			return model.Spec{}, fmt.Errorf("--config: %w", fileError(m.config, err))
		}
		defer f.Close()
		s, err := model.FromHFConfig(f)
		if err != nil {
			return model.Spec{}, fmt.Errorf("--config %s: %w", clean(m.config), err)
		}
		return s, nil
	case strings.HasSuffix(m.safetensors, ".index.json"):
		s, err := model.FromSafetensorsIndex(os.DirFS(filepath.Dir(m.safetensors)), filepath.Base(m.safetensors))
		if err != nil {
			return model.Spec{}, fmt.Errorf("--safetensors %s: %w", clean(m.safetensors), err)
		}
		return s, nil
	case m.safetensors != "":
		return readAt("--safetensors", m.safetensors, model.FromSafetensors)
	case m.gguf != "":
		return readAt("--gguf", m.gguf, model.FromGGUF)
	}
	return model.Spec{}, fmt.Errorf("%w: name a model with --model, --config, --safetensors or --gguf", errUsage)
}

// catalogList is what --model list asks for: the catalog's names, which
// the command prints on standard output, exiting 0. It is an error only
// to stop the command that was asked for it.
type catalogList []string

func (c catalogList) Error() string { return "the catalog has: " + strings.Join(c, ", ") }

// readAt opens the file a flag names and reads its header with read.
func readAt(flagName, path string, read func(io.ReaderAt, int64) (model.Spec, error)) (model.Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return model.Spec{}, fmt.Errorf("%s: %w", flagName, fileError(path, err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return model.Spec{}, fmt.Errorf("%s: %w", flagName, fileError(path, err))
	}
	s, err := read(f, st.Size())
	if err != nil {
		return model.Spec{}, fmt.Errorf("%s %s: %w", flagName, clean(path), err)
	}
	return s, nil
}

// fileError is err (from opening or reading path) with the path
// printable: a *fs.PathError keeps its operation and cause, its path
// escaped by clean.
func fileError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: clean(pe.Path), Err: pe.Err}
	}
	return fmt.Errorf("%s: %w", clean(path), err)
}

// parseAttention reads --attention.
func parseAttention(s string) (model.AttentionKernel, error) {
	k, err := model.ParseAttention(s)
	if err != nil {
		return 0, fmt.Errorf("%w: --attention %q: want eager, sdpa or flash", errUsage, s)
	}
	return k, nil
}

// parseCheckpointing reads --checkpointing.
func parseCheckpointing(s string) (model.Checkpointing, error) {
	switch s {
	case "none", "":
		return model.NoCheckpointing, nil
	case "selective":
		return model.SelectiveCheckpointing, nil
	case "full":
		return model.FullCheckpointing, nil
	case "offload":
		return model.OffloadActivations, nil
	}
	return 0, fmt.Errorf("%w: --checkpointing %q: want none, selective, full or offload", errUsage, s)
}

// didYouMean returns "; did you mean X?" naming the candidates closest to
// s (see closest), each written by quote, or "" when none is close.
func didYouMean(s string, candidates []string, quote func(string) string) string {
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

// suggestModel returns "; did you mean ...?" for a model name that is not
// in the catalog (for a Hugging Face repository, its name after the
// owner), or "".
func suggestModel(name string) string {
	var names []string
	for _, s := range model.Catalog() {
		names = append(names, s.Name)
	}
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return didYouMean(name, names, strconv.Quote)
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

// suggestGPU returns "; did you mean ...?" for a GPU name the catalog
// does not know, or "". Candidates are the names one edit away (a letter
// or digit inserted, deleted, changed, or two swapped) that
// gpumem.LookupDevice resolves, which covers the short forms (h100,
// rtx4090); the catalog's names that start with the name typed ("rtx
// 4000" for the RTX 4000 Ada); failing both, the names within closest's
// edit distance. Names that start with it come first, then the nearest;
// at most three.
func suggestGPU(name string) string {
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
