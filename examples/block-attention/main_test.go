package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// usable is what a plan may use of free bytes: free less budget's
// default headroom.
func usable(free gpumem.Bytes) gpumem.Bytes {
	return free - gpumem.Bytes(budget.DefaultHeadroomFraction*float64(free))
}

func deviceNeed(t *testing.T, j budget.Job) gpumem.Bytes {
	t.Helper()
	b, err := budget.Estimate(j)
	require.NoError(t, err)
	return b.Device()
}

// TestRun runs the program and checks its figures: the write-up's 128 GiB,
// that each plan's head chunk fits and the next larger does not, that
// checkpointing changes nothing without backward, and that the table
// prints the library's figures.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	text := out.String()
	r, err := analyze()
	require.NoError(t, err)
	room := usable(r.GPU.Free())
	require.Len(t, r.Cases, 2)

	for i, want := range []gpumem.Bytes{128 * gpumem.GiB, 256 * gpumem.GiB} {
		if got := r.Cases[i].Scores; got != want {
			t.Errorf("%s: one layer's fp32 weights = %v, want %v", r.Cases[i].Name, got, want)
		}
	}
	for _, c := range r.Cases {
		p := c.Plan
		if p.HeadChunk < 1 || p.ModelName != "" {
			t.Fatalf("%s: plan chunk %d, model %q; want a head chunk of the fp16 model", c.Name, p.HeadChunk, p.ModelName)
		}
		if need := deviceNeed(t, p.Job); need > room {
			t.Errorf("%s: %d heads at a time need %v, more than the %v usable", c.Name, p.HeadChunk, need.String(), room.String())
		}
		larger := p.Job
		larger.HeadChunk = 2 * p.HeadChunk
		if need := deviceNeed(t, larger); need <= room {
			t.Errorf("%s: %d heads at a time need %v, which fits the %v usable", c.Name, larger.HeadChunk, need.String(), room.String())
		}
		if c.Given.Device() <= r.GPU.Capacity {
			t.Errorf("%s: the job as written needs %v, within one GPU: no OOM to explain", c.Name, c.Given.Device().String())
		}
		if c.Checkpointed.Device() != c.Chunked.Device() {
			t.Errorf("%s: checkpointing changes a no-grad forward: %v vs %v", c.Name, c.Checkpointed.Device(), c.Chunked.Device())
		}
		if !(c.FourBit.Device() < c.Chunked.Device() && c.OneHead4Bit.Device() < c.FourBit.Device() && c.OneHead4Bit.Device() <= room) {
			t.Errorf("%s: 4-bit %v, one head + 4-bit %v, chunked %v: want decreasing and fitting", c.Name,
				c.FourBit.Device().String(), c.OneHead4Bit.Device().String(), c.Chunked.Device().String())
		}
		for _, b := range []budget.Breakdown{c.Given, c.Chunked, c.FourBit, c.OneHead4Bit} {
			require.Contains(t, text, b.Device().String())
		}
	}
	// The busiest of 8 stages holds more than an eighth of the weights
	// (the embedding or the head besides its layers) and less than all.
	big := r.Cases[1]
	if big.Weights*gpumem.Bytes(big.Stages) < big.Total || big.Weights >= big.Total/2 {
		t.Errorf("70B weights per GPU = %v of %v over %d stages", big.Weights, big.Total, big.Stages)
	}
}
