package leak

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// corpusCase is one file of testdata/oom: a real message with the source
// it was copied from and the numbers it states, written as the message
// prints them (so the check is "to the rounding of the message").
type corpusCase struct {
	name   string
	source string
	want   map[string][]string
	text   string
}

func loadCorpus(t testing.TB) []corpusCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "oom", "*.txt"))
	require.NoError(t, err)
	var cases []corpusCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		head, text, ok := strings.Cut(string(data), "\n---\n")
		require.True(t, ok, "%s: no --- separator", f)
		c := corpusCase{name: strings.TrimSuffix(filepath.Base(f), ".txt"), want: map[string][]string{}, text: text}
		for _, line := range strings.Split(head, "\n") {
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "# "), ": ")
			require.True(t, ok, "%s: bad header line %q", f, line)
			if k == "source" {
				c.source = v
				continue
			}
			c.want[k] = append(c.want[k], v)
		}
		require.NotEmpty(t, c.source, "%s: no source", f)
		cases = append(cases, c)
	}
	return cases
}

var eraNames = map[string]Era{
	"thc": EraTHC, "cudaerror": EraCUDAError, "cached": EraCached, "reservedtotal": EraReservedTotal,
	"capacty": EraCapacty, "capacity": EraCapacity, "async": EraAsync, "mps": EraMPS,
	"tftensor": EraTFTensor, "tfallocator": EraTFAllocator, "xla": EraXLA, "cupy": EraCuPy,
	"bnb": EraBitsAndBytes, "ggml": EraGGML, "cudadriver": EraCUDADriver, "unknown": EraUnknown,
}

var hintNames = map[string]Hint{
	"maxsplit": HintMaxSplitSize, "expandable": HintExpandableSegments, "cudaconf": HintCUDAAllocConf,
	"allocconf": HintAllocConf, "hipconf": HintHIPAllocConf, "mpswatermark": HintMPSWatermark,
	"emptycache": HintEmptyCache,
}

// mpsBinary reads an MPS size whose KB/MB/GB are 1024-based.
func mpsBinary(t *testing.T, s string) gpumem.Bytes {
	num, unit, _ := strings.Cut(s, " ")
	switch unit {
	case "KB", "MB", "GB":
		s = num + " " + unit[:1] + "iB"
	}
	return gpumem.MustParseBytes(s)
}

