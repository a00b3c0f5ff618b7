// Package webhook is gpumem as a mutating admission webhook
// (admission.k8s.io/v1 AdmissionReview) for pods.
//
// A pod with a job (gpujob.FromPod) is estimated on every GPU kind of the
// cluster's nodes, empty. The webhook
//   - rejects a pod whose job is malformed (the message names the
//     annotation, label or request field) or fits no GPU kind (the message
//     says by how much the best kind falls short and what gpumem plan
//     would change);
//   - writes the annotation gpumem.io/estimate: per GPU kind, what one GPU
//     must set aside, the peak, its phase and its components, and whether
//     it fits;
//   - in shared-GPU mode, when the pod asks no nvidia.com/gpumem, sets it
//     on the first container's limits: the largest need, in MiB, among the
//     GPU kinds the job fits, so that HAMi reserves what the job takes
//     wherever it lands.
//
// Pods without a job are admitted unchanged.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpumem/gpumem/kube/gpujob"
)

// Webhook serves POST /mutate.
type Webhook struct {
	Est gpujob.Estimator
	// Nodes lists the cluster's nodes.
	Nodes   func() []*v1.Node
	Timeout time.Duration // per review; 0: 10s

	// memo remembers the jobs of the pods reviewed and the nodes read
	// (gpujob.Memo over Est): the replicas of a workload find their
	// estimates kept.
	once sync.Once
	memo *gpujob.Memo
}

func (wh *Webhook) jobs() *gpujob.Memo {
	wh.once.Do(func() { wh.memo = gpujob.NewMemo(wh.Est, 0) })
	return wh.memo
}

// Kind is one GPU kind's line of the gpumem.io/estimate annotation.
type Kind struct {
	Device     string           `json:"device"`
	Fits       bool             `json:"fits"`
	Need       int64            `json:"need"`
	DevicePeak int64            `json:"device_peak"`
	Phase      string           `json:"phase"`
	Shortfall  int64            `json:"shortfall,omitempty"`
	Components map[string]int64 `json:"components"`
}

// Handler routes POST /mutate and GET /healthz.
func (wh *Webhook) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", wh.serve)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return mux
}

func (wh *Webhook) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("want an admission.k8s.io/v1 AdmissionReview with a request (%v)", err), http.StatusBadRequest)
		return
	}
	timeout := wh.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	resp := wh.Review(ctx, review.Request)
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// Review answers one admission request.
func (wh *Webhook) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	deny := func(code int32, msg string) *admissionv1.AdmissionResponse {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonInvalid, Message: msg}
		return resp
	}
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		return resp
	}
	var pod v1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(http.StatusBadRequest, "gpumem: the request's object is not a Pod: "+err.Error())
	}
	job, ok, err := wh.jobs().FromPod(&pod)
	if !ok {
		return resp
	}
	if err != nil {
		return deny(http.StatusUnprocessableEntity, "gpumem: "+err.Error())
	}
	var ns []gpujob.Node
	if wh.Nodes != nil {
		for _, n := range wh.Nodes() {
			ns = append(ns, wh.jobs().Node(n, nil))
		}
	}
	c, err := wh.jobs().Evaluate(ctx, job, ns)
	switch {
	case err != nil && (gpujob.IsRequestError(err)):
		return deny(http.StatusUnprocessableEntity, "gpumem: "+err.Error())
	case err != nil:
		// No estimate (the review's deadline passed, or an internal
		// error of gpumem): admit, as failurePolicy: Ignore would.
		resp.Warnings = []string{"gpumem: no estimate: " + err.Error()}
		return resp
	case len(c.Answers) == 0:
		resp.Warnings = []string{"gpumem: no node has GPU labels: the job is not checked"}
		return resp
	case c.Message != "":
		return deny(http.StatusUnprocessableEntity, strings.Replace(c.Message, "node", "GPU kind on node", 1))
	}
	kinds := map[string]Kind{}
	var shared int64
	for key, a := range c.Answers {
		name := c.GPUs[key].Device.Name
		kinds[name] = Kind{Device: name, Fits: a.Fits, Need: a.Need(), DevicePeak: max(a.DevicePeak, a.RequiredPeak),
			Phase: a.Phase, Shortfall: a.Shortfall, Components: a.Components()}
		if a.Fits {
			shared = max(shared, a.Need())
		}
	}
	ann, _ := json.Marshal(sortedKinds(kinds))
	var patch []map[string]any
	if pod.Annotations == nil {
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{gpujob.AnnotationEstimate: string(ann)}})
	} else {
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/annotations/" + escape(gpujob.AnnotationEstimate), "value": string(ann)})
	}
	if _, asked := gpujob.Committed(&pod); job.Shared && !asked && len(pod.Spec.Containers) > 0 {
		q := gpujob.MiB(shared)
		if pod.Spec.Containers[0].Resources.Limits == nil {
			patch = append(patch, map[string]any{"op": "add", "path": "/spec/containers/0/resources/limits", "value": map[string]string{string(gpujob.ResourceGPUMem): q.String()}})
		} else {
			patch = append(patch, map[string]any{"op": "add", "path": "/spec/containers/0/resources/limits/" + escape(string(gpujob.ResourceGPUMem)), "value": q.String()})
		}
	}
	resp.Patch, _ = json.Marshal(patch)
	pt := admissionv1.PatchTypeJSONPatch
	resp.PatchType = &pt
	return resp
}

func sortedKinds(m map[string]Kind) []Kind {
	out := make([]Kind, 0, len(m))
	for _, k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// escape is a JSON Pointer token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
