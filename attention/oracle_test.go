package attention_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
)

// oracleCase is one configuration measured by testdata/eager_oracle.py.
type oracleCase struct {
	Batch       int     `json:"batch"`
	Heads       int     `json:"heads"`
	KVHeads     int     `json:"kv_heads"`
	QueryLen    int     `json:"query_len"`
	KeyLen      int     `json:"key_len"`
	HeadDim     int     `json:"head_dim"`
	DType       string  `json:"dtype"`
	SoftmaxFP32 bool    `json:"softmax_fp32"`
	Dropout     float64 `json:"dropout"`
	Mask4D      bool    `json:"mask4d"`
	ExpandKV    bool    `json:"expand_kv"`
	Saved       int64   `json:"saved_bytes"`
	Forward     int64   `json:"forward_peak_bytes"`
	Backward    int64   `json:"backward_peak_bytes"`
}

func loadOracle(t *testing.T) []oracleCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/eager_oracle.json")
	require.NoError(t, err)
	var doc struct {
		Source string       `json:"source"`
		Cases  []oracleCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NotEmpty(t, doc.Cases)
	return doc.Cases
}

func (c oracleCase) model() (attention.Kernel, attention.Shape) {
	dt, _ := gpumem.ParseDType(c.DType)
	s := attention.Shape{Batch: c.Batch, Heads: c.Heads, KVHeads: c.KVHeads, QueryLen: c.QueryLen, KeyLen: c.KeyLen,
		HeadDim: c.HeadDim, DType: dt, Dropout: c.Dropout}
	k := attention.Eager{SoftmaxFP32: c.SoftmaxFP32, CastBeforeSoftmax: true, CPUDropout: true, ExpandKV: c.ExpandKV, Mask4D: c.Mask4D}
	return k, s
}

// TestEagerOracle compares Eager with the CPU oracle
// (testdata/eager_oracle.py, torch 1.13 on CPU, 64 configurations of
// dtype, fp32 softmax, dropout, 4-D mask and GQA expansion). The oracle
// counts, on top of the model, an 8-byte 0-dim double saved by
// "* scaling" (a CPU wrapped number, not device memory) and a few bytes
// of scalar temporaries, so saved bytes and peaks must agree within 16
// bytes. One family is excused: bf16 with a bf16 softmax and dropout,
// where torch's CPU bernoulli and bf16 softmax backward allocate fp32
// scratch that CUDA's fused kernels do not; there the model may be up
// to 30% under the CPU measurement.
func TestEagerOracle(t *testing.T) {
	t.Parallel()
	for _, c := range loadOracle(t) {
		k, s := c.model()
		f := figsOf(t, k, s)
		where := fmt.Sprintf("%+v", c)
		assert.InDelta(t, c.Saved, int64(f.saved), 16, "Saved %s", where)
		cpuScratch := c.DType == "bf16" && !c.SoftmaxFP32 && c.Dropout > 0
		if cpuScratch {
			assert.InEpsilon(t, c.Forward, int64(f.fwd), 0.30, "Forward %s", where)
			assert.InEpsilon(t, c.Backward, int64(f.bwd), 0.30, "Backward %s", where)
			continue
		}
		assert.InDelta(t, c.Forward, int64(f.fwd), 16, "Forward %s", where)
		assert.InDelta(t, c.Backward, int64(f.bwd), 16, "Backward %s", where)
	}
}
