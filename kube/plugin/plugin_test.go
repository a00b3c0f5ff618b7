package plugin_test

import (
	"cmp"
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	framework "k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/kube/gpujob"
	"github.com/gpumem/gpumem/kube/internal/replay"
	"github.com/gpumem/gpumem/kube/plugin"
	"github.com/gpumem/gpumem/request"
)

// cluster is the scenario's nodes as the scheduler's snapshot holds them,
// with the pods that have a nodeName on their nodes.
func cluster(t testing.TB) ([]fwk.NodeInfo, map[string]*v1.Pod) {
	s := replay.Load(t, "../testdata/scenario.json")
	pods := map[string]*v1.Pod{}
	byNode := map[string][]*v1.Pod{}
	for i := range s.Pods {
		p := &s.Pods[i]
		pods[p.Name] = p
		if p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	var nis []fwk.NodeInfo
	for i := range s.Nodes {
		ni := framework.NewNodeInfo(byNode[s.Nodes[i].Name]...)
		ni.SetNode(&s.Nodes[i])
		nis = append(nis, ni)
	}
	return nis, pods
}

func newPlugin(t testing.TB) (*plugin.Plugin, *gpujob.Local) {
	est := gpujob.NewLocal()
	return plugin.NewWith(est), est
}

// schedule runs PreFilter, then Filter and Score on every node, as the
// framework does; it returns the nodes that pass, best score first.
func schedule(t testing.TB, p *plugin.Plugin, nis []fwk.NodeInfo, pod *v1.Pod) (fwk.CycleState, []string, *fwk.Status) {
	ctx := context.Background()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, pod, nis); !st.IsSuccess() {
		return cs, nil, st
	}
	type scored struct {
		node  string
		score int64
	}
	var pass []scored
	for _, ni := range nis {
		if st := p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
			continue
		}
		s, st := p.Score(ctx, cs, pod, ni)
		if !st.IsSuccess() {
			t.Fatal(st)
		}
		pass = append(pass, scored{ni.Node().Name, s})
	}
	slices.SortStableFunc(pass, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	var out []string
	for _, s := range pass {
		out = append(out, s.node)
	}
	return cs, out, nil
}

func TestWholeGPU(t *testing.T) {
	p, srv := newPlugin(t)
	nis, pods := cluster(t)
	for _, c := range []struct {
		pod  string
		want []string
	}{
		{"lora-8b", []string{"a100-1", "h100-1"}},
		// The 1B generator fits every GPU: the MIG slice is the
		// tightest, then the L4.
		{"gen-1b", []string{"mig-1", "l4-1", "a100-1", "h100-1"}},
		// vLLM with two tensor-parallel ranks: each rank fits an L4
		// (vLLM takes 90% of any GPU: the L4's headroom is the
		// smallest), and vLLM refuses the MIG slice's 4.75 GiB.
		{"vllm-8b-tp2", []string{"l4-1", "a100-1", "h100-1"}},
	} {
		_, got, st := schedule(t, p, nis, pods[c.pod])
		if st != nil {
			t.Fatalf("%s: %v", c.pod, st)
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: nodes %v, want %v", c.pod, got, c.want)
		}
	}
	// One estimate per GPU kind and pod, none in Filter or Score.
	if n := srv.Estimates(); n != 3*4 {
		t.Errorf("%d estimates, want 12", n)
	}
	// A replica (the same annotation on another pod) goes where the
	// first went, with no estimate of its own.
	replica := pods["lora-8b"].DeepCopy()
	replica.Name, replica.UID = "lora-8b-2", "uid-lora-8b-2"
	if _, got, st := schedule(t, p, nis, replica); st != nil || strings.Join(got, " ") != "a100-1 h100-1" {
		t.Errorf("replica: nodes %v (%v), want a100-1 h100-1", got, st)
	}
	if n := srv.Estimates(); n != 3*4 {
		t.Errorf("%d estimates after a replica, want 12", n)
	}
}

