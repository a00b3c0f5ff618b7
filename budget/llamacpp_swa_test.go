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

// mkggufSWAModel is the gemma2 or gemma3 model tools/llamacpp/mkgguf
// writes for its flags ("-arch gemma3 -swa 128 -layers 12 ..."), as a
// Spec of that family with its sliding window and inventory.
func mkggufSWAModel(t *testing.T, flags string) Model {
	t.Helper()
	v, num := mkggufFlags(t, flags)
	arch := v["arch"]
	require.Contains(t, []string{"gemma2", "gemma3"}, arch)
	layers, embd, ff, heads, kvHeads, vocab, hd := num("layers"), num("embd"), num("ff"), num("heads"), num("kv-heads"), num("vocab"), num("head-dim")
	require.Equal(t, "f16", v["type"])
	require.Equal(t, "true", v["tied"])
	mat := gpumem.FP16
	inv := []gpumem.Tensor{
		{Name: "output_norm.weight", Shape: []int64{embd}, DType: gpumem.FP32},
		{Name: "token_embd.weight", Shape: []int64{vocab, embd}, DType: mat},
	}
	for i := range layers {
		p := fmt.Sprintf("blk.%d.", i)
		if arch == "gemma3" {
			inv = append(inv, gpumem.Tensor{Name: p + "attn_k_norm.weight", Shape: []int64{hd}, DType: gpumem.FP32},
				gpumem.Tensor{Name: p + "attn_q_norm.weight", Shape: []int64{hd}, DType: gpumem.FP32})
		}
		inv = append(inv,
			gpumem.Tensor{Name: p + "post_attention_norm.weight", Shape: []int64{embd}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "post_ffw_norm.weight", Shape: []int64{embd}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "attn_k.weight", Shape: []int64{kvHeads * hd, embd}, DType: mat},
			gpumem.Tensor{Name: p + "attn_norm.weight", Shape: []int64{embd}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "attn_output.weight", Shape: []int64{embd, heads * hd}, DType: mat},
			gpumem.Tensor{Name: p + "attn_q.weight", Shape: []int64{heads * hd, embd}, DType: mat},
			gpumem.Tensor{Name: p + "attn_v.weight", Shape: []int64{kvHeads * hd, embd}, DType: mat},
			gpumem.Tensor{Name: p + "ffn_down.weight", Shape: []int64{embd, ff}, DType: mat},
			gpumem.Tensor{Name: p + "ffn_gate.weight", Shape: []int64{ff, embd}, DType: mat},
			gpumem.Tensor{Name: p + "ffn_norm.weight", Shape: []int64{embd}, DType: gpumem.FP32},
			gpumem.Tensor{Name: p + "ffn_up.weight", Shape: []int64{ff, embd}, DType: mat})
	}
	s := model.InferSpec(inv)
	s.Family, s.Layers, s.Hidden, s.Intermediate, s.Heads, s.KVHeads, s.HeadDim = arch, layers, embd, ff, heads, kvHeads, hd
	s.Vocab, s.MaxPositions, s.Inventory, s.SlidingWindow, s.TiedEmbeddings = vocab, num("ctx"), inv, num("swa"), true
	m, err := ModelOf(s)
	require.NoError(t, err)
	return m
}

var (
	swaCtx    = regexp.MustCompile(`^llama_context: (n_ctx|n_ubatch|n_seq_max)\s+=\s+(\d+)`)
	swaFlash  = regexp.MustCompile(`^llama_context: flash_attn\s+=\s+(\w+)`)
	swaCache  = regexp.MustCompile(`^llama_kv_cache: size =\s*([0-9.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers.*K \((\w+)\).*V \((\w+)\)`)
	swaKVBuf  = regexp.MustCompile(`^llama_kv_cache:\s+CPU KV buffer size =\s*([0-9.]+) MiB`)
	swaCompBu = regexp.MustCompile(`^sched_reserve:\s+CPU compute buffer size =\s*([0-9.]+) MiB`)
)

