package leak

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
)

// Column is a set of the values a [Sample] holds.
type Column uint8

// Columns of a Sample.
const (
	ColStep      Column = 1 << iota // Sample.Step
	ColTime                         // Sample.Time
	ColAllocated                    // Sample.Allocated
	ColReserved                     // Sample.Reserved
	ColUsed                         // Sample.Used
	ColCapacity                     // Sample.Capacity
)

// ColMemory is any of the memory columns.
const ColMemory = ColAllocated | ColReserved | ColUsed

// Sample is one reading of a job's memory.
//
// Allocated and Reserved are PyTorch's meanings (tensors; the caching
// allocator's hold); Used is memory as the device or a log reports it for
// the process (nvidia-smi memory.used, or a log's unqualified "Memory=").
type Sample struct {
	Step      int64     // training step or iteration, when ColStep
	Time      time.Time // when the sample was taken, when ColTime
	Device    int       // GPU index when the source names one (nvidia-smi "index"), else 0
	Run       int       // 0, or the number of a later run when a narrative's steps restart (Options.Run)
	Line      int       // 1-based line of the input it was read from
	Has       Column    // which fields are set
	Peak      bool      // memory columns are running peaks (max_memory_allocated, max_mem, Max_MA): they never decrease
	OOM       bool      // the line reports an out-of-memory failure at Step (no memory values)
	Allocated gpumem.Bytes
	Reserved  gpumem.Bytes
	Used      gpumem.Bytes
	Capacity  gpumem.Bytes // device capacity when the source states it (nvidia-smi memory.total)
}

// Limits on what ParseSamples reads; beyond them it fails rather than
// allocate without bound.
const (
	MaxLineBytes = 1 << 20    // longest line read
	MaxSamples   = 10_000_000 // most samples returned
)

// ParseSamples reads memory samples from a log, detecting the format line
// by line:
//
//   - free-form training logs with a step and a memory value with units
//     anywhere on the line ("Step 100: Loss=2.34, Memory=18.2GB",
//     "iter 20 | mem 10.5 GiB", "global_step=300 allocated=1.2GiB");
//   - nvidia-smi --query-gpu=…memory.used… --format=csv, with or without
//     the header and with or without units (nounits: MiB);
//   - torch.cuda.memory_stats() dumps as JSON or Python dict repr
//     ("allocated_bytes.all.current", "reserved_bytes.all.current"), one
//     sample per dump, and memory_allocated()/memory_reserved() lines;
//   - torch.cuda.memory_summary() tables (the Cur Usage of "Allocated
//     memory" and "GPU reserved memory");
//   - DeepSpeed see_memory_usage lines ("MA 1.2 GB Max_MA 1.3 GB CA 1.5 GB
//     Max_CA 2 GB"; DeepSpeed divides by 1024³, so its GB are GiB);
//   - mmdetection/mmengine "Epoch [e][i/n] … memory: 3795" and detectron2
//     "iter: 19 … max_mem: 2345M": running peaks of max_memory_allocated in
//     MiB, marked Peak.
//
// Units follow [gpumem.ParseBytes] ("18.2GB" is 18.2·10⁹ bytes, "GiB"
// binary) except a bare K/M/G, which tools print for binary units. A value
// without unit is bytes when it is an integer of at least 2^20, else MiB.
// A line reporting an out-of-memory failure at a step ("Step 1000: CUDA
// OOM") becomes a Sample with OOM set. Lines without a memory value are
// skipped. Errors are *[gpumem.FieldError] values naming the line; a
// nil r is an error of field "reader".
func ParseSamples(r io.Reader) ([]Sample, error) {
	out, _, err := readSamples(r, true, ReadOptions{})
	return out, err
}

func lineField(n int) string { return "line " + strconv.Itoa(n) }

// sampleParser keeps the state of multi-line formats.
type sampleParser struct {
	out []Sample
	// CSV columns, set by a header (nvidia-smi's or a logger's own).
	csv       bool
	spec      csvSpec
	stats     Sample // pending memory_stats / memory_summary sample
	statsOpen bool
	statsUnit string // step unit of the pending sample
	lastStep  int64

	unit     gpumem.Bytes // ReadOptions.Unit: unit of unit-less CSV and bare values, 0 = assume
	capacity gpumem.Bytes // ReadOptions.Capacity: device memory, for percentages
	assumed  bool         // a unit-less value was read by the assumption
	used     bool         // the current line was read (a sample, a header, part of a dump)
	stepUnit string       // unit of the step of the sample being emitted
	units    map[string]int
	host     bool // the current line reports host (CPU) memory: skipped as such

	// A step read from a line without memory, for the memory lines that
	// follow without their own.
	pendStep int64
	pendUnit string
	pendOK   bool

	pairBuf []pair // reused by pairs, line after line

	// Prose: the figures read from sentences, resolved at the end
	// (finishProse), and the scratch of the current line.
	prose     []proseFig
	memSeen   bool           // a line spoke of memory: prose figures after it are memory figures
	pctText   map[int]string // lines with prose percentages, by number, for the report
	tokBuf    []ptoken
	figBuf    []clauseFig
	posBuf    []clausePos
	clauseBuf [][2]int
	assignBuf []clausePos
	// "Label: N" lines, read as a last resort (finishLabelled).
	labelled []labelledNum

	// Time-of-day cells without a date ("03:27:19.000", xpu-smi dump):
	// the offset from the first such row, a day added each time the
	// clock goes back (past midnight).
	todFirst, todLast time.Duration
	todDays           int64
	todOK             bool
}

