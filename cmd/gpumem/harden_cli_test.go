package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/request"
)

// Issue 17, hardening: the command line refuses what a job script with
// an unset variable or a typo would pass, agrees with itself on what
// fits, and never echoes control characters from its input.

// TestEmptyOrZeroTarget: an empty or zero --memory or --gpu is an error,
// not "no GPU named" (exit 0 for a 157 GiB job); a size without a unit
// is an error that suggests one; the layout counts say their range.
func TestEmptyOrZeroTarget(t *testing.T) {
	t.Parallel()
	job := []string{"--model", "llama-3-8b", "--train"}
	tests := []struct {
		args []string
		want []string // parts of standard error
	}{
		{[]string{"estimate", "--memory", "0"}, []string{`--memory "0"`, "at least 1B"}},
		{[]string{"estimate", "--memory", "0GiB"}, []string{`--memory "0GiB"`, "at least 1B"}},
		{[]string{"estimate", "--memory", ""}, []string{`--memory ""`, "empty"}},
		{[]string{"estimate", "--memory", "  "}, []string{`--memory "  "`, "empty"}},
		{[]string{"estimate", "--gpu", ""}, []string{`--gpu ""`, "empty"}},
		{[]string{"estimate", "--gpu="}, []string{`--gpu ""`, "empty"}},
		{[]string{"plan", "--memory", "0"}, []string{`--memory "0"`}},
		{[]string{"plan", "--gpu", ""}, []string{`--gpu ""`}},
		{[]string{"estimate", "--memory", "80"}, []string{`--memory "80"`, "80GiB", "80GB"}},
		{[]string{"estimate", "--memory", "79.5"}, []string{`--memory "79.5"`, "79.5GiB", "79.5GB"}},
		{[]string{"plan", "--memory", "24"}, []string{`--memory "24"`, "24GiB", "24GB"}},
		{[]string{"estimate", "--memory", "81920"}, []string{`--memory "81920"`, "81920MiB (nvidia-smi's unit)", "81920GiB"}},
		{[]string{"plan", "--memory", "24GiB", "--headroom", "2"}, []string{`--headroom "2"`, "2GiB"}},
		{[]string{"estimate", "--model", "", "--memory", "80GiB"}, []string{`--model ""`, "empty"}},
		{[]string{"estimate", "--memory", "80GiB", "--chart", ""}, []string{`--chart ""`, "empty"}},
		{[]string{"estimate", "--gpus", "0"}, []string{"--gpus 0", "1 to 65536"}},
		{[]string{"estimate", "--gpus", "70000"}, []string{"--gpus 70000", "1 to 65536"}},
		{[]string{"estimate", "--nodes", "0"}, []string{"--nodes 0", "1 to 65536"}},
		{[]string{"plan", "--gpu", "h100", "--nodes", "0"}, []string{"--nodes 0", "1 to 65536"}},
		{[]string{"estimate", "--tp", "0"}, []string{"--tp 0", "1 to 65536"}},
		{[]string{"estimate", "--pp", "0"}, []string{"--pp 0", "1 to 65536"}},
	}
	for _, tc := range tests {
		args := append(append([]string{tc.args[0]}, job...), tc.args[1:]...)
		code, out, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitBadInput, code, "%q: %s", args, stderr)
		assert.Empty(t, out, args)
		for _, w := range tc.want {
			assert.Contains(t, stderr, w, args)
		}
	}
	for _, args := range [][]string{
		{"leak", "--capacity", "0", leakLog},
		{"leak", "--capacity", "", leakLog},
		{"leak", "--capacity", "24", leakLog},
		{"leak", "--gpu", "", leakLog},
		{"serve", "--max-body", "64", "--addr", "127.0.0.1:99999"}, // a bad port: the test cannot hang serving
		{"serve", "--addr", "", "--max-body", "0"},
	} {
		code, _, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitBadInput, code, "%q: %s", args, stderr)
		assert.Contains(t, stderr, "--"+strings.TrimPrefix(args[1], "--")+` "`, args)
	}
	_, _, stderr := runCLI(t, "", "leak", "--capacity", "24", leakLog)
	assert.Contains(t, stderr, "24GiB")
	// A size in bytes is written with its unit, B, or as an integer from
	// 1 MiB up (no GPU has less, no GPU has a million GiB).
	for _, v := range []string{"85899345920B", "85899345920", "1048576"} {
		code, _, stderr := runCLI(t, "", "estimate", "--model", "gpt2", "--infer", "--seq", "1024", "--memory", v)
		assert.NotEqual(t, exitBadInput, code, "%s: %s", v, stderr)
	}
	code, _, stderr := runCLI(t, "", "estimate", "--model", "gpt2", "--infer", "--seq", "1024", "--memory", "1048575")
	assert.Equal(t, exitBadInput, code, stderr)
	// The layout counts in range are accepted.
	code, _, stderr = runCLI(t, "", "estimate", "--model", "gpt2", "--train", "--seq", "1024", "--gpus", "1", "--nodes", "1")
	assert.Equal(t, exitOK, code, stderr)
}

