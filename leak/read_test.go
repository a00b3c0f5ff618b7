package leak

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadSamplesSkips: a malformed figure, an unknown line and an
// over-long line are skipped and counted with their line numbers, where
// ParseSamples rejects the whole log.
func TestReadSamplesSkips(t *testing.T) {
	t.Parallel()
	log := "starting run\n" +
		"Step 1: Memory=1.0GB\n" +
		"Step 2: Memory=5Gb\n" + // bits: malformed
		"\n# a comment\n" +
		"Step 3: Memory=1.2GB\n" +
		strings.Repeat("x", MaxLineBytes+5) + "\n" +
		"Step 4: Memory=1.3GB\n"
	_, err := ParseSamples(strings.NewReader(log))
	require.Error(t, err, "ParseSamples stays strict")

	got, rep, err := ReadSamples(strings.NewReader(log), nil)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []int64{1, 3, 4}, []int64{got[0].Step, got[1].Step, got[2].Step})
	assert.Equal(t, gpumem.Bytes(1_300_000_000), got[2].Used)
	assert.Equal(t, 8, rep.Lines)
	assert.Equal(t, 3, rep.Read)
	assert.Equal(t, 3, rep.Skipped) // "starting run", 5Gb, the long line; not the blank line nor the comment
	assert.Equal(t, [numSkipReasons]int{1, 1, 1}, rep.ByReason)
	require.Len(t, rep.Examples, 3)
	assert.Equal(t, SkippedLine{Line: 1, Reason: SkipNoMemory, Text: "starting run"}, rep.Examples[0])
	assert.Equal(t, 3, rep.Examples[1].Line)
	assert.Equal(t, SkipMalformed, rep.Examples[1].Reason)
	assert.Contains(t, rep.Examples[1].Detail, "bits")
	assert.Equal(t, 7, rep.Examples[2].Line)
	assert.Equal(t, SkipTooLong, rep.Examples[2].Reason)
	assert.LessOrEqual(t, len(rep.Examples[2].Text), MaxExampleBytes+len("…"))
	assert.Equal(t, "step", rep.StepUnit)
	assert.Empty(t, rep.Assumed)

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"skipped_by_reason":{"host_memory":0,"malformed":1,"no_memory_figure":1,"too_long":1}`)
	assert.Contains(t, string(b), `"line":3,"reason":"malformed"`)
}

// TestReadSamplesExamplesPerReason keeps MaxExamples lines of each reason.
func TestReadSamplesExamplesPerReason(t *testing.T) {
	t.Parallel()
	log := strings.Repeat("loss 2.3\n", 10) + "step 1 mem 1GiB\n" + strings.Repeat("step 2 mem 3Gb\n", 5)
	_, rep, err := ReadSamples(strings.NewReader(log), nil)
	require.NoError(t, err)
	assert.Equal(t, [numSkipReasons]int{10, 5, 0}, rep.ByReason)
	require.Len(t, rep.Examples, 2*MaxExamples)
	assert.Equal(t, 12, rep.Examples[MaxExamples].Line) // the first malformed line
}

// TestReadSamplesNoSamples: input without a memory figure is an error
// wrapping ErrNoSamples that names the lines, never an empty series.
func TestReadSamplesNoSamples(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "\n\n", "epoch 1 step 1 loss 6.2\nmbiu 461.85 MB\n", "Step 1000: CUDA OOM\n", "step,loss\n1,2.0\n"} {
		got, rep, err := ReadSamples(strings.NewReader(in), nil)
		require.ErrorIs(t, err, ErrNoSamples, "%q", in)
		assert.Contains(t, err.Error(), "no memory samples found")
		if rep.Skipped > 0 {
			assert.Contains(t, err.Error(), "line 1 no_memory_figure", "%q", in)
		}
		for _, s := range got {
			assert.Zero(t, s.Has&ColMemory, "%q: %v", in, s)
		}
	}
	_, _, err := ReadSamples(nil, nil)
	require.ErrorIs(t, err, gpumem.ErrInvalid)
	_, _, err = ReadSamples(strings.NewReader("1\n"), &ReadOptions{Unit: -1})
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "ReadOptions.Unit", fe.Field)
}

// TestReadSamplesCSVHeaders: CSV files with their own headers. Expected
// bytes by hand: 1500.5 MB = 1500.5·10⁶ = 1,500,500,000; 3.35 GB =
// 3,350,000,000; 3.5G (binary, as tools print it) = 3.5·2³⁰ =
// 3,758,096,384; 1024 without unit, assumed MiB = 1,073,741,824; 2.5 GiB =
// 2,684,354,560.
func TestReadSamplesCSVHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		opts     *ReadOptions
		n        int
		step     int64 // of the last sample, -1 when none
		col      Column
		last     gpumem.Bytes
		stepUnit string
		assumed  bool
		time     bool
		skipped  int
	}{
		{"memory_used, no unit", "step,loss,memory_used\n1,2.3,1000\n2,2.2,1024\n", nil, 2, 2, ColUsed, 1_073_741_824, "step", true, false, 0},
		{"memory_used with --unit", "step,loss,memory_used\n1,2.3,1000\n2,2.2,1024\n", &ReadOptions{Unit: gpumem.MB}, 2, 2, ColUsed, 1_024_000_000, "step", false, false, 0},
		{"quoted, mem_used_mb", `"iteration","mem_used_mb","lr"` + "\n" + `"10","1400.25","0.1"` + "\n" + `"20","1500.5","0.1"` + "\n", nil, 2, 20, ColUsed, 1_500_500_000, "iteration", false, false, 0},
		{"semicolons, (GB)", "epoch;gpu_mem (GB);loss\n1;3.30;0.5\n2;3.35;0.4\n", nil, 2, 2, ColUsed, 3_350_000_000, "epoch", false, false, 0},
		{"tabs, value units", "Epoch\tGPU_mem\tbox_loss\n1/100\t3.4G\t0.1\n2/100\t3.5G\t0.1\n", nil, 2, 2, ColUsed, 3_758_096_384, "epoch", false, false, 0},
		{"quoted field with a comma", `"step","note","vram"` + "\n" + `1,"warm, up",2 GiB` + "\n" + `2,"a ""b""",2.5 GiB` + "\n", nil, 2, 2, ColUsed, 2_684_354_560, "step", false, false, 0},
		{"allocated and reserved, bytes", "timestamp,memory_allocated,memory_reserved,max_memory_allocated\n2024-01-15 10:00:00,1073741824,2147483648,1073741824\n2024-01-15 10:00:10,1073741825,2147483648,1073741825\n", nil, 2, -1, ColAllocated, 1_073_741_825, "", true, true, 0},
		{"time in seconds, [MiB]", "time,memory.used [MiB]\n0,100\n10,200\n", nil, 2, -1, ColUsed, 200 * gpumem.MiB, "", false, true, 0},
		{"global_step wins over epoch", "epoch,global_step,gpu_memory_MiB\n0,100,10\n0,200,11\n", nil, 2, 200, ColUsed, 11 * gpumem.MiB, "step", false, false, 0},
		{"empty cells are skipped", "step,val_loss,memory_used_mb\n1,,10\n2,0.5,\n3,,12\n", nil, 2, 3, ColUsed, 12_000_000, "step", false, false, 1},
		{"bare numbers", "100\n200\n", &ReadOptions{Unit: gpumem.GiB}, 2, -1, ColUsed, 200 * gpumem.GiB, "", false, false, 0},
		{"bare numbers assumed", "100\n200\n", nil, 2, -1, ColUsed, 200 * gpumem.MiB, "", true, false, 0},
		{"step value", "1 100 MiB\n2 110 MiB\n", nil, 2, 2, ColUsed, 110 * gpumem.MiB, "step", false, false, 0},
		{"step,value", "1,2.5GiB\n2,2.5GiB\n", nil, 2, 2, ColUsed, 2_684_354_560, "step", false, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, rep, err := ReadSamples(strings.NewReader(tc.in), tc.opts)
			require.NoError(t, err)
			require.Len(t, got, tc.n, "%v", got)
			last := got[len(got)-1]
			require.NotZero(t, last.Has&tc.col, "%v", last)
			assert.Equal(t, tc.last, value(last, tc.col), "%v", last)
			if tc.step >= 0 {
				assert.Equal(t, tc.step, last.Step)
			} else {
				assert.Zero(t, last.Has&ColStep, "%v", last)
			}
			assert.Equal(t, tc.time, last.Has&ColTime != 0, "%v", last)
			assert.Equal(t, tc.stepUnit, rep.StepUnit)
			assert.Equal(t, tc.assumed, rep.Assumed != "", rep.Assumed)
			assert.Equal(t, tc.skipped, rep.Skipped, "%+v", rep.Examples)
		})
	}
}

// TestReadSamplesCSVPeakOnly: a table with only a running peak is marked
// Peak, so its growth is not a leak.
func TestReadSamplesCSVPeakOnly(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("iter,max_memory_allocated_mb\n")
	for i := 1; i <= 30; i++ {
		b.WriteString(strconv.Itoa(i) + "," + strconv.Itoa(1000+10*i) + "\n")
	}
	got, _, err := ReadSamples(strings.NewReader(b.String()), nil)
	require.NoError(t, err)
	require.True(t, got[0].Peak)
	r, err := Analyze(got, nil)
	require.NoError(t, err)
	assert.False(t, r.Leak)
	assert.True(t, r.Peak)
}

// TestReadSamplesCSVBadRow: a malformed cell skips its row, not the table.
func TestReadSamplesCSVBadRow(t *testing.T) {
	t.Parallel()
	in := "timestamp, memory.used [MiB], memory.total [MiB]\n" +
		"2024/01/15 10:00:00.123, 1234 MiB, 24564 MiB\n" +
		"2024/01/15 10:00:01.123, [N/A], 24564 MiB\n" +
		"2024/01/15 10:00:02.123, 1240 MiB, 24564 MiB\n"
	got, rep, err := ReadSamples(strings.NewReader(in), nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, 4, got[1].Line)
	assert.Equal(t, [numSkipReasons]int{0, 1, 0}, rep.ByReason)
	assert.Equal(t, 3, rep.Examples[0].Line)
}

// TestReadSamplesComment: a '#' comment quoting memory figures gives no
// sample, neither read nor skipped, and does not end a CSV table.
func TestReadSamplesComment(t *testing.T) {
	t.Parallel()
	in := "# source: thread (step 5 memory: 3GiB, 3210MiB / 8192MiB)\n  # step 6 allocated: 4GiB\nstep 7 memory: 1GiB\n"
	got, rep, err := ReadSamples(strings.NewReader(in), nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "line 3: step=7 used=1.00 GiB", got[0].String())
	assert.Equal(t, 0, rep.Skipped)
	strictGot, err := ParseSamples(strings.NewReader("# memory: 3GiB\n"))
	require.NoError(t, err)
	assert.Empty(t, strictGot)
	got, _, err = ReadSamples(strings.NewReader("step,mem_used_mb\n1,100\n# note: 5GiB here\n2,200\n"), nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, int64(2), got[1].Step)
}

// TestReadSamplesTimeOfDay: CSV timestamps without a date are seconds
// since the first row, a day added when the clock passes midnight.
func TestReadSamplesTimeOfDay(t *testing.T) {
	t.Parallel()
	in := "Timestamp, GPU Memory Used (MiB)\n23:59:00.000, 100\n23:59:30.500, 101\n00:00:30.000, 102\n00:01:00, 103\n"
	got, _, err := ReadSamples(strings.NewReader(in), nil)
	require.NoError(t, err)
	require.Len(t, got, 4)
	var secs []float64
	for _, s := range got {
		secs = append(secs, s.Time.Sub(time.Unix(0, 0)).Seconds())
	}
	// 23:59:00 → 0; 23:59:30.5 → 30.5; 00:00:30 next day → 90; 00:01:00 → 120.
	assert.Equal(t, []float64{0, 30.5, 90, 120}, secs)
	_, rep, err := ReadSamples(strings.NewReader("Timestamp, GPU Memory Used (MiB)\n25:61:00, 100\n3:27:19x, 100\n"), nil)
	require.ErrorIs(t, err, ErrNoSamples)
	assert.Equal(t, 2, rep.ByReason[SkipMalformed])
}

// TestAnalyzeStepUnit: the axis unit reaches the reason, the forecast and
// the JSON; an nvidia-smi CSV with timestamps is in seconds.
func TestAnalyzeStepUnit(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("epoch,gpu_mem_gb\n")
	for e := 1; e <= 12; e++ {
		b.WriteString(strconv.Itoa(e) + "," + strconv.Itoa(10+e) + "\n") // 1 GB per epoch
	}
	got, rep, err := ReadSamples(strings.NewReader(b.String()), nil)
	require.NoError(t, err)
	require.Equal(t, "epoch", rep.StepUnit)
	r, err := Analyze(got, &Options{Capacity: 40 * gpumem.GB, StepUnit: rep.StepUnit, WarmUp: -1})
	require.NoError(t, err)
	assert.Equal(t, "epoch", r.Unit())
	assert.True(t, r.Leak)
	// 11 GB at epoch 1, +1 GB per epoch: 40 GB at epoch 30.
	require.True(t, r.OOM.OK)
	assert.InDelta(t, 30, r.OOM.Step, 0.01)
	assert.Contains(t, r.Reason, "953.67 MiB per epoch") // 1 GB
	assert.Contains(t, r.Reason, "OOM at epoch 30")
	j, err := json.Marshal(r)
	require.NoError(t, err)
	assert.Contains(t, string(j), `"axis_unit":"epoch"`)

	_, err = Analyze(got, &Options{StepUnit: "fortnight"})
	var fe *gpumem.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "Options.StepUnit", fe.Field)

	b.Reset()
	b.WriteString("timestamp, memory.used [MiB], memory.total [MiB]\n")
	t0 := time.Date(2024, 1, 15, 10, 0, 0, 0, time.UTC)
	for i := range 10 {
		b.WriteString(t0.Add(time.Duration(i)*time.Minute).Format(smiTime) + ", " + strconv.Itoa(1000+100*i) + " MiB, 24564 MiB\n")
	}
	got, rep, err = ReadSamples(strings.NewReader(b.String()), nil)
	require.NoError(t, err)
	assert.Empty(t, rep.StepUnit)
	r, err = Analyze(got, &Options{StepUnit: rep.StepUnit})
	require.NoError(t, err)
	assert.Equal(t, AxisTime, r.Axis)
	assert.Equal(t, "second", r.Unit())
	require.True(t, r.OOM.OK)
	// 100 MiB a minute from 1000 MiB: 24564 MiB after 235.64 minutes.
	assert.InDelta(t, 235.64*60, r.OOM.Step, 1)
	assert.Contains(t, r.Reason, "s after the first sample")
	assert.NotContains(t, r.Reason, "step")
}

// realLogs labels the logs copied from public issues in
// testdata/logs/real (source in each file's first line): what the thread
// reports, what is read (samples, shape, step unit, confidence of the
// reading, runs) and Analyze's verdict on the labelled series. A series
// of 2–4 samples is described (Report.Short), never judged.
var realLogs = []struct {
	file       string
	capacity   gpumem.Bytes // ReadOptions.Capacity (--capacity), 0: none
	samples    int          // 0: ErrNoSamples
	column     Column       // the series the thread is about
	threadLeak bool         // what the thread reports
	leak       bool         // Analyze's verdict on that series
	shape      Shape
	stepUnit   string
	conf       Confidence
	runs       int
	why        string
}{
	{"pytorch115255.log", 0, 13, ColAllocated, true, true, ShapeLinear, "", ConfidenceHigh, 1, "the thread's allocated grows 20.4 → 21.0 MB over 13 iterations, 51 KiB a sample (R² 0.97): allocated memory counts live blocks exactly (512-byte rounding), so its flat tolerance is 2% of the level, not the 32 MiB of reserved memory's segment rounding, and the leak is found; reserved steps 26 → 28 MB"},
	{"nvdiffrast23.log", 0, 0, 0, true, false, 0, "", ConfidenceHigh, 0, "torch.cuda.*(i) calls one per line and \"memory (MB) N\": not a format read; reported as no samples, not judged"},
	{"tf14171.log", 0, 0, 0, true, false, 0, "", ConfidenceHigh, 0, "TensorFlow's mbiu (MaxBytesInUse) is not a name read; reported as no samples, not judged"},
	{"triton2300.log", 0, 5, ColUsed, true, false, ShapeFlat, "", ConfidenceHigh, 1, "kubectl top's own table (MEMORY(bytes), cells 4544Mi) read between shell prompts; host RAM 4544 → 4595 MiB over 5 readings (1.1%) is under the 2% flat tolerance of used memory: flat over this window (the thread's leak shows over days)"},
	{"pytorch1509.log", 0, 12, ColUsed, false, false, ShapeSaturating, "iteration", ConfidenceLow, 2, "the prose series \"2934M -- 4413M -- … -- 4537M at the first six iterations\" (cudnn off) and \"1686M -- 1791M -- …\" (cudnn on): iterations 1–6 twice, the second a new run; run 1 rises then levels off, a saturating warm-up, as the maintainers say (the caching allocator filling)"},
	{"pytorch4890.log", 0, 3, ColUsed, true, false, ShapeRising, "", ConfidenceLow, 1, "\"Before model run: 1098\" → 2173 → 2173 (memory_allocated in MB by the script): a repeated label that names no memory, read as a bare column as a last resort, MiB assumed: rising 1098 → 2173 MiB over 3 samples, short, no verdict, low confidence"},
	{"tf38581.log", 0, 0, ColUsed, true, false, 0, "", ConfidenceHigh, 0, "host memory (KiB) as one Python list, 1767284 → 19867548 over 25 readings every 10 epochs: one line of bare numbers is not a series; no samples, not judged"},
	{"gpustat130.log", 0, 4, ColUsed, false, false, ShapeFlat, "", ConfidenceHigh, 1, "gpustat's per-GPU \"103 / 16384 MB\" (used / total, the unit after the total applies to both; MB decimal as ParseBytes reads it) on four GPUs, one reading: four samples of 103 MB used, 16384 MB capacity, no step; short and flat"},
	{"detectron2_163.log", 0, 4, ColUsed, true, false, ShapeRising, "iteration", ConfidenceMedium, 1, "the prose narrative \"At iter 99 … 3200mb …, at iter 219 … 7000mb, at iter 5199 it is 10gb, at iter 15000 … out of memory\": 3 figures at iterations 99, 219, 5199 and an OOM report at 15000: rising, short, no verdict"},
	{"ultralytics730.log", 0, 2, ColUsed, true, false, ShapeRising, "epoch", ConfidenceMedium, 1, "the prose \"around 2.8 gigabytes of VRAM at epoch 2-5 … 3.92 gigabytes by epoch 58\": 2.8 GB at epoch 2 (the range's start), 3.92 GB at epoch 58"},
	{"yolov7_735.log", 0, 2, ColUsed, true, false, ShapeRising, "", ConfidenceLow, 1, "\"At the end of my first epoch, GPU memory usage was **11.1G**\" and \"after that … **15.1G**\": markdown bold dropped; the second figure has no epoch, so both are read in order"},
	{"darknet2937.log", 0, 4, ColUsed, true, false, ShapeRising, "iteration", ConfidenceLow, 2, "host memory in prose the text does not call the host's (8GB → over 16GB by the 10,000th iteration; 4GB → 8GB for yolov3-tiny): two runs (start, iteration 10000), each short; low confidence says the device is not stated"},
	{"wasmedge61.log", 0, 1, ColUsed, true, false, ShapeInsufficient, "", ConfidenceHigh, 1, "one llama.cpp load log: \"VRAM used: 4095.05 MB\" is read as one used sample (4,095,050,000 B); \"total VRAM used: 4313.06 MB (model …, context …)\" and the kv/compute/scratch buffer sizes are skipped (a log's key: value is no prose); the thread's growth is across inferences, not in this excerpt: 1 sample, not enough data"},
	{"ultravox165.log", 0, 2, ColUsed, true, false, ShapeRising, "", ConfidenceLow, 1, "prose \"around 19+ GB … escalated to over 30+ GB\" (the \"+\" after the figure dropped; GPU or host not said, no positions): 2 samples in order, rising, low confidence"},
	{"whosatmyfeeder314.log", 0, 0, ColUsed, true, false, 0, "", ConfidenceHigh, 0, "container resident (host) memory in a markdown table, the later reading (4.815 GiB) before the earlier (633 MiB) and the figures in bold: no samples, not judged"},
	{"csnakes745.log", 0, 9, ColUsed, false, false, ShapeFlat, "step", ConfidenceHigh, 1, "a per-iteration process table \"79 | Working: 622.36 MB (+0.00 MB) | Private: …\": the row number is the step and the working set the series (the bracketed deltas and the other columns are not read); 622.36 → 622.51 MB over 9 rows: flat"},
	{"invokeai444.log", 0, 3, ColUsed, true, false, ShapeRising, "", ConfidenceHigh, 1, "\"0.1GB/24GB VRAM used\" → \"4.9GB/24GB\" → \"7.9GB/24GB\" (idle, model loaded, after generations: used/total, 24 GB the capacity): 3 samples, rising, short, no verdict; the leak the thread reports (img2img climbing further) is after these"},
	{"vaapi40.log", 0, 1, ColUsed, true, false, ShapeInsufficient, "", ConfidenceHigh, 1, "one nvidia-smi table, \"3210MiB /  8192MiB\" in the Memory-Usage cell after the video was closed: one sample (3210 MiB used of 8192 MiB), not enough data; the \"44W / 230W\" power cell is not a size"},
	{"lightning12703.log", 24 * gpumem.GiB, 2, ColUsed, true, false, ShapeRising, "step", ConfidenceLow, 1, "percentages in prose (\"At the beginning … 22%\", \"after 900 steps … around 68%\") read against the capacity given (24 GiB here, as --capacity would give it): 5.28 → 16.32 GiB between step 0 and step 900; without a capacity the line is skipped as malformed, saying so (TestReadSamplesPercentNeedsCapacity)"},
	{"yolov7_367.log", 0, 4, ColUsed, true, false, ShapeRising, "epoch", ConfidenceLow, 2, "\"第一个epoch占用2.59，第二个epoch突增到了7G\" twice (batch size 1, then 2): 第N个epoch is epoch N, 2.59 takes the G of 7G in its sentence (low confidence), the repeat a second run"},
	{"detectron2_887.log", 0, 0, ColUsed, true, false, 0, "", ConfidenceHigh, 0, "host RAM in prose (\"cpu memory … ~15GB of RAM\" until \"all available memory 64GB\"): the sentence names the host, so no samples, not judged"},
	{"bcmstat15.log", 0, 0, ColUsed, false, false, 0, "", ConfidenceHigh, 0, "bcmstat's Raspberry Pi table: free host memory (MemFreeMB 856–857, a free figure, not usage) and GPU heap deltas (-104, +708, …): no samples, not judged; the thread asks how to read it and reports no leak figure"},
	{"ogx1474.log", 0, 2, ColUsed, true, false, ShapeRising, "", ConfidenceLow, 1, "prose \"When I started … it takes 17gb of GPU memory. One hour usage takes it to 28GB\": the start, then a time in words (not a step): 2 samples in order, rising"},
	{"nanochat839.log", 0, 0, ColUsed, false, false, 0, "", ConfidenceHigh, 0, "two different measures of one run (peak allocated 1499.78 MiB vs the Metal driver's 11322.84 MiB), not a series and not prose: no samples, which is right; reading them as two samples would make a false rise"},
	{"mambavision55.log", 0, 0, ColUsed, true, false, 0, "", ConfidenceHigh, 0, "a rate (\"increases by approximately 254MB with each epoch\") and its extrapolation (\"If this trend continues … will reach … 76.2GB\"), no readings: a rate and a hypothesis are not samples"},
	{"dingo60.log", 0, 0, ColUsed, true, false, 0, "", ConfidenceHigh, 0, "a rate by eye from nvidia-smi -l 1 (\"~ 100 MB / epoch\"), no readings: a rate is not a sample"},
	{"ipexllm9675.log", 0, 3, ColUsed, false, false, ShapeFlat, "", ConfidenceHigh, 1, "xpu-smi dump CSV (\"GPU Memory Used (MiB)\") whose timestamps are times of day without a date (\"03:27:19.000\"): read as seconds since the first row (0, 60, 120 s), 3 flat readings of 12063.71 MiB: short and flat; the thread's OOM is host memory"},
	{"qwenvl82.log", 0, 2, ColUsed, true, false, ShapeRising, "step", ConfidenceMedium, 1, "prose \"the gpu memory increase from 10k MB to 20k MB after nearly 100 steps\": \"from A to B after N steps\" puts A at the start and B at step 100; k-multiplied MB"},
	{"packnet47.log", 0, 2, ColUsed, true, false, ShapeRising, "epoch", ConfidenceLow, 1, "memory in prose (\"from 21G to 38G in one epoch\"; the maintainer confirms the leak, an un-detached loss kept per step): the start and epoch 1; the text does not say GPU or host: low confidence"},
}

// excerptBeforeLeak are the labelled logs whose excerpt does not reach
// the growth the thread reports.
var excerptBeforeLeak = map[string]bool{"triton2300.log": true}

// TestReadSamplesRealLogs reads every labelled real log: the labelled
// series' verdict, or ErrNoSamples, never a silent "no leak"; every
// labelled leak with 5 or more samples is found, no flat series is a
// leak, and "not enough data" is only said below 2 samples.
func TestReadSamplesRealLogs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/logs/real/*.log")
	require.NoError(t, err)
	labelled := map[string]bool{}
	for _, tc := range realLogs {
		labelled[tc.file] = true
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile("testdata/logs/real/" + tc.file)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(string(data), "# source: https://github.com/"), "first line names the source")
			got, rep, err := ReadSamples(strings.NewReader(string(data)), &ReadOptions{Capacity: tc.capacity})
			if tc.samples == 0 {
				require.ErrorIs(t, err, ErrNoSamples, tc.why)
				return
			}
			require.NoError(t, err)
			assert.Len(t, got, tc.samples)
			assert.Equal(t, tc.stepUnit, rep.StepUnit)
			assert.Equal(t, tc.conf, rep.Confidence, "%v", rep.ConfidenceWhy)
			r, err := Analyze(got, &Options{Column: tc.column, StepUnit: rep.StepUnit})
			require.NoError(t, err)
			assert.Equal(t, tc.leak, r.Leak, "%s: %s (%s)", tc.file, r.Reason, tc.why)
			assert.Equal(t, tc.shape, r.Shape, "%s: %s", tc.file, r.Reason)
			assert.Equal(t, tc.runs, r.Runs)
			// A labelled leak with 5 or more samples is found, unless the
			// excerpt is outside the leak's window (triton2300: 5
			// readings over minutes of a leak that shows over days, 1.1%
			// within the 2% tolerance of used memory).
			if tc.threadLeak && r.Samples >= 5 && !excerptBeforeLeak[tc.file] {
				assert.True(t, r.Leak, "a labelled leak with %d samples is found", r.Samples)
			}
			assert.Equal(t, r.Samples < 2, r.Shape == ShapeInsufficient, "not enough data only below 2 samples")
			assert.Equal(t, r.Samples >= 2 && r.Samples < 5, r.Short)
		})
	}
	for _, f := range files {
		assert.True(t, labelled[filepath.Base(f)], "%s has no label in realLogs", f)
	}
}

// TestReadSamplesPercentNeedsCapacity: a percentage without a capacity
// gives no bytes; the line is skipped as malformed, saying what is
// missing, rather than read as some size.
func TestReadSamplesPercentNeedsCapacity(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/logs/real/lightning12703.log")
	require.NoError(t, err)
	_, rep, err := ReadSamples(strings.NewReader(string(data)), nil)
	require.ErrorIs(t, err, ErrNoSamples)
	assert.Contains(t, err.Error(), "--capacity")
	assert.Equal(t, 1, rep.ByReason[SkipMalformed])
	got, rep, err := ReadSamples(strings.NewReader(string(data)), &ReadOptions{Capacity: 24 * gpumem.GiB})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, gpumem.Bytes(math.Ceil(22.0/100*float64(24*gpumem.GiB))), got[0].Used)
	assert.Equal(t, gpumem.Bytes(math.Ceil(68.0/100*float64(24*gpumem.GiB))), got[1].Used)
	assert.Equal(t, []int64{0, 900}, []int64{got[0].Step, got[1].Step})
	assert.Contains(t, rep.ConfidenceWhy, whyPercent)
	// A capacity the log states serves as well.
	got, _, err = ReadSamples(strings.NewReader("GPU 0: 1GB/24GB\n"+string(data)), nil)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, gpumem.Bytes(math.Ceil(68.0/100*24e9)), got[2].Used)
}

// FuzzReadSamples: ReadSamples never panics, returns either samples with
// a memory figure or an error wrapping ErrNoSamples (or, for a PyTorch
// memory snapshot that does not read, a FieldError naming its place),
// and its counts add up.
func FuzzReadSamples(f *testing.F) {
	f.Add("step,loss,memory_used\n1,2.3,1000\n2,2.2,1024\n")
	f.Add(`"iteration","mem_used_mb","lr"` + "\n" + `"10","1400.25","0.1"` + "\n")
	f.Add("epoch;gpu_mem (GB);loss\n1;3.30;0.5\n")
	f.Add("Epoch\tGPU_mem\n1/100\t3.4G\n")
	f.Add("100\n200 MiB\n1 2GiB\n1,2.5\n")
	f.Add("time,memory.used [MiB]\n0,100\n1e400,200\n-5,1\n")
	f.Add("step,mem\n99999999999999999999,1\n1,99999999999999999999\n1.5,1\n")
	f.Add("Step 1: Memory=1GB\nStep 2: Memory=5Gb\n")
	// Framework lines and W&B exports.
	f.Add("[Rank 0] (after 20 iterations) memory (MB) | allocated: 3270.16 | max allocated: 5670.39 | reserved: 6406.00 | max reserved: 6406.00\n")
	f.Add("MA 4.96 GB         Max_MA 5.09 GB         CA 6.39 GB         Max_CA 6 GB\nCPU Virtual Memory:  used = 50.5 GB, percent = 40.2%\n")
	f.Add("{'loss': 0.6, 'epoch': 0.09, 'memory_allocated (GB)': 3.82, 'total_memory_available (GB)': 29.85}\n")
	f.Add("epoch 1/50 - it 6/100\nMemory info of GPU /physical_device:GPU:0: current: 0.18, peak: 2.55\n")
	f.Add("alloc cur 427.8MB alloc peak 427.8MB reserved cur 446.0MB reserved peak 446.0MB\n")
	f.Add("_step,_runtime,system.gpu.0.memoryAllocatedBytes,system.gpu.1.memoryAllocated\n0,1.5,1073741824,50\n1,,,\n2,3,1e30,-1\n")
	f.Add("'k (GB)': 1\n'k [MiB]'= 2\n'memory (x)': 3\n(\n'a (GB\n")
	f.Add("{'gpu_id: 0/memory.used (MB)': 1024.0, 'gpu_id: 1/memory.used (MB)': 1.}\nepoch,gpu_id: 0/memory.used (MB),step\n0,1e300,1\n0,5,2\n")
	// The readers of prose, YOLO rows, labelled numbers and snapshots.
	f.Add("GPU memory keeps growing.\nAt iter 99 it uses 3200mb, at iter 219 it jumps to 7000mb; at iter 15000 out of memory\n")
	f.Add("      0/89     5.61G   0.07745    0.0277   0.01785\n  1/89 1e999G 1 2 3\n")
	f.Add("Before model run: 1098\nBefore model run: 2173\nLoss: 0.5\nLoss: 0.4\n")
	f.Add("79 | Working:   622.36 MB (   +0.00 MB) | Private:  1392.77 MB\n")
	f.Add(`{"segments": [{"device": 0, "total_size": 2097152, "blocks": [{"size": 512, "state": "active_allocated"}]}], "device_traces": [[{"action": "alloc", "addr": 1, "size": 512, "frames": [{"filename": "a.py", "line": 1, "name": "f"}]}]]}`)
	logs, _ := filepath.Glob("testdata/logs/*/*.log")
	for _, name := range logs {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(string(data))
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, rep, err := ReadSamples(strings.NewReader(s), nil)
		var fe *gpumem.FieldError
		if err != nil && !errors.Is(err, ErrNoSamples) && !(errors.As(err, &fe) && rep.Lines > 0 && looksLikeSnapshot([]byte(s))) {
			t.Fatalf("error %v is neither ErrNoSamples nor a snapshot's field error", err)
		}
		if rep.Read+rep.Skipped > rep.Lines || rep.Samples != len(got) {
			t.Fatalf("counts do not add up: %+v, %d samples", rep, len(got))
		}
		sum := 0
		for _, c := range rep.ByReason {
			sum += c
		}
		if sum != rep.Skipped || len(rep.Examples) > int(numSkipReasons)*MaxExamples {
			t.Fatalf("skips do not add up: %+v", rep)
		}
		for _, x := range got {
			if x.Allocated < 0 || x.Reserved < 0 || x.Used < 0 || x.Capacity < 0 {
				t.Fatalf("negative size in %v", x)
			}
		}
		if err != nil {
			return
		}
		r, err := Analyze(got, &Options{Capacity: 24 * gpumem.GiB, StepUnit: rep.StepUnit})
		if err != nil {
			t.Fatalf("Analyze: %v", err)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("json.Marshal(Report): %v", err)
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatalf("json.Marshal(ReadReport): %v", err)
		}
	})
}
