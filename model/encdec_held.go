package model

// whisperHeld sets what Whisper's encoder holds, in a pass without a
// graph, beside each encoder layer's own tensors (modeling_whisper.py at
// transformers v4.57.1, commit 8cb5963c):
//
//   - WhisperEncoder.forward keeps inputs_embeds (the permuted output of
//     the second convolution's GELU, B·F·h) for the whole stack, and
//     all_positions, torch.arange over the encoder's positions (int64,
//     8·F bytes, not batched), whose embedding is added to it;
//   - its loop variable hidden_states is the layer's input, which
//     WhisperEncoderLayer.forward also binds as the residual; in the
//     attention the layer holds self_attn_layer_norm's output beside it,
//     in the MLP the residual sum and final_layer_norm's output (the
//     argument of fc1): three B·F·h tensors through the attention, four
//     through the MLP;
//   - WhisperEncoderLayer.forward returns (hidden_states, attn_weights)
//     whatever output_attentions says, and the loop keeps that tuple in
//     layer_outputs until the next layer's call returns: with eager
//     attention (eager_attention_forward returns the probabilities,
//     B·H·F·F in the compute dtype) every layer from the second on runs
//     beside the previous layer's probabilities; SDPA returns None.
//
// Measured on the CPU (testdata/measured/cpu, Whisper prefill rows): the
// SDPA peak is fc1's output and its GELU beside these four B·F·h tensors
// and the positions, the eager peak the second layer's scaled scores
// beside its matmul, the first layer's probabilities, q, k, v and the
// three, to 12 bytes.
func whisperHeld(c *actCalc, eb *actBlock, w Workload, sh actShape, layers int64) {
	eb.heldHidden, eb.heldAttn = 4, 3
	eb.heldBias = c.a(eb.heldBias, c.m(8, sh.s))
	if sh.k == Eager && layers >= 2 {
		heads := eb.H
		if sh.hc > 0 && sh.hc < eb.H {
			heads = sh.hc
		}
		eb.heldBias = c.a(eb.heldBias, c.m(sh.e, sh.b, heads, sh.s, sh.s))
	}
}

// t5HeldDecoder returns what T5's decoder stack holds, in a pass without
// a graph, through every decoder block beside the block's own tensors
// (modeling_t5.py at transformers v4.57.1, commit 8cb5963c): T5Stack.
// forward keeps the position_bias and encoder_decoder_position_bias its
// first block returns (layer_outputs[1] and [2]) for every later block,
// and the 4-D causal mask _update_causal_mask made. T5Attention.forward
// makes the self-attention's as compute_bias(q, k), 1·H·S·S, plus that
// mask, B·1·S·S: B·H·S·S in the compute dtype; the cross-attention's,
// which has no relative bias, as torch.zeros((1, H, S, Senc)) plus the
// inverted encoder mask, B·1·1·Senc: B·H·S·Senc. Measured on the CPU
// (testdata/measured/cpu, T5 eager prefill rows: the level after the
// decoder's final norm drops by the mask and the two biases).
func t5HeldDecoder(c *actCalc, db *actBlock, sh actShape) int64 {
	return c.a(c.m(sh.e, sh.b, db.H, sh.s, sh.s), c.m(sh.e, sh.b, db.H, sh.s, sh.sk), c.m(sh.e, sh.b, sh.s, sh.s))
}

// t5Held sets the hidden-size tensors T5's stacks hold, in a pass without
// a graph, beside each block's own (modeling_t5.py at transformers
// v4.57.1, commit 8cb5963c): T5Stack.forward keeps inputs_embeds for the
// whole stack (hidden_states = self.dropout(inputs_embeds), the same
// tensor in eval, is the first block's input only) and its loop variable
// the block's input; T5LayerSelfAttention and T5LayerCrossAttention hold
// their layer_norm's output through the attention, T5Block the output of
// each sub-layer before it (the decoder's cross-attention runs beside the
// self-attention's output), and T5LayerFF its input and layer_norm's
// output through DenseReluDense. The encoder: three through the
// attention, four through the MLP; the decoder: four and five. T5Attention
// binds scores and attn_weights (softmax(scores.float()).type_as(scores))
// to two locals, so both are alive at attn_weights@value_states, beside
// matmul's contiguous copy of the transposed value_states and the
// product (keepsScores). Measured on the CPU (testdata/measured/cpu, T5
// eager prefill rows).
func t5Held(eb, db *actBlock) {
	eb.heldHidden, eb.heldAttn = 4, 3
	db.heldHidden, db.heldAttn = 5, 4
	eb.keepsScores, db.keepsScores = true, true
}

