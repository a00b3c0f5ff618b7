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
