package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// TestRun runs the program twice: the output is the same both times and
// its summary lines agree with a placement made here.
func TestRun(t *testing.T) {
	var first, second bytes.Buffer
	require.NoError(t, run(&first))
	require.NoError(t, run(&second))
	if diff := cmp.Diff(first.String(), second.String()); diff != "" {
		t.Fatalf("run output differs between two runs (-first +second):\n%s", diff)
	}
	out := first.String()

	fleet := NewFleet(Seed, fleetNodes)
	queue, err := NewQueue(Seed, queueJobs)
	require.NoError(t, err)
	decisions := NewScheduler(fleet).Place(queue)
	placed := 0
	var rejected [reasons]int
	for _, d := range decisions {
		if d.Placed() {
			placed++
		} else {
			rejected[reason(d)]++
		}
	}
	for _, want := range []string{
		fmt.Sprintf("fleet: %d nodes, %d GPUs, ", fleetNodes, len(fleet)),
		fmt.Sprintf("queue: %d jobs\n", len(queue)),
		fmt.Sprintf("placed %d of %d jobs; the first %d:\n", placed, len(queue), showPlaced),
		fmt.Sprintf("rejected %d jobs: %d invalid, %d larger than any GPU, %d no GPU free enough now\n",
			len(queue)-placed, rejected[invalid], rejected[tooLarge], rejected[noRoom]),
		"unschedulable, field Job.Optimizer: ",
		"unschedulable, field Job.Generate: ",
		"fleet memory in use: before ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q; got:\n%s", want, out)
		}
	}
	if got := strings.Count(out, " -> node-"); got != showPlaced {
		t.Errorf("run printed %d placements, want %d", got, showPlaced)
	}
	if !strings.HasSuffix(out, "GPUs busy)\n") {
		t.Errorf("run output does not end with the utilization line; got:\n%s", out)
	}
}

// TestPlace replays the scheduler's decisions on a copy of the fleet and
// checks each one: a placed job fits its GPU (budget.Fits) and no
// feasible GPU scores higher; a rejected job fits no GPU, its shortfall
// is the smallest, and TooLarge tells whether an idle GPU would do; an
// invalid job names its field. At the end the replayed fleet equals the
// scheduler's.
func TestPlace(t *testing.T) {
	fleet := NewFleet(Seed, fleetNodes)
	queue, err := NewQueue(Seed, queueJobs)
	require.NoError(t, err)
	s := NewScheduler(fleet)
	decisions := s.Place(queue)
	require.Len(t, decisions, len(queue))

	devs := make([]gpumem.Device, len(fleet))
	for i, g := range fleet {
		devs[i] = g.Device
	}
	var count [reasons]int
	placedOn := map[string]int{}
	placedModes := map[budget.Mode]int{}
	for k, d := range decisions {
		p := queue[k]
		need, err := budget.Estimate(p.Job)
		if err != nil {
			var fe *gpumem.FieldError
			require.ErrorAs(t, err, &fe, "%s", p.Name)
			if d.Placed() || d.Err == nil || d.Field != fe.Field || !strings.HasPrefix(d.Field, "Job.") {
				t.Errorf("%s (%s): Schedule = placed %v, field %q, err %v; want rejected naming %q",
					p.Name, p.Desc, d.Placed(), d.Field, d.Err, fe.Field)
			}
			count[invalid]++
			continue
		}
		if diff := cmp.Diff(need, d.Need); diff != "" {
			t.Fatalf("%s: Decision.Need differs from Estimate (-want +got):\n%s", p.Name, diff)
		}
		if d.Placed() {
			if _, ok := budget.Fits(need, devs[d.GPU]); !ok {
				t.Errorf("%s (%s) placed on GPU %d (%s, %s free) where it does not fit %s",
					p.Name, p.Desc, d.GPU, devs[d.GPU].Name, devs[d.GPU].Free().String(), need.Device().String())
			}
			if u := budget.Utilization(need, devs[d.GPU]); u != d.Score {
				t.Errorf("%s: Score = %v, want Utilization %v", p.Name, d.Score, u)
			}
			for i := range devs {
				if _, ok := budget.Fits(need, devs[i]); !ok {
					continue
				}
				u := budget.Utilization(need, devs[i])
				if u > d.Score || (u == d.Score && i < d.GPU) {
					t.Errorf("%s placed on GPU %d (score %v) but GPU %d scores %v", p.Name, d.GPU, d.Score, i, u)
					break
				}
			}
			devs[d.GPU].Used += need.Required()
			placedOn[devs[d.GPU].Name]++
			placedModes[p.Job.Mode]++
			continue
		}
		short, closest := gpumem.Bytes(math.MaxInt64), -1
		fitsIdle := false
		for i := range devs {
			sh, ok := budget.Fits(need, devs[i])
			if ok {
				t.Errorf("%s (%s) rejected but fits GPU %d (%s, %s free)", p.Name, p.Desc, i, devs[i].Name, devs[i].Free().String())
				break
			}
			if sh < short {
				short, closest = sh, i
			}
			idle := devs[i]
			idle.Used = 0
			if _, ok := budget.Fits(need, idle); ok {
				fitsIdle = true
			}
		}
		if d.Shortfall != short || d.Closest != closest {
			t.Errorf("%s: shortfall %v on GPU %d, want %v on GPU %d", p.Name, d.Shortfall, d.Closest, short, closest)
		}
		if d.TooLarge == fitsIdle {
			t.Errorf("%s (%s): TooLarge = %v, but fits an idle GPU = %v", p.Name, p.Desc, d.TooLarge, fitsIdle)
		}
		count[reason(d)]++
	}
	for i := range devs {
		if got := s.GPU(i).Device; got != devs[i] {
			t.Fatalf("GPU %d after Place = %+v, replayed %+v", i, got, devs[i])
		}
		if devs[i].Free() < 0 {
			t.Errorf("GPU %d (%s) over-committed: %s free", i, devs[i].Name, devs[i].Free().String())
		}
	}

	// The workload exercises every path: each reason to reject, training
	// and generation placed, many kinds of GPU used.
	for r, n := range count {
		if n == 0 {
			t.Errorf("no job rejected as %s", reasonText[r])
		}
	}
	if placedModes[budget.Training] == 0 || placedModes[budget.Generation] == 0 {
		t.Errorf("placed jobs by mode = %v, want training and generation", placedModes)
	}
	if len(placedOn) < 10 {
		t.Errorf("jobs placed on %d kinds of GPU, want at least 10: %v", len(placedOn), placedOn)
	}
}

