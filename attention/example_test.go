package attention_test

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
	"github.com/gpumem/gpumem/budget"
)

// The Whisper language attack (docs/scenarios.md): Whisper-small's encoder (12 heads of 64, 1500 frames for a 30 s
// clip) under openai/whisper's qkv_attention, which upcasts q·k to fp32
// before the softmax. One layer's fp32 score matrix is 1500·1500·12·4 B ≈
// 103 MiB: the attack's failed "104MB" allocation once the allocator rounds
// it to 2 MiB. Every per-sample graph of the batch stays until backward.
func Example_whisperAttack() {
	s := attention.Shape{Batch: 1, Heads: 12, QueryLen: 1500, KeyLen: 1500, HeadDim: 64, DType: gpumem.FP16}
	scores, _ := attention.Scores(s, gpumem.FP32)
	fmt.Printf("fp32 scores, one layer: %d B = %.2f MiB; allocator request %v\n", int64(scores), scores.MiB(), budget.AllocationRequest(scores).Exact())

	whisper := attention.Eager{SoftmaxFP32: true, CastBeforeSoftmax: true}
	fwd, _ := whisper.Forward(s)
	saved, _ := whisper.Saved(s)
	fmt.Printf("forward peak %s, saved per layer %s\n", fwd.String(), saved.String())
	for _, micro := range []int{8, 1} {
		m := s
		m.Batch = micro
		sv, _ := whisper.Saved(m)
		fmt.Printf("%d clips kept for backward, 12 layers: %s\n", micro, (12 * sv).String())
	}
	// Output:
	// fp32 scores, one layer: 108000000 B = 103.00 MiB; allocator request 104MiB
	// forward peak 257.49 MiB, saved per layer 161.09 MiB
	// 8 clips kept for backward, 12 layers: 15.10 GiB
	// 1 clips kept for backward, 12 layers: 1.89 GiB
}

// LLaVA-1.5-7B on a 24 GB card (docs/scenarios.md): its language model, 2048 tokens and 32 heads: the
// attention matrix in fp32 is 2048² × 32 × 4 B = 0.5 GiB per layer.
func Example_llavaOn3090() {
	s := attention.Shape{Batch: 1, Heads: 32, QueryLen: 2048, KeyLen: 2048, HeadDim: 128, DType: gpumem.FP16}
	scores, _ := attention.Scores(s, gpumem.FP32)
	fmt.Printf("fp32 attention matrix per layer: %v (%.2f GiB)\n", scores.Exact(), scores.GiB())
	for _, k := range []attention.Kernel{attention.Eager{SoftmaxFP32: true}, attention.Flash{}} {
		sv, _ := k.Saved(s)
		fmt.Printf("%T saved per layer: %s\n", k, sv.String())
	}
	// Output:
	// fp32 attention matrix per layer: 512MiB (0.50 GiB)
	// attention.Eager saved per layer: 816.00 MiB
	// attention.Flash saved per layer: 48.25 MiB
}

// Block attention over 32k tokens (docs/scenarios.md): a 32-head layer
// over a 32k input. Its fp32 attention weights
// take 32 × 32k × 32k × 4 B = 128 GiB; processing 8 heads at a time (the
// analyzer's _compute_block_attention_chunked_gpu, under torch.no_grad) divides
// that peak by 4. The ladder below is the forward peak of eager attention
// with an fp32 softmax for decreasing chunk sizes.
func Example_blockAttentionHeadChunks() {
	s := attention.Shape{Batch: 1, Heads: 32, QueryLen: 32768, KeyLen: 32768, HeadDim: 128, DType: gpumem.FP16, NoGrad: true}
	w, _ := attention.Scores(s, gpumem.FP32)
	fmt.Printf("fp32 attention weights, all heads: %v\n", w.Exact())
	eager := attention.Eager{SoftmaxFP32: true}
	all, _ := eager.Forward(s)
	for _, c := range []int{32, 16, 8, 4} {
		p, _ := attention.HeadChunked{Heads: c, Inner: eager}.Forward(s)
		fmt.Printf("chunks of %2d heads: forward peak %7.2f GiB (÷%.2f)\n", c, p.GiB(), float64(all)/float64(p))
	}
	// Output:
	// fp32 attention weights, all heads: 128GiB
	// chunks of 32 heads: forward peak  192.00 GiB (÷1.00)
	// chunks of 16 heads: forward peak   96.12 GiB (÷2.00)
	// chunks of  8 heads: forward peak   48.19 GiB (÷3.98)
	// chunks of  4 heads: forward peak   24.22 GiB (÷7.93)
}

