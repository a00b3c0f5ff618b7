package main

import (
	"errors"
	"math"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// GPU is one device of the fleet and where it sits.
type GPU struct {
	Node   string // the node's name
	Index  int    // the GPU's index on its node, as CUDA_VISIBLE_DEVICES counts
	Device gpumem.Device
}

// Decision is what the scheduler did with one job. Placed jobs have GPU
// >= 0; rejected ones have GPU == -1 and either Err (PreFilter failed:
// the job is invalid) or a Shortfall (no GPU had room).
type Decision struct {
	// Need is the job's estimate; zero when PreFilter failed.
	Need budget.Breakdown
	// GPU is the index in the fleet of the GPU the job was placed on,
	// or -1.
	GPU int
	// Score is budget.Utilization of the chosen GPU before the job was
	// reserved on it: the fraction of its free memory the job takes.
	Score float64

	// Err is PreFilter's error, and Field the job field it names.
	Err   error
	Field string
	// Shortfall is the smallest shortfall over the fleet when no GPU had
	// room, and Closest the GPU that came closest.
	Shortfall gpumem.Bytes
	Closest   int
	// TooLarge reports that the job would not fit even on the fleet's
	// largest GPU with nothing else on it: waiting or preempting other
	// jobs cannot help, only a larger GPU or a smaller job can.
	TooLarge bool
}

// Placed reports whether the job was placed.
func (d Decision) Placed() bool { return d.GPU >= 0 }

// Scheduler places single-GPU jobs on a fleet with the Kubernetes
// scheduler-framework extension points, backed by package budget:
//
//   - PreFilter: budget.Estimate, once per job; an error makes the job
//     unschedulable, with the field it names;
//   - Filter: budget.Fits, without side effects; a GPU that fails leaves
//     its shortfall, the smallest of which becomes the rejection's reason;
//   - Score: budget.Utilization on the GPUs that pass Filter; the
//     highest wins, which packs the job onto the GPU it fills most
//     tightly and leaves large free GPUs for large jobs (ties go to the
//     lowest index);
//   - Reserve: the chosen GPU's Used grows by the job's device-level
//     need.
//
// Schedule does not run Filter and Score on every GPU: the job's
// device-level need n is computed once, and an index of the fleet
// ordered by free memory (a treap, see freeIndex) gives the answer the
// full pass would give, in O(log n) per job instead of O(GPUs):
//
//   - Filter passes exactly the GPUs with free ≥ n (budget.Fits: the
//     shortfall n − free is not positive);
//   - Utilization is n / free, which for n > 0 does not increase as free
//     grows (a correctly rounded division is monotone), so the highest
//     score is that of the GPU with the least free ≥ n. Two GPUs whose
//     free memory differs may still score the same after rounding (n /
//     free and n / (free+1) are the same float64 once free passes 2⁵³
//     bytes, or when free ≈ n ≈ 2⁶⁰), and the full pass then keeps the
//     lower index: Schedule walks the next larger free values while
//     they score the same and keeps the lowest index among them;
//   - a job that fits nowhere has its smallest shortfall on the GPU with
//     the most free memory (the lowest index among equals); a shortfall
//     that saturates at math.MaxInt64 on it saturates on every GPU,
//     which the full pass reports as no closest GPU;
//   - a need of nothing or less (which budget.Estimate never returns)
//     scores 0 everywhere: the lowest index with free ≥ n wins, found by
//     a scan.
//
// TestPlaceMatchesLinear checks the decisions against the full pass,
// kept in the test, on random fleets and queues. Placing a valid job
// allocates nothing.
//
// A Scheduler is not safe for concurrent use.
type Scheduler struct {
	devs    []gpumem.Device // the fleet's devices, Used updated by Reserve
	where   []GPU           // node and index of each device, as given
	largest gpumem.Device   // the fleet's largest GPU, idle: Used zero
	free    freeIndex       // the devices ordered by free memory
}

// NewScheduler returns a scheduler over a copy of fleet.
func NewScheduler(fleet []GPU) *Scheduler {
	s := &Scheduler{devs: make([]gpumem.Device, len(fleet)), where: make([]GPU, len(fleet))}
	copy(s.where, fleet)
	for i, g := range fleet {
		s.devs[i] = g.Device
		idle := g.Device
		idle.Used = 0
		if idle.Free() > s.largest.Free() {
			s.largest = idle
		}
	}
	s.free = newFreeIndex(s.devs)
	return s
}

// GPU returns the fleet's i-th GPU with its current Used.
func (s *Scheduler) GPU(i int) GPU {
	g := s.where[i]
	g.Device = s.devs[i]
	return g
}

// Len returns the number of GPUs in the fleet.
func (s *Scheduler) Len() int { return len(s.devs) }

// PreFilter estimates the job once. On error it returns the job field
// the error names ("Job.Optimizer"), or "Job" when it names none.
func (s *Scheduler) PreFilter(j budget.Job) (need budget.Breakdown, field string, err error) {
	need, err = budget.Estimate(j)
	if err != nil {
		field = "Job"
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			field = fe.Field
		}
	}
	return need, field, err
}

