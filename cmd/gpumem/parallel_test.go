package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The layout flags: a per-GPU estimate under TP/PP, plan choosing a
// layout when none is given, engine outputs, and errors naming the flag.
func TestLayoutFlags(t *testing.T) {
	code, out, errOut := runCLI(t, "", "estimate", "--model", "llama-3-70b", "--train", "--gpus", "8", "--nodes", "2",
		"--tp", "8", "--sp", "--pp", "2", "--grad-accum", "8", "--attention", "flash", "--checkpointing", "selective")
	if code != 0 || !strings.Contains(out, "layout TP 8 (SP) × PP 2 × DP 1, no sharding over 16 GPUs") {
		t.Errorf("estimate with TP/PP: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", "plan", "--model", "llama-2-7b", "--train", "--gpus", "8", "--gpu", "h100",
		"--attention", "flash", "--target-batch", "64")
	if code != 0 || !strings.Contains(out, "layout DP 8, ZeRO-1") || !strings.Contains(out, "layout DP 8, no sharding") {
		t.Errorf("plan over 8 GPUs: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", "plan", "--model", "llama-3-70b", "--train", "--gpus", "8", "--nodes", "4",
		"--tp", "8", "--sp", "--pp", "4", "--gpu", "h100", "--attention", "flash", "--target-batch", "64", "--megatron")
	if code != 0 || !strings.Contains(out, "Megatron-LM: --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel") {
		t.Errorf("plan --megatron: exit %d\n%s%s", code, out, errOut)
	}
	yaml := filepath.Join(t.TempDir(), "fsdp.yaml")
	code, out, errOut = runCLI(t, "", "plan", "--model", "llama-2-7b", "--train", "--gpus", "8", "--fsdp", "full_shard",
		"--gpu", "a100-40gb", "--attention", "flash", "--accelerate", yaml)
	if code != 0 {
		t.Fatalf("plan --fsdp --accelerate: exit %d\n%s%s", code, out, errOut)
	}
	raw, err := os.ReadFile(yaml)
	if err != nil || !strings.Contains(string(raw), "fsdp_sharding_strategy: FULL_SHARD") || !strings.Contains(string(raw), "distributed_type: FSDP") {
		t.Errorf("accelerate YAML (%v):\n%s", err, raw)
	}
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--tp", "3"}, "--tp"},
		{[]string{"--tp", "16"}, "--tp"},
		{[]string{"--nodes", "-1"}, "--nodes"},
		{[]string{"--fsdp", "zero9"}, "--fsdp"},
		{[]string{"--zero", "2", "--fsdp", "full_shard"}, "--fsdp"},
		{[]string{"--offload", "params"}, "--offload"}, // needs stage 3
		{[]string{"--offload", "disk"}, "--offload"},
		{[]string{"--pp", "3"}, "--pp"},
		{[]string{"--sp"}, "--sp"},
	} {
		args := append([]string{"estimate", "--model", "llama-2-7b", "--train", "--gpus", "8"}, c.args...)
		code, _, errOut := runCLI(t, "", args...)
		if code != 2 || !strings.Contains(errOut, c.flag) {
			t.Errorf("%v: exit %d, stderr %q: want 2 naming %s", c.args, code, errOut, c.flag)
		}
	}
}
