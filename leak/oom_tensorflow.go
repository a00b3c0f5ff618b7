package leak

// TensorFlow and JAX/XLA messages: the tensor-shape OOM, the BFC
// allocator's statistics and XLA's RESOURCE_EXHAUSTED.

import (
	"math/bits"
	"strings"

	"github.com/gpumem/gpumem"
)

// dtypeSize returns the bytes per element of a TensorFlow type name as it
// prints DataTypeString (tensorflow/core/framework/types.cc).
func dtypeSize(name string) int64 {
	switch name {
	case "float", "int32", "uint32", "qint32", "float32":
		return 4
	case "double", "int64", "uint64", "complex64", "float64":
		return 8
	case "half", "bfloat16", "int16", "uint16", "qint16", "quint16", "float16":
		return 2
	case "int8", "uint8", "bool", "qint8", "quint8", "float8_e4m3fn", "float8_e5m2":
		return 1
	case "complex128":
		return 16
	}
	return 0
}

// parseTFTensor reads "OOM when allocating tensor with shape[a,b,c] and
// type float on /job:…/device:GPU:0 by allocator GPU_0_bfc". The request
// is derived as the product of the shape times the type's size; the BFC
// allocator's "Limit:" and "InUse:" statistics printed just before are
// read as Capacity and Allocated.
func parseTFTensor(s string, at, end int, o *OOM) bool {
	o.Framework, o.Backend, o.Era = TensorFlow, CUDA, EraTFTensor
	o.Start, o.End = at, end
	i := skipSpace(s, end)
	if i < len(s) && s[i] == '[' {
		i++
		n := int64(1)
		okShape := true
		for {
			d, j, ok := readInt(s, i)
			if !ok {
				okShape = false
				break
			}
			hi, lo := bits.Mul64(uint64(n), uint64(d))
			if hi != 0 || lo > 1<<62 {
				okShape = false
			}
			n = int64(lo)
			i = skipSpace(s, j)
			if i < len(s) && s[i] == ',' {
				i++
				continue
			}
			if i < len(s) && s[i] == ']' {
				i++
			} else {
				okShape = false
			}
			break
		}
		if e := match(s, i, " and type "); e >= 0 {
			w := e
			for w < len(s) && (isLetter(s[w]) || isDigit(s[w]) || s[w] == '_') {
				w++
			}
			if sz := dtypeSize(s[e:w]); sz > 0 && okShape {
				hi, lo := bits.Mul64(uint64(n), uint64(sz))
				if hi == 0 && lo <= 1<<62 {
					o.derive(FieldRequested, &o.Requested, gpumem.Bytes(lo))
				}
			}
			i = w
		} else if !okShape {
			o.Truncated = true
		}
		o.End = i
	}
	if st, e := findWithin(s, o.End, o.End+120, "device:GPU:"); st >= 0 {
		if d, _, ok := readInt(s, e); ok {
			o.Device = int(d)
			o.Stated |= FieldDevice
		}
	}
	readBFCStats(s, at, o)
	return true
}

// readBFCStats reads "Limit: N" and "InUse: N" of the BFC allocator's
// statistics when they appear in the 8 KB before at.
func readBFCStats(s string, at int, o *OOM) {
	from := at - 8192
	if from < 0 {
		from = 0
	}
	if st, e := findWithin(s, from, at, "Limit:"); st >= 0 {
		if v, _, ok := readSize(s, e); ok {
			o.set(FieldCapacity, &o.Capacity, v)
		}
	}
	if st, e := findWithin(s, from, at, "InUse:"); st >= 0 {
		if v, _, ok := readSize(s, e); ok {
			o.set(FieldAllocated, &o.Allocated, v)
		}
	}
}

