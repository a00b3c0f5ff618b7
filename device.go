package gpumem

import (
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/checked"
)

// Device is an accelerator's memory as a scheduler sees it.
//
// Capacity is the total the CUDA (or ROCm) driver reports to a process:
// torch.cuda.get_device_properties(i).total_memory, the "total capacity"
// of PyTorch's out-of-memory messages. It is less than nvidia-smi's
// memory.total, which also counts memory the driver keeps for itself (an
// A100-SXM4-80GB: 81920 MiB in nvidia-smi, 81051 MiB = 79.15 GiB to CUDA
// 12.8), and it shrinks by a few tens of MiB between driver releases.
//
// Reserved is memory that a job cannot use for other reasons the caller
// knows of: a scheduler's safety margin, a co-located daemon, a MIG
// slice's share withheld. Used is memory in use by other processes now.
// Neither is known to the catalog, which leaves both zero.
type Device struct {
	Name     string // the name nvidia-smi or rocm-smi prints, e.g. "NVIDIA A100-SXM4-80GB"
	Capacity Bytes  // total memory the driver reports to a process
	Reserved Bytes  // memory withheld from jobs by the caller's policy
	Used     Bytes  // memory in use by other processes
	// Compute is the CUDA compute capability (8.0 for an A100); the
	// catalog fills it for NVIDIA parts, zero means unknown. The size of
	// the CUDA context depends on it (budget.DefaultContext).
	Compute ComputeCapability
}

// ComputeCapability is an NVIDIA GPU's CUDA compute capability, the
// version of its architecture: 7.0 for a V100 (sm_70), 7.5 for a T4, 8.0
// for an A100, 8.6 for an A10 or RTX 3090, 8.9 for Ada parts, 9.0 for
// Hopper, 10.0 for a B200, 12.0 for an RTX 5090, as
// torch.cuda.get_device_capability and deviceQuery report it. The zero
// value means unknown: an AMD part, or a device the caller did not
// describe. Values are small and comparable.
type ComputeCapability struct {
	Major, Minor int
}

// String returns "8.0", or "" for the zero value.
func (c ComputeCapability) String() string {
	if c == (ComputeCapability{}) {
		return ""
	}
	return strconv.Itoa(c.Major) + "." + strconv.Itoa(c.Minor)
}

// IsZero reports whether c is unknown.
func (c ComputeCapability) IsZero() bool { return c == (ComputeCapability{}) }

// Less reports whether c is an earlier architecture than d (7.5 before
// 8.0 before 8.6).
func (c ComputeCapability) Less(d ComputeCapability) bool {
	return c.Major < d.Major || c.Major == d.Major && c.Minor < d.Minor
}

// ParseComputeCapability reads a compute capability as "8.0", "9.0a",
// "sm_80", "sm80", "80" or "120" (the last two as the sm_ number, whose
// last digit is the minor version). An architecture-specific suffix ("a",
// "f") is accepted and dropped. Errors wrap ErrSyntax.
func ParseComputeCapability(s string) (ComputeCapability, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimPrefix(strings.TrimPrefix(t, "sm_"), "sm")
	t = strings.TrimRight(t, "af")
	bad := func() (ComputeCapability, error) {
		return ComputeCapability{}, Errorf("compute capability", s, ErrSyntax, "want major.minor (8.0) or an sm_ number (sm_80)")
	}
	digits := func(x string) (int, bool) {
		if x == "" || len(x) > 3 {
			return 0, false
		}
		n := 0
		for i := 0; i < len(x); i++ {
			if x[i] < '0' || x[i] > '9' {
				return 0, false
			}
			n = 10*n + int(x[i]-'0')
		}
		return n, true
	}
	if maj, min, ok := strings.Cut(t, "."); ok {
		a, okA := digits(maj)
		b, okB := digits(min)
		if !okA || !okB || a == 0 || b > 9 {
			return bad()
		}
		return ComputeCapability{a, b}, nil
	}
	n, ok := digits(t)
	if !ok || n < 10 {
		return bad()
	}
	return ComputeCapability{n / 10, n % 10}, nil
}

// Free returns Capacity − Reserved − Used, the memory a new job may take.
// It is negative when the device is over-committed (Reserved + Used above
// Capacity), by the amount over-committed. A negative field is
// meaningless and counts as zero, so Free never exceeds Capacity; the
// difference is exact, and saturates at [math.MinInt64] instead of
// wrapping around.
func (d Device) Free() Bytes {
	return Bytes(checked.SatSum(max(int64(d.Capacity), 0), -max(int64(d.Reserved), 0), -max(int64(d.Used), 0)))
}

// LookupDevice returns the catalog entry for an accelerator name, as
// nvidia-smi prints it ("NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA
// GeForce RTX 4090"), as rocm-smi prints it ("AMD Instinct MI300X"), or
// in a short form ("a100-80gb", "h100", "rtx4090", "mi300x"). Matching
// ignores case, punctuation, spaces and the vendor and brand words
// (NVIDIA, Tesla, GeForce, AMD, Instinct). A short form that names a
// family with several memory sizes resolves to the entry its aliases
// document (for example "a100" is the 80 GB SXM part); give the size to be
// sure.
//
// The returned Device has Reserved and Used zero; its Name is the
// canonical name and Compute the part's compute capability (zero for AMD
// parts). LookupDevice does not allocate for names of up to 64
// bytes.
func LookupDevice(name string) (Device, bool) {
	var buf [64]byte
	key, ok := normalizeDevice(buf[:0], name)
	if !ok {
		return Device{}, false
	}
	for i := range deviceCatalog {
		e := &deviceCatalog[i]
		for _, a := range e.keys {
			if a == string(key) {
				return Device{Name: e.name, Capacity: e.capacity, Compute: e.cc}, true
			}
		}
	}
	return Device{}, false
}

// Devices returns every catalog entry, in catalog order, as a new slice.
func Devices() []Device {
	out := make([]Device, len(deviceCatalog))
	for i, e := range deviceCatalog {
		out[i] = Device{Name: e.name, Capacity: e.capacity, Compute: e.cc}
	}
	return out
}

// deviceWords are dropped from names before matching.
var deviceWords = [...]string{"nvidia", "tesla", "geforce", "amd", "instinct", "radeon", "quadro"}

// normalizeDevice lower-cases name, drops the vendor and brand words and
// keeps only letters and digits. It reports false for names longer than
// the buffer or empty after normalization.
func normalizeDevice(dst []byte, name string) ([]byte, bool) {
	name = strings.TrimSpace(name)
	for len(name) > 0 {
		// Split off one word (a run of non-space characters).
		end := strings.IndexAny(name, " \t")
		if end < 0 {
			end = len(name)
		}
		word := name[:end]
		name = strings.TrimLeft(name[end:], " \t")
		skip := false
		for _, w := range deviceWords {
			if strings.EqualFold(word, w) {
				skip = true
				break
			}
		}
		if skip {
			continue
		}
		for i := 0; i < len(word); i++ {
			c := word[i]
			switch {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			default:
				continue
			}
			if len(dst) == cap(dst) {
				return nil, false
			}
			dst = append(dst, c)
		}
	}
	return dst, len(dst) > 0
}

// catalogEntry is one accelerator: its canonical name, the capacity the
// driver reports, the normalized keys that find it, and its compute
// capability (zero for AMD parts).
type catalogEntry struct {
	name     string
	capacity Bytes
	keys     []string
	cc       ComputeCapability
}
