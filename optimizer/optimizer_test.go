package optimizer

import (
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

func tensor(name string, dt gpumem.DType, shape ...int64) gpumem.Tensor {
	return gpumem.Tensor{Name: name, Shape: shape, DType: dt}
}

// allOptimizers lists one value of every configuration family, for the
// property tests.
func allOptimizers() []Optimizer {
	return []Optimizer{
		SGD{}, SGD{Momentum: 0.9}, SGD{Momentum: 0.9, StateDType: gpumem.BF16, Impl: ForLoop},
		Adam{}, Adam{AMSGrad: true, Impl: ForLoop}, Adam{Impl: Fused}, Adam{Capturable: true, StateDType: gpumem.FP32},
		AdamW{}, AdamW{StateDType: gpumem.BF16, Impl: ForLoop},
		Adam8bit{}, Adam8bit{Paged: true}, Adam8bit{Block: 2048}, Adam8bit{Bits32: true, Paged: true},
		AdamW8bit{}, AdamW8bit{Paged: true, Min8bitSize: 1},
		Lion8bit{}, Lion8bit{Paged: true, Bits32: true},
		Adafactor{}, Adafactor{FirstMoment: true}, Adafactor{Torch: true}, Adafactor{Torch: true, Foreach: true},
		Lion{}, Lion{Foreach: true}, Lion{Triton: true},
		Adagrad{}, Adagrad{Impl: ForLoop}, Adagrad{Impl: Fused},
		RMSprop{}, RMSprop{Momentum: 0.9, Centered: true, Impl: ForLoop}, RMSprop{IntStep: true},
		LAMB{}, LAMB{Fused: true},
		Muon{}, Muon{Aux: "none"}, Muon{Aux: "head, embed"},
	}
}

// TestStateClosedForm checks State against closed forms read from the
// implementations (provenance in each case's comment).
func TestStateClosedForm(t *testing.T) {
	t.Parallel()
	const n, m = 4096, 11008
	nm := int64(n * m)
	w32 := tensor("w", gpumem.FP32, n, m)
	w16 := tensor("w", gpumem.BF16, n, m)
	tests := []struct {
		name string
		opt  Optimizer
		t    gpumem.Tensor
		want int64
	}{
		// torch/optim/sgd.py: no state without momentum; momentum_buffer = clone(grad).
		{"SGD", SGD{}, w32, 0},
		{"SGD momentum fp32", SGD{Momentum: 0.9}, w32, 4 * nm},
		{"SGD momentum bf16 weights", SGD{Momentum: 0.9}, w16, 2 * nm},
		{"SGD momentum bf16 state", SGD{Momentum: 0.9, StateDType: gpumem.BF16}, w32, 2 * nm},
		// torch/optim/adam.py: step (4 B) + exp_avg + exp_avg_sq (+ max_exp_avg_sq).
		{"Adam fp32", Adam{}, w32, 2*4*nm + 4},
		{"Adam bf16", Adam{}, w16, 2*2*nm + 4},
		{"Adam fp32 states for bf16", Adam{StateDType: gpumem.FP32}, w16, 2*4*nm + 4},
		{"Adam amsgrad", Adam{AMSGrad: true}, w32, 3*4*nm + 4},
		{"AdamW", AdamW{}, w32, 2*4*nm + 4},
		{"AdamW fused", AdamW{Impl: Fused}, w32, 2*4*nm + 4},
		{"AdamW scalar", AdamW{}, tensor("s", gpumem.FP32), 2*4 + 4},
		// torch/optim/adagrad.py: step + sum.
		{"Adagrad", Adagrad{}, w32, 4*nm + 4},
		// torch/optim/rmsprop.py: step + square_avg (+ momentum_buffer, grad_avg).
		{"RMSprop", RMSprop{}, w32, 4*nm + 4},
		{"RMSprop 1.13", RMSprop{IntStep: true}, w32, 4 * nm},
		{"RMSprop momentum centered", RMSprop{Momentum: 0.9, Centered: true}, w32, 3*4*nm + 4},
		// transformers Adafactor: (n+m)·4 + RMS (4 B); fp32 state for bf16 weights.
		{"Adafactor n×m", Adafactor{}, w32, (n+m)*4 + 4},
		{"Adafactor n×m bf16", Adafactor{}, w16, (n+m)*4 + 4},
		{"Adafactor vector", Adafactor{}, tensor("b", gpumem.FP32, n), 4*n + 4},
		{"Adafactor beta1", Adafactor{FirstMoment: true}, w32, 4*nm + (n+m)*4 + 4},
		{"Adafactor 3-D", Adafactor{}, tensor("e", gpumem.FP32, 8, n, m), (8*n+8*m)*4 + 4},
		// torch.optim.Adafactor: row_var + col_var in the param dtype + CPU step.
		{"torch Adafactor bf16", Adafactor{Torch: true}, w16, (n+m)*2 + 4},
		{"torch Adafactor vector", Adafactor{Torch: true}, tensor("b", gpumem.BF16, n), 2*n + 4},
		// bitsandbytes Optimizer2State: 8-bit from min_8bit_size = 4096, absmax per 256.
		{"Adam8bit n×m", Adam8bit{}, w32, 2*nm + 2*4*(nm/256)},
		{"Adam8bit bf16", AdamW8bit{}, w16, 2*nm + 2*4*(nm/256)},
		{"Adam8bit at 4096", Adam8bit{}, tensor("v", gpumem.FP32, 4096), 2*4096 + 2*4*16},
		{"Adam8bit ragged block", Adam8bit{}, tensor("v", gpumem.FP32, 4097), 2*4097 + 2*4*17},
		{"Adam8bit below 4096", Adam8bit{}, tensor("v", gpumem.BF16, 4095), 2 * 4 * 4095},
		{"Adam8bit 0.43 blocks", Adam8bit{Block: 2048}, w32, 2*nm + 2*4*(nm/2048)},
		{"PagedAdamW8bit", AdamW8bit{Paged: true}, w32, 2*nm + 2*4*(nm/256)},
		{"PagedAdamW32bit", AdamW8bit{Paged: true, Bits32: true}, w16, 2 * 4 * nm},
		// bitsandbytes Optimizer1State: state1 (+ absmax1) only.
		{"Lion8bit", Lion8bit{}, w16, nm + 4*(nm/256)},
		{"Lion8bit small", Lion8bit{}, tensor("v", gpumem.BF16, 100), 4 * 100},
		{"Lion32bit", Lion8bit{Bits32: true}, w16, 4 * nm},
		// lion_pytorch: exp_avg only.
		{"Lion", Lion{}, w16, 2 * nm},
		// timm Lamb: exp_avg + exp_avg_sq, step per group.
		{"LAMB", LAMB{}, w32, 2 * 4 * nm},
		// KellerJordan/Muon: momentum_buffer for hidden matrices; AdamW (int step) otherwise.
		{"Muon hidden", Muon{}, tensor("model.layers.0.mlp.up_proj.weight", gpumem.BF16, m, n), 2 * nm},
		{"Muon embedding", Muon{}, tensor("model.embed_tokens.weight", gpumem.BF16, 32000, n), 2 * 2 * 32000 * n},
		{"Muon head", Muon{}, tensor("lm_head.weight", gpumem.BF16, 32000, n), 2 * 2 * 32000 * n},
		{"Muon norm", Muon{}, tensor("model.norm.weight", gpumem.BF16, n), 2 * 2 * n},
		{"Muon no aux", Muon{Aux: "none"}, tensor("lm_head.weight", gpumem.BF16, 32000, n), 2 * 32000 * n},
		{"Muon custom aux", Muon{Aux: "up_proj, embed"}, tensor("model.layers.0.mlp.up_proj.weight", gpumem.BF16, m, n), 2 * 2 * nm},
		{"Muon custom aux miss", Muon{Aux: "up_proj, embed"}, tensor("lm_head.weight", gpumem.BF16, 32000, n), 2 * 32000 * n},
		{"empty tensor", Adam{}, tensor("z", gpumem.FP32, 0, 7), 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.opt.State(tc.t)
			require.NoError(t, err)
			if int64(got) != tc.want {
				t.Errorf("%v.State(%v %v) = %d, want %d", tc.opt, tc.t.DType, tc.t.Shape, got, tc.want)
			}
		})
	}
}

