package optimizer

import "strings"

// Lookup returns the optimizer a name selects, case-insensitively, for a
// command line or a job file:
//
//   - the values of Hugging Face TrainingArguments.optim that this package
//     models (OptimizerNames in transformers' training_args.py):
//     "adamw_torch", "adamw_torch_fused", "adamw_bnb_8bit", "adamw_8bit",
//     "paged_adamw_8bit", "paged_adamw_32bit", "lion_8bit", "lion_32bit",
//     "paged_lion_8bit", "paged_lion_32bit", "adafactor" (transformers'
//     Adafactor, beta1=None), "sgd", "adagrad", "rmsprop";
//   - short names: "adam", "adamw", "adam8bit", "adamw8bit", "lion",
//     "lamb", "muon";
//   - the String of every optimizer of this package in its default
//     configuration and of its named variants ("torch.optim.AdamW",
//     "bnb.optim.PagedAdamW8bit", "torch.optim.Adafactor", ...).
//
// It returns false for a name it does not model, such as "adamw_hf"
// (transformers' own AdamW, whose step is a Python int) or
// "adamw_anyprecision".
func Lookup(name string) (Optimizer, bool) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "adamw_torch", "adamw":
		return AdamW{}, true
	case "adamw_torch_fused":
		return AdamW{Impl: Fused}, true
	case "adam":
		return Adam{}, true
	case "adamw_bnb_8bit", "adamw_8bit", "adamw8bit":
		return AdamW8bit{}, true
	case "adam8bit", "adam_8bit":
		return Adam8bit{}, true
	case "paged_adamw_8bit":
		return AdamW8bit{Paged: true}, true
	case "paged_adamw_32bit":
		return AdamW8bit{Paged: true, Bits32: true}, true
	case "lion_8bit":
		return Lion8bit{}, true
	case "lion_32bit":
		return Lion8bit{Bits32: true}, true
	case "paged_lion_8bit":
		return Lion8bit{Paged: true}, true
	case "paged_lion_32bit":
		return Lion8bit{Paged: true, Bits32: true}, true
	case "lion":
		return Lion{}, true
	case "adafactor":
		return Adafactor{}, true
	case "sgd":
		return SGD{}, true
	case "adagrad":
		return Adagrad{}, true
	case "rmsprop":
		return RMSprop{}, true
	case "lamb":
		return LAMB{}, true
	case "muon":
		return Muon{}, true
	}
	for _, o := range [...]Optimizer{
		SGD{}, Adam{}, AdamW{}, Adagrad{}, RMSprop{},
		Adam8bit{}, Adam8bit{Paged: true}, Adam8bit{Bits32: true}, Adam8bit{Paged: true, Bits32: true},
		AdamW8bit{}, AdamW8bit{Paged: true}, AdamW8bit{Bits32: true}, AdamW8bit{Paged: true, Bits32: true},
		Lion8bit{}, Lion8bit{Paged: true}, Lion8bit{Bits32: true}, Lion8bit{Paged: true, Bits32: true},
		Adafactor{}, Adafactor{Torch: true}, Lion{}, LAMB{}, LAMB{Fused: true}, Muon{},
	} {
		if strings.EqualFold(o.String(), strings.TrimSpace(name)) {
			return o, true
		}
	}
	return nil, false
}
