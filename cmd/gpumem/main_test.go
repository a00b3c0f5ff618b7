package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "estimate")
	code, _, stderr = runCLI(t, "", "frobnicate")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `unknown command "frobnicate"`)
}

func TestInspect(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "inspect", "--model", "llama-2-7b")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "6,738,415,616", "Llama-2-7B's published parameter count")
	code, out, _ = runCLI(t, "", "inspect", "--model", "gpt2", "--json")
	require.Equal(t, 0, code)
	var r struct {
		Params  int64            `json:"params"`
		ByDType map[string]int64 `json:"bytes_by_dtype"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, int64(124_439_808), r.Params, "GPT-2's published parameter count")
	code, _, stderr = runCLI(t, "", "inspect", "--model", "no-such-model")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--model "no-such-model": not in the catalog`)
}

func TestInspectConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"model_type":"llama","hidden_size":4096,"intermediate_size":11008,
		"num_hidden_layers":32,"num_attention_heads":32,"vocab_size":32000,"torch_dtype":"float16"}`), 0o600))
	code, out, stderr := runCLI(t, "", "inspect", "--config", p)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "6,738,415,616")
}

func TestEstimate(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "estimate", "--model", "llama-3-8b", "--train", "--batch", "4", "--seq", "4096", "--gpu", "h100")
	require.Equal(t, exitDoesNotFit, code, stderr)
	assert.Contains(t, out, "does NOT fit on NVIDIA H100 80GB HBM3")
	assert.Contains(t, stderr, "does not fit on NVIDIA H100 80GB HBM3")
	assert.Contains(t, out, "allocated peak (max_memory_allocated)")

	code, out, stderr = runCLI(t, "", "estimate", "--model", "llama-2-7b", "--infer", "--generate", "50", "--seq", "6",
		"--memory", "40GB", "--json")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Allocated  int64            `json:"allocated_peak"`
		Reserved   int64            `json:"reserved_peak"`
		Device     int64            `json:"device_peak"`
		Phase      string           `json:"phase"`
		Fits       bool             `json:"fits"`
		Shortfall  int64            `json:"shortfall"`
		Components map[string]int64 `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.True(t, r.Fits)
	assert.Zero(t, r.Shortfall)
	assert.Equal(t, "decode", r.Phase)
	var sum int64
	for _, v := range r.Components {
		sum += v
	}
	assert.Equal(t, r.Device, sum)
	assert.Less(t, r.Allocated, r.Reserved)
	// litgpt's measured 13.52 GB for this job (testdata/published).
	assert.InEpsilon(t, 13.52e9, float64(r.Allocated), 0.05)
}

func TestEstimateBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"estimate", "--model", "gpt2"}, "give one of --train and --infer"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--optimizer", "adamw_hf"}, `--optimizer "adamw_hf"`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--precision", "fp64"}, `--precision "fp64"`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--gpu", "a99"}, `--gpu "a99": not in the catalog`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--memory", "32Gb"}, "bits"},
		{[]string{"estimate", "--model", "gpt2", "--train", "--batch", "0"}, "--batch 0: invalid value"},
	}
	for _, tc := range tests {
		code, _, stderr := runCLI(t, "", tc.args...)
		assert.NotZero(t, code, tc.args)
		assert.Contains(t, stderr, tc.want, tc.args)
	}
}

func TestOOM(t *testing.T) {
	t.Parallel()
	msg := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 23.69 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 22.56 GiB memory in use. Of the allocated memory 21.90 GiB is allocated by PyTorch, and 312.00 MiB is reserved by PyTorch but unallocated."
	code, out, stderr := runCLI(t, "Traceback (most recent call last):\n  ...\n"+msg+"\n", "oom")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "requested")
	assert.Contains(t, out, "2.50 GiB")
	assert.Contains(t, out, "23.69 GiB")
	code, _, stderr = runCLI(t, "all is well\n", "oom")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no out-of-memory message")
}

func TestDevices(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "", "devices")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "NVIDIA H100 80GB HBM3")
}

