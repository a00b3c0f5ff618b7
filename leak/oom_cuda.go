package leak

// Messages of the CUDA runtime and driver and of libraries that print them
// directly: CuPy, the CUDA context, llama.cpp's ggml.

import (
	"strings"
)

// parseCUDAContext reads "failed call to cuDevicePrimaryCtxRetain:
// CUDA_ERROR_OUT_OF_MEMORY" (see parseCUDADriver).
func parseCUDAContext(s string, at, end int, o *OOM) bool {
	ls := at - 400
	if ls < 0 {
		ls = 0
	}
	if nl := strings.LastIndexByte(s[ls:at], '\n'); nl >= 0 {
		ls += nl + 1
	}
	st := strings.LastIndex(s[ls:at], "cuDevicePrimaryCtxRetain")
	if st < 0 {
		st = strings.LastIndex(s[ls:at], "cuCtxCreate")
	}
	if st < 0 {
		return false
	}
	o.Framework, o.Backend, o.Era = TensorFlow, CUDA, EraCUDADriver
	if f := logFramework(s, ls+st); f != FrameworkUnknown {
		o.Framework = f
	}
	o.Start, o.End = ls+st, end
	if _, e := findWithin(s, ls, at, "CUDA device ordinal"); e >= 0 {
		if d, _, ok := readInt(s, e); ok && d < 1<<16 {
			o.Device = int(d)
			o.Stated |= FieldDevice
		}
	}
	if e := match(s, end, ": out of memory; total memory reported:"); e >= 0 {
		if v, j, ok := readSize(s, e); ok {
			o.set(FieldCapacity, &o.Capacity, v)
			o.End = j
		}
	}
	return true
}

// parseCuPy reads CuPy's pool messages (cupy/cuda/memory.pyx,
// OutOfMemoryError):
//
//   - "out of memory to allocate N bytes (total M bytes)" (CuPy 2–6):
//     M = N + pool.total_bytes(), the request included, so the pool held
//     M − N; Reserved is derived as M − N.
//   - "Out of memory allocating N bytes (allocated so far: M bytes[, limit
//     set to: L bytes])." (CuPy 7+, PR #2242): M is the pool's
//     _total_bytes before the request (total − size in _try_malloc),
//     what the pool holds from the driver, used and cached: Reserved. L
//     is the pool's limit (set_limit, CUPY_GPU_MEMORY_LIMIT): Allowed.
//
// JAX prints the second wording too, as "RESOURCE_EXHAUSTED: Out of memory
// allocating N bytes." (PJRT's allocator); that is read as JAX.
func parseCuPy(s string, at, end int, o *OOM) bool {
	o.Framework, o.Backend, o.Era = CuPy, CUDA, EraCuPy
	o.Start = at
	if lookBack(s, at, 4, "RESOURCE_EXHAUSTED:") >= 0 || lookBack(s, at, 4, "Resource exhausted:") >= 0 {
		return parseXLA(s, at, end, o)
	}
	v, j, ok := readGroupedSize(s, end)
	if !ok {
		o.Truncated = true
		o.End = end
		return true
	}
	o.set(FieldRequested, &o.Requested, v)
	if e, which := matchAny(s, j, " (total", " (allocated so far:"); e >= 0 {
		if v, j2, ok := readGroupedSize(s, e); ok {
			if which == 0 {
				o.derive(FieldReserved, &o.Reserved, v-o.Requested)
			} else {
				o.set(FieldReserved, &o.Reserved, v)
			}
			j = j2
			if e, _ := matchAny(s, j, ", limit set to:", ", limit set to"); e >= 0 {
				if v, j3, ok := readGroupedSize(s, e); ok {
					o.set(FieldAllowed, &o.Allowed, v)
					j = j3
				}
			}
			if j < len(s) && s[j] == ')' {
				j++
			}
		} else {
			o.Truncated = true
		}
	}
	o.End = j
	return true
}

