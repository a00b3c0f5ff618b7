package budget

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// mkggufFlags reads tools/llamacpp/mkgguf's flags as recorded in a log's
// "# model:" line ("-layers 4 -embd 512 -tied"): each flag's value ("true"
// for one given alone), and a reader of a numeric flag.
func mkggufFlags(t *testing.T, flags string) (map[string]string, func(string) int64) {
	t.Helper()
	f := strings.Fields(flags)
	v := map[string]string{}
	for i := 0; i < len(f); i++ {
		k := strings.TrimPrefix(f[i], "-")
		if i+1 < len(f) && !strings.HasPrefix(f[i+1], "-") {
			v[k] = f[i+1]
			i++
		} else {
			v[k] = "true"
		}
	}
	num := func(k string) int64 {
		n, err := strconv.ParseInt(v[k], 10, 64)
		require.NoError(t, err, k)
		return n
	}
	return v, num
}

// mkggufModel is the model tools/llamacpp/mkgguf writes for its flags
// ("-layers 4 -embd 512 ..."): its tensors in the file's order, with
// their types, as a llama Spec.
func mkggufModel(t *testing.T, flags string) Model {
	t.Helper()
	v, num := mkggufFlags(t, flags)
	layers, embd, ff, heads, kvHeads, vocab := num("layers"), num("embd"), num("ff"), num("heads"), num("kv-heads"), num("vocab")
	mat := map[string]gpumem.DType{"f32": gpumem.FP32, "f16": gpumem.FP16, "q8_0": gpumem.Q8_0}[v["type"]]
	require.NotEqual(t, gpumem.Invalid, mat, v["type"])
	kvDim := embd / heads * kvHeads
	inv := []gpumem.Tensor{
		{Name: "output.weight", Shape: []int64{vocab, embd}, DType: mat},
		{Name: "output_norm.weight", Shape: []int64{embd}, DType: gpumem.FP32},
		{Name: "token_embd.weight", Shape: []int64{vocab, embd}, DType: mat},
	}
	for i := range layers {
		p := fmt.Sprintf("blk.%d.", i)
		inv = append(inv,
			gpumem.Tensor{Name: p + "attn_k.weight", Shape: []int64{kvDim, embd}, DType: mat},
			gpumem.Tensor{Name: p + "attn_norm.weight", Shape: []int64{embd}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "attn_output.weight", Shape: []int64{embd, embd}, DType: mat},
			gpumem.Tensor{Name: p + "attn_q.weight", Shape: []int64{embd, embd}, DType: mat},
			gpumem.Tensor{Name: p + "attn_v.weight", Shape: []int64{kvDim, embd}, DType: mat},
			gpumem.Tensor{Name: p + "ffn_down.weight", Shape: []int64{embd, ff}, DType: mat},
			gpumem.Tensor{Name: p + "ffn_gate.weight", Shape: []int64{ff, embd}, DType: mat},
			gpumem.Tensor{Name: p + "ffn_norm.weight", Shape: []int64{embd}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "ffn_up.weight", Shape: []int64{ff, embd}, DType: mat})
	}
	s := model.InferSpec(inv)
	s.Family, s.Layers, s.Hidden, s.Intermediate, s.Heads, s.KVHeads, s.HeadDim = "llama", layers, embd, ff, heads, kvHeads, embd/heads
	s.Vocab, s.MaxPositions, s.Inventory = vocab, num("ctx"), inv
	m, err := ModelOf(s)
	require.NoError(t, err)
	return m
}

var (
	cpuBuf = regexp.MustCompile(`^\S+:\s+(CPU|CPU_Mapped|AMX|CPU_REPACK)\s+(model |KV |compute )buffer size =\s*([0-9.]+) MiB`)
	cpuJob = regexp.MustCompile(`^# job: n_ctx (\d+), n_ubatch (\d+), flash_attn (on|off), (mmap|no-mmap)`)
)

