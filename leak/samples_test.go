package leak

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/require"
)

func TestParseSamples(t *testing.T) {
	t.Parallel()
	ts := func(s string) time.Time {
		v, err := time.Parse("2006/01/02 15:04:05.000", s)
		if err != nil {
			panic(err)
		}
		return v
	}
	mib := func(n int64) gpumem.Bytes { return gpumem.Bytes(n) * gpumem.MiB }
	tests := []struct {
		name string
		in   string
		want []Sample
	}{
		{
			name: "nvidia-smi csv with header and units",
			in: "timestamp, memory.used [MiB], memory.total [MiB]\n" +
				"2024/01/15 10:00:00.123, 1234 MiB, 24564 MiB\n" +
				"2024/01/15 10:00:01.125, 1300 MiB, 24564 MiB\n",
			want: []Sample{
				{Line: 2, Time: ts("2024/01/15 10:00:00.123"), Used: mib(1234), Capacity: mib(24564), Has: ColTime | ColUsed | ColCapacity},
				{Line: 3, Time: ts("2024/01/15 10:00:01.125"), Used: mib(1300), Capacity: mib(24564), Has: ColTime | ColUsed | ColCapacity},
			},
		},
		{
			name: "nvidia-smi csv,noheader",
			in:   "2024/01/15 10:00:00.123, 1234 MiB, 24564 MiB\n2024/01/15 10:00:05.000, 2000 MiB, 24564 MiB\n",
			want: []Sample{
				{Line: 1, Time: ts("2024/01/15 10:00:00.123"), Used: mib(1234), Capacity: mib(24564), Has: ColTime | ColUsed | ColCapacity},
				{Line: 2, Time: ts("2024/01/15 10:00:05.000"), Used: mib(2000), Capacity: mib(24564), Has: ColTime | ColUsed | ColCapacity},
			},
		},
		{
			name: "nvidia-smi csv,nounits with index",
			in:   "index, timestamp, memory.used [MiB], memory.total [MiB]\n1, 2024/01/15 10:00:00.000, 512, 81920\n",
			want: []Sample{
				{Line: 2, Device: 1, Time: ts("2024/01/15 10:00:00.000"), Used: mib(512), Capacity: mib(81920), Has: ColTime | ColUsed | ColCapacity},
			},
		},
		{
			name: "memory_stats json lines",
			in: `{"active.all.current": 12, "allocated_bytes.all.current": 1073741824, "allocated_bytes.all.peak": 2147483648, "reserved_bytes.all.current": 2147483648}` + "\n" +
				`{"allocated_bytes.all.current": 1073745920, "reserved_bytes.all.current": 2147483648}` + "\n",
			want: []Sample{
				{Line: 1, Step: 0, Allocated: gpumem.GiB, Reserved: 2 * gpumem.GiB, Has: ColStep | ColAllocated | ColReserved},
				{Line: 2, Step: 1, Allocated: gpumem.GiB + 4096, Reserved: 2 * gpumem.GiB, Has: ColStep | ColAllocated | ColReserved},
			},
		},
		{
			name: "memory_stats OrderedDict repr over lines",
			in:   "OrderedDict([('active.all.allocated', 10),\n ('allocated_bytes.all.current', 5120),\n ('reserved_bytes.all.current', 2097152),\n ('requested_bytes.all.current', 4000)])\n",
			want: []Sample{
				{Line: 2, Step: 0, Allocated: 5120, Reserved: 2 * gpumem.MiB, Has: ColStep | ColAllocated | ColReserved},
			},
		},
		{
			name: "memory_summary table",
			in: "|===========================================================================|\n" +
				"|                  PyTorch CUDA memory summary, device ID 0                 |\n" +
				"|---------------------------------------------------------------------------|\n" +
				"|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n" +
				"|---------------------------------------------------------------------------|\n" +
				"| Allocated memory      |  13270 MiB |  14104 MiB |  83422 GiB |  83409 GiB |\n" +
				"|       from large pool |  13200 MiB |  14000 MiB |  80000 GiB |  79000 GiB |\n" +
				"| Active memory         |  13270 MiB |  14104 MiB |  83422 GiB |  83409 GiB |\n" +
				"| GPU reserved memory   |  15290 MiB |  15290 MiB |  15290 MiB |      0 B   |\n",
			want: []Sample{
				{Line: 6, Step: 0, Allocated: mib(13270), Reserved: mib(15290), Has: ColStep | ColAllocated | ColReserved},
			},
		},
		{
			name: "memory_summary of PyTorch 1.x (MB are MiB); Allocated rows from R-Drop #9, reserved row illustrative",
			in: "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n" +
				"| Allocated memory      |   15046 MB |   15114 MB |   14505 GB |   14490 GB |\n" +
				"|       from large pool |   15015 MB |   15083 MB |   14253 GB |   14239 GB |\n" +
				"| GPU reserved memory   |   15236 MB |   15236 MB |   15236 MB |       0 B  |\n",
			want: []Sample{
				{Line: 2, Step: 0, Allocated: mib(15046), Reserved: mib(15236), Has: ColStep | ColAllocated | ColReserved},
			},
		},
		{
			name: "DeepSpeed see_memory_usage (GB are GiB)",
			in: "[2024-03-01 10:00:00,123] [INFO] [utils.py:800:see_memory_usage] After forward\n" +
				"[2024-03-01 10:00:00,124] [INFO] [utils.py:801:see_memory_usage] MA 12.5 GB         Max_MA 13.25 GB         CA 14 GB         Max_CA 15 GB \n",
			want: []Sample{
				{Line: 2, Step: 0, Time: time.Date(2024, 3, 1, 10, 0, 0, 124e6, time.UTC), Allocated: 12*gpumem.GiB + gpumem.GiB/2, Reserved: 14 * gpumem.GiB, Has: ColStep | ColTime | ColAllocated | ColReserved},
			},
		},
		{
			name: "mmdetection epoch/iter with memory in MiB (running peak)",
			in:   "2022-05-01 12:00:00,000 - mmdet - INFO - Epoch [2][50/100]\tlr: 2.000e-02, eta: 1:00:00, time: 0.5, data_time: 0.05, memory: 3795, loss_rpn_cls: 0.1\n",
			want: []Sample{
				{Line: 1, Step: 150, Time: time.Date(2022, 5, 1, 12, 0, 0, 0, time.UTC), Allocated: mib(3795), Peak: true, Has: ColStep | ColTime | ColAllocated},
			},
		},
		{
			name: "detectron2 max_mem in M (MiB, running peak)",
			in:   "[03/15 12:00:00 d2.utils.events]:  eta: 0:10:00  iter: 19  total_loss: 2.1  time: 0.3  data_time: 0.01  lr: 0.0002  max_mem: 2345M\n",
			want: []Sample{
				{Line: 1, Step: 19, Allocated: mib(2345), Peak: true, Has: ColStep | ColAllocated},
			},
		},
		{
			name: "memory_allocated in bytes and reserved with units",
			in:   "global_step=300 memory_allocated=5368709120 memory_reserved=6.5 GiB\nnoise line\n",
			want: []Sample{
				{Line: 1, Step: 300, Allocated: 5 * gpumem.GiB, Reserved: 6*gpumem.GiB + gpumem.GiB/2, Has: ColStep | ColAllocated | ColReserved},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSamples(strings.NewReader(tc.in))
			require.NoError(t, err)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseSamples mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSamplesLLaVALeak(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/logs/llava-24gb-leak.log")
	require.NoError(t, err)
	defer f.Close()
	got, err := ParseSamples(f)
	require.NoError(t, err)
	require.Len(t, got, 10)
	if got[0].Step != 100 || got[0].Used != gpumem.MustParseBytes("18.2GB") || got[0].Has != ColStep|ColUsed {
		t.Errorf("first sample = %v, want step 100, used 18.2GB", got[0])
	}
	if got[8].Used != gpumem.MustParseBytes("24.2GB") {
		t.Errorf("ninth sample = %v, want 24.2GB", got[8])
	}
	if !got[9].OOM || got[9].Step != 1000 || got[9].Has&ColMemory != 0 {
		t.Errorf("last sample = %v, want the OOM at step 1000", got[9])
	}
}

func TestParseSamplesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, field string
	}{
		{"bad nvidia-smi value", "timestamp, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:00:00.123, 1234 MiB, 24564 MiB\n2024/01/15 10:00:01.123, lots MiB, 24564 MiB\n", "line 3"},
		{"bits", "step 4 memory=12Gb\n", "line 1"},
		{"long line", "step 1 mem=1GiB\n" + strings.Repeat("x", MaxLineBytes+10) + "\n", "line 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSamples(strings.NewReader(tc.in))
			require.Error(t, err)
			var fe *gpumem.FieldError
			require.True(t, errors.As(err, &fe), "error %v is not a FieldError", err)
			if fe.Field != tc.field {
				t.Errorf("ParseSamples error field = %q, want %q (%v)", fe.Field, tc.field, err)
			}
		})
	}
}

func FuzzParseSamples(f *testing.F) {
	f.Add("Step 100: Loss=2.34, Memory=18.2GB\nStep 1000: CUDA OOM\n")
	f.Add("timestamp, memory.used [MiB], memory.total [MiB]\n2024/01/15 10:00:00.123, 1234 MiB, 24564 MiB\n")
	f.Add("2024/01/15 10:00:00.123, 1234 MiB, 24564 MiB\n")
	f.Add(`{"allocated_bytes.all.current": 1073741824, "reserved_bytes.all.current": 2147483648}`)
	f.Add("| Allocated memory      |  13270 MiB |  14104 MiB |\n| GPU reserved memory   |  15290 MiB |  15290 MiB |\n")
	f.Add("MA 12.5 GB         Max_MA 13.25 GB         CA 14 GB         Max_CA 15 GB")
	f.Add("Epoch [2][50/100]\tlr: 2.000e-02, memory: 3795, loss: 0.1")
	f.Add("Step 1: Memory=1e400GB\r\nStep 2: Memory=-5GB\x00\nStep 99999999999999999999: Memory=1GB\n")
	f.Add("index, memory.used [MiB]\n0, 99999999999999999999 MiB\n1,\n")
	f.Add(`{"allocated_bytes.all.current": -1, "reserved_bytes.all.current": 1e999}`)
	logs, _ := filepath.Glob("testdata/logs/*.log")
	for _, name := range logs {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(string(data))
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSamples(strings.NewReader(s))
		if err != nil {
			var fe *gpumem.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a FieldError", err)
			}
			return
		}
		for _, x := range got {
			if x.Allocated < 0 || x.Reserved < 0 || x.Used < 0 || x.Capacity < 0 {
				t.Fatalf("negative size in %v", x)
			}
			if x.Has&ColMemory == 0 && !x.OOM {
				t.Fatalf("sample without memory: %v", x)
			}
		}
		r, err := Analyze(got, &Options{Capacity: 24 * gpumem.GiB})
		if err != nil {
			t.Fatalf("Analyze: %v", err)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("json.Marshal(Report): %v", err)
		}
	})
}

