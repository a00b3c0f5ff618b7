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

type oracleRun struct {
	Optimizer  string           `json:"optimizer"`
	DType      string           `json:"dtype"`
	ByDevice   map[string]int64 `json:"by_device"`
	StateBytes []int64          `json:"state_bytes"`
}

// oracleInventory is a real model's parameter list (name, shape) with one
// run per optimizer and dtype, on torch's meta device: state bytes per
// parameter, and by device ("cpu" for the step counters torch hosts on
// the CPU, "meta" for what would be on the accelerator).
type oracleInventory struct {
	Model  string      `json:"model"`
	Params [][2]any    `json:"params"`
	Runs   []oracleRun `json:"runs"`
}

type oracleOutput struct {
	TorchVersion string            `json:"torch_version"`
	Inventories  []oracleInventory `json:"inventories"`
	Cases        []oracleCase      `json:"cases"`
}

func loadOracle(t *testing.T) oracleOutput {
	t.Helper()
	raw, err := os.ReadFile(oracleFile)
	require.NoError(t, err)
	var out oracleOutput
	require.NoError(t, json.Unmarshal(raw, &out))
	require.Equal(t, "1.13.0a0", out.TorchVersion)
	return out
}

// TestOracleInventories compares State, Total and the host/device split
// with torch 1.13 on every parameter of BERT-large (335,141,888
// parameters) and T5-base (222,903,552), in fp32 and bf16.
func TestOracleInventories(t *testing.T) {
	t.Parallel()
	out := loadOracle(t)
	require.Len(t, out.Inventories, 2)
	wantParams := map[string]int64{"bert-large-uncased": 335_141_888, "t5-base": 222_903_552}
	opts := oracleOptimizers()
	for _, inv := range out.Inventories {
		var shapes [][]int64
		var names []string
		var count int64
		for _, p := range inv.Params {
			name, _ := p[0].(string)
			dims, _ := p[1].([]any)
			shape := make([]int64, len(dims))
			n := int64(1)
			for i, d := range dims {
				f, _ := d.(float64)
				shape[i] = int64(f)
				n *= shape[i]
			}
			names, shapes = append(names, name), append(shapes, shape)
			count += n
		}
		require.Equal(t, wantParams[inv.Model], count, "%s parameter count", inv.Model)
		for _, run := range inv.Runs {
			opt, ok := opts[run.Optimizer]
			require.True(t, ok, "no Go optimizer for %q", run.Optimizer)
			t.Run(inv.Model+"/"+run.Optimizer+"/"+run.DType, func(t *testing.T) {
				t.Parallel()
				d, err := gpumem.ParseDType(run.DType)
				require.NoError(t, err)
				require.Len(t, run.StateBytes, len(shapes))
				ts := make([]gpumem.Tensor, len(shapes))
				var want int64
				for i := range shapes {
					ts[i] = gpumem.Tensor{Name: names[i], Shape: shapes[i], DType: d}
					got, err := opt.State(ts[i])
					require.NoError(t, err)
					if int64(got) != run.StateBytes[i] {
						t.Errorf("%v.State(%s %v %s) = %d, want %d (oracle)", opt, names[i], shapes[i], d, got, run.StateBytes[i])
					}
					want += run.StateBytes[i]
				}
				bd, err := Describe(opt, ts)
				require.NoError(t, err)
				if int64(bd.State) != want || int64(bd.Host) != run.ByDevice["cpu"] || int64(bd.Device) != run.ByDevice["meta"] {
					t.Errorf("Describe(%v, %s): state %d host %d device %d, want %d, %d, %d (oracle)",
						opt, inv.Model, bd.State, bd.Host, bd.Device, want, run.ByDevice["cpu"], run.ByDevice["meta"])
				}
			})
		}
	}
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
	out := loadOracle(t)
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
