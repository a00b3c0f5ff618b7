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

func TestMamba(t *testing.T) {
	t.Parallel()
	s, ok := Lookup("mamba-130m")
	require.True(t, ok)
	// 242 tensors, as the 130m checkpoint's audit states: 10 per block,
	// the embedding and norm_f (lm_head tied).
	assert.Equal(t, 242, len(s.Tensors()))
	shapes := map[string][]int64{}
	for _, tn := range s.Tensors() {
		shapes[tn.Name] = tn.Shape
	}
	assert.Equal(t, []int64{3072, 768}, shapes["backbone.layers.0.mixer.in_proj.weight"])
	assert.Equal(t, []int64{1536, 1, 4}, shapes["backbone.layers.23.mixer.conv1d.weight"])
	assert.Equal(t, []int64{48 + 32, 1536}, shapes["backbone.layers.5.mixer.x_proj.weight"])
	assert.Equal(t, []int64{1536, 16}, shapes["backbone.layers.5.mixer.A_log"])
	// The generation state: 24 layers × batch × 1536 × (4 + 16) values.
	b, err := s.MambaState(8, gpumem.BF16)
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(24*8*1536*20*2), b)
	// time_step_rank "auto" is ceil(hidden / 16).
	a, err := FromHFConfig(strings.NewReader(`{"model_type": "mamba", "hidden_size": 1000, "num_hidden_layers": 2}`))
	require.NoError(t, err)
	assert.Equal(t, int64(63), a.SSM.DTRank)
	assert.Equal(t, int64(2000), a.Intermediate)
	_, err = FromHFConfig(strings.NewReader(`{"model_type": "mamba", "time_step_rank": "half"}`))
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "config.time_step_rank", fe.Field)
	_, err = s.Activations(Workload{Batch: 1, SeqLen: 16, DType: gpumem.BF16, Train: true, Checkpointing: SelectiveCheckpointing})
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)
	_, err = s.MambaState(0, gpumem.BF16)
	assert.Error(t, err)
}

// TestMambaActivationsByHand checks one block's saved bytes against the
// derivation in model/mamba.go for h = 64, I = 128, N = 16, R = 4,
// batch 2 × 8 tokens (T = 16) in bf16:
//
//	MambaRMSNorm   4·16·64 + 4·16 + 2·16·64          6,208
//	in_proj input  2·16·64                           2,048
//	xz             2·16·256                          8,192
//	x_dbl          2·16·(4 + 32)                     1,152
//	B, C           2·2·16·16                         1,024
//	out            2·16·128                          4,096
//	scan x         4·2·128·1 chunk·32               32,768
//	A              4·128·16                          8,192
//	                                                63,680
func TestMambaActivationsByHand(t *testing.T) {
	t.Parallel()
	s, err := FromHFConfig(strings.NewReader(`{"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2,
		"vocab_size": 100, "time_step_rank": 4}`))
	require.NoError(t, err)
	a, err := s.Activations(Workload{Batch: 2, SeqLen: 8, DType: gpumem.BF16, Train: true})
	require.NoError(t, err)
	require.Len(t, a.Layers, 1)
	assert.Equal(t, gpumem.Bytes(63_680), a.Layers[0].Saved)
	assert.Equal(t, gpumem.Bytes(2*63_680), a.LayersTotal())
	// The head: the logits of 16 tokens × 100 in bf16; norm_f on the
	// fp32 residual stream saves it and its fp32 normalized copy.
	assert.Equal(t, gpumem.Bytes(2*16*100), a.Logits)
	assert.Equal(t, gpumem.Bytes(8*16*64+4*16), a.FinalNorm)
	ck, err := s.Activations(Workload{Batch: 2, SeqLen: 8, DType: gpumem.BF16, Train: true, Checkpointing: FullCheckpointing})
	require.NoError(t, err)
	assert.Equal(t, gpumem.Bytes(4*16*64), ck.Layers[0].Kept, "the fp32 residual input")
}

// TestMambaOracle holds the sequential kernel (MambaMixer.slow_forward)
// to the bytes transformers' own MambaForCausalLM saved per block on the
// CPU (testdata/oracle/mamba.json, tools/oracle/mamba.py), and checks
// that the fused kernel, the default, saves less.
func TestMambaOracle(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/oracle/mamba.json")
	require.NoError(t, err)
	var doc struct {
		Cases []struct {
			Config struct {
				Batch, Seq, Hidden, State, Expand, Conv, Layers, Vocab int64
				DTRank                                                 int64 `json:"dt_rank"`
				DType                                                  string
			}
			Saved ssmOracleSaved
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Len(t, doc.Cases, 8)
	for _, c := range doc.Cases {
		g := c.Config
		cfg := fmt.Sprintf(`{"model_type": "mamba", "hidden_size": %d, "num_hidden_layers": %d, "vocab_size": %d,
			"state_size": %d, "expand": %d, "conv_kernel": %d, "time_step_rank": %d}`,
			g.Hidden, g.Layers, g.Vocab, g.State, g.Expand, g.Conv, g.DTRank)
		checkSSMOracle(t, cfg, g.Batch, g.Seq, g.DType, c.Saved, fmt.Sprintf("b%d l%d h%d %s", g.Batch, g.Seq, g.Hidden, g.DType))
	}
	s, _ := Lookup("mamba-130m")
	_, err = s.Activations(Workload{Batch: 1, SeqLen: 8, Train: true, SSMKernel: numSSMKernels})
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "Workload.SSMKernel", fe.Field)
	k, err := ParseSSMKernel("slow")
	require.NoError(t, err)
	assert.Equal(t, SequentialSSM, k)
	_, err = ParseSSMKernel("pscan")
	require.ErrorAs(t, err, &fe)
}

// ssmOracleSaved is what an oracle case of tools/oracle/mamba.py saved:
// per block, at the final norm and at the head.
type ssmOracleSaved struct {
	Layers    []int64
	FinalNorm int64 `json:"final_norm"`
	Head      int64
}

// checkSSMOracle builds the model of the config JSON cfg, estimates a
// training step of batch × seq tokens in dtype ("fp32", "bf16") under
// the sequential kernel and requires every block, the final norm and the
// head to save what the oracle saw; the fused kernel, the default, must
// save less per block.
func checkSSMOracle(t *testing.T, cfg string, batch, seq int64, dtype string, saved ssmOracleSaved, name string) {
	t.Helper()
	s, err := FromHFConfig(strings.NewReader(cfg))
	require.NoError(t, err)
	dt := gpumem.FP32
	if dtype == "bf16" {
		dt = gpumem.BF16
	}
	w := Workload{Batch: batch, SeqLen: seq, DType: dt, Train: true, SSMKernel: SequentialSSM}
	a, err := s.Activations(w)
	require.NoError(t, err)
	require.Len(t, a.Layers, 1)
	for i, got := range saved.Layers {
		assert.Equal(t, gpumem.Bytes(got), a.Layers[0].Saved, "%s layer %d", name, i)
	}
	assert.Equal(t, gpumem.Bytes(saved.FinalNorm), a.FinalNorm, name)
	assert.Equal(t, gpumem.Bytes(saved.Head), a.Head, "%s head", name)
	w.SSMKernel = FusedSSM
	f, err := s.Activations(w)
	require.NoError(t, err)
	assert.Less(t, f.Layers[0].Saved, a.Layers[0].Saved, name)
}