func TestParseOOMCorpus(t *testing.T) {
	t.Parallel()
	cases := loadCorpus(t)
	require.GreaterOrEqual(t, len(cases), 40)
	sizeFields := map[string]struct {
		f   Field
		get func(*OOM) gpumem.Bytes
	}{
		"requested":   {FieldRequested, func(o *OOM) gpumem.Bytes { return o.Requested }},
		"capacity":    {FieldCapacity, func(o *OOM) gpumem.Bytes { return o.Capacity }},
		"free":        {FieldFree, func(o *OOM) gpumem.Bytes { return o.Free }},
		"allocated":   {FieldAllocated, func(o *OOM) gpumem.Bytes { return o.Allocated }},
		"reserved":    {FieldReserved, func(o *OOM) gpumem.Bytes { return o.Reserved }},
		"unallocated": {FieldReservedUnallocated, func(o *OOM) gpumem.Bytes { return o.ReservedUnallocated }},
		"private":     {FieldPrivatePools, func(o *OOM) gpumem.Bytes { return o.PrivatePools }},
		"allowed":     {FieldAllowed, func(o *OOM) gpumem.Bytes { return o.Allowed }},
		"self":        {FieldSelf, func(o *OOM) gpumem.Bytes { return o.Self }},
		"other":       {FieldOther, func(o *OOM) gpumem.Bytes { return o.Other }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseOOM(c.text)
			one := func(k string) string {
				if v := c.want[k]; len(v) > 0 {
					return v[0]
				}
				return ""
			}
			// "warning: true": an allocator warning, not a failure;
			// ParseOOM reports false but returns what the warning says.
			if one("warning") == "true" {
				require.False(t, ok, "ParseOOM(%s) reads a warning as an out-of-memory error", c.name)
				require.True(t, got.Warning, "ParseOOM(%s): Warning not set", c.name)
			} else {
				require.True(t, ok, "ParseOOM(%s) found nothing", c.name)
				require.False(t, got.Warning, "ParseOOM(%s): Warning set on a failure", c.name)
			}
			if got.Framework.String() != one("framework") {
				t.Errorf("Framework = %v, want %s", got.Framework, one("framework"))
			}
			if got.Backend.String() != one("backend") {
				t.Errorf("Backend = %v, want %s", got.Backend, one("backend"))
			}
			if e, ok := eraNames[one("era")]; !ok || got.Era != e {
				t.Errorf("Era = %v, want %s", got.Era, one("era"))
			}
			var wantStated Field
			if d := one("device"); d != "" {
				wantStated |= FieldDevice
				n, _ := strconv.Atoi(d)
				if got.Device != n {
					t.Errorf("Device = %d, want %d", got.Device, n)
				}
			}
			for k, sf := range sizeFields {
				v := one(k)
				if v == "" {
					continue
				}
				wantStated |= sf.f
				var want gpumem.Bytes
				if got.Backend == MPS {
					want = mpsBinary(t, v)
				} else {
					want = gpumem.MustParseBytes(v)
				}
				if g := sf.get(&got); g != want {
					t.Errorf("%s = %v, want %v (%s)", k, g, want, v)
				}
			}
			for _, p := range c.want["process"] {
				wantStated |= FieldProcesses
				pid, size, _ := strings.Cut(p, " ")
				n, _ := strconv.ParseInt(pid, 10, 64)
				found := false
				for _, gp := range got.ProcessList() {
					if gp.PID == n && gp.Used == gpumem.MustParseBytes(size) {
						found = true
					}
				}
				if !found {
					t.Errorf("process %s missing from %+v", p, got.ProcessList())
				}
			}
			if len(c.want["process"]) != got.NumProcesses {
				t.Errorf("NumProcesses = %d, want %d", got.NumProcesses, len(c.want["process"]))
			}
			if got.Stated != wantStated {
				t.Errorf("Stated = %012b, want %012b", got.Stated, wantStated)
			}
			if v := one("derived-requested"); v != "" {
				if !got.Known(FieldRequested) || got.Requested != gpumem.MustParseBytes(v) {
					t.Errorf("derived Requested = %v, want %s", got.Requested, v)
				}
			}
			// CuPy 2-6's "(total M bytes)" includes the request: the
			// pool held M − N (memory.pyx: total = size + total_bytes()).
			if v := one("derived-reserved"); v != "" {
				if got.Derived&FieldReserved == 0 || got.Reserved != gpumem.MustParseBytes(v) {
					t.Errorf("derived Reserved = %v (derived %v), want %s", got.Reserved, got.Derived&FieldReserved != 0, v)
				}
			}
			var wantHint Hint
			if h := one("hint"); h != "" {
				for _, w := range strings.Split(h, ",") {
					wantHint |= hintNames[w]
				}
			}
			if got.Hint != wantHint {
				t.Errorf("Hint = %07b, want %07b", got.Hint, wantHint)
			}
			if want := one("truncated") == "true"; got.Truncated != want {
				t.Errorf("Truncated = %v, want %v", got.Truncated, want)
			}
			// Normalization: reserved = allocated + reserved-but-unallocated
			// whenever two of the three are known.
			if got.Known(FieldAllocated|FieldReserved|FieldReservedUnallocated) &&
				got.Reserved-got.Allocated != got.ReservedUnallocated && got.Reserved >= got.Allocated {
				t.Errorf("Reserved %v − Allocated %v ≠ ReservedUnallocated %v", got.Reserved, got.Allocated, got.ReservedUnallocated)
			}
			if got.Start < 0 || got.End > len(c.text) || got.Start > got.End {
				t.Errorf("Start, End = %d, %d out of range", got.Start, got.End)
			}
		})
	}
}

