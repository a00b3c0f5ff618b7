// Package plugin is gpumem as a kube-scheduler framework plugin (the
// interfaces of k8s.io/kube-scheduler/framework, release 1.37).
//
// PreFilter reads the pod's job through a gpujob.Memo: a job
// description (the annotation's text) seen before is a map look-up that
// gives its decoded request and its estimates on the cluster's GPU
// kinds; a new one is decoded once and estimated in process once per
// GPU kind among the nodes (gpujob.Local, over the core module's package
// request and budget.Estimate), and both are kept for the next pod that
// carries the same text (the replicas of a Job, Deployment or JobSet).
// PreFilter then checks every node (arithmetic: the free memory of its
// GPU, or what the pods on it leave) and keeps the verdicts in the
// CycleState; when no node fits, it fails the cycle with what the best
// node lacks and what gpumem plan would change (the plan kept with the
// job too). A node's reason is worded only when Filter reports it.
// Filter looks the node up: no estimate, no allocation when the node
// fits. Score prefers the tightest fit. Reserve and Unreserve keep the
// shared-GPU memory of the pods scheduled here that ask no
// nvidia.com/gpumem of their own, so that the next cycle counts them.
//
// Cost, against budget.Estimate of the same job (BenchmarkEstimate,
// lora-8b on an A100: 1.57 µs, 0 allocations), measured in the same run
// on the shared 2-core machine at a load of 3 to 4 (the fastest of 8
// runs of go test -bench . -benchtime 0.3s -count 8; medians in
// parentheses; the fastest moved by up to 1.6× between three such
// runs). "4 kinds" is the scenario's five nodes (A100, H100, L4, a MIG
// slice, a CPU node), "1 kind" the A100 node alone:
//
//	PreFilter                                 4 kinds                       1 kind
//	                                          time        ×Estimate allocs  time        ×Estimate allocs
//	  repeat: the annotation seen before      4.4 µs (5.0)     2.8     11   3.0 µs (6.4)     1.9     11
//	  first seen, catalog model               38 µs (44)        24     47   25 µs (31)        16     38
//	  first seen, inline config.json          46 µs (48)        29     52   36 µs (40)        23     43
//	  cold: empty caches, catalog model       149 µs (162)      95    479   130 µs (153)      83    460
//	  cold: empty caches, inline config       150 µs (165)      96    480   155 µs (205)      99    461
//	Filter, per node                          36 ns (54)      0.02      0
//
// The code before the Memo, run just before (budget.Estimate 1.59 µs),
// took 50 µs (31×, 72 allocations) for every pod of a catalog model, 78
// µs (49×, 203) with an inline config, 141 µs and 164 µs from empty
// caches; Filter 35 ns (the same look-up).
//
// A repeat costs the look-up, the nodes' arithmetic and the verdicts'
// map, and the framework's CycleState write: about two estimates. A
// description seen first costs its four estimates (one per GPU kind:
// the CUDA context and workspace depend on the GPU; about one
// budget.Estimate and its fit each, the difference between the 4-kind
// and 1-kind columns) and, once, the annotation's strict JSON decoding,
// the request's checks and the job's fields; an inline config.json adds
// the decoding of its bytes within the annotation (its model and checks
// are kept by their SHA-256 in package request's Cache). A cold start
// adds budget.NewModel, once per model and fine-tuning setup. Over
// gpumem serve on loopback, PreFilter took 1.05 ms.
//
// Pods without a job are left alone (PreFilter returns Skip). The
// verdicts are taken before preemption's what-ifs: the plugin has no
// PreFilterExtensions, so a victim's shared memory is not given back in
// the simulation.
package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpumem/gpumem/kube/gpujob"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GPUMem"

const stateKey fwk.StateKey = Name

// Args are the plugin's arguments (pluginConfig[].args). The plugin
// estimates in process: it needs no service address.
type Args struct {
	// Timeout bounds the estimates of one PreFilter ("5s"; default 10s).
	Timeout string `json:"timeout"`
}

// Plugin is the GPUMem plugin.
type Plugin struct {
	memo *gpujob.Memo

	mu       sync.Mutex
	reserved map[types.UID]reservation
}

type reservation struct {
	node  string
	bytes int64
}

var (
	_ fwk.PreFilterPlugin = (*Plugin)(nil)
	_ fwk.FilterPlugin    = (*Plugin)(nil)
	_ fwk.ScorePlugin     = (*Plugin)(nil)
	_ fwk.ReservePlugin   = (*Plugin)(nil)
)

// New is the plugin's factory (frameworkruntime.PluginFactory).
func New(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	var args Args
	if u, ok := obj.(*runtime.Unknown); ok && len(u.Raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(u.Raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&args); err != nil {
			if strings.Contains(err.Error(), `unknown field "serviceURL"`) {
				return nil, fmt.Errorf("%s args: serviceURL: the plugin estimates in process; leave serviceURL out", Name)
			}
			return nil, fmt.Errorf("%s args: %v", Name, err)
		}
	}
	p := NewWith(gpujob.NewLocal())
	if args.Timeout != "" {
		d, err := time.ParseDuration(args.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s args: timeout %q: want a positive duration such as 5s", Name, args.Timeout)
		}
		p.memo.Timeout = d
	}
	return p, nil
}