// Filter reports whether need fits on GPU i now, and the shortfall when
// it does not. It has no side effects.
func (s *Scheduler) Filter(need *budget.Breakdown, i int) (shortfall gpumem.Bytes, ok bool) {
	return budget.Fits(*need, s.devs[i])
}

// Score returns GPU i's score for need: the fraction of its free memory
// the job would take, in [0, 1] for a GPU that passed Filter. Higher is
// a tighter fit.
func (s *Scheduler) Score(need *budget.Breakdown, i int) float64 {
	return budget.Utilization(*need, s.devs[i])
}

// Reserve books need on GPU i: what Filter checked, need.Required()
// (a paged optimizer's state beyond its largest tensor pages out to the
// host rather than take a booked GPU's memory).
func (s *Scheduler) Reserve(need *budget.Breakdown, i int) {
	s.devs[i].Used += need.Required()
	s.free.update(i, s.devs[i].Free())
}

// Schedule runs the extension points for one job and, when a GPU has
// room, reserves the job on it. It does not allocate unless PreFilter
// fails.
func (s *Scheduler) Schedule(j budget.Job) Decision {
	need, field, err := s.PreFilter(j)
	if err != nil {
		return Decision{GPU: -1, Closest: -1, Err: err, Field: field}
	}
	return s.place(&need)
}

// place chooses the GPU for an estimated job, as Filter and Score on
// every GPU would (see [Scheduler]), and reserves the job on it. It sums
// the job's need once (Breakdown.Required, what Fits checks) to place it (a rejection sums it
// twice more, for the shortfall and TooLarge); the scores it compares
// are budget.Utilization's n / free for n > 0 and free ≥ n, written out.
func (s *Scheduler) place(need *budget.Breakdown) Decision {
	n := need.Required()
	best, score := -1, 0.0
	if n > 0 {
		var f gpumem.Bytes
		if best, f = s.free.atLeast(n); best >= 0 {
			score = float64(n) / float64(f)
			// Larger free memory that rounds to the same score: the
			// full pass keeps the lowest index.
			for i, fi := s.free.above(f); i >= 0 && float64(n)/float64(fi) == score; i, fi = s.free.above(fi) {
				best = min(best, i)
			}
		}
	} else {
		for i := range s.devs {
			if s.devs[i].Free() >= n { // Fits; Utilization is 0
				best = i
				break
			}
		}
	}
	if best < 0 {
		closest, short := s.free.most(), gpumem.Bytes(math.MaxInt64)
		if closest >= 0 {
			short, _ = s.Filter(need, closest)
			if short == math.MaxInt64 {
				closest = -1 // saturated everywhere: none is closer
			}
		}
		_, fitsIdle := budget.Fits(*need, s.largest)
		return Decision{Need: *need, GPU: -1, Shortfall: short, Closest: closest, TooLarge: !fitsIdle}
	}
	s.devs[best].Used += n // Reserve, with the need summed above
	s.free.update(best, s.devs[best].Free())
	return Decision{Need: *need, GPU: best, Score: score, Closest: -1}
}

// Place schedules the jobs in queue order and returns one Decision per
// job, aligned with queue.
func (s *Scheduler) Place(queue []Pending) []Decision {
	out := make([]Decision, len(queue))
	for k := range queue {
		out[k] = s.Schedule(queue[k].Job)
	}
	return out
}

// Usage returns the memory in use on the fleet (the sum of Used) and
// its capacity, and how many GPUs have anything in use.
func (s *Scheduler) Usage() (used, capacity gpumem.Bytes, busy int) {
	for i := range s.devs {
		used += s.devs[i].Used
		capacity += s.devs[i].Capacity
		if s.devs[i].Used > 0 {
			busy++
		}
	}
	return used, capacity, busy
}