func TestParseOOMNone(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "Step 100: Loss=2.34, Memory=18.2GB", "out of memory", "Tried to", "MemoryError"} {
		if o, ok := ParseOOM(s); ok {
			t.Errorf("ParseOOM(%q) = %+v, true; want false", s, o)
		}
	}
}

func TestParseOOMAllocs(t *testing.T) {
	msgs := map[string]string{}
	for _, c := range loadCorpus(t) {
		switch c.name {
		case "capacity_rlinf255_threeprocs", "capacity_kaito976_private", "reserved_pytorch35901", "cached_pytorch18853_traceback", "llava_3090_exhausted",
			// Issue 21's formats. (CuPy's grouped counts go through a
			// string copy, and cudaMallocAsync's 2^64-byte no-limit figure
			// through ParseBytes' overflow error: those allocate.)
			"tfdriver_aq91_windows", "jaxdriver_skyrl624_async", "jaxdriver_jax788_wrapped", "jaxdriver_jax10830_context",
			"tfwarn_tf43546_freedbycount", "jax_llnerf9_allocating", "typo_unetlits6_ofthe":
			msgs[c.name] = c.text
		}
	}
	require.Len(t, msgs, 12)
	for name, m := range msgs {
		if n := testing.AllocsPerRun(100, func() { _, _ = ParseOOM(m) }); n != 0 {
			t.Errorf("ParseOOM(%s) allocates %v times, want 0", name, n)
		}
	}
}

func BenchmarkParseOOM(b *testing.B) { benchmarkCorpus(b, ParseOOM) }

// benchmarkCorpus parses the corpus's messages in turn.
func benchmarkCorpus(b *testing.B, parse func(string) (OOM, bool)) {
	var msgs []string
	for _, c := range loadCorpus(b) {
		msgs = append(msgs, c.text)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, _ = parse(msgs[i%len(msgs)])
		i++
	}
}

func FuzzParseOOM(f *testing.F) {
	for _, c := range loadCorpus(f) {
		f.Add(c.text)
	}
	// Issue 21's formats in the forms no corpus file has: the NUL byte
	// kept, a control byte as the device, a cut message with a summary
	// after it, retyped anchors, a host allocation, a warning then a
	// failure.
	for _, s := range []string{
		"Allocation on device \x00 would exceed allowed memory. (out of memory)\nCurrently allocated     : 1 GiB\nRequested               : 2 MiB\n",
		"Allocation on device \x07 would exceed",
		"Allocation on device \nCurrently allocated : 3 GiB\nRequested : 1 GiB\nDevice limit : 4 GiB\nFree (according to CUDA): 0 bytes\n| PyTorch CUDA memory summary, device ID 99999999999999999999 |",
		"CUDA out of memmory. Tried to allocat 20.00 MiB (GPU 0; ",
		"Tried to allocatxyz",
		"failed to alloc 17179869184 bytes on host: CUDA_ERROR_OUT_OF_MEMORY",
		"X0 00:00.0 1 a.cc:1] failed to allocate 9 bytes: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n Reported by CUDA: Free memory/Total memory: 1/\nInUse: x",
		"failed to allocateCUDA_ERROR_OUT_OF_MEMORY",
		"RESOURCE_EXHAUSTED: Out of memory allocating 1,000 bytes (allocated so far: 2 bytes, limit set to: 3 bytes).",
		"Out of memory allocating 9 bytes (allocated so far: 2 bytes, limit set to: ",
		"out of memory to allocate 1 bytes (total 0 bytes)",
		"Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.0GiB. The caller indicates that this is not a failure\nOOM when allocating tensor with shape[2] and type float",
		"CUDARuntimeError: cudaErrorMemoryAllocation",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		end := 0
		for _, a := range ParseAllOOM(s) {
			if a.Start < end || a.End > len(s) || a.Start > a.End {
				t.Fatalf("ParseAllOOM: overlapping or out-of-range message at %d..%d", a.Start, a.End)
			}
			end = a.End
		}
		o, ok := ParseOOM(s)
		if !ok {
			return
		}
		if o.Start < 0 || o.End > len(s) || o.Start > o.End {
			t.Fatalf("Start, End = %d, %d for len %d", o.Start, o.End, len(s))
		}
		if o.NumProcesses > MaxProcesses || o.NumProcesses < 0 || len(o.ProcessList()) != o.NumProcesses {
			t.Fatalf("NumProcesses = %d, ProcessList has %d", o.NumProcesses, len(o.ProcessList()))
		}
		for _, v := range []gpumem.Bytes{o.Requested, o.Capacity, o.Free, o.Allocated, o.Reserved, o.ReservedUnallocated, o.Allowed} {
			if v < 0 {
				t.Fatalf("negative size in %+v", o)
			}
		}
		// Parsing the message alone finds the same numbers.
		o2, ok := ParseOOM(s[o.Start:])
		if !ok {
			t.Fatalf("message %q not found again", s[o.Start:o.End])
		}
		_ = o2
		d := o.Diagnose()
		if d.Fragmentation > 1 || d.Shortfall < 0 {
			t.Fatalf("Diagnose = %+v", d)
		}
		if _, err := json.Marshal(o); err != nil {
			t.Fatalf("json.Marshal(OOM): %v", err)
		}
		if _, err := json.Marshal(d); err != nil {
			t.Fatalf("json.Marshal(Diagnosis): %v", err)
		}
	})
}