func (p *sampleParser) emit(s Sample) {
	p.out = append(p.out, s)
	p.used = true
	if s.Has&ColStep != 0 {
		p.lastStep = s.Step
		if p.units == nil {
			p.units = map[string]int{}
		}
		u := p.stepUnit
		if u == "" {
			u = "step"
		}
		p.units[u]++
	}
}

func (p *sampleParser) flushStats() {
	if p.statsOpen && p.stats.Has&ColMemory != 0 {
		p.stepUnit = "step"
		if p.stats.Has&ColStep == 0 {
			p.stats.Step = int64(len(p.out))
			p.stats.Has |= ColStep
			p.stepUnit = "sample"
		}
		p.emit(p.stats)
	}
	p.stats = Sample{}
	p.statsOpen = false
}

func (p *sampleParser) line(line string, n int) error {
	t := strings.TrimSpace(line)
	if t == "" || t[0] == '#' {
		// A '#' comment (a log's "# source: …" line) never gives a
		// sample, whatever figures it quotes.
		return nil
	}
	// A CSV header: nvidia-smi's, or a logger's own.
	if spec, ok := parseHeader(t); ok {
		if !spec.hasMemory() && p.proseLine(t, n) {
			// A sentence with commas is no table header.
			return nil
		}
		p.csv, p.spec = true, spec
		p.used = spec.hasMemory() // a header without a memory column is skipped, and shown
		return nil
	}
	if p.csv && !p.spec.hasMemory() {
		// A row of a table without a memory column ("step,loss" then
		// "1,2.0") gives nothing, and is not a bare "step value" row.
		if fields := splitFields(t, p.spec.delim); len(fields) == p.spec.n && allNumbers(fields) {
			return nil
		}
		p.csv = false
	}
	if p.csv || looksLikeSMIRow(t) {
		if s, ok, err := p.csvRow(t, n); err != nil || ok {
			if ok {
				p.stepUnit = p.spec.stepUnit
				p.emit(s)
			}
			return err
		}
		if p.csv {
			// A row of the table without a memory figure: read, no sample.
			return nil
		}
	}
	// torch.cuda.memory_stats() keys, possibly one per line.
	if strings.Contains(t, "allocated_bytes.all.current") || strings.Contains(t, "reserved_bytes.all.current") {
		p.used = true
		return p.statsLine(t, n)
	}
	// torch.cuda.memory_summary() rows.
	if strings.HasPrefix(t, "|") {
		return p.summaryRow(t, n)
	}
	// YOLO's training rows without their header.
	if s, ok := yoloRow(t, n); ok {
		p.stepUnit = "epoch"
		p.emit(s)
		return nil
	}
	// Bare columns of numbers: "value" or "step value".
	if s, ok, err := p.bareRow(t, n); err != nil || ok {
		if ok {
			p.stepUnit = "step"
			p.emit(s)
		}
		return err
	}
	return p.freeForm(line, n)
}

// reportsOOM reports whether a log line announces an out-of-memory
// failure.
func reportsOOM(line string) bool {
	if _, ok := ParseOOM(line); ok {
		return true
	}
	return strings.Contains(line, " OOM") || strings.Contains(line, "out of memory") || strings.Contains(line, "OutOfMemoryError")
}

// String returns a one-line form of s for logs and test failures.
func (s Sample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %d:", s.Line)
	if s.Has&ColStep != 0 {
		fmt.Fprintf(&b, " step=%d", s.Step)
	}
	if s.Has&ColTime != 0 {
		fmt.Fprintf(&b, " time=%s", s.Time.Format(time.RFC3339Nano))
	}
	if s.Has&ColAllocated != 0 {
		fmt.Fprintf(&b, " allocated=%s", s.Allocated.String())
	}
	if s.Has&ColReserved != 0 {
		fmt.Fprintf(&b, " reserved=%s", s.Reserved.String())
	}
	if s.Has&ColUsed != 0 {
		fmt.Fprintf(&b, " used=%s", s.Used.String())
	}
	if s.Has&ColCapacity != 0 {
		fmt.Fprintf(&b, " capacity=%s", s.Capacity.String())
	}
	if s.Peak {
		b.WriteString(" peak")
	}
	if s.OOM {
		b.WriteString(" OOM")
	}
	return b.String()
}
