package leak

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
)

// TestReadProse reads the narratives people write, with the position and
// the unit of each figure, and what is not a reading (a rate, an
// extrapolation, host memory, a log's key: value).
func TestReadProse(t *testing.T) {
	t.Parallel()
	type fig struct {
		step int64 // -1: none
		used float64
	}
	tests := []struct {
		text string
		want []fig
		unit string
		conf Confidence
	}{
		{"after epoch 3 the GPU memory is 14.2 GB, after epoch 4 it is 15.1 GB", []fig{{3, 14.2e9}, {4, 15.1e9}}, "epoch", ConfidenceMedium},
		{"The GPU memory goes from 10GB to 23GB after 5 epochs.", []fig{{0, 10e9}, {5, 23e9}}, "epoch", ConfidenceMedium},
		{"VRAM usage at step 100 was 2048 MiB; at step 200 it was 3072 MiB.", []fig{{100, 2048 << 20}, {200, 3072 << 20}}, "step", ConfidenceMedium},
		{"The memory usage grows to 12 gigabytes and then to 14 gigabytes, no idea why.", []fig{{-1, 12e9}, {-1, 14e9}}, "", ConfidenceLow},
		// The brief's wording: the memory named on the line before.
		{"GPU memory keeps growing during training.\nit goes from 10GB to 23GB after 5 epochs", []fig{{0, 10e9}, {5, 23e9}}, "epoch", ConfidenceLow},
		{"GPU memory is **11.1G** after the first epoch and `15.1G` after the second epoch", []fig{{1, 11.1 * float64(gpumem.GiB)}, {2, 15.1 * float64(gpumem.GiB)}}, "epoch", ConfidenceMedium},
	}
	for _, tc := range tests {
		got, rep, err := ReadSamples(strings.NewReader(tc.text), nil)
		require.NoError(t, err, tc.text)
		require.Len(t, got, len(tc.want), tc.text)
		for i, w := range tc.want {
			assert.Equal(t, gpumem.Bytes(math.Ceil(w.used)), got[i].Used, "%s: figure %d", tc.text, i)
			if w.step < 0 {
				assert.Zero(t, got[i].Has&ColStep, tc.text)
			} else {
				assert.Equal(t, w.step, got[i].Step, tc.text)
			}
		}
		assert.Equal(t, tc.unit, rep.StepUnit, tc.text)
		assert.Equal(t, tc.conf, rep.Confidence, "%s: %v", tc.text, rep.ConfidenceWhy)
		assert.Equal(t, len(tc.want), rep.Prose)
	}
	for _, text := range []string{
		"Memory increases by approximately 254MB with each epoch on the GPU.",
		"If this goes on, the GPU memory usage will reach 76.2GB at epoch 300.",
		"The cpu memory used by the loader starts with ~15GB of RAM and grows.",
		"I see about 100 MB / epoch of GPU memory growth in nvidia-smi output.",
		"llama_new_context_with_model: compute buffer total size = 96.13 MB of memory used",
		"My model has 7B parameters and the GPU memory is fine.",
		"it goes from 10GB to 23GB after 5 epochs", // nothing says memory: a disk, a dataset?
	} {
		_, _, err := ReadSamples(strings.NewReader(text), nil)
		assert.ErrorIs(t, err, ErrNoSamples, text)
	}
}

// FuzzProse: the prose reader never panics on any line; every figure it
// keeps is a positive size or a percentage in (0, 100], and its position
// is not negative.
func FuzzProse(f *testing.F) {
	logs, _ := filepath.Glob("testdata/logs/real/*.log")
	for _, name := range logs {
		if data, err := os.ReadFile(name); err == nil {
			for _, l := range strings.Split(string(data), "\n") {
				f.Add(l)
			}
		}
	}
	f.Add("at iter 99999999999999999999 it uses 1e400mb of GPU memory, at epoch -5 it takes 3.5.5GB")
	f.Add("the GPU memory at step 99999999999999999999 is 5 GB, at step 2 it is 6 GB")
	f.Add("第九十个epoch占用， 第个epoch 7G 显存 占用.")
	f.Add("GPU memory from 10k k MB to 20k MB after the first 0 steps, 999% memory")
	f.Add("** ** ` GPU memory 5G+ + + GB at the first six iterations -- 1G -- 2G")
	f.Fuzz(func(t *testing.T, line string) {
		var p sampleParser
		p.proseLine(line, 1)
		for _, g := range p.prose {
			if g.value < 0 || g.pct < 0 || g.pct > 100 || g.pos < 0 {
				t.Fatalf("%q: figure out of range %+v", line, g)
			}
			if !g.oom && g.value == 0 && g.pct == 0 {
				t.Fatalf("%q: empty figure %+v", line, g)
			}
		}
		for _, s := range p.prose {
			if s.pos > maxProsePos {
				t.Fatalf("%q: position out of range %+v", line, s)
			}
		}
		p.finishProse()
		for _, s := range p.out {
			if s.Used < 0 || s.Run < 0 {
				t.Fatalf("%q: sample out of range %v", line, s)
			}
		}
	})
}

// FuzzYOLORow: a row is read only with an epoch/last-epoch, a G figure
// and three numbers, and its size is never negative.
func FuzzYOLORow(f *testing.F) {
	f.Add("      0/89     5.61G   0.07745    0.0277   0.01785     0.123         7       640")
	f.Add("1/300 3.2G 0.05 0.02 0.01")
	f.Add("99999999999999999999/1 1e308G 1 2 3")
	f.Add("5/3 -1G 1 2 3")
	f.Add("0/0 NaNG 1 2 3")
	f.Fuzz(func(t *testing.T, row string) {
		row = strings.TrimSpace(row)
		if row == "" {
			return
		}
		s, ok := yoloRow(row, 1)
		if ok && (s.Reserved < 0 || s.Step < 0 || s.Has != ColStep|ColReserved) {
			t.Fatalf("%q: %v", row, s)
		}
	})
}

// FuzzAnalyzeShort: a series of 2 to 4 samples is described, never a
// leak, and its report marshals (no NaN reaches the JSON).
func FuzzAnalyzeShort(f *testing.F) {
	f.Add(int64(0), int64(1), int64(2), int64(3), 1e9, 2e9, 3e9, 4e9, uint8(4))
	f.Add(int64(5), int64(5), int64(6), int64(-1), 0.0, 1.0, math.MaxFloat64, 1e18, uint8(2))
	f.Add(int64(1), int64(1000000), int64(2000000), int64(3000000), 5e9, 5e9, 5e9, 1.0, uint8(3))
	f.Fuzz(func(t *testing.T, s0, s1, s2, s3 int64, v0, v1, v2, v3 float64, n uint8) {
		steps := []int64{s0, s1, s2, s3}
		vals := []float64{v0, v1, v2, v3}
		k := 2 + int(n)%3
		var ss []Sample
		for i := range k {
			v := vals[i]
			if !(v >= 0) || v > 1e18 {
				return
			}
			ss = append(ss, Sample{Step: steps[i], Used: gpumem.Bytes(v), Has: ColStep | ColUsed})
		}
		r, err := Analyze(ss, &Options{Capacity: 80 * gpumem.GiB, WarmUp: -1})
		if err != nil {
			t.Fatalf("Analyze: %v", err)
		}
		if r.Leak {
			t.Fatalf("a short series is a leak: %s", r.Reason)
		}
		if r.Shape != ShapeInsufficient && !r.Short {
			t.Fatalf("%d samples, not short: %s", k, r.Reason)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("json: %v", err)
		}
	})
}
