package enginelog_test

import (
	"math"
	"os"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem/enginelog"
)

// TestEngineLogGate compares gpumem's runtime models with every figure of
// testdata/enginelogs whose job can be stated to budget (enginelog.Compare:
// the KV cache, exact arithmetic, 2%; the weights, 2%; llama.cpp's compute
// buffer and vLLM's KV space, blocks and concurrency, 5%). A figure outside
// its tolerance must be listed, with its mechanism, in misses.jsonl, and
// every listed miss must still miss (a ratchet: a fix removes its line).
// Logs with neither a catalog model nor the hyperparameters llama.cpp
// prints, and figures budget does not model, are skipped with the reason,
// counted by reason.
func TestEngineLogGate(t *testing.T) {
	c, err := enginelog.ReadCorpus(os.DirFS("../testdata"), "enginelogs")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(c.Entries), 100)
	res, err := enginelog.Compare(c)
	require.NoError(t, err)
	newMisses, stale := res.Unlisted(c.Misses)
	for _, r := range newMisses {
		t.Errorf("%s: %s logged %.4g, modelled %.4g (%+.1f%%, tolerance %.0f%%): a new miss — fix the model or list it with its mechanism in misses.jsonl",
			r.File, r.Figure, r.Logged, r.Estimated, 100*r.Err(), 100*r.Tol)
	}
	for _, s := range stale {
		t.Errorf("misses.jsonl: %s: remove its line", s)
	}
	total, within, fromLog := 0, 0, 0
	for _, st := range enginelog.Stats(res.Rows) {
		t.Logf("%-36s n=%-3d within=%-3d median |err| %5.2f%%  worst %+7.1f%% (%s)", st.Kind, st.N, st.Within, 100*st.Median, 100*st.Worst, st.WorstFile)
		total += st.N
		within += st.Within
	}
	for _, r := range res.Rows {
		if r.Shape == "log hparams" || r.Shape == "thread hparams" {
			fromLog++
		}
		t.Logf("  %-48s %-34s logged %12.4g modelled %12.4g %+7.2f%% (%s)", r.File, r.Figure, r.Logged, r.Estimated, 100*r.Err(), r.Shape)
	}
	reasons := make([]string, 0, len(res.Skips))
	for k := range res.Skips {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		t.Logf("skipped %3d × %s", res.Skips[k], k)
	}
	t.Logf("%d figures compared from %d logs (%d on a shape llama.cpp printed in the log or its thread), %d within tolerance, %d listed misses", total, res.Logs, fromLog, within, len(c.Misses))
	require.Positive(t, total)
	assert.Len(t, res.Rows, total)
}

// TestCompareStats checks the statistics on rows whose errors are known.
func TestCompareStats(t *testing.T) {
	rows := []enginelog.Row{
		{File: "a", Kind: "KV", Logged: 100, Estimated: 101, Tol: 0.02},
		{File: "b", Kind: "KV", Logged: 100, Estimated: 90, Tol: 0.02},
		{File: "c", Kind: "KV", Logged: 100, Estimated: 103, Tol: 0.02, Slack: 0.02},
		{File: "d", Kind: "blocks", Logged: 10, Estimated: 10, Tol: 0.05},
	}
	st := enginelog.Stats(rows)
	require.Len(t, st, 2)
	assert.Equal(t, "KV", st[0].Kind)
	assert.Equal(t, 3, st[0].N)
	assert.Equal(t, 2, st[0].Within)
	assert.InDelta(t, 0.03, st[0].Median, 1e-12)
	assert.InDelta(t, -0.10, st[0].Worst, 1e-12)
	assert.InDelta(t, 0.01, st[0].Bias, 1e-12)
	assert.InDelta(t, 1.0/3, st[0].Under, 1e-12)
	assert.Equal(t, "b", st[0].WorstFile)
	assert.Equal(t, 1, st[1].Within)
	assert.Zero(t, st[1].Median)
	res := enginelog.Result{Rows: rows}
	nm, stale := res.Unlisted(map[string]enginelog.Miss{"a | ": {File: "a"}, "z | x": {File: "z", Figure: "x"}})
	require.Len(t, nm, 1)
	assert.Equal(t, "b", nm[0].File)
	assert.Equal(t, []string{"a |  is within tolerance", "z | x is no longer compared"}, stale)
	assert.False(t, math.IsNaN(st[0].Median))
}

// BenchmarkCompareCorpus compares the corpus's figures with budget's
// runtime models, as gpumem accuracy does (the logs read and parsed once).
func BenchmarkCompareCorpus(b *testing.B) {
	c, err := enginelog.ReadCorpus(os.DirFS("../testdata"), "enginelogs")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := enginelog.Compare(c); err != nil {
			b.Fatal(err)
		}
	}
}