// TestLocations checks where the state lives: torch's step on the CPU
// unless capturable/fused, bitsandbytes' paged buffers in unified memory
// from 1e5 elements.
func TestLocations(t *testing.T) {
	t.Parallel()
	big := tensor("big", gpumem.FP32, 1000, 100)  // 1e5 elements: paged
	small := tensor("small", gpumem.FP32, 99_999) // 8-bit, not paged
	tiny := tensor("tiny", gpumem.FP32, 10)       // 32-bit fallback
	ts := []gpumem.Tensor{big, small, tiny}
	tests := []struct {
		name                  string
		opt                   Optimizer
		device, host, managed int64
	}{
		{"Adam", Adam{}, 2 * 4 * (100_000 + 99_999 + 10), 3 * 4, 0},
		{"Adam capturable", Adam{Capturable: true}, 2*4*(100_000+99_999+10) + 12, 0, 0},
		{"Adam fused", Adam{Impl: Fused}, 2*4*(100_000+99_999+10) + 12, 0, 0},
		{"Adam8bit", Adam8bit{}, 2*100_000 + 8*391 + 2*99_999 + 8*391 + 8*10 + 2*1024, 0, 0},
		{"PagedAdam8bit", Adam8bit{Paged: true}, 8*391 + 2*99_999 + 8*391 + 8*10 + 2*1024, 0, 2 * 100_000},
		{"PagedAdam32bit", Adam8bit{Paged: true, Bits32: true}, 8*99_999 + 8*10, 0, 8 * 100_000},
		{"torch Adafactor", Adafactor{Torch: true}, 4*(1000+100) + 4*99_999 + 4*10, 12, 0},
		{"RMSprop capturable", RMSprop{Capturable: true}, 4*(100_000+99_999+10) + 12, 0, 0},
		{"RMSprop 1.13", RMSprop{IntStep: true}, 4 * (100_000 + 99_999 + 10), 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bd, err := Describe(tc.opt, ts)
			require.NoError(t, err)
			got := [3]int64{int64(bd.Device), int64(bd.Host), int64(bd.Managed)}
			want := [3]int64{tc.device, tc.host, tc.managed}
			if got != want {
				t.Errorf("Describe(%v) device, host, managed = %v, want %v", tc.opt, got, want)
			}
			total, err := Total(tc.opt, ts)
			require.NoError(t, err)
			if bd.State != total || int64(total) != tc.device+tc.host+tc.managed {
				t.Errorf("Describe(%v).State = %d, Total = %d, want %d", tc.opt, bd.State, total, tc.device+tc.host+tc.managed)
			}
		})
	}
}

