package leak

// PyTorch CUDA caching allocator messages by era: "Tried to allocate" with
// parenthesized totals (before 2.0), the sentences of 2.0 and later, and
// the PYTORCH_CUDA_ALLOC_CONF hints.

import (
	"strings"
)

// parseTried reads the caching allocators' messages, anchored at "Tried
// to allocate": PyTorch 1.0–2.0 "(GPU n; …)" and 2.1+ ". GPU n has a
// total capacity of …", for CUDA, HIP, XPU and IPEX.
func parseTried(s string, at, end int, o *OOM) bool {
	// MPS messages also say "Tried to allocate"; parseMPS reads them.
	if lookBack(s, at, 160, "MPS backend out of memory") >= 0 {
		return false
	}
	o.Framework, o.Backend = PyTorch, CUDA
	o.Start = at
	switch {
	case lookBack(s, at, 8, "HIP out of memory.") >= 0:
		o.Backend = HIP
		o.Start = lookBack(s, at, 8, "HIP out of memory.")
	case lookBack(s, at, 8, "XPU out of memory.") >= 0:
		o.Backend = XPU
		o.Start = lookBack(s, at, 8, "XPU out of memory.")
	case lookBack(s, at, 80, "Current platform can NOT allocate") >= 0:
		o.Backend = XPU
		o.Start = lookBack(s, at, 80, "Current platform can NOT allocate")
	case lookBack(s, at, 8, "CUDA out of memory.") >= 0:
		o.Start = lookBack(s, at, 8, "CUDA out of memory.")
	case lookBack(s, at, 24, "CUDA out of") >= 0:
		// Retyped: "CUDA out of memmory.", "CUDA out of the memory.".
		o.Start = lookBack(s, at, 24, "CUDA out of")
	}
	// The anchor stops before the last letter of "allocate": skip what
	// the writer typed there ("e", or nothing in "allocat").
	for k := 0; k < 3 && end < len(s) && isLetter(s[end]); k++ {
		end++
	}
	v, i, ok := readSize(s, end)
	if !ok {
		o.Truncated = true
		o.End = end
		return true
	}
	o.set(FieldRequested, &o.Requested, v)
	i = skipSpace(s, i)
	switch {
	case i < len(s) && s[i] == '(':
		i = parseParenthesized(s, i+1, o)
	case i < len(s) && s[i] == '.':
		i = parseSentences(s, i+1, o)
	default:
		o.Truncated = true
	}
	o.End = i
	o.Hint |= scanHints(s, i)
	return true
}

// parseParenthesized reads "(GPU n; X total capacity; Y already allocated;
// Z free; [A allowed; ]R reserved in total by PyTorch)" and the 1.0 form
// ending "C cached)". It returns the index after the closing parenthesis.
func parseParenthesized(s string, i int, o *OOM) int {
	e := match(s, skipSpace(s, i), "GPU ")
	if e < 0 {
		o.Truncated = true
		return i
	}
	dev, j, ok := readInt(s, e)
	if !ok {
		o.Truncated = true
		return e
	}
	o.Device = int(dev)
	o.Stated |= FieldDevice
	o.Era = EraReservedTotal
	i = j
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			o.Truncated = true
			break
		}
		if s[i] == ')' {
			i++
			break
		}
		if s[i] != ';' {
			o.Truncated = true
			break
		}
		v, j, ok := readSize(s, i+1)
		if !ok {
			o.Truncated = true
			break
		}
		e, which := matchAny(s, j, " total capacity", " already allocated", " free", " allowed",
			" reserved in total by PyTorch", " cached")
		if e < 0 {
			o.Truncated = true
			break
		}
		switch which {
		case 0:
			o.set(FieldCapacity, &o.Capacity, v)
		case 1:
			o.set(FieldAllocated, &o.Allocated, v)
		case 2:
			o.set(FieldFree, &o.Free, v)
		case 3:
			o.set(FieldAllowed, &o.Allowed, v)
		case 4:
			o.set(FieldReserved, &o.Reserved, v)
		case 5:
			o.set(FieldReservedUnallocated, &o.ReservedUnallocated, v)
			o.Era = EraCached
		}
		i = e
	}
	if o.Has(FieldReserved | FieldAllocated) {
		o.derive(FieldReservedUnallocated, &o.ReservedUnallocated, o.Reserved-o.Allocated)
	}
	if o.Has(FieldReservedUnallocated | FieldAllocated) {
		o.derive(FieldReserved, &o.Reserved, o.Allocated+o.ReservedUnallocated)
	}
	return i
}

