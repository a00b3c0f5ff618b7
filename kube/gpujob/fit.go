package gpujob

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/gpumem/gpumem"
)

// Node is a node as the components see it.
type Node struct {
	Name   string
	GPU    GPU
	HasGPU bool
	// Err is a bad GPU label of the node.
	Err error
	// Held is what each pod on the node holds of its GPUs in shared
	// mode, in bytes (Committed, or what the scheduler reserved).
	Held []int64
}

// NewNode reads node; held are the shared-mode bytes of its pods.
func NewNode(node *v1.Node, held []int64) Node {
	g, ok, err := NodeGPU(node)
	return Node{Name: node.Name, GPU: g, HasGPU: ok, Err: err, Held: held}
}

// Fit is a job's fit on one node.
type Fit struct {
	Fits bool
	// Need is what one GPU must set aside (Answer.Need); Avail is the
	// free memory of the node's emptiest GPU: a whole GPU's free memory
	// in whole-GPU mode, what the pods there leave in shared mode.
	Need, Avail int64
	// Short is how much Avail falls short of Need (the service's
	// shortfall in whole-GPU mode).
	Short int64

	// What Reason words, kept unworded: most verdicts are read for
	// Fits, Need and Avail alone (Filter, Score), and a message is
	// needed only for the nodes the scheduler reports.
	nodeErr   error  // a bad GPU label of the node
	noGPU     bool   // the node has no GPU labels
	asks, has int64  // the pod asks more GPUs than the node has
	device    string // the GPU's name, for a job too large for it
}

// Reason says why the job does not fit ("" when it fits), worded when
// asked.
func (f Fit) Reason() string {
	switch {
	case f.nodeErr != nil:
		return "gpumem: " + f.nodeErr.Error()
	case f.noGPU:
		return "gpumem: node has no GPU labels"
	case f.asks > f.has:
		return fmt.Sprintf("gpumem: the pod asks %d GPUs, the node has %d", f.asks, f.has)
	case f.Fits:
		return ""
	}
	return fmt.Sprintf("gpumem: needs %s per GPU, %s has %s free: %s short", human(f.Need), f.device, human(f.Avail), human(f.Short))
}

// Score is the tightness of a fit, 0 to 100: the share of the free
// memory the job takes. A best fit leaves the larger GPUs to the larger
// jobs.
func (f Fit) Score() int64 {
	if !f.Fits || f.Avail <= 0 {
		return 0
	}
	return min(100, f.Need*100/f.Avail)
}

// Cycle is a job evaluated against a set of nodes: one estimate per GPU
// kind, then arithmetic per node.
type Cycle struct {
	Job     Job
	Answers map[string]Answer // by GPU.Key; read-only (a Memo's shared with other cycles)
	GPUs    map[string]GPU    // by GPU.Key
	Fits    map[string]Fit    // by node name
	// Message is the unschedulable message when no node fits: by how
	// much the best node falls short and what gpumem plan would change.
	Message string
}

// Evaluate estimates job once per GPU kind among nodes and checks every
// node. An error is the job's (a RequestError names the request field)
// or the estimator's.
func Evaluate(ctx context.Context, est Estimator, job Job, nodes []Node) (*Cycle, error) {
	return evaluate(ctx, est, job, nodes, nil)
}

