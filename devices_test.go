package gpumem

import (
	"testing"
)

// deviceSheet is what the catalog is checked against: the size a data
// sheet quotes (in the vendor's loose "GB"), and nvidia-smi's or
// rocm-smi's memory.total in MiB where a source gave it (0 if not).
type deviceSheet struct {
	sheetGB int // data-sheet size, e.g. 80 for an "80GB" A100
	smiMiB  int // nvidia-smi memory.total, MiB; 0 when not sourced
}

// deviceSheets has one row per catalog entry, by canonical name. A new
// catalog entry must add a row here.
var deviceSheets = map[string]deviceSheet{
	"Tesla V100-SXM2-16GB":           {16, 16160},
	"Tesla V100-SXM2-32GB":           {32, 0},
	"Tesla V100-PCIE-16GB":           {16, 0},
	"Tesla V100-PCIE-32GB":           {32, 0},
	"Tesla T4":                       {16, 15360},
	"NVIDIA A10":                     {24, 23028},
	"NVIDIA A10G":                    {24, 0},
	"NVIDIA A30":                     {24, 0},
	"NVIDIA A40":                     {48, 46068},
	"NVIDIA A100-SXM4-40GB":          {40, 40960},
	"NVIDIA A100-PCIE-40GB":          {40, 0},
	"NVIDIA A100 80GB PCIe":          {80, 0},
	"NVIDIA A100-SXM4-80GB":          {80, 81920},
	"NVIDIA A800-SXM4-80GB":          {80, 81920},
	"NVIDIA RTX A6000":               {48, 0},
	"NVIDIA GeForce RTX 3090":        {24, 24576},
	"NVIDIA L4":                      {24, 23034},
	"NVIDIA L40":                     {48, 0},
	"NVIDIA L40S":                    {48, 46068},
	"NVIDIA RTX 6000 Ada Generation": {48, 49140},
	"NVIDIA RTX 4000 Ada Generation": {20, 20475},
	"NVIDIA RTX 2000 Ada Generation": {16, 16380},
	"NVIDIA GeForce RTX 4090":        {24, 24564},
	"NVIDIA H100 PCIe":               {80, 0},
	"NVIDIA H100 80GB HBM3":          {80, 81559},
	"NVIDIA H100 NVL":                {94, 95830},
	"NVIDIA H200":                    {141, 0},
	"NVIDIA GH200 480GB":             {96, 97871},
	"NVIDIA B200":                    {180, 0},
	"NVIDIA GeForce RTX 5090":        {32, 0},
	"AMD Instinct MI250X":            {64, 0},
	"AMD Instinct MI300X":            {192, 0},
}

func TestDeviceCatalogSize(t *testing.T) {
	t.Parallel()
	if n := len(deviceCatalog); n < 25 {
		t.Errorf("catalog has %d entries, want at least 25", n)
	}
	if got, want := len(Devices()), len(deviceCatalog); got != want {
		t.Errorf("len(Devices()) = %d, want %d", got, want)
	}
}

// TestDeviceCatalogLookup finds every entry by its canonical name and by
// each of its keys.
func TestDeviceCatalogLookup(t *testing.T) {
	t.Parallel()
	for _, e := range deviceCatalog {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			d, ok := LookupDevice(e.name)
			if !ok {
				t.Fatalf("LookupDevice(%q) not found", e.name)
			}
			if d.Name != e.name || d.Capacity != e.capacity {
				t.Errorf("LookupDevice(%q) = %q %v, want %q %v", e.name, d.Name, d.Capacity, e.name, e.capacity)
			}
			if d.Reserved != 0 || d.Used != 0 {
				t.Errorf("LookupDevice(%q): Reserved %v, Used %v, want zero", e.name, d.Reserved, d.Used)
			}
			if len(e.keys) == 0 {
				t.Fatalf("%q has no keys", e.name)
			}
			for _, k := range e.keys {
				var buf [64]byte
				norm, ok := normalizeDevice(buf[:0], k)
				if !ok || string(norm) != k {
					t.Errorf("key %q of %q is not normalized (normalizes to %q)", k, e.name, norm)
				}
				d, ok := LookupDevice(k)
				if !ok || d.Name != e.name {
					t.Errorf("LookupDevice(%q) = %q, %v, want %q", k, d.Name, ok, e.name)
				}
			}
		})
	}
}

