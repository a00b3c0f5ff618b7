package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDiffusersStructure checks tensor counts and shapes of the Stable
// Diffusion components against published module inventories.
func TestDiffusersStructure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		tensors int
		source  string
	}{
		// "StableDiffusionXL Base : 레이어 수: 1680" and "VAE : 레이어 수:
		// 248" count named parameters; 686 is the SD 1.5 and 2.x UNet
		// schema's tensor count ("Assert.Equal(686, schema.Count)");
		// ViT-bigG's text encoder has 517 parameter tensors
		// ("(ClipTextConfig.Giant, 517, 694659840L)").
		{"sdxl-unet", 1680, "SDXL model summary"},
		{"sdxl-vae", 248, "SDXL model summary"},
		{"sd-1.5-unet", 686, "SD 1.5 UNet schema"},
		{"sd-2.1-unet", 686, "SD 2 UNet schema"},
		{"sdxl-text-encoder-2", 517, "CLIP bigG schema"},
		// Not a published count: FluxTransformer2DModel's definition, 19
		// double-stream blocks of 32 tensors, 38 single-stream of 14, and
		// 20 outside them.
		{"flux.1-dev-transformer", 19*32 + 38*14 + 20, "FluxTransformer2DModel"},
	} {
		s, ok := Lookup(tc.name)
		require.True(t, ok, tc.name)
		assert.Equal(t, tc.tensors, len(s.Tensors()), "%s (%s)", tc.name, tc.source)
	}
	shapes := map[string]map[string][]int64{
		"sd-1.5-unet": {
			"conv_in.weight": {320, 4, 3, 3},
			"down_blocks.0.attentions.0.proj_in.weight":                          {320, 320, 1, 1},
			"down_blocks.0.attentions.1.transformer_blocks.0.attn2.to_k.weight":  {320, 768},
			"down_blocks.1.resnets.0.conv_shortcut.weight":                       {640, 320, 1, 1},
			"up_blocks.1.resnets.2.conv1.weight":                                 {1280, 1920, 3, 3},
			"up_blocks.3.attentions.2.transformer_blocks.0.ff.net.0.proj.weight": {2560, 320},
			"mid_block.attentions.0.transformer_blocks.0.attn1.to_out.0.bias":    {1280},
			"time_embedding.linear_2.weight":                                     {1280, 1280},
			"conv_out.weight":                                                    {4, 320, 3, 3},
		},
		"sdxl-unet": {
			"add_embedding.linear_1.weight":                                     {1280, 2816},
			"down_blocks.2.attentions.1.transformer_blocks.9.attn2.to_v.weight": {1280, 2048},
			"up_blocks.0.attentions.2.transformer_blocks.9.norm3.weight":        {1280},
			"up_blocks.0.attentions.0.proj_in.weight":                           {1280, 1280},
			"up_blocks.2.resnets.0.conv1.weight":                                {320, 960, 3, 3},
		},
		"sdxl-vae": {
			"encoder.conv_out.weight":                    {8, 512, 3, 3},
			"decoder.up_blocks.3.resnets.0.conv1.weight": {128, 256, 3, 3},
			"decoder.mid_block.attentions.0.to_q.weight": {512, 512},
			"quant_conv.weight":                          {8, 8, 1, 1},
		},
		"sdxl-text-encoder-2": {"text_projection.weight": {1280, 1280}},
		"flux.1-dev-transformer": {
			"x_embedder.weight": {3072, 64},
			"transformer_blocks.18.norm1_context.linear.weight": {18432, 3072},
			"single_transformer_blocks.37.proj_out.weight":      {3072, 15360},
			"time_text_embed.guidance_embedder.linear_1.weight": {3072, 256},
			"proj_out.weight": {64, 3072},
		},
	}
	for name, want := range shapes {
		s, _ := Lookup(name)
		got := map[string][]int64{}
		for _, tn := range s.Tensors() {
			got[tn.Name] = tn.Shape
		}
		for k, v := range want {
			assert.Equal(t, v, got[k], "%s %s", name, k)
		}
	}
	// SD 1.5's text encoder is a CLIPTextModel: no projection.
	s, _ := Lookup("sd-1.5-text-encoder")
	for _, tn := range s.Tensors() {
		assert.NotContains(t, tn.Name, "text_projection")
	}
}

