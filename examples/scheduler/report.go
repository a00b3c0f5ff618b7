package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpumem/gpumem"
)

// The size of the demonstration.
const (
	fleetNodes = 240 // nodes in the fleet
	queueJobs  = 800 // jobs in the queue
	showPlaced = 8   // placements printed
	showReject = 4   // rejections printed per reason
)

// run builds the fleet and the queue, places the jobs and writes the
// report to w.
func run(w io.Writer) error {
	fleet := NewFleet(Seed, fleetNodes)
	queue, err := NewQueue(Seed, queueJobs)
	if err != nil {
		return err
	}
	s := NewScheduler(fleet)
	usedBefore, capacity, busyBefore := s.Usage()
	fmt.Fprintf(w, "fleet: %d nodes, %d GPUs, %s of memory, %s withheld per GPU as a margin\n",
		fleetNodes, len(fleet), capacity.String(), Margin.String())
	fmt.Fprintf(w, "queue: %d jobs\n", len(queue))
	decisions := s.Place(queue)
	usedAfter, _, busyAfter := s.Usage()
	report(w, s, queue, decisions)
	fmt.Fprintf(w, "fleet memory in use: before %s (%.1f%%, %d GPUs busy), after %s (%.1f%%, %d GPUs busy)\n",
		usedBefore.String(), percent(usedBefore, capacity), busyBefore,
		usedAfter.String(), percent(usedAfter, capacity), busyAfter)
	return nil
}

func percent(part, whole gpumem.Bytes) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}

// Reasons a job is rejected, in the order the report lists them.
const (
	invalid  = iota // PreFilter failed
	tooLarge        // would not fit the fleet's largest GPU idle
	noRoom          // would fit an idle GPU, but none has room now
	reasons
)

var reasonText = [reasons]string{"invalid", "larger than any GPU", "no GPU free enough now"}

func reason(d Decision) int {
	switch {
	case d.Err != nil:
		return invalid
	case d.TooLarge:
		return tooLarge
	}
	return noRoom
}

// report writes the first placements, the first rejections of each
// reason, and the counts.
func report(w io.Writer, s *Scheduler, queue []Pending, decisions []Decision) {
	placed := 0
	var rejected [reasons]int
	for _, d := range decisions {
		if d.Placed() {
			placed++
		} else {
			rejected[reason(d)]++
		}
	}
	fmt.Fprintf(w, "placed %d of %d jobs; the first %d:\n", placed, len(queue), min(showPlaced, placed))
	shown := 0
	for k, d := range decisions {
		if !d.Placed() || shown == showPlaced {
			continue
		}
		shown++
		g := s.GPU(d.GPU)
		free := g.Device.Free() + d.Need.Required() // before Reserve
		fmt.Fprintf(w, "  %s %-40s -> %s/gpu%d %-21s needs %s of %s free (%.1f%%), peak in %s\n",
			queue[k].Name, queue[k].Desc, g.Node, g.Index, g.Device.Name, d.Need.Device().String(), free.String(),
			100*d.Score, d.Need.Phase)
	}
	fmt.Fprintf(w, "rejected %d jobs: %d %s, %d %s, %d %s\n", len(queue)-placed,
		rejected[invalid], reasonText[invalid], rejected[tooLarge], reasonText[tooLarge], rejected[noRoom], reasonText[noRoom])
	for r := range reasons {
		shown := 0
		seen := map[string]bool{} // print each kind of job once
		for k, d := range decisions {
			if d.Placed() || reason(d) != r || seen[queue[k].Desc] {
				continue
			}
			seen[queue[k].Desc] = true
			if shown == showReject {
				fmt.Fprintf(w, "  ... and %d more %s\n", rejected[r]-shown, reasonText[r])
				break
			}
			shown++
			p := queue[k]
			if d.Err != nil {
				why := d.Err
				var fe *gpumem.FieldError
				if errors.As(d.Err, &fe) {
					why = fe.Err
				}
				fmt.Fprintf(w, "  %s %-40s unschedulable, field %s: %v\n", p.Name, p.Desc, d.Field, why)
				continue
			}
			g := s.GPU(d.Closest)
			dom := d.Need.Dominant()
			fmt.Fprintf(w, "  %s %-40s %s: needs %s, smallest shortfall %s on %s/gpu%d (%s); largest component %s %s\n",
				p.Name, p.Desc, reasonText[r], d.Need.Device().String(), d.Shortfall.String(), g.Node, g.Index,
				g.Device.Name, dom.Name, dom.Bytes.String())
		}
	}
}