func TestDeviceCatalogNoDuplicateKeys(t *testing.T) {
	t.Parallel()
	owner := map[string]string{}
	names := map[string]bool{}
	for _, e := range deviceCatalog {
		if names[e.name] {
			t.Errorf("canonical name %q appears twice", e.name)
		}
		names[e.name] = true
		for _, k := range e.keys {
			if prev, dup := owner[k]; dup {
				t.Errorf("key %q belongs to both %q and %q", k, prev, e.name)
				continue
			}
			owner[k] = e.name
		}
	}
}

// TestDeviceCatalogCapacities checks each capacity against its data-sheet
// size and, where known, nvidia-smi's total, which counts memory the
// driver reserves and so is never below the CUDA figure.
func TestDeviceCatalogCapacities(t *testing.T) {
	t.Parallel()
	for _, e := range deviceCatalog {
		sheet, ok := deviceSheets[e.name]
		if !ok {
			t.Errorf("%q has no row in deviceSheets", e.name)
			continue
		}
		c := e.capacity
		if c <= 0 {
			t.Errorf("%q: capacity %v, want > 0", e.name, c)
			continue
		}
		if c%MiB != 0 {
			t.Errorf("%q: capacity %v is not whole MiB", e.name, c)
		}
		if sheet.smiMiB > 0 && c > Bytes(sheet.smiMiB)*MiB {
			t.Errorf("%q: capacity %v exceeds nvidia-smi total %dMiB", e.name, c, sheet.smiMiB)
		}
		// Data sheets say "GB" loosely (an "80GB" A100 has 80 GiB of
		// HBM), so the upper bound is the sheet size in GiB plus 5%.
		if hi := Bytes(sheet.sheetGB) * GiB * 105 / 100; c > hi {
			t.Errorf("%q: capacity %v (%s) above %d GB data sheet + 5%%", e.name, c, c.String(), sheet.sheetGB)
		}
		// The driver never keeps more than a few percent.
		if lo := Bytes(sheet.sheetGB) * GB * 85 / 100; c < lo {
			t.Errorf("%q: capacity %v (%s) below 85%% of the %d GB data sheet", e.name, c, c.String(), sheet.sheetGB)
		}
	}
	for name := range deviceSheets {
		if _, ok := LookupDevice(name); !ok {
			t.Errorf("deviceSheets row %q has no catalog entry", name)
		}
	}
}

