package gpujob_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpumem/gpumem/kube/gpujob"
)

// TestMemoSameDecisions: every pod of the scenario gets the same job,
// verdicts, reasons and message through a Memo as without one, the
// first time and again; the second time neither decodes nor estimates.
func TestMemoSameDecisions(t *testing.T) {
	nodes, pods := scenario(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range nodes {
			if !yield(n) {
				return
			}
		}
	})
	var ns []gpujob.Node
	for _, n := range names {
		ns = append(ns, gpujob.NewNode(nodes[n], nil))
	}
	ctx := context.Background()
	local := gpujob.NewLocal()
	m := gpujob.NewMemo(gpujob.NewLocal(), 0)
	type outcome struct {
		job     gpujob.Job
		ok      bool
		err     string
		fits    map[string]gpujob.Fit
		reasons map[string]string
		msg     string
	}
	run := func(pod *v1.Pod, memo bool) outcome {
		var o outcome
		var err error
		if memo {
			o.job, o.ok, err = m.FromPod(pod)
		} else {
			o.job, o.ok, err = gpujob.FromPod(pod)
		}
		if err == nil && o.ok {
			var c *gpujob.Cycle
			if memo {
				c, err = m.Evaluate(ctx, o.job, ns)
			} else {
				c, err = gpujob.Evaluate(ctx, local, o.job, ns)
			}
			if c != nil {
				o.fits, o.msg, o.reasons = c.Fits, c.Message, map[string]string{}
				for n, f := range c.Fits {
					o.reasons[n] = f.Reason()
				}
			}
		}
		if err != nil {
			o.err = err.Error()
		}
		o.job = gpujob.Job{Request: o.job.Request, Source: o.job.Source, GPUs: o.job.GPUs, Shared: o.job.Shared,
			SharedMiB: o.job.SharedMiB, Ranks: o.job.Ranks} // without the Memo's entry
		return o
	}
	jobs := 0
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range pods {
			if !yield(n) {
				return
			}
		}
	}) {
		want := run(pods[name], false)
		for pass := range 2 {
			if got := run(pods[name], true); !reflect.DeepEqual(got, want) {
				t.Errorf("%s, pass %d through the Memo:\n got %+v\nwant %+v", name, pass, got, want)
			}
		}
		if want.ok {
			jobs++
		}
	}
	// held-* describe no job; the others were decoded and estimated once.
	if m.Decoded() != int64(jobs) || m.Len() != jobs {
		t.Errorf("decoded %d, held %d, for %d jobs", m.Decoded(), m.Len(), jobs)
	}
	if est := m.Estimator().(*gpujob.Local).Estimates(); est != local.Estimates() {
		t.Errorf("%d estimates through the Memo, %d without", est, local.Estimates())
	}
}

// TestMemoKinds: a job's estimates are kept for one set of GPU kinds and
// made again when the nodes' kinds change; the least recently used
// description goes first.
func TestMemoKinds(t *testing.T) {
	nodes, pods := scenario(t)
	ctx := context.Background()
	m := gpujob.NewMemo(gpujob.NewLocal(), 2)
	eval := func(pod string, names ...string) *gpujob.Cycle {
		t.Helper()
		var ns []gpujob.Node
		for _, n := range names {
			ns = append(ns, m.Node(nodes[n], nil))
		}
		job, _, err := m.FromPod(pods[pod])
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.Evaluate(ctx, job, ns)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	eval("lora-8b", "a100-1", "h100-1")
	eval("lora-8b", "h100-1", "a100-1") // the same kinds in another order
	if m.Estimated() != 1 {
		t.Errorf("%d estimates for one job on one set of kinds", m.Estimated())
	}
	c := eval("lora-8b", "a100-1", "h100-1", "l4-1") // an L4 joins
	if m.Estimated() != 2 || c.Fits["l4-1"].Fits || len(c.Answers) != 3 {
		t.Errorf("after the L4 joined: %d estimates, %d answers, fits l4-1 %v", m.Estimated(), len(c.Answers), c.Fits["l4-1"].Fits)
	}
	// A node object replaced by another with other labels is read again.
	l4 := nodes["l4-1"].DeepCopy()
	l4.Labels[gpujob.LabelProduct] = "NVIDIA-H100-80GB-HBM3"
	delete(l4.Labels, gpujob.LabelMemory)
	if n := m.Node(l4, nil); n.GPU.Key() != "NVIDIA H100 80GB HBM3" {
		t.Errorf("relabelled l4-1 read as %q", n.GPU.Key())
	}
	if n := m.Node(nodes["l4-1"], nil); n.GPU.Key() != "NVIDIA L4" {
		t.Errorf("l4-1 read as %q", n.GPU.Key())
	}
	eval("gen-1b", "a100-1")
	eval("full-8b", "a100-1") // drops lora-8b, the least recently used
	if m.Len() != 2 || m.Decoded() != 3 {
		t.Errorf("held %d, decoded %d; want 2 and 3", m.Len(), m.Decoded())
	}
	eval("lora-8b", "a100-1", "h100-1", "l4-1")
	if m.Decoded() != 4 {
		t.Errorf("decoded %d after lora-8b was dropped, want 4", m.Decoded())
	}
}
