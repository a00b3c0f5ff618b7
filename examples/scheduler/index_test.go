package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// linear is the scheduler before the index: Filter (budget.Fits) and
// Score (budget.Utilization) on every GPU in one pass, the highest score
// winning with ties to the lowest index, the smallest shortfall kept for
// a rejection. It is the reference TestPlaceMatchesLinear holds the
// indexed Scheduler to.
type linear struct {
	devs    []gpumem.Device
	largest gpumem.Device
}

func newLinear(fleet []GPU) *linear {
	l := &linear{}
	for _, g := range fleet {
		l.devs = append(l.devs, g.Device)
		idle := g.Device
		idle.Used = 0
		if idle.Free() > l.largest.Free() {
			l.largest = idle
		}
	}
	return l
}

func (l *linear) place(need budget.Breakdown) Decision {
	best, bestScore := -1, math.Inf(-1)
	closest, minShort := -1, gpumem.Bytes(math.MaxInt64)
	for i := range l.devs {
		short, ok := budget.Fits(need, l.devs[i])
		if !ok {
			if short < minShort {
				closest, minShort = i, short
			}
			continue
		}
		if score := budget.Utilization(need, l.devs[i]); score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		_, fitsIdle := budget.Fits(need, l.largest)
		return Decision{Need: need, GPU: -1, Shortfall: minShort, Closest: closest, TooLarge: !fitsIdle}
	}
	l.devs[best].Used += need.Required()
	return Decision{Need: need, GPU: best, Score: bestScore, Closest: -1}
}

// compare places needs with both schedulers and fails at the first
// decision or device state that differs.
func compare(t *testing.T, name string, fleet []GPU, needs []budget.Breakdown) {
	t.Helper()
	s, l := NewScheduler(fleet), newLinear(fleet)
	for k, need := range needs {
		got, want := s.place(&need), l.place(need)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: job %d (need %d): indexed decision differs from the linear pass (-linear +indexed):\n%s",
				name, k, need.Required(), diff)
		}
	}
	for i := range l.devs {
		if got := s.GPU(i).Device; got != l.devs[i] {
			t.Fatalf("%s: GPU %d after placing = %+v, linear pass %+v", name, i, got, l.devs[i])
		}
	}
}

