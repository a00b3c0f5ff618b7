package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"

	"github.com/gpumem/gpumem/kube/gpujob"
	"github.com/gpumem/gpumem/kube/internal/replay"
	"github.com/gpumem/gpumem/kube/webhook"
)

// review posts the recorded AdmissionReview of pod (testdata/admission.json,
// as the API server sends it) to the webhook.
func review(t *testing.T, pod string) (*admissionv1.AdmissionResponse, []map[string]any) {
	t.Helper()
	s := replay.Load(t, "../testdata/scenario.json")
	wh := &webhook.Webhook{Est: gpujob.NewLocal(), Nodes: func() []*v1.Node {
		var out []*v1.Node
		for i := range s.Nodes {
			out = append(out, &s.Nodes[i])
		}
		return out
	}}
	h := httptest.NewServer(wh.Handler())
	t.Cleanup(h.Close)
	b, err := os.ReadFile("../testdata/admission.json")
	if err != nil {
		t.Fatal(err)
	}
	var reviews map[string]json.RawMessage
	if err := json.Unmarshal(b, &reviews); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(h.URL+"/mutate", "application/json", bytes.NewReader(reviews[pod]))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("%s: reply %+v", pod, out)
	}
	var patch []map[string]any
	if out.Response.Patch != nil {
		if err := json.Unmarshal(out.Response.Patch, &patch); err != nil {
			t.Fatal(err)
		}
	}
	return out.Response, patch
}

func TestAnnotates(t *testing.T) {
	resp, patch := review(t, "lora-8b")
	if !resp.Allowed || resp.UID != "705ab4f5-6393-11e8-b7cc-42010a800000" || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("lora-8b: %+v", resp)
	}
	if len(patch) != 1 || patch[0]["path"] != "/metadata/annotations/gpumem.io~1estimate" {
		t.Fatalf("patch %v", patch)
	}
	var kinds []webhook.Kind
	if err := json.Unmarshal([]byte(patch[0]["value"].(string)), &kinds); err != nil {
		t.Fatal(err)
	}
	fits := map[string]bool{}
	for _, k := range kinds {
		fits[k.Device] = k.Fits
		if k.Device == "NVIDIA L4" && (k.DevicePeak != 66932993361 || k.Phase == "" || k.Components["weights"] == 0) {
			t.Errorf("L4 line %+v", k)
		}
	}
	want := map[string]bool{"NVIDIA A100-SXM4-80GB": true, "NVIDIA H100 80GB HBM3": true, "NVIDIA L4": false, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb (4864 MiB)": false}
	for d, f := range want {
		if got, ok := fits[d]; !ok || got != f {
			t.Errorf("%s: fits %v (listed %v), want %v", d, got, ok, f)
		}
	}
}

func TestSharedRequest(t *testing.T) {
	resp, patch := review(t, "shared-1b")
	if !resp.Allowed || len(patch) != 2 {
		t.Fatalf("shared-1b: %+v %v", resp, patch)
	}
	// The largest need among the kinds it fits: the H100's 4.91 GB peak
	// + 4.25 GB headroom = 9.17 GB = 8742 MiB (gpumem estimate --model
	// llama-3.2-1b --infer --batch 8 --seq 2048 --generate 512 --gpu h100).
	if patch[1]["path"] != "/spec/containers/0/resources/limits" || patch[1]["value"].(map[string]any)["nvidia.com/gpumem"] != "8742" {
		t.Errorf("shared-1b patch %v", patch[1])
	}
	if patch[0]["path"] != "/metadata/annotations/gpumem.io~1estimate" {
		t.Errorf("shared-1b patch %v", patch[0])
	}
}

func TestRejects(t *testing.T) {
	resp, _ := review(t, "full-8b")
	if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity {
		t.Fatalf("full-8b: %+v", resp)
	}
	for _, want := range []string{"needs 192.17 GiB per GPU", "the best GPU kind on node h100-1", "gpumem plan: allow an 8-bit optimizer"} {
		if !strings.Contains(resp.Result.Message, want) {
			t.Errorf("message %q lacks %q", resp.Result.Message, want)
		}
	}
	resp, _ = review(t, "bad-batch")
	if resp.Allowed || !strings.Contains(resp.Result.Message, `annotation gpumem.io/job: field "batch": batch: want an integer`) {
		t.Errorf("bad-batch: %+v", resp.Result)
	}
	resp, patch := review(t, "held-1")
	if !resp.Allowed || patch != nil {
		t.Errorf("a pod without a job: %+v", resp)
	}
}
