package budget

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// A plan's DeepSpeed and accelerate configs print as the files the
// launchers read, and a Breakdown, a Parallel and a Device print their
// figures, not Go's struct syntax.
func TestPrintedResults(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.Flash, Batch: 2, SeqLen: 2048}
	plan, err := AllocateFleet(Fleet{Nodes: 1, GPUsPerNode: 4, Free: 40 * gpumem.GiB}, j, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := plan.DeepSpeed()
	if err != nil {
		t.Fatal(err)
	}
	want, err := ds.MarshalIndent()
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.String(); got != string(want) || !strings.Contains(got, `"zero_optimization"`) {
		t.Errorf("DeepSpeedConfig.String() =\n%s\nwant MarshalIndent's\n%s", got, want)
	}
	acc, err := plan.Accelerate()
	if err != nil {
		t.Fatal(err)
	}
	yaml, err := acc.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if got := acc.String(); got != string(yaml) || !strings.Contains(got, "num_processes: 4") {
		t.Errorf("AccelerateConfig.String() =\n%s\nwant YAML's\n%s", got, yaml)
	}
	if got, want := plan.Job.Parallel.String(), plan.Job.Parallel.Describe(); got != want || !strings.HasPrefix(got, "DP 4") {
		t.Errorf("Parallel.String() = %q, want Describe's %q starting DP 4", got, want)
	}
	if got := (Parallel{}).String(); got != "one GPU" {
		t.Errorf("zero Parallel prints %q, want one GPU", got)
	}
	if got := (Parallel{DataParallel: 4, FSDP: true, Stage: 7}).String(); got != "DP 4, FSDP stage 7" {
		t.Errorf("FSDP stage 7 prints %q, want the stage named", got)
	}
	need, err := Estimate(j)
	if err != nil {
		t.Fatal(err)
	}
	s := need.String()
	for _, part := range []string{"device " + need.Device().String(), "reserved " + need.Reserved().String(),
		"allocated " + need.Allocated().String(), "at " + need.Phase.String(), "weights " + need.Weights.String()} {
		if !strings.Contains(s, part) {
			t.Errorf("Breakdown prints %q, without %q", s, part)
		}
	}
	if strings.Contains(s, "kv_cache") || strings.Contains(s, "{") {
		t.Errorf("Breakdown prints %q: a zero component or struct syntax", s)
	}
	if got := (Breakdown{}).String(); got != "device 0 B (reserved 0 B, allocated 0 B)" {
		t.Errorf("zero Breakdown prints %q", got)
	}
}
