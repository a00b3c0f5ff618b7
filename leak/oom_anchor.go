package leak

// Finding an out-of-memory message in a log: the phrases each framework's
// message contains and which parser reads what follows.

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