// TestShared checks that bitsandbytes' two 256-entry fp32 qmaps are
// counted once per optimizer, and only when some tensor is 8-bit.
func TestShared(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opt  Optimizer
		ts   []gpumem.Tensor
		want int64
	}{
		{"none 8-bit", Adam8bit{}, []gpumem.Tensor{tensor("a", gpumem.FP32, 100)}, 800},
		{"one 8-bit", Adam8bit{}, []gpumem.Tensor{tensor("a", gpumem.FP32, 100), tensor("b", gpumem.FP32, 4096)},
			800 + 2*4096 + 8*16 + 2048},
		{"two 8-bit", AdamW8bit{}, []gpumem.Tensor{tensor("a", gpumem.FP32, 4096), tensor("b", gpumem.FP32, 4096)},
			2*(2*4096+8*16) + 2048},
		{"32-bit variant", Adam8bit{Bits32: true}, []gpumem.Tensor{tensor("b", gpumem.FP32, 4096)}, 8 * 4096},
		{"Lion8bit one qmap", Lion8bit{}, []gpumem.Tensor{tensor("b", gpumem.FP32, 4096)}, 4096 + 4*16 + 1024},
		{"empty set", Adam8bit{}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Total(tc.opt, tc.ts)
			require.NoError(t, err)
			if int64(got) != tc.want {
				t.Errorf("Total(%v, %d tensors) = %d, want %d", tc.opt, len(tc.ts), got, tc.want)
			}
		})
	}
}