// TestParseOOMConstructed covers formats for which no real message was
// found in public threads; each input is built from the allocator's format
// string (docs/reference.md#oom-formats), not copied from a report.
func TestParseOOMConstructed(t *testing.T) {
	t.Parallel()
	g := gpumem.MustParseBytes
	tests := []struct {
		name   string
		in     string
		era    Era
		stated Field
		check  func(o *OOM) bool
		hint   Hint
	}{
		{
			name:   "1.8-1.9 allowed in parentheses (PR #48172)",
			in:     "RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 11.91 GiB total capacity; 4.50 GiB already allocated; 6.20 GiB free; 4.77 GiB allowed; 4.74 GiB reserved in total by PyTorch)",
			era:    EraReservedTotal,
			stated: FieldDevice | FieldRequested | FieldCapacity | FieldAllocated | FieldFree | FieldAllowed | FieldReserved,
			check:  func(o *OOM) bool { return o.Allowed == g("4.77 GiB") && o.Diagnose().Cause == CauseLimit },
		},
		{
			name:   "1.x C++ what() with the malloc location suffix",
			in:     "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.80 GiB already allocated; 11.44 MiB free; 9.98 GiB reserved in total by PyTorch) (malloc at /opt/conda/conda-bld/pytorch_1595629403081/work/c10/cuda/CUDACachingAllocator.cpp:272)",
			era:    EraReservedTotal,
			stated: FieldDevice | FieldRequested | FieldCapacity | FieldAllocated | FieldFree | FieldReserved,
			check:  func(o *OOM) bool { return !o.Truncated && o.Reserved == g("9.98 GiB") },
		},
		{
			name:   "2025+ PYTORCH_ALLOC_CONF hint",
			in:     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated memory 70.12 GiB is allocated by PyTorch, and 7.51 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
			era:    EraCapacity,
			stated: FieldDevice | FieldRequested | FieldCapacity | FieldFree | FieldSelf | FieldAllocated | FieldReservedUnallocated,
			hint:   HintExpandableSegments | HintAllocConf,
			check: func(o *OOM) bool {
				d := o.Diagnose()
				return d.Cause == CauseFragmentation && strings.Contains(d.Advice[0].Text, "PYTORCH_ALLOC_CONF=")
			},
		},
		{
			name:   "2.x message cut inside the process list",
			in:     "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.69 GiB of which 3.12 MiB is free. Process 1234 has 12.00 GiB memory in use. Process 56",
			era:    EraCapacity,
			stated: FieldDevice | FieldRequested | FieldCapacity | FieldFree | FieldProcesses,
			check:  func(o *OOM) bool { return o.Truncated && o.NumProcesses == 1 },
		},
		{
			name:   "more processes than kept",
			in:     "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 79.33 GiB of which 0 bytes is free." + strings.Repeat(" Process 7 has 7.00 GiB memory in use.", 11) + " Of the allocated memory 1.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
			era:    EraCapacity,
			stated: FieldDevice | FieldRequested | FieldCapacity | FieldFree | FieldProcesses | FieldAllocated | FieldReservedUnallocated,
			check:  func(o *OOM) bool { return o.NumProcesses == MaxProcesses && o.MoreProcesses == 3 && !o.Truncated },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, ok := ParseOOM(tc.in)
			require.True(t, ok)
			if o.Era != tc.era || o.Stated != tc.stated || o.Hint&tc.hint != tc.hint || !tc.check(&o) {
				t.Errorf("ParseOOM(%s) = era %v stated %012b hint %07b %+v; want era %v stated %012b hint %07b",
					tc.name, o.Era, o.Stated, o.Hint, o, tc.era, tc.stated, tc.hint)
			}
		})
	}
}

