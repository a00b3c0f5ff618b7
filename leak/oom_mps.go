package leak

// PyTorch's MPS (Apple silicon) out-of-memory message.

import (
	"strings"

	"github.com/gpumem/gpumem"
)

// parseMPS reads "MPS backend out of memory (MPS allocated: A, other
// allocations: B, max allowed: C). Tried to allocate D on private pool."
// Older MPS builds print KB/MB/GB from their own 1024-based format_size;
// those are read as KiB/MiB/GiB.
func parseMPS(s string, at, end int, o *OOM) bool {
	o.Framework, o.Backend, o.Era = PyTorch, MPS, EraMPS
	o.Start = at
	i := skipSpace(s, end)
	if i < len(s) && s[i] == '(' {
		i++
		for {
			i = skipSpace(s, i)
			e, which := matchAny(s, i, "MPS allocated:", "other allocations:", "max allowed:")
			if e < 0 {
				break
			}
			v, j, ok := readMPSSize(s, e)
			if !ok {
				o.Truncated = true
				o.End = e
				return true
			}
			switch which {
			case 0:
				o.set(FieldAllocated, &o.Allocated, v)
			case 1:
				o.set(FieldOther, &o.Other, v)
			case 2:
				o.set(FieldAllowed, &o.Allowed, v)
			}
			i = j
			if i < len(s) && s[i] == ',' {
				i++
			}
		}
		if i < len(s) && s[i] == ')' {
			i++
		}
		if i < len(s) && s[i] == '.' {
			i++
		}
	}
	e := match(s, skipSpace(s, i), "Tried to allocate")
	if e < 0 {
		o.Truncated = true
		o.End = i
		return true
	}
	v, j, ok := readMPSSize(s, e)
	if !ok {
		o.Truncated = true
		o.End = e
		return true
	}
	o.set(FieldRequested, &o.Requested, v)
	if e, _ := matchAny(s, j, " on private pool", " on shared pool"); e >= 0 {
		j = e
	}
	o.End = j
	o.Hint |= scanHints(s, j)
	return true
}

// readMPSSize reads an MPS size, mapping the 1024-based "KB", "MB", "GB"
// of older builds to KiB, MiB, GiB: the digits are scaled by the binary
// unit exactly (scaleDecimal) instead of ParseBytes' decimal one.
func readMPSSize(s string, i int) (gpumem.Bytes, int, bool) {
	v, end, ok := readSize(s, i)
	if !ok {
		return 0, i, false
	}
	var bin gpumem.Bytes
	switch {
	case strings.HasSuffix(s[:end], "KB"):
		bin = gpumem.KiB
	case strings.HasSuffix(s[:end], "MB"):
		bin = gpumem.MiB
	case strings.HasSuffix(s[:end], "GB"):
		bin = gpumem.GiB
	default:
		return v, end, true
	}
	numEnd := end - 2
	for numEnd > i && (s[numEnd-1] == ' ' || s[numEnd-1] == '\t') {
		numEnd--
	}
	start := skipSpace(s, i)
	return scaleDecimal(s[start:numEnd], bin, v), end, true
}