// TestTransient checks the step temporaries against the formulas in the
// doc comments, on tensors of a (8 KiB fp32) then b (4 KiB fp32) elements.
func TestTransient(t *testing.T) {
	t.Parallel()
	a := tensor("a", gpumem.FP32, 2048)
	b := tensor("b", gpumem.FP32, 32, 32)
	h := tensor("h", gpumem.BF16, 64, 16)
	const A, B = 8192, 4096
	tests := []struct {
		name string
		opt  Optimizer
		ts   []gpumem.Tensor
		want int64
	}{
		{"Adam foreach = Σ sqrt copies", Adam{}, []gpumem.Tensor{a, b}, A + B},
		{"Adam forloop = 2 of b + denom of a", Adam{Impl: ForLoop}, []gpumem.Tensor{a, b}, max(2*A, 2*B+A)},
		{"Adam forloop other order", Adam{Impl: ForLoop}, []gpumem.Tensor{b, a}, 2*A + B},
		{"AdamW fused", AdamW{Impl: Fused}, []gpumem.Tensor{a, b}, 0},
		{"SGD", SGD{Momentum: 0.9}, []gpumem.Tensor{a, b}, 0},
		// for-loop Nesterov: grad.add(buf) of one parameter at a time,
		// dropped before the next is built: the larger gradient, a's.
		{"SGD nesterov forloop", SGD{Momentum: 0.9, Nesterov: true, Impl: ForLoop}, []gpumem.Tensor{b, a}, A},
		{"SGD nesterov forloop bf16", SGD{Momentum: 0.9, Nesterov: true, Impl: ForLoop}, []gpumem.Tensor{h}, 2 * 64 * 16},
		// foreach adds the buffers into the gradients in place.
		{"SGD nesterov foreach", SGD{Momentum: 0.9, Nesterov: true}, []gpumem.Tensor{a, b}, 0},
		{"SGD nesterov fused", SGD{Momentum: 0.9, Nesterov: true, Impl: Fused}, []gpumem.Tensor{a, b}, 0},
		{"Adagrad foreach", Adagrad{}, []gpumem.Tensor{a, b}, A + B},
		{"RMSprop forloop", RMSprop{Impl: ForLoop}, []gpumem.Tensor{a, b}, A + B},
		{"Adam8bit", Adam8bit{}, []gpumem.Tensor{a, b}, 0},
		{"Lion", Lion{}, []gpumem.Tensor{a, b}, 2 * A},
		{"Lion foreach", Lion{Foreach: true}, []gpumem.Tensor{a, b}, A + B},
		{"Lion triton", Lion{Triton: true}, []gpumem.Tensor{a, b}, 0},
		{"LAMB", LAMB{}, []gpumem.Tensor{a, b}, max(3*A, 3*B+2*A)},
		{"LAMB fused", LAMB{Fused: true}, []gpumem.Tensor{a, b}, 0},
		// transformers Adafactor: 2 state-sized tensors + update of the previous, and
		// a matrix's r_factor and c_factor (32+32 fp32); 16-bit adds 2 fp32 copies.
		{"Adafactor fp32", Adafactor{}, []gpumem.Tensor{a, b}, 2*B + A + (32+32)*4},
		{"Adafactor bf16", Adafactor{}, []gpumem.Tensor{h}, 2*4*1024 + 2*4*1024 + (64+16)*4},
		{"Adafactor beta1", Adafactor{FirstMoment: true}, []gpumem.Tensor{a, b}, 2 * A},
		{"torch Adafactor", Adafactor{Torch: true}, []gpumem.Tensor{a, b}, 2*A + B},
		{"torch Adafactor foreach", Adafactor{Torch: true, Foreach: true}, []gpumem.Tensor{a, b}, A + B},
		// Muon: 2·(4rc + 2r²) bf16 bytes for a 32×32 matrix; the fp32 vector goes to AdamW (4 copies).
		{"Muon matrix then vector", Muon{}, []gpumem.Tensor{b, a}, max(2*(4*32*32+2*32*32), 4*A+2*32*32)},
		{"Muon tall matrix", Muon{}, []gpumem.Tensor{h}, 2 * (4*64*16 + 2*16*16)},
		{"empty", Adam{}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.opt.Transient(tc.ts)
			require.NoError(t, err)
			if int64(got) != tc.want {
				t.Errorf("%v.Transient(%d tensors) = %d, want %d", tc.opt, len(tc.ts), got, tc.want)
			}
		})
	}
}