func TestParseAllOOM(t *testing.T) {
	t.Parallel()
	// Three warnings of a retrying loop (pytorch #31252).
	all := ParseAllOOM(corpusText(t, "cached_pytorch31252_log"))
	require.Len(t, all, 3)
	want := []string{"1.72 GiB", "1.68 GiB", "1.64 GiB"}
	for i, o := range all {
		if o.Requested != gpumem.MustParseBytes(want[i]) {
			t.Errorf("ParseAllOOM[%d].Requested = %v, want %s", i, o.Requested, want[i])
		}
	}
	// Two ranks of one job, each on its GPU.
	text := "[rank0]: " + corpusText(t, "capacity_cobra24_rank0") + "\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 158.00 MiB. GPU 1 has a total capacity of 23.69 GiB of which 100.00 MiB is free. Of the allocated memory 22.00 GiB is allocated by PyTorch, and 900.00 MiB is reserved by PyTorch but unallocated.\n"
	all = ParseAllOOM(text)
	require.Len(t, all, 2)
	assert.Equal(t, 0, all[0].Device)
	assert.Equal(t, 1, all[1].Device)
	// A THC failure prints a THCudaCheck line and then the RuntimeError.
	assert.Len(t, ParseAllOOM(corpusText(t, "thc_ncrfpp121")), 2)
	assert.Nil(t, ParseAllOOM("no failure here"))
	// Every corpus file yields at least one message, and the best of them
	// is what ParseOOM returns.
	for _, c := range loadCorpus(t) {
		all := ParseAllOOM(c.text)
		o, _ := ParseOOM(c.text)
		require.NotEmpty(t, all, c.name)
		found := false
		for _, a := range all {
			found = found || a == o
		}
		if !found {
			t.Errorf("ParseAllOOM(%s) does not contain ParseOOM's result %+v", c.name, o)
		}
	}
}

