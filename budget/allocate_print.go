package budget

// Printing a plan and its ladder.

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// String prints the plan and its ladder as a table.
func (p Plan) String() string {
	var b strings.Builder
	if p.Job.Parallel.GPUs() > 1 {
		fmt.Fprintf(&b, "layout %s; ", p.Job.Parallel.Describe())
	}
	if s := p.Job.Model.Spec(); s.Backbone != nil {
		fmt.Fprintf(&b, "batch %d × %d×%d px images", p.Batch, s.Image.Size, s.Image.Size)
	} else {
		fmt.Fprintf(&b, "batch %d × %d tokens", p.Batch, p.SeqLen)
	}
	if p.GradAccum > 1 {
		fmt.Fprintf(&b, ", %d accumulation steps", p.GradAccum)
	}
	fmt.Fprintf(&b, ", attention %s", p.Attention)
	if p.HeadChunk > 0 {
		fmt.Fprintf(&b, " (%d heads at a time)", p.HeadChunk)
	}
	if p.Job.Mode == Training {
		fmt.Fprintf(&b, ", checkpointing %s", p.Checkpointing)
		switch {
		case p.Optimizer != nil:
			fmt.Fprintf(&b, ", %s", p.Optimizer)
			if p.Job.OptimizerInBackward {
				b.WriteString(" stepped in backward")
			}
		case p.Job.Gradients == InputGradients || p.Job.Model.trainableParams == 0:
			b.WriteString(", gradients to the input only")
		default:
			b.WriteString(", no optimizer step")
		}
		if p.Job.Loss.Kind != model.FullLoss {
			fmt.Fprintf(&b, ", %s loss", p.Job.Loss)
		}
	}
	fmt.Fprintf(&b, ", %s", p.Precision)
	if p.Offload != 0 {
		fmt.Fprintf(&b, ", offload %s", p.Offload)
	}
	if p.ModelName != "" {
		fmt.Fprintf(&b, ", %s", p.ModelName)
	}
	for _, buf := range p.Buffers {
		if buf.Elastic {
			fmt.Fprintf(&b, ", %s %d entries", buf.Name, buf.Entries)
		}
	}
	fmt.Fprintf(&b, "\nneeds %s of %s free (%s left); stopped by %s", p.Need.Required().String(), p.Free.String(),
		p.Headroom.String(), p.Reason)
	if p.Limiting != "" {
		fmt.Fprintf(&b, " (%s)", p.Limiting)
	}
	b.WriteString("\n")
	if what, unit, first, ok := p.maximum(); ok && len(p.Ladder) > 1 {
		changed := false
		for _, r := range p.Ladder[1:] {
			changed = changed || r.Applied
		}
		v := gpumem.Thousands(int64(p.objectiveValue()))
		switch {
		case !changed:
			fmt.Fprintf(&b, "objective: the %s, %s %s; no change tried lengthens it\n", what, v, unit)
		case first == 0:
			fmt.Fprintf(&b, "objective: the %s, %s %s with the changes marked * (nothing fits without them)\n", what, v, unit)
		default:
			fmt.Fprintf(&b, "objective: the %s, %s %s with the changes marked * (%s without them)\n", what, v, unit, gpumem.Thousands(int64(first)))
		}
	}
	writeLadder(&b, p.Ladder)
	return b.String()
}

// maximum names the quantity a maximizing plan maximized and its unit,
// and gives its maximum on the ladder's first rung (the job as given,
// without changes); ok is false for FitAsGiven.
func (p Plan) maximum() (what, unit string, first int, ok bool) {
	if len(p.Ladder) == 0 {
		return "", "", 0, false
	}
	switch p.Objective {
	case MaximizeSeqLen:
		return "longest sequence", "tokens", p.Ladder[0].LongestSeqLen, true
	case MaximizeBatch:
		return "largest batch", "sequences", p.Ladder[0].LargestBatch, true
	}
	return "", "", 0, false
}

// objectiveValue is the plan's value of the quantity it maximized.
func (p Plan) objectiveValue() int {
	if p.Objective == MaximizeBatch {
		return p.Batch
	}
	return p.SeqLen
}

// LadderString prints the ladder as the table Plan.String ends with;
// rows marked * are in the plan.
func (p Plan) LadderString() string {
	var b strings.Builder
	writeLadder(&b, p.Ladder)
	return b.String()
}

// writeLadder prints the ladder table, with a column for the maximum a
// maximizing objective searched on each rung.
func writeLadder(b *strings.Builder, ladder []Rung) {
	column := ""
	for _, s := range ladder {
		switch {
		case s.LongestSeqLen > 0:
			column = "longest seq"
		case s.LargestBatch > 0:
			column = "largest batch"
		}
	}
	maxCell := func(s Rung) string {
		switch {
		case column == "":
			return ""
		case s.LongestSeqLen > 0:
			return fmt.Sprintf("%13s  ", gpumem.Thousands(int64(s.LongestSeqLen)))
		case s.LargestBatch > 0:
			return fmt.Sprintf("%13s  ", gpumem.Thousands(int64(s.LargestBatch)))
		}
		return fmt.Sprintf("%13s  ", "—")
	}
	head := ""
	if column != "" {
		head = fmt.Sprintf("%13s  ", column)
	}
	fmt.Fprintf(b, "  %-44s %12s %12s  %-4s  %s%s\n", "change", "device peak", "saving", "fits", head, "cost")
	for _, s := range ladder {
		mark := " "
		if s.Applied {
			mark = "*"
		}
		fits := "no"
		if s.Fits {
			fits = "yes"
		}
		saving := "—"
		if s.Saving > 0 {
			saving = "−" + s.Saving.String()
		}
		fmt.Fprintf(b, "%s %-44s %12s %12s  %-4s  %s%s\n", mark, s.Change, s.Device.String(), saving, fits, maxCell(s), s.Cost.Text)
	}
}