func TestUnschedulable(t *testing.T) {
	p, srv := newPlugin(t)
	nis, pods := cluster(t)
	_, _, st := schedule(t, p, nis, pods["full-8b"])
	if st.Code() != fwk.Unschedulable {
		t.Fatalf("full-8b: %v", st)
	}
	msg := st.Message()
	// Its next cycle gives the same message, its plan kept.
	if _, _, again := schedule(t, p, nis, pods["full-8b"]); again.Message() != msg || srv.Plans() != 1 {
		t.Errorf("full-8b again: %q after %d plans, want the same message after 1", again.Message(), srv.Plans())
	}
	for _, want := range []string{"needs 192.17 GiB per GPU", "the best node h100-1", "short", "gpumem plan: allow an 8-bit optimizer; allow optimizer offload"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	_, _, st = schedule(t, p, nis, pods["bad-batch"])
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), `annotation gpumem.io/job: field "batch"`) {
		t.Errorf("bad-batch: %v", st)
	}
	_, _, st = schedule(t, p, nis, pods["held-1"])
	if !st.IsSkip() {
		t.Errorf("a pod without a job: %v, want Skip", st)
	}
}

func TestSharedReserve(t *testing.T) {
	p, _ := newPlugin(t)
	nis, pods := cluster(t)
	pod := pods["shared-1b"]
	cs, got, st := schedule(t, p, nis, pod)
	if st != nil || len(got) != 3 {
		t.Fatalf("shared-1b: %v %v", got, st)
	}
	// The job needs 4.55 GiB and its headroom: the MIG slice's 4.75 GiB
	// are 40 MiB short (gpumem estimate --memory 5100273664B); the L4s'
	// emptiest GPU has 7.30 GiB left, the tightest fit.
	if got[0] != "l4-1" || strings.Contains(strings.Join(got, " "), "mig-1") {
		t.Errorf("shared-1b: %v, want l4-1 first and no mig-1", got)
	}
	ctx := context.Background()
	if st := p.Reserve(ctx, cs, pod, "l4-1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if r := p.Reserved("l4-1"); r != 4887325286+1178494566 {
		t.Errorf("reserved %d on l4-1", r)
	}
	// The scheduler assumes the pod on l4-1: a second replica no longer
	// fits there (7.30 - 5.65 GiB left).
	var l4 fwk.NodeInfo
	for _, ni := range nis {
		if ni.Node().Name == "l4-1" {
			l4 = ni
		}
	}
	placed := pod.DeepCopy()
	placed.Spec.NodeName = "l4-1"
	pi, _ := framework.NewPodInfo(placed)
	l4.AddPodInfo(pi)
	second := pod.DeepCopy()
	second.Name, second.UID = "shared-1b-2", "uid-shared-1b-2"
	_, got, _ = schedule(t, p, nis, second)
	if len(got) != 2 || strings.Contains(strings.Join(got, " "), "l4-1") {
		t.Errorf("second replica: %v, want no l4-1", got)
	}
	// A third replica's PreFilter keeps the reservation of the pod still
	// on l4-1.
	third := pod.DeepCopy()
	third.Name, third.UID = "shared-1b-3", "uid-shared-1b-3"
	schedule(t, p, nis, third)
	if r := p.Reserved("l4-1"); r == 0 {
		t.Error("PreFilter dropped the reservation of a pod on its node")
	}
	p.Unreserve(ctx, cs, pod, "l4-1")
	if r := p.Reserved("l4-1"); r != 0 {
		t.Errorf("reserved %d after Unreserve", r)
	}
	// Reserved again, then the pod leaves the node: the next PreFilter
	// drops its reservation.
	p.Reserve(ctx, cs, pod, "l4-1")
	l4.RemovePod(klog.Background(), placed)
	_, got, _ = schedule(t, p, nis, second)
	if r := p.Reserved("l4-1"); r != 0 {
		t.Errorf("reserved %d for a pod no longer on l4-1", r)
	}
	if !strings.Contains(strings.Join(got, " "), "l4-1") {
		t.Errorf("after Unreserve: %v, want l4-1 back", got)
	}
}

