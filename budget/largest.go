package budget

import (
	"errors"
	"math"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// LargestOptions says how [LargestModel] decides that a model fits.
type LargestOptions struct {
	// Limits bounds what the plan may change for each size (see
	// [Allocate]; nil: its defaults).
	Limits *Limits
	// Fixed keeps the template's Parallel layout (its GPUs must not
	// exceed the fleet's) instead of letting [AllocateFleet] choose one
	// for each size.
	Fixed bool
	// ModelStatesOnly counts the model states alone, as the ZeRO paper's
	// memory analysis does ([ZeROModelStates]): a size fits when its
	// model states per GPU under the fixed layout are at most Fleet.Free,
	// with no activations, buffers, context or headroom. It needs Fixed,
	// a mixed precision (FP16Master, BF16Master) and Adam or AdamW.
	// The plan returned then holds only the template job with the model
	// and Need.Weights set to the model-state bytes.
	ModelStatesOnly bool
}

// ZeROKAdam is K, the optimizer-state bytes per parameter of mixed
// precision Adam in the ZeRO paper (Rajbhandari et al. 2020, "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models",
// arXiv:1910.02054, §3.1: an fp32 copy of the parameters, momentum and
// variance, 4+4+4 bytes).
const ZeROKAdam = 12

// ZeROModelStates returns the model states per GPU of a model of params
// parameters trained with mixed-precision Adam under the layout p, by
// the ZeRO paper's §5 analysis (Figure 1): fp16 parameters 2Ψ, fp16
// gradients 2Ψ and optimizer states KΨ (K = 12), where Ψ is the
// parameters of one model-parallel rank (params / TensorParallel /
// PipelineParallel) and N_d = DataParallel: stage 0 (2+2+K)Ψ, stage 1
// 4Ψ + KΨ/N_d, stage 2 2Ψ + (2+K)Ψ/N_d, stage 3 (2+2+K)Ψ/N_d. The
// quotients round down to whole bytes.
func ZeROModelStates(params int64, p Parallel) (gpumem.Bytes, error) {
	if params <= 0 {
		return 0, gpumem.Errorf("params", params, gpumem.ErrInvalid, "must be positive")
	}
	if err := p.validate(); err != nil {
		return 0, err
	}
	psi := float64(params) / float64(max(p.TensorParallel, 1)*max(p.PipelineParallel, 1))
	nd := float64(max(p.DataParallel, 1))
	if p.ShardGroup > 0 && p.Stage > 0 {
		nd = float64(p.ShardGroup)
	}
	var b float64
	switch p.Stage {
	case 0:
		b = (2 + 2 + ZeROKAdam) * psi
	case 1:
		b = 4*psi + ZeROKAdam*psi/nd
	case 2:
		b = 2*psi + (2+ZeROKAdam)*psi/nd
	default:
		b = (2 + 2 + ZeROKAdam) * psi / nd
	}
	if b >= math.MaxInt64 {
		return 0, gpumem.Errorf("params", params, gpumem.ErrRange, "model states overflow int64")
	}
	return gpumem.Bytes(math.Floor(b)), nil
}

// Bounds of LargestModel's search: model.GPTBySize's range.
const (
	largestMin = 50e6
	largestMax = 100e12
)

// LargestModel returns the largest decoder of the GPT-by-size family
// (model.GPTBySize: the GPT-3 paper's Table 2.1 shapes) that trains or
// runs as template says on the fleet f, and the plan that runs it. The
// template's Model is ignored; each size is trained in full
// (model.Finetune{Model: spec}) with the template's Mode, Precision,
// Optimizer, Batch, SeqLen and the rest. The layout is chosen for each
// size by [AllocateFleet], or kept from template.Parallel with
// opt.Fixed ([Allocate] on f.Free).
//
// The search bisects the requested parameter count in log space between
// 5·10^7 and 10^14 until the bounds are within 0.5% of each other; it
// assumes that a model that fits leaves room for every smaller one. The
// answer is the shape built for the lower bound: its exact count is
// Spec.Params. When even the smallest size does not fit, the error is
// that size's (an *InsufficientMemoryError unwrapping to
// gpumem.ErrDoesNotFit); when the largest fits, LargestModel returns it.
func LargestModel(f Fleet, template Job, opt LargestOptions) (model.Spec, Plan, error) {
	if err := f.validate(); err != nil {
		return model.Spec{}, Plan{}, err
	}
	if opt.ModelStatesOnly && !opt.Fixed {
		return model.Spec{}, Plan{}, gpumem.Errorf("LargestOptions.ModelStatesOnly", true, gpumem.ErrInvalid, "needs Fixed: the model states depend on the layout")
	}
	if opt.ModelStatesOnly {
		if template.Precision != FP16Master && template.Precision != BF16Master {
			return model.Spec{}, Plan{}, gpumem.Errorf("Job.Precision", template.Precision, gpumem.ErrInvalid, "the ZeRO paper's model states are those of mixed precision with an fp32 master copy (fp16-master, bf16-master: FP16Master, BF16Master)")
		}
		switch template.Optimizer.(type) {
		case optimizer.Adam, optimizer.AdamW:
		default:
			return model.Spec{}, Plan{}, gpumem.Errorf("Job.Optimizer", template.Optimizer, gpumem.ErrInvalid, "the ZeRO paper's model states are those of Adam (K = 12)")
		}
	}
	if opt.Fixed {
		if err := template.Parallel.validate(); err != nil {
			return model.Spec{}, Plan{}, err
		}
		if g := template.Parallel.GPUs(); g > f.GPUs() {
			return model.Spec{}, Plan{}, gpumem.Errorf("Job.Parallel", g, gpumem.ErrInvalid, "the layout needs %d GPUs, the fleet has %d", g, f.GPUs())
		}
	}
	try := func(params int64) (model.Spec, Plan, error) {
		spec, err := model.GPTBySize(params)
		if err != nil {
			return spec, Plan{}, err
		}
		if opt.ModelStatesOnly {
			b, err := ZeROModelStates(spec.Params(), template.Parallel)
			if err != nil {
				return spec, Plan{}, err
			}
			p := Plan{Job: template, Free: f.Free, Need: Breakdown{Weights: b}}
			if b > f.Free {
				return spec, p, &InsufficientMemoryError{Need: p.Need, Free: f.Free, Shortfall: b - f.Free,
					Dominant: Component{Name: "model states", Bytes: b}}
			}
			p.Headroom = f.Free - b
			return spec, p, nil
		}
		m, err := ModelOf(spec)
		if err != nil {
			return spec, Plan{}, err
		}
		j := template
		j.Model = m
		if opt.Fixed {
			p, err := Allocate(f.Free, j, opt.Limits)
			return spec, p, err
		}
		p, err := AllocateFleet(f, j, opt.Limits)
		return spec, p, err
	}
	fits := func(err error) (bool, error) {
		if err == nil {
			return true, nil
		}
		if errors.Is(err, gpumem.ErrDoesNotFit) {
			return false, nil
		}
		return false, err
	}
	lo, hi := int64(largestMin), int64(largestMax)
	bestSpec, bestPlan, err := try(lo)
	if ok, err2 := fits(err); !ok {
		if err2 != nil {
			return model.Spec{}, Plan{}, err2
		}
		return model.Spec{}, Plan{}, err
	}
	if s, p, err := try(hi); err == nil {
		return s, p, nil
	} else if _, err2 := fits(err); err2 != nil {
		return model.Spec{}, Plan{}, err2
	}
	for float64(hi) > float64(lo)*1.005 {
		mid := int64(math.Sqrt(float64(lo) * float64(hi)))
		s, p, err := try(mid)
		ok, err2 := fits(err)
		if err2 != nil {
			return model.Spec{}, Plan{}, err2
		}
		if ok {
			lo, bestSpec, bestPlan = mid, s, p
		} else {
			hi = mid
		}
	}
	return bestSpec, bestPlan, nil
}
