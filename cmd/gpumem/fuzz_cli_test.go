package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/request"
)

// FuzzCLI runs the commands that compute (estimate, plan, inspect, oom,
// leak, devices) on arbitrary arguments: the exit status is 0, 1 or 2;
// on 2 standard output is empty and standard error is one line naming
// the command; nothing panics. Arguments that write files or serve are
// left out.
func FuzzCLI(f *testing.F) {
	for _, s := range []string{
		"estimate\x00--model\x00llama-3-8b\x00--train\x00--gpu\x00h100",
		"estimate\x00--model\x00llama-3-8b\x00--train\x00--memory\x0080",
		"estimate\x00--model\x00gpt2\x00--infer\x00--seq\x00100000000",
		"estimate\x00--model\x00t5-small\x00--infer\x00--generate\x00-1",
		"plan\x00--model\x00llama-3-8b\x00--train\x00--gpu\x00h100\x00--max-seq\x0010000000",
		"plan\x00--model\x00llava-1.5-7b\x00--train\x00--gpu\x00rtx 3090\x00--allow\x00adamw8bit,lora",
		"plan\x00--model\x00llama-3-70b\x00--train\x00--gpus\x008\x00--gpu\x00h100\x00--headroom\x00NaN",
		"inspect\x00--model\x00deepseek-v3",
		"estimate\x00--model\x00llama3-8b\x00--train",
		"estimate\x00--model\x00llama-3-8b\x00--infer\x00--optimizer\x00adamw8bit",
		"devices\x00--json",
		"estimate\x00--model\x00llama-2-7b\x00--infer\x00--quant\x00gptq\x00--group-size\x00-1\x00--generate\x009\x00--kv-dtype\x00fp8\x00--kv-block\x0016",
		"estimate\x00--model\x00mixtral-8x7b\x00--load\x00--quant\x00awq\x00--group-size\x0064",
		"estimate\x00--model\x00gpt2\x00--train\x00--quant\x00int8\x00--lora-rank\x004",
		"estimate\x00--model\x00bert-large\x00--train\x00--gpu\x00v100\x00--cuda\x0011.2\x00--lazy-loading=false",
		"estimate\x00--model\x00gpt2\x00--infer\x00--gpu\x00h100\x00--cuda\x00cu118\x00--lazy-loading",
		"plan\x00--model\x00llama-3.1-8b\x00--train\x00--qlora\x00--gpu\x00a100-40gb\x00--max-seq\x0032768\x00--maximize\x00seq",
		"plan\x00--model\x00llama-3-8b\x00--train\x00--gpu\x00h100\x00--maximize\x00batch\x00--allow\x00full,flash",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		switch args[0] {
		case "estimate", "plan", "inspect", "oom", "leak", "devices":
		default:
			return
		}
		for _, a := range args {
			for _, w := range []string{"chart", "deepspeed", "accelerate", "megatron", "hf-args"} {
				if strings.Contains(a, w) {
					return
				}
			}
		}
		var out, errOut bytes.Buffer
		code := run(args, strings.NewReader(""), &out, &errOut)
		switch code {
		case exitOK, exitDoesNotFit:
		case exitBadInput:
			if out.Len() != 0 {
				t.Fatalf("%q: exit 2 with standard output %q", args, out.String())
			}
			lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "gpumem") {
				t.Fatalf("%q: exit 2, standard error %q does not end with a line naming gpumem", args, errOut.String())
			}
		default:
			t.Fatalf("%q: exit %d", args, code)
		}
	})
}

// FuzzPlanFlags reads --allow and --headroom values: an error or limits
// Allocate accepts, never a panic.
func FuzzPlanFlags(f *testing.F) {
	for _, s := range []string{"adamw8bit,lora", "all", "", ",", "offload-optimizer,full", "qlora,bf16", "head-chunks"} {
		f.Add(s, "0.05")
	}
	f.Add("lora", "NaN")
	f.Add("lora", "2")
	f.Add("lora", "-Inf")
	f.Add("lora", "1GiB")
	f.Fuzz(func(t *testing.T, allow, headroom string) {
		var jf request.Flags
		var lim budget.Limits
		if err := parseAllow(allow, &jf, &lim); err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		if err := parseHeadroom(headroom, &lim); err != nil {
			return
		}
		if h := lim.HeadroomFraction; h != h {
			t.Fatalf("headroom %q gives a NaN fraction", headroom)
		}
	})
}