// parseTFAllocator reads "Allocator (GPU_0_bfc) ran out of memory trying
// to allocate 2.02GiB" and, in newer releases, "(rounded to N)". The BFC
// allocator is TensorFlow's and, since the TSL split, XLA's: a log line
// from "external/xla/" or "external/org_tensorflow/" is JAX. When the
// line goes on "The caller indicates that this is not a failure"
// (bfc_allocator.cc: the allocation was a retry-able one, such as a
// convolution's scratch space), the message is a Warning.
func parseTFAllocator(s string, at, end int, o *OOM) bool {
	o.Framework, o.Backend, o.Era = TensorFlow, CUDA, EraTFAllocator
	o.Start = at
	if logFramework(s, at) == JAX {
		o.Framework = JAX
	}
	if st := lookBack(s, at, 40, "Allocator (GPU_"); st >= 0 {
		if d, _, ok := readInt(s, st+len("Allocator (GPU_")); ok {
			o.Device = int(d)
			o.Stated |= FieldDevice
		}
	}
	v, j, ok := readSize(s, end)
	if !ok {
		o.Truncated = true
		o.End = end
		return true
	}
	o.set(FieldRequested, &o.Requested, v)
	if e := match(s, j, " (rounded to"); e >= 0 {
		if v, j2, ok := readSize(s, e); ok {
			o.Requested = v
			j = j2
		}
	}
	o.End = j
	// "… 2.20GiB with freed_by_count=0. The caller indicates that this is
	// not a failure, but may mean …" (before 1.14: no freed_by_count),
	// wrapped anywhere.
	k := j
	if e := match(s, k, " with freed_by_count="); e >= 0 {
		if _, k2, ok := readInt(s, e); ok {
			k = k2
		}
	}
	if k < len(s) && s[k] == '.' {
		k++
	}
	if e := match(s, skipSpace(s, k), "The caller indicates that this is not a failure"); e >= 0 {
		o.Warning = true
		o.End = e
	}
	readBFCStats(s, at, o)
	return true
}

// logFramework tells JAX from TensorFlow by the source path of the log
// line that holds at: jaxlib builds TensorFlow's and XLA's C++ code as an
// external repository ("external/org_tensorflow/…" up to jaxlib 0.4.1x,
// "external/xla/…" since), TensorFlow logs "tensorflow/…" and, from 2.15,
// "external/local_xla/…". It returns FrameworkUnknown when the line names
// no path.
func logFramework(s string, at int) Framework {
	ls := at - 400
	if ls < 0 {
		ls = 0
	}
	if nl := strings.LastIndexByte(s[ls:at], '\n'); nl >= 0 {
		ls += nl + 1
	}
	line := s[ls:at]
	switch {
	case strings.Contains(line, "external/org_tensorflow/"), strings.Contains(line, "external/xla/"):
		return JAX
	case strings.Contains(line, "external/local_xla/"), strings.Contains(line, "external/local_tsl/"),
		strings.Contains(line, "tensorflow/"), strings.Contains(line, "tensorflow\\"):
		return TensorFlow
	}
	return FrameworkUnknown
}

// parseXLA reads "RESOURCE_EXHAUSTED: Out of memory while trying to
// allocate N bytes." (and the older "Resource exhausted: Out of memory"),
// and "RESOURCE_EXHAUSTED: Out of memory allocating N bytes." (from
// parseCuPy, which shares the anchor).
func parseXLA(s string, at, end int, o *OOM) bool {
	o.Framework, o.Backend, o.Era = JAX, CUDA, EraXLA
	o.Start = at
	v, j, ok := readSize(s, end)
	if !ok {
		o.Truncated = true
		o.End = end
		return true
	}
	o.set(FieldRequested, &o.Requested, v)
	o.End = j
	return true
}

// parseXLARequest reads "Failed to allocate request for 2.99GiB
// (3206250496B) on device ordinal 0", preferring the exact byte count.
func parseXLARequest(s string, at, end int, o *OOM) bool {
	o.Framework, o.Backend, o.Era = JAX, CUDA, EraXLA
	o.Start = at
	v, j, ok := readSize(s, end)
	if !ok {
		o.Truncated = true
		o.End = end
		return true
	}
	o.set(FieldRequested, &o.Requested, v)
	if e := match(s, j, " ("); e >= 0 {
		if v, j2, ok := readSize(s, e); ok && j2 < len(s) && s[j2] == ')' {
			o.Requested = v
			j = j2 + 1
		}
	}
	if e := match(s, j, " on device ordinal"); e >= 0 {
		if d, j2, ok := readInt(s, e); ok {
			o.Device = int(d)
			o.Stated |= FieldDevice
			j = j2
		}
	}
	o.End = j
	return true
}
