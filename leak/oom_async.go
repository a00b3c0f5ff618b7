package leak

// PyTorch's cudaMallocAsync backend messages, with the memory summaries and
// ComfyUI device reports printed after them.

import (
	"github.com/gpumem/gpumem"
)

// parseAsync reads the cudaMallocAsync backend's message. PyTorch builds
// before PR #168369 stream the device index as a char (c10::DeviceIndex,
// an int8_t), so on device 0 a NUL byte ends the C string and only
// "Allocation on device " survives; that message returns Truncated.
//
// What follows the cut still counts: a log written from C++ keeps the byte
// itself (its value is the device index, then the full message), and the
// "Currently allocated … Requested …" summary, a torch.cuda.memory_summary
// table ("PyTorch CUDA memory summary, device ID 0") or a ComfyUI error
// report's Devices section (readComfyDevices) printed after the cut
// message gives the numbers and the device. The scan stops at the next
// "Allocation on device", so one message never takes another's.
func parseAsync(s string, at, end int, o *OOM) bool {
	o.Framework, o.Backend, o.Era = PyTorch, CUDA, EraAsync
	o.Start = at
	dev, j, ok := readInt(s, end)
	if !ok {
		k := end
		if k < len(s) && s[k] == ' ' {
			k++
		}
		if k < len(s) && s[k] < 0x20 && !isSpace(s[k]) {
			dev, j, ok = int64(s[k]), k+1, true
		}
	}
	cut := !ok || match(s, j, " would exceed allowed memory") < 0
	i := j
	if cut {
		i = end
	}
	limit := i + 600
	if limit > len(s) {
		limit = len(s)
	}
	if st, _ := findWithin(s, i, limit, "Allocation on device"); st >= 0 {
		limit = st
	}
	if cut {
		o.Truncated = true
		o.End = end
		sumLimit := min(end+32768, len(s))
		if st, _ := findWithin(s, end, sumLimit, "Allocation on device"); st >= 0 {
			sumLimit = st
		}
		if _, e := findWithin(s, end, sumLimit, "memory summary, device ID"); e >= 0 {
			if d, _, ok := readInt(s, e); ok && d < 1<<16 {
				o.Device = int(d)
				o.Stated |= FieldDevice
			}
		} else {
			readComfyDevices(s, end, sumLimit, o)
		}
	} else {
		o.Device = int(dev)
		o.Stated |= FieldDevice
	}
	labels := [...]struct {
		kw string
		f  Field
		p  *gpumem.Bytes
	}{
		{"Currently allocated", FieldAllocated, &o.Allocated},
		{"Requested", FieldRequested, &o.Requested},
		{"Device limit", FieldCapacity, &o.Capacity},
		{"Free (according to CUDA):", FieldFree, &o.Free},
		{"PyTorch limit (set by user-supplied memory fraction)", FieldAllowed, &o.Allowed},
	}
	complete := true
	for _, l := range labels {
		st, e := findWithin(s, i, limit, l.kw)
		if st < 0 {
			complete = false
			break
		}
		k := skipSpace(s, e)
		if k < len(s) && s[k] == ':' {
			k++
		}
		v, j, ok := readSize(s, k)
		if !ok {
			// "17179869184.00 GiB" (2^64 bytes) means no limit; it does
			// not fit an int64 and is not a cap.
			if l.f != FieldAllowed {
				complete = false
			}
			i = k
			continue
		}
		o.set(l.f, l.p, v)
		i = j
	}
	if cut {
		// The numbers that follow a cut message are the message's own;
		// it stays Truncated and ends where it was cut.
		return true
	}
	o.Truncated = !complete
	o.End = i
	return true
}

// readComfyDevices reads the "## Devices" section of a ComfyUI error
// report, which follows the cut "Exception Message: Allocation on device "
// after the stack trace: "- **Name:** cuda:0 NVIDIA GeForce RTX 2060 :
// cudaMallocAsync" and "- **VRAM Total:** 12884443136" give Device and
// Capacity. Its "VRAM Free" and "Torch VRAM" figures are taken when the
// report is made, after ComfyUI unloaded its models, and are not read.
func readComfyDevices(s string, from, limit int, o *OOM) {
	for st, e := findWithin(s, from, limit, "Name:"); st >= 0; st, e = findWithin(s, st+1, limit, "Name:") {
		k := e
		for k < limit && (s[k] == '*' || s[k] == ' ') {
			k++
		}
		m := match(s, k, "cuda:")
		if m < 0 {
			continue
		}
		d, j, ok := readInt(s, m)
		if !ok || d >= 1<<16 {
			return
		}
		o.Device = int(d)
		o.Stated |= FieldDevice
		if _, e := findWithin(s, j, min(j+300, limit), "VRAM Total:"); e >= 0 {
			for e < limit && (s[e] == '*' || s[e] == ' ') {
				e++
			}
			if v, _, ok := readSize(s, e); ok {
				o.set(FieldCapacity, &o.Capacity, v)
			}
		}
		return
	}
}
