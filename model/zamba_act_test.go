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

// zambaOracle is testdata/oracle/zamba.json (tools/oracle/mamba.py
// --zamba): per-layer saved bytes of transformers' own ZambaForCausalLM
// and Zamba2ForCausalLM trained on the CPU without the kernels.
type zambaOracle struct {
	Cases []struct {
		Config struct {
			Arch                                                 string
			Batch, Seq, Hidden, Intermediate, Heads, State, Conv int64
			Expand, Groups, Chunk, Vocab, Layers                 int64
			KVHeads                                              int64 `json:"kv_heads"`
			MambaHeads                                           int64 `json:"mamba_heads"`
			DTRank                                               int64 `json:"dt_rank"`
			AdapterRank                                          int64 `json:"adapter_rank"`
			AttnAdapter                                          bool  `json:"attn_adapter"`
			Types                                                []string
			DType, Attention                                     string
		}
		Saved struct {
			Layers    []int64
			FinalNorm int64 `json:"final_norm"`
			Head      int64
		}
	}
}

func (o zambaOracle) spec(t *testing.T, i int) Spec {
	g := o.Cases[i].Config
	var cfg string
	if g.Arch == "zamba" {
		cfg = fmt.Sprintf(`{"model_type": "zamba", "hidden_size": %d, "intermediate_size": %d, "num_hidden_layers": %d,
			"num_attention_heads": %d, "num_key_value_heads": %d, "n_mamba_heads": %d, "mamba_d_state": %d,
			"mamba_d_conv": %d, "mamba_expand": %d, "mamba_dt_rank": %d, "attn_layer_period": 6, "attn_layer_offset": 4,
			"vocab_size": %d}`, g.Hidden, g.Intermediate, g.Layers, g.Heads, g.KVHeads, g.MambaHeads, g.State, g.Conv,
			g.Expand, g.DTRank, g.Vocab)
	} else {
		types, err := json.Marshal(g.Types)
		require.NoError(t, err)
		cfg = fmt.Sprintf(`{"model_type": "zamba2", "hidden_size": %d, "intermediate_size": %d, "num_hidden_layers": %d,
			"layers_block_type": %s, "num_attention_heads": %d, "num_key_value_heads": %d, "n_mamba_heads": %d,
			"mamba_d_state": %d, "mamba_d_conv": %d, "mamba_expand": %d, "mamba_ngroups": %d, "chunk_size": %d,
			"adapter_rank": %d, "use_shared_attention_adapter": %t, "vocab_size": %d}`, g.Hidden, g.Intermediate,
			g.Layers, types, g.Heads, g.KVHeads, g.MambaHeads, g.State, g.Conv, g.Expand, g.Groups, g.Chunk,
			g.AdapterRank, g.AttnAdapter, g.Vocab)
	}
	s, err := FromHFConfig(strings.NewReader(cfg))
	require.NoError(t, err)
	return s
}

func loadZambaOracle(t *testing.T) zambaOracle {
	raw, err := os.ReadFile("../testdata/oracle/zamba.json")
	require.NoError(t, err)
	var o zambaOracle
	require.NoError(t, json.Unmarshal(raw, &o))
	return o
}

// TestZambaOracle holds Zamba's and Zamba2's layers under the sequential
// kernel to the bytes transformers' own models saved per layer on the
// CPU (testdata/oracle/zamba.json): the Mamba layers in every case, the
// hybrid layer (shared block, linear, Mamba decoder) with eager attention
// (the CPU's SDPA is not the CUDA kernel the model describes), the final
// norm and the head.
func TestZambaOracle(t *testing.T) {
	t.Parallel()
	o := loadZambaOracle(t)
	require.Len(t, o.Cases, 12)
	n := 0
	for i, c := range o.Cases {
		g := c.Config
		s := o.spec(t, i)
		dt := gpumem.FP32
		if g.DType == "bf16" {
			dt = gpumem.BF16
		}
		att := Eager
		if g.Attention == "sdpa" {
			att = SDPA
		}
		a, err := s.Activations(Workload{Batch: g.Batch, SeqLen: g.Seq, DType: dt, Train: true, SSMKernel: SequentialSSM,
			Attention: att, Backend: CPU})
		require.NoError(t, err)
		byKind := map[string]gpumem.Bytes{}
		for _, l := range a.Layers {
			byKind[l.Kind] = l.Saved
		}
		name := fmt.Sprintf("%s b%d %s %s adapter %t", g.Arch, g.Batch, g.DType, g.Attention, g.AttnAdapter)
		for j, got := range c.Saved.Layers {
			kind := s.LayerTypes[j]
			if kind == "hybrid" && g.Attention != "eager" {
				continue
			}
			require.Contains(t, byKind, kind, name)
			assert.Equal(t, gpumem.Bytes(got), byKind[kind], "%s layer %d (%s)", name, j, kind)
			n++
		}
		assert.Equal(t, gpumem.Bytes(c.Saved.FinalNorm), a.FinalNorm, name)
		assert.Equal(t, gpumem.Bytes(c.Saved.Head), a.Head, "%s head", name)
	}
	assert.Equal(t, 44, n)
}
