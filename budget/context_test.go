package budget

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/require"
)

// contextMeasurement is one line of testdata/context/context.jsonl.
type contextMeasurement struct {
	ID                string  `json:"id"`
	Source            string  `json:"source"`
	Quote             string  `json:"quote"`
	GPU               string  `json:"gpu"`
	ComputeCapability *string `json:"compute_capability"`
	CUDA              string  `json:"cuda"`
	Torch             string  `json:"torch"`
	Loading           string  `json:"loading"`
	LoadingHow        string  `json:"loading_how"`
	Method            string  `json:"method"`
	Probe             string  `json:"probe"`
	ValueText         string  `json:"value_text"`
	ValueBytes        int64   `json:"value_bytes"`
	SegmentBytes      int64   `json:"segment_bytes"`
	ContextBytes      int64   `json:"context_bytes"`
	Table             bool    `json:"table"`
	Notes             string  `json:"notes"`
}

func readContextMeasurements(t *testing.T) []contextMeasurement {
	t.Helper()
	f, err := os.Open("../testdata/context/context.jsonl")
	require.NoError(t, err)
	defer f.Close()
	var out []contextMeasurement
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var m contextMeasurement
		d := json.NewDecoder(strings.NewReader(sc.Text()))
		d.DisallowUnknownFields()
		require.NoError(t, d.Decode(&m), "context.jsonl line %d", n)
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

// measurementJob returns the device, CUDA and loading a measurement was
// taken under.
func (m contextMeasurement) env(t *testing.T) (gpumem.Device, CUDAVersion, ModuleLoading) {
	t.Helper()
	var d gpumem.Device
	if m.ComputeCapability != nil {
		cc, err := gpumem.ParseComputeCapability(*m.ComputeCapability)
		require.NoError(t, err, m.ID)
		d.Compute = cc
	}
	cuda, err := ParseCUDAVersion(m.CUDA)
	require.NoError(t, err, m.ID)
	l := LoadingEager
	if m.Loading == "lazy" {
		l = LoadingLazy
	} else {
		require.Equal(t, "eager", m.Loading, m.ID)
	}
	return d, cuda, l
}

// TestContextMeasurements checks the data set: every line sourced, its
// context the figure less the first tensor's allocator segment.
func TestContextMeasurements(t *testing.T) {
	t.Parallel()
	ms := readContextMeasurements(t)
	require.NotEmpty(t, ms)
	seen := map[string]bool{}
	for _, m := range ms {
		require.False(t, seen[m.ID], "id %q twice", m.ID)
		seen[m.ID] = true
		require.True(t, strings.HasPrefix(m.Source, "https://"), "%s: source %q", m.ID, m.Source)
		require.NotEmpty(t, m.Quote, m.ID)
		require.NotEmpty(t, m.Method, m.ID)
		require.Positive(t, m.ValueBytes, m.ID)
		require.GreaterOrEqual(t, m.SegmentBytes, int64(0), m.ID)
		require.Equal(t, m.ValueBytes-m.SegmentBytes, m.ContextBytes, "%s: context_bytes = value_bytes − segment_bytes", m.ID)
		m.env(t)
	}
}

// TestContextTable checks every row of contextTable against the
// measurement it names, every table measurement against DefaultContext
// under its own GPU, CUDA and loading (to the MiB the table keeps), and
// each range's fallback row against the largest measurement of the range.
func TestContextTable(t *testing.T) {
	t.Parallel()
	ms := readContextMeasurements(t)
	byID := map[string]contextMeasurement{}
	for _, m := range ms {
		byID[m.ID] = m
	}
	near := func(got gpumem.Bytes, want int64) bool {
		d := int64(got) - want
		return d > -int64(gpumem.MiB) && d < int64(gpumem.MiB)
	}
	for _, e := range contextTable {
		m, ok := byID[e.id]
		if !ok {
			t.Errorf("contextTable row %s: no measurement %q in context.jsonl", e.bytes, e.id)
			continue
		}
		if !m.Table {
			t.Errorf("contextTable row %s: measurement %s is not marked table", e.bytes, e.id)
		}
		if !near(e.bytes, m.ContextBytes) {
			t.Errorf("contextTable row for %s = %d bytes, measured %d", e.id, int64(e.bytes), m.ContextBytes)
		}
	}
	for _, m := range ms {
		d, cuda, l := m.env(t)
		got := DefaultContext(d, cuda, l)
		if m.Table && !near(got, m.ContextBytes) {
			t.Errorf("DefaultContext(%s, CUDA %s, %s) = %s, want the measured %d bytes (%s)", d.Compute, cuda, l, got, m.ContextBytes, m.ID)
		}
		// The fallback of the measurement's range covers it.
		if fb := DefaultContext(gpumem.Device{}, cuda, l); int64(fb)+int64(gpumem.MiB) <= m.ContextBytes {
			t.Errorf("fallback DefaultContext(unknown GPU, CUDA %s, %s) = %s, below the measured %d bytes of %s", cuda, l, fb, m.ContextBytes, m.ID)
		}
	}
}

func TestDefaultContext(t *testing.T) {
	t.Parallel()
	dev := func(name string) gpumem.Device {
		d, ok := gpumem.LookupDevice(name)
		require.True(t, ok, name)
		return d
	}
	for _, tc := range []struct {
		name string
		d    gpumem.Device
		cuda CUDAVersion
		l    ModuleLoading
		want gpumem.Bytes
	}{
		{"unknown device, defaults", gpumem.Device{}, CUDAVersion{}, LoadingDefault, 426 * gpumem.MiB},
		{"H100, defaults", dev("h100"), CUDAVersion{}, LoadingDefault, 426 * gpumem.MiB},
		{"H100 by name only", gpumem.Device{Name: "NVIDIA H100 80GB HBM3"}, CUDAVersion{12, 4}, LoadingDefault, 426 * gpumem.MiB},
		{"H100 eager", dev("h100"), CUDAVersion{12, 4}, LoadingEager, 616 * gpumem.MiB},
		{"A100 CUDA 11.8", dev("a100"), CUDAVersion{11, 8}, LoadingDefault, 426 * gpumem.MiB},
		{"A100 CUDA 11.3", dev("a100"), CUDAVersion{11, 3}, LoadingDefault, 1685 * gpumem.MiB},
		{"RTX 3090 lazy", dev("rtx3090"), CUDAVersion{12, 8}, LoadingDefault, 256 * gpumem.MiB},
		{"A10G defaults", dev("a10g"), CUDAVersion{}, LoadingDefault, 256 * gpumem.MiB},
		{"RTX 3090 CUDA 11.1", dev("rtx3090"), CUDAVersion{11, 1}, LoadingDefault, 1685 * gpumem.MiB},
		{"V100 CUDA 11.2", dev("v100"), CUDAVersion{11, 2}, LoadingDefault, 1341 * gpumem.MiB},
		{"V100 CUDA 11.2 asked lazy", dev("v100"), CUDAVersion{11, 2}, LoadingLazy, 1341 * gpumem.MiB},
		{"V100 CUDA 12.1", dev("v100"), CUDAVersion{12, 1}, LoadingDefault, 426 * gpumem.MiB},
		{"V100 CUDA 10.2", dev("v100"), CUDAVersion{10, 2}, LoadingDefault, 1005 * gpumem.MiB},
		{"T4 CUDA 10.1", dev("t4"), CUDAVersion{10, 1}, LoadingDefault, 877 * gpumem.MiB},
		{"unknown device CUDA 11.0", gpumem.Device{Name: "40GiB of free memory"}, CUDAVersion{11, 0}, LoadingDefault, 1685 * gpumem.MiB},
		{"MI300X", dev("mi300x"), CUDAVersion{}, LoadingDefault, 426 * gpumem.MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := DefaultContext(tc.d, tc.cuda, tc.l); got != tc.want {
				t.Errorf("DefaultContext(%s %s, CUDA %s, %s) = %s, want %s", tc.d.Name, tc.d.Compute, tc.cuda, tc.l, got, tc.want)
			}
		})
	}
	if got := DefaultOverhead(dev("h100")).Context; got != 426*gpumem.MiB {
		t.Errorf("DefaultOverhead(H100).Context = %s, want 426 MiB", got)
	}
}

