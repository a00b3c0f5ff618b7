package budget

import (
	"bufio"
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

// q4kmLlama builds a llama GGUF inventory as llama-quantize writes
// Q4_K_M (llama_tensor_get_type, src/llama-quant.cpp): every 2-D tensor
// Q4_K but output (Q6_K) and attn_v and ffn_down in the layers where
// use_more_bits(i, n) holds (i < n/8, i >= 7n/8, or (i − n/8) % 3 == 2),
// Q6_K; the norms F32.
func q4kmLlama(t *testing.T, catalog string, layers, hidden, kvDim, ff, vocab int64) Model {
	t.Helper()
	s, ok := model.Lookup(catalog)
	require.True(t, ok, catalog)
	inv := []gpumem.Tensor{
		{Name: "token_embd.weight", Shape: []int64{vocab, hidden}, DType: gpumem.Q4_K},
		{Name: "output_norm.weight", Shape: []int64{hidden}, DType: gpumem.FP32},
		{Name: "output.weight", Shape: []int64{vocab, hidden}, DType: gpumem.Q6_K},
	}
	for i := range layers {
		more := gpumem.Q4_K
		if i < layers/8 || i >= 7*layers/8 || (i-layers/8)%3 == 2 {
			more = gpumem.Q6_K
		}
		p := "blk." + strconv.FormatInt(i, 10) + "."
		inv = append(inv,
			gpumem.Tensor{Name: p + "attn_norm.weight", Shape: []int64{hidden}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "attn_q.weight", Shape: []int64{hidden, hidden}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "attn_k.weight", Shape: []int64{kvDim, hidden}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "attn_v.weight", Shape: []int64{kvDim, hidden}, DType: more},
			gpumem.Tensor{Name: p + "attn_output.weight", Shape: []int64{hidden, hidden}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "ffn_norm.weight", Shape: []int64{hidden}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "ffn_gate.weight", Shape: []int64{ff, hidden}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "ffn_up.weight", Shape: []int64{ff, hidden}, DType: gpumem.Q4_K},
			gpumem.Tensor{Name: p + "ffn_down.weight", Shape: []int64{hidden, ff}, DType: more})
	}
	s.Inventory = inv
	m, err := ModelOf(s)
	require.NoError(t, err)
	return m
}

// llamaCppLogModels are the models of testdata/llamacpp's logs, by the
// name of their "# model:" line.
var llamaCppLogModels = map[string]func(t *testing.T) Model{
	"llama-3-8b-q4km": func(t *testing.T) Model { return q4kmLlama(t, "llama-3-8b", 32, 4096, 1024, 14336, 128256) },
	"llama-2-7b-q4km": func(t *testing.T) Model { return q4kmLlama(t, "llama-2-7b", 32, 4096, 4096, 11008, 32000) },
}

var (
	logMiB   = regexp.MustCompile(`(CPU|CUDA0) (KV |compute )?buffer size =\s*([0-9.]+) MiB`)
	logParam = regexp.MustCompile(`(n_ctx|n_ubatch|n_batch|flash_attn)\s*=\s*([0-9]+)`)
)

// TestLlamaCppLogs compares the llama.cpp runtime with the buffers
// llama.cpp printed in the logs of testdata/llamacpp (each with its
// source, model, GPU and job): the model buffers (weights on the GPU and
// on the host) and the KV buffer within 2%, the compute buffer within 5%.
// Every figure is logged, with its error.
func TestLlamaCppLogs(t *testing.T) {
	files, err := filepath.Glob("../testdata/llamacpp/*.log")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var n, within int
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			require.NoError(t, err)
			defer f.Close()
			var name string
			var ver LlamaCppVersion // the log's build era ("# build:"), which shapes the graph
			params := map[string]int{}
			got := map[string]float64{}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				line := sc.Text()
				if rest, ok := strings.CutPrefix(line, "# model: "); ok {
					name, _, _ = strings.Cut(rest, " ")
					continue
				}
				if rest, ok := strings.CutPrefix(line, "# build: "); ok {
					d, _, _ := strings.Cut(rest, " ")
					ver, err = ParseLlamaCppVersion("# build", d)
					require.NoError(t, err)
					continue
				}
				if strings.HasPrefix(line, "#") {
					continue
				}
				if m := logParam.FindStringSubmatch(line); m != nil {
					params[m[1]], _ = strconv.Atoi(m[2])
				}
				if m := logMiB.FindStringSubmatch(line); m != nil {
					v, _ := strconv.ParseFloat(m[3], 64)
					got[m[1]+" "+m[2]] = v
				}
			}
			require.NoError(t, sc.Err())
			build, ok := llamaCppLogModels[name]
			require.True(t, ok, "model %q", name)
			ub := params["n_ubatch"]
			if ub == 0 {
				ub = 512 // n_batch's default, which sized the graph before n_ubatch
			}
			j := Job{Model: build(t), Mode: Prefill, Precision: BF16, Batch: 1, SeqLen: 1, Runtime: LlamaCpp,
				LlamaCpp: LlamaCppOptions{Context: params["n_ctx"], UBatch: ub, FlashAttention: params["flash_attn"] == 1, Version: ver}}
			r, err := LlamaCppBuffers(j)
			require.NoError(t, err)
			mib := func(b gpumem.Bytes) float64 { return float64(b) / (1 << 20) }
			for _, c := range []struct {
				key   string
				model float64
				tol   float64
			}{
				{"CUDA0 ", mib(r.GPUWeights), 0.02},
				{"CPU ", mib(r.HostWeights), 0.02},
				{"CUDA0 KV ", mib(r.KV), 0.02},
				{"CUDA0 compute ", mib(r.Compute), 0.05},
			} {
				logged, ok := got[c.key]
				if !ok {
					continue
				}
				n++
				e := (c.model - logged) / logged
				t.Logf("%-15s logged %9.2f MiB, modelled %9.2f MiB (%+.2f%%)", c.key+"buffer", logged, c.model, 100*e)
				if assert.LessOrEqual(t, math.Abs(e), c.tol, "%sbuffer", c.key) {
					within++
				}
			}
		})
	}
	t.Logf("%d of %d figures within tolerance", within, n)
}
