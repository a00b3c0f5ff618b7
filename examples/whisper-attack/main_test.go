package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// usable is the device memory a plan may use on d: its free memory less
// budget's default headroom.
func usable(d gpumem.Device) gpumem.Bytes {
	return d.Free() - gpumem.Bytes(budget.DefaultHeadroomFraction*float64(d.Free()))
}

// deviceNeed estimates j at batch n.
func deviceNeed(t *testing.T, j budget.Job, n int) gpumem.Bytes {
	t.Helper()
	j.Batch = n
	b, err := budget.Estimate(j)
	require.NoError(t, err)
	return b.Device()
}

// TestRun runs the program and checks its figures: the write-up's 104 MB
// request, and for every GPU and precision that the printed micro-batch
// fits, the next one does not, and the asterisk marks exactly the GPUs
// where the whole PGD batch does not fit.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	text := out.String()

	r, err := analyze()
	require.NoError(t, err)
	if r.Scores != 108_000_000 {
		t.Errorf("Scores = %d B, want 12·1500·1500·4 = 108000000", int64(r.Scores))
	}
	if r.Request != 104*gpumem.MiB {
		t.Errorf("Request = %v, want the write-up's 104 MiB", r.Request)
	}
	require.Contains(t, text, "requests 104.00 MiB")

	for g, d := range r.GPUs {
		line := tableLine(t, text, d.Name)
		fields := strings.Fields(strings.ReplaceAll(strings.TrimPrefix(line, "  "+d.Name), "*", ""))
		require.Len(t, fields, 2+len(precisions), "table line %q", line)
		for p := range precisions {
			n, err := strconv.Atoi(fields[2+p])
			require.NoError(t, err, "line %q", line)
			require.Equal(t, r.Micro[p][g], n, "printed micro-batch, %s %s", d.Name, precisions[p])
			j := r.Jobs[p]
			if need := deviceNeed(t, j, n); need > usable(d) {
				t.Errorf("%s %s: micro-batch %d needs %v, more than the %v usable", d.Name, precisions[p], n, need.String(), usable(d).String())
			}
			if need := deviceNeed(t, j, n+1); need <= usable(d) {
				t.Errorf("%s %s: micro-batch %d+1 needs %v, which fits the %v usable", d.Name, precisions[p], n, need.String(), usable(d).String())
			}
			wholeFits := r.Whole[p].Device() <= usable(d)
			if wholeFits != (n >= pgdBatch) {
				t.Errorf("%s %s: micro-batch %d, but %d clips fit: %v", d.Name, precisions[p], n, pgdBatch, wholeFits)
			}
			// The advice says the write-up's 1 or 2 fits every GPU listed.
			if n < 2 {
				t.Errorf("%s %s: micro-batch %d, but the report says 2 fits every GPU", d.Name, precisions[p], n)
			}
		}
		if strings.Contains(line, "*") != (r.Micro[0][g] < pgdBatch || r.Micro[1][g] < pgdBatch) {
			t.Errorf("line %q: asterisk does not match micro-batches %d, %d", line, r.Micro[0][g], r.Micro[1][g])
		}
	}

	// At least one listed GPU needs micro-batching, as the write-up's did.
	if r.Micro[0][0] >= pgdBatch {
		t.Errorf("fp32 micro-batch on %s = %d: the write-up's batch of %d fits, no OOM to explain", r.GPUs[0].Name, r.Micro[0][0], pgdBatch)
	}
	// Autocast does not halve the graph, as the write-up expected: CUDA
	// autocast runs softmax in fp32 (fp32_set_opt_dtype,
	// aten/src/ATen/autocast_mode.cpp, torch v2.6.0), so the encoder's
	// 1500² probabilities, most of a clip's graph, are saved in fp32 with
	// a 16-bit copy for the value matmul (6 bytes a score against fp32's
	// 4), while the projections' outputs halve.
	if ratio := float64(r.PerClip[1]) / float64(r.PerClip[0]); ratio < 1 || ratio > 1.5 {
		t.Errorf("autocast / fp32 graph per clip = %.2f: want the fp32 probabilities and their 16-bit copy to outweigh the halved projections", ratio)
	}
	require.Contains(t, text, "lang_autocast does not shrink the graph")
	// One clip's graph is the step between consecutive batches.
	for p := range precisions {
		step := deviceNeed(t, r.Jobs[p], 3) - deviceNeed(t, r.Jobs[p], 2)
		if diff := step - r.PerClip[p]; diff < -r.PerClip[p]/10 || diff > r.PerClip[p]/10 {
			t.Errorf("%s: batch 3 − batch 2 = %v, one clip's graph printed as %v", precisions[p], step.String(), r.PerClip[p].String())
		}
		require.Contains(t, text, r.PerClip[p].String())
		require.Contains(t, text, r.Whole[p].Device().String())
	}
}

// tableLine returns the line of the micro-batch table for a GPU.
func tableLine(t *testing.T, text, name string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "  "+name+" ") {
			return l
		}
	}
	t.Fatalf("no table line for %s in:\n%s", name, text)
	return ""
}
