package gpujob_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpumem/gpumem/kube/gpujob"
	"github.com/gpumem/gpumem/kube/internal/replay"
)

func scenario(t *testing.T) (map[string]*v1.Node, map[string]*v1.Pod) {
	s := replay.Load(t, "../testdata/scenario.json")
	nodes, pods := map[string]*v1.Node{}, map[string]*v1.Pod{}
	for i := range s.Nodes {
		nodes[s.Nodes[i].Name] = &s.Nodes[i]
	}
	for i := range s.Pods {
		pods[s.Pods[i].Name] = &s.Pods[i]
	}
	return nodes, pods
}

func TestNodeGPU(t *testing.T) {
	nodes, _ := scenario(t)
	for _, c := range []struct {
		node, key string
		catalog   bool
		count     int64
		capMiB    int64
	}{
		{"a100-1", "NVIDIA A100-SXM4-80GB", true, 8, 81051}, // CUDA's total, not nvidia-smi's 81920
		{"h100-1", "NVIDIA H100 80GB HBM3", true, 8, 0},
		{"l4-1", "NVIDIA L4", true, 4, 0},
		{"mig-1", "5100273664B", false, 7, 4864}, // a MIG slice: the labelled memory
	} {
		g, ok, err := gpujob.NodeGPU(nodes[c.node])
		if err != nil || !ok {
			t.Fatalf("%s: ok %v, err %v", c.node, ok, err)
		}
		if g.Key() != c.key || g.Catalog != c.catalog || g.Count != c.count {
			t.Errorf("%s: key %q catalog %v count %d, want %q %v %d", c.node, g.Key(), g.Catalog, g.Count, c.key, c.catalog, c.count)
		}
		if c.capMiB != 0 && int64(g.Device.Capacity)>>20 != c.capMiB {
			t.Errorf("%s: capacity %d MiB, want %d", c.node, int64(g.Device.Capacity)>>20, c.capMiB)
		}
	}
	if _, ok, err := gpujob.NodeGPU(nodes["cpu-1"]); ok || err != nil {
		t.Errorf("cpu-1: ok %v err %v, want no GPU and no error", ok, err)
	}
}

func TestNodeGPUFallbacks(t *testing.T) {
	node := func(labels map[string]string, alloc string) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
		if alloc != "" {
			n.Status.Allocatable = v1.ResourceList{gpujob.ResourceGPU: resource.MustParse(alloc)}
		}
		return n
	}
	// No count label: the device plugin's allocatable.
	g, ok, err := gpujob.NodeGPU(node(map[string]string{gpujob.LabelProduct: "NVIDIA-L4-SHARED"}, "3"))
	if err != nil || !ok || g.Count != 3 || !g.Catalog || g.Device.Name != "NVIDIA L4" {
		t.Errorf("time-sliced L4: %+v ok %v err %v", g, ok, err)
	}
	// A catalog entry larger than the labelled memory is another part.
	g, _, _ = gpujob.NodeGPU(node(map[string]string{gpujob.LabelProduct: "A100", gpujob.LabelMemory: "40960", gpujob.LabelCount: "1"}, ""))
	if g.Catalog || int64(g.Device.Capacity) != 40960<<20 {
		t.Errorf("A100 labelled 40960 MiB: %+v, want the labelled memory", g)
	}
	for _, c := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{gpujob.LabelProduct: "NVIDIA-L4", gpujob.LabelMemory: "lots"}, `label nvidia.com/gpu.memory "lots"`},
		{map[string]string{gpujob.LabelProduct: "NVIDIA-L4", gpujob.LabelCount: "-1"}, `label nvidia.com/gpu.count "-1"`},
		{map[string]string{gpujob.LabelProduct: "Acme-X1"}, `label nvidia.com/gpu.product "Acme-X1": not in gpumem's device catalog`},
	} {
		_, _, err := gpujob.NodeGPU(node(c.labels, ""))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.labels, err, c.want)
		}
	}
}