// NewWith is a plugin over est, remembering the jobs it reads (a
// gpujob.Memo of gpujob.DefaultMemoSize descriptions).
func NewWith(est gpujob.Estimator) *Plugin {
	m := gpujob.NewMemo(est, 0)
	m.Timeout = 10 * time.Second
	return &Plugin{memo: m, reserved: map[types.UID]reservation{}}
}

// Name is Name.
func (p *Plugin) Name() string { return Name }

type state struct{ c *gpujob.Cycle }

// Clone shares the verdicts: nothing changes them after PreFilter.
func (s *state) Clone() fwk.StateData { return s }

// PreFilter estimates the pod's job on every GPU kind of nodes.
func (p *Plugin) PreFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	job, ok, err := p.memo.FromPod(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "gpumem: "+err.Error())
	}
	ns := make([]gpujob.Node, len(nodes))
	p.mu.Lock()
	var live map[types.UID]bool
	if job.Shared && len(p.reserved) > 0 {
		live = make(map[types.UID]bool, len(p.reserved))
	}
	for i, ni := range nodes {
		var held []int64
		if job.Shared {
			for _, pi := range ni.GetPods() {
				pod := pi.GetPod()
				if b, ok := p.heldBy(pod, ni.Node().Name); ok {
					held = append(held, b)
				}
				if live != nil {
					live[pod.UID] = true
				}
			}
		}
		ns[i] = p.memo.Node(ni.Node(), held)
	}
	// A reservation whose pod is on no node any more (deleted, or
	// forgotten after a failed binding) holds nothing.
	for uid := range p.reserved {
		if live != nil && !live[uid] {
			delete(p.reserved, uid)
		}
	}
	p.mu.Unlock()
	c, err := p.memo.Evaluate(ctx, job, ns)
	if err != nil {
		if gpujob.IsRequestError(err) {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "gpumem: "+err.Error())
		}
		return nil, fwk.AsStatus(err)
	}
	cs.Write(stateKey, &state{c})
	if c.Message != "" {
		return nil, fwk.NewStatus(fwk.Unschedulable, c.Message)
	}
	return nil, nil
}

// heldBy is what pod holds of its node's GPUs in shared mode: its
// nvidia.com/gpumem, else what Reserve set aside for it. p.mu is held.
func (p *Plugin) heldBy(pod *v1.Pod, node string) (int64, bool) {
	if b, ok := gpujob.Committed(pod); ok {
		return b, true
	}
	if r, ok := p.reserved[pod.UID]; ok && r.node == node {
		return r.bytes, true
	}
	return 0, false
}

// PreFilterExtensions is nil: see the package doc.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func cycleOf(cs fwk.CycleState) (*gpujob.Cycle, error) {
	d, err := cs.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("%s: no PreFilter state: %w", Name, err)
	}
	s, ok := d.(*state)
	if !ok {
		return nil, errors.New(Name + ": the PreFilter state is of another type")
	}
	return s.c, nil
}

// Filter looks up the node's verdict.
func (p *Plugin) Filter(_ context.Context, cs fwk.CycleState, _ *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	c, err := cycleOf(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	f, ok := c.Fits[ni.Node().Name]
	switch {
	case !ok:
		return fwk.NewStatus(fwk.Unschedulable, "gpumem: the node joined after the pod's estimates")
	case !f.Fits:
		return fwk.NewStatus(fwk.Unschedulable, f.Reason())
	}
	return nil
}

// Score is the tightness of the fit (gpujob.Fit.Score), 0 to 100.
func (p *Plugin) Score(_ context.Context, cs fwk.CycleState, _ *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	c, err := cycleOf(cs)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	return c.Fits[ni.Node().Name].Score() * fwk.MaxNodeScore / 100, nil
}

// ScoreExtensions is nil: the scores are on the framework's scale.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// Reserve sets aside the memory of a shared-GPU pod that asks no
// nvidia.com/gpumem of its own.
func (p *Plugin) Reserve(_ context.Context, cs fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	c, err := cycleOf(cs)
	if err != nil {
		return nil // a pod PreFilter skipped
	}
	if _, asked := gpujob.Committed(pod); !c.Job.Shared || asked {
		return nil
	}
	p.mu.Lock()
	p.reserved[pod.UID] = reservation{node: node, bytes: c.Fits[node].Need}
	p.mu.Unlock()
	return nil
}

// Unreserve gives back what Reserve set aside.
func (p *Plugin) Unreserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) {
	p.mu.Lock()
	delete(p.reserved, pod.UID)
	p.mu.Unlock()
}

// Reserved is the memory Reserve holds for pods on node, in bytes.
func (p *Plugin) Reserved(node string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b int64
	for _, r := range p.reserved {
		if r.node == node {
			b += r.bytes
		}
	}
	return b
}