// TestOOMNumProcessesOutOfRange: an OOM built by hand with NumProcesses
// outside [0, MaxProcesses] reads as the nearest bound, without a
// panic, in every method that lists processes.
func TestOOMNumProcessesOutOfRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, want int
	}{
		{-1, 0}, {math.MinInt, 0}, {0, 0}, {3, 3}, {MaxProcesses, MaxProcesses},
		{MaxProcesses + 1, MaxProcesses}, {math.MaxInt, MaxProcesses},
	}
	for _, tc := range tests {
		o := OOM{
			Requested: gpumem.GiB, Capacity: 8 * gpumem.GiB, Free: 0,
			Stated:       FieldRequested | FieldCapacity | FieldFree | FieldProcesses,
			NumProcesses: tc.n, MoreUsed: gpumem.MiB,
		}
		for i := range o.Processes {
			o.Processes[i] = Process{PID: int64(100 + i), Used: gpumem.GiB}
		}
		require.NotPanics(t, func() {
			assert.Len(t, o.ProcessList(), tc.want, "NumProcesses %d", tc.n)
			assert.Equal(t, gpumem.Bytes(tc.want)*gpumem.GiB+gpumem.MiB, o.OtherProcesses(), "NumProcesses %d", tc.n)
			d := o.Diagnose()
			assert.Equal(t, gpumem.Bytes(tc.want)*gpumem.GiB+gpumem.MiB, d.OtherProcesses, "NumProcesses %d", tc.n)
			_ = d.LogValue().String()
			b, err := json.Marshal(o)
			require.NoError(t, err)
			var j struct {
				Other []json.RawMessage `json:"other_processes"`
			}
			require.NoError(t, json.Unmarshal(b, &j))
			assert.Len(t, j.Other, tc.want, "NumProcesses %d", tc.n)
			_, err = json.Marshal(d)
			require.NoError(t, err)
		}, "NumProcesses %d", tc.n)
	}
}