// t5FirstMoment returns the first block's largest moment of T5's stack
// without a graph, held the bytes the stack holds beside it then: the
// first T5Attention with a relative bias computes the bias after the
// scores (modeling_t5.py at transformers v4.57.1, commit 8cb5963c:
// scores = matmul(q, kᵀ), then compute_bias), and compute_bias's
// _relative_position_bucket works on query × key int64 tensors: at
// torch.min(relative_position_if_large, torch.full_like(...)) the
// caller's relative_position, the bucket's relative_buckets (encoder,
// bidirectional: (relative_position > 0).to(long) * num_buckets; the
// decoder's is still the Python 0), its absolute (or clamped) relative
// position, relative_position_if_large, the full_like and the min's
// result are alive, with the is_small bool: 6·8 + 1 bytes a position pair
// in the encoder, 5·8 + 1 in the decoder, unbatched. Beside them: the
// layer's input (the stack's inputs_embeds itself in the first block),
// layer_norm's output, q, k, v and the scores. Measured on the CPU
// (testdata/measured/cpu, T5 eager rows at batch 1: the encoder's peak is
// this moment, to 2 KiB of index vectors).
func t5FirstMoment(c *actCalc, bl *actBlock, sh actShape, hidden int64, bidirectional bool, held int64) int64 {
	if sh.k != Eager {
		return 0
	}
	pairs := c.m(sh.s, sh.s)
	bucket := c.a(c.m(40, pairs), pairs)
	if bidirectional {
		bucket = c.a(bucket, c.m(8, pairs))
	}
	T := c.m(sh.b, sh.s)
	q := c.m(sh.e, T, bl.H, bl.d)
	kv := c.m(2, sh.e, T, bl.KV, bl.d)
	return c.a(held, c.m(2, sh.e, T, hidden), q, kv, c.m(sh.e, sh.b, bl.H, sh.s, sh.s), bucket)
}

// whisperOutCopy marks Whisper's attention blocks whose fused attention
// output is copied before the output projection: WhisperAttention.forward
// makes q, k and v contiguous in (batch, heads, seq, head_dim) order
// (query_states.transpose(1, 2).contiguous(), modeling_whisper.py at
// transformers v4.57.1, commit 8cb5963c), the kernel's output takes the
// query's layout, and sdpa_attention_forward's attn_output.transpose(1,
// 2).contiguous() (integrations/sdpa_attention.py) is then a copy: the
// kernel saves its output for backward and out_proj saves the copy, one
// B·S·h tensor more than a model whose query is a transposed view (ViT:
// the transpose gives back a contiguous tensor). Measured on the
// CPU (testdata/measured/cpu, Whisper SDPA training rows: an aten::clone
// after every encoder layer's scaled_dot_product_attention, none after
// ViT's; each encoder layer saves 13,104,008 bytes at batch 1, one
// 768,000-byte B·S·h beyond the rest of the block).
func whisperOutCopy(eb, db *actBlock) {
	eb.outCopy, db.outCopy = true, true
}

// autocastInputs returns the bytes of a training step's float inputs (n
// elements: a vision model's pixel values, a speech model's log-mel
// features) that the loop holds beside what the first convolution saves
// under autocast: the inputs stay in the fp32 of the weights they were
// made for, conv2d and conv1d are on autocast's lower-precision list
// (aten/src/ATen/autocast_mode.cpp, torch 2.6), and the convolution saves
// the 16-bit cast it computes with, not the caller's tensor. Without
// autocast (e is then the inputs' own dtype) the convolution saves the
// inputs themselves and nothing is added.
func autocastInputs(c *actCalc, w Workload, e, n int64) int64 {
	if !w.Autocast || e >= 4 {
		return 0
	}
	return c.m(4, n)
}
