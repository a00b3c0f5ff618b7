package model

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// # What torch.compile changes in a training step
//
// torch.compile's training path (PyTorch v2.6.0: torch/_inductor/
// compile_fx.py, whose partition_fn calls min_cut_rematerialization_
// partition) has AOTAutograd trace the forward and the backward as one
// joint graph and lets the min-cut partitioner
// (torch/_functorch/partitioners.py) choose which forward values the
// backward graph receives. With torch/_functorch/config.py's defaults
// (ban_recompute_not_in_allowlist, ban_recompute_materialized_backward,
// ban_recompute_reductions all True, activation_memory_budget 1.0):
//
//   - an op outside get_default_op_list's recomputable list (mm, addmm,
//     bmm, the SDPA kernels: compute_intensive_ops, and any op not listed)
//     is banned from recomputation (should_ban_recomputation,
//     ban_if_not_in_allowlist): its output is saved when the backward
//     needs it;
//   - a node whose backward user is not fusible with it (an mm reading it
//     for a weight gradient: is_materialized_backwards) is banned too: the
//     input of every projection is saved as the forward made it;
//   - a reduction whose output is 4× smaller than its input
//     (ban_if_reduction: RMSNorm's mean of x², a log-softmax's max and
//     log-sum-exp) is saved rather than recomputed;
//   - every other value the backward needs (casts, pow, rsqrt, SiLU, the
//     normalized rows, the fp32 upcast of the logits) is recomputed from
//     the cheapest saved cut: get_node_weight counts bytes, doubled for a
//     value that is never materialized.
//
// Inductor then fuses the pointwise chains, so their intermediates (the
// RMSNorm's fp32 upcast, the rotary products, the loss's fp32 logits and
// log-probabilities) are never allocated in forward or backward.
//
// For the blocks the activation model covers under compilation
// (Llama-style: RMSNorm, q/k/v/o projections, rotary embedding, SDPA or
// flash attention, SwiGLU MLP; LoRA adapters on the projections), that
// gives, per block, against the eager saved set ([Spec.Activations]):
//
//   - each RMSNorm saves its input in its own dtype and the fp32 rsqrt
//     (4·T) instead of the fp32 copy of the input and the normalized rows
//     the weight multiply saves (4 + e bytes per element in 16 bits, where
//     the copy is new, 4 in fp32, where x.to(float32) is x itself): 4·T·h
//     less per norm. Its output, read by the projections' mm in backward,
//     is saved as in eager;
//   - the attention core saves what the kernel needs, q, k, v, its output
//     and log-sum-exp, as in eager (SDPA is banned; its inputs and output
//     are materialized in backward);
//   - the SwiGLU MLP saves gate and up (mm outputs, banned) and their
//     product (the down projection's input, materialized in backward), but
//     not SiLU(gate), which its backward recomputes from gate: 3·e·T·I
//     instead of 4·e·T·I;
//   - LoRA's adapters: the A projection's output (read by B's mm) is saved
//     as in eager.
//
// And for the loss compiled with them (transformers' ForCausalLMLoss
// inside a compiled model, torchtune's compile_loss, which compiles
// CEWithChunkedOutputLoss.compute_cross_entropy, torchtune/training/
// _compile.py): the backward needs log_softmax(logits.float()), which is
// recomputed from the logits (an mm output, saved) and the two banned
// reductions, max and log-sum-exp (4·T each): the loss saves the logits
// in their own dtype and 8·T instead of the fp32 log-probabilities, and
// neither the fp32 upcast nor the log-probabilities are made in forward.
// Its backward writes the logits' gradient in their dtype from one fused
// kernel (e per logit, of the chunk being computed) where eager makes the
// fp32 gradients of the log-probabilities and of the upcast (8 per
// logit). torchtune's unchunked output is upcast by the model itself
// (TransformerDecoder.unembed: output(h).float()), outside the compiled
// loss, which then saves that fp32 copy instead of the log-probabilities
// (the same 4 bytes per logit) and makes an fp32 gradient (4, not 8).
// Measured alone on the CPU (validation-compile rows of
// testdata/measured/cpu, measure.py --validate --compile): bytes per logit
// held at the loss backward, eager 8 and compiled 4 for fp32 logits, and
// for 8 chunks of bf16 logits eager 3 (the fp32 log-probabilities less the
// freed chunks, and one chunk's 8) and compiled 0.25 (one chunk's bf16
// gradient, the chunks kept as saved).
//
// Measured on the CPU with torch 2.6 (testdata/measured/cpu/compile-*,
// tools/measure --compile): compiling each layer of the Llama config as
// torchtune does, and the whole model, in fp32 and bf16 autocast.