// TestOneLargestValue: the chart's title, plan and budget.LongestSeqLen /
// MaxBatch give the same largest sequence length and batch for the same
// job and GPU, with the headroom stated where it is applied; estimate
// agrees at the edge (fits at the value, not one above).
func TestOneLargestValue(t *testing.T) {
	t.Parallel()
	flags := []string{"--model", "llama-3-8b", "--train", "--batch", "4", "--seq", "4096", "--attention", "flash",
		"--checkpointing", "full", "--optimizer", "adamw8bit", "--precision", "bf16", "--gpu", "h100"}
	fs := newFlags("estimate", nil)
	var jf request.Flags
	jf.Register(fs)
	require.NoError(t, parse(fs, flags))
	j, dev, err := jf.Job()
	require.NoError(t, err)
	hr := request.DefaultHeadroom(dev.Free())

	for _, c := range []struct {
		axis    string
		library func(budget.Job, gpumem.Device) (int, error)
		plan    []string
		key     string
	}{
		{"seq", func(j budget.Job, d gpumem.Device) (int, error) { return budget.LongestSeqLen(j, d.Free()) },
			[]string{"--max-seq", strconv.Itoa(budget.DefaultMaxSeqLen), "--min-batch", "4", "--max-batch", "4", "--allow", "none"}, "seq_len"},
		{"batch", func(j budget.Job, d gpumem.Device) (int, error) { return budget.LargestBatch(j, d.Free()) },
			[]string{"--allow", "none"}, "batch"},
	} {
		want, err := c.library(j, dev)
		require.NoError(t, err, c.axis)
		require.Greater(t, want, 1, c.axis)

		s, err := sweep(j, c.axis, dev, hr)
		require.NoError(t, err, c.axis)
		assert.Equal(t, want, s.fitMax, "%s: the chart's largest value and the library's", c.axis)
		title := chartTitle(j, s, dev, hr)
		assert.Contains(t, title, "fits up to "+axisLabel(c.axis, false)+" "+gpumem.Thousands(int64(want))+" with 5% headroom", c.axis)

		code, out, stderr := runCLI(t, "", append(append([]string{"plan"}, flags...), append(c.plan, "--json")...)...)
		require.Equal(t, exitOK, code, stderr)
		var p map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &p))
		assert.Equal(t, float64(want), p[c.key], "%s: plan's answer and the library's", c.axis)
		assert.Equal(t, float64(hr.Bytes), p["min_headroom"], c.axis)

		code, out, stderr = runCLI(t, "", append(append([]string{"plan"}, flags...), c.plan...)...)
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, out, "with 5% headroom", c.axis)

		// estimate at the value fits, one above does not.
		flag := "--" + c.axis
		set := func(v int) []string {
			a := append([]string{"estimate"}, flags...)
			for i := range a {
				if a[i] == flag {
					a[i+1] = strconv.Itoa(v)
				}
			}
			return append(a, "--json")
		}
		code, out, stderr = runCLI(t, "", set(want)...)
		assert.Equal(t, exitOK, code, "%s %d: %s", c.axis, want, stderr)
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &e))
		assert.Equal(t, float64(hr.Bytes), e["min_headroom"])
		code, _, stderr = runCLI(t, "", set(want+1)...)
		assert.Equal(t, exitDoesNotFit, code, "%s %d", c.axis, want+1)
		assert.Contains(t, stderr, "with 5% headroom")
	}

	// The text output says the headroom too.
	code, out, _ := runCLI(t, "", append([]string{"estimate"}, flags...)...)
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "with 5% headroom")
	// --headroom 0 is budget.Fits: the whole free memory.
	code, out, stderr := runCLI(t, "", append([]string{"estimate"}, append(flags, "--headroom", "0", "--json")...)...)
	require.Equal(t, exitOK, code, stderr)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	assert.Equal(t, float64(0), e["min_headroom"])
}

