package budget

import (
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample() Breakdown {
	return Breakdown{
		Weights: 16 * gpumem.GiB, Gradients: 16 * gpumem.GiB, Optimizer: 32 * gpumem.GiB, Activations: 5 * gpumem.GiB,
		Logits: gpumem.GiB, Workspace: 17 * gpumem.MiB, Fragmentation: 3 * gpumem.GiB, Context: 426 * gpumem.MiB,
		Phase: Backward,
	}
}

func TestBreakdownTotals(t *testing.T) {
	t.Parallel()
	b := sample()
	alloc := 16*gpumem.GiB*2 + 32*gpumem.GiB + 5*gpumem.GiB + gpumem.GiB + 17*gpumem.MiB
	assert.Equal(t, alloc, b.Allocated())
	assert.Equal(t, alloc+3*gpumem.GiB, b.Reserved())
	assert.Equal(t, alloc+3*gpumem.GiB+426*gpumem.MiB, b.Device())
	assert.Equal(t, componentSum(b), b.Device(), "Device is the sum of the parts")
	assert.Equal(t, Component{"optimizer", 32 * gpumem.GiB}, b.Dominant())
}

// componentSum adds the parts Components lists, as a reader of the JSON
// would: Device must equal it (Host is not among them).
func componentSum(b Breakdown) gpumem.Bytes {
	var sum gpumem.Bytes
	for _, c := range b.Components() {
		sum += c.Bytes
	}
	return sum
}

func TestBreakdownJSON(t *testing.T) {
	t.Parallel()
	b := sample()
	out, err := json.Marshal(b)
	require.NoError(t, err)
	var got struct {
		AllocatedPeak int64            `json:"allocated_peak"`
		ReservedPeak  int64            `json:"reserved_peak"`
		DevicePeak    int64            `json:"device_peak"`
		Phase         string           `json:"phase"`
		Components    map[string]int64 `json:"components"`
	}
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, int64(b.Allocated()), got.AllocatedPeak)
	assert.Equal(t, int64(b.Reserved()), got.ReservedPeak)
	assert.Equal(t, int64(b.Device()), got.DevicePeak)
	assert.Equal(t, "backward", got.Phase)
	assert.Equal(t, int64(32*gpumem.GiB), got.Components["optimizer"])
	assert.Len(t, got.Components, 15)
	var sum int64
	for _, v := range got.Components {
		sum += v
	}
	assert.Equal(t, got.DevicePeak, sum)
}

func TestBreakdownLogValue(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	logger := slog.New(slog.NewTextHandler(&sb, nil))
	logger.Info("estimate", "need", sample())
	assert.Contains(t, sb.String(), "need.phase=backward")
	assert.Contains(t, sb.String(), "need.optimizer=34359738368")
	assert.NotContains(t, sb.String(), "need.kv_cache", "zero components are left out")
}

func TestFits(t *testing.T) {
	t.Parallel()
	need := sample()
	tests := []struct {
		name      string
		d         gpumem.Device
		shortfall gpumem.Bytes
		ok        bool
	}{
		{"roomy", gpumem.Device{Capacity: 141 * gpumem.GiB}, 0, true},
		{"exact", gpumem.Device{Capacity: need.Device()}, 0, true},
		{"one byte short", gpumem.Device{Capacity: need.Device() - 1}, 1, false},
		{"used by others", gpumem.Device{Capacity: 80 * gpumem.GiB, Used: 30 * gpumem.GiB}, need.Device() - 50*gpumem.GiB, false},
		{"reserved by policy", gpumem.Device{Capacity: 80 * gpumem.GiB, Reserved: 10 * gpumem.GiB}, need.Device() - 70*gpumem.GiB, false},
	}
	for _, tc := range tests {
		short, ok := Fits(need, tc.d)
		if short != tc.shortfall || ok != tc.ok {
			t.Errorf("%s: Fits = %v, %v, want %v, %v", tc.name, short, ok, tc.shortfall, tc.ok)
		}
	}
}

func TestUtilization(t *testing.T) {
	t.Parallel()
	need := sample()
	d := gpumem.Device{Capacity: 2 * need.Device()}
	assert.InEpsilon(t, 0.5, Utilization(need, d), 1e-12)
	assert.InEpsilon(t, 1.0, Utilization(need, gpumem.Device{Capacity: need.Device()}), 1e-12)
	assert.Greater(t, Utilization(need, gpumem.Device{Capacity: need.Device() / 2}), 1.0)
	assert.Equal(t, math.MaxFloat64, Utilization(need, gpumem.Device{Capacity: 1, Used: 1}), "finite, never +Inf")
}

func TestFitsAllocs(t *testing.T) {
	need := sample()
	d, ok := gpumem.LookupDevice("h100")
	require.True(t, ok)
	allocs := testing.AllocsPerRun(100, func() {
		Fits(need, d)
		Utilization(need, d)
	})
	assert.Zero(t, allocs, "Fits and Utilization allocate")
}

func TestParsePrecision(t *testing.T) {
	t.Parallel()
	for p := FP32; p <= FP8; p++ {
		got, err := ParsePrecision(p.String())
		require.NoError(t, err, p.String())
		assert.Equal(t, p, got)
	}
	_, err := ParsePrecision("fp64")
	require.ErrorIs(t, err, gpumem.ErrInvalid)
}

func TestDefaultOverhead(t *testing.T) {
	t.Parallel()
	h100, _ := gpumem.LookupDevice("h100")
	a100, _ := gpumem.LookupDevice("a100")
	h200, _ := gpumem.LookupDevice("h200")
	// CublasHandlePool.cpp: 32 MiB on sm90, :4096:2:16:8 elsewhere.
	assert.Equal(t, 32*gpumem.MiB, DefaultOverhead(h100).Workspace)
	assert.Equal(t, 32*gpumem.MiB, DefaultOverhead(h200).Workspace)
	assert.Equal(t, gpumem.Bytes(8519680), DefaultOverhead(a100).Workspace)
	assert.Equal(t, 426*gpumem.MiB, DefaultOverhead(a100).Context)
	assert.False(t, isHopper("NVIDIA A100-SXM4-80GB"))
	assert.True(t, isHopper("NVIDIA H20"))
	assert.True(t, isHopper("NVIDIA GH200 480GB"))
}

func BenchmarkFits(b *testing.B) {
	need := sample()
	d, _ := gpumem.LookupDevice("h100")
	b.ReportAllocs()
	for b.Loop() {
		Fits(need, d)
	}
}
