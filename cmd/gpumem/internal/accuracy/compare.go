package accuracy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// The three levels of memory a figure can measure
// (docs/architecture.md#three-levels-of-memory).
const (
	Allocated = "allocated" // torch.cuda.max_memory_allocated
	Reserved  = "reserved"  // torch.cuda.max_memory_reserved
	Device    = "device"    // the process's memory as NVML shows it
	// KVCache is not a level but a component: the size of the KV cache
	// an engine allocates (Breakdown.KVCache), which a published log
	// states exactly.
	KVCache = "kv_cache"
	// Weights is a component too: the memory an engine reports its
	// weights took once loaded (vLLM's "Model loading took X GiB", the
	// torch memory the loader allocated), against Breakdown.Weights: the
	// storage of quantized checkpoints (int8, AWQ, GPTQ, fp8) as the
	// engine holds them.
	Weights = "weights"
)

// Labels lists the levels in their order.
var Labels = [...]string{Allocated, Reserved, Device}

// The sources of a case.
const (
	Measured  = "measured"  // tools/calibrate on our GPUs
	Published = "published" // figures others measured and published
)

// Case is one measured figure and gpumem's prediction of it.
type Case struct {
	Source              string // Measured or Published
	ID                  string // the row's or figure's id
	Family              string // the model's family (config model_type)
	GPU                 string // the GPU it was measured on, as the source names it
	Label               string // Allocated, Reserved or Device
	Measured, Predicted gpumem.Bytes
	// Phase is the phase that sets the estimate's peak; MeasuredPhase,
	// for the CPU rows, the phase the measurement peaked in, in the same
	// names.
	Phase, MeasuredPhase string
	// Exempt, when set, says why the case is reported but not held to
	// the margin (published figures whose window holds memory the
	// estimate does not model).
	Exempt string
	// Features are the real-stack features the case's job exercises
	// (Features).
	Features []string
}

// Err returns the relative error (Predicted − Measured) / Measured:
// negative when gpumem under-estimates.
func (c Case) Err() float64 {
	return float64(c.Predicted-c.Measured) / float64(c.Measured)
}

// OOM is a measured job that ran out of memory, and what gpumem predicts
// for it at the device level.
type OOM struct {
	ID, Family, GPU string
	// Capacity is the GPU's total memory (torch's total_memory).
	Capacity gpumem.Bytes
	// Need is the estimate's device level; Fits whether Need fits
	// Capacity, which for an OOM row is a miss.
	Need gpumem.Bytes
	Fits bool
	// Phase is where the OOM struck.
	Phase string
}

// Failure is a row or figure whose job gpumem could not estimate.
type Failure struct {
	Source, ID string
	Err        error
}

// Set is the comparison of every row and figure.
type Set struct {
	Cases    []Case
	OOMs     []OOM
	Failures []Failure
	// Statuses counts the measured rows by status (ok, oom,
	// unsupported, error, timeout).
	Statuses map[string]int
	// GPUs lists the GPUs of the measured rows.
	GPUs []string
}

