package request_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/request"
)

// fieldOf returns the request field an error names, failing when it is
// not a *request.Error.
func fieldOf(t *testing.T, err error) string {
	t.Helper()
	var e *request.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *request.Error", err, err)
	}
	return e.Field
}

// TestDecode: fields left out take the flags' defaults; the body is read
// strictly, and an error names the field.
func TestDecode(t *testing.T) {
	req, err := request.Decode([]byte(`{"model": "gpt2", "mode": "train", "lora_targets": ["c_attn"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Batch != 1 || req.Seq != 2048 || req.GradAccum != 1 || req.Optimizer != "adamw" || req.Attention != "sdpa" ||
		req.Checkpointing != "none" || req.Loss != "full" || req.Model != "gpt2" || len(req.LoRATargets) != 1 {
		t.Errorf("decoded %+v", req)
	}
	for body, field := range map[string]string{
		`{"batch": "four"}`:       "batch",
		`{"bacth": 4}`:            "bacth",
		`{"lora_targets": "q"}`:   "lora_targets",
		`{"model": "gpt2"} {}`:    "",
		`[1, 2]`:                  "",
		``:                        "",
		`{"n_gpu_layers": "all"}`: "n_gpu_layers",
	} {
		_, err := request.Decode([]byte(body))
		if err == nil {
			t.Errorf("%s: decoded", body)
			continue
		}
		if got := fieldOf(t, err); got != field {
			t.Errorf("%s: field %q (%v), want %q", body, got, err, field)
		}
	}
}

// TestPrepareErrors: a value the library refuses is an *Error naming the
// request field, never a flag.
func TestPrepareErrors(t *testing.T) {
	c := request.NewCache(0)
	for body, field := range map[string]string{
		`{"model": "gpt2"}`:                                                          "mode",
		`{"model": "no-such-model", "mode": "infer"}`:                                "model",
		`{"model": "gpt2", "mode": "infer", "gpu": "h200x"}`:                         "gpu",
		`{"model": "gpt2", "mode": "infer", "memory": "80"}`:                         "memory",
		`{"model": "gpt2", "mode": "train", "optimizer": "x"}`:                       "optimizer",
		`{"model": "gpt2", "mode": "infer", "lora_rank": -1}`:                        "lora_rank",
		`{"model": "gpt2", "mode": "train", "tp": 3, "gpus": 4}`:                     "tp",
		`{"config": [1], "mode": "infer"}`:                                           "config",
		`{"model": "gpt2", "config": {}, "mode": "infer"}`:                           "config",
		`{"model": "gpt2", "mode": "infer", "runtime": "vllm"}`:                      "gpu",
		`{"model": "gpt2", "mode": "train", "backend": "tpu"}`:                       "backend",
		`{"model": "gpt2", "mode": "train", "lora_rank": 8, "lora_code": "axolotl"}`: "lora_code",
		`{"model": "gpt2", "mode": "train", "lora_code": "litgpt"}`:                  "lora_code",
		`{"model": "gpt2", "mode": "train", "lora_rank": 8, "lora_dropout": 1}`:      "lora_dropout",
		`{"model": "gpt2", "mode": "train", "lora_dropout": 0.05}`:                   "lora_dropout",
	} {
		req, err := request.Decode([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		_, err = c.Prepare(req)
		if err == nil {
			t.Errorf("%s: prepared", body)
			continue
		}
		if got := fieldOf(t, err); got != field || strings.Contains(err.Error(), "--") {
			t.Errorf("%s: field %q, message %q; want field %q in request terms", body, got, err, field)
		}
	}
}

// TestPrepareCache: the same model and fine-tuning setup is built once,
// whatever the batch, sequence or GPU; a change of LoRA rank or of the
// inline config's bytes builds another; the bound holds.
func TestPrepareCache(t *testing.T) {
	config, err := os.ReadFile("../model/configs/llama-3.2-1b.json")
	if err != nil {
		t.Fatal(err)
	}
	inline := `{"config": ` + string(config) + `, "mode": "train", "lora_rank": 8`
	c := request.NewCache(0)
	prepare := func(body string) request.Prepared {
		t.Helper()
		req, err := request.Decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Prepare(req)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return p
	}
	steps := []struct {
		body  string
		built int64
	}{
		{`{"model": "llama-3.2-1b", "mode": "train", "lora_rank": 8}`, 1},
		{`{"model": "llama-3.2-1b", "mode": "train", "lora_rank": 8, "batch": 4, "gpu": "h100"}`, 1},
		{`{"model": "llama-3.2-1b", "mode": "train", "lora_rank": 16}`, 2},
		{inline + `}`, 3},
		{inline + `, "seq": 512, "memory": "24GiB"}`, 3},
		{`{"config": ` + strings.Replace(string(config), `"vocab_size": 128256`, `"vocab_size": 128000`, 1) + `, "mode": "train", "lora_rank": 8}`, 4},
	}
	for _, s := range steps {
		p := prepare(s.body)
		if c.Built() != s.built {
			t.Errorf("%.80s: %d models built, want %d", s.body, c.Built(), s.built)
		}
		if p.Job.Mode != budget.Training || p.Job.Model.Spec().Layers != 16 {
			t.Errorf("%.80s: job %v of %d layers", s.body, p.Job.Mode, p.Job.Model.Spec().Layers)
		}
	}
	if c.Looked() != 1 {
		t.Errorf("%d catalog look-ups, want 1", c.Looked())
	}
	// The same job from the catalog and from the catalog's config.json
	// inline: the same estimate.
	a, b := prepare(`{"model": "llama-3.2-1b", "mode": "train", "lora_rank": 8, "gpu": "l4"}`), prepare(inline+`, "gpu": "l4"}`)
	ra, err := a.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	if ra.Need.Device() != rb.Need.Device() || ra.Device.Name != "NVIDIA L4" || !ra.Fits {
		t.Errorf("catalog %v on %s (fits %v), inline %v", ra.Need.Device(), ra.Device.Name, ra.Fits, rb.Need.Device())
	}
	c.SetLimit(2)
	for _, r := range []string{"4", "5", "6"} {
		prepare(`{"model": "llama-3.2-1b", "mode": "train", "lora_rank": ` + r + `}`)
		if n := c.Models(); n > 2 {
			t.Errorf("%d models kept, above the bound of 2", n)
		}
	}
}

// TestPrepareBackend: "backend" reaches the job, and a CPU job's
// activations are the CPU kernels' (eager attention with dropout: the
// noise is saved in the activations' dtype, more than CUDA's 1-byte mask).
func TestPrepareBackend(t *testing.T) {
	c := request.NewCache(0)
	estimate := func(body string) (budget.Job, budget.Breakdown) {
		t.Helper()
		req, err := request.Decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Prepare(req)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		b, err := budget.Estimate(p.Job)
		if err != nil {
			t.Fatal(err)
		}
		return p.Job, b
	}
	const job = `{"model": "gpt2", "mode": "train", "batch": 4, "seq": 256, "attention": "eager", "precision": "fp32", "dropout": true`
	cuda, onCUDA := estimate(job + `}`)
	cpu, onCPU := estimate(job + `, "backend": "cpu"}`)
	if cuda.Backend != model.CUDA || cpu.Backend != model.CPU {
		t.Fatalf("backends %v and %v, want cuda and cpu", cuda.Backend, cpu.Backend)
	}
	if onCPU.Activations <= onCUDA.Activations {
		t.Errorf("CPU activations %v not above CUDA's %v with dropout", onCPU.Activations, onCUDA.Activations)
	}
}

// TestPrepareSSMKernel: "ssm_kernel" reaches the job, and a value that is
// neither kernel is refused naming the field.
func TestPrepareSSMKernel(t *testing.T) {
	c := request.NewCache(0)
	req, err := request.Decode([]byte(`{"model": "mamba-130m", "mode": "train", "ssm_kernel": "sequential"}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Job.SSMKernel != model.SequentialSSM {
		t.Errorf("SSMKernel %v, want sequential", p.Job.SSMKernel)
	}
	req, err = request.Decode([]byte(`{"model": "mamba-130m", "mode": "train", "ssm_kernel": "triton"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prepare(req); err == nil || fieldOf(t, err) != "ssm_kernel" {
		t.Errorf("ssm_kernel triton: %v", err)
	}
}
