package leak

// torch.cuda.memory_stats dumps and memory_summary tables.

import (
	"strings"

	"github.com/gpumem/gpumem"
)

// statsLine reads "allocated_bytes.all.current" and
// "reserved_bytes.all.current" values; a repeated key starts a new dump.
func (p *sampleParser) statsLine(t string, n int) error {
	for _, key := range [...]struct {
		name string
		col  Column
	}{{"allocated_bytes.all.current", ColAllocated}, {"reserved_bytes.all.current", ColReserved}} {
		i := strings.Index(t, key.name)
		if i < 0 {
			continue
		}
		j := i + len(key.name)
		for j < len(t) && (t[j] == '"' || t[j] == '\'' || t[j] == ':' || t[j] == ',' || t[j] == ' ' || t[j] == '=') {
			j++
		}
		v, _, ok := readSize(t, j)
		if !ok {
			return gpumem.Errorf(lineField(n), t, gpumem.ErrSyntax, "%s without a byte count", key.name)
		}
		if p.statsOpen && p.stats.Has&key.col != 0 {
			p.flushStats()
		}
		if !p.statsOpen {
			p.stats = Sample{Line: n}
			p.statsOpen = true
		}
		if key.col == ColAllocated {
			p.stats.Allocated = v
		} else {
			p.stats.Reserved = v
		}
		p.stats.Has |= key.col
	}
	if p.stats.Has&(ColAllocated|ColReserved) == ColAllocated|ColReserved {
		p.flushStats()
	}
	return nil
}

// summaryRow reads the Cur Usage column of memory_summary()'s "Allocated
// memory" and "GPU reserved memory" rows.
func (p *sampleParser) summaryRow(t string, n int) error {
	cells := strings.Split(strings.Trim(t, "|"), "|")
	if len(cells) < 2 {
		return nil
	}
	label := strings.TrimSpace(cells[0])
	var col Column
	switch label {
	case "Allocated memory":
		col = ColAllocated
	case "GPU reserved memory":
		col = ColReserved
	default:
		// nvidia-smi's table: the Memory-Usage cell "3210MiB /  8192MiB".
		if u, c, ok := usedOfTotal(t); ok {
			p.emit(Sample{Line: n, Used: u, Capacity: c, Has: ColUsed | ColCapacity})
		}
		return nil
	}
	cur := strings.TrimSpace(cells[1])
	v, err := parseSummarySize(cur)
	if err != nil {
		return gpumem.Errorf(lineField(n), cur, gpumem.ErrSyntax, "memory_summary %s: %v", label, err)
	}
	if p.statsOpen && p.stats.Has&col != 0 {
		p.flushStats()
	}
	if !p.statsOpen {
		p.stats = Sample{Line: n}
		p.statsOpen = true
	}
	if col == ColAllocated {
		p.stats.Allocated = v
	} else {
		p.stats.Reserved = v
	}
	p.stats.Has |= col
	p.used = true
	if col == ColReserved {
		p.flushStats()
	}
	return nil
}

// parseSummarySize reads memory_summary's sizes: "1234 MiB", "0 B" in
// current releases; PyTorch 1.x's _format_size printed the same
// 1024-based amounts as "KB", "MB", "GB" (seen in R-Drop #9), read here
// as KiB, MiB, GiB.
func parseSummarySize(s string) (gpumem.Bytes, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), " ")
	unit = strings.TrimSpace(unit)
	var bin gpumem.Bytes
	switch unit {
	case "KB":
		bin = gpumem.KiB
	case "MB":
		bin = gpumem.MiB
	case "GB":
		bin = gpumem.GiB
	case "TB":
		bin = gpumem.TiB
	default:
		return gpumem.ParseBytes(s)
	}
	if _, err := gpumem.ParseBytes(num); err != nil {
		return 0, err
	}
	if v := scaleDecimal(num, bin, -1); v >= 0 {
		return v, nil
	}
	return 0, gpumem.ErrRange
}
