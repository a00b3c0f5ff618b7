package budget

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipelineModels prepares a catalog pipeline's components, the UNet
// with LoRA adapters of rank lora (0: every parameter trains).
func pipelineModels(t *testing.T, name string, lora int64) Pipeline {
	t.Helper()
	d, ok := model.LookupPipeline(name)
	require.True(t, ok, name)
	var p Pipeline
	var err error
	p.UNet, err = NewModel(model.Finetune{Model: d.UNet, LoRA: model.LoRA{Rank: lora}})
	require.NoError(t, err)
	p.VAE, err = ModelOf(d.VAE)
	require.NoError(t, err)
	for _, s := range d.TextEncoders {
		m, err := ModelOf(s)
		require.NoError(t, err)
		p.TextEncoders = append(p.TextEncoders, m)
	}
	return p
}

// within checks got against want up to the allocator's 512-byte
// rounding of n tensors.
func within(t *testing.T, want int64, got gpumem.Bytes, n int64, what string) {
	t.Helper()
	assert.GreaterOrEqual(t, int64(got), want, what)
	assert.LessOrEqual(t, int64(got), want+512*n, what)
}

// TestPipelineLoRATraining checks the SDXL DreamBooth LoRA set-up: a
// frozen fp16 UNet with fp32 adapters (5,806,080 parameters), their
// fp32 gradients and AdamW's two fp32 moments, the fp16 casts autocast
// keeps of the adapters, and the frozen VAE and text encoders in fp16.
func TestPipelineLoRATraining(t *testing.T) {
	t.Parallel()
	p := pipelineModels(t, "sdxl", 4)
	p.Mode, p.Precision, p.Optimizer = Training, FP16Mixed, optimizer.AdamW{}
	p.Batch, p.Height, p.Width, p.Attention = 1, 1024, 1024, model.SDPA
	e, err := EstimatePipeline(p)
	require.NoError(t, err)
	require.Equal(t, StageBackward, e.Stage)
	const unet, lora = 2_567_463_684, 5_806_080
	tensors := int64(1680 + 2*4*2*70) // the UNet's and the adapters'
	within(t, 2*(unet)+4*lora+2*lora, e.Weights, tensors, "weights: fp16 base, fp32 adapters, their fp16 casts")
	within(t, 2*(83_653_863+123_060_480+694_659_840), e.ExtraModels, 248+196+517, "frozen fp16 VAE and text encoders")
	// With checkpointing the UNet's saved activations shrink below the
	// VAE encoding the 1024² image, which then sets the peak: before the
	// UNet's forward, so without autocast's casts.
	p.Checkpointing = true
	ck, err := EstimatePipeline(p)
	require.NoError(t, err)
	assert.Equal(t, StageEncode, ck.Stage)
	within(t, 2*(unet)+4*lora, ck.Weights, tensors, "weights before the forward")
	assert.Less(t, ck.Allocated(), e.Allocated())
	assert.GreaterOrEqual(t, int64(e.Optimizer), int64(8*lora))
}

func TestPipelineInference(t *testing.T) {
	t.Parallel()
	p := pipelineModels(t, "sd-1.5", 0)
	p.Mode, p.Precision, p.Batch, p.Height, p.Width, p.Attention = Prefill, FP16, 4, 512, 512, model.SDPA
	plain, err := EstimatePipeline(p)
	require.NoError(t, err)
	assert.Equal(t, StageDecode, plain.Stage, "four images decoded at once outweigh a UNet step")
	// Slicing decodes one image at a time.
	p.VAESlicing = true
	sliced, err := EstimatePipeline(p)
	require.NoError(t, err)
	assert.Less(t, sliced.Allocated(), plain.Allocated())
	// Model CPU offload: the decode holds the VAE's weights only; the
	// UNet and the text encoder wait on the host.
	p.VAESlicing, p.CPUOffload, p.Batch = false, true, 8
	off, err := EstimatePipeline(p)
	require.NoError(t, err)
	require.Equal(t, StageDecode, off.Stage)
	assert.Zero(t, off.Weights)
	within(t, 2*83_653_863, off.ExtraModels, 248, "the VAE alone")
	within(t, 2*(859_520_964+123_060_480), off.Host, 686+196, "UNet and text encoder on the host")
	// Classifier-free guidance doubles the UNet's batch.
	p.CPUOffload, p.VAE = false, Model{}
	p.Batch = 1
	one, err := EstimatePipeline(p)
	require.NoError(t, err)
	p.Guidance = true
	cfg, err := EstimatePipeline(p)
	require.NoError(t, err)
	assert.Equal(t, 2*one.Activations, cfg.Activations)
}