// TestParseOOMVariantsConstructed covers the message variants that no
// public thread showed: each input is built from a real corpus message
// (named) by the change the comment states, not copied from a report.
func TestParseOOMVariantsConstructed(t *testing.T) {
	t.Parallel()
	g := gpumem.MustParseBytes
	summary := "Currently allocated     : 54.14 GiB\nRequested               : 686.41 MiB\nDevice limit            : 79.35 GiB\nFree (according to CUDA): 27.19 MiB\nPyTorch limit (set by user-supplied memory fraction)\n                        : 17179869184.00 GiB\n"
	t.Run("retyped typos", func(t *testing.T) {
		t.Parallel()
		// reserved_fairseq3752-style 1.4-2.0 message, retyped with
		// "memmory" and "allocat".
		o, ok := ParseOOM("RuntimeError: CUDA out of memmory. Tried to allocat 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.76 GiB already allocated; 21.12 MiB free; 9.88 GiB reserved in total by PyTorch)")
		require.True(t, ok)
		assert.Equal(t, EraReservedTotal, o.Era)
		assert.Equal(t, g("20.00 MiB"), o.Requested)
		assert.Equal(t, g("9.88 GiB"), o.Reserved)
		assert.Equal(t, len("RuntimeError: "), o.Start, "the message starts at \"CUDA out of memmory\"")
		assert.False(t, o.Truncated)
		// "allocatte": up to three letters after the anchor are skipped.
		o, ok = ParseOOM("CUDA out of memory. Tried to allocatte 2.00 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.")
		require.True(t, ok)
		assert.Equal(t, EraCapacity, o.Era)
		assert.Equal(t, g("2.00 GiB"), o.Requested)
	})
	t.Run("NUL byte kept, full message after it", func(t *testing.T) {
		t.Parallel()
		// async_pytorch110194's message as a C++ log keeps it: the
		// device index streamed as a char (5 = 0x05; 0 = NUL).
		for _, dev := range []int{0, 5} {
			o, ok := ParseOOM("torch.OutOfMemoryError: Allocation on device " + string(rune(dev)) + " would exceed allowed memory. (out of memory)\n" + summary)
			require.True(t, ok)
			assert.Equal(t, dev, o.Device)
			assert.True(t, o.Has(FieldDevice|FieldRequested|FieldCapacity|FieldFree|FieldAllocated))
			assert.Equal(t, g("686.41 MiB"), o.Requested)
			assert.False(t, o.Truncated)
		}
	})
	t.Run("NUL cut, summary and memory_summary after", func(t *testing.T) {
		t.Parallel()
		// async_nul_comfyui4936's cut message followed by the summary
		// lines and a torch.cuda.memory_summary() header naming device 3.
		text := "torch.OutOfMemoryError: Allocation on device \n" + summary +
			"|===========================================================================|\n" +
			"|                  PyTorch CUDA memory summary, device ID 3                 |\n"
		o, ok := ParseOOM(text)
		require.True(t, ok)
		assert.True(t, o.Truncated)
		assert.Equal(t, 3, o.Device)
		assert.True(t, o.Has(FieldDevice|FieldRequested|FieldCapacity|FieldFree|FieldAllocated))
		assert.Equal(t, g("54.14 GiB"), o.Allocated)
		assert.Equal(t, CauseFragmentation, o.Diagnose().Cause, "25 GiB neither free nor allocated under cudaMallocAsync")
		// The scan stops at the next message: a second cut message
		// does not take the first one's numbers.
		all := ParseAllOOM("Allocation on device \nAllocation on device \n" + summary)
		require.Len(t, all, 2)
		assert.Zero(t, all[0].Stated)
		assert.Equal(t, g("686.41 MiB"), all[1].Requested)
	})
	t.Run("a failure wins over warnings", func(t *testing.T) {
		t.Parallel()
		// tfwarn_tf43546's warning followed by tf_models7142's failure.
		warn := "W tensorflow/core/common_runtime/bfc_allocator.cc:246] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.02GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that there could be performance gains if more memory were available.\n"
		fail := "ResourceExhaustedError: OOM when allocating tensor with shape[500,17,17,4032] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
		for _, text := range []string{warn + fail, fail + warn} {
			o, ok := ParseOOM(text)
			require.True(t, ok)
			assert.False(t, o.Warning)
			assert.Equal(t, EraTFTensor, o.Era)
			all := ParseAllOOM(text)
			require.Len(t, all, 2)
		}
		o, ok := ParseOOM(warn)
		assert.False(t, ok)
		assert.True(t, o.Warning)
		assert.Equal(t, g("1.02GiB"), o.Requested)
		// TensorFlow 1.0's form, the sentence wrapped onto the next line.
		o, ok = ParseOOM("W tensorflow/core/common_runtime/bfc_allocator.cc:217] Ran out of memory trying to allocate 1.18GiB. \nThe caller indicates that this is not a failure, but may mean that there could be performance gains if more memory is available.")
		assert.False(t, ok)
		assert.True(t, o.Warning)
		assert.Equal(t, g("1.18GiB"), o.Requested)
		// The same line without the sentence is a failure (TF 1.x printed
		// it before raising ResourceExhaustedError).
		o, ok = ParseOOM("Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.02GiB.  Current allocation summary follows.")
		assert.True(t, ok)
		assert.False(t, o.Warning)
	})
	t.Run("host allocations are not device OOMs", func(t *testing.T) {
		t.Parallel()
		// jaxdriver_alphafold197_unified's line as the pinned-host form.
		_, ok := ParseOOM("E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:802] failed to alloc 17179869184 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
		assert.False(t, ok)
		_, ok = ParseOOM("Accelerator Fatal Error: call to cuMemAlloc returned error 2 (CUDA_ERROR_OUT_OF_MEMORY): Out of memory")
		assert.False(t, ok)
		// Real: https://github.com/Zuricho/ParallelFold/issues/23 (pinned
		// host memory refused by the OS, not a device OOM).
		_, ok = ParseOOM("2022-08-17 11:26:20.226278: E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:796] failed to alloc 12524123136 bytes on host: CUDA_ERROR_OPERATING_SYSTEM: OS call failed or operation not supported on this OS\n2022-08-17 11:26:20.226316: W external/org_tensorflow/tensorflow/core/common_runtime/device/device_host_allocator.h:46] could not allocate pinned host memory of size: 12524123136\n")
		assert.False(t, ok)
	})
	t.Run("TensorFlow 2.15+ vendored XLA is TensorFlow", func(t *testing.T) {
		t.Parallel()
		o, ok := ParseOOM("2024-03-10 10:10:10.123456: E external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:1000] failed to allocate 7.79G (8365146112 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
		require.True(t, ok)
		assert.Equal(t, TensorFlow, o.Framework)
		assert.Equal(t, g("8365146112 bytes"), o.Requested)
	})
}