// TestPlaceMatchesLinear checks that the indexed Scheduler makes the
// decisions the full pass over the fleet makes, job by job, on:
//
//   - the program's fleets and queues drawn from several seeds;
//   - random fleets of few kinds of GPU (many ties in free memory) and of
//     random sizes, some over-committed (Used above Capacity), some
//     empty, with random needs, zero needs among them;
//   - fleets of exabyte GPUs, where n / free rounds to the same score for
//     different free memory and the full pass keeps the lower index,
//     and where a shortfall saturates.
func TestPlaceMatchesLinear(t *testing.T) {
	for _, seed := range []uint64{Seed, 1, 2, 3} {
		fleet := NewFleet(seed, 60)
		queue, err := NewQueue(seed, 600)
		require.NoError(t, err)
		var needs []budget.Breakdown
		for _, p := range queue {
			if need, err := budget.Estimate(p.Job); err == nil {
				needs = append(needs, need)
			}
		}
		compare(t, "NewFleet/NewQueue", fleet, needs)
	}

	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 300 {
		var fleet []GPU
		kinds := 1 + rng.IntN(4)
		sizes := make([]gpumem.Bytes, kinds)
		for k := range sizes {
			sizes[k] = gpumem.Bytes(1+rng.IntN(8)) * gpumem.GiB
			if round%3 == 0 {
				sizes[k] = gpumem.Bytes(rng.Int64N(int64(100 * gpumem.GiB)))
			}
		}
		for range rng.IntN(40) {
			d := gpumem.Device{Name: "gpu", Capacity: sizes[rng.IntN(kinds)]}
			switch rng.IntN(4) {
			case 0:
				d.Used = gpumem.Bytes(rng.Int64N(int64(d.Capacity) + 1))
			case 1:
				d.Used = d.Capacity + gpumem.Bytes(rng.IntN(1000)) // over-committed
			}
			if rng.IntN(2) == 0 {
				d.Reserved = Margin
			}
			fleet = append(fleet, GPU{Node: "n", Device: d})
		}
		needs := make([]budget.Breakdown, 100)
		for k := range needs {
			switch rng.IntN(10) {
			case 0: // nothing
			case 1:
				needs[k].Weights = sizes[rng.IntN(kinds)] - Margin // an idle GPU's free memory exactly
			default:
				needs[k].Weights = gpumem.Bytes(rng.Int64N(int64(4 * gpumem.GiB)))
				needs[k].Activations = gpumem.Bytes(rng.IntN(1 << 20))
			}
		}
		compare(t, "random", fleet, needs)
	}

	// Exabyte devices: for a need n = 2⁶⁰, free memory n and n+1 both
	// score 1.0, so the linear pass picks the lower index of the two, here
	// the one with more free memory. Free memory below −2⁶³ + n makes the
	// shortfall saturate.
	n := gpumem.Bytes(1 << 60)
	exa := []GPU{
		{Node: "a", Device: gpumem.Device{Name: "x", Capacity: n + 1}},
		{Node: "b", Device: gpumem.Device{Name: "x", Capacity: n}},
		{Node: "c", Device: gpumem.Device{Name: "x", Capacity: n + 2}},
	}
	need := budget.Breakdown{Weights: n}
	require.Equal(t, budget.Utilization(need, exa[0].Device), budget.Utilization(need, exa[1].Device),
		"the exabyte case no longer rounds to a tie")
	d := NewScheduler(exa).place(&need)
	if d.GPU != 0 {
		t.Errorf("exabyte tie: placed on GPU %d, want 0 (the lowest index of the equal scores)", d.GPU)
	}
	compare(t, "exabyte", exa, []budget.Breakdown{need, need, need, need})
	saturated := []GPU{
		{Node: "a", Device: gpumem.Device{Name: "x", Capacity: 1, Used: math.MaxInt64}},
		{Node: "b", Device: gpumem.Device{Name: "x", Capacity: 1, Used: math.MaxInt64 - 1}},
	}
	compare(t, "saturated", saturated, []budget.Breakdown{{Weights: math.MaxInt64}, {Weights: 1}, {}})
	compare(t, "empty fleet", nil, []budget.Breakdown{{Weights: 1}, {}})
}

// TestFreeIndexOrder checks the treap's invariants after many updates:
// an in-order walk lists every slot once, by (free, slot), and each
// node's priority is at least its children's.
func TestFreeIndexOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	devs := make([]gpumem.Device, 500)
	for i := range devs {
		devs[i].Capacity = gpumem.Bytes(rng.IntN(50)) * gpumem.GiB
	}
	x := newFreeIndex(devs)
	for range 5000 {
		i := rng.IntN(len(devs))
		devs[i].Used = gpumem.Bytes(rng.IntN(60)) * gpumem.GiB
		x.update(i, devs[i].Free())
	}
	var order []int32
	var walk func(t int32)
	walk = func(v int32) {
		if v < 0 {
			return
		}
		for _, c := range []int32{x.nodes[v].left, x.nodes[v].right} {
			if c >= 0 && x.nodes[c].prio > x.nodes[v].prio {
				t.Fatalf("node %d has priority below its child %d", v, c)
			}
		}
		walk(x.nodes[v].left)
		order = append(order, v)
		walk(x.nodes[v].right)
	}
	walk(x.root)
	require.Len(t, order, len(devs))
	for k := 1; k < len(order); k++ {
		if !x.less(order[k-1], order[k]) {
			t.Fatalf("in-order walk: slot %d (free %d) before slot %d (free %d)",
				order[k-1], x.nodes[order[k-1]].free, order[k], x.nodes[order[k]].free)
		}
	}
	for i := range devs {
		if x.nodes[i].free != devs[i].Free() {
			t.Fatalf("slot %d indexed with free %d, device has %d", i, x.nodes[i].free, devs[i].Free())
		}
	}
}
