package budget

import (
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPipelineMMDiT runs the Flux and SD3 pipelines: the transformer's
// activations come from model.Spec.MMDiTActivations (held to diffusers'
// own modules by TestMMDiTOracle), which EstimatePipeline must pass
// through unchanged; the LoRA adapters sit on the scripts' targets.
func TestPipelineMMDiT(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"flux.1-dev", "sd3-medium"} {
		t.Run(name, func(t *testing.T) {
			p := pipelineModels(t, name, 16)
			p.TextEncoders = nil // the DreamBooth LoRA scripts encode the prompts beforehand
			p.Mode, p.Precision, p.FrozenDType, p.Optimizer = Training, BF16Mixed, gpumem.BF16, optimizer.AdamW{}
			p.Batch, p.Height, p.Width, p.Attention, p.Checkpointing = 1, 1024, 1024, model.SDPA, true
			e, err := EstimatePipeline(p)
			require.NoError(t, err)
			d, _ := model.LookupPipeline(name)
			a, err := d.UNet.MMDiTActivations(model.DiffusionWorkload{Batch: 1, Height: 128, Width: 128, DType: gpumem.BF16,
				Attention: model.SDPA, Train: true, Checkpointing: true, Autocast: true, LoRARank: 16})
			require.NoError(t, err)
			if e.Stage == StageBackward {
				assert.Contains(t, []gpumem.Bytes{a.Saved + a.Backward, a.Backward}, e.Activations)
			}
			// Without checkpointing the saved activations grow by the
			// blocks' saved tensors over their inputs.
			p.Checkpointing = false
			e2, err := EstimatePipeline(p)
			require.NoError(t, err)
			assert.Greater(t, e2.Activations, e.Activations)
			// The pipeline call: the guidance doubles SD3's batch, not
			// Flux's (an embedded guidance scale).
			// The VAE is left out so that the transformer's pass is the peak.
			p = pipelineModels(t, name, 0)
			p.VAE = Model{}
			p.Mode, p.Precision, p.Batch, p.Height, p.Width, p.Attention = Prefill, BF16, 1, 1024, 1024, model.SDPA
			one, err := EstimatePipeline(p)
			require.NoError(t, err)
			require.Equal(t, StageUNet, one.Stage)
			p.Guidance = true
			two, err := EstimatePipeline(p)
			require.NoError(t, err)
			if name == "flux.1-dev" {
				assert.Equal(t, one.Activations, two.Activations)
			} else {
				assert.Greater(t, two.Activations, one.Activations)
			}
		})
	}
}

// TestPipelineMMDiTErrors: an MMDiT pipeline's image must be a multiple
// of 16 pixels (2×2 latent patches), and the error names the field.
func TestPipelineMMDiTErrors(t *testing.T) {
	t.Parallel()
	p := pipelineModels(t, "flux.1-dev", 0)
	p.Mode, p.Precision, p.Batch, p.Height, p.Width = Prefill, BF16, 1, 1000, 1024
	_, err := EstimatePipeline(p)
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "Pipeline.Height", fe.Field)
	assert.Equal(t, 1000, fe.Value)
}
