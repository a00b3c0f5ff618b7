package accuracy

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// vlmJob decodes a LLaVA-1.5-7B training job of tools/measure's
// vocabulary with extra fields.
func vlmJob(t *testing.T, catalog, extra string) *Job {
	t.Helper()
	var j Job
	require.NoError(t, json.Unmarshal([]byte(`{"model": "m", "catalog": "`+catalog+`", "kind": "llava", "mode": "train",
		"batch": 1, "seq": 64, "images": 1, "precision": "fp32", "optimizer": "adamw", "attention": "sdpa"`+extra+`}`), &j))
	return &j
}

// TestJobFreezeVision: freeze_vision trains everything but the vision
// tower (LLaVA-1.5's fine-tuning), and a job without a tower, or one
// whose tower LoRA already freezes, names job.freeze_vision.
func TestJobFreezeVision(t *testing.T) {
	full, err := vlmJob(t, "llava-1.5-7b", "").Budget()
	require.NoError(t, err)
	frozen, err := vlmJob(t, "llava-1.5-7b", `, "freeze_vision": true`).Budget()
	require.NoError(t, err)
	_, fullTrained := full.Model.Params()
	_, frozenTrained := frozen.Model.Params()
	// CLIP ViT-L/14-336's 303,507,456 parameters, less its last layer and
	// post_layernorm, which vision_feature_layer -2 leaves without a
	// gradient in the full job too.
	require.EqualValues(t, 303_507_456-12_596_224-2_048, fullTrained-frozenTrained)
	// What the frozen tower saves for backward (nothing) is checked
	// against the measured llava-small freezevision rows (TestCPU).

	_, err = vlmJob(t, "llama-2-7b", `, "freeze_vision": true`).Budget()
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	require.ErrorContains(t, err, "job.freeze_vision")
	_, err = vlmJob(t, "llava-1.5-7b", `, "freeze_vision": true, "lora_rank": 8`).Budget()
	require.ErrorContains(t, err, "job.freeze_vision")
}

// TestScopedLoRATargets: "language_model.*.q_proj" adapts the language
// model's 32 q_proj and no vision layer's, where PEFT's plain "q_proj"
// also matches the tower's 24; a scope no module matches names
// job.lora_targets.
func TestScopedLoRATargets(t *testing.T) {
	adapters := func(targets string) int64 {
		b, err := vlmJob(t, "llava-1.5-7b", `, "lora_rank": 8, "lora_targets": `+targets).Budget()
		require.NoError(t, err)
		_, n := b.Model.Params()
		return n
	}
	// rank 8 on a 4096×4096 q_proj: 8·4096 + 4096·8.
	require.EqualValues(t, 32*65_536, adapters(`["language_model.*.q_proj"]`))
	// the tower's 1024×1024 q_proj: 8·1024 + 1024·8.
	require.EqualValues(t, 32*65_536+24*16_384, adapters(`["q_proj"]`))
	_, err := vlmJob(t, "llava-1.5-7b", `, "lora_rank": 8, "lora_targets": ["projector.*.q_proj"]`).Budget()
	require.ErrorContains(t, err, "job.lora_targets")
}
