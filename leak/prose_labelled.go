package leak

// Labelled lines: a figure after a label such as "GPU memory:".

import (
	"strings"
)

// labelledNum is a "Label: N" line ("Before model run: 1098").
type labelledNum struct {
	line  int
	label string
	num   string
}

// labelledLine reads "Label: N": a label of letters and blanks, a colon,
// one number, nothing else.
func labelledLine(t string) (label, num string, ok bool) {
	c := strings.IndexByte(t, ':')
	if c <= 0 || c > 60 {
		return "", "", false
	}
	label = strings.TrimSpace(t[:c])
	for i := 0; i < len(label); i++ {
		if !isLetter(label[i]) && label[i] != ' ' {
			return "", "", false
		}
	}
	num = strings.TrimSpace(t[c+1:])
	if label == "" || num == "" || len(num) > 20 {
		return "", "", false
	}
	dot := false
	for i := 0; i < len(num); i++ {
		switch {
		case isDigit(num[i]):
		case num[i] == '.' && !dot && i > 0 && i+1 < len(num):
			dot = true
		default:
			return "", "", false
		}
	}
	// A label that names another quantity is not memory.
	last := strings.ToLower(label[strings.LastIndexByte(label, ' ')+1:])
	switch last {
	case "loss", "lr", "acc", "accuracy", "epoch", "step", "iter", "iteration", "time", "speed", "throughput",
		"ppl", "perplexity", "norm", "reward", "score", "precision", "recall", "eta", "batch", "seed", "size", "count":
		return "", "", false
	}
	return label, num, true
}

// finishLabelled is the last resort of a log that gave no memory figure:
// when at least 2 lines share one "Label: N" label, their numbers are
// read as a bare column of memory in their order (the unit of bare
// columns: ReadOptions.Unit, else assumed). It returns the lines read.
func (p *sampleParser) finishLabelled() []int {
	if len(p.labelled) < 2 {
		return nil
	}
	for _, s := range p.out {
		if s.Has&ColMemory != 0 {
			return nil
		}
	}
	count := map[string]int{}
	best := ""
	for _, l := range p.labelled {
		count[l.label]++
		if count[l.label] > count[best] {
			best = l.label
		}
	}
	if count[best] < 2 {
		return nil
	}
	var lines []int
	for _, l := range p.labelled {
		if l.label != best {
			continue
		}
		v, err := p.tableSize(l.num, 0)
		if err != nil {
			continue
		}
		p.out = append(p.out, Sample{Line: l.line, Used: v, Has: ColUsed})
		lines = append(lines, l.line)
	}
	return lines
}
