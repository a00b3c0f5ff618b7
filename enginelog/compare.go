package enginelog

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// Row is one logged figure compared with gpumem's runtime model of it.
type Row struct {
	File   string // the log
	Figure string // "KV buffer [GPU]", "vLLM GPU blocks", …; Kind and the device in brackets
	// Kind is the figure without its device ("KV buffer"): the rows'
	// statistics are by kind.
	Kind string
	// Shape says where the model's shape came from: "catalog <key>", "log
	// hparams" (the hyperparameters llama.cpp printed at load) or "thread
	// hparams" (printed in the same thread, quoted in the index).
	Shape     string
	Logged    float64 // bytes, or a count (tokens, blocks, concurrency)
	Estimated float64
	// Tol is the relative error the figure is held to; Slack adds the
	// rounding of the log's printed value (half its last place over it).
	Tol, Slack float64
}

// Err is the relative error of the estimate: (estimated − logged) / logged.
func (r Row) Err() float64 { return (r.Estimated - r.Logged) / r.Logged }

// OK is true when the estimate is within the row's tolerance.
func (r Row) OK() bool { return math.Abs(r.Err()) <= r.Tol+r.Slack }

// Key names the figure, as Miss.Key.
func (r Row) Key() string { return r.File + " | " + r.Figure }

// Result is a corpus compared: the rows, and the logs or figures skipped,
// counted by reason.
type Result struct {
	Rows  []Row
	Skips map[string]int
	Logs  int // the logs read
}

// Compare compares gpumem's runtime models with every figure of the corpus
// whose job can be stated to budget: llama.cpp's (and Ollama's) layer
// slots and repeating layers offloaded at the job's -ngl (exact), KV cache
// (exact arithmetic, 2%), weights (2%) and compute buffer (5%) with
// budget.LlamaCppBuffers; vLLM's weights (2%), the KV tokens its logged KV
// memory holds (2%), its KV space, activation peak, blocks and
// concurrency (5%) with budget.VLLMBuffers; SGLang's K and V per token of
// its pool (2%) with budget.SGLangBuffers. The model's shape is the
// catalog entry the index names, or else the hyperparameters llama.cpp
// printed in the log itself (Log.Hparams, when complete), or else those
// the index quotes from the same thread (Entry.Hparams). Logs with none,
// and figures budget does not model, are skipped with the reason.
func Compare(c Corpus) (Result, error) {
	res := Result{Skips: map[string]int{}, Logs: len(c.Entries)}
	for _, e := range c.Entries {
		l := c.Logs[e.File]
		if l == nil {
			return res, fmt.Errorf("enginelog: %s: not read", e.File)
		}
		s, shape, skip, err := shapeOf(e, l)
		if err != nil {
			return res, err
		}
		if skip != "" {
			res.Skips[skip]++
			continue
		}
		m, err := budget.ModelOf(s)
		if err != nil {
			return res, fmt.Errorf("enginelog: %s: %w", e.File, err)
		}
		var rs []Row
		switch e.Engine {
		case "llama.cpp", "ollama":
			rs, err = compareLlamaCpp(e, l, m, res.Skips)
		case "vllm":
			rs, err = compareVLLM(e, l, m, res.Skips)
		case "sglang":
			rs, err = compareSGLang(e, l, m, res.Skips)
		default:
			res.Skips["no "+e.Engine+" runtime in budget"]++
		}
		if err != nil {
			return res, fmt.Errorf("enginelog: %s: %w", e.File, err)
		}
		for i := range rs {
			rs[i].Shape = shape
		}
		res.Rows = append(res.Rows, rs...)
	}
	return res, nil
}

