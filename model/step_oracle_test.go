package model_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// TestStepPeakOracle composes whole training steps with budget.Estimate
// and compares them with the CPU profiler's peak of live bytes over
// forward and backward that tools/oracle/activations.py recorded
// (profiler_peak_bytes: activations, logits, loss and the parameters'
// gradients, relative to the weights and inputs live before). Every fp32
// grid point without non-reentrant checkpointing (fp32: the CPU/CUDA
// differences of 16-bit LayerNorm statistics do not arise): an fp32
// job with gradients and no optimizer step, eager attention, the logits
// held through backward (the script keeps `logits, loss = model(...)`),
// the estimate less its weights, buffers and workspace and less the
// 512-byte rounding of the gradients when all of them are counted.
// Measured: 43 points, ratio median 1.00, range 0.93–1.20 (composed as
// before these mechanisms were modelled: median 1.05, range 0.70–1.34;
// tied GPT-2, BERT and Whisper steps were 15–30% under). What stays
// high is full checkpointing (its recompute is composed on every block
// input) and the MoE router's bookkeeping.
func TestStepPeakOracle(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "oracle", "activations.json"))
	require.NoError(t, err)
	var f struct {
		Cases []struct {
			Saved struct {
				Peak int64 `json:"profiler_peak_bytes"`
			} `json:"saved"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &f))
	cases := loadOracle(t)
	require.Len(t, f.Cases, len(cases))
	var ratios []float64
	for i, c := range cases {
		cfg := c.Config
		// T5's grid reads an encoder length apart from the decoder's,
		// which budget.Job does not take; vision encoders have no
		// logits to hold.
		if cfg.DType != "fp32" || cfg.Arch == "t5" || cfg.Arch == "vit" || cfg.Arch == "clip" || cfg.Ckpt == "nonreentrant" {
			continue
		}
		name := fmt.Sprintf("%d/%s%s/%s/p%g/b%d/s%d", i, cfg.Arch, cfg.Variant, cfg.Ckpt, cfg.Dropout, cfg.Batch, cfg.Seq)
		s, w := oracleSpec(t, c)
		m, err := budget.ModelOf(s)
		require.NoError(t, err, name)
		j := budget.Job{Model: m, Mode: budget.Training, Precision: budget.FP32, Gradients: budget.NoStep, Attention: model.Eager,
			Batch: int(w.Batch), SeqLen: int(w.SeqLen), Dropout: w.Dropout, Checkpointing: w.Checkpointing, KeepLogits: true}
		b, err := budget.Estimate(j)
		require.NoError(t, err, name)
		est := int64(b.Allocated() - b.Weights - b.Buffers - b.Workspace)
		ts, err := model.Finetune{Model: s}.Tensors()
		require.NoError(t, err)
		var pad int64
		for _, tt := range ts {
			n, _ := tt.Elems()
			pad += (4*n+511)/512*512 - 4*n
		}
		if int64(b.Gradients) >= 4*s.Params() {
			est -= pad
		}
		r := float64(est) / float64(f.Cases[i].Saved.Peak)
		require.True(t, r >= 0.9 && r <= 1.25, "%s: estimate %d, measured %d (%.3f)", name, est, f.Cases[i].Saved.Peak, r)
		ratios = append(ratios, r)
	}
	require.Len(t, ratios, 43)
	slices.Sort(ratios)
	med := ratios[len(ratios)/2]
	require.True(t, med >= 0.97 && med <= 1.03, "median ratio %.3f", med)
	t.Logf("%d points: ratio median %.3f, range %.3f–%.3f", len(ratios), med, ratios[0], ratios[len(ratios)-1])
}
