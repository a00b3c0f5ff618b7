package leak

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpumem/gpumem"
)

// ErrNoSamples reports an input without a single memory figure:
// nothing was checked, so there is no verdict on a leak.
var ErrNoSamples = errors.New("no memory samples found")

// ReadOptions tunes [ReadSamples]. The zero value, and a nil
// *ReadOptions, mean the defaults.
type ReadOptions struct {
	// Unit is the unit of unit-less values in bare columns of numbers and
	// in CSV columns whose header states no unit ("memory_used" rather
	// than "memory_used_mb" or "memory.used [MiB]"). Default (0): such a
	// value is bytes when it is an integer of at least 2^20, else MiB,
	// and ReadReport.Assumed says so. Free-form log lines keep their own
	// rules (see [ParseSamples]).
	Unit gpumem.Bytes
	// Capacity is the device memory that percentages of it are read
	// against (W&B's system.gpu.N.memoryAllocated). Default (0): a
	// percentage column gives no sample and its rows are skipped as
	// malformed, saying so.
	Capacity gpumem.Bytes
}

// SkipReason is why a line gave no sample.
type SkipReason uint8

// Reasons for skipping a line.
const (
	SkipNoMemory  SkipReason = iota // no memory figure recognised on the line
	SkipMalformed                   // a memory figure, step or time that does not read ("12Gb", "[N/A]")
	SkipTooLong                     // longer than MaxLineBytes
	// SkipHost is a host (CPU) memory line — DeepSpeed's "CPU Virtual
	// Memory:", mmengine's "Memory information … used_memory", a script's
	// "Memory info of CPU" — whose figures are not GPU memory.
	SkipHost
	numSkipReasons
)

// String returns the reason's snake-case name ("no_memory_figure").
func (s SkipReason) String() string {
	switch s {
	case SkipNoMemory:
		return "no_memory_figure"
	case SkipMalformed:
		return "malformed"
	case SkipTooLong:
		return "too_long"
	case SkipHost:
		return "host_memory"
	}
	return "reason(" + strconv.Itoa(int(s)) + ")"
}

// SkippedLine is one line that gave no sample.
type SkippedLine struct {
	Line   int        // 1-based
	Reason SkipReason //
	Text   string     // the line, cut to MaxExampleBytes, invalid UTF-8 replaced
	Detail string     // why a malformed figure did not read, else ""
}

// Limits on what a ReadReport keeps.
const (
	MaxExamples     = 3   // skipped lines kept per reason
	MaxExampleBytes = 120 // of a skipped line's text
)

// ReadReport says what [ReadSamples] read and what it skipped.
type ReadReport struct {
	Lines    int                 // lines in the input, blank ones included
	Read     int                 // lines that gave a sample or belong to a format read (a table's header, a memory_stats dump)
	Skipped  int                 // lines that gave nothing, other than blank lines and '#' comments
	ByReason [numSkipReasons]int // Skipped by SkipReason
	Examples []SkippedLine       // the first MaxExamples skipped lines of each reason, in input order
	Samples  int                 // samples returned, OOM reports included
	// StepUnit is what the samples' steps count: "step", "iteration",
	// "epoch", or "sample" (a sequence number the reader gave dumps
	// without one); "" when no sample has a step.
	StepUnit string
	// Assumed states the unit assumed for unit-less values when
	// ReadOptions.Unit was not given and one was read; else "".
	Assumed string
	// Snapshot describes a PyTorch memory snapshot's trace when the
	// input was one (its samples are allocated memory at trace events,
	// StepUnit "event"); else nil.
	Snapshot *SnapshotInfo
	// Prose is how many samples were read from prose ("at iter 219 it
	// jumps to 7000mb").
	Prose int
	// Confidence is how sure the reading is, and ConfidenceWhy why it
	// is not high (see [Confidence]).
	Confidence    Confidence
	ConfidenceWhy []string
}

// assumption is ReadReport.Assumed's text.
const assumption = "values without a unit read as MiB (integers of at least 2^20 as bytes); give the unit to be sure"

// ReadSamples reads memory samples like [ParseSamples] but never fails on
// a line: a line that gives no sample — no memory figure, a figure that
// does not read, a line longer than MaxLineBytes — is skipped and counted
// in the report with the first few examples. It also reads CSV tables
// with their own headers (a memory column by name — memory_used,
// memory.used, mem_used_mb, gpu_mem, gpu_memory, used_memory,
// memory_allocated, memory_reserved, max_memory_allocated, mem, vram …
// with the unit from the header's "[MiB]", "(GB)" or "_mb" suffix or from
// the values; a step, iteration or epoch column, else a time column, else
// the row order; quoted fields, extra columns, comma, tab, semicolon or
// blank separators) and bare columns of numbers ("18.2" or "100 18.2GB"
// per line). ParseSamples reads those too.
//
// It returns an error wrapping [ErrNoSamples], with the report, when no
// line gives a memory figure, a *[gpumem.FieldError] naming the place
// ("device_traces[0][3].size", "snapshot") for a PyTorch memory snapshot
// that does not read, and the reader's own error if reading fails.
// A nil r is an error of field "reader".
func ReadSamples(r io.Reader, opts *ReadOptions) ([]Sample, ReadReport, error) {
	var o ReadOptions
	if opts != nil {
		o = *opts
	}
	if o.Unit < 0 {
		return nil, ReadReport{}, gpumem.Errorf("ReadOptions.Unit", o.Unit, gpumem.ErrRange, "negative unit")
	}
	if o.Capacity < 0 {
		return nil, ReadReport{}, gpumem.Errorf("ReadOptions.Capacity", o.Capacity, gpumem.ErrRange, "negative capacity")
	}
	out, rep, err := readSamples(r, false, o)
	if err != nil {
		return nil, rep, err
	}
	mem := 0
	for _, s := range out {
		if s.Has&ColMemory != 0 {
			mem++
		}
	}
	if mem == 0 {
		return out, rep, noSamples(rep)
	}
	return out, rep, nil
}

