package model

import "strings"

// Projection is a set of a transformer block's linear projections, as
// LoRA adapts them (bit per projection).
type Projection uint8

// The projections of a Llama-style block (q_proj ... down_proj).
const (
	ProjQ Projection = 1 << iota
	ProjK
	ProjV
	ProjO
	ProjGate
	ProjUp
	ProjDown
)

// projectionNames are the module names of a Llama-style block's
// projections (LlamaAttention, LlamaMLP and the families that share
// their layout), whose LoRA adapters [FrozenBase] reads.
var projectionNames = [...]struct {
	name string
	p    Projection
}{
	{"q_proj", ProjQ}, {"k_proj", ProjK}, {"v_proj", ProjV}, {"o_proj", ProjO},
	{"gate_proj", ProjGate}, {"up_proj", ProjUp}, {"down_proj", ProjDown},
}

// ProjectionOf returns the projection a LoRA tensor name
// ("...self_attn.q_proj.lora_A.weight") adapts, and false for a name
// that is no adapter of a Llama-style projection.
func ProjectionOf(name string) (Projection, bool) {
	for _, suf := range [...]string{".lora_A.weight", ".lora_B.weight"} {
		if mod, ok := strings.CutSuffix(name, suf); ok {
			i := strings.LastIndexByte(mod, '.')
			mod = mod[i+1:]
			for _, pn := range projectionNames {
				if pn.name == mod {
					return pn.p, true
				}
			}
			return 0, false
		}
	}
	return 0, false
}

// FrozenBase describes training LoRA adapters on a base whose every
// weight is frozen (requires_grad_(False): embeddings, norms, linears,
// head), as PEFT's get_peft_model sets it up. The zero value is a base
// that trains.
//
// A frozen weight changes what autograd saves. Its derivative formulas
// (tools/autograd/derivatives.yaml, torch v2.6.0) save each input only
// for the gradient that needs it: mm saves self for mat2's gradient and
// mat2 for self's, mul saves other for self's and self for other's, and
// the generated code guards each with should_compute_output
// (tools/autograd/gen_variable_type.py, guard_for). So:
//
//   - a frozen Linear saves nothing for its weight: its input is saved
//     only when an adapter reads it;
//   - PEFT's Linear.forward (peft/tuners/lora/layer.py, v0.17.1:
//     result = self.base_layer(x) + lora_B(lora_A(dropout(x))) * scaling,
//     dropout an nn.Identity when lora_dropout is 0) saves x for lora_A's
//     weight (the same storage the norm made) and lora_A's output
//     (batch·seq·Rank) for lora_B's; the scalar multiply and the add save
//     nothing;
//   - LlamaRMSNorm's self.weight * hidden_states.to(input_dtype)
//     (modeling_llama.py, transformers v4.57.1) saves the weight only, not
//     the normalized tensor (GemmaRMSNorm's (1 + weight.float()) product
//     likewise); nn.LayerNorm's native_layer_norm saves its input and
//     statistics whatever requires grad;
//   - o_proj's input (the attention output transposed to contiguous) is
//     saved only when it is adapted (a fused SDPA kernel still saves its
//     own output);
//   - the MLP's down projection does not save its input, the activation
//     product (a ReLU still saves its result for itself);
//   - the first block's input, the frozen embedding's output, needs no
//     gradient: its first norm records nothing, and with one of q and k
//     adapted the scores' matmul saves only the other factor (the one
//     whose gradient is needed is the adapted one's);
//   - the final norm saves no normalized copy, and the frozen head no
//     input.
//
// Measured on the CPU (testdata/measured/cpu, lora8 rows: q_proj and
// v_proj adapted, fp32).
type FrozenBase struct {
	// Rank is the adapters' rank; zero: the base trains.
	Rank int64
	// Adapted is the set of a block's projections that carry an
	// adapter.
	Adapted Projection
	// KeptInputs says that the base's linears keep their inputs all the
	// same: bitsandbytes before 0.43.2, whose MatMul4Bit.forward sets
	// ctx.tensors = (A, B) whenever any(ctx.needs_input_grad[:2])
	// (bitsandbytes/autograd/_functions.py at 0.42.0; Finetune.KeepsInputs),
	// and A, the input, needs a gradient past the first adapter. The
	// norms' normalized copies are still not saved, and the adapters'
	// own tensors still are.
	KeptInputs bool
	// Dropout says the adapters run a dropout before lora_A (PEFT's
	// lora_dropout > 0: self.lora_dropout[active_adapter] is then an
	// nn.Dropout per adapted module, peft/tuners/lora/layer.py v0.17.1;
	// torchtune's LoRALinear likewise): each saves its mask (1 byte per
	// element on CUDA, the noise in the input's dtype on the CPU) and
	// lora_A saves the dropped copy of its input. In the first block,
	// whose input needs no gradient, no mask is recorded: counted all
	// the same, an upper bound of one mask per adapted q, k or v.
	Dropout bool
	// Input says that no adapter trains either and the model's input
	// requires grad instead (a frozen model differentiated to its
	// input: see [FrozenInput]); Rank and Adapted are then zero.
	Input bool
}