// TestLlamaCppCPURuns compares the llama.cpp runtime with the buffers the
// real llama.cpp printed when tools/llamacpp/run.sh ran it on the CPU
// (testdata/llamacpp/cpu; ggml-org/llama.cpp v0.5.0 as node-llama-cpp
// 3.22.1 bundles it): the KV buffer exactly (to the printed 0.01 MiB),
// the weights (the model buffers' sum without mmap: the AMX buffer of
// the repacked matrices and the CPU buffer of the rest) exactly, and the
// compute buffer within 0.5%. The CPU backend's compute buffer holds the
// whole graph (the tokens' lookup, every layer and the output on one
// device, with the inputs); a CUDA one holds the stages the GPU runs, its
// inputs copied from the host.
func TestLlamaCppCPURuns(t *testing.T) {
	files, err := filepath.Glob("../testdata/llamacpp/cpu/*.log")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var errs []float64
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			fh, err := os.Open(file)
			require.NoError(t, err)
			defer fh.Close()
			var flags string
			var ctx, ub int
			var fa, mmap bool
			got := map[string]float64{}
			sc := bufio.NewScanner(fh)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if rest, ok := strings.CutPrefix(line, "# model: "); ok {
					_, flags, _ = strings.Cut(rest, "mkgguf ")
				}
				if m := cpuJob.FindStringSubmatch(line); m != nil {
					ctx, _ = strconv.Atoi(m[1])
					ub, _ = strconv.Atoi(m[2])
					fa, mmap = m[3] == "on", m[4] == "mmap"
				}
				if m := cpuBuf.FindStringSubmatch(line); m != nil {
					mib, err := strconv.ParseFloat(m[3], 64)
					require.NoError(t, err)
					got[m[1]+" "+strings.TrimSpace(m[2])] = mib
				}
			}
			require.NoError(t, sc.Err())
			require.NotEmpty(t, flags, "a # model: line")
			require.NotZero(t, ctx, "a # job: line")
			m := mkggufModel(t, flags)
			r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: ctx, UBatch: ub, FlashAttention: fa}))
			require.NoError(t, err)
			mib := func(b gpumem.Bytes) float64 { return math.Round(float64(b)/(1<<20)*100) / 100 }
			assert.Equal(t, got["CPU KV"], mib(r.KV+r.HostKV), "KV buffer")
			// The weights: on this CPU (Sapphire Rapids) the AMX buffer
			// type takes the matrices the products use (every 2-D
			// tensor but token_embd, which get_rows reads); the rest
			// stay in the CPU buffer, or with mmap in the mapping, whose
			// size is the file span from the first to the last of them.
			repacked := func(t *gpumem.Tensor) bool { return len(t.Shape) == 2 && t.Name != "token_embd.weight" }
			var rest, mats gpumem.Bytes
			for i := range m.spec.Inventory {
				tt := &m.spec.Inventory[i]
				b, err := tt.Bytes()
				require.NoError(t, err)
				if repacked(tt) {
					mats += b
				} else {
					rest += b
				}
			}
			assert.Equal(t, r.GPUWeights+r.HostWeights, mats+rest)
			if mmap {
				span, err := ggufSpan(m.spec.Inventory, ggufAlignment, func(t *gpumem.Tensor) bool { return !repacked(t) })
				require.NoError(t, err)
				assert.Equal(t, got["CPU_Mapped model"], mib(span), "CPU_Mapped: the file span of the CPU buffer's tensors")
			} else {
				assert.Equal(t, got["CPU model"], mib(rest), "CPU model buffer")
			}
			if m.spec.Inventory[0].DType == gpumem.FP16 {
				assert.Equal(t, got["AMX model"], mib(mats), "AMX buffer: f16 matrices keep their size")
			} else {
				t.Logf("AMX buffer %.2f MiB for %.2f MiB of %s matrices (its repacked layout)", got["AMX model"], float64(mats)/(1<<20), m.spec.Inventory[0].DType)
			}
			// Every stage on one device.
			c, err := llamaCppCompute(m.spec.LM(), int64(r.Cells), int64(r.UBatch), fa, int(m.spec.LM().Layers), true, true, 0)
			require.NoError(t, err)
			e := (float64(c)/(1<<20) - got["CPU compute"]) / got["CPU compute"]
			errs = append(errs, e)
			t.Logf("n_ctx %d n_ubatch %d flash %v: compute %.2f MiB, llama.cpp %.2f MiB (%+.1f%%)", ctx, ub, fa, float64(c)/(1<<20), got["CPU compute"], 100*e)
			// ggml-alloc's replay over the graph (llamacpp_graph.go):
			// within 0.14% in all twelve runs, with flash attention and
			// without (the printed 0.01 MiB and the alignment).
			assert.InDelta(t, 0, e, 0.005, "compute buffer: %+.2f%%", 100*e)
		})
	}
	t.Logf("%d runs, compute buffer errors %v", len(errs), errs)
}