// noSamples is ReadSamples' error for input without a memory figure.
func noSamples(rep ReadReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%v in %d lines", ErrNoSamples, rep.Lines)
	if rep.Skipped > 0 {
		b.WriteString(" (")
		for i, e := range rep.Examples {
			if i == 3 {
				break
			}
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "line %d %s: %q", e.Line, e.Reason, e.Text)
			if e.Detail != "" {
				fmt.Fprintf(&b, ": %s", e.Detail)
			}
		}
		b.WriteString(")")
	}
	if rep.Snapshot != nil {
		fmt.Fprintf(&b, "; the PyTorch memory snapshot has no allocation trace for device %d (%d entries): record one with torch.cuda.memory._record_memory_history(max_entries=…) before the snapshot", rep.Snapshot.Device, rep.Snapshot.Entries)
		return fmt.Errorf("%w%s", ErrNoSamples, strings.TrimPrefix(b.String(), ErrNoSamples.Error()))
	}
	if h := rep.ByReason[SkipHost]; h > 0 {
		fmt.Fprintf(&b, "; %d line(s) report host (CPU) memory only, not GPU memory", h)
	}
	b.WriteString("; expected lines such as \"step 100 memory 18.2GB\", nvidia-smi's CSV output, or a CSV with a memory column (memory_used, mem_used_mb, gpu_mem …)")
	return fmt.Errorf("%w%s", ErrNoSamples, strings.TrimPrefix(b.String(), ErrNoSamples.Error()))
}

// readSamples is ParseSamples (strict: the first bad line is an error)
// and ReadSamples (lenient: bad lines are skipped and counted).
func readSamples(r io.Reader, strict bool, o ReadOptions) ([]Sample, ReadReport, error) {
	var rep ReadReport
	if r == nil {
		return nil, rep, gpumem.Errorf("reader", nil, gpumem.ErrInvalid, "nil reader")
	}
	br := bufio.NewReaderSize(r, 64*1024)
	if head, _ := br.Peek(512); len(head) > 0 {
		if len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5 {
			// _dump_snapshot's pickle (protocol 2–5) is not read here.
			return nil, rep, fmt.Errorf("%w: the input is a Python pickle (torch.cuda.memory._dump_snapshot writes one); convert it to JSON first: python -c \"import json, pickle, sys; json.dump(pickle.load(open(sys.argv[1], 'rb')), sys.stdout)\" snapshot.pickle > snapshot.json", ErrNoSamples)
		}
		if t := bytes.TrimLeft(head, " \t\r\n\ufeff"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
			// JSON: a PyTorch memory snapshot, or a memory_stats dump read
			// line by line.
			all, err := io.ReadAll(br)
			if err != nil {
				return nil, rep, err
			}
			if looksLikeSnapshot(all) {
				return snapshotSamples(all)
			}
			br = bufio.NewReaderSize(bytes.NewReader(all), 64*1024)
		}
	}
	p := sampleParser{unit: o.Unit, capacity: o.Capacity}
	n := 0
	var long []byte
	skip := func(reason SkipReason, text, detail string) {
		rep.Skipped++
		rep.ByReason[reason]++
		if rep.ByReason[reason] <= MaxExamples {
			rep.Examples = append(rep.Examples, SkippedLine{Line: n, Reason: reason, Text: exampleText(text), Detail: detail})
		}
	}
	for {
		line, tooLong, err := readLine(br, &long)
		if err != nil && err != io.EOF {
			return nil, rep, err
		}
		if err == io.EOF && line == "" && !tooLong {
			break
		}
		n++
		rep.Lines = n
		switch {
		case tooLong && strict:
			return nil, rep, gpumem.Errorf(lineField(n), "", gpumem.ErrRange, "line longer than %d bytes", MaxLineBytes)
		case tooLong:
			skip(SkipTooLong, line, fmt.Sprintf("longer than %d bytes", MaxLineBytes))
		default:
			p.used, p.host = false, false
			if lerr := p.line(line, n); lerr != nil {
				if strict {
					return nil, rep, lerr
				}
				detail := lerr.Error()
				var fe *gpumem.FieldError
				if errors.As(lerr, &fe) {
					detail = fe.Err.Error()
				}
				skip(SkipMalformed, line, detail)
			} else if p.used {
				rep.Read++
			} else if t := strings.TrimSpace(line); t == "" || t[0] == '#' {
				// Blank lines and '#' comments are neither read nor skipped.
			} else if p.host {
				skip(SkipHost, line, "host (CPU) memory, not GPU memory")
			} else {
				skip(SkipNoMemory, line, "")
				if label, num, ok := labelledLine(strings.TrimSpace(line)); ok && len(p.labelled) < 10000 {
					p.labelled = append(p.labelled, labelledNum{line: n, label: label, num: num})
				}
			}
		}
		if len(p.out) > MaxSamples {
			return nil, rep, gpumem.Errorf(lineField(n), len(p.out), gpumem.ErrRange, "more than %d samples", MaxSamples)
		}
		if err == io.EOF {
			break
		}
	}
	p.flushStats()
	finishReading(&p, &rep)
	rep.Samples = len(p.out)
	best := 0
	for _, u := range [...]string{"step", "iteration", "epoch", "sample", "event"} {
		if p.units[u] > best {
			rep.StepUnit, best = u, p.units[u]
		}
	}
	if p.assumed {
		rep.Assumed = assumption
	}
	return p.out, rep, nil
}