// TestDefaultContextAllocs: the table lookup, catalog look-up by name
// included, does not allocate (Estimate does not).
func TestDefaultContextAllocs(t *testing.T) {
	name := "NVIDIA H100 80GB HBM3"
	if n := testing.AllocsPerRun(100, func() { DefaultContext(gpumem.Device{Name: name}, CUDAVersion{12, 1}, LoadingDefault) }); n != 0 {
		t.Errorf("DefaultContext allocates %v times, want 0", n)
	}
	j := hardenJob(t)
	j.Device = gpumem.Device{Name: name, Capacity: 80 * gpumem.GiB}
	j.Overhead.CUDA = CUDAVersion{12, 1}
	if n := testing.AllocsPerRun(100, func() { _, _ = Estimate(j) }); n != 0 {
		t.Errorf("Estimate of a job on a named device allocates %v times, want 0", n)
	}
}

// TestEstimateContext checks that Estimate takes the context from the
// job's device, CUDA and loading, and refuses impossible combinations.
func TestEstimateContext(t *testing.T) {
	t.Parallel()
	j := hardenJob(t)
	v100, _ := gpumem.LookupDevice("v100")
	h100, _ := gpumem.LookupDevice("h100")
	for _, tc := range []struct {
		name  string
		d     gpumem.Device
		o     Overhead
		want  gpumem.Bytes
		field string
	}{
		{"default", gpumem.Device{}, Overhead{}, 426 * gpumem.MiB, ""},
		{"V100 CUDA 11.2", v100, Overhead{CUDA: CUDAVersion{11, 2}}, 1341 * gpumem.MiB, ""},
		{"explicit context wins", v100, Overhead{Context: 1 * gpumem.GiB, CUDA: CUDAVersion{11, 2}}, 1 * gpumem.GiB, ""},
		{"H100 eager", h100, Overhead{Loading: LoadingEager}, 616 * gpumem.MiB, ""},
		{"H100 before CUDA 11.8", h100, Overhead{CUDA: CUDAVersion{11, 7}}, 0, "Job.Overhead.CUDA"},
		{"lazy before CUDA 11.7", v100, Overhead{CUDA: CUDAVersion{11, 6}, Loading: LoadingLazy}, 0, "Job.Overhead.Loading"},
		{"bad loading", gpumem.Device{}, Overhead{Loading: 9}, 0, "Job.Overhead.Loading"},
		{"bad CUDA", gpumem.Device{}, Overhead{CUDA: CUDAVersion{-1, 0}}, 0, "Job.Overhead.CUDA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x := j
			x.Device, x.Overhead = tc.d, tc.o
			b, err := Estimate(x)
			if tc.field != "" {
				var fe *gpumem.FieldError
				require.True(t, errors.As(err, &fe), "Estimate: %v, want a FieldError", err)
				require.Equal(t, tc.field, fe.Field)
				require.ErrorIs(t, err, gpumem.ErrInvalid)
				return
			}
			require.NoError(t, err)
			if b.Context != tc.want {
				t.Errorf("Estimate(%s).Context = %s, want %s", tc.name, b.Context, tc.want)
			}
		})
	}
}

func TestParseCUDAVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want CUDAVersion
		ok   bool
	}{
		{"12.1", CUDAVersion{12, 1}, true},
		{"11.8", CUDAVersion{11, 8}, true},
		{"12", CUDAVersion{12, 0}, true},
		{" 12.4.1 ", CUDAVersion{12, 4}, true},
		{"V12.1.105", CUDAVersion{12, 1}, true},
		{"cu121", CUDAVersion{12, 1}, true},
		{"cu118", CUDAVersion{11, 8}, true},
		{"CU130", CUDAVersion{13, 0}, true},
		{"cu92", CUDAVersion{9, 2}, true},
		{"12.10", CUDAVersion{12, 10}, true},
		{"", CUDAVersion{}, false},
		{"0.5", CUDAVersion{}, false},
		{"12.", CUDAVersion{}, false},
		{"12.a", CUDAVersion{}, false},
		{"1.2.3.4", CUDAVersion{}, false},
		{"cu", CUDAVersion{}, false},
		{"cu1", CUDAVersion{}, false},
		{"cu05", CUDAVersion{}, false},
		{"-12", CUDAVersion{}, false},
		{"123.1", CUDAVersion{}, false},
	} {
		got, err := ParseCUDAVersion(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseCUDAVersion(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if !tc.ok {
			require.ErrorIs(t, err, gpumem.ErrSyntax)
		}
	}
}

// FuzzParseCUDAVersion: a version that parses prints as one that parses
// back to itself.
func FuzzParseCUDAVersion(f *testing.F) {
	for _, s := range []string{"12.1", "cu121", "V12.1.105", "12", "", "cu", "1.2.3.4", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseCUDAVersion(s)
		if err != nil {
			return
		}
		if v.IsZero() || v.Major < 1 || v.Minor < 0 {
			t.Fatalf("ParseCUDAVersion(%q) = %+v", s, v)
		}
		back, err := ParseCUDAVersion(v.String())
		if err != nil || back != v {
			t.Fatalf("ParseCUDAVersion(%q) = %v, whose String %q reads as %v, %v", s, v, v.String(), back, err)
		}
	})
}