func TestFromPod(t *testing.T) {
	_, pods := scenario(t)
	j, ok, err := gpujob.FromPod(pods["gen-1b-labels"])
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	a, _, _ := gpujob.FromPod(pods["gen-1b"])
	if !reflect.DeepEqual(j.ForGPU(gpujob.GPU{Catalog: true}), a.ForGPU(gpujob.GPU{Catalog: true})) {
		t.Errorf("labels give %+v, the annotation %+v", j.ForGPU(gpujob.GPU{Catalog: true}), a.ForGPU(gpujob.GPU{Catalog: true}))
	}
	if j, _, _ := gpujob.FromPod(pods["shared-1b"]); !j.Shared || j.GPUs != 1 {
		t.Errorf("shared-1b: %+v, want shared mode", j)
	}
	if j, _, _ := gpujob.FromPod(pods["vllm-8b-tp2"]); j.Ranks != 2 || j.GPUs != 2 {
		t.Errorf("vllm-8b-tp2: ranks %d GPUs %d", j.Ranks, j.GPUs)
	}
	// The scheduler decides the GPU: the pod's gpu is replaced.
	vj, _, _ := gpujob.FromPod(pods["vllm-8b-tp2"])
	if req := vj.ForGPU(mustDevice(t, nodes(t, "mig-1"))); req.GPU != "" || string(req.Memory) != `"5100273664B"` {
		t.Errorf("ForGPU on a MIG slice: gpu %q, memory %s", req.GPU, req.Memory)
	}
	if _, ok, _ := gpujob.FromPod(pods["held-1"]); ok {
		t.Error("held-1 describes no job")
	}
}

func nodes(t *testing.T, name string) *v1.Node { n, _ := scenario(t); return n[name] }

func mustDevice(t *testing.T, n *v1.Node) gpujob.GPU {
	t.Helper()
	g, _, err := gpujob.NodeGPU(n)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestFromPodErrors(t *testing.T) {
	pod := func(ann string, labels map[string]string, res v1.ResourceList) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: labels}}
		if ann != "" {
			p.Annotations = map[string]string{gpujob.AnnotationJob: ann}
		}
		p.Spec.Containers = []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Limits: res}}}
		return p
	}
	for _, c := range []struct {
		pod  *v1.Pod
		want string
	}{
		{pod("llama-3-8b", nil, nil), `annotation gpumem.io/job "llama-3-8b": want gpumem serve's estimate request`},
		{pod(`{"model": "llama-3-8b",`, nil, nil), `annotation gpumem.io/job "{\"model\": \"llama-3-8b\",": not JSON`},
		{pod("", map[string]string{"gpumem.io/model": "gpt2", "gpumem.io/batch": "eight"}, nil), `label gpumem.io/batch "eight": want a whole number`},
		{pod(`{"model":"gpt2"}`, map[string]string{gpujob.LabelSharing: "half"}, nil), `label gpumem.io/sharing "half"`},
		{pod(`{"model":"gpt2","tensor_parallel_size":4}`, nil, v1.ResourceList{gpujob.ResourceGPU: resource.MustParse("2")}), `ask nvidia.com/gpu: 4`},
		{pod(`{"model":"gpt2"}`, nil, v1.ResourceList{gpujob.ResourceGPUMem: resource.MustParse("1.5")}), `container main resource nvidia.com/gpumem "1500m"`},
	} {
		_, ok, err := gpujob.FromPod(c.pod)
		if !ok || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ok %v, error %v, want %q", ok, err, c.want)
		}
	}
}

// cycle evaluates the scenario's pod on every node, the pods with
// nodeName holding their nvidia.com/gpumem.
func cycle(t *testing.T, podName string, extra ...int64) (*gpujob.Cycle, error, *gpujob.Local) {
	s := replay.Load(t, "../testdata/scenario.json")
	est := gpujob.NewLocal()
	held := map[string][]int64{}
	var pod *v1.Pod
	for i := range s.Pods {
		p := &s.Pods[i]
		if b, ok := gpujob.Committed(p); ok && p.Spec.NodeName != "" {
			held[p.Spec.NodeName] = append(held[p.Spec.NodeName], b)
		}
		if p.Name == podName {
			pod = p
		}
	}
	held["l4-1"] = append(held["l4-1"], extra...)
	var ns []gpujob.Node
	for i := range s.Nodes {
		ns = append(ns, gpujob.NewNode(&s.Nodes[i], held[s.Nodes[i].Name]))
	}
	j, _, err := gpujob.FromPod(pod)
	if err != nil {
		return nil, err, est // a job refused as it is read
	}
	c, err := gpujob.Evaluate(context.Background(), est, j, ns)
	return c, err, est
}