func TestArgs(t *testing.T) {
	for _, raw := range []string{``, `{}`, `{"timeout": "5s"}`} {
		if _, err := plugin.New(context.Background(), &runtime.Unknown{Raw: []byte(raw)}, nil); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
	for raw, want := range map[string]string{
		`{"serviceURL": "http://x"}`: "serviceURL: the plugin estimates in process",
		`{"timeout": "soon"}`:        `timeout "soon"`,
		`{"timeout": "-1s"}`:         `timeout "-1s"`,
		`{"timeuot": "5s"}`:          `unknown field "timeuot"`,
	} {
		_, err := plugin.New(context.Background(), &runtime.Unknown{Raw: []byte(raw)}, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}

// BenchmarkFilter is Filter on a node that fits: a lookup of PreFilter's
// verdict.
func BenchmarkFilter(b *testing.B) {
	p, _ := newPlugin(b)
	nis, pods := cluster(b)
	cs := framework.NewCycleState()
	ctx := context.Background()
	pod := pods["lora-8b"]
	if _, st := p.PreFilter(ctx, cs, pod, nis); !st.IsSuccess() {
		b.Fatal(st)
	}
	ni := nis[0]
	b.ReportAllocs()
	for b.Loop() {
		if st := p.Filter(ctx, cs, pod, ni); st != nil {
			b.Fatal(st)
		}
	}
}

// BenchmarkPreFilter is PreFilter on the scenario's nodes: all five
// (four GPU kinds, "kinds4") or the A100 node alone ("kinds1"). The job
// is the scenario's lora-8b, by its catalog name ("catalog") or with
// Llama-3-8B's config.json inline ("inline"). "repeat" is a pod whose
// annotation the plugin has read before (a replica): a look-up, no
// estimate; "first" a description the plugin has not seen, of a model
// it has prepared (the pods cycle through 1024 annotations of the same
// job written with different spaces, more than the plugin's
// gpujob.Memo keeps): the annotation decoded, the request checked, the
// job built and estimated once per GPU kind; "cold" is a new plugin
// over an empty cache of prepared models each time (budget.NewModel
// once, every node's labels read).
func BenchmarkPreFilter(b *testing.B) {
	all, pods := cluster(b)
	var a100 []fwk.NodeInfo
	for _, ni := range all {
		if ni.Node().Name == "a100-1" {
			a100 = append(a100, ni)
		}
	}
	ctx := context.Background()
	config, err := os.ReadFile("../../model/configs/llama-3-8b.json")
	if err != nil {
		b.Fatal(err)
	}
	inline := pods["lora-8b"].DeepCopy()
	inline.Annotations[gpujob.AnnotationJob] = `{"config": ` + string(config) + `, "mode": "train", "batch": 4, "seq": 2048, "lora_rank": 16, "checkpointing": "full"}`
	for _, job := range []struct {
		name string
		pod  *v1.Pod
	}{{"catalog", pods["lora-8b"]}, {"inline", inline}} {
		for _, nodes := range []struct {
			name string
			nis  []fwk.NodeInfo
		}{{"kinds4", all}, {"kinds1", a100}} {
			for _, run := range []string{"repeat", "first", "cold"} {
				b.Run(job.name+"/"+nodes.name+"/"+run, func(b *testing.B) {
					p := plugin.NewWith(gpujob.NewLocal())
					if _, st := p.PreFilter(ctx, framework.NewCycleState(), job.pod, nodes.nis); !st.IsSuccess() {
						b.Fatal(st)
					}
					pods := []*v1.Pod{job.pod}
					if run == "first" {
						pods = respaced(job.pod, 1024)
					}
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						if run == "cold" {
							p = plugin.NewWith(gpujob.NewLocal())
						}
						if _, st := p.PreFilter(ctx, framework.NewCycleState(), pods[i%len(pods)], nodes.nis); !st.IsSuccess() {
							b.Fatal(st)
						}
						i++
					}
				})
			}
		}
	}
}

// respaced is n copies of pod whose job annotations describe the same
// job in n different texts: copy i writes the space after the last ten
// ": " and ", " as a tab where bit k of i is set (an inline config.json,
// earlier in the text, keeps its bytes, so that its model is the one
// prepared).
func respaced(pod *v1.Pod, n int) []*v1.Pod {
	out := make([]*v1.Pod, n)
	for i := range out {
		text := []byte(pod.Annotations[gpujob.AnnotationJob])
		k := 0
		for j := len(text) - 2; j >= 0 && k < 10; j-- {
			if (text[j] == ':' || text[j] == ',') && text[j+1] == ' ' {
				if i&(1<<k) != 0 {
					text[j+1] = '\t'
				}
				k++
			}
		}
		out[i] = pod.DeepCopy()
		out[i].Annotations[gpujob.AnnotationJob] = string(text)
	}
	return out
}

// BenchmarkEstimate is budget.Estimate of the lora-8b job on an A100, the
// unit the PreFilter benchmarks are quoted in: the job is built once, as
// PreFilter builds it, outside the loop.
func BenchmarkEstimate(b *testing.B) {
	_, pods := cluster(b)
	job, _, err := gpujob.FromPod(pods["lora-8b"])
	if err != nil {
		b.Fatal(err)
	}
	req := job.Request
	req.GPU = "a100-80gb"
	prep, err := request.NewCache(1).Prepare(req)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := budget.Estimate(prep.Job); err != nil {
			b.Fatal(err)
		}
	}
}

var _ = gpujob.AnnotationJob
