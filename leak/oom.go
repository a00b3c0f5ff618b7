package leak

import (
	"math/bits"
	"slices"

	"github.com/gpumem/gpumem"
)

// Framework names the software that printed an out-of-memory message.
type Framework uint8

// Frameworks whose out-of-memory messages [ParseOOM] reads.
const (
	FrameworkUnknown Framework = iota
	PyTorch                    // torch: the caching allocator, cudaMallocAsync, MPS, XPU, THC
	TensorFlow                 // TensorFlow's BFC allocator ("OOM when allocating tensor")
	JAX                        // JAX/XLA ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate", XLA's allocators)
	CuPy                       // CuPy's memory pool (also under Chainer) and its CUDARuntimeError
	BitsAndBytes               // bitsandbytes' CUDA_CHECK_RETURN ("Error out of memory at line")
	LlamaCpp                   // llama.cpp / ggml ("cudaMalloc failed: out of memory")
)

// String returns the framework's lower-case name ("pytorch").
func (f Framework) String() string {
	switch f {
	case PyTorch:
		return "pytorch"
	case TensorFlow:
		return "tensorflow"
	case JAX:
		return "jax"
	case CuPy:
		return "cupy"
	case BitsAndBytes:
		return "bitsandbytes"
	case LlamaCpp:
		return "llama.cpp"
	}
	return "unknown"
}

// Backend is the device API the failed allocation went to.
type Backend uint8

// Backends.
const (
	BackendUnknown Backend = iota
	CUDA                   // NVIDIA CUDA
	HIP                    // AMD ROCm/HIP (PyTorch's hipified allocator, ggml's ROCm backend)
	MPS                    // Apple Metal Performance Shaders
	XPU                    // Intel GPUs (PyTorch XPU, intel-extension-for-pytorch)
)

// String returns the backend's name ("CUDA").
func (b Backend) String() string {
	switch b {
	case CUDA:
		return "CUDA"
	case HIP:
		return "HIP"
	case MPS:
		return "MPS"
	case XPU:
		return "XPU"
	}
	return "unknown"
}

// Era identifies the format of a message, which for PyTorch dates the
// release that printed it (docs/reference.md#oom-formats, from CUDACachingAllocator.cpp
// and the PRs that changed it; boundaries ±1 minor release).
type Era uint8

// Message formats.
const (
	EraUnknown Era = iota
	// EraTHC: PyTorch ≤ 0.4, "cuda runtime error (2) : out of memory" from
	// THCStorage.cu. No numbers.
	EraTHC
	// EraCUDAError: "CUDA error: out of memory" raised by a kernel launch
	// or a library (cuBLAS, NCCL) rather than the allocator. No numbers.
	EraCUDAError
	// EraCached: PyTorch 1.0–1.3 (PR #13751): "… free; X cached)", where
	// "cached" is reserved − allocated.
	EraCached
	// EraReservedTotal: PyTorch 1.4–2.0 (PR #27361): "… X reserved in total
	// by PyTorch)", reserved including allocated; 1.8+ may add "Y allowed;",
	// 1.10+ the max_split_size_mb hint. IPEX prints the same shape.
	EraReservedTotal
	// EraCapacty: PyTorch 2.1 (PR #99699): "GPU n has a total capacty of"
	// (sic), process lines from NVML, "reserved by PyTorch but unallocated".
	EraCapacty
	// EraCapacity: PyTorch 2.2+ (PR #113481) and the XPU allocator: the
	// typo fixed; 2.4+ may add private pools and "X allowed;".
	EraCapacity
	// EraAsync: the cudaMallocAsync backend ("Allocation on device n would
	// exceed allowed memory"), usually cut short by the NUL-byte bug.
	EraAsync
	// EraMPS: the MPS allocator ("MPS backend out of memory (MPS allocated:").
	EraMPS
	// EraTFTensor: TensorFlow "OOM when allocating tensor with shape[…] and
	// type T"; the request is derived from the shape and type.
	EraTFTensor
	// EraTFAllocator: TensorFlow "Allocator (GPU_0_bfc) ran out of memory
	// trying to allocate X".
	EraTFAllocator
	// EraXLA: JAX/XLA "Out of memory while trying to allocate N bytes" or
	// "Failed to allocate request for X (NB) on device ordinal n".
	EraXLA
	// EraCuPy: CuPy "out of memory to allocate N bytes (total M bytes)" or
	// "Out of memory allocating N bytes (allocated so far: M bytes)".
	EraCuPy
	// EraBitsAndBytes: bitsandbytes "Error out of memory at line N in file
	// …/csrc/…". No numbers.
	EraBitsAndBytes
	// EraGGML: ggml "allocating X MiB on device n: cudaMalloc failed: out
	// of memory" and "failed to allocate CUDA0 buffer of size N".
	EraGGML
	// EraCUDADriver: the stream executor's driver wrapper that TensorFlow
	// and XLA share (stream_executor/cuda/cuda_driver.cc): "failed to
	// allocate 3.95G (4240965632 bytes) from device:
	// CUDA_ERROR_OUT_OF_MEMORY", "failed to alloc N bytes unified memory;
	// result: CUDA_ERROR_OUT_OF_MEMORY", and XLA's cudaMallocAsync
	// allocator's "cuMemAllocAsync failed to allocate N bytes: … Free
	// memory/Total memory: F/T". The source path of the log line names the
	// framework: "external/org_tensorflow/" and "external/xla/" are jaxlib
	// builds, "tensorflow/" and "external/local_xla/" TensorFlow.
	EraCUDADriver
)

