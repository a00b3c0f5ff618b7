package model

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyUNet is one level of 32 channels: a DownBlock2D of one resnet,
// no mid block, an UpBlock2D of two resnets over the two skip
// connections (conv_in's output and the resnet's).
const tinyUNet = `{"_class_name": "UNet2DConditionModel", "block_out_channels": [32], "layers_per_block": 1,
	"down_block_types": ["DownBlock2D"], "up_block_types": ["UpBlock2D"], "mid_block_type": null,
	"attention_head_dim": 8, "cross_attention_dim": 64}`

// TestUNetActivationsByHand checks a training pass's saved bytes
// against a derivation from the ops of diffusers' forward under fp16
// autocast: B=1, 8×8 latent (n = 64 positions), norm outputs and casts
// fp32 (f = 4), convolution inputs fp16 (e = 2), GroupNorm statistics
// 2·B·32 groups·8 bytes per norm.
//
//	conv_in's input:                     2·4·64            =     512
//	down resnet 32→32: (2f+e)(32+32)·64 + 2·1024           =  41,984
//	up resnet 64→32 (cat of hidden and skip), twice:
//	  (2f+e)(64+32)·64 + shortcut's input 2·64·64 + 1024   =  70,656 ×2
//	conv_norm_out, SiLU, conv_out: (2f+e)·32·64            =  20,480
//	total                                                  = 204,288
func TestUNetActivationsByHand(t *testing.T) {
	t.Parallel()
	s, err := FromHFConfig(strings.NewReader(tinyUNet))
	require.NoError(t, err)
	w := DiffusionWorkload{Batch: 1, Height: 8, Width: 8, DType: gpumem.FP16, Autocast: true, Attention: SDPA, Train: true}
	a, err := s.UNetActivations(w)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(204_288), a.Saved)
	// Checkpointing keeps each resnet's input instead: conv_in's input,
	// the down resnet's input 2·32·64, the two concatenations
	// 2·64·64 each, the head's tensors.
	w.Checkpointing = true
	c, err := s.UNetActivations(w)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(512+4096+2*8192+20_480), c.Saved)
}

// TestUNetActivationsScale checks what follows from the op sequences:
// every inference and SDPA training term is linear in the batch (a
// classifier-free-guided step costs twice one image), eager attention
// adds the score matrices, checkpointing saves far less, LoRA more.
func TestUNetActivationsScale(t *testing.T) {
	t.Parallel()
	s, ok := Lookup("sd-1.5-unet")
	require.True(t, ok)
	act := func(w DiffusionWorkload) DiffusionActivations {
		a, err := s.UNetActivations(w)
		require.NoError(t, err)
		return a
	}
	base := DiffusionWorkload{Batch: 1, Height: 64, Width: 64, DType: gpumem.FP16, Attention: SDPA}
	one := act(base)
	two := base
	two.Batch = 2
	assert.Equal(t, 2*one.Forward, act(two).Forward, "inference is linear in the batch")
	train := base
	train.Train, train.Autocast = true, true
	t1 := act(train)
	train.Batch = 2
	t2 := act(train)
	assert.Equal(t, 2*t1.Saved, t2.Saved, "SDPA training is linear in the batch (the logsumexp rows are padded per sample)")
	train.Batch = 1
	eager := train
	eager.Attention = Eager
	// The first level's self-attention probabilities alone: 5
	// transformer blocks at 4096 tokens, 8 heads, fp16.
	probs := gpumem.Bytes(5 * 8 * 4096 * 4096 * 2)
	assert.Greater(t, act(eager).Saved-t1.Saved, probs)
	ck := train
	ck.Checkpointing = true
	assert.Less(t, act(ck).Saved*5, t1.Saved)
	lora := train
	lora.LoRARank = 4
	assert.Greater(t, act(lora).Saved, t1.Saved)
}

func TestVAEActivations(t *testing.T) {
	t.Parallel()
	s, ok := Lookup("sd-1.5-vae")
	require.True(t, ok)
	dec := func(b, side int64, dt gpumem.DType) DiffusionActivations {
		a, err := s.VAEActivations(DiffusionWorkload{Batch: b, Height: side, Width: side, DType: dt, Decode: true})
		require.NoError(t, err)
		return a
	}
	one := dec(1, 64, gpumem.FP16)
	// The decoder's output is 3 × 512 × 512 in fp16.
	assert.Equal(t, gpumem.Bytes(3*512*512*2), one.Output)
	// Its peak is the first resnet at full resolution (256 → 128
	// channels over 512² pixels): the input, norm1's and SiLU's outputs,
	// 3 × 256 × 512² × 2 bytes.
	assert.Equal(t, gpumem.Bytes(3*256*512*512*2), one.Forward)
	assert.Equal(t, 4*one.Forward, dec(4, 64, gpumem.FP16).Forward)
	assert.Equal(t, 2*one.Forward, dec(1, 64, gpumem.FP32).Forward)
	_, err := s.UNetActivations(DiffusionWorkload{Batch: 1, Height: 8, Width: 8, DType: gpumem.FP16})
	assert.Error(t, err, "a VAE is not a UNet")
	_, err = s.VAEActivations(DiffusionWorkload{Batch: 0, Height: 8, Width: 8, DType: gpumem.FP16})
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "DiffusionWorkload.Batch", fe.Field)
}