// TestLlamaCppSWARuns compares the llama.cpp runtime with what the real
// llama.cpp printed when tools/llamacpp/run_swa.sh ran gemma2 and gemma3
// models on the CPU (testdata/llamacpp/swa; the llama.cpp node-llama-cpp
// 3.22.1 bundles): each of llama_kv_cache_iswa's two caches — its cells
// per sequence and its layers — and the KV buffers' sum exactly (to the
// printed 0.01 MiB), with --swa-full, --parallel 2, n_ubatch 128 to 513,
// flash attention on and off, an f16 and a q8_0 cache (this build
// quantizes the SWA cache as the other). The compute buffer is the llama graph's
// replay with the SWA mask and indices (and, with two sequences, each
// stream's n_kv): gemma's graph has more nodes (the extra norms, gemma3's
// Q and K norms), which do not reach the peak here: within 0.5% in the
// eight f16 runs; the q8_0 run is 1.4% under, held to 2%.
func TestLlamaCppSWARuns(t *testing.T) {
	files, err := filepath.Glob("../testdata/llamacpp/swa/*.log")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 9)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			fh, err := os.Open(file)
			require.NoError(t, err)
			defer fh.Close()
			var flags string
			ctx := map[string]int{}
			var flash, full bool
			type cache struct {
				mib           float64
				cells, layers int
			}
			var caches []cache
			var ck, cv gpumem.DType
			var kvBufs []float64
			var compute float64
			sc := bufio.NewScanner(fh)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if rest, ok := strings.CutPrefix(line, "# model: "); ok {
					_, flags, _ = strings.Cut(rest, "mkgguf ")
				}
				if m := swaCtx.FindStringSubmatch(line); m != nil {
					ctx[m[1]], _ = strconv.Atoi(m[2])
				}
				if m := swaFlash.FindStringSubmatch(line); m != nil {
					flash = m[1] == "enabled"
				}
				if strings.Contains(line, "using full-size SWA cache") {
					full = true
				}
				if m := swaCache.FindStringSubmatch(line); m != nil {
					mib, _ := strconv.ParseFloat(m[1], 64)
					cells, _ := strconv.Atoi(m[2])
					layers, _ := strconv.Atoi(m[3])
					caches = append(caches, cache{mib, cells, layers})
					ck, err = gpumem.ParseDType(m[4])
					require.NoError(t, err)
					cv, err = gpumem.ParseDType(m[5])
					require.NoError(t, err)
				}
				if m := swaKVBuf.FindStringSubmatch(line); m != nil {
					mib, _ := strconv.ParseFloat(m[1], 64)
					kvBufs = append(kvBufs, mib)
				}
				if m := swaCompBu.FindStringSubmatch(line); m != nil {
					compute, _ = strconv.ParseFloat(m[1], 64)
				}
			}
			require.NoError(t, sc.Err())
			require.NotEmpty(t, flags, "a # model: line")
			require.Len(t, caches, 2, "the non-SWA and the SWA cache")
			require.Len(t, kvBufs, 2)
			nSeq := ctx["n_seq_max"]
			m := mkggufSWAModel(t, flags)
			o := LlamaCppOptions{Context: ctx["n_ctx"], UBatch: ctx["n_ubatch"], Parallel: nSeq, FlashAttention: flash, SWAFull: full,
				CacheK: ck, CacheV: cv}
			r, err := LlamaCppBuffers(llamaCppJob(m, o))
			require.NoError(t, err)
			nLayer := int(m.spec.LM().Layers)
			assert.Equal(t, caches[0].cells*nSeq, r.Cells, "non-SWA cache cells")
			assert.Equal(t, caches[1].cells*nSeq, r.SWACells, "SWA cache cells")
			assert.Equal(t, caches[1].layers, r.SWALayers, "SWA layers")
			assert.Equal(t, caches[0].layers, nLayer-r.SWALayers, "non-SWA layers")
			mib := func(b gpumem.Bytes) float64 { return math.Round(float64(b)/(1<<20)*100) / 100 }
			assert.InDelta(t, kvBufs[0]+kvBufs[1], mib(r.KV+r.HostKV), 0.011, "KV buffers")
			// Without the SWA cache, the full cache in every layer: what
			// a build before 2025-05-20 allocated.
			old := o
			old.Version = 20250501
			ro, err := LlamaCppBuffers(llamaCppJob(m, old))
			require.NoError(t, err)
			assert.Zero(t, ro.SWACells)
			// (the printed MiB of the non-SWA cache, rounded to 0.01, scaled
			// to every layer)
			assert.InDelta(t, caches[0].mib/float64(caches[0].layers)*float64(nLayer), mib(ro.KV+ro.HostKV),
				0.005*float64(nLayer)/float64(caches[0].layers)+0.005, "a build before the SWA cache: every layer of the non-SWA cache's size")
			c, err := llamaCppComputeKV(m.spec.LM(), llamaCppGraphKV{cells: int64(r.Cells), swaCells: int64(r.SWACells), streams: int64(nSeq)},
				int64(r.UBatch), flash, nLayer, true, true, 0)
			require.NoError(t, err)
			e := (float64(c)/(1<<20) - compute) / compute
			t.Logf("KV %.2f + %.2f MiB (%d and %d cells), modelled %.2f MiB; compute %.2f MiB, modelled %.2f MiB (%+.1f%%)",
				kvBufs[0], kvBufs[1], caches[0].cells, caches[1].cells, float64(r.KV+r.HostKV)/(1<<20), compute, float64(c)/(1<<20), 100*e)
			tol := 0.005
			if ck != gpumem.FP16 {
				// The q8_0 run's buffer is 1.4% (0.16 MiB) above the
				// replay, which has no node for a quantized cache: not
				// yet explained.
				tol = 0.02
			}
			assert.InDelta(t, 0, e, tol, "compute buffer: %+.2f%%", 100*e)
		})
	}
}