// TestErrors checks that invalid settings and tensors are errors naming
// the field, wrapping the right category.
func TestErrors(t *testing.T) {
	t.Parallel()
	w := tensor("w", gpumem.FP32, 8, 8)
	tests := []struct {
		name  string
		opt   Optimizer
		t     gpumem.Tensor
		field string
		kind  error
	}{
		{"negative momentum", SGD{Momentum: -0.9}, w, "SGD.Momentum", gpumem.ErrInvalid},
		{"nesterov without momentum", SGD{Nesterov: true}, w, "SGD.Nesterov", gpumem.ErrInvalid},
		{"NaN momentum", RMSprop{Momentum: math.NaN()}, w, "RMSprop.Momentum", gpumem.ErrInvalid},
		{"unknown state dtype", Adam{StateDType: gpumem.DType(200)}, w, "Adam.StateDType", gpumem.ErrInvalid},
		{"integer state dtype", AdamW{StateDType: gpumem.INT8}, w, "AdamW.StateDType", gpumem.ErrUnsupported},
		{"quantized state dtype", Lion{StateDType: gpumem.NF4}, w, "Lion.StateDType", gpumem.ErrUnsupported},
		{"unknown impl", Adam{Impl: Impl(9)}, w, "Adam.Impl", gpumem.ErrInvalid},
		{"RMSprop fused", RMSprop{Impl: Fused}, w, "RMSprop.Impl", gpumem.ErrUnsupported},
		{"negative block", Adam8bit{Block: -256}, w, "Adam8bit.Block", gpumem.ErrInvalid},
		{"negative min size", AdamW8bit{Min8bitSize: -1}, w, "AdamW8bit.Min8bitSize", gpumem.ErrInvalid},
		{"torch Adafactor beta1", Adafactor{Torch: true, FirstMoment: true}, w, "Adafactor.FirstMoment", gpumem.ErrUnsupported},
		{"HF Adafactor foreach", Adafactor{Foreach: true}, w, "Adafactor.Foreach", gpumem.ErrUnsupported},
		{"Lion foreach+triton", Lion{Foreach: true, Triton: true}, w, "Lion.Triton", gpumem.ErrInvalid},
		{"negative dimension", Adam{}, tensor("w", gpumem.FP32, 8, -1), "Tensor(w).Shape[1]", gpumem.ErrInvalid},
		{"overflowing shape", Adam{}, tensor("w", gpumem.FP32, 1<<40, 1<<40), "Tensor(w).Shape", gpumem.ErrRange},
		{"overflowing bytes", Adam{}, tensor("w", gpumem.FP64, 1<<61), "Tensor(w).Shape", gpumem.ErrRange},
		{"invalid tensor dtype", SGD{}, tensor("w", gpumem.Invalid, 8), "Tensor(w).DType", gpumem.ErrInvalid},
		{"NF4 weight", Adam8bit{}, tensor("w", gpumem.NF4, 64), "Tensor(w).DType", gpumem.ErrUnsupported},
		{"int weight", Muon{}, tensor("w", gpumem.INT32, 4, 4), "Tensor(w).DType", gpumem.ErrUnsupported},
		{"factor overflow", Adafactor{}, tensor("w", gpumem.FP32, 1<<40, 1<<40, 0), "Tensor(w).Shape", gpumem.ErrRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.opt.State(tc.t)
			require.ErrorIs(t, err, tc.kind)
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field, "State error %v", err)
			// Transient, Total and Describe report the same error.
			_, err = tc.opt.Transient([]gpumem.Tensor{tc.t})
			require.ErrorIs(t, err, tc.kind)
			_, err = Total(tc.opt, []gpumem.Tensor{tc.t})
			require.ErrorIs(t, err, tc.kind)
			_, err = Describe(tc.opt, []gpumem.Tensor{tc.t})
			require.ErrorIs(t, err, tc.kind)
		})
	}
	_, err := Total(nil, nil)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	_, err = Describe(nil, nil)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
}

// randomTensors returns tensors of random rank, shape and dtype,
// including zero and huge dimensions.
func randomTensors(r *rand.Rand, k int) []gpumem.Tensor {
	dts := []gpumem.DType{gpumem.FP32, gpumem.BF16, gpumem.FP16, gpumem.FP64, gpumem.FP8E4M3, gpumem.INT8, gpumem.NF4}
	names := []string{"model.layers.0.mlp.up_proj.weight", "model.embed_tokens.weight", "lm_head.weight", "norm.weight", ""}
	ts := make([]gpumem.Tensor, k)
	for i := range ts {
		shape := make([]int64, r.Intn(5))
		for j := range shape {
			switch r.Intn(10) {
			case 0:
				shape[j] = 0
			case 1:
				shape[j] = r.Int63()
			case 2:
				shape[j] = -r.Int63n(5) - 1
			default:
				shape[j] = r.Int63n(5000) + 1
			}
		}
		ts[i] = gpumem.Tensor{Name: names[r.Intn(len(names))], Shape: shape, DType: dts[r.Intn(len(dts))]}
	}
	return ts
}

