package request

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/optimizer"
)

// OptimizerFor reads --optimizer, --optimizer-impl, --momentum,
// --nesterov and --frozen for a training job: the optimizer (nil for
// none), what backward computes gradients for, and on error the flag at
// fault, without its dashes (gpumem serve names the request field
// after it).
func (f *Flags) OptimizerFor() (optimizer.Optimizer, budget.Gradients, string, error) {
	none := strings.EqualFold(strings.TrimSpace(f.Opt), "none")
	if f.Frozen || none {
		what := "--frozen: no parameter is trained"
		if !f.Frozen {
			what = "--optimizer none: no step runs"
		}
		switch {
		case f.Frozen && (f.LoRARank > 0 || f.QLoRA):
			return nil, 0, "frozen", fmt.Errorf("%w: --frozen: every parameter is frozen, LoRA adapters too (leave out --frozen or --lora-rank and --qlora)", ErrUsage)
		case f.InBwd:
			return nil, 0, "optimizer-in-backward", fmt.Errorf("%w: --optimizer-in-backward: %s, so there is nothing to step in backward", ErrUsage, what)
		case f.OptImpl != "":
			return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %s: %s, so there is no optimizer implementation to choose", ErrUsage, f.OptImpl, what)
		case f.Momentum != 0 || f.Nesterov:
			name := "momentum"
			if f.Momentum == 0 {
				name = "nesterov"
			}
			return nil, 0, name, fmt.Errorf("%w: --%s: %s, so there is no momentum", ErrUsage, name, what)
		}
		if f.Frozen {
			return nil, budget.InputGradients, "", nil
		}
		return nil, budget.NoStep, "", nil
	}
	o, ok := optimizer.Lookup(f.Opt)
	if !ok {
		return nil, 0, "optimizer", fmt.Errorf("%w: --optimizer %q is not modelled (try adamw, adamw8bit, adafactor, sgd, lion, none)", ErrUsage, f.Opt)
	}
	if math.IsNaN(f.Momentum) || math.IsInf(f.Momentum, 0) || f.Momentum < 0 {
		return nil, 0, "momentum", fmt.Errorf("%w: --momentum %v: want a finite factor of at least 0, such as 0.9", ErrUsage, f.Momentum)
	}
	if f.Nesterov && f.Momentum == 0 {
		return nil, 0, "nesterov", fmt.Errorf("%w: --nesterov: Nesterov momentum needs a momentum (give --momentum 0.9, say)", ErrUsage)
	}
	switch opt := o.(type) {
	case optimizer.SGD:
		opt.Momentum, opt.Nesterov = f.Momentum, f.Nesterov
		o = opt
	case optimizer.RMSprop:
		if f.Nesterov {
			return nil, 0, "nesterov", fmt.Errorf("%w: --nesterov: torch.optim.RMSprop has no Nesterov momentum (--optimizer sgd has)", ErrUsage)
		}
		opt.Momentum = f.Momentum
		o = opt
	default:
		if f.Momentum != 0 || f.Nesterov {
			name := "momentum"
			if f.Momentum == 0 {
				name = "nesterov"
			}
			return nil, 0, name, fmt.Errorf("%w: --%s: %s takes no momentum setting (--optimizer sgd or rmsprop do)", ErrUsage, name, o)
		}
	}
	if f.OptImpl == "" {
		return o, budget.ParamGradients, "", nil
	}
	var impl optimizer.Impl
	switch strings.ToLower(strings.TrimSpace(f.OptImpl)) {
	case "foreach":
		impl = optimizer.Foreach
	case "for-loop", "forloop", "single-tensor":
		impl = optimizer.ForLoop
	case "fused":
		impl = optimizer.Fused
	default:
		return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %q: want foreach, for-loop or fused", ErrUsage, f.OptImpl)
	}
	clash := func(had optimizer.Impl) error {
		if had != optimizer.Foreach && had != impl {
			return fmt.Errorf("%w: --optimizer-impl %s: --optimizer %s already names the %s implementation", ErrUsage, f.OptImpl, f.Opt, had)
		}
		return nil
	}
	var cerr error
	switch opt := o.(type) {
	case optimizer.SGD:
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	case optimizer.Adam:
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	case optimizer.AdamW:
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	case optimizer.Adagrad:
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	case optimizer.RMSprop:
		if impl == optimizer.Fused {
			return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl fused: torch.optim.RMSprop has no fused kernel (want foreach or for-loop)", ErrUsage)
		}
		cerr, opt.Impl = clash(opt.Impl), impl
		o = opt
	default:
		return nil, 0, "optimizer-impl", fmt.Errorf("%w: --optimizer-impl %s: %s has no choice of foreach, for-loop and fused (torch.optim's adam, adamw, sgd, adagrad and rmsprop have)", ErrUsage, f.OptImpl, o)
	}
	if cerr != nil {
		return nil, 0, "optimizer-impl", cerr
	}
	return o, budget.ParamGradients, "", nil
}