// String returns a short name of the format with, for PyTorch, the
// releases that print it.
func (e Era) String() string {
	switch e {
	case EraTHC:
		return "pytorch<=0.4 (THC runtime error)"
	case EraCUDAError:
		return "CUDA error"
	case EraCached:
		return "pytorch 1.0-1.3 (cached)"
	case EraReservedTotal:
		return "pytorch 1.4-2.0 (reserved in total)"
	case EraCapacty:
		return "pytorch 2.1 (total capacty)"
	case EraCapacity:
		return "pytorch 2.2+ (total capacity of)"
	case EraAsync:
		return "pytorch cudaMallocAsync"
	case EraMPS:
		return "pytorch MPS"
	case EraTFTensor:
		return "tensorflow tensor"
	case EraTFAllocator:
		return "tensorflow allocator"
	case EraXLA:
		return "xla"
	case EraCuPy:
		return "cupy"
	case EraBitsAndBytes:
		return "bitsandbytes"
	case EraGGML:
		return "ggml"
	case EraCUDADriver:
		return "stream_executor cuda_driver"
	}
	return "unknown"
}

// Field is a set of [OOM] fields, used to say which numbers a message
// stated and which were derived from others.
type Field uint16

// Fields of an [OOM].
const (
	FieldDevice              Field = 1 << iota // OOM.Device
	FieldRequested                             // OOM.Requested
	FieldCapacity                              // OOM.Capacity
	FieldFree                                  // OOM.Free
	FieldAllocated                             // OOM.Allocated
	FieldReserved                              // OOM.Reserved
	FieldReservedUnallocated                   // OOM.ReservedUnallocated
	FieldPrivatePools                          // OOM.PrivatePools
	FieldAllowed                               // OOM.Allowed
	FieldSelf                                  // OOM.Self
	FieldOther                                 // OOM.Other
	FieldProcesses                             // OOM.Processes (at least one entry)
)

// Hint is a set of the remedies a message itself suggests.
type Hint uint16

// Hints printed by the frameworks.
const (
	HintMaxSplitSize       Hint = 1 << iota // "try setting max_split_size_mb" (PyTorch 1.10–2.1)
	HintExpandableSegments                  // "…=expandable_segments:True" (PyTorch 2.2+)
	HintCUDAAllocConf                       // names PYTORCH_CUDA_ALLOC_CONF
	HintAllocConf                           // names PYTORCH_ALLOC_CONF (2025+ builds)
	HintHIPAllocConf                        // names PYTORCH_HIP_ALLOC_CONF (ROCm builds)
	HintMPSWatermark                        // "Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0"
	HintEmptyCache                          // XPU: "Please use `empty_cache`"
)

// MaxProcesses is the number of "Process N has X memory in use" entries an
// [OOM] keeps; further entries are counted in OOM.MoreProcesses.
const MaxProcesses = 8

// Process is one entry of the process list PyTorch 2.1+ prints from NVML.
type Process struct {
	PID  int64        // process id as NVML reports it (host namespace)
	Used gpumem.Bytes // device memory in use by the process
}

