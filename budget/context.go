package budget

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// CUDAVersion is a CUDA release, major.minor: the CUDA a PyTorch build was
// compiled against (torch.version.cuda; the "cu121" of a wheel's name is
// 12.1). The zero value means unknown, which [DefaultContext] reads as a
// current release (CUDA 12, with lazy module loading). Values are small
// and comparable.
type CUDAVersion struct {
	Major, Minor int
}

// String returns "12.1", or "" for the zero value.
func (v CUDAVersion) String() string {
	if v.IsZero() {
		return ""
	}
	return strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor)
}

// IsZero reports whether v is unknown.
func (v CUDAVersion) IsZero() bool { return v == CUDAVersion{} }

// Less reports whether v is an earlier release than w.
func (v CUDAVersion) Less(w CUDAVersion) bool {
	return v.Major < w.Major || v.Major == w.Major && v.Minor < w.Minor
}

// MarshalText implements encoding.TextMarshaler ("12.1"; "" for zero).
func (v CUDAVersion) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// lazyFrom is the first CUDA release with lazy module loading ("Lazy
// loading first introduced, disabled by default", CUDA 11.7; NVIDIA CUDA
// Programming Guide, "Lazy Loading", Table 17).
var lazyFrom = CUDAVersion{11, 7}

// ParseCUDAVersion reads a CUDA version as "12.1", "12", "12.4.1" (the
// patch level is dropped), "V12.1.105" (nvcc --version), or a wheel tag
// "cu121" / "cu118" / "cu92" (the last digit is the minor version). The
// major version must be 1 to 99 and the minor 0 to 99. Errors wrap
// gpumem.ErrSyntax and name the field "cuda".
func ParseCUDAVersion(s string) (CUDAVersion, error) {
	bad := func() (CUDAVersion, error) {
		return CUDAVersion{}, gpumem.Errorf("cuda", s, gpumem.ErrSyntax, "want a CUDA version such as 12.1 (or a wheel tag such as cu121)")
	}
	t := strings.ToLower(strings.TrimSpace(s))
	if tag, ok := strings.CutPrefix(t, "cu"); ok {
		n, ok := number(tag, 3)
		if !ok || len(tag) < 2 || n/10 < 1 {
			return bad()
		}
		return CUDAVersion{n / 10, n % 10}, nil
	}
	t = strings.TrimPrefix(t, "v")
	parts := strings.Split(t, ".")
	if len(parts) > 3 {
		return bad()
	}
	var v CUDAVersion
	var ok bool
	if v.Major, ok = number(parts[0], 2); !ok || v.Major < 1 {
		return bad()
	}
	if len(parts) > 1 {
		if v.Minor, ok = number(parts[1], 2); !ok {
			return bad()
		}
	}
	if len(parts) > 2 {
		if _, ok = number(parts[2], 6); !ok {
			return bad()
		}
	}
	return v, nil
}

// number reads 1 to max decimal digits.
func number(s string, max int) (int, bool) {
	if s == "" || len(s) > max {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = 10*n + int(s[i]-'0')
	}
	return n, true
}

// ModuleLoading is how the CUDA runtime loads the kernels of a process's
// libraries (the CUDA_MODULE_LOADING environment variable): eagerly, all
// of them when the context is created, or lazily, each on its first use.
// Eager loading of PyTorch's kernels makes the context three to six times
// larger (see [DefaultContext]).
type ModuleLoading uint8

const (
	// LoadingDefault is what PyTorch does when CUDA_MODULE_LOADING is not
	// set: lazy from CUDA 11.7 on, eager before, where lazy loading does
	// not exist. PyTorch 1.13 and later set LAZY when the variable is
	// unset, before the first CUDA call (CUDAHooks::initCUDA calls
	// maybe_set_cuda_module_loading("LAZY"),
	// aten/src/ATen/cuda/detail/CUDAHooks.cpp; pytorch/pytorch#85692),
	// and CUDA itself defaults to lazy from 12.2 on Linux.
	LoadingDefault ModuleLoading = iota
	// LoadingLazy is CUDA_MODULE_LOADING=LAZY. It needs CUDA 11.7 or
	// later (and driver 515 or later).
	LoadingLazy
	// LoadingEager is CUDA_MODULE_LOADING=EAGER (and DEFAULT before CUDA
	// 12.2), and every CUDA before 11.7.
	LoadingEager
)

var loadingNames = [...]string{LoadingDefault: "default", LoadingLazy: "lazy", LoadingEager: "eager"}

