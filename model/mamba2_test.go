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

// TestSSMParams compares the inventories of Mamba2ForCausalLM and
// JambaForCausalLM with the parameter counts and shapes of transformers'
// own classes at the same configs (testdata/oracle/ssm_params.json,
// tools/oracle/ssm_params.py). At JambaConfig's defaults (Jamba-v0.1's)
// the count is 51,570,323,328, 12,110,311,296 active per token: the
// model card's "52B total, 12B active" and the Hub's 51.6B.
func TestSSMParams(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/oracle/ssm_params.json")
	require.NoError(t, err)
	var doc struct {
		Cases []struct {
			Family     string
			Config     map[string]any
			Parameters int64
			Active     int64 `json:"active_parameters"`
			Tensors    int
			Shapes     map[string][]int64
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	n := 0
	for _, c := range doc.Cases {
		n++
		cfg := map[string]any{"model_type": c.Family}
		for k, v := range c.Config {
			cfg[k] = v
		}
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		s, err := FromHFConfig(strings.NewReader(string(b)))
		require.NoError(t, err)
		assert.Equal(t, c.Parameters, s.Params(), "%v", c.Config)
		if c.Active > 0 {
			assert.Equal(t, c.Active, s.ActiveParams(), "%v", c.Config)
		}
		assert.Equal(t, c.Tensors, len(s.Tensors()), "%v", c.Config)
		got := map[string][]int64{}
		for _, tn := range s.Tensors() {
			got[tn.Name] = tn.Shape
		}
		for name, shape := range c.Shapes {
			assert.Equal(t, shape, got[name], name)
		}
	}
	assert.Equal(t, 8, n)
}

func TestMamba2Config(t *testing.T) {
	t.Parallel()
	s, err := FromHFConfig(strings.NewReader(`{"model_type": "mamba2", "hidden_size": 96, "num_hidden_layers": 3,
		"vocab_size": 1000, "state_size": 16, "num_heads": 12, "head_dim": 16, "n_groups": 2}`))
	require.NoError(t, err)
	// Mamba2Cache: 3 layers × batch 4 × (conv_dim (192 + 2·2·16) × 4 +
	// 12 heads × 16 × 16) values in bf16.
	st, err := s.MambaState(4, gpumem.BF16)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(3*4*(256*4+12*16*16)*2), st)
	// The fused kernels by hand, bf16, batch 2 × 8 tokens (T = 16), h = 96,
	// I = 192, D = 256, P_in = 460, G = 2: the norm 4·16·96 + 4·16 +
	// 2·2·16·96 = 12,352; zxbcdt 2·16·460 = 14,720; out_x 2·16·192 =
	// 6,144; rstd 4·16·2 = 128; A 8·12 = 96: 33,440.
	a, err := s.Activations(Workload{Batch: 2, SeqLen: 8, DType: gpumem.BF16, Train: true})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(33_440), a.Layers[0].Saved)
	_, err = s.Activations(Workload{Batch: 2, SeqLen: 8, DType: gpumem.BF16, Train: true, Checkpointing: SelectiveCheckpointing})
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)
	var fe *gpumem.FieldError
	_, err = FromHFConfig(strings.NewReader(`{"model_type": "mamba2", "hidden_size": 96, "num_heads": 10, "head_dim": 16}`))
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config.num_heads", fe.Field)
	_, err = FromHFConfig(strings.NewReader(`{"model_type": "mamba2", "hidden_size": 96, "num_heads": 12, "head_dim": 16, "n_groups": 5}`))
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config.n_groups", fe.Field)
}