// TestProperties checks over random shapes: no panic, state and
// temporaries never negative, Total = Σ State + shared, Describe agrees
// with Total and splits it by location exactly.
func TestProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(4))
	for i := 0; i < 400; i++ {
		ts := randomTensors(r, 1+r.Intn(6))
		for _, opt := range allOptimizers() {
			var sum gpumem.Bytes
			ok, rangeOnly := true, true
			for _, tt := range ts {
				b, err := opt.State(tt)
				if err != nil {
					var fe *gpumem.FieldError
					require.ErrorAs(t, err, &fe, "%v.State(%v): unnamed error", opt, tt)
					ok = false
					rangeOnly = rangeOnly && errors.Is(err, gpumem.ErrRange)
					continue
				}
				require.GreaterOrEqual(t, int64(b), int64(0), "%v.State(%v)", opt, tt)
				slots, err := opt.(Layout).AppendSlots(nil, tt)
				require.NoError(t, err)
				sb, err := sumSlots(slots)
				require.NoError(t, err)
				require.Equal(t, b, sb, "%v: State != Σ slots for %v", opt, tt)
				sum += b
			}
			total, err := Total(opt, ts)
			tr, terr := opt.Transient(ts)
			if !ok {
				require.Error(t, err, "%v: Total accepted a set that State rejects", opt)
				// An invalid tensor fails Transient too; a state size
				// beyond int64 may only show in State.
				if !rangeOnly {
					require.Error(t, terr, "%v: Transient accepted %v", opt, ts)
				}
				continue
			}
			if err != nil {
				require.ErrorIs(t, err, gpumem.ErrRange, "%v: Total(%v)", opt, ts)
				continue
			}
			var shared gpumem.Bytes
			if s, ok := opt.(SharedState); ok {
				slots, err := s.AppendShared(nil, ts)
				require.NoError(t, err)
				shared, err = sumSlots(slots)
				require.NoError(t, err)
			}
			require.Equal(t, sum+shared, total, "%v: Total != Σ State + shared", opt)
			if terr == nil {
				require.GreaterOrEqual(t, int64(tr), int64(0))
			}
			bd, err := Describe(opt, ts)
			if terr != nil {
				require.Error(t, err)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, total, bd.State)
			require.Equal(t, bd.State, bd.Device+bd.Host+bd.Managed)
			require.Len(t, bd.Parts, len(ts))
			require.Equal(t, tr, bd.Transient)
		}
	}
}

// FuzzState checks that no optimizer panics or returns a negative size on
// any shape.
func FuzzState(f *testing.F) {
	f.Add(int64(4096), int64(11008), int64(0), uint8(gpumem.BF16), "w")
	f.Add(int64(1<<40), int64(1<<40), int64(3), uint8(gpumem.FP32), "lm_head.weight")
	f.Add(int64(-1), int64(7), int64(1), uint8(0), "")
	f.Fuzz(func(t *testing.T, d0, d1, d2 int64, dt uint8, name string) {
		shapes := [][]int64{nil, {d0}, {d0, d1}, {d0, d1, d2}, {d2, d0, d1, d2}}
		for _, s := range shapes {
			tt := gpumem.Tensor{Name: name, Shape: s, DType: gpumem.DType(dt)}
			for _, opt := range allOptimizers() {
				b, err := opt.State(tt)
				if err == nil && b < 0 {
					t.Fatalf("%v.State(%v) = %d", opt, tt, b)
				}
				tr, err := opt.Transient([]gpumem.Tensor{tt, tt})
				if err == nil && tr < 0 {
					t.Fatalf("%v.Transient(%v) = %d", opt, tt, tr)
				}
			}
		}
	})
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	ts := []gpumem.Tensor{tensor("w", gpumem.FP32, 64, 128), tensor("b", gpumem.FP32, 64)}
	bd, err := Describe(AdamW8bit{}, ts)
	require.NoError(t, err)
	want := Breakdown{
		Optimizer: "bnb.optim.AdamW8bit",
		Parts: []Part{
			{Name: "w", Bytes: 2*8192 + 8*32, Slots: []Slot{
				{"state1", 8192, gpumem.UINT8, Device}, {"absmax1", 32, gpumem.FP32, Device},
				{"state2", 8192, gpumem.UINT8, Device}, {"absmax2", 32, gpumem.FP32, Device}}},
			{Name: "b", Bytes: 8 * 64, Slots: []Slot{
				{"state1", 64, gpumem.FP32, Device}, {"state2", 64, gpumem.FP32, Device}}},
		},
		Shared: []Slot{{"qmap1", 256, gpumem.FP32, Device}, {"qmap2", 256, gpumem.FP32, Device}},
		State:  2*8192 + 8*32 + 8*64 + 2048,
		Device: 2*8192 + 8*32 + 8*64 + 2048,
	}
	if diff := cmp.Diff(want, bd); diff != "" {
		t.Errorf("Describe(AdamW8bit) (-want +got):\n%s", diff)
	}
}

