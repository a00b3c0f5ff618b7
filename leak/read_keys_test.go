package leak

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestReadSamplesFreeFormKeys checks the free-form rules added for
// framework logs, one line each.
func TestReadSamplesFreeFormKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     string // Sample.String() of the only sample
	}{
		// The current value wins over a running peak of the same column,
		// whichever comes first on the line.
		{"peak first", "step 3 max_memory_allocated: 2GiB memory_allocated: 1GiB", "line 1: step=3 allocated=1.00 GiB"},
		{"peak after", "step 3 allocated: 1GiB max allocated: 2GiB", "line 1: step=3 allocated=1.00 GiB"},
		{"only peaks", "step 3 max allocated: 2GiB max reserved: 3GiB", "line 1: step=3 allocated=2.00 GiB reserved=3.00 GiB peak"},
		// 1 GiB current, 3 GiB peak reserved: not all peaks, not Peak.
		{"mixed", "step 3 allocated: 1GiB max reserved: 3GiB", "line 1: step=3 allocated=1.00 GiB reserved=3.00 GiB"},
		{"megatron", "[Rank 0] (after 20 iterations) memory (MB) | allocated: 1024 | max allocated: 2048 | reserved: 3072 | max reserved: 3072", "line 1: step=20 allocated=1.00 GiB reserved=3.00 GiB"},
		// 'memory_allocated (GB)': 1.5 → 1.5·10⁹ bytes = 1.40 GiB.
		{"bracket unit", "{'epoch': 1, 'memory_allocated (GB)': 1.5}", "line 1: step=1 allocated=1.40 GiB"},
		// mmcv's Iter [i/N] is the step; memory: is max_memory_allocated
		// in MiB: 2048 MiB = 2.00 GiB, a running peak.
		{"mmcv iter", "2020-12-18 19:36:37,584 - mmseg - INFO - Iter [1100/40000]\tlr: 9.755e-03, time: 0.402, memory: 2048, loss: 0.1652", "line 1: step=1100 time=2020-12-18T19:36:37.584Z allocated=2.00 GiB peak"},
		{"mmengine iter", "Iter(train) [  50/40000]  lr: 1e-2  memory: 2048  loss: 0.5", "line 1: step=50 allocated=2.00 GiB peak"},
		// torchtune: unit-less GiB. 1.5 GiB allocated, 2 GiB reserved.
		{"torchtune", "Step 4 | loss:1.15 lr:2e-05 peak_memory_active:1.25 peak_memory_alloc:1.5 peak_memory_reserved:2.0", "line 1: step=4 allocated=1.50 GiB reserved=2.00 GiB peak"},
		{"quoted key", `{"step": 7, "memory_reserved": 2147483648}`, "line 1: step=7 reserved=2.00 GiB"},
		{"returnn", "alloc cur 1GiB alloc peak 4GiB reserved cur 2GiB reserved peak 5GiB", "line 1: allocated=1.00 GiB reserved=2.00 GiB"},
		{"qualified free", "step 2 free memory: 3GiB used: 1GiB", "line 1: step=2 used=1.00 GiB"},
		{"qualified total", "step 2 total memory: 24GiB memory: 1GiB", "line 1: step=2 used=1.00 GiB capacity=24.00 GiB"},
		{"host qualifier", "step 2 RAM used: 12GB gpu memory: 1GiB", "line 1: step=2 used=1.00 GiB"},
		{"dotted key", "step 5 memory.used: 1024 MiB", "line 1: step=5 used=1.00 GiB"},
		{"longest suffix", "Training epoch 4, gpu memory used: 2GiB", "line 1: step=4 used=2.00 GiB"},
		// used/total: the unit after the pair applies to both, the total
		// is the capacity. 5.2 GiB and 23.7 GiB.
		{"used of total keyed", "Step 1 | MFU: 0.4% | Peak Mem.: 5.2/23.7 GiB (22.1%)", "line 1: step=1 allocated=5.20 GiB capacity=23.70 GiB peak"},
		// nvidia-smi's cell: 3210 MiB = 3.13 GiB of 8192 MiB; 44W / 230W is not a size.
		{"smi cell", "| 25%   58C    P0    44W / 230W |   3210MiB /  8192MiB |      1%      Default |", "line 1: used=3.13 GiB capacity=8.00 GiB"},
		// 4.9e9 B = 4.56 GiB of 24e9 B = 22.35 GiB.
		{"prose used of total", "- Model loaded: 4.9GB/24GB VRAM used", "line 1: used=4.56 GiB capacity=22.35 GiB"},
		// gpustat: 1024 MiB of 16384 MiB, the unit after the total.
		{"gpustat", "[0] Tesla P100-PCIE-16GB | 27'C,   0 % |  1024 / 16384 MiB |", "line 1: used=1.00 GiB capacity=16.00 GiB"},
		// TensorFlow's get_memory_info dict: bytes.
		{"tf dict", "step 9 {'current': 1073741824, 'peak': 2147483648}", "line 1: step=9 allocated=1.00 GiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := ReadSamples(strings.NewReader(tc.in), nil)
			require.NoError(t, err)
			require.Len(t, got, 1)
			assert.Equal(t, tc.want, got[0].String())
		})
	}
}