// Compare estimates every ok and oom row and every stated figure.
func Compare(rows []Row, stated []Stated) Set {
	set := Set{Statuses: map[string]int{}}
	for i := range rows {
		r := &rows[i]
		set.Statuses[r.Status]++
		if r.Status != "ok" && r.Status != "oom" {
			continue
		}
		if r.Env.GPU != "" && !slices.Contains(set.GPUs, r.Env.GPU) {
			set.GPUs = append(set.GPUs, r.Env.GPU)
		}
		j, err := r.Job.Budget()
		if err == nil {
			err = environment(&j, r.Env.GPU, r.Env.ComputeCapability, r.Env.CUDA, r.Env.ModuleLoading)
		}
		var b budget.Breakdown
		if err == nil {
			b, err = budget.Estimate(j)
		}
		if err != nil {
			set.Failures = append(set.Failures, Failure{Measured, r.ID, err})
			continue
		}
		family := j.Model.Spec().Family
		if r.Status == "oom" {
			dev := gpumem.Device{Name: r.Env.GPU, Capacity: gpumem.Bytes(r.Env.GPUTotalMemory)}
			_, fits := budget.Fits(b, dev)
			set.OOMs = append(set.OOMs, OOM{ID: r.ID, Family: family, GPU: r.Env.GPU, Capacity: dev.Capacity,
				Need: b.Device(), Fits: fits, Phase: r.OOMPhase})
			continue
		}
		if r.Peak == nil {
			set.Failures = append(set.Failures, Failure{Measured, r.ID, fmt.Errorf("an ok row without a peak")})
			continue
		}
		for _, l := range Labels {
			m := r.Peak.level(l)
			if m == nil || *m <= 0 {
				continue
			}
			set.Cases = append(set.Cases, Case{Source: Measured, ID: r.ID, Family: family, GPU: r.Env.GPU, Label: l,
				Measured: gpumem.Bytes(*m), Predicted: level(b, l), Phase: b.Phase.String(),
				Features: Features(&r.Job, l)})
		}
	}
	slices.Sort(set.GPUs)
	for i := range stated {
		s := &stated[i]
		if s.Job.Pipeline != nil {
			b, family, err := s.Job.estimatePipeline(s.Env)
			if err != nil {
				set.Failures = append(set.Failures, Failure{Published, s.ID, err})
				continue
			}
			set.Cases = append(set.Cases, Case{Source: Published, ID: s.ID, Family: family, GPU: s.GPU,
				Label: s.Label, Measured: gpumem.Bytes(s.Value), Predicted: level(b, s.Label), Phase: b.Phase.String(),
				Exempt: s.Unmodelled, Features: Features(&s.Job, s.Label)})
			continue
		}
		j, err := s.Job.Budget()
		if err == nil && s.Env != nil {
			err = environment(&j, s.Env.GPU, "", s.Env.CUDA, s.Env.ModuleLoading)
		}
		var b budget.Breakdown
		if err == nil {
			b, err = budget.Estimate(j)
		}
		predicted, phase := level(b, s.Label), b.Phase.String()
		if err == nil && s.Job.WithLoad {
			// The window holds the load before the run: its peak is the
			// larger of the two.
			var lb budget.Breakdown
			lj := s.Job.Load()
			var l budget.Job
			if l, err = lj.Budget(); err == nil && s.Env != nil {
				err = environment(&l, s.Env.GPU, "", s.Env.CUDA, s.Env.ModuleLoading)
			}
			if err == nil {
				lb, err = budget.Estimate(l)
			}
			if err != nil {
				err = fmt.Errorf("with_load: %w", err)
			} else if p := level(lb, s.Label); p > predicted {
				predicted, phase = p, lb.Phase.String()
			}
		}
		if err != nil {
			set.Failures = append(set.Failures, Failure{Published, s.ID, err})
			continue
		}
		set.Cases = append(set.Cases, Case{Source: Published, ID: s.ID, Family: j.Model.Spec().Family, GPU: s.GPU,
			Label: s.Label, Measured: gpumem.Bytes(s.Value), Predicted: predicted, Phase: phase,
			Exempt: s.Unmodelled, Features: Features(&s.Job, s.Label)})
	}
	return set
}

// environment sets j's device, CUDA version and module loading from a
// measurement's environment: the GPU by its catalog name (or, outside the
// catalog, its compute capability; neither: no device), the CUDA
// version, and
// CUDA_MODULE_LOADING (LAZY, EAGER; DEFAULT is eager before CUDA 12.2 and
// lazy from it, NVIDIA CUDA Programming Guide, "Lazy Loading"; unset is
// PyTorch's default). Empty fields leave the defaults.
func environment(j *budget.Job, gpu, cc, cuda, loading string) error {
	if d, ok := gpumem.LookupDevice(gpu); ok {
		j.Device = d
	} else if cc != "" {
		c, err := gpumem.ParseComputeCapability(cc)
		if err != nil {
			return fmt.Errorf("env.compute_capability: %w", err)
		}
		j.Device = gpumem.Device{Compute: c}
	}
	if cuda != "" {
		v, err := budget.ParseCUDAVersion(cuda)
		if err != nil {
			return fmt.Errorf("env.cuda: %w", err)
		}
		j.Overhead.CUDA = v
	}
	switch strings.ToUpper(loading) {
	case "":
	case "LAZY":
		j.Overhead.Loading = budget.LoadingLazy
	case "EAGER":
		j.Overhead.Loading = budget.LoadingEager
	case "DEFAULT":
		j.Overhead.Loading = budget.LoadingLazy
		if j.Overhead.CUDA.Less(budget.CUDAVersion{Major: 12, Minor: 2}) && !j.Overhead.CUDA.IsZero() {
			j.Overhead.Loading = budget.LoadingEager
		}
	default:
		return fmt.Errorf("env: module loading %q: want lazy, eager or default", loading)
	}
	return nil
}

func (p *Peak) level(l string) *int64 {
	switch l {
	case Allocated:
		return p.Allocated
	case Reserved:
		return p.Reserved
	}
	return p.Device
}

func level(b budget.Breakdown, l string) gpumem.Bytes {
	switch l {
	case KVCache:
		return b.KVCache
	case Weights:
		return b.Weights
	case Allocated:
		return b.Allocated()
	case Reserved:
		return b.Reserved()
	}
	return b.Device()
}