// foreign is an Optimizer from outside the package, without Layout.
type foreign struct{}

func (foreign) State(t gpumem.Tensor) (gpumem.Bytes, error) {
	n, err := t.Elems()
	return gpumem.Bytes(n), err
}
func (foreign) Transient([]gpumem.Tensor) (gpumem.Bytes, error) { return 7, nil }
func (foreign) String() string                                  { return "foreign" }

func TestDescribeForeign(t *testing.T) {
	t.Parallel()
	bd, err := Describe(foreign{}, []gpumem.Tensor{tensor("w", gpumem.FP32, 3, 4)})
	require.NoError(t, err)
	want := Breakdown{Optimizer: "foreign", Parts: []Part{{Name: "w", Bytes: 12}}, State: 12, Device: 12, Transient: 7}
	if diff := cmp.Diff(want, bd); diff != "" {
		t.Errorf("Describe(foreign) (-want +got):\n%s", diff)
	}
}

func TestNoAllocs(t *testing.T) {
	w := tensor("model.layers.0.mlp.up_proj.weight", gpumem.BF16, 11008, 4096)
	ts := []gpumem.Tensor{w, tensor("norm.weight", gpumem.BF16, 4096)}
	for _, opt := range allOptimizers() {
		if a := testing.AllocsPerRun(50, func() { _, _ = opt.State(w) }); a != 0 {
			t.Errorf("%v.State allocates %v times", opt, a)
		}
		if a := testing.AllocsPerRun(50, func() { _, _ = Total(opt, ts) }); a != 0 {
			t.Errorf("Total(%v) allocates %v times", opt, a)
		}
	}
}

// TestComparable checks that every optimizer value can be compared with
// ==, so that a scheduler may store and compare jobs that hold one.
func TestComparable(t *testing.T) {
	t.Parallel()
	for _, opt := range allOptimizers() {
		if opt != opt { //nolint:staticcheck // comparing an interface with itself panics if the type is not comparable
			t.Errorf("%v is not equal to itself", opt)
		}
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v    interface{ String() string }
		want string
	}{
		{SGD{}, "torch.optim.SGD"}, {Adam{}, "torch.optim.Adam"}, {AdamW{}, "torch.optim.AdamW"},
		{Adagrad{}, "torch.optim.Adagrad"}, {RMSprop{}, "torch.optim.RMSprop"},
		{Adam8bit{}, "bnb.optim.Adam8bit"}, {AdamW8bit{Paged: true}, "bnb.optim.PagedAdamW8bit"},
		{AdamW8bit{Paged: true, Bits32: true}, "bnb.optim.PagedAdamW32bit"},
		{Lion8bit{}, "bnb.optim.Lion8bit"}, {Lion8bit{Paged: true, Bits32: true}, "bnb.optim.PagedLion32bit"},
		{Adafactor{}, "transformers.Adafactor"}, {Adafactor{Torch: true}, "torch.optim.Adafactor"},
		{Lion{}, "lion_pytorch.Lion"}, {LAMB{}, "timm.optim.Lamb"}, {LAMB{Fused: true}, "apex.optimizers.FusedLAMB"},
		{Muon{}, "muon.MuonWithAuxAdam"},
		{Foreach, "foreach"}, {ForLoop, "forloop"}, {Fused, "fused"}, {Impl(7), "Impl(7)"},
		{Device, "device"}, {Host, "host"}, {Managed, "managed"}, {Location(9), "Location(9)"},
	}
	for _, tc := range tests {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want Optimizer
	}{
		{"adamw_torch", AdamW{}},
		{"ADAMW_TORCH_FUSED", AdamW{Impl: Fused}},
		{"adamw_8bit", AdamW8bit{}},
		{"adamw_bnb_8bit", AdamW8bit{}},
		{"paged_adamw_8bit", AdamW8bit{Paged: true}},
		{"paged_adamw_32bit", AdamW8bit{Paged: true, Bits32: true}},
		{"lion_32bit", Lion8bit{Bits32: true}},
		{"paged_lion_8bit", Lion8bit{Paged: true}},
		{" adafactor ", Adafactor{}},
		{"sgd", SGD{}},
		{"rmsprop", RMSprop{}},
		{"torch.optim.Adafactor", Adafactor{Torch: true}},
		{"bnb.optim.PagedAdam32bit", Adam8bit{Paged: true, Bits32: true}},
		{"apex.optimizers.FusedLAMB", LAMB{Fused: true}},
		{"muon", Muon{}},
	}
	for _, tc := range tests {
		got, ok := Lookup(tc.name)
		if !ok || !cmp.Equal(tc.want, got) {
			t.Errorf("Lookup(%q) = %v, %v, want %v", tc.name, got, ok, tc.want)
		}
	}
	for _, name := range []string{"adamw_hf", "adamw_anyprecision", "", "galore_adamw"} {
		if got, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) = %v, true, want false", name, got)
		}
	}
	// Every optimizer's String reads back.
	for _, opt := range allOptimizers() {
		got, ok := Lookup(opt.String())
		if !ok || got.String() != opt.String() {
			t.Errorf("Lookup(%q) = %v, %v", opt.String(), got, ok)
		}
	}
}