// OOM is what an out-of-memory message says. The zero value is an empty
// result. Every number is valid only when its [Field] is in Stated (the
// message printed it) or Derived (computed from printed numbers); use
// [OOM.Has] and [OOM.Known].
//
// The numbers are normalized across eras: Allocated is what the framework's
// allocator has handed out to tensors; Reserved is what it holds from the
// driver (allocated plus cached); ReservedUnallocated is Reserved −
// Allocated. PyTorch 1.0's "cached" and 2.1+'s "reserved by PyTorch but
// unallocated" are ReservedUnallocated; 1.4–2.0's "reserved in total" is
// Reserved.
type OOM struct {
	Framework Framework
	Backend   Backend
	Era       Era
	Device    int // device index ("GPU 0", "device:GPU:1", "device ordinal 0")

	Requested           gpumem.Bytes // the failed request (PyTorch: after the allocator's rounding)
	Capacity            gpumem.Bytes // total memory of the device as the driver reports it (TF: the BFC limit)
	Free                gpumem.Bytes // free memory on the device as the driver reported it at the failure
	Allocated           gpumem.Bytes // allocated to tensors by the framework (2.4+: including private pools)
	Reserved            gpumem.Bytes // held by the framework's allocator (allocated + cached)
	ReservedUnallocated gpumem.Bytes // Reserved − Allocated: cached, split or fragmented blocks
	PrivatePools        gpumem.Bytes // allocated in private pools (CUDA Graphs), PyTorch 2.4+
	Allowed             gpumem.Bytes // a cap on the allocator: set_per_process_memory_fraction, MPS max allowed
	Self                gpumem.Bytes // "Including non-PyTorch memory, this process has X memory in use"
	Other               gpumem.Bytes // memory held outside the allocator as stated (MPS "other allocations")

	Processes     [MaxProcesses]Process // other processes, in message order; see NumProcesses
	NumProcesses  int                   // entries used in Processes
	MoreProcesses int                   // entries beyond MaxProcesses that were not kept
	MoreUsed      gpumem.Bytes          // memory of the entries not kept

	Hint      Hint  // remedies the message suggests
	Stated    Field // fields the message printed
	Derived   Field // fields computed from printed ones
	Truncated bool  // the message stops before its format's end (cut off, or PyTorch's NUL-byte bug)
	// Warning: the message is an allocator warning the framework recovers
	// from, not a failed allocation: TensorFlow's (and XLA's) BFC allocator
	// "ran out of memory trying to allocate X … The caller indicates that
	// this is not a failure" (bfc_allocator.cc; the caller retries without
	// the extra workspace). [ParseOOM] reports false when text holds only
	// warnings.
	Warning bool

	Start, End int // byte offsets of the message in the text given to ParseOOM
}

// Has reports whether the message stated every field in f.
func (o *OOM) Has(f Field) bool { return o.Stated&f == f }

// Known reports whether every field in f was stated or derived.
func (o *OOM) Known(f Field) bool { return (o.Stated|o.Derived)&f == f }

// ProcessList returns the kept process entries; it aliases o.Processes.
// A NumProcesses below 0 reads as 0 and one above MaxProcesses as
// MaxProcesses, so that an OOM built by hand cannot make it (or
// OtherProcesses, Diagnose, MarshalJSON) panic.
func (o *OOM) ProcessList() []Process { return o.Processes[:o.numProcesses()] }

// numProcesses is NumProcesses clamped to [0, MaxProcesses].
func (o *OOM) numProcesses() int { return min(max(o.NumProcesses, 0), MaxProcesses) }

// OtherProcesses returns the memory used by the listed processes,
// including those beyond MaxProcesses.
func (o *OOM) OtherProcesses() gpumem.Bytes {
	sum := o.MoreUsed
	for _, p := range o.ProcessList() {
		sum += p.Used
	}
	return sum
}

func (o *OOM) set(f Field, p *gpumem.Bytes, v gpumem.Bytes) {
	*p = v
	o.Stated |= f
}

func (o *OOM) derive(f Field, p *gpumem.Bytes, v gpumem.Bytes) {
	if o.Stated&f != 0 {
		return
	}
	if v < 0 {
		v = 0
	}
	*p = v
	o.Derived |= f
}

// score ranks candidate messages: more stated numbers win.
func (o *OOM) score() int { return bits.OnesCount16(uint16(o.Stated)) }

