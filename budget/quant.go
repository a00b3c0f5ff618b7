package budget

import (
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
)

// quantKernels describes the quantized linear layers of a Model for the
// memory their kernels take beyond the weights: a persistent scratch
// (GPTQ's exllamav2) or a transient per matmul (a dequantized weight, an
// int32 product).
type quantKernels struct {
	method string       // model.Finetune.QuantMethod: "", bitsandbytes, gptq, awq, fp8
	dtype  gpumem.DType // Finetune.Quant
	stored gpumem.DType // Finetune.QuantFrom, else Unquantized: the dtype bitsandbytes dequantizes 4-bit weights to (Invalid: the compute dtype)
	comp4  gpumem.DType // Finetune.ComputeDType: a 4-bit layer's compute dtype (Invalid: the job's)
	legacy bool         // Finetune.Unfused: bitsandbytes < 0.50 dequantizes in forward
	block  int64        // bitsandbytes 4-bit block size
	nested bool         // bitsandbytes double quantization
	shapes []ioShape    // the distinct quantized linears
	kept   int64        // Finetune.KeptInputs: elements per token of the inputs bitsandbytes < 0.43.2 keeps
}

// ioShape is a linear layer's input and output features.
type ioShape struct{ in, out int64 }

// newQuantKernels reads the quantized linears of the inventory rs of f.
func newQuantKernels(f model.Finetune, rs []model.Run) (quantKernels, error) {
	method, err := f.QuantMethod()
	if err != nil || method == "" {
		return quantKernels{}, err
	}
	stored := f.Unquantized
	if f.QuantFrom != gpumem.Invalid {
		stored = f.QuantFrom
	}
	q := quantKernels{method: method, dtype: f.Quant, stored: stored, comp4: f.ComputeDType, legacy: f.Unfused,
		block: f.Blockwise.Block, nested: f.Blockwise.Nested, kept: f.KeptInputs()}
	if q.block == 0 {
		q.block = 64
	}
	for _, r := range rs {
		t := r.Tensor
		quantized := strings.HasSuffix(t.Name, ".qweight") || (t.DType == f.Quant && strings.HasSuffix(t.Name, ".weight"))
		if !quantized || len(t.Shape) != 2 {
			continue
		}
		s := ioShape{in: t.Shape[1], out: t.Shape[0]}
		found := false
		for _, have := range q.shapes {
			found = found || have == s
		}
		if !found {
			q.shapes = append(q.shapes, s)
		}
	}
	return q, nil
}

// Exllamav2's scratch sizes (AutoGPTQ qlinear_exllamav2.py at 9f7d370,
// scratch_space_fixed defaults): max_input_len 2048, max_batch_size 8,
// and 128 bytes of alignment on each of its two parts.
const (
	exllamaMaxInput = 2048
	exllamaMaxBatch = 8
	exllamaAlign    = 128
)

// scratch returns the persistent memory of the quantized kernels of an
// inference or Load job: GPTQ's exllamav2 keeps one fp16 scratch tensor
// per device, sized for the largest layer, temp_dq_size (in·out·2 + 128,
// the dequantized weight) plus temp_fwd_size (out · 2048 · 8 · 4 + 128),
// allocated at load by autogptq_post_init ("have persistent buffers,
// otherwise we will get OOM", auto_gptq/modeling/_utils.py at 9f7d370)
// as torch.empty(scratch_bytes // 2, half). Exllamav2 refuses training
// (trainable=True), so a training job has none.
func (q *quantKernels) scratch(train bool) gpumem.Bytes {
	if q.method != "gptq" || train {
		return 0
	}
	var most int64
	for _, s := range q.shapes {
		dq, ok1 := checked.Mul(s.in, s.out)
		fwd, ok2 := checked.MulAll(s.out, exllamaMaxInput*exllamaMaxBatch*4)
		if !ok1 || !ok2 {
			continue
		}
		most = max(most, 2*dq+exllamaAlign+fwd+exllamaAlign)
	}
	return gpumem.Bytes(roundAlloc(most / 2 * 2))
}