// TestLookupDeviceNames resolves names as nvidia-smi, rocm-smi and people
// write them.
func TestLookupDeviceNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
	}{
		// nvidia-smi / rocm-smi names as printed.
		{"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"},
		{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"},
		{"NVIDIA A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB"},
		{"NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"},
		{"Tesla V100-SXM2-16GB", "Tesla V100-SXM2-16GB"},
		{"Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB"},
		{"Tesla V100-PCIE-32GB", "Tesla V100-PCIE-32GB"},
		{"Tesla T4", "Tesla T4"},
		{"NVIDIA A10G", "NVIDIA A10G"},
		{"NVIDIA A10", "NVIDIA A10"},
		{"NVIDIA L4", "NVIDIA L4"},
		{"NVIDIA L40S", "NVIDIA L40S"},
		{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"},
		{"NVIDIA H100 PCIe", "NVIDIA H100 PCIe"},
		{"NVIDIA H100 NVL", "NVIDIA H100 NVL"},
		{"NVIDIA H200", "NVIDIA H200"},
		{"NVIDIA GH200 480GB", "NVIDIA GH200 480GB"},
		{"NVIDIA B200", "NVIDIA B200"},
		{"NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"},
		{"NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"},
		{"NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 5090"},
		{"NVIDIA RTX A6000", "NVIDIA RTX A6000"},
		{"NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX 6000 Ada Generation"},
		{"AMD Instinct MI300X", "AMD Instinct MI300X"},
		{"AMD Instinct MI250X", "AMD Instinct MI250X"},
		{"AMD Instinct MI250X/MI250", "AMD Instinct MI250X"},
		// Case, spacing and punctuation do not matter.
		{"  nvidia a100-sxm4-80gb ", "NVIDIA A100-SXM4-80GB"},
		{"NVIDIA\tGeForce  RTX 4090", "NVIDIA GeForce RTX 4090"},
		{"tesla t4", "Tesla T4"},
		// Short forms.
		{"a100-80gb", "NVIDIA A100-SXM4-80GB"},
		{"A100 80GB", "NVIDIA A100-SXM4-80GB"},
		{"a100", "NVIDIA A100-SXM4-80GB"},
		{"a100-40gb", "NVIDIA A100-SXM4-40GB"},
		{"a100-pcie", "NVIDIA A100 80GB PCIe"},
		{"h100", "NVIDIA H100 80GB HBM3"},
		{"H100 SXM", "NVIDIA H100 80GB HBM3"},
		{"h100-pcie", "NVIDIA H100 PCIe"},
		{"h100 nvl", "NVIDIA H100 NVL"},
		{"v100", "Tesla V100-SXM2-16GB"},
		{"v100-32gb", "Tesla V100-SXM2-32GB"},
		{"v100-pcie", "Tesla V100-PCIE-16GB"},
		{"rtx4090", "NVIDIA GeForce RTX 4090"},
		{"RTX 4090", "NVIDIA GeForce RTX 4090"},
		{"4090", "NVIDIA GeForce RTX 4090"},
		{"3090", "NVIDIA GeForce RTX 3090"},
		{"rtx5090", "NVIDIA GeForce RTX 5090"},
		{"a6000", "NVIDIA RTX A6000"},
		{"RTX 6000 Ada", "NVIDIA RTX 6000 Ada Generation"},
		{"l40s", "NVIDIA L40S"},
		{"gh200", "NVIDIA GH200 480GB"},
		{"mi300x", "AMD Instinct MI300X"},
		{"MI250X", "AMD Instinct MI250X"},
		{"t4", "Tesla T4"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			d, ok := LookupDevice(tt.in)
			if !ok {
				t.Fatalf("LookupDevice(%q) not found, want %q", tt.in, tt.want)
			}
			if d.Name != tt.want {
				t.Errorf("LookupDevice(%q) = %q, want %q", tt.in, d.Name, tt.want)
			}
		})
	}
}

func TestLookupDeviceUnknown(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", "   ", "nvidia", "NVIDIA Tesla", "AMD Instinct", "GeForce", "-",
		"a99", "h1000", "a100-120gb", "rtx", "mi100x",
		// Longer than LookupDevice's buffer.
		"NVIDIA A100-SXM4-80GB NVIDIA A100-SXM4-80GB NVIDIA A100-SXM4-80GB NVIDIA A100-SXM4-80GB",
	} {
		if d, ok := LookupDevice(in); ok {
			t.Errorf("LookupDevice(%q) = %q, want not found", in, d.Name)
		}
	}
}

// TestLookupDeviceAllocs is not parallel: testing.AllocsPerRun panics in
// a parallel test, whose allocations other tests would disturb.
func TestLookupDeviceAllocs(t *testing.T) {
	var sink Device
	allocs := testing.AllocsPerRun(100, func() {
		sink, _ = LookupDevice("NVIDIA A100-SXM4-80GB")
	})
	if allocs != 0 {
		t.Errorf("LookupDevice allocates %v times per call, want 0", allocs)
	}
	if sink.Name != "NVIDIA A100-SXM4-80GB" {
		t.Errorf("LookupDevice found %q", sink.Name)
	}
}

func TestDevicesReturnsCopy(t *testing.T) {
	t.Parallel()
	ds := Devices()
	if len(ds) == 0 {
		t.Fatal("Devices() is empty")
	}
	ds[0].Capacity = 1
	if Devices()[0].Capacity == 1 {
		t.Error("Devices() shares memory with the catalog")
	}
}