// String returns "default", "lazy" or "eager".
func (l ModuleLoading) String() string {
	if int(l) < len(loadingNames) {
		return loadingNames[l]
	}
	return "ModuleLoading(" + strconv.Itoa(int(l)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (l ModuleLoading) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// Lazy reports whether kernels load lazily under l with CUDA cuda (zero:
// a current release): LoadingLazy, or LoadingDefault from CUDA 11.7 on.
func (l ModuleLoading) Lazy(cuda CUDAVersion) bool {
	switch l {
	case LoadingLazy:
		return true
	case LoadingDefault:
		return cuda.IsZero() || !cuda.Less(lazyFrom)
	}
	return false
}

// contextEntry is one row of contextTable: the CUDA context of a PyTorch
// process on a GPU of compute capability in [ccFrom, ccTo] (both zero:
// any GPU, the fallback of its CUDA range), with a CUDA in [cudaFrom,
// cudaTo) (cudaTo zero: no upper bound), loading kernels lazily or not.
// id names its measurement in testdata/context/context.jsonl.
type contextEntry struct {
	ccFrom, ccTo     gpumem.ComputeCapability
	cudaFrom, cudaTo CUDAVersion
	lazy             bool
	bytes            gpumem.Bytes
	id               string
}

// contextTable is the default CUDA context by GPU generation, CUDA
// version and module loading: what nvidia-smi shows for a PyTorch
// process once CUDA is initialized (a first tensor, or mem_get_info),
// less the first tensor's allocator segment, which the caching allocator
// counts. It holds the kernel images loaded into the context, and
// grows with the generation (more kernels, larger images per sm_
// architecture) and, before lazy loading, with the CUDA release. The
// measurements are in testdata/context/context.jsonl, each with its
// source, GPU and versions (TestContextTable checks the rows against
// them). A row for the GPU's architecture wins over its range's
// fallback (the row for any GPU), which takes the range's largest
// measurement, so that a GPU without a measurement of its own errs
// towards "does not fit".
//
// What was found is thin for current datacenter parts: no published
// measurement of an H100, H200 or B200 context was found; they take the
// fallback of their range. The first matmul adds cuBLAS's handle (its
// workspaces are [Overhead.Workspace]) and, under lazy loading, the
// kernels it loads, which no source measured apart; they are not in the
// table.
var contextTable = [...]contextEntry{
	// Eager loading, CUDA 10 and before.
	{sm(60), sm(62), CUDAVersion{}, CUDAVersion{11, 0}, false, 719 * gpumem.MiB, "pascal-gtx1080-cu101"},
	{sm(70), sm(72), CUDAVersion{}, CUDAVersion{11, 0}, false, 1005 * gpumem.MiB, "volta-titanv-torch13"},
	{sm(75), sm(75), CUDAVersion{}, CUDAVersion{11, 0}, false, 877 * gpumem.MiB, "turing-2080ti-cu101"},
	{anyGPU, anyGPU, CUDAVersion{}, CUDAVersion{11, 0}, false, 1005 * gpumem.MiB, "volta-titanv-torch13"},
	// Eager loading, CUDA 11.0 to 11.6.
	{sm(70), sm(72), CUDAVersion{11, 0}, CUDAVersion{11, 7}, false, 1341 * gpumem.MiB, "volta-v100-cuda112"},
	{sm(80), sm(89), CUDAVersion{11, 0}, CUDAVersion{11, 7}, false, 1685 * gpumem.MiB, "ampere-3090-cu111"},
	{anyGPU, anyGPU, CUDAVersion{11, 0}, CUDAVersion{11, 7}, false, 1685 * gpumem.MiB, "ampere-3090-cu111"},
	// Eager loading from CUDA 11.7 on (CUDA_MODULE_LOADING=EAGER).
	{anyGPU, anyGPU, CUDAVersion{11, 7}, CUDAVersion{}, false, 616 * gpumem.MiB, "unknown-cu117-eager"},
	// Lazy loading (CUDA 11.7 on).
	{sm(86), sm(87), CUDAVersion{11, 7}, CUDAVersion{}, true, 256 * gpumem.MiB, "ampere-3090-cu128-lazy"},
	{anyGPU, anyGPU, CUDAVersion{11, 7}, CUDAVersion{}, true, 426 * gpumem.MiB, "ada-rtx6000-cu130-lazy"},
}

// sm returns the compute capability of an sm_ number: sm(86) is 8.6.
func sm(n int) gpumem.ComputeCapability {
	return gpumem.ComputeCapability{Major: n / 10, Minor: n % 10}
}

// anyGPU is the zero compute capability, which a contextTable row reads as
// every GPU.
var anyGPU gpumem.ComputeCapability

// modernCUDA stands for an unknown CUDA version: a current release.
var modernCUDA = CUDAVersion{12, 0}

// DefaultContext returns the default [Overhead.Context] of a PyTorch
// process on d under CUDA cuda (zero: a current release, CUDA 12) with
// the module loading l, from a table of published measurements by
// compute capability, CUDA version and loading:
//
//	loading  CUDA         GPU                              context
//	eager    before 11.0  sm_60–62 (GTX 1080)              719 MiB
//	                      sm_70–72 (Titan V)              1005 MiB
//	                      sm_75 (RTX 2080 Ti)              877 MiB
//	                      others                          1005 MiB
//	eager    11.0–11.6    sm_70–72 (V100)                 1341 MiB
//	                      sm_80–89 (RTX 3090), others     1685 MiB
//	eager    11.7 on      any (CUDA_MODULE_LOADING=EAGER)  616 MiB
//	lazy     11.7 on      sm_86–87 (RTX 3090)              256 MiB
//	                      others (RTX 6000 Ada, A100)      426 MiB
//
// Without lazy loading every kernel of PyTorch and its CUDA libraries is
// loaded into the context when it is created (a V100 under CUDA 11.2:
// 1343 MiB after a first tensor, Hugging Face's "Model training
// anatomy"); with it, only those used. The sources, one per row, are in
// testdata/context/context.jsonl. d's compute capability is d.Compute or,
// when that is zero, the catalog's for d.Name (gpumem.LookupDevice); a
// device of unknown capability takes the largest measurement of its CUDA
// range and loading. DefaultContext does not allocate.
func DefaultContext(d gpumem.Device, cuda CUDAVersion, l ModuleLoading) gpumem.Bytes {
	return contextRow(d, cuda, l).bytes
}

// contextRow returns the row of contextTable for d, cuda and l.
func contextRow(d gpumem.Device, cuda CUDAVersion, l ModuleLoading) *contextEntry {
	cc := deviceCompute(d)
	lazy := l.Lazy(cuda)
	if cuda.IsZero() {
		cuda = modernCUDA
	}
	if lazy && cuda.Less(lazyFrom) {
		lazy = false // no lazy loading before CUDA 11.7
	}
	fallback := -1
	for i := range contextTable {
		e := &contextTable[i]
		if e.lazy != lazy || cuda.Less(e.cudaFrom) || !e.cudaTo.IsZero() && !cuda.Less(e.cudaTo) {
			continue
		}
		if e.ccFrom.IsZero() {
			if fallback < 0 {
				fallback = i
			}
			continue
		}
		if !cc.IsZero() && !cc.Less(e.ccFrom) && !e.ccTo.Less(cc) {
			return e
		}
	}
	return &contextTable[fallback]
}

// minCUDA is the first CUDA release that compiles for each architecture
// from Volta on (NVIDIA CUDA Toolkit release notes: sm_80 in 11.0, sm_86
// in 11.1, sm_89 and sm_90 in 11.8, sm_100 and sm_120 in 12.8), newest
// first.
var minCUDA = [...]struct {
	cc   gpumem.ComputeCapability
	cuda CUDAVersion
}{
	{sm(120), CUDAVersion{12, 8}},
	{sm(100), CUDAVersion{12, 8}},
	{sm(90), CUDAVersion{11, 8}},
	{sm(89), CUDAVersion{11, 8}},
	{sm(86), CUDAVersion{11, 1}},
	{sm(80), CUDAVersion{11, 0}},
}

// checkCUDA reports an error when cuda (non-zero) predates the
// architecture cc or asks for lazy loading before CUDA 11.7.
func checkCUDA(cc gpumem.ComputeCapability, cuda CUDAVersion, l ModuleLoading) error {
	if cuda.IsZero() {
		return nil
	}
	if cuda.Major < 1 || cuda.Major > 99 || cuda.Minor < 0 || cuda.Minor > 99 {
		return gpumem.Errorf("Job.Overhead.CUDA", cuda, gpumem.ErrInvalid, "want a CUDA version such as 12.1")
	}
	if l == LoadingLazy && cuda.Less(lazyFrom) {
		return gpumem.Errorf("Job.Overhead.Loading", l, gpumem.ErrInvalid, "lazy module loading needs CUDA 11.7 or later (CUDA %s)", cuda)
	}
	if cc.IsZero() {
		return nil
	}
	for _, m := range minCUDA {
		if !cc.Less(m.cc) {
			if cuda.Less(m.cuda) {
				return gpumem.Errorf("Job.Overhead.CUDA", cuda, gpumem.ErrInvalid,
					"compute capability %s needs CUDA %s or later", cc, m.cuda)
			}
			break
		}
	}
	return nil
}
