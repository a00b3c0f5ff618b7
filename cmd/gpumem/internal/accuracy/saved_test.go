package accuracy

import (
	"bufio"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestCPUSaved holds the activation model's saved tensors to the ones
// autograd saved in recorded forwards (testdata/measured/cpu/saved, made
// by tools/measure/saved.py: saved_tensors_hooks over one training
// forward of a grid case): the bytes of every saved storage that is
// neither a parameter nor autocast's cast of one (a 16-bit tensor of a
// weight's shape, which budget counts with the weights) equal the
// model's Activations.Total() less the logits (which the model's output
// holds, not the graph) for the case's workload, to the byte. The cases
// cover the fp32 residual stream under bf16 autocast, LoRA on a frozen
// base (model.FrozenBase), the rotary tables of a training batch, and
// GPT-2's SDPA core fed the cache's k and v.
func TestCPUSaved(t *testing.T) {
	f, err := cpuData.Open("saved/saved-2.6.0.jsonl")
	require.NoError(t, err)
	defer f.Close()
	rows, err := ReadCPU(cpuData, ".")
	require.NoError(t, err)
	byID := map[string]*CPURow{}
	for i := range rows {
		byID[rows[i].ID] = &rows[i]
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	n := 0
	for sc.Scan() {
		var rec struct {
			ID    string `json:"id"`
			Saved []struct {
				Bytes int64   `json:"bytes"`
				DType string  `json:"dtype"`
				Shape []int64 `json:"shape"`
				Param bool    `json:"param"`
			} `json:"saved"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		r := byID[rec.ID]
		require.NotNil(t, r, rec.ID)
		j, err := r.Job.Budget()
		require.NoError(t, err)
		s := j.Model.Spec()
		weights := map[[2]int64]bool{}
		for _, tn := range s.Tensors() {
			if len(tn.Shape) == 2 {
				weights[[2]int64{tn.Shape[0], tn.Shape[1]}] = true
				weights[[2]int64{tn.Shape[1], tn.Shape[0]}] = true
			}
		}
		var got int64
		for _, x := range rec.Saved {
			if x.Param || (x.DType == "bfloat16" && len(x.Shape) == 2 && weights[[2]int64{x.Shape[0], x.Shape[1]}] && r.Job.Precision == "bf16-mixed") {
				continue
			}
			got += x.Bytes
		}
		w := model.Workload{Batch: int64(j.Batch), SeqLen: int64(j.SeqLen), DType: gpumem.FP32, Train: true,
			Attention: j.Attention, Dropout: j.Dropout, Backend: model.CPU, NoAttentionMask: true}
		if r.Job.Precision == "bf16-mixed" {
			w.DType, w.Autocast = gpumem.BF16, true
		}
		if r.Job.LoRARank > 0 {
			w.FrozenBase = model.FrozenBase{Rank: r.Job.LoRARank, Adapted: model.ProjQ | model.ProjV}
		}
		a, err := s.Activations(w)
		require.NoError(t, err)
		want := int64(a.Total() - a.Logits)
		if r.Job.LoRARank > 0 {
			want -= 8 * int64(j.Batch) * int64(j.SeqLen) // a frozen embedding saves no ids (the loop holds them)
		}
		t.Logf("%-72s saved %10d model %10d (%+d)", rec.ID, got, want, want-got)
		assert.Equal(t, got, want, rec.ID)
		n++
	}
	require.NoError(t, sc.Err())
	require.Positive(t, n)
}