// TestMamba2Oracle holds the sequential Mamba-2 kernel
// (Mamba2Mixer.torch_forward) to the bytes transformers' own
// Mamba2ForCausalLM saved per block on the CPU
// (testdata/oracle/mamba2.json, tools/oracle/mamba.py --mamba2).
func TestMamba2Oracle(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/oracle/mamba2.json")
	require.NoError(t, err)
	var doc struct {
		Cases []struct {
			Config struct {
				Batch, Seq, Hidden, State, Expand, Conv, Layers, Vocab, Heads, Groups, Chunk int64
				HeadDim                                                                      int64 `json:"head_dim"`
				DType                                                                        string
			}
			Saved ssmOracleSaved
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Len(t, doc.Cases, 6)
	for _, c := range doc.Cases {
		g := c.Config
		cfg := fmt.Sprintf(`{"model_type": "mamba2", "hidden_size": %d, "num_hidden_layers": %d, "vocab_size": %d,
			"state_size": %d, "expand": %d, "conv_kernel": %d, "num_heads": %d, "head_dim": %d, "n_groups": %d, "chunk_size": %d}`,
			g.Hidden, g.Layers, g.Vocab, g.State, g.Expand, g.Conv, g.Heads, g.HeadDim, g.Groups, g.Chunk)
		// The fused kernels (the default) save far less: no chunk
		// contractions, states or fp32 copies.
		checkSSMOracle(t, cfg, g.Batch, g.Seq, g.DType, c.Saved, fmt.Sprintf("b%d l%d G%d %s", g.Batch, g.Seq, g.Groups, g.DType))
	}
}

// TestJambaOracle holds Jamba's layers under the sequential kernel to
// the bytes transformers' own JambaForCausalLM saved per layer on the
// CPU (testdata/oracle/jamba.json, tools/oracle/mamba.py --jamba):
// Mamba layers with a gated MLP and with the MoE block in every case,
// attention layers with eager attention (the CPU's SDPA is not the CUDA
// kernel the model describes), the final norm and the head.
func TestJambaOracle(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/oracle/jamba.json")
	require.NoError(t, err)
	var doc struct {
		Cases []struct {
			Config struct {
				Batch, Seq, Hidden, Intermediate, Heads, Experts, Active, State, Conv, Expand, Vocab, Layers int64
				KVHeads                                                                                      int64 `json:"kv_heads"`
				ExpertOffset                                                                                 int64 `json:"expert_offset"`
				DTRank                                                                                       int64 `json:"dt_rank"`
				DType, Attention                                                                             string
			}
			Saved struct {
				Layers    []int64
				FinalNorm int64 `json:"final_norm"`
				Head      int64
			}
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Len(t, doc.Cases, 8)
	for _, c := range doc.Cases {
		g := c.Config
		cfg := fmt.Sprintf(`{"model_type": "jamba", "hidden_size": %d, "intermediate_size": %d, "num_hidden_layers": %d,
			"num_attention_heads": %d, "num_key_value_heads": %d, "num_experts": %d, "num_experts_per_tok": %d,
			"expert_layer_period": 2, "expert_layer_offset": %d, "attn_layer_period": 2, "attn_layer_offset": 1,
			"mamba_d_state": %d, "mamba_d_conv": %d, "mamba_expand": %d, "mamba_dt_rank": %d, "vocab_size": %d}`,
			g.Hidden, g.Intermediate, g.Layers, g.Heads, g.KVHeads, g.Experts, g.Active, g.ExpertOffset, g.State, g.Conv,
			g.Expand, g.DTRank, g.Vocab)
		s, err := FromHFConfig(strings.NewReader(cfg))
		require.NoError(t, err)
		dt := gpumem.FP32
		if g.DType == "bf16" {
			dt = gpumem.BF16
		}
		a, err := s.Activations(Workload{Batch: g.Batch, SeqLen: g.Seq, DType: dt, Train: true, SSMKernel: SequentialSSM})
		require.NoError(t, err)
		byKind := map[string]gpumem.Bytes{}
		for _, l := range a.Layers {
			byKind[l.Kind] = l.Saved
		}
		name := fmt.Sprintf("b%d %s %s offset %d", g.Batch, g.DType, g.Attention, g.ExpertOffset)
		for i, got := range c.Saved.Layers {
			kind := "mamba"
			if s.JambaAttention(int64(i)) {
				if g.Attention != "eager" {
					continue
				}
				kind = "attention"
			}
			if s.jambaMoE(int64(i)) {
				kind += "-moe"
			}
			require.Contains(t, byKind, kind, name)
			assert.Equal(t, gpumem.Bytes(got), byKind[kind], "%s layer %d (%s)", name, i, kind)
		}
		assert.Equal(t, gpumem.Bytes(c.Saved.FinalNorm), a.FinalNorm, name)
		assert.Equal(t, gpumem.Bytes(c.Saved.Head), a.Head, "%s head", name)
	}
}