// TestLlamaCppSWACells checks the SWA cache's size rule on its own:
// llama_kv_cache_iswa's GGML_PAD(min(kv_size, n_swa + n_ubatch), 256) in
// current builds, min(kv_size, GGML_PAD(n_swa + n_ubatch, n_pad)) before
// PR #17046, the full size with --swa-full, none before PR #13194, and
// the build windows it refuses.
func TestLlamaCppSWACells(t *testing.T) {
	w := llamaSWA{window: 1024, pattern: 6}
	for _, c := range []struct {
		v            LlamaCppVersion
		full, flash  bool
		perSeq, nSeq int64
		ub           int64
		want         int64
	}{
		{0, false, false, 8192, 1, 512, 1536},        // pad256(1536)
		{0, false, false, 8192, 1, 513, 1792},        // pad256(1537)
		{0, false, false, 1024, 1, 512, 1024},        // capped at kv_size
		{0, false, false, 4096, 4, 512, 4 * 1536},    // one stream per sequence
		{0, true, false, 8192, 1, 512, 8192},         // --swa-full
		{20250901, false, false, 8192, 1, 513, 1568}, // n_pad 32 without flash attention
		{20250901, false, true, 8192, 1, 513, 1792},  // n_pad 256 with it
		{20250901, false, false, 1100, 1, 513, 1100}, // min after the padding
		{20250401, false, false, 8192, 1, 512, 0},    // before PR #13194
	} {
		o := LlamaCppOptions{Version: c.v, SWAFull: c.full, FlashAttention: c.flash}
		got, err := llamaSWACells(w, &o, c.perSeq, c.nSeq, c.ub)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%+v", c)
	}
	for _, v := range []LlamaCppVersion{20250525, 20251101} {
		_, err := llamaSWACells(w, &LlamaCppOptions{Version: v}, 8192, 1, 512)
		require.Error(t, err, "%s", v)
		assert.Contains(t, err.Error(), "Job.LlamaCpp.Version")
	}
	// A model llama.cpp gives no SWA cache: a Mistral-style window.
	_, err := llamaSWACells(llamaSWA{}, &LlamaCppOptions{}, 8192, 1, 512)
	require.NoError(t, err)
	mistral := model.Spec{Family: "mistral", SlidingWindow: 4096, Layers: 32}
	assert.Zero(t, llamaCppSWALayout(&mistral).window)
}

// TestLlamaCppSWALayers checks set_swa_pattern's layer rule for the
// architectures of llama_model::load_hparams.
func TestLlamaCppSWALayers(t *testing.T) {
	slides := func(fam string, win int64, n int) string {
		s := model.Spec{Family: fam, SlidingWindow: win, Layers: int64(n)}
		w := llamaCppSWALayout(&s)
		var b strings.Builder
		for il := range n {
			if w.slides(il) {
				b.WriteByte('s')
			} else {
				b.WriteByte('f')
			}
		}
		return b.String()
	}
	assert.Equal(t, "sssssfsssssf", slides("gemma3_text", 1024, 12))
	assert.Equal(t, "sfsfsf", slides("gemma2", 0, 6)) // n_swa 4096 by default
	assert.Equal(t, "sfsfsf", slides("gpt_oss", 128, 6))
	assert.Equal(t, "sssfsssf", slides("cohere2", 4096, 8))
	assert.Equal(t, "sssfsssf", slides("llama4_text", 0, 8)) // chunked, 8192
	assert.Equal(t, "ffffff", slides("gemma3", 0, 6))        // no window key: none
	assert.Equal(t, "ffffff", slides("qwen2", 4096, 6))
}