// TestScheduleAllocs checks that scheduling a valid job allocates
// nothing, placed or rejected.
func TestScheduleAllocs(t *testing.T) {
	queue, err := NewQueue(Seed, queueJobs)
	require.NoError(t, err)
	s := NewScheduler(NewFleet(Seed, fleetNodes))
	var small, huge budget.Job
	for _, p := range queue {
		need, err := budget.Estimate(p.Job)
		if err != nil {
			continue
		}
		if need.Device() < 4*gpumem.GiB && small.Batch == 0 {
			small = p.Job
		}
		if need.Device() > 400*gpumem.GiB && huge.Batch == 0 {
			huge = p.Job
		}
	}
	require.NotZero(t, small.Batch, "no small job in the queue")
	require.NotZero(t, huge.Batch, "no huge job in the queue")
	for name, j := range map[string]budget.Job{"placed": small, "rejected": huge} {
		if n := testing.AllocsPerRun(20, func() { s.Schedule(j) }); n != 0 {
			t.Errorf("Schedule(%s job) allocates %v times, want 0", name, n)
		}
	}
}

// TestPreFilterField checks that an invalid job's Decision names the
// field, as a *gpumem.FieldError names it.
func TestPreFilterField(t *testing.T) {
	s := NewScheduler(NewFleet(Seed, 4))
	d := s.Schedule(budget.Job{})
	var fe *gpumem.FieldError
	if d.Placed() || !errors.As(d.Err, &fe) || d.Field != fe.Field || d.Field != "Job.Model" {
		t.Errorf("Schedule(zero Job) = placed %v, field %q, err %v; want rejected naming Job.Model", d.Placed(), d.Field, d.Err)
	}
}

// BenchmarkPlace10kOn1k places a queue of 10,000 jobs on a fleet of
// 1,000 GPUs with Scheduler.Place, as the program does, on a fresh copy
// of the fleet each time: PreFilter (budget.Estimate) once per job, the
// index's best fit, Reserve on the chosen GPU. ns/op is the time for the
// whole queue.
func BenchmarkPlace10kOn1k(b *testing.B) { benchmarkPlace(b, 400, 1000, 10_000) }

// benchmarkPlace places jobs jobs on the first gpus GPUs of a fleet of
// nodes nodes, on a fresh copy of the fleet each time.
func benchmarkPlace(b *testing.B, nodes, gpus, jobs int) {
	fleet := NewFleet(Seed, nodes)
	if len(fleet) < gpus {
		b.Fatalf("NewFleet(%d nodes) has %d GPUs, want at least %d", nodes, len(fleet), gpus)
	}
	fleet = fleet[:gpus]
	queue, err := NewQueue(Seed, jobs)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	placed := 0
	for b.Loop() {
		placed = 0
		for _, d := range NewScheduler(fleet).Place(queue) {
			if d.Placed() {
				placed++
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(queue)), "ns/job")
	b.ReportMetric(float64(placed), "placed")
}

// BenchmarkPreFilter estimates the 10,000 jobs of BenchmarkPlace10kOn1k
// alone: PreFilter's share of it; the rest is the index's search and
// Reserve.
func BenchmarkPreFilter(b *testing.B) {
	queue, err := NewQueue(Seed, 10_000)
	if err != nil {
		b.Fatal(err)
	}
	s := NewScheduler(nil)
	b.ReportAllocs()
	for b.Loop() {
		for k := range queue {
			s.PreFilter(queue[k].Job)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(queue)), "ns/job")
}

// BenchmarkPlace100kOn10k places a queue of 100,000 jobs on a fleet of
// 10,000 GPUs with Scheduler.Place, on a fresh copy of the fleet each
// time, as BenchmarkPlace10kOn1k does ten times larger in both. ns/op
// is the time for the whole queue.
func BenchmarkPlace100kOn10k(b *testing.B) { benchmarkPlace(b, 4000, 10_000, 100_000) }