// TestReadSamplesUsedOfTotalNot: a size pair that is not the GPU's used
// memory of its capacity gives no sample.
func TestReadSamplesUsedOfTotalNot(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"RAM: 3.2/16 GB", // the host's
		"Downloading: 45%|####| 1.2G/2.6G [00:10<00:12, 110MB/s]", // a progress bar
		"Epoch 3/10 loss 2.0",               // no unit
		"| 25%   58C    P0    44W / 230W |", // watts
		"9GB/8GB VRAM",                      // more than the total
	} {
		_, _, err := ReadSamples(strings.NewReader(in), nil)
		assert.ErrorIs(t, err, ErrNoSamples, in)
	}
}

// TestReadSamplesCarriedStep: a memory line without a step takes the step
// (and unit) of the last step line without memory; a line with its own
// step keeps it.
func TestReadSamplesCarriedStep(t *testing.T) {
	t.Parallel()
	in := "memory: 1GiB\nIteration 5/100 loss 2.0\nmemory: 2GiB\nmemory: 3GiB\nstep 9 memory: 4GiB\n"
	got, rep, err := ReadSamples(strings.NewReader(in), nil)
	require.NoError(t, err)
	require.Len(t, got, 4)
	assert.Zero(t, got[0].Has&ColStep, "nothing to carry yet")
	assert.Equal(t, int64(5), got[1].Step)
	assert.Equal(t, int64(5), got[2].Step)
	assert.Equal(t, int64(9), got[3].Step)
	assert.Equal(t, "iteration", rep.StepUnit, "2 iterations over 1 step")
}

// TestReadSamplesMemoryAllocatedPrint: torch.cuda.memory_allocated()
// printed on its own line after an epoch line.
func TestReadSamplesMemoryAllocatedPrint(t *testing.T) {
	t.Parallel()
	in := "Epoch 3/10\nMemory allocated: 1024.0 MiB\nMemory reserved: 2048.0 MiB\nEpoch 4/10\nMemory allocated: 1536.0 MiB\n"
	got, rep, err := ReadSamples(strings.NewReader(in), nil)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, "epoch", rep.StepUnit)
	assert.Equal(t, "line 2: step=3 allocated=1.00 GiB", got[0].String())
	assert.Equal(t, "line 3: step=3 reserved=2.00 GiB", got[1].String())
	assert.Equal(t, "line 5: step=4 allocated=1.50 GiB", got[2].String())
}

// TestReadSamplesHostLines: host memory lines are skipped as such, and a
// log of host lines only has no GPU sample.
func TestReadSamplesHostLines(t *testing.T) {
	t.Parallel()
	in := "[INFO] [utils.py:832:see_memory_usage] CPU Virtual Memory:  used = 50.5 GB, percent = 40.2%\n" +
		"Memory info of CPU: total:201.37Gb, available: 190.78Gb, percent: 5.3%\n"
	_, rep, err := ReadSamples(strings.NewReader(in), nil)
	require.ErrorIs(t, err, ErrNoSamples)
	assert.Contains(t, err.Error(), "2 line(s) report host (CPU) memory only, not GPU memory")
	assert.Equal(t, 2, rep.ByReason[SkipHost])
	assert.Equal(t, "host_memory", SkipHost.String())

	// TensorFlow figures without a unit follow ReadOptions.Unit: 0.5 GB.
	got, _, err := ReadSamples(strings.NewReader("it 1\nGPU:0: current: 0.5, peak: 1\n"), &ReadOptions{Unit: gpumem.GB})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, gpumem.Bytes(500_000_000), got[0].Allocated)
}