// Group is the error over a group of cases at one level.
type Group struct {
	Source, Key, Label string
	N                  int
	// Median and Worst are of the absolute relative error; MedianSigned
	// is the median of the signed error (negative: under-estimates).
	Median, Worst, MedianSigned float64
	// WorstID is the case with the worst error.
	WorstID string
	// Under is the fraction of cases gpumem under-estimates.
	Under float64
}

// Summarize groups cases by source, key and label, in that order, and
// computes each group's errors. key returns a case's group ("" puts every
// case in one group, which Summarize names "all").
func Summarize(cases []Case, key func(Case) string) []Group {
	keys := make([]string, len(cases))
	for i, c := range cases {
		if key != nil {
			keys[i] = key(c)
		}
	}
	return summarizeKeys(cases, keys)
}

// summarizeKeys is Summarize with the key of each case given: keys[i]
// is cases[i]'s ("" is "all").
func summarizeKeys(cases []Case, keys []string) []Group {
	type gk struct{ source, key, label string }
	groups := map[gk][]Case{}
	for i, c := range cases {
		k := gk{c.Source, "all", c.Label}
		if keys[i] != "" {
			k.key = keys[i]
		}
		groups[k] = append(groups[k], c)
	}
	out := make([]Group, 0, len(groups))
	for k, cs := range groups {
		out = append(out, summarize(k.source, k.key, k.label, cs))
	}
	slices.SortFunc(out, func(a, b Group) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Key, b.Key),
			cmp.Compare(labelRank(a.Label), labelRank(b.Label)))
	})
	return out
}

func labelRank(l string) int {
	switch l {
	case KVCache:
		return len(Labels)
	case Weights:
		return len(Labels) + 1
	}
	return slices.Index(Labels[:], l)
}

func summarize(source, key, label string, cs []Case) Group {
	g := Group{Source: source, Key: key, Label: label, N: len(cs)}
	abs := make([]float64, len(cs))
	signed := make([]float64, len(cs))
	under := 0
	for i, c := range cs {
		e := c.Err()
		signed[i], abs[i] = e, math.Abs(e)
		if abs[i] > g.Worst || g.WorstID == "" {
			g.Worst, g.WorstID = abs[i], c.ID
		}
		if e < 0 {
			under++
		}
	}
	g.Median, g.MedianSigned = median(abs), median(signed)
	g.Under = float64(under) / float64(len(cs))
	return g
}

// median returns the median of xs (the mean of the middle two for an
// even count); xs is sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// The accuracy gate: no allocated-level (or KV cache, or weights)
// estimate more than MaxUnder below its measurement, and no level's median absolute error
// above MaxMedian.
const (
	MaxUnder  = 0.05
	MaxMedian = 0.10
)

// Check returns what the set violates of the gate, one sentence each:
// a row or figure that could not be estimated, an allocated (or KV cache, or weights)
// estimate more than MaxUnder below its measurement (exempt cases aside), a measured
// level whose median absolute error exceeds MaxMedian, and an OOM row
// predicted to fit. Published figures are held to the margin but not to
// the median: they come from other people's setups (a V100 whose CUDA
// context is three times today's, windows that include validation), so
// their median describes those setups as much as the estimator.
func Check(set Set) []string {
	var out []string
	for _, f := range set.Failures {
		out = append(out, fmt.Sprintf("%s %s: not estimated: %v", f.Source, f.ID, f.Err))
	}
	var held []Case
	for _, c := range set.Cases {
		if c.Exempt != "" {
			continue
		}
		if c.Source == Measured {
			held = append(held, c)
		}
		if (c.Label == Allocated || c.Label == KVCache || c.Label == Weights) && c.Err() < -MaxUnder {
			out = append(out, fmt.Sprintf("%s %s: %s estimate %s is %.1f%% below the measured %s (the margin is %.0f%%)",
				c.Source, c.ID, c.Label, c.Predicted.String(), -100*c.Err(), c.Measured.String(), 100*MaxUnder))
		}
	}
	for _, g := range Summarize(held, nil) {
		if g.Median > MaxMedian {
			out = append(out, fmt.Sprintf("%s %s: median absolute error %.1f%% over %d cases exceeds %.0f%%",
				g.Source, g.Label, 100*g.Median, g.N, 100*MaxMedian))
		}
	}
	for _, o := range set.OOMs {
		if o.Fits {
			out = append(out, fmt.Sprintf("measured %s: ran out of memory on %s (%s) in %s, but the estimate %s fits",
				o.ID, o.GPU, o.Capacity.String(), o.Phase, o.Need.String()))
		}
	}
	return out
}