// transients returns the largest kernel transient of one quantized
// linear over tokens tokens in forward and, when training, in backward,
// in the compute dtype cDT, beyond the layer's input and output (which
// the activation model counts):
//
//   - bitsandbytes 4-bit (0.50.2.dev0 at 95f9af3, autograd/_functions.py
//     and nn/modules.py): Linear4bit.forward casts its input to
//     compute_dtype and the output back (tokens·(in + out) elements in
//     compute_dtype when it is not the job's); forward runs the fused
//     gemm_4bit kernel, no dequantized weight (new in 0.50.0; with
//     Unfused, 0.49.2's MatMul4Bit.forward dequantizes the whole weight
//     for more than one token: F.dequantize_4bit in quant_state.dtype,
//     the weight's stored dtype, then .to(compute_dtype), and with double
//     quantization the absmax constants in fp32, one per block);
//     MatMul4Bit.backward computes grad_A with F.dequantize_4bit, the
//     same dequantized weight and absmax, cast to the gradient's dtype;
//   - bitsandbytes LLM.int8 (MatMul8bitLt.forward, int8_scaled_mm): the
//     input cast to fp16 (unless it is fp16), its int8 rows CA and fp32
//     row scales SCA, then the int32 product tokens × out before
//     int8_mm_dequant; with gradients int8_double_quant adds the
//     transposed CAt and its column scales; backward dequantizes the
//     int8 weight to the input's dtype (CB.to(dtype_A) · SCB/127). The
//     outlier columns (threshold 6.0) are a few and not counted;
//   - AWQ (WQLinearMMFunction.forward, awq/modules/linear/gemm.py at
//     88e4c76): for tokens ≥ 1024 (FP16_MATMUL_HEURISTIC_CONDITION) the
//     input in fp16 and the whole weight dequantized to fp16 before
//     torch.matmul; below, the GEMM kernel writes the output only;
//     backward dequantizes the weight again;
//   - GPTQ (exllamav2): in its persistent scratch (see scratch);
//   - fp8 (transformers' FP8Linear, integrations/finegrained_fp8.py):
//     act_quant's fp8 input (tokens × in bytes) and its fp32 scale per
//     128 inputs per token.
func (q *quantKernels) transients(tokens int64, cDT gpumem.DType, train bool) (fwd, bwd gpumem.Bytes) {
	c := sizeOf(cDT)
	cast := int64(0)
	if cDT != gpumem.FP16 {
		cast = 2 // the input cast to fp16
	}
	for _, s := range q.shapes {
		var f, b int64
		io, ok := checked.Mul(s.in, s.out)
		if !ok {
			continue
		}
		switch q.method {
		case "bitsandbytes":
			if q.dtype == gpumem.INT8 {
				perToken := cast*s.in + s.in + 4 + 4*s.out
				if train {
					perToken += s.in + 4
				}
				f, _ = checked.Mul(tokens, perToken)
				if train {
					f += 4 * s.in
					b, _ = checked.Mul(io, c)
				}
				break
			}
			st, cp := cDT, cDT
			if q.stored != gpumem.Invalid {
				st = q.stored
			}
			if q.comp4 != gpumem.Invalid {
				cp = q.comp4
			}
			// The weight dequantized to its stored dtype, cast to the
			// compute dtype, and the nested absmax in fp32.
			dq, _ := checked.Mul(io, sizeOf(st))
			if cp != st {
				cast, _ := checked.Mul(io, sizeOf(cp))
				dq += cast
			}
			if q.nested {
				blocks, _ := checked.CeilDiv(io, q.block)
				dq += 4 * blocks
			}
			if cp != cDT {
				f, _ = checked.MulAll(tokens, s.in+s.out, sizeOf(cp))
			}
			if q.legacy && tokens > 1 {
				f += dq
			}
			if train {
				b = dq
			}
		case "awq":
			if tokens >= awqDequantTokens {
				x, _ := checked.MulAll(tokens, s.in, cast)
				f = 2*io + x
			}
			if train {
				b = 2 * io
			}
		case "fp8":
			groups, _ := checked.CeilDiv(s.in, 128)
			f, _ = checked.Mul(tokens, s.in+4*groups)
		}
		fwd, bwd = max(fwd, gpumem.Bytes(roundAlloc(f))), max(bwd, gpumem.Bytes(roundAlloc(b)))
	}
	return fwd, bwd
}

// keptInputs returns the bytes of the 4-bit layers' inputs that
// bitsandbytes before 0.43.2 keeps in its autograd context until the
// graph is freed (model.Finetune.KeepsInputs) for tokens tokens: each
// input as MatMul4Bit receives it, after Linear4bit.forward's cast to
// the layer's compute dtype (Finetune.ComputeDType, else the job's cDT).
func (q *quantKernels) keptInputs(tokens int64, cDT gpumem.DType) (gpumem.Bytes, bool) {
	if q.kept == 0 {
		return 0, true
	}
	dt := cDT
	if q.comp4 != gpumem.Invalid {
		dt = q.comp4
	}
	n, ok := checked.MulAll(q.kept, tokens, sizeOf(dt))
	return gpumem.Bytes(roundAlloc(n)), ok
}

// loading returns the transient of loading: bitsandbytes quantizes a
// floating-point checkpoint as each weight reaches the GPU (transformers'
// bitsandbytes quantizers hand it to Params4bit / Int8Params, whose
// _quantize copies it to the device first, bitsandbytes nn/modules.py
// at 95f9af3): the largest weight in its stored dtype (fp16 for LLM.int8,
// which converts it) beside its quantized form, which the weights count,
// and for 4-bit the fp32 absmax of its blocks before double quantization
// packs them. GPTQ, AWQ and fp8 checkpoints are stored quantized and
// load as they are.
func (q *quantKernels) loading(cDT gpumem.DType) gpumem.Bytes {
	if q.method != "bitsandbytes" {
		return 0
	}
	st := cDT
	if q.stored != gpumem.Invalid {
		st = q.stored
	}
	var most int64
	for _, s := range q.shapes {
		io, ok := checked.Mul(s.in, s.out)
		if !ok {
			continue
		}
		var b int64
		if q.dtype == gpumem.INT8 {
			b, _ = checked.Mul(io, 2)
		} else {
			b, _ = checked.Mul(io, sizeOf(st))
			if q.nested {
				blocks, _ := checked.CeilDiv(io, q.block)
				b += 4 * blocks
			}
		}
		most = max(most, roundAlloc(b))
	}
	return gpumem.Bytes(most)
}

// awqDequantTokens is AutoAWQ's FP16_MATMUL_HEURISTIC_CONDITION:
// x.shape[0] * x.shape[1] >= 1024 dequantizes the weight.
const awqDequantTokens = 1024

// sizeOf is the bytes of one element of a plain dtype.
func sizeOf(d gpumem.DType) int64 {
	b, _ := d.Size(1)
	return int64(b)
}
