package extender_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpumem/gpumem/kube/extender"
	"github.com/gpumem/gpumem/kube/gpujob"
	"github.com/gpumem/gpumem/kube/internal/replay"
)

func setup(t *testing.T) (*httptest.Server, replay.Scenario, map[string]*v1.Pod) {
	s := replay.Load(t, "../testdata/scenario.json")
	pods := map[string]*v1.Pod{}
	for i := range s.Pods {
		pods[s.Pods[i].Name] = &s.Pods[i]
	}
	e := &extender.Extender{Est: gpujob.NewLocal(), Pods: func(node string) []*v1.Pod {
		var out []*v1.Pod
		for _, p := range pods {
			if p.Spec.NodeName == node {
				out = append(out, p)
			}
		}
		return out
	}}
	h := httptest.NewServer(e.Handler())
	t.Cleanup(h.Close)
	return h, s, pods
}

func post(t *testing.T, url string, args extenderv1.ExtenderArgs, v any) {
	t.Helper()
	b, _ := json.Marshal(args)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func names(l *v1.NodeList) string {
	var s []string
	for _, n := range l.Items {
		s = append(s, n.Name)
	}
	return strings.Join(s, " ")
}

func TestFilter(t *testing.T) {
	h, s, pods := setup(t)
	nodes := &v1.NodeList{Items: s.Nodes}
	for _, c := range []struct {
		pod, pass, failed string
	}{
		{"lora-8b", "a100-1 h100-1", "needs 63.43 GiB per GPU, NVIDIA L4 has 21.95 GiB free"},
		{"full-8b", "", "gpumem plan: allow an 8-bit optimizer"},
		// 4.55 GiB and its headroom: 40 MiB short on the MIG slice.
		{"shared-1b", "a100-1 h100-1 l4-1", ""},
		{"held-1", "a100-1 h100-1 l4-1 mig-1 cpu-1", ""}, // no job: every node
	} {
		var res extenderv1.ExtenderFilterResult
		post(t, h.URL+"/filter", extenderv1.ExtenderArgs{Pod: pods[c.pod], Nodes: nodes}, &res)
		if res.Error != "" || names(res.Nodes) != c.pass {
			t.Errorf("%s: nodes %q error %q, want %q", c.pod, names(res.Nodes), res.Error, c.pass)
		}
		if c.failed != "" && !strings.Contains(res.FailedNodes["l4-1"], c.failed) {
			t.Errorf("%s: l4-1 failed with %q, want %q", c.pod, res.FailedNodes["l4-1"], c.failed)
		}
	}
	var res extenderv1.ExtenderFilterResult
	post(t, h.URL+"/filter", extenderv1.ExtenderArgs{Pod: pods["bad-model"], Nodes: nodes}, &res)
	if got := res.FailedAndUnresolvableNodes["a100-1"]; !strings.Contains(got, `field "model": no model "llama-9-1t"`) || len(res.Nodes.Items) != 0 {
		t.Errorf("bad-model: %+v", res)
	}
}

func TestPrioritize(t *testing.T) {
	h, s, pods := setup(t)
	var list extenderv1.HostPriorityList
	post(t, h.URL+"/prioritize", extenderv1.ExtenderArgs{Pod: pods["gen-1b"], Nodes: &v1.NodeList{Items: s.Nodes}}, &list)
	score := map[string]int64{}
	for _, p := range list {
		score[p.Host] = p.Score
	}
	// The tightest fit first: the MIG slice, then the L4, then the 80 GB parts.
	if !(score["mig-1"] > score["l4-1"] && score["l4-1"] > score["a100-1"] && score["cpu-1"] == 0) || len(list) != 5 {
		t.Errorf("scores %v", score)
	}
}

func TestBadArgs(t *testing.T) {
	h, _, _ := setup(t)
	resp, err := http.Post(h.URL+"/filter", "application/json", strings.NewReader(`{"pod": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	var res extenderv1.ExtenderFilterResult
	json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if !strings.Contains(res.Error, "extender args") {
		t.Errorf("error %q", res.Error)
	}
}