func TestInspectOptimizerAndActivations(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "inspect", "--model", "llama-2-7b", "--optimizer", "adamw", "--batch", "1", "--seq", "1024", "--json")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Params      int64  `json:"params"`
		State       *int64 `json:"optimizer_state_bytes"`
		Activations *int64 `json:"activations_bytes"`
		AttnPeak    *int64 `json:"attention_peak_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.NotNil(t, r.State)
	// torch AdamW: two fp32 moments per parameter + a 4-byte step per
	// tensor (291 tensors in Llama-2-7B).
	assert.Equal(t, 8*r.Params+4*291, *r.State)
	require.NotNil(t, r.Activations)
	require.NotNil(t, r.AttnPeak)
	assert.Positive(t, *r.Activations)
	code, _, stderr = runCLI(t, "", "inspect", "--model", "gpt2", "--optimizer", "nope")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--optimizer "nope"`)
}

func TestLeak(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "leak", "--capacity", "24GiB", "--json", "../../leak/testdata/logs/llava-24gb-leak.log")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Samples      int      `json:"samples"`
		Shape        string   `json:"shape"`
		Leak         bool     `json:"leak"`
		Accelerating bool     `json:"accelerating"`
		BytesPerStep *float64 `json:"bytes_per_step"`
		OOMStep      *float64 `json:"oom_step"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.True(t, r.Leak)
	assert.True(t, r.Accelerating)
	require.NotNil(t, r.OOMStep)
	// LLaVA on a 24 GB card's leaking log (docs/scenarios.md): the job died
	// near step 1000 on a 24 GB card.
	assert.InDelta(t, 1000, *r.OOMStep, 100)
	code, _, stderr = runCLI(t, "", "leak", "--capacity", "24Gb", "-")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "bits")
}

func TestOOMJSON(t *testing.T) {
	t.Parallel()
	msg := "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.31 GiB already allocated; 9.44 MiB free; 9.75 GiB reserved in total by PyTorch)"
	code, out, stderr := runCLI(t, msg, "oom", "--json", "-")
	require.Equal(t, 0, code, stderr)
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	for _, k := range []string{"found", "framework", "device", "requested", "capacity", "free", "allocated", "reserved",
		"reserved_unallocated", "other_processes", "cause", "advice"} {
		assert.Contains(t, r, k)
	}
	assert.Equal(t, true, r["found"])
	assert.Equal(t, float64(20<<20), r["requested"])
}

// writeSafetensors writes a safetensors file (docs/reference.md#safetensors-header: u64
// little-endian header length, JSON header padded with spaces to a
// multiple of 8, then the data) with zeroed tensors.
func writeSafetensors(t *testing.T, path string, header string, dataBytes int) {
	t.Helper()
	for len(header)%8 != 0 {
		header += " "
	}
	var b bytes.Buffer
	n := uint64(len(header))
	for i := 0; i < 8; i++ {
		b.WriteByte(byte(n >> (8 * i)))
	}
	b.WriteString(header)
	b.Write(make([]byte, dataBytes))
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o600))
}

func TestInspectSafetensors(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "model.safetensors")
	writeSafetensors(t, p, `{"model.embed_tokens.weight":{"dtype":"BF16","shape":[16,8],"data_offsets":[0,256]},`+
		`"lm_head.weight":{"dtype":"F32","shape":[16,8],"data_offsets":[256,768]}}`, 768)
	code, out, stderr := runCLI(t, "", "inspect", "--safetensors", p, "--json")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Params  int64            `json:"params"`
		ByDType map[string]int64 `json:"bytes_by_dtype"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, int64(256), r.Params)
	assert.Equal(t, int64(256), r.ByDType["bf16"])
	assert.Equal(t, int64(512), r.ByDType["fp32"])
}

func TestInspectSafetensorsTruncated(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "bad.safetensors")
	writeSafetensors(t, p, `{"w":{"dtype":"BF16","shape":[16,8],"data_offsets":[0,256]}}`, 10)
	code, _, stderr := runCLI(t, "", "inspect", "--safetensors", p)
	assert.Equal(t, exitBadInput, code)
	assert.Contains(t, stderr, p, "the error names the file")
}

