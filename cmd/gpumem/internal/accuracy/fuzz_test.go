package accuracy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/budget"
)

// FuzzJob decodes arbitrary job records, as the data files hold them,
// and builds their budget.Job: an error or a job, never a panic; a job
// built is one Estimate accepts or refuses with an error.
func FuzzJob(f *testing.F) {
	if b, err := os.ReadFile("../../../../testdata/published/jobs.jsonl"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			var row struct {
				Job json.RawMessage `json:"job"`
			}
			if json.Unmarshal([]byte(line), &row) == nil && len(row.Job) > 0 {
				f.Add([]byte(row.Job))
			}
		}
	}
	f.Add([]byte(`{"catalog":"llama-3-8b","mode":"train","batch":1,"seq":1048576}`))
	f.Add([]byte(`{"config":{"model_type":"llama","num_hidden_layers":65536,"hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"vocab_size":1000},"mode":"train"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var j Job
		if err := json.Unmarshal(b, &j); err != nil {
			return
		}
		bj, err := j.Budget()
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		need, err := budget.Estimate(bj)
		if err == nil && need.Device() < 0 {
			t.Fatalf("negative total %d for %s", need.Device(), b)
		}
	})
}