func TestEvaluateWhole(t *testing.T) {
	c, err, srv := cycle(t, "lora-8b")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a100-1": true, "h100-1": true, "l4-1": false, "mig-1": false, "cpu-1": false}
	for n, fits := range want {
		if c.Fits[n].Fits != fits {
			t.Errorf("lora-8b on %s: fits %v, want %v (%s)", n, c.Fits[n].Fits, fits, c.Fits[n].Reason())
		}
	}
	if n := srv.Estimates(); n != 4 {
		t.Errorf("%d estimates for 4 GPU kinds", n)
	}
	if c.Message != "" {
		t.Errorf("message %q for a job that fits", c.Message)
	}
	// The shortfall on the L4: 66.93 GB peak + 1.18 GB headroom - 23.57 GB
	// free, as gpumem estimate --model llama-3-8b --train --batch 4 --seq
	// 2048 --lora-rank 16 --checkpointing full --gpu l4 --json prints.
	if f := c.Fits["l4-1"]; f.Short != 44541596599 || !strings.Contains(f.Reason(), "NVIDIA L4 has 21.95 GiB free") {
		t.Errorf("l4-1: short %d, reason %q", f.Short, f.Reason())
	}
	// Tightest fit: the A100 (CUDA's 79.15 GiB) scores above the H100 (79.21 GiB).
	if a, h := c.Fits["a100-1"].Score(), c.Fits["h100-1"].Score(); a < h || a == 0 {
		t.Errorf("scores a100 %d, h100 %d", a, h)
	}
}

func TestEvaluateNowhere(t *testing.T) {
	c, err, srv := cycle(t, "full-8b")
	if err != nil {
		t.Fatal(err)
	}
	for n, f := range c.Fits {
		if f.Fits {
			t.Errorf("full-8b fits %s", n)
		}
	}
	for _, want := range []string{"the best node h100-1 (NVIDIA H100 80GB HBM3) has 79.21 GiB free", "short", "gpumem plan: allow an 8-bit optimizer"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	if srv.Plans() != 1 {
		t.Errorf("%d plans, want 1", srv.Plans())
	}
}

func TestEvaluateShared(t *testing.T) {
	// The L4s hold 20000, 20000, 20000 and 15000 MiB: the emptiest has
	// 21.95 GiB - 15000 MiB = 7.30 GiB, enough for 4.55 + 1.10 GiB.
	c, err, _ := cycle(t, "shared-1b")
	if err != nil {
		t.Fatal(err)
	}
	f := c.Fits["l4-1"]
	if !f.Fits || f.Avail != 23569891328-15000<<20 {
		t.Errorf("shared-1b on l4-1: %+v", f)
	}
	// One more pod of 20000 MiB and no L4 has room.
	c, _, _ = cycle(t, "shared-1b", 20000<<20)
	if f := c.Fits["l4-1"]; f.Fits || f.Short != f.Need-(23569891328-20000<<20) {
		t.Errorf("shared-1b on a full l4-1: %+v", f)
	}
	if !c.Fits["a100-1"].Fits {
		t.Error("shared-1b should fit an empty A100")
	}
}

func TestEvaluateBadRequest(t *testing.T) {
	for pod, want := range map[string]string{
		"bad-batch": `annotation gpumem.io/job: field "batch": batch: want an integer, got string`,
		"bad-model": `field "model": no model "llama-9-1t" in the catalog`,
	} {
		_, err, _ := cycle(t, pod)
		if err == nil || !strings.Contains(err.Error(), want) || !gpujob.IsRequestError(err) {
			t.Errorf("%s: error %v, want %q", pod, err, want)
		}
	}
}
