// Package extender is gpumem as a kube-scheduler extender: the HTTP
// filter and prioritize verbs of k8s.io/kube-scheduler/extender/v1, with
// the decisions of the GPUMem plugin (gpujob.Evaluate).
//
// The scheduler sends the nodes (nodeCacheCapable: false) but not the
// pods on them: shared-GPU mode counts the nvidia.com/gpumem of the pods
// a Pods function lists (an informer's lister in cmd/gpumem-extender).
package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpumem/gpumem/kube/gpujob"
)

// Extender serves /filter and /prioritize.
type Extender struct {
	Est gpujob.Estimator
	// Pods lists the pods bound to node (nil: none counted).
	Pods    func(node string) []*v1.Pod
	Timeout time.Duration // per request; 0: 10s

	// memo remembers the jobs of the pods seen (gpujob.Memo over Est):
	// prioritize after filter, and the replicas of a workload, find
	// their estimates kept.
	once sync.Once
	memo *gpujob.Memo
}

func (e *Extender) jobs() *gpujob.Memo {
	e.once.Do(func() { e.memo = gpujob.NewMemo(e.Est, 0) })
	return e.memo
}

// Handler routes the verbs: POST /filter and POST /prioritize.
func (e *Extender) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /filter", e.filter)
	mux.HandleFunc("POST /prioritize", e.prioritize)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return mux
}

// evaluate reads the arguments and evaluates the pod's job on their
// nodes. A nil cycle with a nil error is a pod without a job.
func (e *Extender) evaluate(r *http.Request) (*extenderv1.ExtenderArgs, *gpujob.Cycle, error) {
	var args extenderv1.ExtenderArgs
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&args); err != nil {
		return nil, nil, fmt.Errorf("extender args: %v", err)
	}
	if args.Pod == nil || args.Nodes == nil {
		return &args, nil, fmt.Errorf("extender args: want pod and nodes (nodeCacheCapable: false)")
	}
	job, ok, err := e.jobs().FromPod(args.Pod)
	if !ok || err != nil {
		return &args, nil, err
	}
	ns := make([]gpujob.Node, len(args.Nodes.Items))
	for i := range args.Nodes.Items {
		n := &args.Nodes.Items[i]
		var held []int64
		if job.Shared && e.Pods != nil {
			for _, p := range e.Pods(n.Name) {
				if b, ok := gpujob.Committed(p); ok && p.UID != args.Pod.UID {
					held = append(held, b)
				}
			}
		}
		ns[i] = gpujob.NewNode(n, held)
	}
	timeout := e.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	c, err := e.jobs().Evaluate(ctx, job, ns)
	return &args, c, err
}

func (e *Extender) filter(w http.ResponseWriter, r *http.Request) {
	args, c, err := e.evaluate(r)
	res := extenderv1.ExtenderFilterResult{FailedNodes: extenderv1.FailedNodesMap{}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}}
	switch {
	case err != nil && (args == nil || args.Nodes == nil || !isJobError(err)):
		res.Error = "gpumem: " + err.Error()
	case err != nil:
		// The pod's job is wrong: no node will do until it changes.
		for _, n := range args.Nodes.Items {
			res.FailedAndUnresolvableNodes[n.Name] = "gpumem: " + err.Error()
		}
		res.Nodes = &v1.NodeList{}
	case c == nil:
		res.Nodes = args.Nodes
	default:
		res.Nodes = &v1.NodeList{}
		for _, n := range args.Nodes.Items {
			f := c.Fits[n.Name]
			switch {
			case f.Fits:
				res.Nodes.Items = append(res.Nodes.Items, n)
			case c.Message != "":
				res.FailedNodes[n.Name] = c.Message
			default:
				res.FailedNodes[n.Name] = f.Reason()
			}
		}
	}
	writeJSON(w, res)
}

func (e *Extender) prioritize(w http.ResponseWriter, r *http.Request) {
	args, c, err := e.evaluate(r)
	if err != nil && (args == nil || args.Nodes == nil) {
		http.Error(w, "gpumem: "+err.Error(), http.StatusBadRequest)
		return
	}
	list := extenderv1.HostPriorityList{}
	for _, n := range args.Nodes.Items {
		var s int64
		if c != nil {
			s = c.Fits[n.Name].Score() * extenderv1.MaxExtenderPriority / 100
		}
		list = append(list, extenderv1.HostPriority{Host: n.Name, Score: s})
	}
	writeJSON(w, list)
}

func isJobError(err error) bool {
	if gpujob.IsRequestError(err) {
		return true
	}
	_, ok := err.(*gpujob.Error)
	return ok
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