// TestDiffusersLoRA checks the adapters of the diffusers LoRA scripts
// (target_modules ["to_k", "to_q", "to_v", "to_out.0"]) against a
// published trainable count.
func TestDiffusersLoRA(t *testing.T) {
	t.Parallel()
	s, _ := Lookup("sdxl-unet")
	f := Finetune{Model: s, LoRA: LoRA{Rank: 4}}
	n, err := f.TrainableParams(), f.Validate()
	require.NoError(t, err)
	// SDXL DreamBooth LoRA log: "unet params = 2567463684" then
	// "training lora parameters = 5806080" (rank 4). By hand: 70
	// transformer blocks at 640 and 1280 channels, each 14·r·c + 2·r·2048.
	assert.Equal(t, int64(5_806_080), n)
	// SD 1.5 at rank 4, by the same rule: 16 blocks (5 at 320, 5 at 640,
	// 6 at 1280), 14·4·c + 2·4·768 each: 120,320 + 209,920 + 466,944.
	s, _ = Lookup("sd-1.5-unet")
	n, err = Finetune{Model: s, LoRA: LoRA{Rank: 4}}.TrainableParams(), Finetune{Model: s, LoRA: LoRA{Rank: 4}}.Validate()
	require.NoError(t, err)
	assert.Equal(t, int64(797_184), n)
	// FLUX.1-dev at rank 4 on ["to_k", "to_q", "to_v", "to_out.0"], as
	// the flux-qlora post (huggingface/blog flux-qlora.md) prints it:
	// "trainable params: 4,669,440 || all params: 11,906,077,760". By
	// hand: 19 double-stream blocks with to_q, to_k, to_v, to_out.0 of
	// 3072 (4·4·6144 = 98,304 each) and 38 single-stream blocks with
	// to_q, to_k, to_v (73,728): 1,867,776 + 2,801,664.
	s, _ = Lookup("flux.1-dev-transformer")
	f = Finetune{Model: s, LoRA: LoRA{Rank: 4, Targets: []string{"to_k", "to_q", "to_v", "to_out.0"}}}
	n, err = f.TrainableParams(), f.Validate()
	require.NoError(t, err)
	assert.Equal(t, int64(4_669_440), n)
	assert.Equal(t, int64(11_906_077_760), s.Params()+n)
	// The Flux DreamBooth LoRA script's default targets add the text
	// stream's projections and both feed-forwards: rank 16, 44,826,624.
	f = Finetune{Model: s, LoRA: LoRA{Rank: 16}}
	n, err = f.TrainableParams(), f.Validate()
	require.NoError(t, err)
	assert.Equal(t, int64(19*(8*16*6144+4*16*(3072+12288))+38*3*16*6144), n)
}

func TestDiffusersConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		config, field string
		err           error
	}{
		{`{"_class_name": "UNet2DConditionModel", "block_out_channels": [320, 640, 1280, 1280], "class_embed_type": "timestep"}`, "config.class_embed_type", gpumem.ErrUnsupported},
		{`{"_class_name": "UNet2DConditionModel", "block_out_channels": [320, 640]}`, "config.block_out_channels", gpumem.ErrInvalid},
		{`{"_class_name": "UNet2DConditionModel", "layers_per_block": 0}`, "config.layers_per_block[0]", gpumem.ErrInvalid},
		{`{"_class_name": "UNet2DConditionModel", "block_out_channels": [320, 640, 1280, 1280], "down_block_types": ["SimpleCrossAttnDownBlock2D", "DownBlock2D", "DownBlock2D", "DownBlock2D"]}`, "config.down_block_types[0]", gpumem.ErrUnsupported},
		{`{"_class_name": "UNet2DConditionModel", "block_out_channels": [320, 640, 1280, 1280], "attention_head_dim": 7}`, "config.attention_head_dim[0]", gpumem.ErrInvalid},
		{`{"_class_name": "UNet2DConditionModel", "block_out_channels": [320, 640, 1280, 1280], "transformer_layers_per_block": [1, 2]}`, "config.transformer_layers_per_block", gpumem.ErrInvalid},
		{`{"_class_name": "UNet2DConditionModel", "block_out_channels": [320, 640, 1280, 1280], "addition_embed_type": "text_time"}`, "config.projection_class_embeddings_input_dim", gpumem.ErrInvalid},
		{`{"_class_name": "AutoencoderKL", "block_out_channels": [128, 256], "down_block_types": ["DownEncoderBlock2D"]}`, "config.block_out_channels", gpumem.ErrInvalid},
		{`{"_class_name": "AutoencoderKL", "latent_channels": 0}`, "config.latent_channels", gpumem.ErrInvalid},
		{`{"_class_name": "AutoencoderKL", "block_out_channels": [100]}`, "config.norm_num_groups", gpumem.ErrInvalid},
	} {
		_, err := FromHFConfig(strings.NewReader(tc.config))
		require.Error(t, err, tc.config)
		var fe *gpumem.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		assert.Contains(t, fe.Field, tc.field, tc.config)
		assert.ErrorIs(t, err, tc.err, tc.config)
	}
}

// TestSD3 checks SD3-medium's MMDiT against its published parameter
// count, sum(p.numel() for p in parameters()), which leaves out the
// pos_embed buffer: "transformer ... 2028328000" in an inspection table
// of stable-diffusion-3-medium-diffusers (text_encoder_2 694659840 and
// text_encoder_3 4762310656 in the same table match the catalog's).
func TestSD3(t *testing.T) {
	t.Parallel()
	s, ok := Lookup("sd3-medium-transformer")
	require.True(t, ok)
	n, err := Finetune{Model: s}.TrainableParams(), Finetune{Model: s}.Validate()
	require.NoError(t, err)
	assert.Equal(t, int64(2_028_328_000), n)
	shapes := map[string][]int64{}
	for _, tn := range s.Tensors() {
		shapes[tn.Name] = tn.Shape
	}
	assert.Equal(t, []int64{1, 192 * 192, 1536}, shapes["pos_embed.pos_embed"])
	assert.Equal(t, []int64{3072, 1536}, shapes["transformer_blocks.23.norm1_context.linear.weight"], "the last block's AdaLayerNormContinuous")
	assert.Nil(t, shapes["transformer_blocks.23.attn.to_add_out.weight"], "context_pre_only")
	assert.Equal(t, []int64{1536, 1536}, shapes["transformer_blocks.22.attn.to_add_out.weight"])
	// SD 3.5's dual attention and qk norms.
	d, err := FromHFConfig(strings.NewReader(`{"_class_name": "SD3Transformer2DModel", "num_layers": 3,
		"num_attention_heads": 2, "attention_head_dim": 8, "caption_projection_dim": 16, "qk_norm": "rms_norm",
		"dual_attention_layers": [0]}`))
	require.NoError(t, err)
	names := map[string][]int64{}
	for _, tn := range d.Tensors() {
		names[tn.Name] = tn.Shape
	}
	assert.Equal(t, []int64{9 * 16, 16}, names["transformer_blocks.0.norm1.linear.weight"])
	assert.Equal(t, []int64{16, 16}, names["transformer_blocks.0.attn2.to_q.weight"])
	assert.Equal(t, []int64{8}, names["transformer_blocks.1.attn.norm_added_k.weight"])
	assert.Nil(t, names["transformer_blocks.1.attn2.to_q.weight"])
	_, err = FromHFConfig(strings.NewReader(`{"_class_name": "SD3Transformer2DModel", "dual_attention_layers": [40]}`))
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config.dual_attention_layers[0]", fe.Field)
}
