package budget

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// LoRACode is the model code a LoRA or QLoRA job's forward runs
// (Job.LoRACode), which decides what its frozen base saves for
// backward.
type LoRACode uint8

const (
	// FrozenBaseLoRA (the zero value) is LoRA on a frozen base whose
	// linears save nothing for their weights, as model.FrozenBase
	// derives it: PEFT's LoRA Linear.forward on transformers' modeling
	// code (peft/tuners/lora/layer.py, v0.17.1: result =
	// self.base_layer(x) + lora_B(lora_A(dropout(x))) * scaling) and
	// torchtune's LoRALinear (torchtune/modules/peft/lora.py: out =
	// F.linear(x, self.weight, self.bias) on a weight that does not
	// require grad, plus lora_b(lora_a(dropout(x))) scaled). Their
	// dropout before lora_A is Job.LoRADropout (zero: PEFT's LoraConfig
	// default, torchtune's builders' since d7fae9677; 0.05 in
	// torchtune's Llama 2 builders from March to September 2024).
	// Measured on the CPU with lora_dropout 0 (testdata/measured/cpu,
	// lora8 rows; testdata/measured/cpu/saved).
	FrozenBaseLoRA LoRACode = iota
	// LitGPTLoRA is litgpt's own GPT (litgpt/model.py) with its
	// lora.py LoRALinear and LoRAQKVLinear: a fused qkv Linear whose
	// output is viewed per query group and split into q, k and v
	// copies, rope applied to copies, lora_dropout 0.05 in its
	// finetune configs, and the fused adapter output zero-padded to
	// the qkv width (LoRAQKVLinear.zero_pad: new_zeros then
	// index_copy_; lit_gpt/lora.py at 8641822, litgpt/lora.py at
	// 26857050). Those tensors are not modelled op by op: the job's
	// activations are those of a trained base (every linear saving its
	// input), which the published litgpt LoRA and QLoRA runs are
	// estimated with (testdata/published, ids litgpt-*): an upper bound
	// for the LoRA runs (2-9% over, phi-1.5's 31-55%), not for the QLoRA
	// ones, whose bitsandbytes inputs and held step put them from 3.3%
	// over to 3.2% under (Llama-2-7B's config_hub run 8.9% under, listed
	// apart).
	// On the frozen base, with the bitsandbytes inputs kept and one
	// lora_dropout per block (LoRAQKVLinear's, on the fused qkv's
	// input), the Llama-2-7B LoRA runs of resource-tables.md would
	// still be about 4-6% under and the config_hub Llama-2-7B QLoRA run
	// about 10% under: litgpt's block holds more than those mechanisms,
	// not yet modelled.
	LitGPTLoRA
)

// String returns the name ParseLoRACode reads: "peft" or "litgpt".
func (c LoRACode) String() string {
	switch c {
	case FrozenBaseLoRA:
		return "peft"
	case LitGPTLoRA:
		return "litgpt"
	}
	return "LoRACode(" + strconv.Itoa(int(c)) + ")"
}

// ParseLoRACode reads a LoRA job's model code: "", "peft",
// "transformers" or "torchtune" (FrozenBaseLoRA), or "litgpt"
// (LitGPTLoRA). The error names "lora_code" and the value.
func ParseLoRACode(s string) (LoRACode, error) {
	switch s {
	case "", "peft", "transformers", "torchtune":
		return FrozenBaseLoRA, nil
	case "litgpt", "lit-gpt":
		return LitGPTLoRA, nil
	}
	return 0, gpumem.Errorf("lora_code", s, gpumem.ErrInvalid, "want peft, torchtune or litgpt")
}

// checkLoRACode rejects a LoRACode that names no model code and a
// LoRADropout outside [0, 1).
func (j *Job) checkLoRACode() error {
	if j.LoRACode > LitGPTLoRA {
		return gpumem.Errorf("Job.LoRACode", j.LoRACode, gpumem.ErrInvalid, "want FrozenBaseLoRA or LitGPTLoRA")
	}
	if !(j.LoRADropout >= 0 && j.LoRADropout < 1) {
		return gpumem.Errorf("Job.LoRADropout", j.LoRADropout, gpumem.ErrRange, "a dropout probability in [0, 1)")
	}
	return nil
}