// shapeOf returns the model a log's figures are compared on, and where it
// came from: the catalog entry the index names; else the hyperparameters
// llama.cpp printed in the log; else those the index quotes from the same
// thread (Entry.Hparams). skip is the reason when there is none.
func shapeOf(e Entry, l *Log) (s model.Spec, shape, skip string, err error) {
	if e.Catalog != nil {
		s, ok := model.Lookup(*e.Catalog)
		if !ok {
			return s, "", "", fmt.Errorf("enginelog: %s: catalog %q is not a gpumem catalog model", e.File, *e.Catalog)
		}
		return s, "catalog " + *e.Catalog, "", nil
	}
	h, shape := l.Hparams, "log hparams"
	if !h.Complete() && e.Hparams != nil {
		if h, err = ParseHparams(*e.Hparams); err != nil {
			return s, "", "", fmt.Errorf("enginelog: %s: hparams: %w", e.File, err)
		}
		if !h.Complete() {
			return s, "", "", fmt.Errorf("enginelog: %s: the hparams quoted in the index are incomplete (want n_layer, n_embd, n_head, n_head_kv, the head sizes, n_ff and n_vocab)", e.File)
		}
		shape = "thread hparams"
	}
	switch {
	case !h.Complete() && h.NLayer > 0:
		return s, "", "model not in the catalog, hparams incomplete in the log", nil
	case !h.Complete():
		return s, "", "model not in the catalog, no hparams in the log or its thread", nil
	case e.Engine != "llama.cpp" && e.Engine != "ollama":
		return s, "", "llama.cpp hparams in a " + e.Engine + " log", nil
	}
	if s, err = h.Spec(); err != nil {
		return s, "", "hparams of a model that is not a llama-style decoder", nil
	}
	return s, shape, "", nil
}

// Unlisted returns the rows outside their tolerance that misses does not
// list, and the listed misses that are now within tolerance or no longer
// compared: what a change must fix, explain or remove (the ratchet).
func (r Result) Unlisted(misses map[string]Miss) (newMisses []Row, stale []string) {
	seen := map[string]bool{}
	for _, row := range r.Rows {
		seen[row.Key()] = true
		_, listed := misses[row.Key()]
		switch {
		case !row.OK() && !listed:
			newMisses = append(newMisses, row)
		case row.OK() && listed:
			stale = append(stale, row.Key()+" is within tolerance")
		}
	}
	for k := range misses {
		if !seen[k] {
			stale = append(stale, k+" is no longer compared")
		}
	}
	sort.Strings(stale)
	return newMisses, stale
}

// KindStat summarizes the rows of one figure kind.
type KindStat struct {
	Kind      string
	N, Within int
	Median    float64 // median absolute relative error
	Bias      float64 // median signed relative error (negative: under-estimates)
	Under     float64 // the share of rows under-estimated
	Worst     float64 // the signed error of the largest absolute one
	WorstFile string
}

// Stats returns the rows' statistics by kind, sorted by kind.
func Stats(rows []Row) []KindStat {
	by := map[string][]Row{}
	for _, r := range rows {
		by[r.Kind] = append(by[r.Kind], r)
	}
	out := make([]KindStat, 0, len(by))
	for k, rs := range by {
		errs := make([]float64, len(rs))
		signed := make([]float64, len(rs))
		st := KindStat{Kind: k, N: len(rs)}
		worst := rs[0]
		under := 0
		for i, r := range rs {
			errs[i] = math.Abs(r.Err())
			signed[i] = r.Err()
			if r.OK() {
				st.Within++
			}
			if r.Err() < 0 {
				under++
			}
			if math.Abs(r.Err()) > math.Abs(worst.Err()) {
				worst = r
			}
		}
		sort.Float64s(errs)
		sort.Float64s(signed)
		st.Median, st.Bias = median(errs), median(signed)
		st.Under = float64(under) / float64(len(rs))
		st.Worst, st.WorstFile = worst.Err(), worst.File
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func row(file, figure string, logged, estimated, tol, slack float64) Row {
	kind := figure
	if i := strings.Index(kind, " ["); i >= 0 {
		kind = kind[:i]
	}
	return Row{File: file, Figure: figure, Kind: kind, Logged: logged, Estimated: estimated, Tol: tol, Slack: slack}
}
