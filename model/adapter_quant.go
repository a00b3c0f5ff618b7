package model

// Quantized base weights under a fine-tune (QLoRA and the like): the
// method, its constants and packed int4 storage.

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// isQuantConstant reports whether a tensor holds quantization constants
// (bitsandbytes quant_state, FP8 weight_scale_inv), not parameters.
func isQuantConstant(name string) bool {
	for _, suffix := range [...]string{".quant_state", ".weight_scale_inv", ".SCB", ".qzeros", ".scales", ".g_idx"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// IsQuantConstant reports whether a tensor of [Finetune.Tensors] holds
// quantization constants (bitsandbytes quant_state and SCB, FP8
// weight_scale_inv, GPTQ/AWQ qzeros, scales and g_idx): stored as the
// quantization library keeps them, whatever a job's precision.
func IsQuantConstant(name string) bool { return isQuantConstant(name) }

// defaultGroup is GPTQ's and AWQ's default group_size (AutoGPTQ
// BaseQuantizeConfig.group_size, AutoAWQ quant_config "q_group_size").
const defaultGroup = 128

// QuantMethod returns the library whose layout stores f.Quant:
// "bitsandbytes", "gptq", "awq" or "fp8", or "" when f quantizes
// nothing. It fails for a method that cannot store f.Quant.
func (f Finetune) QuantMethod() (string, error) { return f.method() }

// method checks Quant against Method and returns the method.
func (f Finetune) method() (string, error) {
	m := strings.ToLower(f.Method)
	switch f.Quant {
	case gpumem.Invalid:
		if m != "" {
			return "", gpumem.Errorf("Finetune.Method", f.Method, gpumem.ErrInvalid, "a quantization method needs Quant")
		}
		return "", nil
	case gpumem.NF4, gpumem.FP4:
		if m == "" || m == "bitsandbytes" {
			return "bitsandbytes", nil
		}
	case gpumem.INT8:
		if m == "" || m == "bitsandbytes" {
			return "bitsandbytes", nil
		}
	case gpumem.INT4:
		if m == "gptq" || m == "awq" {
			return m, nil
		}
		if m == "" {
			return "", gpumem.Errorf("Finetune.Method", f.Method, gpumem.ErrInvalid, "int4 weights are stored by gptq or awq; name the method")
		}
	case gpumem.FP8E4M3, gpumem.FP8E5M2:
		if m == "" || m == "fp8" {
			return "fp8", nil
		}
	default:
		return "", gpumem.Errorf("Finetune.Quant", f.Quant, gpumem.ErrUnsupported,
			"quantized storage is nf4, fp4, int8 (bitsandbytes), int4 (gptq, awq) or block-scaled fp8_e4m3/fp8_e5m2")
	}
	switch m {
	case "bitsandbytes", "gptq", "awq", "fp8":
		return "", gpumem.Errorf("Finetune.Method", f.Method, gpumem.ErrInvalid, "%s does not store %s weights", m, f.Quant)
	}
	return "", gpumem.Errorf("Finetune.Method", f.Method, gpumem.ErrUnsupported, "want bitsandbytes, gptq, awq or fp8")
}

func methodName(m string) string {
	if m == "" {
		return "an unquantized model"
	}
	return m
}

// packedInt4 returns the tensors GPTQ (exllamav2 layout) or AWQ (GEMM
// layout) store for a linear layer of in × out features with group size
// g (-1: per row): qweight (as INT4 [out, in], the bytes of the int32
// packing), qzeros (int32, 8 zeros per int32), scales (fp16) and, for
// GPTQ, g_idx (int32 per input feature).
func packedInt4(method, module string, in, out, g int64) ([]gpumem.Tensor, error) {
	if g == -1 {
		g = in
	}
	field := "Finetune.GroupSize"
	if in%g != 0 {
		return nil, gpumem.Errorf(field, g, gpumem.ErrInvalid, "%s: it does not divide %s's %d input features", method, module, in)
	}
	if method == "gptq" && in%32 != 0 {
		return nil, gpumem.Errorf("Finetune.Quant", gpumem.INT4, gpumem.ErrUnsupported,
			"gptq (exllamav2) needs in_features divisible by 32; %s has %d", module, in)
	}
	if method == "awq" && out%8 != 0 {
		return nil, gpumem.Errorf("Finetune.Quant", gpumem.INT4, gpumem.ErrUnsupported,
			"awq needs out_features divisible by 8; %s has %d", module, out)
	}
	groups := in / g
	if method == "gptq" {
		out += -out & 31 // exllamav2 pads out_features to a multiple of 32
	}
	q := gpumem.Tensor{Name: module + ".qweight", Shape: []int64{out, in}, DType: gpumem.INT4}
	ts := []gpumem.Tensor{q,
		{Name: module + ".qzeros", Shape: []int64{groups, out / 8}, DType: gpumem.INT32},
		{Name: module + ".scales", Shape: []int64{groups, out}, DType: gpumem.FP16}}
	if method == "gptq" {
		ts = append(ts, gpumem.Tensor{Name: module + ".g_idx", Shape: []int64{in}, DType: gpumem.INT32})
	}
	return ts, nil
}

func sumElems(ts []gpumem.Tensor) (int64, error) {
	var n int64
	for i, t := range ts {
		e, err := t.Elems()
		if err != nil {
			return 0, err
		}
		var ok bool
		if n, ok = checked.Add(n, e); !ok {
			return 0, gpumem.Errorf("tensors["+strconv.Itoa(i)+"]", t.Name, gpumem.ErrRange, "element count overflows int64")
		}
	}
	return n, nil
}
