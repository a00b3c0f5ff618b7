package model

import (
	"encoding/json"
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
	assert.Equal(t, 4, n)
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
	_, err = s.Activations(Workload{Batch: 1, SeqLen: 8, Train: true})
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)
	var fe *gpumem.FieldError
	_, err = FromHFConfig(strings.NewReader(`{"model_type": "mamba2", "hidden_size": 96, "num_heads": 10, "head_dim": 16}`))
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config.num_heads", fe.Field)
	_, err = FromHFConfig(strings.NewReader(`{"model_type": "mamba2", "hidden_size": 96, "num_heads": 12, "head_dim": 16, "n_groups": 5}`))
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config.n_groups", fe.Field)
}
