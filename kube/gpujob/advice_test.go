package gpujob_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/kube/gpujob"
	"github.com/gpumem/gpumem/request"
)

// TestAdviceRuntimes: the advice for a vLLM or Ollama job is what gpumem
// plan answers for it on the same GPU (the commands in the comments);
// a llama.cpp job has none.
func TestAdviceRuntimes(t *testing.T) {
	nodes, _ := scenario(t)
	gpu := func(node string) gpujob.GPU {
		g, ok, err := gpujob.NodeGPU(nodes[node])
		if !ok || err != nil {
			t.Fatalf("%s: %v %v", node, ok, err)
		}
		return g
	}
	decode := func(body string) request.Estimate {
		req, err := request.Decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	est := gpujob.NewLocal()
	ctx := context.Background()
	for _, c := range []struct {
		body, node, want string
	}{
		// gpumem plan --model llama-3-8b --infer --runtime vllm --tensor-parallel-size 2
		//   --max-model-len 8192 --memory 5100273664B --concurrency 1
		{`{"model": "llama-3-8b", "mode": "infer", "runtime": "vllm", "tensor_parallel_size": 2, "max_model_len": 8192}`, "mig-1",
			"max_model_len 8,192 needs gpu_memory_utilization 1.7313, above 1, or no max_model_len at gpu_memory_utilization 0.9"},
		// gpumem plan --model llama-3-8b --infer --runtime vllm --max-model-len 8192 --gpu l4 --concurrency 1
		{`{"model": "llama-3-8b", "mode": "infer", "runtime": "vllm", "max_model_len": 8192}`, "l4-1",
			"gpu_memory_utilization 0.7381 for max_model_len 8,192, or max_model_len 8,192 at gpu_memory_utilization 0.9"},
		// gpumem plan --model llama-3-8b --infer --runtime ollama --ctx-size 8192 --memory 5100273664B
		{`{"model": "llama-3-8b", "mode": "infer", "runtime": "ollama", "ctx_size": 8192}`, "mig-1",
			"Ollama v0.12.11 puts 7 of 33 layers on the GPU at num_ctx 8,192 (the rest on the CPU); not every layer fits at any num_ctx (8 of 33 at one token)"},
	} {
		got, err := est.Advice(ctx, decode(c.body), gpu(c.node))
		if err != nil || got != c.want {
			t.Errorf("%s on %s:\n got %q (%v)\nwant %q", c.body, c.node, got, err, c.want)
		}
	}
	_, err := est.Advice(ctx, decode(`{"model": "llama-3-8b", "mode": "infer", "runtime": "llama.cpp"}`), gpu("mig-1"))
	if err == nil || !strings.Contains(err.Error(), "not of llama.cpp") {
		t.Errorf("llama.cpp: %v, want no plan", err)
	}
	_, err = est.Advice(ctx, decode(`{"model": "llama-3-8b", "mode": "infer", "runtime": "ollama", "cache_type_k": "q8_0", "cache_type_v": "f16"}`), gpu("mig-1"))
	if !gpujob.IsRequestError(err) || !strings.Contains(err.Error(), "cache_type_v") {
		t.Errorf("Ollama with two cache types: %v, want the request's fault naming cache_type_v", err)
	}
}

// TestEvaluateOllamaNowhere: an Ollama job that fits no node's GPU as
// llama.cpp runs it is refused with Ollama's placement as the plan.
func TestEvaluateOllamaNowhere(t *testing.T) {
	nodes, pods := scenario(t)
	pod := pods["gen-1b"].DeepCopy()
	pod.Annotations[gpujob.AnnotationJob] = `{"model": "llama-3-8b", "mode": "infer", "runtime": "ollama", "ctx_size": 8192}`
	job, _, err := gpujob.FromPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gpujob.Evaluate(context.Background(), gpujob.NewLocal(), job, []gpujob.Node{gpujob.NewNode(nodes["mig-1"], nil)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Message, "; gpumem plan: Ollama v0.12.11 puts 7 of 33 layers on the GPU") {
		t.Errorf("message %q lacks Ollama's placement", c.Message)
	}
}