// The inverse helpers answer "how long can the sequence be" and "how many
// heads at a time" for a byte budget.
func ExampleLongestSeqLen() {
	s := attention.Shape{Batch: 1, Heads: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16}
	for _, k := range []attention.Kernel{attention.Eager{SoftmaxFP32: true, ExpandKV: true}, attention.Flash{}} {
		n, err := attention.LongestSeqLen(k, s, 8*gpumem.GiB)
		fmt.Printf("%T: %d tokens in 8 GiB (%v)\n", k, n, err)
	}
	c, err := attention.MaxHeadChunk(attention.Eager{SoftmaxFP32: true}, attention.Shape{
		Batch: 1, Heads: 32, QueryLen: 32768, KeyLen: 32768, HeadDim: 128, DType: gpumem.FP16, NoGrad: true,
	}, 40*gpumem.GiB)
	fmt.Printf("32k-token block attention in 40 GiB: %d heads at a time (%v)\n", c, err)
	// Output:
	// attention.Eager: 4687 tokens in 8 GiB (<nil>)
	// attention.Flash: 130560 tokens in 8 GiB (<nil>)
	// 32k-token block attention in 40 GiB: 6 heads at a time (<nil>)
}

// KV cache of published models, per token.
func ExampleKVCache() {
	llama2 := attention.KVCache{Layers: 32, KVHeads: 32, HeadDim: 128, DType: gpumem.FP16}
	llama3 := attention.KVCache{Layers: 32, KVHeads: 8, HeadDim: 128, DType: gpumem.BF16}
	dsv3 := attention.KVCache{Layers: 61, Layout: attention.Latent, LatentDim: 512 + 64, DType: gpumem.BF16}
	dsv3HF := attention.KVCache{Layers: 61, KVHeads: 128, HeadDim: 192, ValueHeadDim: 128, DType: gpumem.BF16}
	for _, c := range []struct {
		name string
		kv   attention.KVCache
	}{{"Llama-2-7B fp16", llama2}, {"Llama-3-8B bf16", llama3}, {"DeepSeek-V3 MLA latent", dsv3}, {"DeepSeek-V3 in HF", dsv3HF}} {
		b, _ := c.kv.Bytes(1, 1)
		fmt.Printf("%-24s %v per token\n", c.name, b.Exact())
	}
	paged := llama3
	paged.BlockTokens = 16
	b, _ := paged.Bytes(8, 4097)
	fmt.Printf("Llama-3-8B, 8 × 4097 tokens in 16-token blocks: %v\n", b.Exact())
	l, _ := dsv3.PerToken()
	h, _ := dsv3HF.PerToken()
	fmt.Printf("DeepSeek-V3 per layer: latent %d elements, HF/latent = %.1f×\n", int64(l)/2, float64(h)/float64(l))
	// Output:
	// Llama-2-7B fp16          512KiB per token
	// Llama-3-8B bf16          128KiB per token
	// DeepSeek-V3 MLA latent   70272B per token
	// DeepSeek-V3 in HF        4880KiB per token
	// Llama-3-8B, 8 × 4097 tokens in 16-token blocks: 4112MiB
	// DeepSeek-V3 per layer: latent 576 elements, HF/latent = 71.1×
}

// A layer's attention, composed as the Kernel contract says: the forward
// peak at the call, what the layer keeps, and the backward peak at the
// call, for one Llama-3-8B layer (32 heads, 8 KV heads of 128) at 8192
// tokens in bf16, with transformers' eager attention and with
// FlashAttention-2.
func ExampleKernel_compose() {
	s := attention.Shape{Batch: 1, Heads: 32, KVHeads: 8, QueryLen: 8192, KeyLen: 8192, HeadDim: 128, DType: gpumem.BF16}
	in, _ := attention.Inputs(s)
	out, _ := attention.Output(s)
	for _, k := range []attention.Kernel{attention.Eager{SoftmaxFP32: true, ExpandKV: true, Mask4D: true}, attention.Flash{}} {
		fwd, _ := k.Forward(s)
		saved, _ := k.Saved(s)
		bwd, _ := k.Backward(s)
		fmt.Printf("%T: forward peak %s, keeps %s, backward peak %s\n", k,
			(in + fwd).String(), saved.String(), (saved + out + bwd).String())
	}
	// Output:
	// attention.Eager: forward peak 20.34 GiB, keeps 12.19 GiB, backward peak 24.25 GiB
	// attention.Flash: forward peak 161.00 MiB, keeps 97.00 MiB, backward peak 514.00 MiB
}
