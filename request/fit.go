package request

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/internal/checked"
)

// headroom is the memory a fit leaves unused, the same for estimate's
// verdict, the chart's largest value and plan: budget.Limits.HeadroomFor,
// DefaultHeadroom (5% of the free memory) unless --headroom says
// otherwise.
type Headroom struct {
	Bytes gpumem.Bytes
	Name  string // "5% headroom", "2.00 GiB headroom", "2.00 GiB + 5% headroom", "no headroom"
}

// HeadroomOf returns the headroom lim asks for out of free bytes (nil:
// the default).
func HeadroomOf(lim *budget.Limits, free gpumem.Bytes) Headroom {
	frac, fixed := budget.DefaultHeadroomFraction, gpumem.Bytes(0)
	if lim != nil {
		fixed = max(lim.Headroom, 0)
		switch f := lim.HeadroomFraction; {
		case f < 0:
			frac = 0
		case f > 0:
			frac = f
		}
	}
	hr := Headroom{Bytes: lim.HeadroomFor(free)}
	pct := strconv.FormatFloat(100*frac, 'g', 4, 64) + "%"
	switch {
	case fixed > 0 && frac > 0:
		hr.Name = fixed.String() + " + " + pct + " headroom"
	case fixed > 0:
		hr.Name = fixed.String() + " headroom"
	case frac > 0:
		hr.Name = pct + " headroom"
	default:
		hr.Name = "no headroom"
	}
	return hr
}

// DefaultHeadroom is budget.DefaultHeadroom(free), named.
func DefaultHeadroom(free gpumem.Bytes) Headroom { return HeadroomOf(nil, free) }

// String is the headroom's name with its bytes: "5% headroom (3.96 GiB)".
func (h Headroom) String() string {
	if h.Bytes == 0 || !strings.Contains(h.Name, "%") {
		return h.Name
	}
	return h.Name + " (" + h.Bytes.String() + ")"
}

// verdict is nil when the job fits (or no device was named), else an
// error wrapping gpumem.ErrDoesNotFit: the command exits 1.
func (e Result) Verdict() error {
	if e.SGLang != nil && e.SGLang.Refused != "" {
		return fmt.Errorf("%w: SGLang refuses to start on %s: %s", gpumem.ErrDoesNotFit, Clean(e.Device.Name), e.SGLang.Refused)
	}
	if e.VLLM != nil && e.VLLM.Refused != "" {
		return fmt.Errorf("%w: vLLM refuses max_model_len %d on %s: %s", gpumem.ErrDoesNotFit, e.VLLM.MaxModelLen, Clean(e.Device.Name), e.VLLM.Refused)
	}
	if e.Fits {
		return nil
	}
	return fmt.Errorf("%w on %s with %s: %s short", gpumem.ErrDoesNotFit, Clean(e.Device.Name), e.Headroom.Name, e.Shortfall.String())
}

// estimation is an estimate and its fit on a device: what gpumem estimate
// prints, and what gpumem serve's /v1/estimate returns.
type Result struct {
	Need      budget.Breakdown
	Device    gpumem.Device          // Capacity zero: no device named
	Headroom  Headroom               // left unused by a fit
	Fits      bool                   // true when no device was named
	Shortfall gpumem.Bytes           // headroom included
	LlamaCpp  *budget.LlamaCppReport // the llama.cpp buffers (Runtime LlamaCpp)
	VLLM      *budget.VLLMReport     // vLLM's KV cache sizing (Runtime VLLM)
	SGLang    *budget.SGLangReport   // SGLang's KV pool (Runtime SGLang)
}

// estimate estimates j and checks the fit on dev when it has a capacity,
// with the default headroom (budget.FitsWithHeadroom: the fit plan and
// budget.LargestBatch and LongestSeqLen answer for).
func Evaluate(j budget.Job, dev gpumem.Device) (Result, error) {
	return EvaluateWith(j, dev, DefaultHeadroom(dev.Free()))
}

// EvaluateWith is estimate with the headroom hr: the job fits when its
// device peak plus hr is within the free memory.
func EvaluateWith(j budget.Job, dev gpumem.Device, hr Headroom) (Result, error) {
	need, err := budget.Estimate(j)
	if err != nil {
		return Result{}, err
	}
	e := Result{Need: need, Device: dev, Headroom: hr, Fits: true}
	if j.Runtime == budget.LlamaCpp {
		r, err := budget.LlamaCppBuffers(j)
		if err != nil {
			return Result{}, err
		}
		e.LlamaCpp = &r
	}
	if j.Runtime == budget.VLLM {
		r, err := budget.VLLMBuffers(j)
		if err != nil {
			return Result{}, err
		}
		e.VLLM = &r
		// vLLM takes its share of the GPU whatever the job: it fits when
		// vLLM starts, short by the KV cache one request of max_model_len
		// needs beyond what is left.
		if r.Refused != "" {
			e.Fits = false
			e.Shortfall = gpumem.Bytes(max(checked.SatSub(int64(r.Needed), int64(r.KVMemory)), 1))
		}
		return e, nil
	}
	if j.Runtime == budget.SGLang {
		r, err := budget.SGLangBuffers(j)
		if err != nil {
			return Result{}, err
		}
		e.SGLang = &r
		// SGLang sizes its pool to the GPU: it fits when the pool holds a
		// token, short by one token's cell when not.
		if r.Refused != "" {
			e.Fits = false
			e.Shortfall = gpumem.Bytes(max(checked.SatSub(int64(r.CellBytes), int64(r.Rest)), 1))
		}
		return e, nil
	}
	if dev.Capacity > 0 {
		usable := checked.SatSub(int64(dev.Free()), int64(hr.Bytes))
		if short := gpumem.Bytes(checked.SatSub(int64(need.Required()), usable)); short > 0 {
			e.Shortfall, e.Fits = short, false
		}
	}
	return e, nil
}