// TestParseSamplesRealLogs reads logs copied from public issues (sources in
// each file's first line): mmdetection's memory field is
// torch.cuda.max_memory_allocated in MiB, a running peak.
func TestParseSamplesRealLogs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file      string
		n         int
		firstStep int64
		firstMiB  int64
		shape     Shape
	}{
		{"mmdet5096.log", 4, 1000, 5737, ShapeFlat}, // short: described, no verdict
		{"mmdet1956.log", 7, 1550, 6814, ShapeFlat},
		{"mmdet3d804.log", 2, 1150, 4603, ShapeFlat}, // short
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			f, err := os.Open("testdata/logs/" + tc.file)
			require.NoError(t, err)
			defer f.Close()
			got, err := ParseSamples(f)
			require.NoError(t, err)
			require.Len(t, got, tc.n)
			s := got[0]
			if s.Step != tc.firstStep || s.Allocated != gpumem.Bytes(tc.firstMiB)*gpumem.MiB || !s.Peak || s.Has&ColTime == 0 {
				t.Errorf("ParseSamples(%s)[0] = %v, want step %d, %d MiB peak with time", tc.file, s, tc.firstStep, tc.firstMiB)
			}
			r, err := Analyze(got, nil)
			require.NoError(t, err)
			if r.Shape != tc.shape || r.Leak || r.Short != (tc.n < 5) {
				t.Errorf("Analyze(%s) = %v leak=%v, want %v and no leak", tc.file, r.Shape, r.Leak, tc.shape)
			}
		})
	}
}

func TestParseSamplesLongFraction(t *testing.T) {
	t.Parallel()
	got, err := ParseSamples(strings.NewReader("step 3 mem=1.50000000000000000001\n"))
	require.NoError(t, err)
	require.Len(t, got, 1)
	if got[0].Used != gpumem.MiB+gpumem.MiB/2 {
		t.Errorf("ParseSamples(long fraction) = %v, want 1.5 MiB", got[0])
	}
}

func TestParseSamplesNilReader(t *testing.T) {
	t.Parallel()
	_, err := ParseSamples(nil)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "reader", fe.Field)
}