// on says the block runs on a frozen base.
func (f FrozenBase) on() bool { return f.Rank > 0 || f.Input }

// has says whether any projection of p is adapted.
func (f FrozenBase) has(p Projection) bool { return f.Adapted&p != 0 }

// normCopy is the normalized copy a norm's weight multiply saves for the
// weight's gradient, which a frozen weight does not need.
func (c *actCalc) normCopy(k actNorm, T, w, e int64) int64 {
	switch k {
	case actRMS:
		return c.m(e, T, w)
	case actGemmaRMS:
		return c.m(4, T, w)
	case actT5RMS:
		return c.m(e, T, w) // T5LayerNorm's weight * hidden_states
	}
	return 0
}

// frozenSavings returns the bytes a pre-norm block saves less on a
// frozen base than [actCalc.block] counts for a trained one (see
// [FrozenBase]), and the adapters' own saved tensors (lora_A's outputs)
// to add. outSaved says the attention core's output is a tensor of its
// own saved only by o_proj (eager, the CPU's math kernel).
func (c *actCalc) frozenSavings(bl *actBlock, sh actShape, outSaved bool) (less, more int64) {
	f := sh.fz
	T := c.m(sh.b, sh.s)
	eTh := c.m(sh.e, T, bl.h)
	less = c.m(2, c.normCopy(bl.norm, T, bl.h, sh.e))
	more = c.adapterSaves(bl, sh)
	if f.KeptInputs {
		// Every 4-bit linear keeps its input (FrozenBase.KeptInputs).
		return less, more
	}
	if !f.has(ProjQ | ProjK | ProjV) {
		less = c.a(less, eTh)
	}
	if !f.has(ProjGate | ProjUp) {
		less = c.a(less, eTh)
	}
	if outSaved && !f.has(ProjO) {
		less = c.a(less, c.m(sh.e, T, bl.H, bl.dv))
	}
	if !f.has(ProjDown) && bl.act != actReLU && bl.moe == nil {
		less = c.a(less, c.m(sh.e, T, bl.I))
	}
	return less, more
}

// adapterSaves returns what a block's adapters save on a frozen base:
// each lora_A's output (T·Rank) for lora_B's gradient and, with
// FrozenBase.Dropout, each adapter's dropout mask and dropped copy of its
// input, which lora_A saves instead of the input the norm made.
func (c *actCalc) adapterSaves(bl *actBlock, sh actShape) int64 {
	f := sh.fz
	T := c.m(sh.b, sh.s)
	mask := int64(1) // CUDA's native_dropout: a 1-byte bool mask
	if sh.cpu {
		mask = sh.e // the CPU's noise in the input's dtype (see [CPU])
	}
	var more int64
	for p := ProjQ; p <= ProjDown; p <<= 1 {
		if !f.has(p) {
			continue
		}
		more = c.a(more, c.m(sh.e, T, f.Rank))
		if f.Dropout {
			in := bl.h
			switch p {
			case ProjO:
				in = c.m(bl.H, bl.dv)
			case ProjDown:
				in = bl.I
			}
			more = c.a(more, c.m(c.a(mask, sh.e), T, in))
		}
	}
	return more
}

// frozenFirst returns what the first block saves less than the others on
// a frozen base: its input needs no gradient, so its first norm saves
// nothing of its own (its output, read by an adapter, is counted with the
// block), and with exactly one of q and k adapted the scores' matmul
// does not save the factor whose gradient nobody needs (eager: the query
// or key heads; the CPU's math kernel: the scaled fp32 copy).
func (c *actCalc) frozenFirst(bl *actBlock, sh actShape, math bool) int64 {
	T := c.m(sh.b, sh.s)
	less := c.normSaved(bl.norm, T, bl.h, sh.e) - c.normCopy(bl.norm, T, bl.h, sh.e)
	if bl.norm != actRMS && bl.norm != actGemmaRMS {
		less = c.normSaved(bl.norm, T, bl.h, sh.e)
	}
	q, k := sh.fz.has(ProjQ), sh.fz.has(ProjK)
	if q != k && (sh.k == Eager || math) {
		a := sh.e
		if math {
			a = max(sh.e, 4)
		}
		less = c.a(less, c.m(a, sh.b, bl.H, sh.s, bl.d))
	}
	return less
}

// math says the CPU's SDPA math kernel runs the block's attention core
// (see [CPU]).
func (sh actShape) math(bl *actBlock) bool {
	return sh.k == SDPA && sh.cpu && ((sh.drop && bl.attnDrop) || (sh.gqa && bl.KV < bl.H))
}
