package model

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type mmditOracleCase struct {
	Config struct {
		Arch       string  `json:"arch"`
		Batch      int64   `json:"batch"`
		Latent     int64   `json:"latent"`
		Text       int64   `json:"text"`
		Heads      int64   `json:"heads"`
		HeadDim    int64   `json:"head_dim"`
		Guidance   bool    `json:"guidance"`
		InChannels int64   `json:"in_channels"`
		JointDim   int64   `json:"joint_dim"`
		PooledDim  int64   `json:"pooled_dim"`
		Layers     int64   `json:"layers"`
		Single     int64   `json:"single_layers"`
		QKNorm     *string `json:"qk_norm"`
		Dual       []int64 `json:"dual"`
		PosMax     int64   `json:"pos_max"`
		DType      string  `json:"dtype"`
		LoRA       int64   `json:"lora"`
	} `json:"config"`
	Saved struct {
		CUDA struct {
			Double  []int64 `json:"double"`
			Single  []int64 `json:"single"`
			Embed   int64   `json:"embed"`
			NormOut int64   `json:"norm_out"`
			Head    int64   `json:"head"`
		} `json:"cuda"`
	} `json:"saved"`
}

// mmditOracleSpec builds the oracle case's transformer from its config
// as diffusers' config.json would name it.
func mmditOracleSpec(t *testing.T, c mmditOracleCase) Spec {
	k := c.Config
	var js string
	if k.Arch == "flux" {
		js = fmt.Sprintf(`{"_class_name": "FluxTransformer2DModel", "patch_size": 1, "in_channels": %d,
			"num_layers": %d, "num_single_layers": %d, "attention_head_dim": %d, "num_attention_heads": %d,
			"joint_attention_dim": %d, "pooled_projection_dim": %d, "guidance_embeds": %t}`,
			k.InChannels, k.Layers, k.Single, k.HeadDim, k.Heads, k.JointDim, k.PooledDim, k.Guidance)
	} else {
		qk := "null"
		if k.QKNorm != nil {
			qk = `"` + *k.QKNorm + `"`
		}
		dual, _ := json.Marshal(k.Dual)
		js = fmt.Sprintf(`{"_class_name": "SD3Transformer2DModel", "sample_size": %d, "patch_size": 2, "in_channels": %d,
			"num_layers": %d, "attention_head_dim": %d, "num_attention_heads": %d, "joint_attention_dim": %d,
			"caption_projection_dim": %d, "pooled_projection_dim": %d, "out_channels": %d, "pos_embed_max_size": %d,
			"qk_norm": %s, "dual_attention_layers": %s}`,
			k.Latent, k.InChannels, k.Layers, k.HeadDim, k.Heads, k.JointDim, k.Heads*k.HeadDim, k.PooledDim,
			k.InChannels, k.PosMax, qk, dual)
	}
	s, err := FromHFConfig(strings.NewReader(js))
	require.NoError(t, err)
	return s
}

// TestMMDiTOracle holds the training walk to every part of diffusers'
// own Flux and SD3 transformers as tools/oracle/mmdit.py measured them
// (testdata/oracle/mmdit.json): full training and LoRA on the scripts'
// targets, fp32 and bf16, one and two samples, rotary tables, qk_norm
// and a dual-attention layer. The CPU's flash kernel leaves the
// logsumexp unpadded (cpuLSE); the shared temb and rope tables count
// in the first block, as the oracle attributes them.
func TestMMDiTOracle(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/oracle/mmdit.json")
	require.NoError(t, err)
	var f struct {
		Cases []mmditOracleCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &f))
	require.Len(t, f.Cases, 12)
	for _, c := range f.Cases {
		k := c.Config
		name := fmt.Sprintf("%s-%s-b%d-lat%d-lora%d", k.Arch, k.DType, k.Batch, k.Latent, k.LoRA)
		t.Run(name, func(t *testing.T) {
			s := mmditOracleSpec(t, c)
			dt := gpumem.FP32
			if k.DType == "bf16" {
				dt = gpumem.BF16
			}
			// The oracle's latent side is the transformer's input: Flux's
			// packed tokens come from a latent twice as wide.
			w := DiffusionWorkload{Batch: k.Batch, Height: k.Latent, Width: k.Latent, TextTokens: k.Text, DType: dt,
				Attention: SDPA, Train: true, LoRARank: k.LoRA, cpuLSE: true}
			p, err := s.mmditParts(w)
			require.NoError(t, err)
			want := c.Saved.CUDA
			assert.Equal(t, want.Embed, p.embed, "embed")
			assert.Equal(t, want.Double, p.double, "double-stream blocks")
			if k.Arch == "flux" {
				assert.Equal(t, want.Single, p.single, "single-stream blocks")
			}
			assert.Equal(t, want.NormOut, p.normOut, "norm_out")
			assert.Equal(t, want.Head, p.head, "head")
		})
	}
}
