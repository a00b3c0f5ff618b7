package leak

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// W&B system-metrics exports: column names from W&B's system-metrics
// reference (https://docs.wandb.ai/ref/system-metrics): gpu.N.memoryAllocatedBytes
// (bytes), gpu.N.memoryAllocated (percent of the GPU's memory), gpu.N.memory
// (memory busy time, percent: not a size). No real export was found in
// public threads; these tables are written from the reference.
func TestReadSamplesWandB(t *testing.T) {
	t.Parallel()
	in := "_step,_runtime,system.gpu.0.memoryAllocatedBytes,system.gpu.1.memoryAllocatedBytes,system.gpu.0.memory,loss\n" +
		"0,15.2,1073741824,2147483648,12.5,\n" +
		"1,30.4,1075838976,2147483648,13,\n" +
		",,,,,2.5\n"
	got, rep, err := ReadSamples(strings.NewReader(in), nil)
	require.NoError(t, err)
	require.Len(t, got, 4, "one sample per GPU per row; the metrics-only row gives none")
	assert.Equal(t, "step", rep.StepUnit)
	assert.Equal(t, 0, got[0].Device)
	assert.Equal(t, gpumem.Bytes(1<<30), got[0].Used)
	assert.Equal(t, 1, got[1].Device)
	assert.Equal(t, gpumem.Bytes(2<<30), got[1].Used)
	// 1075838976 − 1073741824 = 2 MiB on GPU 0 at step 1.
	assert.Equal(t, gpumem.Bytes(1<<30+2<<20), got[2].Used)
	assert.Equal(t, int64(1), got[2].Step)
	assert.Empty(t, rep.Assumed, "bytes by the column's name, nothing assumed")

	// The percentage needs the capacity: 50% of 24 GiB = 12 GiB.
	pct := "Step,system/gpu.0.memoryAllocated\n0,50\n1,50.5\n"
	_, rep, err = ReadSamples(strings.NewReader(pct), nil)
	require.ErrorIs(t, err, ErrNoSamples)
	assert.Equal(t, 2, rep.ByReason[SkipMalformed])
	assert.Contains(t, rep.Examples[0].Detail, "ReadOptions.Capacity")
	got, _, err = ReadSamples(strings.NewReader(pct), &ReadOptions{Capacity: 24 * gpumem.GiB})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, 12*gpumem.GiB, got[0].Used)
	assert.Equal(t, 24*gpumem.GiB, got[0].Capacity)
	// 50.5% of 24 GiB = 12.12 GiB = 13013750906.88 → 13013750907 bytes.
	assert.Equal(t, gpumem.Bytes(13013750907), got[1].Used)

	_, _, err = ReadSamples(strings.NewReader(pct), &ReadOptions{Capacity: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ReadOptions.Capacity")
	_, rep, _ = ReadSamples(strings.NewReader("step,system.gpu.0.memoryAllocated\n0,150\n"), &ReadOptions{Capacity: gpumem.GiB})
	assert.Equal(t, 1, rep.ByReason[SkipMalformed], "a percentage above 100")
}

// Lightning's per-GPU memory (get_gpu_memory_map, GPUStatsMonitor:
// "gpu_id: N/memory.used (MB)" from nvidia-smi nounits, so MiB): printed
// dicts and metrics.csv columns. No real log was found in public threads;
// the names are Lightning's own (pytorch_lightning/utilities/memory.py).
func TestReadSamplesLightning(t *testing.T) {
	t.Parallel()
	in := "Epoch 3\n{'gpu_id: 0/memory.used (MB)': 1024.0, 'gpu_id: 1/memory.used (MB)': 2048.5}\n" +
		"{'gpu_id: 0/memory.free (MB)': 9000.0}\n"
	got, rep, err := ReadSamples(strings.NewReader(in), nil)
	require.NoError(t, err)
	require.Len(t, got, 2, "memory.free is not read")
	assert.Equal(t, "epoch", rep.StepUnit)
	assert.Equal(t, int64(3), got[0].Step)
	assert.Equal(t, 0, got[0].Device)
	assert.Equal(t, gpumem.GiB, got[0].Used)
	assert.Equal(t, 1, got[1].Device)
	// 2048.5 MiB = 2148007936 bytes.
	assert.Equal(t, gpumem.Bytes(2148007936), got[1].Used)

	csv := "epoch,gpu_id: 0/memory.used (MB),gpu_id: 0/memory.free (MB),step,train_loss\n0,1000,23000,49,0.5\n0,1010,22990,99,0.4\n0,,,99,\n"
	got, rep, err = ReadSamples(strings.NewReader(csv), nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "step", rep.StepUnit)
	assert.Equal(t, int64(99), got[1].Step)
	assert.Equal(t, 1010*gpumem.MiB, got[1].Used)
	assert.Empty(t, rep.Assumed, "MiB by Lightning's column, nothing assumed")
}
