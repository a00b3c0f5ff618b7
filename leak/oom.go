package leak

import (
	"math/bits"
	"slices"
	"strings"

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

// anchor is a phrase that starts (or marks) one message format.
type anchor uint8

const (
	anchorTried anchor = iota
	anchorMPS
	anchorAsync
	anchorTHC
	anchorTHCCheck
	anchorCUDAError
	anchorHIPError
	anchorTFTensor
	anchorTFTensorOld
	anchorTFAllocator
	anchorXLA
	anchorXLARequest
	anchorCuPyOld
	anchorCuPyNew
	anchorBnB
	anchorGGMLCUDA
	anchorGGMLHIP
	anchorCUDADriver
	anchorCuPyRuntime
	anchorTFAllocatorOld

	anchorFirst = anchorTried
	anchorLast  = anchorTFAllocatorOld
)

func (k anchor) keyword() string {
	switch k {
	case anchorTried:
		// Without the final "e", so that "Tried to allocat 20.00 MiB"
		// (retyped) matches too; parseTried skips the rest of the word.
		return "Tried to allocat"
	case anchorMPS:
		return "MPS backend out of memory"
	case anchorAsync:
		return "Allocation on device"
	case anchorTHC:
		return "cuda runtime error (2) : out of memory"
	case anchorTHCCheck:
		return "error=2 : out of memory"
	case anchorCUDAError:
		return "CUDA error: out of memory"
	case anchorHIPError:
		return "HIP error: out of memory"
	case anchorTFTensor:
		return "OOM when allocating tensor with shape"
	case anchorTFTensorOld:
		return "OOM when allocating tensor of shape"
	case anchorTFAllocator:
		return "ran out of memory trying to allocate"
	case anchorXLA:
		return "of memory while trying to allocate"
	case anchorXLARequest:
		return "Failed to allocate request for"
	case anchorCuPyOld:
		return "out of memory to allocate"
	case anchorCuPyNew:
		return "Out of memory allocating"
	case anchorBnB:
		return "Error out of memory at line"
	case anchorGGMLCUDA:
		return "cudaMalloc failed: out of memory"
	case anchorGGMLHIP:
		return "hipMalloc failed: out of memory"
	case anchorCUDADriver:
		return "CUDA_ERROR_OUT_OF_MEMORY"
	case anchorCuPyRuntime:
		return "CUDARuntimeError: cudaErrorMemoryAllocation"
	case anchorTFAllocatorOld:
		// TensorFlow ≤ 1.0, without the allocator's name.
		return "Ran out of memory trying to allocate"
	}
	return "\x00never"
}

func (k anchor) parse(s string, at, end int, o *OOM) bool {
	switch k {
	case anchorTried:
		return parseTried(s, at, end, o)
	case anchorMPS:
		return parseMPS(s, at, end, o)
	case anchorAsync:
		return parseAsync(s, at, end, o)
	case anchorTHC, anchorTHCCheck:
		o.Framework, o.Backend, o.Era = PyTorch, CUDA, EraTHC
	case anchorCUDAError:
		o.Framework, o.Backend, o.Era = PyTorch, CUDA, EraCUDAError
	case anchorHIPError:
		o.Framework, o.Backend, o.Era = PyTorch, HIP, EraCUDAError
	case anchorTFTensor, anchorTFTensorOld:
		return parseTFTensor(s, at, end, o)
	case anchorTFAllocator, anchorTFAllocatorOld:
		return parseTFAllocator(s, at, end, o)
	case anchorXLA:
		return parseXLA(s, at, end, o)
	case anchorXLARequest:
		return parseXLARequest(s, at, end, o)
	case anchorCuPyOld, anchorCuPyNew:
		return parseCuPy(s, at, end, o)
	case anchorBnB:
		o.Framework, o.Backend, o.Era = BitsAndBytes, CUDA, EraBitsAndBytes
	case anchorGGMLCUDA, anchorGGMLHIP:
		return parseGGML(s, at, end, o, k == anchorGGMLHIP)
	case anchorCUDADriver:
		return parseCUDADriver(s, at, end, o)
	case anchorCuPyRuntime:
		// CuPy's runtime wrapper (cupy_backends/cuda/api/runtime.pyx)
		// raised before its pool reported sizes (CuPy < 2.0, PR #314) and
		// still does outside the pool: no numbers.
		o.Framework, o.Backend, o.Era = CuPy, CUDA, EraCuPy
	default:
		return false
	}
	o.Start, o.End = at, end
	return true
}

// lookBack returns the start of the last occurrence of kw that ends at
// most window bytes before at (white space tolerated), or -1.
func lookBack(s string, at, window int, kw string) int {
	from := at - window - len(kw) - 8
	if from < 0 {
		from = 0
	}
	best := -1
	for st, e := findWithin(s, from, at, kw); st >= 0; st, e = findWithin(s, st+1, at, kw) {
		if at-e <= window {
			best = st
		}
	}
	return best
}

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
