package enginelog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Entry is one line of a corpus's index.jsonl: a log's file, its source
// (a public GitHub thread, or a file of a public GitHub repository at a
// commit: validSourceURL) and the job the thread states; nil where it does
// not. A parameter the log itself prints (n_ctx, cache types, offloaded
// layers) is read from the log instead (Log.Params).
type Entry struct {
	File          string  `json:"file"`
	Engine        string  `json:"engine"`
	Source        string  `json:"source"`
	URL           string  `json:"url"`
	Model         string  `json:"model"`
	Catalog       *string `json:"catalog"`
	Quant         *string `json:"quant"`
	GPU           *string `json:"gpu"`
	GPUs          *int    `json:"gpus"`
	EngineVersion *string `json:"engine_version"`
	// LlamaCppBuild is the date of the llama.cpp build that printed the
	// log (budget.ParseLlamaCppVersion: YYYY-MM-DD or YYYY-MM), or of the
	// post that shows it when the thread names no build, a date in the
	// same placement era (budget.LlamaCppVersion); nil for a current
	// build or another engine.
	LlamaCppBuild *string  `json:"llamacpp_build"`
	NCtx          *int     `json:"n_ctx"`
	NGPULayers    *int     `json:"n_gpu_layers"`
	NParallel     *int     `json:"n_parallel"`
	NBatch        *int     `json:"n_batch"`
	NUBatch       *int     `json:"n_ubatch"`
	FlashAttn     *bool    `json:"flash_attn"`
	CacheTypeK    *string  `json:"cache_type_k"`
	CacheTypeV    *string  `json:"cache_type_v"`
	TensorSplit   *string  `json:"tensor_split"`
	SplitMode     *string  `json:"split_mode"`
	Utilization   *float64 `json:"gpu_memory_utilization"`
	MaxModelLen   *int     `json:"max_model_len"`
	MaxNumSeqs    *int     `json:"max_num_seqs"`
	MaxBatched    *int     `json:"max_num_batched_tokens"`
	TP            *int     `json:"tp"`
	DType         *string  `json:"dtype"`
	KVCacheDType  *string  `json:"kv_cache_dtype"`
	EnforceEager  *bool    `json:"enforce_eager"`
	MemFraction   *float64 `json:"mem_fraction_static"`
	Note          *string  `json:"note"`
	// Hparams are llama.cpp's lines that state the model's shape
	// (print_info / llm_load_print_meta, or llama_model_loader's GGUF
	// metadata), verbatim from the same thread when the log's excerpt
	// does not hold them; HparamsFrom says where in the thread they are
	// and which run printed them.
	Hparams     *string `json:"hparams"`
	HparamsFrom *string `json:"hparams_from"`
}

// Miss is one line of a corpus's misses.jsonl: a figure the runtime
// models miss by more than its tolerance, with the mechanism.
type Miss struct {
	File      string `json:"file"`
	Figure    string `json:"figure"`
	Mechanism string `json:"mechanism"`
}

// Key is the figure's key, as Row.Key.
func (m Miss) Key() string { return m.File + " | " + m.Figure }

// Corpus is a folder of engine logs: index.jsonl, the logs it names
// (parsed), and misses.jsonl.
type Corpus struct {
	Entries []Entry
	Logs    map[string]*Log // by Entry.File
	Misses  map[string]Miss // by Miss.Key
}

// enginePrefix is the file-name prefix of each engine's logs.
var enginePrefix = map[string]string{"llama.cpp": "llamacpp-", "ollama": "ollama-", "vllm": "vllm-", "sglang": "sglang-"}

