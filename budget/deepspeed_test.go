package budget

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// dsRows prints rows as DeepSpeed's estimators do: "%.2f" of GiB.
func dsRows(rs []DeepSpeedEstimate) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%.2f|%.2f", float64(r.CPU)/(1<<30), float64(r.GPU)/(1<<30)))
	}
	return out
}

// The printed tables of DeepSpeed's documentation
// (docs/code-docs/source/memory.rst, "cold" rows for t5-3b with
// total_params=2851e6, largest_layer_params=32e6, 1 node × 8 GPUs) and of
// Hugging Face's DeepSpeed guide (bigscience/T0_3B, 2783M total, 65M
// largest layer, on 1 and 2 GPUs). The documented ZeRO-2 no-offload row
// (15.93GB) predates DeepSpeed 0.14.3's formula (4P + 16P/N → 2P +
// 18P/N); the current formula gives 11.28 GiB.
func TestDeepSpeedEstimators(t *testing.T) {
	t.Parallel()
	z3, err := DeepSpeedZero3(2851e6, 32e6, 8, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"71.69|0.12", "127.45|0.12", "63.72|0.78", "127.45|0.78", "1.43|6.09", "127.45|6.09"}
	if got := dsRows(z3[:]); !reflect.DeepEqual(got, want) {
		t.Errorf("t5-3b ZeRO-3 on 8 GPUs:\n got %v\nwant %v", got, want)
	}
	z2, err := DeepSpeedZero2(2851e6, 8, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := dsRows(z2[:]); !reflect.DeepEqual(got, []string{"127.45|5.31", "127.45|11.28"}) {
		t.Errorf("t5-3b ZeRO-2 on 8 GPUs: %v", got)
	}
	// T0_3B: the exact counts are not printed; 2,783,930,000 and
	// 65,775,000 lie in the window that reproduces both tables.
	for _, tt := range []struct {
		gpus int
		want []string
	}{
		{1, []string{"70.00|0.25", "70.00|0.25", "62.23|5.43", "62.23|5.43", "0.37|46.91", "15.56|46.91"}},
		{2, []string{"70.00|0.25", "70.00|0.25", "62.23|2.84", "62.23|2.84", "0.74|23.58", "31.11|23.58"}},
	} {
		z3, err := DeepSpeedZero3(2_783_930_000, 65_775_000, tt.gpus, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := dsRows(z3[:]); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("T0_3B on %d GPU(s):\n got %v\nwant %v", tt.gpus, got, tt.want)
		}
	}
	for _, bad := range []error{
		func() error { _, err := DeepSpeedZero2(-1, 1, 1, 0); return err }(),
		func() error { _, err := DeepSpeedZero2(1, 0, 1, 0); return err }(),
		func() error { _, err := DeepSpeedZero3(10, 11, 1, 1, 0); return err }(),
		func() error { _, err := DeepSpeedZero3(10, 1, 1, 0, 0); return err }(),
	} {
		if !errors.Is(bad, gpumem.ErrInvalid) {
			t.Errorf("bad input: %v, want ErrInvalid", bad)
		}
	}
}

// A plan's DeepSpeed config is valid JSON with documented keys only, and
// round-trips through the Go struct.
func TestPlanDeepSpeedConfig(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{}, Attention: model.Flash,
		Batch: 4, SeqLen: 2048, Parallel: Parallel{DataParallel: 8, Stage: 2}}
	p, err := Allocate(40<<30, j, &Limits{TargetGlobalBatch: 32, Offload: OffloadOptimizer})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.DeepSpeed()
	if err != nil {
		t.Fatal(err)
	}
	if c.TrainBatchSize != p.Batch*p.GradAccum*8 || c.TrainMicroBatchSizePerGPU != p.Batch || c.ZeroOptimization.Stage != 2 || c.BF16 == nil {
		t.Errorf("config %+v for plan batch %d × %d", c, p.Batch, p.GradAccum)
	}
	raw, err := c.MarshalIndent()
	if err != nil {
		t.Fatal(err)
	}
	var back DeepSpeedConfig
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil || !reflect.DeepEqual(back, c) {
		t.Errorf("round trip: %v\n%s", err, raw)
	}
	documented := map[string]bool{"train_batch_size": true, "train_micro_batch_size_per_gpu": true, "gradient_accumulation_steps": true,
		"gradient_clipping": true, "fp16": true, "bf16": true, "zero_optimization": true, "activation_checkpointing": true,
		"wall_clock_breakdown": true, "zero_allow_untested_optimizer": true}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if !documented[k] {
			t.Errorf("undocumented key %q", k)
		}
	}
	args, err := p.HFTrainingArguments()
	if err != nil || args["per_device_train_batch_size"] != p.Batch || args["bf16"] != true || args["optim"] != "adamw_torch" {
		t.Errorf("TrainingArguments %v, %v", args, err)
	}
	j.Mode = Prefill
	j.Optimizer = nil
	if _, err := (Plan{Job: j}).DeepSpeed(); !errors.Is(err, gpumem.ErrUnsupported) {
		t.Errorf("inference plan: %v", err)
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
