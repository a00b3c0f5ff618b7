package leak

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// frameworkLogs labels the framework logs copied from public threads in
// testdata/logs/frameworks (source in each file's first line): what the
// thread shows, the series read, its first and last figures (bytes, by
// hand from the text: "MB"/"GB" with a unit in the text are decimal as in
// gpumem.ParseBytes, a bare "M" and a unit-less figure are MiB, DeepSpeed's
// GB are GiB; fractions of a byte round up, as the reader does:
// 10250.5693359375 MiB = 10748500992, 3270.16 MiB = ⌈3429011292.16⌉,
// 4.96 GiB = ⌈5325759447.04⌉, 5.19 GiB = ⌈5572720066.56⌉, 0.77 GiB =
// ⌈826781204.48⌉, 0.18 MiB = ⌈188743.68⌉, 0.35 MiB = ⌈367001.6⌉), and
// Analyze's verdict on it.
var frameworkLogs = []struct {
	file        string
	unit        gpumem.Bytes // ReadOptions.Unit
	samples     int          // 0: ErrNoSamples
	host        int          // lines skipped as host (CPU) memory
	column      Column
	first, last gpumem.Bytes // of column, in the first and last sample that has it
	peak        bool         // the series is a running peak
	threadLeak  bool         // what the thread reports
	leak        bool         // Analyze's verdict on the series
	stepUnit    string
	why         string
}{
	{"megatron60.log", 0, 1, 0, ColAllocated, 10748500992, 10748500992, false, false, false, "iteration",
		"report_memory once (\"after 5 iterations\", step 5); allocated is taken over max allocated (a running peak that only records the largest batch); MB is Megatron's 1024²; one sample: not judged"},
	{"megatron5662.log", 0, 1, 0, ColAllocated, 3429011293, 3429011293, false, false, false, "iteration",
		"\"[Rank 0] (after 20 iterations)\" report_memory; the per-layer table after it (\"cell = mean/max\", rows of a/b numbers) gives no sample"},
	{"megatron965.log", 0, 14, 0, ColAllocated, 36659.26e6, 44283.33e6, false, false, true, "",
		"Allocated/Reserved printed at each stage of one attention forward: growth within a forward pass, not across steps; the lines carry no step, so Analyze reads a linear rise (a misreading the text cannot tell apart)"},
	{"deepspeed522.log", 0, 4, 4, ColAllocated, 5325759448, 5572720067, false, false, false, "sample",
		"see_memory_usage MA (current) over Max_MA; the CPU Virtual Memory lines (50.5 GB host) are skipped as host memory, not read as the GPU's used memory; 4 samples: not judged"},
	{"trl2784.log", 0, 4, 3, ColReserved, 826781205, 826781205, false, false, false, "sample",
		"ZeRO-3 setup: CA flat at 0.77 GiB while host memory grows 6.21 → 8.07 GB; reading the host line as GPU memory would make a false rise"},
	{"mmdet10310.log", 0, 2, 1, ColAllocated, 3686 * gpumem.MiB, 3699 * gpumem.MiB, true, true, false, "iteration",
		"mmengine Epoch(train) memory: (max_memory_allocated, MiB) 3686 → 3699 in 50 iterations; the \"Memory information … used_memory: 81971 MB\" line is the machine's RAM: skipped as host; 2 samples: not judged"},
	{"condinst9.log", 0, 5, 0, ColAllocated, 8132 * gpumem.MiB, 8132 * gpumem.MiB, true, true, false, "iteration",
		"detectron2 max_mem flat at 8132M over iterations 339–419 while the user sees nvidia-smi rise: the running peak is flat, no leak in it"},
	{"tf73457.log", gpumem.GB, 7, 7, ColAllocated, 0.18e9, 0.35e9, false, true, true, "iteration",
		"get_memory_info current 0.18 → 0.35 (GB, given as ReadOptions.Unit) over iterations 6–12, each taking the iteration of the line before; the CPU lines are skipped as host"},
	{"tf73457.log", 0, 7, 7, ColAllocated, 188744, 367002, false, true, true, "iteration",
		"the same log without a unit: 0.18 is read as MiB by the assumption (ReadReport.Assumed says so); the rise 0.18 → 0.35 nearly doubles the level, beyond allocated memory's 2% flat tolerance whatever the unit, so the leak is found; only the sizes are in the wrong unit"},
	{"nemo14850.log", 0, 4, 0, ColReserved, 57466159104, 57675874304, true, false, false, "step",
		"max_memory_reserved/max_memory_allocated in bytes, global_step over iteration over epoch; running peaks, 4 samples: not judged"},
	{"mlx724.log", 0, 10, 0, ColAllocated, 100.759e9, 100.759e9, true, false, false, "iteration",
		"MLX \"Peak mem 100.759 GB\" flat over iterations 860–950: a running peak, flat"},
	{"returnn1478.log", 0, 11, 0, ColAllocated, 427.8e6, 4.9e9, false, true, true, "",
		"RETURNN alloc cur 427.8MB → 4.9GB (alloc peak and reserved peak skipped for the current values); the thread suspects a leak in allocated memory"},
	{"habana89.log", 0, 1, 0, ColAllocated, 3.82e9, 3.82e9, false, false, false, "",
		"HF Trainer dict: 'memory_allocated (GB)': 3.82 with the unit from the key's brackets, total_memory_available as the capacity; 'epoch': 0.09 is not a whole step"},
	{"nanogpt618.log", 0, 2, 0, ColUsed, 2.47e9, 2.47e9, false, false, false, "",
		"\"occupied memory:2.47 GB\" (the user's label for memory_allocated, read as used) and \"reserved memory:16.69 GB\" as reserved: two lines, two samples"},
	{"tf80753.log", 0, 21, 0, ColUsed, 762.70e6, 999.05e6, false, true, true, "iteration",
		"\"start/end Current memory usage\" 762.70 → 999.05 MB over iterations 19–28 (each line takes the iteration of the \"Iteration N/500\" line before it; the first two have none)"},
	{"transformers13915.log", 0, 0, 0, 0, 0, 0, false, false, false, "",
		"the Trainer's end-of-stage memory metrics are deltas (train_mem_gpu_alloc_delta, …) and one before-init level: not a series; no samples"},
	{"deepspeed2302.log", 0, 4, 3, ColAllocated, 21474837, 21474837, false, false, false, "sample",
		"see_memory_usage MA and timer.py's MemAllocated (GiB: memory_allocated() / 1024**3), 0.02 GiB = ⌈21474836.48⌉ throughout; the lines number themselves in order rather than take the engine's step=2498 (two axes otherwise); 3 CPU Virtual Memory lines skipped"},
	{"tf80895.log", 0, 20, 0, ColUsed, 1259.84e6, 1428.00e6, false, true, true, "iteration",
		"\"Current memory usage\" 1259.84 → 1428.00 MB over iterations 71–80, the same leak as #80753 later in the run"},
	{"minkowski359.log", 0, 0, 0, 0, 0, 0, false, true, false, "",
		"\"Free GPU ram: 13722.5\" is free memory (total minus reserved), falling 13722.5 → 12800.5 after an OOM: a free figure is not a usage, so no samples rather than a series read backwards"},
	{"lasagne860.log", 0, 41, 0, ColUsed, 838512640, 842784768, false, true, false, "",
		"psutil memory_usage through sort | uniq -c: sorted by value, so it rises by construction; 799.67 → 803.74 MiB is 4.07 MiB, under the 32 MiB flat tolerance (R² 0.99, confidence 1.000, 78 KiB per line): a small rise the tolerance hides, reported, not a leak verdict"},
	{"allennlp2470.log", 0, 0, 2, 0, 0, 0, false, true, false, "",
		"AllenNLP logs only host memory (\"Peak CPU memory usage MB: 757.584\", the table's cpu_memory_MB row): both skipped as host, so no samples, not \"no leak\""},
	{"maskrcnn182.log", 0, 0, 0, 0, 0, 0, false, false, false, "",
		"two unlabelled figures per line (max_memory_allocated, max_memory_cached in MB): which is which is not in the text; reported as no samples, not judged"},
	{"torchtune2406.log", 0, 6, 0, ColAllocated, 55836409856, 62179622913, true, false, false, "step",
		"torchtune's \"peak_memory_alloc:52.001708984375\" (get_memory_stats: max_memory_allocated / 1024**3, GiB, no unit in the line; 52.001708984375 GiB = 55836409856 B, 57.90928649902344 GiB = ⌈62179622912.000003⌉) over steps 1–6, with peak_memory_reserved as reserved and peak_memory_active not read; the running peak rises ≈1004 MiB a step (a new largest batch on MPS), which Analyze reports but does not call a leak, as the PR thread does not"},
	{"deepspeed890.log", 0, 2, 2, ColAllocated, 150323856, 150323856, false, false, false, "sample",
		"see_memory_usage MA 0.14 GiB = ⌈150323855.36⌉ before and after get_layer_state_dict; the 2 CPU Virtual Memory lines skipped as host; 2 samples: not judged"},
	{"primerl1126.log", 0, 1, 0, ColAllocated, 5583457485, 5583457485, true, false, false, "step",
		"\"Peak Mem.: 5.2/23.7 GiB (22.1%)\": used/total with one unit after the pair, which applies to both: 5.2 GiB = ⌈5583457484.8⌉ of max_memory_allocated (a running peak), 23.7 GiB the capacity; 1 sample, not judged"},
	{"yolov5_2552.log", 0, 9, 0, ColReserved, 5.61e9, 5.61e9, false, false, false, "epoch",
		"YOLOv5 results rows without their header (\"0/89     5.61G   0.07745 …\"): epoch/last epoch, then GPU_mem, which train.py prints as torch.cuda.memory_reserved() / 1E9 with a G (decimal GB, reserved), then at least three numbers; epochs 0–8, 5.61 GB flat: no leak"},
	{"mmseg308.log", 0, 5, 0, ColAllocated, 19873 * gpumem.MiB, 19873 * gpumem.MiB, true, false, false, "iteration",
		"mmcv TextLoggerHook \"Iter [n/N] … memory: 19873\": the Iter is the step and memory: is torch.cuda.max_memory_allocated() in MiB (mmcv/runner/hooks/logger/text.py _get_max_memory), a running peak of allocated; flat, no leak; the thread's kill is host memory during evaluation, not in these lines"},
	{"cmid5.log", 0, 5, 0, ColAllocated, 22159 * gpumem.MiB, 22159 * gpumem.MiB, true, false, false, "iteration",
		"mmcv TextLoggerHook \"Iter [n/N] … memory: 22159\": the Iter is the step and memory: is torch.cuda.max_memory_allocated() in MiB (mmcv/runner/hooks/logger/text.py _get_max_memory), a running peak of allocated; flat, no leak"},
	{"mmseg18.log", 0, 5, 0, ColAllocated, 6840 * gpumem.MiB, 6840 * gpumem.MiB, true, false, false, "iteration",
		"mmcv TextLoggerHook \"Iter [n/N] … memory: 6840\": the Iter is the step and memory: is torch.cuda.max_memory_allocated() in MiB (mmcv/runner/hooks/logger/text.py _get_max_memory), a running peak of allocated; flat, no leak"},
	{"d2go524.log", 0, 5, 0, ColAllocated, 433 * gpumem.MiB, 433 * gpumem.MiB, true, false, false, "iteration",
		"detectron2 max_mem 433M flat over iterations 19–99: a running peak, flat"},
	{"d2go19.log", 0, 5, 0, ColAllocated, 824 * gpumem.MiB, 824 * gpumem.MiB, true, false, false, "iteration",
		"detectron2 max_mem 824M flat over iterations 19–99 (the \"Starting training\" line gives none): a running peak, flat"},
	{"detectron2_195.log", 0, 7, 0, ColAllocated, 3961 * gpumem.MiB, 3961 * gpumem.MiB, true, false, false, "iteration",
		"detectron2 max_mem 3961M flat over iterations 1259–1379: a running peak, flat"},
	{"litehrnet32.log", 0, 3, 0, ColAllocated, 400 * gpumem.MiB, 400 * gpumem.MiB, true, false, false, "iteration",
		"mmpose (mmcv) \"Epoch [1][2350/18726] … memory: 400\": the epoch-based line is read (step 2350–2450, max_memory_allocated as a running peak), unlike mmseg's \"Iter [n/N]\" lines above; 3 samples: not judged"},
}