// ReadCorpus reads the corpus in folder dir of fsys (testdata/enginelogs
// of the repository): every line of index.jsonl (every key known, a
// GitHub source, the file named once under its engine's prefix), every
// *.log of the folder (each indexed, each parsed) and misses.jsonl (each
// with its mechanism; the file may be absent).
func ReadCorpus(fsys fs.FS, dir string) (Corpus, error) {
	c := Corpus{Logs: map[string]*Log{}, Misses: map[string]Miss{}}
	idx := path.Join(dir, "index.jsonl")
	b, err := fs.ReadFile(fsys, idx)
	if err != nil {
		return c, fmt.Errorf("enginelog: %w", err)
	}
	indexed := map[string]bool{}
	n := 0
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		n++
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var e Entry
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return c, fmt.Errorf("enginelog: %s line %d: %w", idx, n, err)
		}
		switch p := enginePrefix[e.Engine]; {
		case p == "":
			return c, fmt.Errorf("enginelog: %s line %d: engine %q: want llama.cpp, ollama, vllm or sglang", idx, n, e.Engine)
		case !strings.HasPrefix(e.File, p) || !strings.HasSuffix(e.File, ".log") || strings.ContainsAny(e.File, `/\`):
			return c, fmt.Errorf("enginelog: %s line %d: file %q: want a %s*.log name in the folder", idx, n, e.File, p)
		case indexed[e.File]:
			return c, fmt.Errorf("enginelog: %s line %d: file %q is indexed twice", idx, n, e.File)
		case !validSourceURL(e.URL):
			return c, fmt.Errorf("enginelog: %s line %d: url %q: want the GitHub thread the log was taken from, or a repository file at a commit (https://github.com/<owner>/<repo>/blob/<40-hex commit>/<path>)", idx, n, e.URL)
		case e.Hparams != nil && (e.HparamsFrom == nil || *e.HparamsFrom == ""):
			return c, fmt.Errorf("enginelog: %s line %d: hparams without hparams_from (where in the thread they were printed)", idx, n)
		}
		indexed[e.File] = true
		c.Entries = append(c.Entries, e)
	}
	logs, err := fs.Glob(fsys, path.Join(dir, "*.log"))
	if err != nil {
		return c, fmt.Errorf("enginelog: %w", err)
	}
	for _, f := range logs {
		if !indexed[path.Base(f)] {
			return c, fmt.Errorf("enginelog: %s is not in %s", f, idx)
		}
	}
	for _, e := range c.Entries {
		f := path.Join(dir, e.File)
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return c, fmt.Errorf("enginelog: %s names %q: %w", idx, e.File, err)
		}
		l, err := Parse(bytes.NewReader(b))
		if err != nil {
			return c, fmt.Errorf("%s: %w", f, err)
		}
		c.Logs[e.File] = l
	}
	mf := path.Join(dir, "misses.jsonl")
	b, err = fs.ReadFile(fsys, mf)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return c, nil
		}
		return c, fmt.Errorf("enginelog: %w", err)
	}
	n = 0
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		n++
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var m Miss
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return c, fmt.Errorf("enginelog: %s line %d: %w", mf, n, err)
		}
		if m.Mechanism == "" {
			return c, fmt.Errorf("enginelog: %s line %d: %s %s: a miss needs its mechanism", mf, n, m.File, m.Figure)
		}
		if _, dup := c.Misses[m.Key()]; dup {
			return c, fmt.Errorf("enginelog: %s line %d: %q is listed twice", mf, n, m.Key())
		}
		c.Misses[m.Key()] = m
	}
	return c, nil
}

// Files returns the corpus's log files, sorted.
func (c Corpus) Files() []string {
	out := make([]string, 0, len(c.Logs))
	for f := range c.Logs {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// validSourceURL reports whether u names where a log was taken from: a
// GitHub thread (https://github.com/owner/repo/issues/N, /pull/N, …) or
// a file of a GitHub repository at a full commit
// (https://github.com/owner/repo/blob/<40 hex digits>/path), which a
// branch name would not pin.
func validSourceURL(u string) bool {
	rest, ok := strings.CutPrefix(u, "https://github.com/")
	if !ok {
		return false
	}
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" {
		return false
	}
	if parts[2] != "blob" {
		return true
	}
	if len(parts) < 5 || len(parts[3]) != 40 || parts[4] == "" {
		return false
	}
	for _, r := range parts[3] {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}