// TestPlanHugeMaxSeq: an overflowing sequence length does not fit; plan
// answers with the longest that does.
func TestPlanHugeMaxSeq(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "plan", "--model", "llama-3-8b", "--infer", "--memory", "1000GiB", "--max-seq", "10000000", "--json")
	require.Equal(t, exitOK, code, stderr)
	var p struct {
		SeqLen int `json:"seq_len"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	assert.Greater(t, p.SeqLen, 100_000)
	assert.Less(t, p.SeqLen, 10_000_000)
}

// TestContextLimit: a job with more tokens per sequence than the model's
// max_position_embeddings is estimated, with a warning on standard error.
func TestContextLimit(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "", "estimate", "--model", "llama-2-7b", "--infer", "--seq", "8192", "--memory", "80GiB")
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "warning")
	assert.Contains(t, stderr, "8192 tokens")
	assert.Contains(t, stderr, "4096")
	assert.Contains(t, stderr, "max_position_embeddings")

	code, _, stderr = runCLI(t, "", "estimate", "--model", "llama-2-7b", "--infer", "--seq", "4000", "--generate", "200", "--memory", "80GiB")
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "4200 tokens", "the prompt and the generated tokens")

	code, _, stderr = runCLI(t, "", "estimate", "--model", "llama-2-7b", "--infer", "--seq", "4096", "--memory", "80GiB")
	assert.Equal(t, exitOK, code)
	assert.Empty(t, stderr, "within the context: no warning")

	// A learned position table cannot take more tokens at all.
	code, _, stderr = runCLI(t, "", "estimate", "--model", "gpt2", "--train", "--seq", "2048")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, stderr, "1024")
	assert.Contains(t, stderr, "position table")

	// plan warns about the tokens it proposes.
	code, _, stderr = runCLI(t, "", "plan", "--model", "qwen2.5-0.5b", "--infer", "--memory", "24GiB", "--max-seq", "131072")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, stderr, "warning")
	assert.Contains(t, stderr, "32768")
	assert.Contains(t, stderr, "--max-seq 32768")
	code, _, stderr = runCLI(t, "", "plan", "--model", "qwen2.5-0.5b", "--infer", "--memory", "24GiB", "--max-seq", "32768")
	assert.Equal(t, exitOK, code)
	assert.Empty(t, stderr)
}

// TestDidYouMean: misspelled models, GPUs, flags and commands get a
// suggestion; a name far from every other gets none.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"estimate", "--model", "llama3-8b", "--train"}, `did you mean "llama-3-8b"?`},
		{[]string{"estimate", "--model", "Llama-2-7", "--train"}, `did you mean "llama-2-7b"?`},
		{[]string{"estimate", "--model", "mistral", "--train"}, `did you mean "mistral-7b"?`},
		{[]string{"inspect", "--model", "gtp2"}, `did you mean "gpt2"?`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--gpu", "h1000"}, `did you mean "NVIDIA H100 80GB HBM3"?`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--gpu", "rtx 4900"}, `did you mean "NVIDIA GeForce RTX 4090"?`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--gpu", "a100-80"}, `did you mean`},
		{[]string{"leak", "--gpu", "rtx4900", leakLog}, `did you mean "NVIDIA GeForce RTX 4090"?`},
		{[]string{"estimate", "--model", "gpt2", "--train", "--bacth", "4"}, "unknown flag --bacth; did you mean --batch?"},
		{[]string{"plan", "--model", "gpt2", "--infer", "--memory", "8GiB", "--max-sequence", "4"}, "did you mean --max-seq?"},
		{[]string{"estmate"}, `unknown command "estmate"; did you mean "estimate"?`},
		{[]string{"pln"}, `did you mean "plan"?`},
	}
	for _, tc := range tests {
		code, _, stderr := runCLI(t, "", tc.args...)
		assert.Equal(t, exitBadInput, code, tc.args)
		assert.Contains(t, stderr, tc.want, tc.args)
	}
	for _, args := range [][]string{
		{"estimate", "--model", "frobnicator-9000", "--train"},
		{"estimate", "--model", "gpt2", "--train", "--gpu", "a99"},
		{"estimate", "--model", "gpt2", "--train", "--zzzz", "4"},
		{"frobnicate"},
	} {
		code, _, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitBadInput, code, args)
		assert.NotContains(t, stderr, "did you mean", args)
	}
}

// TestFlagsForTheMode: a flag that cannot change the answer for the mode
// asked for is an error naming it, not silently ignored.
func TestFlagsForTheMode(t *testing.T) {
	t.Parallel()
	infer := []string{"--model", "llama-2-7b", "--infer", "--seq", "1024"}
	train := []string{"--model", "llama-2-7b", "--train", "--seq", "1024"}
	tests := []struct {
		cmd  string
		job  []string
		args []string
		want string
	}{
		{"estimate", infer, []string{"--optimizer", "sgd"}, "--optimizer sgd"},
		{"estimate", infer, []string{"--optimizer", "adamw"}, "--optimizer adamw"},
		{"estimate", infer, []string{"--grad-accum", "4"}, "--grad-accum 4"},
		{"estimate", infer, []string{"--dropout"}, "--dropout"},
		{"estimate", infer, []string{"--checkpointing", "full"}, "--checkpointing full"},
		{"estimate", infer, []string{"--offload", "optimizer"}, "--offload optimizer"},
		{"estimate", infer, []string{"--gpus", "8", "--zero", "1"}, "--zero 1"},
		{"estimate", infer, []string{"--gpus", "8", "--zero", "2"}, "--zero 2"},
		{"estimate", infer, []string{"--gpus", "8", "--fsdp", "shard_grad_op"}, "--fsdp shard_grad_op"},
		{"estimate", train, []string{"--generate", "16"}, "--generate 16"},
		{"estimate", train, []string{"--images", "1"}, "--images 1"},
		{"estimate", train, []string{"--headroom", "0.1"}, "--headroom 0.1"},
		{"plan", infer, []string{"--memory", "80GiB", "--target-batch", "32"}, "--target-batch 32"},
		{"plan", infer, []string{"--memory", "80GiB", "--allow", "adamw8bit"}, `--allow "adamw8bit"`},
		{"plan", infer, []string{"--memory", "80GiB", "--allow", "sdpa,full"}, `--allow "full"`},
		{"plan", infer, []string{"--memory", "80GiB", "--allow", "offload-optimizer"}, `--allow "offload-optimizer"`},
		{"plan", infer, []string{"--memory", "80GiB", "--deepspeed", "ds.json"}, "--deepspeed"},
		{"plan", infer, []string{"--memory", "80GiB", "--hf-args"}, "--hf-args"},
		{"plan", infer, []string{"--gpu", "h100", "--gpus", "8", "--tp", "8", "--megatron"}, "--megatron"},
		{"plan", infer, []string{"--gpu", "h100", "--gpus", "8", "--fsdp", "full_shard", "--accelerate", "fsdp.yaml"}, "--accelerate"},
		{"plan", train, []string{"--memory", "80GiB", "--grad-accum", "4", "--target-batch", "32"}, "--grad-accum 4"},
		{"inspect", []string{"--model", "gpt2"}, []string{"--param-dtype", "bf16"}, "--param-dtype bf16"},
		{"inspect", []string{"--model", "gpt2"}, []string{"--attention", "flash"}, "--attention flash"},
		{"inspect", []string{"--model", "gpt2"}, []string{"--checkpointing", "full"}, "--checkpointing full"},
	}
	for _, tc := range tests {
		args := append(append([]string{tc.cmd}, tc.job...), tc.args...)
		code, out, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitBadInput, code, "%q: %s", args, stderr)
		assert.Empty(t, out, args)
		assert.Contains(t, stderr, tc.want, args)
	}
	// What an inference job does use.
	for _, extra := range [][]string{
		{"--gpus", "8", "--zero", "3"}, {"--lora-rank", "8"}, {"--qlora"}, {"--attention", "eager"}, {"--generate", "16"},
		{"--gpus", "8", "--tp", "8"}, {"--precision", "fp16"},
	} {
		args := append(append([]string{"estimate"}, infer...), extra...)
		code, _, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitOK, code, "%q: %s", args, stderr)
	}
	code, _, stderr := runCLI(t, "", "estimate", "--model", "llava-1.5-7b", "--train", "--images", "1", "--seq", "1024")
	assert.Equal(t, exitOK, code, stderr)
	code, _, stderr = runCLI(t, "", "inspect", "--model", "gpt2", "--optimizer", "adamw", "--param-dtype", "bf16")
	assert.Equal(t, exitOK, code, stderr)
	code, _, stderr = runCLI(t, "", "inspect", "--model", "gpt2", "--batch", "1", "--seq", "128", "--attention", "flash")
	assert.Equal(t, exitOK, code, stderr)
}

// assertClean fails when s holds a control character other than newline
// and tab, DEL, a C1 control or a byte that is not UTF-8.
func assertClean(t *testing.T, s string, msgAndArgs ...any) {
	t.Helper()
	for i, r := range s {
		bad := r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f ||
			r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD")
		if bad {
			assert.Failf(t, "a control character reaches the terminal", "%q at byte %d of %q", r, i, s)
			return
		}
	}
}

// TestNoControlCharacters: names, values and lines from input files
// reach the terminal escaped, never as raw control characters.
func TestNoControlCharacters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"_name_or_path":"\u001b[31mevil\u001b[0m\r\u009b2J","model_type":"llama",
		"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":1000,
		"max_position_embeddings":512,"torch_dtype":"bfloat16"}`), 0o600))
	for _, args := range [][]string{
		{"inspect", "--config", cfg},
		{"estimate", "--config", cfg, "--infer", "--seq", "128", "--memory", "8GiB"},
		{"estimate", "--config", cfg, "--infer", "--seq", "4096", "--memory", "8GiB"}, // the context warning names the model
		{"plan", "--config", cfg, "--infer", "--seq", "128", "--memory", "8GiB"},
		{"plan", "--config", cfg, "--train", "--seq", "128", "--memory", "1MiB"}, // does not fit
	} {
		code, out, stderr := runCLI(t, "", args...)
		assert.Contains(t, []int{exitOK, exitDoesNotFit}, code, "%q: %s", args, stderr)
		assertClean(t, out, args)
		assertClean(t, stderr, args)
		assert.Contains(t, out+stderr, `\x1b[31mevil`, args)
	}
	// A config value with control characters in an error.
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"model_type":"\u001b[2Jllama\u0007","hidden_size":"\u001b]0;title\u0007"}`), 0o600))
	code, out, stderr := runCLI(t, "", "inspect", "--config", bad)
	assert.Equal(t, exitBadInput, code)
	assertClean(t, out)
	assertClean(t, stderr)
	// File names with control bytes, and a name that is not UTF-8.
	for _, name := range []string{"x\x1b[2J\ny.json", "\x9b31m.log", "z\xff.gguf"} {
		p := filepath.Join(dir, name)
		for _, args := range [][]string{{"inspect", "--config", p}, {"inspect", "--gguf", p}, {"oom", p}, {"leak", p}} {
			code, out, stderr := runCLI(t, "", args...)
			assert.Equal(t, exitBadInput, code, args)
			assertClean(t, out, args)
			assertClean(t, stderr, args)
		}
	}
	// Log lines and OOM text echoed back.
	log := "step 1 memory 1.0 GiB\nstep 2 memory \x1b[31m2.0 GiB\x07\nstep 3 memory 3.0 GiB\n" +
		"nvidia-smi \x1b]0;pwned\x07 memory.used [MiB]\n"
	for _, args := range [][]string{{"leak", "-"}, {"leak", "--json", "-"}, {"oom"}, {"oom", "--json"}} {
		_, out, stderr := runCLI(t, log+oomMessage+"\x1b[0m\x9b", args...)
		assertClean(t, out, args)
		assertClean(t, stderr, args)
	}
	// A value typed on the command line is escaped too.
	_, out, stderr = runCLI(t, "", "estimate", "--model", "gpt\x1b[31m2", "--train")
	assertClean(t, out)
	assertClean(t, stderr)
	assert.Contains(t, stderr, `\x1b[31m`)
}