// evaluate is Evaluate, with the estimates and advice taken from m and
// kept there when m is not nil and read job (Memo.FromPod).
func evaluate(ctx context.Context, est Estimator, job Job, nodes []Node, m *Memo) (*Cycle, error) {
	if job.entry == nil {
		m = nil
	}
	c := &Cycle{Job: job, GPUs: map[string]GPU{}, Fits: make(map[string]Fit, len(nodes))}
	for _, n := range nodes {
		if !n.HasGPU {
			continue
		}
		if _, done := c.GPUs[n.GPU.Key()]; !done {
			c.GPUs[n.GPU.Key()] = n.GPU // the first node's of the kind
		}
	}
	// kinds are the GPU kinds in the nodes' order, the first node's GPU
	// of each: built when they are to be estimated, not for a Memo's
	// answers.
	kinds := func() []GPU {
		kinds := make([]GPU, 0, len(c.GPUs))
		for _, n := range nodes {
			if n.HasGPU && !slices.ContainsFunc(kinds, func(g GPU) bool { return g.Key() == n.GPU.Key() }) {
				kinds = append(kinds, n.GPU)
			}
		}
		return kinds
	}
	var err error
	if m != nil {
		c.Answers, err = m.estimates(ctx, est, job, c.GPUs, kinds)
	} else {
		c.Answers, err = est.Estimate(ctx, job.Request, kinds())
		sourced(err, job.Source)
	}
	if err != nil {
		return nil, err
	}
	var best Fit
	bestName := ""
	var bestGPU GPU
	maxCount := int64(0)
	any := false
	for _, n := range nodes {
		f := c.fit(n)
		c.Fits[n.Name] = f
		if n.HasGPU {
			maxCount = max(maxCount, n.GPU.Count)
		}
		any = any || f.Fits
		if n.HasGPU && n.Err == nil && n.GPU.Count >= job.GPUs && (bestName == "" || f.Avail-f.Need > best.Avail-best.Need) {
			best, bestName, bestGPU = f, n.Name, n.GPU
		}
	}
	if any {
		return c, nil
	}
	switch {
	case len(c.Answers) == 0:
		c.Message = "gpumem: no node has GPU labels (" + LabelProduct + ", " + LabelMemory + ")"
	case bestName == "":
		c.Message = fmt.Sprintf("gpumem: the pod asks %d GPUs, no node has more than %d", job.GPUs, maxCount)
	default:
		a := c.Answers[bestGPU.Key()]
		c.Message = fmt.Sprintf("gpumem: the job needs %s per GPU (peak %s in %s, headroom %s); the best node %s (%s) has %s free: %s short",
			human(best.Need), human(max(a.DevicePeak, a.RequiredPeak)), a.Phase, human(a.MinHeadroom), bestName, a.Device, human(best.Avail), human(best.Short))
		var advice string
		var ok bool
		if m != nil {
			advice, ok = m.advice(ctx, est, job, bestGPU)
		} else {
			var err error
			advice, err = est.Advice(ctx, job.Request, bestGPU)
			ok = err == nil
		}
		if ok {
			c.Message += "; gpumem plan: " + advice
		}
	}
	return c, nil
}

// sourced names source in err when it is a RequestError that names none.
func sourced(err error, source string) {
	var re *RequestError
	if errors.As(err, &re) && re.Source == "" {
		re.Source = source
	}
}

// fit checks one node with the estimates of c.
func (c *Cycle) fit(n Node) Fit {
	switch {
	case n.Err != nil:
		return Fit{nodeErr: n.Err}
	case !n.HasGPU:
		return Fit{noGPU: true}
	case n.GPU.Count < c.Job.GPUs:
		return Fit{asks: c.Job.GPUs, has: n.GPU.Count}
	}
	a := c.Answers[n.GPU.Key()]
	f := Fit{Need: a.Need(), Avail: a.Free, device: a.Device}
	if !c.Job.Shared {
		f.Fits, f.Short = a.Fits, a.Shortfall
	} else {
		f.Avail = emptiest(a.Free, n.GPU.Count, n.Held)
		f.Short = max(0, f.Need-f.Avail)
		f.Fits = f.Short == 0
	}
	return f
}

// emptiest packs held onto count GPUs of free bytes each, largest first,
// each on the first GPU with room (HAMi's own placement is not read),
// and returns the free memory of the emptiest GPU.
func emptiest(free, count int64, held []int64) int64 {
	if len(held) == 0 {
		return free
	}
	left := make([]int64, count)
	for i := range left {
		left[i] = free
	}
	h := slices.Clone(held)
	slices.SortFunc(h, func(a, b int64) int { return int(min(max(b-a, -1), 1)) })
	for _, b := range h {
		i := slices.IndexFunc(left, func(l int64) bool { return l >= b })
		if i < 0 {
			i = 0 // overcommitted: charge the first GPU
		}
		left[i] -= b
	}
	return max(0, slices.Max(left))
}

func human(b int64) string { return gpumem.Bytes(max(b, 0)).String() }