func BenchmarkTotal(b *testing.B) {
	var ts []gpumem.Tensor
	for range 32 {
		ts = append(ts, tensor("model.layers.0.mlp.up_proj.weight", gpumem.BF16, 11008, 4096),
			tensor("model.layers.0.input_layernorm.weight", gpumem.BF16, 4096))
	}
	for _, opt := range []Optimizer{AdamW{}, AdamW8bit{}, Adafactor{}} {
		b.Run(opt.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Total(opt, ts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestManagedState checks PagedState against the Managed slots of
// Describe, and by hand: bitsandbytes pages state1 and state2 from
// 100,000 elements (get_state_buffer: "p.numel() < 1e5" is a device
// tensor).
func TestManagedState(t *testing.T) {
	t.Parallel()
	at := gpumem.Tensor{Name: "w", Shape: []int64{1000, 100}, DType: gpumem.BF16} // 100,000 elements
	under := gpumem.Tensor{Name: "v", Shape: []int64{99_999}, DType: gpumem.BF16} // one fewer
	for _, tc := range []struct {
		opt       Optimizer
		at, under gpumem.Bytes
	}{
		{AdamW8bit{Paged: true}, 200_000, 0},               // 2 × 100,000 uint8
		{Adam8bit{Paged: true}, 200_000, 0},                // the same
		{AdamW8bit{Paged: true, Bits32: true}, 800_000, 0}, // 2 × 100,000 fp32
		{Lion8bit{Paged: true}, 100_000, 0},                // state1 only
		{Lion8bit{Paged: true, Bits32: true}, 400_000, 0},
		{AdamW8bit{}, 0, 0}, // not paged
		{Lion8bit{Bits32: true}, 0, 0},
	} {
		ps, ok := tc.opt.(PagedState)
		require.True(t, ok, tc.opt.String())
		got, err := ps.ManagedState(at)
		require.NoError(t, err)
		assert.Equal(t, tc.at, got, tc.opt.String())
		got, err = ps.ManagedState(under)
		require.NoError(t, err)
		assert.Equal(t, tc.under, got, tc.opt.String())
		bd, err := Describe(tc.opt, []gpumem.Tensor{at, under})
		require.NoError(t, err)
		assert.Equal(t, tc.at+tc.under, bd.Managed, tc.opt.String())
	}
	_, err := AdamW8bit{Paged: true, Block: -1}.ManagedState(at)
	assert.ErrorIs(t, err, gpumem.ErrInvalid)
	_, err = AdamW8bit{Paged: true}.ManagedState(gpumem.Tensor{Name: "q", Shape: []int64{1 << 20}, DType: gpumem.NF4})
	assert.ErrorIs(t, err, gpumem.ErrUnsupported)
}