// TestLlamaCppSWAPublished holds the SWA cache to the sizes a live
// llama-server allocated for Gemma 3 270M (18 layers, one KV head of 256,
// window 512) at --ctx-size 1024 with separate (not unified) slots, as
// published with the llama.cpp build 10107 (857c97607) in
// https://github.com/unslothai/unsloth/pull/7530 ("ctx 1024 with 3
// slots allocates 1536 cells / 27.0 MiB, but 4 slots allocates 1024
// cells / 18.0 MiB", read back from llama_kv_cache_iswa's "creating ...
// size = N cells"): each slot's n_ctx_seq padded to 256 (341 → 512 with
// three slots), the SWA cache min(512, 512 + 512) = 512 cells a slot.
func TestLlamaCppSWAPublished(t *testing.T) {
	s, ok := model.Lookup("gemma-3-1b")
	require.True(t, ok)
	s.Layers, s.Hidden, s.Intermediate, s.LayerTypes, s.Inventory = 18, 640, 2048, nil, nil
	require.Equal(t, int64(512), s.SlidingWindow)
	m, err := ModelOf(s)
	require.NoError(t, err)
	for _, c := range []struct {
		slots, cells int
		mib          float64
	}{{3, 1536, 27.0}, {4, 1024, 18.0}} {
		r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 1024, Parallel: c.slots}))
		require.NoError(t, err)
		assert.Equal(t, c.cells, r.Cells, "%d slots: non-SWA cells", c.slots)
		assert.Equal(t, c.cells, r.SWACells, "%d slots: SWA cells", c.slots)
		assert.Equal(t, 15, r.SWALayers)
		assert.Equal(t, c.mib, float64(r.KV+r.HostKV)/(1<<20), "%d slots", c.slots)
	}
}

// TestLlamaCppSWAEstimateAllocs: a sliding-window model's llama.cpp
// Estimate allocates nothing (the layers are walked in place), partly
// offloaded so that host and GPU caches both hold SWA layers.
func TestLlamaCppSWAEstimateAllocs(t *testing.T) {
	s, ok := model.Lookup("gpt-oss-20b")
	require.True(t, ok)
	m, err := ModelOf(s)
	require.NoError(t, err)
	j := llamaCppJob(m, LlamaCppOptions{Context: 32768, GPULayers: 15})
	r, err := LlamaCppBuffers(j)
	require.NoError(t, err)
	require.Equal(t, 12, r.SWALayers)
	// Layers 10..23 on the GPU (-ngl 15: the output layer and 14): 7 SWA
	// layers of 768 cells and 7 global ones of 32768; the host keeps the
	// other 5 and 5.
	per := int64(2 * 512 * 2) // K and V, 512 values each, f16
	assert.Equal(t, gpumem.Bytes(per*(7*32768+7*768)), r.KV)
	assert.Equal(t, gpumem.Bytes(per*(5*32768+5*768)), r.HostKV)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Estimate(j); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// BenchmarkLlamaCppSWAEstimate is a sliding-window model's llama.cpp
// Estimate (gpt-oss-20b, 32,768 cells, partly offloaded).
func BenchmarkLlamaCppSWAEstimate(b *testing.B) {
	s, _ := model.Lookup("gpt-oss-20b")
	m, err := ModelOf(s)
	if err != nil {
		b.Fatal(err)
	}
	j := llamaCppJob(m, LlamaCppOptions{Context: 32768, GPULayers: 15})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Estimate(j); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLlamaCppUBatchCap: llama.cpp caps n_ubatch at the padded n_ctx, not
// the one asked for: --ctx-size 300 with -ub 513 ran n_ctx 512 and
// n_ubatch 512, and its SWA cache min(512, 128 + 512) = 512 cells
// (testdata/llamacpp/swa/gemma3-tiny-c300-ub512-faoff-swa-s1.log).
func TestLlamaCppUBatchCap(t *testing.T) {
	m := mkggufSWAModel(t, "-arch gemma3 -swa 128 -layers 12 -embd 512 -ff 1024 -heads 4 -kv-heads 1 -head-dim 128 -vocab 2048 -ctx 8192 -type f16 -tied")
	r, err := LlamaCppBuffers(llamaCppJob(m, LlamaCppOptions{Context: 300, UBatch: 513}))
	require.NoError(t, err)
	assert.Equal(t, 512, r.Cells)
	assert.Equal(t, 512, r.UBatch)
	assert.Equal(t, 512, r.SWACells)
}