// parseCUDADriver reads the stream executor's failed driver allocation
// (see [EraCUDADriver]), anchored at "CUDA_ERROR_OUT_OF_MEMORY": on the
// same line before it, "failed to allocate 968.17M (1015196672 bytes)
// from device" (the exact count in parentheses is preferred), "failed to
// alloc N bytes unified memory" or "cuMemAllocAsync failed to allocate N
// bytes". Host (pinned) allocations, "failed to alloc N bytes on host",
// are not device memory and are not read. XLA's cudaMallocAsync allocator
// follows with "Free memory/Total memory: F/T" and "InUse: N", read as
// Free, Capacity and Allocated. A log wrapped at a fixed width ("from
// d\nevice: CUDA_ERROR_OUT_OF_MEMORY") is read across one line break.
//
// A context that cannot be created, "failed call to
// cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY: out of memory; total
// memory reported: N" (XLA's platform_util.cc, for "CUDA device ordinal
// n"), is read with Device and Capacity and no request: the device was
// full before the job began (another process, or XLA's preallocation).
func parseCUDADriver(s string, at, end int, o *OOM) bool {
	ls := at - 400
	if ls < 0 {
		ls = 0
	}
	lines := 0
	for k := at - 1; k >= ls; k-- {
		if s[k] == '\n' {
			lines++
			if lines == 2 {
				ls = k + 1
				break
			}
		}
	}
	st := strings.LastIndex(s[ls:at], "failed to alloc")
	if st < 0 || strings.Contains(s[ls+st:at], "CUDA_ERROR") {
		return parseCUDAContext(s, at, end, o)
	}
	st += ls
	if ln := strings.LastIndexByte(s[:st], '\n'); ln+1 > ls {
		ls = ln + 1
	}
	e := st + len("failed to alloc")
	if e+3 <= at && s[e:e+3] == "ate" {
		e += 3
	}
	v, j, ok := readSize(s, e)
	if !ok || j > at || strings.Contains(s[j:at], "on host") {
		return false
	}
	o.Framework, o.Backend, o.Era = TensorFlow, CUDA, EraCUDADriver
	if f := logFramework(s, st); f != FrameworkUnknown {
		o.Framework = f
	} else if strings.Contains(s[ls:st], ".cc:") {
		// A source file without a directory is absl logging, which
		// jaxlib uses; TensorFlow's own logging prints the path.
		o.Framework = JAX
	}
	o.Start = st
	o.set(FieldRequested, &o.Requested, v)
	if e := match(s, j, " ("); e >= 0 {
		if v, j2, ok := readSize(s, e); ok && j2 < len(s) && s[j2] == ')' {
			o.Requested = v
		}
	}
	o.End = end
	if e := match(s, end, ": out of memory"); e >= 0 {
		o.End = e
	}
	limit := min(o.End+600, len(s))
	if _, e := findWithin(s, o.End, min(o.End+200, len(s)), "Free memory/Total memory:"); e >= 0 {
		if f, j, ok := readSize(s, e); ok && j < len(s) && s[j] == '/' {
			if t, _, ok := readSize(s, j+1); ok {
				o.set(FieldFree, &o.Free, f)
				o.set(FieldCapacity, &o.Capacity, t)
			}
		}
		if _, e := findWithin(s, o.End, limit, "InUse:"); e >= 0 {
			if v, _, ok := readSize(s, e); ok {
				o.set(FieldAllocated, &o.Allocated, v)
			}
		}
	}
	return true
}

// parseGGML reads ggml's "allocating X MiB on device n: cudaMalloc failed:
// out of memory" and the exact "failed to allocate CUDA0 buffer of size N"
// that follows.
func parseGGML(s string, at, end int, o *OOM, hip bool) bool {
	o.Framework, o.Backend, o.Era = LlamaCpp, CUDA, EraGGML
	if hip {
		o.Backend = HIP
	}
	o.Start, o.End = at, end
	if st := lookBack(s, at, 60, "allocating"); st >= 0 {
		if v, j, ok := readSize(s, st+len("allocating")); ok {
			o.set(FieldRequested, &o.Requested, v)
			if e := match(s, j, " on device"); e >= 0 {
				if d, _, ok := readInt(s, e); ok {
					o.Device = int(d)
					o.Stated |= FieldDevice
				}
			}
			o.Start = st
		}
	}
	if st, e := findWithin(s, end, end+400, "failed to allocate "); st >= 0 {
		k := e
		if m := match(s, k, "ROCm"); m >= 0 {
			o.Backend = HIP
		}
		if _, e2 := findWithin(s, k, k+24, "buffer of size"); e2 >= 0 {
			if v, j, ok := readSize(s, e2); ok {
				o.set(FieldRequested, &o.Requested, v)
				o.End = j
			}
		}
	}
	return true
}
