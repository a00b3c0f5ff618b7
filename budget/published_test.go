package budget

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"

	"github.com/gpumem/gpumem/model"
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

func mustModel(t *testing.T, s model.Spec) Model {
	t.Helper()
	m, err := ModelOf(s)
	require.NoError(t, err)
	return m
}
