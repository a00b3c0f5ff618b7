package optimizer_test

import (
	"fmt"
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/optimizer"
)

// llama2_7B returns the parameters of Llama-2-7B (meta-llama/Llama-2-7b-hf
// config.json: hidden 4096, intermediate 11008, 32 layers, 32 heads,
// vocabulary 32000, untied head): 291 tensors, 6,738,415,616 parameters.
func llama2_7B(dt gpumem.DType) []gpumem.Tensor {
	const d, ff, vocab, layers = 4096, 11008, 32000, 32
	ts := []gpumem.Tensor{{Name: "model.embed_tokens.weight", Shape: []int64{vocab, d}, DType: dt}}
	for i := range layers {
		pre := "model.layers." + strconv.Itoa(i) + "."
		for _, m := range []string{"q_proj", "k_proj", "v_proj", "o_proj"} {
			ts = append(ts, gpumem.Tensor{Name: pre + "self_attn." + m + ".weight", Shape: []int64{d, d}, DType: dt})
		}
		ts = append(ts,
			gpumem.Tensor{Name: pre + "mlp.gate_proj.weight", Shape: []int64{ff, d}, DType: dt},
			gpumem.Tensor{Name: pre + "mlp.up_proj.weight", Shape: []int64{ff, d}, DType: dt},
			gpumem.Tensor{Name: pre + "mlp.down_proj.weight", Shape: []int64{d, ff}, DType: dt},
			gpumem.Tensor{Name: pre + "input_layernorm.weight", Shape: []int64{d}, DType: dt},
			gpumem.Tensor{Name: pre + "post_attention_layernorm.weight", Shape: []int64{d}, DType: dt})
	}
	return append(ts,
		gpumem.Tensor{Name: "model.norm.weight", Shape: []int64{d}, DType: dt},
		gpumem.Tensor{Name: "lm_head.weight", Shape: []int64{vocab, d}, DType: dt})
}

// Full fine-tuning of Llama-2-7B with fp32 trainable weights (as AMP
// keeps them): AdamW's two fp32 moments against bitsandbytes' 8-bit
// block-wise states and Adafactor's factored second moment.
func Example_llama2() {
	ts := llama2_7B(gpumem.FP32)
	base, _ := optimizer.Total(optimizer.AdamW{}, ts)
	fmt.Printf("%-22s %s\n", optimizer.AdamW{}, base.String())
	for _, opt := range []optimizer.Optimizer{optimizer.AdamW8bit{}, optimizer.Adafactor{}} {
		b, _ := optimizer.Total(opt, ts)
		fmt.Printf("%-22s %s, saves %.2f GiB\n", opt, b.String(), (base - b).GiB())
	}
	// Output:
	// torch.optim.AdamW      50.21 GiB
	// bnb.optim.AdamW8bit    12.75 GiB, saves 37.46 GiB
	// transformers.Adafactor 10.82 MiB, saves 50.19 GiB
}

// Only trainable tensors carry state: with LoRA on the attention
// projections of Llama-2-7B the frozen base gets none, and AdamW's state
// is a few MiB.
func ExampleTotal() {
	var lora []gpumem.Tensor
	for i := range 32 {
		for _, m := range []string{"q_proj", "v_proj"} {
			pre := "model.layers." + strconv.Itoa(i) + ".self_attn." + m
			lora = append(lora,
				gpumem.Tensor{Name: pre + ".lora_A.weight", Shape: []int64{16, 4096}, DType: gpumem.FP32},
				gpumem.Tensor{Name: pre + ".lora_B.weight", Shape: []int64{4096, 16}, DType: gpumem.FP32})
		}
	}
	b, _ := optimizer.Total(optimizer.AdamW{}, lora)
	fmt.Println(len(lora), "adapter tensors:", b.String())
	// Output:
	// 128 adapter tensors: 64.00 MiB
}

// bitsandbytes keeps 8-bit state from min_8bit_size = 4096 elements, with
// one fp32 absmax per 256 elements; smaller tensors keep fp32 state.
func ExampleAdam8bit() {
	for _, n := range []int64{4095, 4096, 1 << 20} {
		b, _ := optimizer.Adam8bit{}.State(gpumem.Tensor{Shape: []int64{n}, DType: gpumem.BF16})
		fmt.Printf("%8d elements: %d bytes\n", n, b)
	}
	// Output:
	//     4095 elements: 32760 bytes
	//     4096 elements: 8320 bytes
	//  1048576 elements: 2129920 bytes
}

// Describe splits the state by where it lives: PagedAdamW8bit puts the
// 8-bit buffers of tensors from 100,000 elements in CUDA unified memory,
// which torch.cuda.memory_allocated does not count.
func ExampleDescribe() {
	ts := []gpumem.Tensor{
		{Name: "w", Shape: []int64{4096, 4096}, DType: gpumem.BF16},
		{Name: "norm", Shape: []int64{4096}, DType: gpumem.BF16},
	}
	bd, _ := optimizer.Describe(optimizer.AdamW8bit{Paged: true}, ts)
	fmt.Println(bd.Optimizer, "state", bd.State.Exact(), "device", bd.Device.Exact(), "managed", bd.Managed.Exact())
	for _, p := range bd.Parts {
		fmt.Println(p.Name, p.Bytes.Exact())
	}
	// Output:
	// bnb.optim.PagedAdamW8bit state 34089088B device 534656B managed 32MiB
	// w 33280KiB
	// norm 8320B
}

// Adafactor keeps a row and a column vector for a matrix: (n+m)·4 bytes
// plus transformers' 4-byte RMS scalar.
func ExampleAdafactor() {
	w := gpumem.Tensor{Name: "w", Shape: []int64{4096, 11008}, DType: gpumem.BF16}
	hf, _ := optimizer.Adafactor{}.State(w)
	pt, _ := optimizer.Adafactor{Torch: true}.State(w)
	adam, _ := optimizer.AdamW{}.State(w)
	fmt.Println(hf.Exact(), pt.Exact(), adam.Exact())
	// Output:
	// 60420B 30212B 180355076B
}