// TestDeviceCompute checks each catalog entry's compute capability
// against NVIDIA's table (https://developer.nvidia.com/cuda-gpus) and the
// torch logs the catalog quotes ("major=7, minor=0" for the V100s,
// "major=8, minor=6" for the A10G and RTX A6000, "major=9, minor=0" for
// the H100 PCIe and H200, "major=10, minor=0" for the B200); AMD parts
// have none.
func TestDeviceCompute(t *testing.T) {
	t.Parallel()
	want := map[string]ComputeCapability{
		"Tesla V100-SXM2-16GB": {7, 0}, "Tesla V100-SXM2-32GB": {7, 0}, "Tesla V100-PCIE-16GB": {7, 0}, "Tesla V100-PCIE-32GB": {7, 0},
		"Tesla T4":   {7, 5},
		"NVIDIA A10": {8, 6}, "NVIDIA A10G": {8, 6}, "NVIDIA A30": {8, 0}, "NVIDIA A40": {8, 6},
		"NVIDIA A100-SXM4-40GB": {8, 0}, "NVIDIA A100-PCIE-40GB": {8, 0}, "NVIDIA A100 80GB PCIe": {8, 0}, "NVIDIA A100-SXM4-80GB": {8, 0},
		"NVIDIA A800-SXM4-80GB": {8, 0}, "NVIDIA RTX A6000": {8, 6}, "NVIDIA GeForce RTX 3090": {8, 6},
		"NVIDIA L4": {8, 9}, "NVIDIA L40": {8, 9}, "NVIDIA L40S": {8, 9}, "NVIDIA RTX 6000 Ada Generation": {8, 9},
		"NVIDIA RTX 4000 Ada Generation": {8, 9}, "NVIDIA RTX 2000 Ada Generation": {8, 9}, "NVIDIA GeForce RTX 4090": {8, 9},
		"NVIDIA H100 PCIe": {9, 0}, "NVIDIA H100 80GB HBM3": {9, 0}, "NVIDIA H100 NVL": {9, 0}, "NVIDIA H200": {9, 0},
		"NVIDIA GH200 480GB": {9, 0}, "NVIDIA B200": {10, 0}, "NVIDIA GeForce RTX 5090": {12, 0},
		"AMD Instinct MI250X": {}, "AMD Instinct MI300X": {},
	}
	for _, d := range Devices() {
		w, ok := want[d.Name]
		if !ok {
			t.Errorf("%s: no expected compute capability (add it to the test)", d.Name)
			continue
		}
		if d.Compute != w {
			t.Errorf("%s: Compute = %v, want %v", d.Name, d.Compute, w)
		}
		if got, _ := LookupDevice(d.Name); got.Compute != w {
			t.Errorf("LookupDevice(%q).Compute = %v, want %v", d.Name, got.Compute, w)
		}
	}
}

func TestParseComputeCapability(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want ComputeCapability
		ok   bool
	}{
		{"8.0", ComputeCapability{8, 0}, true},
		{" 9.0a ", ComputeCapability{9, 0}, true},
		{"sm_80", ComputeCapability{8, 0}, true},
		{"sm86", ComputeCapability{8, 6}, true},
		{"SM_90a", ComputeCapability{9, 0}, true},
		{"100", ComputeCapability{10, 0}, true},
		{"120", ComputeCapability{12, 0}, true},
		{"10.0f", ComputeCapability{10, 0}, true},
		{"", ComputeCapability{}, false},
		{"8", ComputeCapability{}, false},
		{"0.5", ComputeCapability{}, false},
		{"8.10", ComputeCapability{}, false},
		{"x.y", ComputeCapability{}, false},
		{"8.0.1", ComputeCapability{}, false},
		{"-80", ComputeCapability{}, false},
		{"1000", ComputeCapability{}, false},
	} {
		got, err := ParseComputeCapability(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseComputeCapability(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() == "" {
			t.Errorf("%v.String() is empty", got)
		}
	}
	if s := (ComputeCapability{}).String(); s != "" {
		t.Errorf("zero String() = %q, want \"\"", s)
	}
	if !(ComputeCapability{8, 9}).Less(ComputeCapability{9, 0}) || (ComputeCapability{9, 0}).Less(ComputeCapability{8, 9}) {
		t.Error("Less does not order 8.9 before 9.0")
	}
}