// parseSentences reads the PyTorch 2.1+ form after "Tried to allocate X.":
// "GPU n has a total capacity of Y of which Z is free. [Process P has M
// memory in use. | Including non-PyTorch memory, this process has M
// memory in use. ]… [A allowed; ]Of the allocated memory B is allocated by
// PyTorch, [with C allocated in private pools (e.g., CUDA Graphs), ]and D
// is reserved by PyTorch but unallocated."
func parseSentences(s string, i int, o *OOM) int {
	e := match(s, skipSpace(s, i), "GPU ")
	if e < 0 {
		o.Truncated = true
		return i
	}
	dev, j, ok := readInt(s, e)
	if !ok {
		o.Truncated = true
		return e
	}
	o.Device = int(dev)
	o.Stated |= FieldDevice
	e, which := matchAny(s, j, " has a total capacity of", " has a total capacty of")
	if e < 0 {
		o.Truncated = true
		return j
	}
	o.Era = EraCapacity
	if which == 1 {
		o.Era = EraCapacty
	}
	v, j, ok := readSize(s, e)
	if !ok {
		o.Truncated = true
		return e
	}
	o.set(FieldCapacity, &o.Capacity, v)
	i = j
	if e := match(s, i, " of which"); e >= 0 {
		v, j, ok := readSize(s, e)
		if !ok {
			o.Truncated = true
			return e
		}
		o.set(FieldFree, &o.Free, v)
		i = j
		if e := match(s, i, " is free."); e >= 0 {
			i = e
		} else {
			o.Truncated = true
			return i
		}
	} else if i < len(s) && s[i] == '.' {
		i++
	}
	for {
		k := skipSpace(s, i)
		if k >= len(s) {
			o.Truncated = true
			return i
		}
		if e := match(s, k, "Process "); e >= 0 {
			pid, j, ok := readInt(s, e)
			if !ok {
				o.Truncated = true
				return i
			}
			e = match(s, j, " has")
			if e < 0 {
				o.Truncated = true
				return i
			}
			v, j, ok := readSize(s, e)
			if !ok {
				o.Truncated = true
				return i
			}
			if o.NumProcesses < MaxProcesses {
				o.Processes[o.NumProcesses] = Process{PID: pid, Used: v}
				o.NumProcesses++
			} else {
				o.MoreProcesses++
				o.MoreUsed += v
			}
			o.Stated |= FieldProcesses
			i = skipInUse(s, j)
			continue
		}
		if e := match(s, k, "Including non-PyTorch memory, this process has"); e >= 0 {
			v, j, ok := readSize(s, e)
			if !ok {
				o.Truncated = true
				return i
			}
			o.set(FieldSelf, &o.Self, v)
			i = skipInUse(s, j)
			continue
		}
		if isDigit(s[k]) {
			v, j, ok := readSize(s, k)
			if ok {
				if e := match(s, j, " allowed;"); e >= 0 {
					o.set(FieldAllowed, &o.Allowed, v)
					i = e
					continue
				}
			}
			o.Truncated = true
			return i
		}
		break
	}
	k := skipSpace(s, i)
	e = match(s, k, "Of the allocated memory")
	if e < 0 {
		o.Truncated = true
		return i
	}
	v, j, ok = readSize(s, e)
	if !ok {
		o.Truncated = true
		return e
	}
	o.set(FieldAllocated, &o.Allocated, v)
	e = match(s, j, " is allocated by PyTorch,")
	if e < 0 {
		o.Truncated = true
		return j
	}
	i = e
	if e := match(s, i, " with"); e >= 0 {
		v, j, ok := readSize(s, e)
		if !ok {
			o.Truncated = true
			return e
		}
		e = match(s, j, " allocated in private pools")
		if e < 0 {
			o.Truncated = true
			return j
		}
		o.set(FieldPrivatePools, &o.PrivatePools, v)
		// Skip " (e.g., CUDA Graphs)," up to the "and".
		_, e2 := findWithin(s, e, e+48, " and")
		if e2 < 0 {
			o.Truncated = true
			return e
		}
		i = e2 - len(" and")
	}
	e = match(s, i, " and")
	if e < 0 {
		o.Truncated = true
		return i
	}
	v, j, ok = readSize(s, e)
	if !ok {
		o.Truncated = true
		return e
	}
	e = match(s, j, " is reserved by PyTorch but unallocated")
	if e < 0 {
		o.Truncated = true
		return j
	}
	o.set(FieldReservedUnallocated, &o.ReservedUnallocated, v)
	o.derive(FieldReserved, &o.Reserved, o.Allocated+o.ReservedUnallocated)
	if e < len(s) && s[e] == '.' {
		e++
	}
	return e
}

// skipInUse skips " memory in use." after a process's size.
func skipInUse(s string, i int) int {
	if e := match(s, i, " memory in use."); e >= 0 {
		return e
	}
	return i
}

// scanHints looks at the text following a message for the remedies the
// framework suggests.
func scanHints(s string, i int) Hint {
	limit := i + 400
	if limit > len(s) {
		limit = len(s)
	}
	if i > limit {
		return 0
	}
	w := s[i:limit]
	var h Hint
	if strings.Contains(w, "max_split_size_mb") {
		h |= HintMaxSplitSize
	}
	if strings.Contains(w, "expandable_segments") {
		h |= HintExpandableSegments
	}
	if strings.Contains(w, "PYTORCH_CUDA_ALLOC_CONF") {
		h |= HintCUDAAllocConf
	}
	if strings.Contains(w, "PYTORCH_HIP_ALLOC_CONF") {
		h |= HintHIPAllocConf
	}
	if strings.Contains(w, "PYTORCH_ALLOC_CONF") {
		h |= HintAllocConf
	}
	if strings.Contains(w, "PYTORCH_MPS_HIGH_WATERMARK_RATIO") {
		h |= HintMPSWatermark
	}
	if strings.Contains(w, "empty_cache") {
		h |= HintEmptyCache
	}
	return h
}
