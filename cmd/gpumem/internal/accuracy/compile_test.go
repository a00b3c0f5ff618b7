package accuracy

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// TestCPUCompiledSavedSet checks the compiled blocks' saved set against
// the CPU rows directly: for each fp32 row with every decoder layer
// compiled (tools/measure --compile) and its eager twin in the grid, what
// the forward leaves saved (the level at the end of the measured forward
// less the level at its start) falls by exactly what the model's compiled
// blocks save less (model.Compile: 4·T·h per RMSNorm, e·T·I per SwiGLU
// MLP). The attention core is the same CPU kernel in both (the rows'
// sdpa_kernels), so it cancels; bf16 autocast rows are left out, because
// the CPU's math attention kernel saves fp32 copies of q, k and v in
// eager and bf16 ones compiled, which CUDA's kernels do not.
func TestCPUCompiledSavedSet(t *testing.T) {
	type phase struct {
		Phase      string `json:"phase"`
		Start, End int64
	}
	type row struct {
		ID     string  `json:"id"`
		Status string  `json:"status"`
		Job    Job     `json:"job"`
		Phases []phase `json:"phases"`
	}
	saved := func(r row) int64 {
		for _, p := range r.Phases {
			if p.Phase == "forward" {
				return p.End - p.Start
			}
		}
		t.Fatalf("%s: no forward phase", r.ID)
		return 0
	}
	rows := map[string]row{}
	names, err := fs.Glob(cpuData, "*.jsonl")
	require.NoError(t, err)
	for _, name := range names {
		if strings.HasPrefix(name, "validation-") {
			continue
		}
		f, err := cpuData.Open(name)
		require.NoError(t, err)
		require.NoError(t, eachLine(f, func(_ int, b []byte) error {
			var r row
			if err := json.Unmarshal(b, &r); err != nil {
				return err
			}
			rows[r.ID] = r
			return nil
		}))
		f.Close()
	}
	checked := 0
	for id, c := range rows {
		if !strings.Contains(id, "/compile-layers/") || c.Status != "ok" || c.Job.Precision != "fp32" || c.Job.LoRARank > 0 {
			continue
		}
		e, ok := rows[strings.Replace(id, "/compile-layers/", "/", 1)]
		require.True(t, ok, "%s: no eager twin", id)
		j, err := c.Job.Budget()
		require.NoError(t, err, id)
		s := j.Model.Spec()
		w := model.Workload{Batch: int64(c.Job.Batch), SeqLen: int64(*c.Job.Seq), DType: gpumem.FP32, Attention: model.SDPA, Train: true}
		ea, err := s.Activations(w)
		require.NoError(t, err, id)
		w.Compile = model.CompileLayers
		ca, err := s.Activations(w)
		require.NoError(t, err, id)
		assert.Equal(t, int64(ea.LayersTotal()-ca.LayersTotal()), saved(e)-saved(c), "%s: saved bytes the compiled layers drop", id)
		checked++
	}
	require.Positive(t, checked, "compiled fp32 rows with an eager twin")
}
