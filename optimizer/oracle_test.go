package optimizer

import (
	"encoding/json"
	"os"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// oracleFile is the output of tools/oracle/optimizer_state.py, run with
// Debian's python3-torch 1.13.1 (torch.__version__ "1.13.0a0", CPU): the
// exact bytes of opt.state[p] after one step, per parameter.
const oracleFile = "testdata/oracle/optimizer_state.json"

type oracleSlot struct {
	Key         string `json:"key"`
	Numel       int64  `json:"numel"`
	DType       string `json:"dtype"`
	ElementSize int64  `json:"element_size"`
}

type oracleParam struct {
	Name       string       `json:"name"`
	Shape      []int64      `json:"shape"`
	DType      string       `json:"dtype"`
	Frozen     bool         `json:"frozen"`
	StateBytes int64        `json:"state_bytes"`
	Slots      []oracleSlot `json:"slots"`
}

type oracleCase struct {
	Model     string        `json:"model"`
	Optimizer string        `json:"optimizer"`
	DType     string        `json:"dtype"`
	Params    []oracleParam `json:"params"`
}

type oracleOutput struct {
	TorchVersion string       `json:"torch_version"`
	Cases        []oracleCase `json:"cases"`
}

// oracleOptimizers maps the oracle's optimizer names to the Go values
// that model them in PyTorch 1.13 (for-loop default, RMSprop's int step).
// RefAdafactor is the script's transformers-layout reference.
func oracleOptimizers() map[string]Optimizer {
	return map[string]Optimizer{
		"SGD":                                 SGD{Impl: ForLoop},
		"SGD(momentum=0.9)":                   SGD{Momentum: 0.9, Impl: ForLoop},
		"Adam":                                Adam{Impl: ForLoop},
		"AdamW":                               AdamW{Impl: ForLoop},
		"AdamW(amsgrad=True)":                 AdamW{AMSGrad: true, Impl: ForLoop},
		"Adagrad":                             Adagrad{Impl: ForLoop},
		"RMSprop":                             RMSprop{IntStep: true, Impl: ForLoop},
		"RMSprop(momentum=0.9,centered=True)": RMSprop{Momentum: 0.9, Centered: true, IntStep: true, Impl: ForLoop},
		"RefAdafactor":                        Adafactor{},
		"RefAdafactor(beta1=0.9)":             Adafactor{FirstMoment: true},
	}
}

func TestOracle(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(oracleFile)
	require.NoError(t, err)
	var out oracleOutput
	require.NoError(t, json.Unmarshal(raw, &out))
	require.Equal(t, "1.13.0a0", out.TorchVersion)
	require.Len(t, out.Cases, 40)
	opts := oracleOptimizers()
	for _, c := range out.Cases {
		opt, ok := opts[c.Optimizer]
		require.True(t, ok, "no Go optimizer for oracle case %q", c.Optimizer)
		t.Run(c.Model+"/"+c.Optimizer+"/"+c.DType, func(t *testing.T) {
			t.Parallel()
			var trainable []gpumem.Tensor
			var want int64
			for _, p := range c.Params {
				if p.Frozen {
					if p.StateBytes != 0 {
						t.Errorf("oracle: frozen %s has %d state bytes", p.Name, p.StateBytes)
					}
					continue
				}
				dt, err := gpumem.ParseDType(p.DType)
				require.NoError(t, err)
				tensor := gpumem.Tensor{Name: p.Name, Shape: p.Shape, DType: dt}
				trainable = append(trainable, tensor)
				want += p.StateBytes
				got, err := opt.State(tensor)
				require.NoError(t, err)
				if int64(got) != p.StateBytes {
					t.Errorf("%v.State(%s %v %s) = %d, want %d (oracle)", opt, p.Name, p.Shape, dt, got, p.StateBytes)
				}
				slots, err := opt.(Layout).AppendSlots(nil, tensor)
				require.NoError(t, err)
				if diff := cmp.Diff(oracleSlots(t, p.Slots), slotKeys(slots)); diff != "" {
					t.Errorf("%v slots of %s (-oracle +go):\n%s", opt, p.Name, diff)
				}
			}
			total, err := Total(opt, trainable)
			require.NoError(t, err)
			if int64(total) != want {
				t.Errorf("Total(%v, %s) = %d, want %d (oracle)", opt, c.Model, total, want)
			}
		})
	}
}

type slotKey struct {
	Name  string
	Elems int64
	DType gpumem.DType
}

func oracleSlots(t *testing.T, in []oracleSlot) []slotKey {
	t.Helper()
	out := make([]slotKey, 0, len(in))
	for _, s := range in {
		dt, err := gpumem.ParseDType(s.DType)
		require.NoError(t, err)
		out = append(out, slotKey{s.Key, s.Numel, dt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func slotKeys(in []Slot) []slotKey {
	out := make([]slotKey, 0, len(in))
	for _, s := range in {
		out = append(out, slotKey{s.Name, s.Elems, s.DType})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