// TestPipelineSDXLUpcast checks that StableDiffusionXLPipeline decodes
// with the fp16 VAE upcast to fp32 (force_upcast), and SD 1.5's
// pipeline does not.
func TestPipelineSDXLUpcast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		bytes int64
	}{{"sdxl", 4}, {"sd-1.5", 2}} {
		p := pipelineModels(t, tc.name, 0)
		p.Mode, p.Precision, p.Batch, p.Height, p.Width = Prefill, FP16, 1, 1024, 1024
		acts, weights, err := p.decode(gpumem.FP16, gpumem.FP16, 128, 128)
		require.NoError(t, err)
		within(t, tc.bytes*83_653_863, weights, 248, tc.name)
		// The decoder's first full-resolution resnet: 3 × 256 channels
		// over 1024² pixels.
		assert.Equal(t, gpumem.Bytes(tc.bytes*3*256*1024*1024), acts, tc.name)
	}
}

func TestPipelineErrors(t *testing.T) {
	t.Parallel()
	good := pipelineModels(t, "sd-1.5", 0)
	good.Mode, good.Precision, good.Batch, good.Height, good.Width = Prefill, FP16, 1, 512, 512
	llama, ok := model.Lookup("gpt2")
	require.True(t, ok)
	notUNet, err := ModelOf(llama)
	require.NoError(t, err)
	for _, tc := range []struct {
		field string
		edit  func(p *Pipeline)
	}{
		{"Pipeline.UNet", func(p *Pipeline) { p.UNet = Model{} }},
		{"Pipeline.UNet", func(p *Pipeline) { p.UNet = notUNet }},
		{"Pipeline.VAE", func(p *Pipeline) { p.VAE = notUNet }},
		{"Pipeline.Batch", func(p *Pipeline) { p.Batch = 0 }},
		{"Pipeline.Height", func(p *Pipeline) { p.Height = 500 }},
		{"Pipeline.Mode", func(p *Pipeline) { p.Mode = Generation }},
		{"Pipeline.Precision", func(p *Pipeline) { p.Precision = FP16Mixed }},
		{"Pipeline.Optimizer", func(p *Pipeline) { p.Mode, p.Precision = Training, FP16Mixed }},
		{"Pipeline.CPUOffload", func(p *Pipeline) {
			p.Mode, p.Precision, p.Optimizer, p.CPUOffload = Training, FP16Mixed, optimizer.AdamW{}, true
		}},
		{"Pipeline.FrozenDType", func(p *Pipeline) { p.FrozenDType = gpumem.INT8 }},
	} {
		p := good
		tc.edit(&p)
		_, err := EstimatePipeline(p)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", tc.field, err)
		assert.Equal(t, tc.field, fe.Field)
	}
}

// BenchmarkEstimatePipeline estimates an SDXL LoRA training step (the
// UNet's and VAE's activation walks over their levels).
func BenchmarkEstimatePipeline(b *testing.B) {
	d, _ := model.LookupPipeline("sdxl")
	var p Pipeline
	p.UNet, _ = NewModel(model.Finetune{Model: d.UNet, LoRA: model.LoRA{Rank: 4}})
	p.VAE, _ = ModelOf(d.VAE)
	p.Mode, p.Precision, p.Optimizer = Training, FP16Mixed, optimizer.AdamW{}
	p.Batch, p.Height, p.Width, p.Checkpointing = 1, 1024, 1024, true
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EstimatePipeline(p); err != nil {
			b.Fatal(err)
		}
	}
}