// readLine returns the next line without its end ("\n" or "\r\n"); a line
// longer than MaxLineBytes is consumed whole and returned cut, with
// tooLong set. At the end of the input it returns io.EOF with the last
// line, if any.
func readLine(br *bufio.Reader, long *[]byte) (line string, tooLong bool, err error) {
	*long = (*long)[:0]
	for {
		chunk, err := br.ReadSlice('\n')
		if len(*long)+len(chunk) <= MaxLineBytes+2 {
			*long = append(*long, chunk...)
		} else {
			tooLong = true
			if room := MaxExampleBytes - len(*long); room > 0 {
				*long = append(*long, chunk[:min(room, len(chunk))]...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(*long), "\n"), "\r")
		if !tooLong && len(s) > MaxLineBytes {
			tooLong = true
		}
		return s, tooLong, err
	}
}

// exampleText is a skipped line as a report keeps it.
func exampleText(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > MaxExampleBytes {
		cut := MaxExampleBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	// No control characters reach a terminal or a JSON reader (C1 ones
	// pass encoding/json unescaped).
	return strings.Map(func(r rune) rune {
		if r == '\t' {
			return ' '
		}
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// finishReading resolves what only the whole input tells: the prose
// figures' positions and runs, percentages against a capacity, the
// labelled numbers of a log that gave nothing else, and the confidence.
func finishReading(p *sampleParser, rep *ReadReport) {
	before := len(p.out)
	why, noCapacity := p.finishProse()
	rep.Prose = len(p.out) - before
	for _, l := range noCapacity {
		// A line read for its percentages only, without a capacity: skipped
		// as malformed, saying what is missing.
		rep.Read--
		rep.Skipped++
		rep.ByReason[SkipMalformed]++
		if rep.ByReason[SkipMalformed] <= MaxExamples {
			rep.Examples = append(rep.Examples, SkippedLine{Line: l, Reason: SkipMalformed, Text: p.pctText[l],
				Detail: "a percentage of the device needs its capacity (ReadOptions.Capacity, --capacity, request field capacity)"})
		}
	}
	if lines := p.finishLabelled(); len(lines) > 0 {
		why = append(why, whyLabelled)
		read := map[int]bool{}
		for _, l := range lines {
			read[l] = true
		}
		rep.Read += len(lines)
		rep.Skipped -= len(lines)
		rep.ByReason[SkipNoMemory] -= len(lines)
		k := 0
		for _, e := range rep.Examples {
			if e.Reason == SkipNoMemory && read[e.Line] {
				continue
			}
			rep.Examples[k] = e
			k++
		}
		rep.Examples = rep.Examples[:k]
	}
	if len(p.out) > before {
		slices.SortStableFunc(p.out, func(a, b Sample) int { return a.Line - b.Line })
	}
	if p.assumed {
		why = append([]string{whyAssumed}, why...)
	}
	rep.ConfidenceWhy = why
	switch {
	case len(why) == 0:
		rep.Confidence = ConfidenceHigh
	case len(why) == 1 && why[0] == whyAssumed, len(why) == 1 && why[0] == whyProse,
		len(why) == 2 && why[0] == whyAssumed && why[1] == whyProse:
		rep.Confidence = ConfidenceMedium
	default:
		rep.Confidence = ConfidenceLow
	}
}

// snapshotSamples is readSamples for a PyTorch memory snapshot.
func snapshotSamples(all []byte) ([]Sample, ReadReport, error) {
	var rep ReadReport
	rep.Lines = bytes.Count(all, []byte{'\n'}) + 1
	out, info, err := readSnapshot(all)
	if err != nil {
		return nil, rep, err
	}
	rep.Read = rep.Lines
	rep.Snapshot = info
	rep.Samples = len(out)
	if len(out) > 0 {
		rep.StepUnit = "event"
	}
	return out, rep, nil
}
