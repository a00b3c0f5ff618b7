package model

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVisionTowerClassifier: CLIPForImageClassification and
// SiglipForImageClassification read as the tower with a classifier
// (labels × hidden + labels); the tensors their loss does not reach
// (CLIP's post_layernorm, SigLIP's pooling head) train nothing.
func TestVisionTowerClassifier(t *testing.T) {
	const tower = `"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
		"image_size": 224, "patch_size": 16, "num_labels": 1000`
	for _, c := range []struct {
		config, unused string
		params         int64 // model_info.params of the measured rows (testdata/measured/cpu)
	}{
		{`{"model_type": "clip_vision_model", "architectures": ["CLIPForImageClassification"], ` + tower + `}`,
			"vision_model.post_layernorm.", 649_704},
		{`{"model_type": "siglip_vision_model", "architectures": ["SiglipForImageClassification"], ` + tower + `}`,
			"vision_model.head.", 847_464},
	} {
		s, err := FromHFConfig(strings.NewReader(c.config))
		require.NoError(t, err)
		require.Equal(t, HeadImageCls, s.Head)
		require.EqualValues(t, c.params, s.Params())
		unused := int64(0)
		for _, x := range s.Tensors() {
			n, err := x.Elems()
			require.NoError(t, err)
			if s.FrozenByModel(x.Name) {
				require.True(t, strings.HasPrefix(x.Name, c.unused), x.Name)
				unused += n
			}
		}
		require.Positive(t, unused)
		require.EqualValues(t, c.params-unused, Finetune{Model: s}.TrainableParams())
	}
}

// TestLlavaLastVisionLayer: vision_feature_layer -2 leaves the tower's
// last layer without a gradient, and no other.
func TestLlavaLastVisionLayer(t *testing.T) {
	s, ok := Lookup("llava-1.5-7b")
	require.True(t, ok)
	require.True(t, s.FrozenByModel("vision_tower.vision_model.encoder.layers.23.mlp.fc1.weight"))
	require.True(t, s.FrozenByModel("vision_tower.vision_model.post_layernorm.weight"))
	require.False(t, s.FrozenByModel("vision_tower.vision_model.encoder.layers.22.mlp.fc1.weight"))
	require.False(t, s.FrozenByModel("vision_tower.vision_model.encoder.layers.2.mlp.fc1.weight"))
	require.False(t, s.FrozenByModel("language_model.model.layers.23.mlp.up_proj.weight"))
}
