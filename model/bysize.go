package model

import (
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// GPT-by-size: a decoder given only by its parameter count ("a 100B GPT")
// or by layers × width, the questions papers and planners ask.
//
// The shape conventions are those of the GPT-3 paper (Brown et al. 2020,
// "Language Models are Few-Shot Learners", arXiv:2005.14165, Table 2.1):
// the GPT-2 architecture (pre-LayerNorm blocks with biases, GELU MLP of
// 4·d_model, learned absolute positions, the output head tied to the
// token embedding) with a context of 2048 tokens and the GPT-2 BPE
// vocabulary of 50257 tokens. A block holds 12·d² + 13·d parameters
// (c_attn d·3d+3d, attention c_proj d·d+d, c_fc d·4d+4d, MLP c_proj
// 4d·d+d, two LayerNorms 2·2d); the model adds the token table V·d, the
// position table 2048·d and the final LayerNorm 2d.

// GPTVocab and GPTContext are the GPT-3 family's vocabulary (GPT-2 BPE)
// and context length (Brown et al. 2020, §2.1: "n_ctx = 2048 tokens").
const (
	GPTVocab   = 50257
	GPTContext = 2048
)

// GPTTolerance is the largest relative difference [GPTBySize] accepts
// between the request and the count of the shape it builds. Widths are
// whole numbers of heads, so a shape at a given depth moves in steps of
// about 2·q/d of the count (q the width step: 64 below 2048 wide, 128
// above); the builder tries the table's depth and one layer either side,
// which keeps the miss under 3% for every size from 100M up.
const GPTTolerance = 0.03

// GPT3Shape is one row of the GPT-3 paper's Table 2.1.
type GPT3Shape struct {
	Name   string // the paper's model name ("GPT-3 175B")
	Params int64  // n_params as the paper rounds it
	Layers int64  // n_layers
	Hidden int64  // d_model
	Heads  int64  // n_heads
	// HeadDim is d_head. The 13B row prints d_model 5140, a typo for
	// its 40 heads × 128 = 5120, the width used here. The XL row's 24
	// heads of 128 do not make its d_model of 2048; the GPT-2
	// architecture's heads × d_head = d_model gives [GPTShape] 16 heads
	// of 128 there.
	HeadDim int64
}

// GPT3Table is Table 2.1 of Brown et al. 2020, the reference shapes of
// [GPTBySize].
var GPT3Table = []GPT3Shape{
	{"GPT-3 Small", 125e6, 12, 768, 12, 64},
	{"GPT-3 Medium", 350e6, 24, 1024, 16, 64},
	{"GPT-3 Large", 760e6, 24, 1536, 16, 96},
	{"GPT-3 XL", 1.3e9, 24, 2048, 24, 128},
	{"GPT-3 2.7B", 2.7e9, 32, 2560, 32, 80},
	{"GPT-3 6.7B", 6.7e9, 32, 4096, 32, 128},
	{"GPT-3 13B", 13e9, 40, 5120, 40, 128},
	{"GPT-3 175B", 175e9, 96, 12288, 96, 128},
}

// Bounds of a by-size request: from a tenth of GPT-3 Small's width
// budget up to 100 trillion parameters, the range where the count
// stays far from int64 and the width from maxDim.
const (
	gptMinParams = 50e6
	gptMaxParams = 100e12
)

// gptCount is the parameter count of the GPT-2 architecture with layers
// l, width d, vocab v and p positions, tied embeddings.
func gptCount(l, d, v, p int64) int64 {
	return l*(12*d*d+13*d) + v*d + p*d + 2*d
}

// GPTShape returns the GPT-2-architecture decoder of layers blocks of
// width hidden with the GPT-3 conventions (vocabulary 50257, 2048
// learned positions, FFN 4·hidden, tied embeddings). Heads follow
// Table 2.1 when (layers, hidden) is one of its rows, else heads of 128
// dimensions from 2048 wide and of 64 below. hidden must be a multiple
// of 64.
func GPTShape(layers, hidden int64) (Spec, error) {
	if layers <= 0 || layers > maxLayers {
		return Spec{}, gpumem.Errorf("layers", layers, gpumem.ErrInvalid, "must be in [1, %d]", maxLayers)
	}
	if hidden <= 0 || hidden%64 != 0 || hidden > 1<<20 {
		return Spec{}, gpumem.Errorf("hidden", hidden, gpumem.ErrInvalid, "must be a positive multiple of 64 up to 2^20 (whole heads of 64 or 128)")
	}
	headDim := int64(64)
	if hidden >= 2048 && hidden%128 == 0 {
		headDim = 128
	}
	for _, r := range GPT3Table {
		if r.Layers == layers && r.Hidden == hidden {
			headDim = r.HeadDim
		}
	}
	s := Spec{
		Name:           "gpt:" + strconv.FormatInt(layers, 10) + "x" + strconv.FormatInt(hidden, 10),
		Family:         "gpt2",
		DType:          gpumem.FP32,
		Layers:         layers,
		Hidden:         hidden,
		Intermediate:   4 * hidden,
		Heads:          hidden / headDim,
		KVHeads:        hidden / headDim,
		HeadDim:        headDim,
		Vocab:          GPTVocab,
		TiedEmbeddings: true,
		Norm:           LayerNorm,
		Activation:     "gelu_new",
		Positions:      GPTContext,
		MaxPositions:   GPTContext,
		Head:           HeadCausalLM,
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// gptDepth is the depth Table 2.1 gives a model of n parameters: the
// rows' n_layers interpolated linearly in log n_params between the two
// rows around n; 12 below GPT-3 Small; above 175B, the depth that keeps
// 175B's aspect d_model = 128·n_layers (12·d²·L = n with d = 128·L).
func gptDepth(n float64) float64 {
	t := GPT3Table
	if n <= float64(t[0].Params) {
		return float64(t[0].Layers)
	}
	last := t[len(t)-1]
	if n >= float64(last.Params) {
		return math.Max(float64(last.Layers), math.Cbrt(n/(12*128*128)))
	}
	for i := 1; i < len(t); i++ {
		if n <= float64(t[i].Params) {
			a, b := t[i-1], t[i]
			f := (math.Log(n) - math.Log(float64(a.Params))) / (math.Log(float64(b.Params)) - math.Log(float64(a.Params)))
			return float64(a.Layers) + f*float64(b.Layers-a.Layers)
		}
	}
	return float64(last.Layers)
}

// gptWidth is the width of whole heads nearest to the one that gives l
// layers n parameters (the positive root of gptCount = n).
func gptWidth(n float64, l int64) int64 {
	a := 12 * float64(l)
	b := 13*float64(l) + GPTVocab + GPTContext + 2
	d := (-b + math.Sqrt(b*b+4*a*n)) / (2 * a)
	q := 64.0
	if d >= 2048 {
		q = 128
	}
	return max(int64(math.Round(d/q)*q), 64)
}

// GPTBySize returns a GPT-2-architecture decoder of about params
// parameters shaped as the GPT-3 paper's Table 2.1 (see [GPTShape] for
// the conventions): its depth interpolated from the table (or 175B's
// aspect above it), its width the nearest whole number of heads that
// gives that count. When that misses by more than 1% it also tries one
// layer more and one less and keeps the closest. The exact count is
// [Spec.Params]; it is within [GPTTolerance] of params, else an error.
// params must be in [5e7, 1e14]. A request of exactly a row's n_params
// (1.3e9) gives back that row's shape.
func GPTBySize(params int64) (Spec, error) {
	if params < gptMinParams || params > gptMaxParams {
		return Spec{}, gpumem.Errorf("params", params, gpumem.ErrRange, "must be in [5e7, 1e14] parameters")
	}
	for _, r := range GPT3Table {
		if r.Params == params {
			return GPTShape(r.Layers, r.Hidden)
		}
	}
	n := float64(params)
	miss := func(l, d int64) float64 {
		return math.Abs(float64(gptCount(l, d, GPTVocab, GPTContext))-n) / n
	}
	l := max(int64(math.Round(gptDepth(n))), 1)
	d := gptWidth(n, l)
	if miss(l, d) > 0.01 {
		for _, l2 := range []int64{l - 1, l + 1} {
			if l2 < 1 {
				continue
			}
			if d2 := gptWidth(n, l2); miss(l2, d2) < miss(l, d) {
				l, d = l2, d2
			}
		}
	}
	if m := miss(l, d); m > GPTTolerance {
		return Spec{}, gpumem.Errorf("params", params, gpumem.ErrRange, "the nearest GPT shape (%d×%d) misses by %.1f%%", l, d, 100*m)
	}
	return GPTShape(l, d)
}

// ParseGPT reads a by-size model name: "gpt:100b", "gpt:1.3B",
// "gpt:350m", "gpt:1t" or "gpt:175000000000" (a parameter count, built
// by [GPTBySize]) or "gpt:96x12288" (layers × d_model, built by
// [GPTShape]). ok is false when name does not start with "gpt:"; err
// then is nil.
func ParseGPT(name string) (s Spec, ok bool, err error) {
	key := strings.ToLower(strings.TrimSpace(name))
	rest, found := strings.CutPrefix(key, "gpt:")
	if !found {
		return Spec{}, false, nil
	}
	if ls, hs, x := strings.Cut(rest, "x"); x {
		l, err1 := strconv.ParseInt(ls, 10, 64)
		h, err2 := strconv.ParseInt(hs, 10, 64)
		if err1 != nil || err2 != nil {
			return Spec{}, true, gpumem.Errorf("model", name, gpumem.ErrInvalid, "want gpt:LAYERSxHIDDEN (gpt:96x12288) or gpt:SIZE (gpt:175b)")
		}
		s, err := GPTShape(l, h)
		return s, true, err
	}
	mult := 1.0
	num := rest
	if len(rest) > 0 {
		switch rest[len(rest)-1] {
		case 'k':
			mult = 1e3
		case 'm':
			mult = 1e6
		case 'b':
			mult = 1e9
		case 't':
			mult = 1e12
		}
		if mult != 1 {
			num = rest[:len(rest)-1]
		}
	}
	v, perr := strconv.ParseFloat(num, 64)
	if perr != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || strings.ContainsAny(num, "eEpP_") && mult != 1 {
		return Spec{}, true, gpumem.Errorf("model", name, gpumem.ErrInvalid, "want gpt:SIZE (gpt:175b, gpt:1.3b, gpt:350m, gpt:1t) or gpt:LAYERSxHIDDEN (gpt:96x12288)")
	}
	p := v * mult
	if p > gptMaxParams || p < gptMinParams {
		return Spec{}, true, gpumem.Errorf("model", name, gpumem.ErrRange, "must be in [50m, 100t] parameters")
	}
	s, err = GPTBySize(int64(math.Round(p)))
	if err != nil {
		return Spec{}, true, err
	}
	s.Name = key
	return s, true, nil
}
