package budget

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
)

// TestEstimateFragmentationOverflow: fragmentation is a product of the
// allocated peak and a float; where it leaves int64 (a 2^62-byte buffer
// held with Fragmentation 10), the estimate is an ErrRange, not a
// negative device peak that fits an H100.
func TestEstimateFragmentationOverflow(t *testing.T) {
	t.Parallel()
	j := hardenJob(t)
	j.Buffers = []Buffer{{Name: "cache", Bytes: 1 << 62}}
	j.Overhead.Fragmentation = 10
	b, err := Estimate(j)
	if !errors.Is(err, gpumem.ErrRange) {
		t.Fatalf("Estimate = device %d (fragmentation %d), %v; want an ErrRange", b.Device(), b.Fragmentation, err)
	}
	// Within range the same job is estimated, and fits nowhere.
	j.Overhead.Fragmentation = 0.5
	b, err = Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	if b.Fragmentation <= 0 || b.Device() <= 0 {
		t.Errorf("fragmentation %d, device %d", b.Fragmentation, b.Device())
	}
	h100, _ := gpumem.LookupDevice("h100")
	if _, ok := Fits(b, h100); ok {
		t.Errorf("a 2^62-byte buffer fits an H100")
	}
}
