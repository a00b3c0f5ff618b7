package enginelog

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// vllmQuant is the quantization a vLLM log states, as gpumem stores it.
type vllmQuant struct {
	ft model.Finetune
	// how names the layout in a skip reason or a test.
	how string
}

// quantOf returns how the weights a vLLM (or SGLang) log loads are
// quantized, from what the log itself states (Params.Quantization and,
// for a compressed-tensors checkpoint, Params.QuantScheme), as gpumem's
// model stores them (model.Finetune; vLLM's own layers at the logs'
// versions, vllm-project/vllm v0.5.4 and v0.13–v0.19,
// vllm/model_executor/layers/quantization/):
//
//   - "fp8" (fp8.py, Fp8LinearMethod, and Fp8OnlineLinearMethod for a
//     checkpoint in 16 bits that --quantization fp8 quantizes while it
//     loads): every linear of the blocks in FP8 E4M3 with one fp32
//     weight_scale per tensor (per fused shard: a handful of bytes); a
//     checkpoint with weight_block_size adds one fp32 per 128×128 tile,
//     0.02% of the weights, which the log does not state and this
//     leaves out;
//   - "compressed-tensors" with CompressedTensorsW8A8Fp8
//     (compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py): FP8
//     E4M3 weights with a channel-wise fp32 weight_scale [out, 1]
//     (ChannelQuantScaleParameter), a scale tile of one row and every
//     column; in a log that prints no kernel line, a model name ending in
//     "-FP8-dynamic" (llm-compressor's FP8_DYNAMIC preset);
//   - "compressed-tensors" with CompressedTensorsW8A8Int8
//     (compressed_tensors_w8a8_int8.py), or a model name ending in
//     "quantized.w8a8": int8 weights and one fp32 scale
//     per output row, the bytes of gpumem's INT8 layout (int8 weight and
//     an fp32 absmax per row);
//   - "gptq", "gptq_marlin" (gptq.py, gptq_marlin.py): 4-bit weights,
//     fp16 scales per group of 128 (AutoGPTQ's and optimum's default:
//     the log does not print group_size), gpumem's GPTQ layout with
//     the qzeros and g_idx the checkpoint stores (0.8% of the int4
//     bytes); gptq_marlin repacks qweight and permutes the scales into
//     tensors of the same bytes;
//   - "awq", "awq_marlin" (awq.py, awq_marlin.py): 4-bit weights, fp16
//     scales and int4 zeros per group of 128 (AutoAWQ's default), which
//     awq_marlin repacks in place.
//
// Embeddings, norms and the output head stay in the model's dtype (the
// checkpoints' ignore lists: lm_head). Any other method the log states
// (bitsandbytes, gguf, marlin, modelopt, nvfp4, mxfp4, a
// compressed-tensors scheme not named above, …) is unmodelled: ok is
// false and reason says which, and the log's weights are skipped rather
// than estimated in 16 bits. A log that states no method gives the zero
// vllmQuant and ok true.
func quantOf(p Params) (q vllmQuant, ok bool, reason string) {
	method := strings.ToLower(p.Quantization)
	switch method {
	case "":
		return q, true, ""
	case "fp8":
		q.ft = model.Finetune{Quant: gpumem.FP8E4M3}
		q.how = "fp8 (per-tensor scales)"
	case "compressed-tensors":
		switch p.QuantScheme {
		case "CompressedTensorsW8A8Fp8":
			q.ft = model.Finetune{Quant: gpumem.FP8E4M3, FP8Block: [2]int64{1, math.MaxInt32}}
			q.how = "compressed-tensors W8A8 fp8 (channel scales)"
		case "CompressedTensorsW8A8Int8":
			q.ft = model.Finetune{Quant: gpumem.INT8}
			q.how = "compressed-tensors W8A8 int8 (channel scales)"
		case "":
			// The log states the method but not the scheme: the model's
			// name says it where it follows the compressed-tensors
			// checkpoints' naming (llm-compressor's examples and the
			// RedHatAI / neuralmagic checkpoints): "-FP8-dynamic" is the
			// FP8_DYNAMIC preset (channel-wise fp8 weights, dynamic
			// per-token activations), "quantized.w8a8" the int8 W8A8
			// preset. A name alone, without the method in the log, is
			// never read.
			switch n := strings.ToLower(p.ModelName); {
			case strings.HasSuffix(n, "-fp8-dynamic"):
				p.QuantScheme = "CompressedTensorsW8A8Fp8"
				return quantOf(p)
			case strings.HasSuffix(n, "quantized.w8a8"):
				p.QuantScheme = "CompressedTensorsW8A8Int8"
				return quantOf(p)
			}
			return q, false, "quantized vLLM weights: compressed-tensors without the scheme in the log (not modelled)"
		default:
			return q, false, "quantized vLLM weights: compressed-tensors " + p.QuantScheme + " (not modelled)"
		}
	case "gptq", "gptq_marlin":
		q.ft = model.Finetune{Quant: gpumem.INT4, Method: "gptq"}
		q.how = method + " (4-bit, group 128)"
	case "awq", "awq_marlin":
		q.ft = model.Finetune{Quant: gpumem.INT4, Method: "awq"}
		q.how = method + " (4-bit, group 128)"
	default:
		return q, false, "quantized vLLM weights: " + method + " (not modelled)"
	}
	return q, true, ""
}

// quantizedModel returns m with its weights quantized as q.
func quantizedModel(m budget.Model, q vllmQuant) (budget.Model, error) {
	if q.ft.Quant == gpumem.Invalid {
		return m, nil
	}
	ft := q.ft
	ft.Model = m.Spec()
	qm, err := budget.NewModel(ft)
	if err != nil {
		return m, fmt.Errorf("%s weights: %w", q.how, err)
	}
	return qm, nil
}

// kvCacheDType reads a cache dtype as vLLM and SGLang name it
// (--kv-cache-dtype: auto, fp8, fp8_e4m3, fp8_e5m2; "fp8" is E4M3 on
// CUDA, vllm/utils STR_DTYPE_TO_TORCH_DTYPE); "" and "auto" are Invalid
// (the weights' dtype).
func kvCacheDType(s string) (gpumem.DType, error) {
	if s == "" || s == "auto" {
		return gpumem.Invalid, nil
	}
	return gpumem.ParseDType(s)
}
