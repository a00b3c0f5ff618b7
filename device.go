package gpumem

import (
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
// canonical name. LookupDevice does not allocate for names of up to 64
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
				return Device{Name: e.name, Capacity: e.capacity}, true
			}
		}
	}
	return Device{}, false
}

// Devices returns every catalog entry, in catalog order, as a new slice.
func Devices() []Device {
	out := make([]Device, len(deviceCatalog))
	for i, e := range deviceCatalog {
		out[i] = Device{Name: e.name, Capacity: e.capacity}
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
// driver reports, and the normalized keys that find it.
type catalogEntry struct {
	name     string
	capacity Bytes
	keys     []string
}