func TestPlan(t *testing.T) {
	code, out, errOut := runCLI(t, "", "plan", "--model", "llava-1.5-7b", "--train", "--batch", "4", "--seq", "2048",
		"--images", "1", "--attention", "flash", "--gpu", "rtx 3090", "--target-batch", "32", "--allow", "adamw8bit,bf16,offload,lora")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"batch 4 × 2048 tokens, 8 accumulation steps", "* model → LoRA r=16", "  offload optimizer state to the CPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, "", "plan", "--model", "llava-1.5-7b", "--train", "--batch", "4", "--gpu", "rtx 3090", "--json")
	if code != 1 {
		t.Fatalf("full training on 24 GB: exit %d, want 1", code)
	}
	var e struct {
		Fits      bool     `json:"fits"`
		Shortfall int64    `json:"shortfall"`
		Hints     []string `json:"hints"`
		Ladder    []struct {
			Change string `json:"change"`
		} `json:"ladder"`
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err, out)
	}
	if e.Fits || e.Shortfall <= 0 || len(e.Hints) == 0 || len(e.Ladder) == 0 {
		t.Errorf("does-not-fit JSON: %+v", e)
	}
	code, out, _ = runCLI(t, "", "plan", "--model", "qwen2.5-0.5b", "--infer", "--memory", "24GiB", "--max-seq", "131072", "--json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"batch", "seq_len", "grad_accum", "checkpointing", "attention", "optimizer", "offload", "need", "headroom", "reason", "ladder"} {
		if _, ok := p[k]; !ok {
			t.Errorf("plan JSON lacks %q", k)
		}
	}
	for _, bad := range [][]string{
		{"--allow", "warp-drive"}, {"--allow", "heads=0"}, {"--headroom", "1.5"}, {}, // no --gpu
	} {
		args := append([]string{"plan", "--model", "gpt2", "--infer"}, bad...)
		if len(bad) > 0 {
			args = append(args, "--memory", "8GiB")
		}
		if code, _, errOut := runCLI(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", bad, code, errOut)
		}
	}
}

func TestPlanDeepSpeed(t *testing.T) {
	ds := filepath.Join(t.TempDir(), "ds.json")
	code, out, errOut := runCLI(t, "", "plan", "--model", "llama-3-8b", "--train", "--batch", "2", "--seq", "4096",
		"--attention", "flash", "--gpus", "8", "--zero", "3", "--gpu", "h100", "--target-batch", "256", "--deepspeed", ds, "--hf-args")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	raw, err := os.ReadFile(ds)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Train int `json:"train_batch_size"`
		Micro int `json:"train_micro_batch_size_per_gpu"`
		Accum int `json:"gradient_accumulation_steps"`
		Zero  struct {
			Stage int `json:"stage"`
		} `json:"zero_optimization"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	if c.Zero.Stage != 3 || c.Train != c.Micro*c.Accum*8 || c.Train < 256 {
		t.Errorf("DeepSpeed config %+v", c)
	}
	if !strings.Contains(out, "--per_device_train_batch_size "+strconv.Itoa(c.Micro)) {
		t.Errorf("no TrainingArguments line matching the config:\n%s", out)
	}
	if code, _, _ := runCLI(t, "", "estimate", "--model", "gpt2", "--train", "--zero", "5"); code != 2 {
		t.Errorf("--zero 5: exit %d, want 2", code)
	}
}

// allocatedOf reads the allocated peak of gpumem estimate --json's reply.
func allocatedOf(t *testing.T, out string) int64 {
	t.Helper()
	var r struct {
		Allocated int64 `json:"allocated_peak"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r.Allocated
}

// estimatePeak runs gpumem estimate --json with args and returns the
// allocated peak, failing when the command does not succeed.
func estimatePeak(t *testing.T, args ...string) int64 {
	t.Helper()
	code, out, stderr := runCLI(t, "", append(append([]string{"estimate"}, args...), "--json")...)
	require.Equal(t, exitOK, code, stderr)
	return allocatedOf(t, out)
}
