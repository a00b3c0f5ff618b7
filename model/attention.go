package model

// The attention implementation an estimate assumes, as users name it
// (--attention eager|sdpa|flash, Hugging Face's attn_implementation), and
// its parser.

import (
	"strconv"

	"github.com/gpumem/gpumem"
)

// Attention is the implementation of the attention core (scores,
// softmax, weighted sum) whose saved tensors an estimate assumes. The zero
// value is [Eager].
//
// It is the choice of a kernel, as Hugging Face's attn_implementation
// names it and as budget.Job.Attention, budget.Limits.Attention and the
// command line's --attention take it. Package attention describes one
// call of each kernel, with the options a model's code sets, behind the
// attention.Kernel interface; the choices are those kernels: Eager is
// attention.Eager, SDPA is attention.MemEfficient, Flash is
// attention.Flash (Version 2).
type Attention uint8

const (
	// Eager is the Hugging Face "eager" implementation: the score and
	// probability matrices (batch·heads·s_q·s_k elements) are
	// materialized and the probabilities saved for backward. The softmax
	// dtype follows the family: llama-style decoders, T5, phi, phi3 and
	// gpt_bigcode compute it in fp32 (softmax(..., dtype=float32)) and
	// save the fp32 result plus the cast copy; GPT-2, BERT, Whisper,
	// ViT and CLIP keep the compute dtype; OPT upcasts every dtype
	// (v4.57.1's eager_attention_forward). GQA keys and values are
	// expanded to all heads (repeat_kv).
	Eager Attention = iota
	// SDPA is torch's scaled_dot_product_attention with the
	// memory-efficient backend, as Hugging Face's "sdpa" path calls it:
	// keys and values expanded to all heads (repeat_kv), nothing
	// quadratic saved, plus an fp32 log-sum-exp of batch·heads·s_q rows
	// padded to a multiple of 32 (PyTorch's _efficient_attention_forward).
	SDPA
	// Flash is FlashAttention-2 (Hugging Face "flash_attention_2"): keys
	// and values stay at KVHeads, and the kernel saves q, k, v, the output
	// and an fp32 log-sum-exp of batch·heads·s_q (Dao, 2023).
	Flash

	numKernels
)

// String returns "eager", "sdpa" or "flash".
func (k Attention) String() string {
	switch k {
	case Eager:
		return "eager"
	case SDPA:
		return "sdpa"
	case Flash:
		return "flash"
	}
	return "Attention(" + strconv.Itoa(int(k)) + ")"
}

// ParseAttention parses an attention implementation as users name it:
// "eager", "sdpa" or "flash" (the command line's --attention and the
// service's "attention" field), and Hugging Face's attn_implementation
// spelling "flash_attention_2" (transformers' modeling_utils.py). The
// empty string is SDPA, the implementation transformers picks by
// default when PyTorch provides scaled_dot_product_attention. It is the
// one parser of the vocabulary, so that every entry point accepts the
// same names.
func ParseAttention(s string) (Attention, error) {
	switch s {
	case "eager":
		return Eager, nil
	case "sdpa", "":
		return SDPA, nil
	case "flash", "flash_attention_2":
		return Flash, nil
	}
	return 0, gpumem.Errorf("attention", s, gpumem.ErrInvalid, `want "eager", "sdpa" or "flash"`)
}