// Compile is which parts of a training step run under torch.compile.
// The zero value runs everything eagerly.
type Compile uint8

const (
	// CompileLayers compiles each decoder layer on its own, as
	// torchtune's training.compile_model compiles every
	// TransformerSelfAttentionLayer (torchtune/training/_compile.py).
	CompileLayers Compile = 1 << iota
	// CompileLoss compiles the loss: torchtune's compile_loss (the
	// chunked loss's compute_cross_entropy, or the whole loss module).
	CompileLoss
	// CompileHead puts the final norm and the LM head in the compiled
	// graph, as compiling the whole model does.
	CompileHead

	// CompileModel compiles the whole model, its loss included
	// (model.compile() on a transformers model given labels, TRL's and
	// the Trainer's torch_compile).
	CompileModel = CompileLayers | CompileLoss | CompileHead
)

// String returns "none", "layers", "loss", "layers+loss" or "model".
func (c Compile) String() string {
	switch c {
	case 0:
		return "none"
	case CompileLayers:
		return "layers"
	case CompileLoss:
		return "loss"
	case CompileLayers | CompileLoss:
		return "layers+loss"
	case CompileModel:
		return "model"
	}
	return "Compile(" + strconv.Itoa(int(c)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (c Compile) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// ParseCompile reads a compilation scope: "none" (or ""), "layers",
// "loss", "layers+loss" (or "torchtune": torchtune's compile=True
// compiles both) and "model".
func ParseCompile(s string) (Compile, error) {
	switch s {
	case "", "none", "false":
		return 0, nil
	case "layers":
		return CompileLayers, nil
	case "loss":
		return CompileLoss, nil
	case "layers+loss", "loss+layers", "torchtune", "true":
		return CompileLayers | CompileLoss, nil
	case "model":
		return CompileModel, nil
	}
	return 0, gpumem.Errorf("compile", s, gpumem.ErrInvalid, "want none, layers, loss, layers+loss (torchtune's compile=True) or model")
}

// checkCompile is [Spec.CheckCompile] for Workload.Compile.
func (w Workload) checkCompile(s *Spec) error { return s.CheckCompile("Workload.Compile", w) }

// CheckCompile refuses a compilation w.Compile the activation model does
// not derive, naming path in the error: only training steps of
// Llama-style decoder blocks with SDPA or flash attention, and the full
// or chunked loss of a causal language model.
func (s *Spec) CheckCompile(path string, w Workload) error {
	c := w.Compile
	if c == 0 {
		return nil
	}
	switch c {
	case CompileLayers, CompileLoss, CompileLayers | CompileLoss, CompileModel:
	default:
		return gpumem.Errorf(path, c.String(), gpumem.ErrInvalid, "want layers, loss, layers+loss or model")
	}
	if !w.Train {
		return gpumem.Errorf(path, c.String(), gpumem.ErrUnsupported,
			"compilation is modelled for training steps (the partitioner's saved set); an inference pass saves nothing")
	}
	if c&(CompileLayers|CompileHead) != 0 {
		l := layoutOf(s)
		bl := actFamily(s)
		if l != layoutLlama || bl.norm != actRMS || bl.act != actGated || bl.qkNorm || bl.sandwich ||
			bl.mla != nil || bl.sinks || bl.softcap || s.MoE.Experts > 0 {
			return gpumem.Errorf(path, c.String(), gpumem.ErrUnsupported,
				"compiled layers are modelled for Llama-style decoder blocks (RMSNorm, SwiGLU, no MoE, q/k norms or sandwich norms), not %s", s.Family)
		}
		if w.Attention == Eager {
			return gpumem.Errorf(path, c.String(), gpumem.ErrUnsupported,
				"compiled layers are modelled with SDPA or flash attention; eager attention's softmax under the partitioner is not")
		}
	}
	if c&CompileLoss != 0 {
		switch w.Loss.Kind {
		case FullLoss, ChunkedLoss:
		default:
			return gpumem.Errorf(path, c.String(), gpumem.ErrUnsupported,
				"a compiled loss is modelled for the full and the chunked cross-entropy, not %s (its own kernels)", w.Loss)
		}
		if !s.causalHead() {
			return gpumem.Errorf(path, c.String(), gpumem.ErrUnsupported,
				"a compiled loss is modelled for a causal language model's head; %s has none", s.headName())
		}
	}
	return nil
}