// notOverTime are the labelled logs whose series is not in time order.
var notOverTime = map[string]bool{"lasagne860.log": true}

// TestReadSamplesFrameworkLogs reads every labelled framework log: the
// series and its figures, the host lines skipped, and the verdict.
func TestReadSamplesFrameworkLogs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/logs/frameworks/*.log")
	require.NoError(t, err)
	labelled := map[string]bool{}
	for _, tc := range frameworkLogs {
		labelled[tc.file] = true
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile("testdata/logs/frameworks/" + tc.file)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(string(data), "# source: https://github.com/"), "first line names the source")
			got, rep, err := ReadSamples(strings.NewReader(string(data)), &ReadOptions{Unit: tc.unit})
			assert.Equal(t, tc.host, rep.ByReason[SkipHost], "host lines")
			if tc.samples == 0 {
				require.ErrorIs(t, err, ErrNoSamples, tc.why)
				return
			}
			require.NoError(t, err)
			assert.Len(t, got, tc.samples)
			assert.Equal(t, tc.stepUnit, rep.StepUnit)
			var series []Sample
			for _, s := range got {
				if s.Has&tc.column != 0 {
					series = append(series, s)
				}
			}
			require.NotEmpty(t, series)
			assert.Equal(t, tc.first, value(series[0], tc.column), "first %v", series[0])
			assert.Equal(t, tc.last, value(series[len(series)-1], tc.column), "last %v", series[len(series)-1])
			assert.Equal(t, tc.peak, series[0].Peak, "running peak")
			r, err := Analyze(got, &Options{Column: tc.column, StepUnit: rep.StepUnit})
			require.NoError(t, err)
			assert.Equal(t, tc.leak, r.Leak, "%s: %s (%s)", tc.file, r.Reason, tc.why)
			assert.Equal(t, r.Samples < 2, r.Shape == ShapeInsufficient, "not enough data only below 2 samples: %s", r.Reason)
			// A labelled leak with 5 or more samples is found, except in a
			// running peak (never a leak: the thread saw growth elsewhere) and
			// in a series that is not one over time (lasagne860's sorted
			// histogram).
			if tc.threadLeak && len(series) >= 5 && !tc.peak && !notOverTime[tc.file] {
				assert.True(t, r.Leak, "a labelled leak with %d samples is found", len(series))
			}
		})
	}
	for _, f := range files {
		assert.True(t, labelled[filepath.Base(f)], "%s has no label in frameworkLogs", f)
	}
}