// ParseOOM finds an out-of-memory message in text, which may be a whole
// traceback or log, and reads its numbers. It reports false when text
// holds no message it recognizes.
//
// Every PyTorch era of docs/reference.md#oom-formats is read (see [Era]), with the CUDA,
// HIP, XPU and MPS allocators and the cudaMallocAsync backend, plus
// TensorFlow, JAX/XLA, CuPy, bitsandbytes and llama.cpp. Words may be
// separated by any white space, so wrapped or re-flowed messages parse.
// When text holds several messages, the one stating the most numbers is
// returned, the last of equals; a failure always wins over an allocator
// warning. A message cut short returns what it states, with Truncated set.
// Retyped messages with small typos ("Tried to allocat 20.00 MiB", "CUDA
// out of memmory") are read as the original.
//
// When text holds only allocator warnings (see OOM.Warning), ParseOOM
// reports false and returns the best warning, with Warning set, so that a
// caller can say the text holds a warning rather than nothing; with no
// message at all it returns the zero OOM and false.
//
// ParseOOM does not allocate for the CUDA caching allocator's messages.
// It reads text in one pass, whatever the number of formats: every
// format's anchor phrase is found by one scan (anchorScan in scan.go),
// then parsed where it is. Measured on an Intel Xeon (2 shared cores,
// Go 1.26, BenchmarkParseOOMLongLog): 1.6–2.1 ms for a 1 MB log with one
// message near its end, against 4.9–5.3 ms for the former search of the
// text once per anchor (20 anchors); 2.5–2.7 µs per corpus message
// (BenchmarkParseOOM) against 6.4–7.8 µs.
func ParseOOM(text string) (OOM, bool) {
	var best, cur OOM
	bestK, found := anchorFirst, false
	// One pass over text finds every anchor of every format (see
	// nextAnchor). The best message is the one of the most stated
	// numbers, a failure over a warning; among equals the last in the
	// order (anchor, position), as when each anchor was searched for
	// in turn, so that the choice does not depend on how text is scanned.
	for sc := (anchorScan{s: text}); ; {
		k, at, end, ok := sc.next()
		if !ok {
			break
		}
		cur = OOM{}
		if !k.parse(text, at, end, &cur) {
			continue
		}
		// Positions come in increasing order, so an anchor equal to
		// bestK is later in the old order too.
		if !found || (best.Warning && !cur.Warning) ||
			(cur.Warning == best.Warning && (cur.score() > best.score() || (cur.score() == best.score() && k >= bestK))) {
			best, bestK, found = cur, k, true
		}
	}
	return best, found && !best.Warning
}

// ParseAllOOM returns every out-of-memory message in text, in the order
// they appear, as [ParseOOM] reads them: one per rank of a distributed job,
// or the successive failures of a retrying loop. Allocator warnings are
// included with OOM.Warning set. Where two readings overlap (a line that
// two formats both match), the one stating more numbers is kept. It
// returns nil when text holds none.
func ParseAllOOM(text string) []OOM {
	// Readings in the order of their Start, then of (anchor, position)
	// as when each anchor was searched for in turn, so that overlaps
	// resolve as they did.
	type reading struct {
		o  OOM
		k  anchor
		at int
	}
	var all []reading
	for sc := (anchorScan{s: text}); ; {
		k, at, end, ok := sc.next()
		if !ok {
			break
		}
		var cur OOM
		if k.parse(text, at, end, &cur) {
			all = append(all, reading{cur, k, at})
		}
	}
	slices.SortFunc(all, func(a, b reading) int {
		if a.o.Start != b.o.Start {
			return a.o.Start - b.o.Start
		}
		if a.k != b.k {
			return int(a.k) - int(b.k)
		}
		return a.at - b.at
	})
	var out []OOM
	for _, r := range all {
		o := r.o
		if n := len(out); n > 0 && o.Start < out[n-1].End {
			if o.score() > out[n-1].score() {
				out[n-1] = o
			}
			continue
		}
		out = append(out, o)
	}
	return out
}

// scaleDecimal returns ceil(number × unit) for a decimal string such as
// "17.68", computed exactly; fallback is returned when it overflows.
func scaleDecimal(num string, unit gpumem.Bytes, fallback gpumem.Bytes) gpumem.Bytes {
	var whole, frac, scale int64 = 0, 0, 1
	dot := false
	for k := 0; k < len(num); k++ {
		c := num[k]
		if c == '.' {
			dot = true
			continue
		}
		if !isDigit(c) || whole > 1<<40 {
			return fallback
		}
		if dot {
			// Digits past the 15th decimal weigh less than a thousandth
			// of a byte for units up to TiB; they are dropped.
			if scale < 1e15 {
				frac = frac*10 + int64(c-'0')
				scale *= 10
			}
		} else {
			whole = whole*10 + int64(c-'0')
		}
	}
	hi, lo := bits.Mul64(uint64(whole), uint64(unit))
	if hi != 0 || lo > 1<<62 {
		return fallback
	}
	fh, fl := bits.Mul64(uint64(frac), uint64(unit))
	q, r := bits.Div64(fh, fl, uint64(scale))
	if r != 0 {
		q++
	}
	return gpumem.Bytes(lo + q)
}
