package gpumem

import (
	"math"
	"testing"
)

// Device.Free is exact when it fits, counts negative fields as zero (so
// it never exceeds Capacity), may be negative for an over-committed
// device, and saturates at math.MinInt64 instead of wrapping.
func TestDeviceFreeExtremes(t *testing.T) {
	t.Parallel()
	const hi, lo = math.MaxInt64, math.MinInt64
	for _, c := range []struct {
		d    Device
		want Bytes
	}{
		{Device{Capacity: 80 * GiB, Reserved: GiB, Used: 2 * GiB}, 77 * GiB},
		{Device{Capacity: 80 * GiB, Used: 100 * GiB}, -20 * GiB}, // over-committed
		{Device{Capacity: hi}, hi},
		{Device{Capacity: hi, Reserved: hi, Used: hi}, -hi},
		// 0 − MaxInt64 − MaxInt64 wrapped to +2.
		{Device{Reserved: hi, Used: hi}, lo},
		// Negative fields count as zero: Capacity − (−1) wrapped past
		// MaxInt64, and a negative Used made Free exceed Capacity.
		{Device{Capacity: hi, Reserved: -1}, hi},
		{Device{Capacity: hi, Reserved: lo, Used: lo}, hi},
		{Device{Capacity: 80 * GiB, Used: -5 * GiB}, 80 * GiB},
		{Device{Capacity: -GiB}, 0},
		{Device{Capacity: lo, Used: hi}, -hi},
	} {
		if got := c.d.Free(); got != c.want {
			t.Errorf("%+v.Free() = %d, want %d", c.d, int64(got), int64(c.want))
		}
	}
	// Never above Capacity (or zero for a negative Capacity), over a
	// spread of extreme fields.
	vals := []Bytes{lo, lo + 1, -GiB, -1, 0, 1, GiB, hi - 1, hi}
	for _, capa := range vals {
		for _, r := range vals {
			for _, u := range vals {
				d := Device{Capacity: capa, Reserved: r, Used: u}
				if f := d.Free(); f > max(capa, 0) {
					t.Fatalf("%+v.Free() = %d, above the capacity", d, int64(f))
				}
			}
		}
	}
}
