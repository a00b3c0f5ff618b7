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
	HeadChunk   int     `json:"head_chunk"`
	QueryRows   int     `json:"query_rows"`
	NoGrad      bool    `json:"no_grad"`
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
		HeadDim: c.HeadDim, DType: dt, Dropout: c.Dropout, NoGrad: c.NoGrad}
	var k attention.Kernel = attention.Eager{SoftmaxFP32: c.SoftmaxFP32, CastBeforeSoftmax: true, CPUDropout: true, ExpandKV: c.ExpandKV, Mask4D: c.Mask4D}
	switch {
	case c.HeadChunk > 0:
		k = attention.HeadChunked{Heads: c.HeadChunk, Inner: k}
	case c.QueryRows > 0:
		k = attention.QueryChunked{Rows: c.QueryRows, Inner: k}
	}
	return k, s
}

// TestEagerOracle compares Eager, HeadChunked{Eager} and
// QueryChunked{Eager} with the CPU oracle (testdata/eager_oracle.py,
// torch 1.13 on CPU: 64 configurations of dtype, fp32 softmax, dropout,
// 4-D mask and GQA expansion, 36 chunked ones, and 32 forwards under
// torch.no_grad, whole and head-chunked). The oracle counts, on
// top of the model, an 8-byte 0-dim double saved by "* scaling" (a CPU
// wrapped number, not device memory) and a few bytes of scalar
// temporaries, so saved bytes and peaks must agree within 32 bytes, with
// two documented exceptions:
//   - bf16 with a bf16 softmax and dropout: torch's CPU bernoulli and bf16
//     softmax backward allocate fp32 scratch that CUDA's fused kernels do
//     not; the model may be up to 30% under the CPU measurement there;
//   - QueryChunked with three or more blocks: the engine merges each later
//     block's dV into the shared gradient buffer before that block's
//     softmax backward, which the model does not see; the model may be
//     over by up to one whole dV, never under.
func TestEagerOracle(t *testing.T) {
	t.Parallel()
	for _, c := range loadOracle(t) {
		k, s := c.model()
		f := figsOf(t, k, s)
		where := fmt.Sprintf("%+v", c)
		assert.InDelta(t, c.Saved, int64(f.saved), 32, "Saved %s", where)
		switch {
		case c.DType == "bf16" && !c.SoftmaxFP32 && c.Dropout > 0:
			assert.InEpsilon(t, c.Forward, int64(f.fwd), 0.30, "Forward %s", where)
			assert.InEpsilon(t, c.Backward, int64(f.bwd), 0.30, "Backward %s", where)
		case c.QueryRows > 0 && (c.QueryLen+c.QueryRows-1)/c.QueryRows >= 3:
			assert.InDelta(t, c.Forward, int64(f.fwd), 32, "Forward %s", where)
			dv := int64(float64(c.Batch*c.KVHeads*c.KeyLen*c.HeadDim) * s.DType.Bits() / 8)
			assert.GreaterOrEqual(t, int64(f.bwd), c.Backward-32, "Backward %s", where)
			assert.LessOrEqual(t, int64(f.bwd), c.Backward+dv+32, "Backward %s", where)
		default:
			assert.InDelta(t, c.Forward, int64(f.fwd), 32, "Forward %s", where)
			assert.InDelta(t, c.Backward, int64(f.bwd), 32, "Backward %s", where)
		}
	}
}
