package gpujob

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpumem/gpumem/request"
)

// DefaultMemoSize bounds the job descriptions a Memo keeps unless
// NewMemo is told otherwise. An entry holds the decoded request (an
// inline config.json's bytes with it) and one Answer per GPU kind of
// the cluster.
const DefaultMemoSize = 512

// maxMemoText is the longest job description a Memo keeps: a longer
// one (an inline checkpoint header) is decoded and estimated for each
// pod, so that the Memo's memory stays bounded by its size times this.
const maxMemoText = 64 << 10

// Memo remembers, per distinct job description, what the components
// derive from it: the request decoded from the annotation gpumem.io/job
// (or the gpumem.io/* labels), its estimates on the cluster's GPU kinds
// and what gpumem plan would change on each. The replicas of a Job,
// Deployment or JobSet carry the same annotation byte for byte, so that
// the second replica's job costs a map look-up keyed by the
// annotation's text, not its decoding, checks and estimates.
//
// The estimates of an entry are for one set of GPU kinds: when the
// nodes' kinds change (a kind joins or leaves the cluster), the next
// evaluation estimates the job again on the new set. An estimate of a
// job on a GPU kind depends on nothing else (the free memory of the
// kind and the job's request; the pods on a node are arithmetic after
// it), so that an entry never goes stale otherwise. The least recently
// used entry is dropped once the Memo holds its size. It is safe for
// concurrent use.
type Memo struct {
	// Timeout bounds the estimates of an Evaluate that does not find
	// them kept, and separately its advice (0: ctx's own deadline
	// only); a kept answer needs no deadline. Set it before the Memo is
	// used.
	Timeout time.Duration

	est Estimator

	mu      sync.Mutex
	max     int
	entries map[memoKey]*list.Element // of *memoEntry
	order   list.List                 // the most recently used first

	decoded, estimated atomic.Int64

	// nodes are the nodes read last (Node), by name.
	nodesMu sync.Mutex
	nodes   map[string]memoNode
}

// memoNode is a node object and what NodeGPU read from it.
type memoNode struct {
	obj *v1.Node
	gpu GPU
	ok  bool
	err error
}

// Node is NewNode, with the node's GPU labels read once per node
// object: the scheduler's snapshot and the informers replace a node's
// object when it changes and never change one in place, so that the
// same object has the same labels. The Memo keeps the last object of
// each node name, up to twice the nodes of the last call that grew it
// past its bound.
func (m *Memo) Node(node *v1.Node, held []int64) Node {
	m.nodesMu.Lock()
	r, ok := m.nodes[node.Name]
	m.nodesMu.Unlock()
	if !ok || r.obj != node {
		r = memoNode{obj: node}
		r.gpu, r.ok, r.err = NodeGPU(node)
		m.nodesMu.Lock()
		if m.nodes == nil || len(m.nodes) >= maxMemoNodes {
			m.nodes = map[string]memoNode{} // nodes gone from the cluster go with the rest
		}
		m.nodes[node.Name] = r
		m.nodesMu.Unlock()
	}
	return Node{Name: node.Name, GPU: r.gpu, HasGPU: r.ok, Err: r.err, Held: held}
}

// maxMemoNodes bounds the nodes a Memo keeps read: more than the
// largest clusters Kubernetes supports (5000 nodes), so that it is
// emptied only when nodes come and go, not on every cycle.
const maxMemoNodes = 16384

// NewMemo returns a Memo over est keeping up to size job descriptions
// (DefaultMemoSize when size < 1).
func NewMemo(est Estimator, size int) *Memo {
	if size < 1 {
		size = DefaultMemoSize
	}
	return &Memo{est: est, max: size, entries: map[memoKey]*list.Element{}}
}

// Estimator is the estimator the Memo calls on a miss.
func (m *Memo) Estimator() Estimator { return m.est }

// Decoded counts the job descriptions decoded, Estimated the calls to
// the Estimator's Estimate (one per description and set of GPU kinds);
// Len is the descriptions held. For tests and metrics.
func (m *Memo) Decoded() int64   { return m.decoded.Load() }
func (m *Memo) Estimated() int64 { return m.estimated.Load() }
func (m *Memo) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

// FromPod is FromPod with the pod's description decoded once per
// distinct text: a description seen before takes the request (or the
// error) decoded then.
func (m *Memo) FromPod(pod *v1.Pod) (Job, bool, error) { return readPod(pod, m) }

// Evaluate is Evaluate over the Memo's Estimator, with the estimates and
// the advice of a job read by m.FromPod kept for the next pod with the
// same description.
func (m *Memo) Evaluate(ctx context.Context, job Job, nodes []Node) (*Cycle, error) {
	return evaluate(ctx, m.est, job, nodes, m)
}

// memoKey is a job description: the annotation's text, or the JSON the
// labels stand for.
type memoKey struct {
	text   string
	labels bool
}

// memoEntry is what a Memo keeps of one description.
type memoEntry struct {
	key memoKey
	req request.Estimate // read-only once stored
	err error            // the description's error, from decoding

	mu     sync.Mutex
	est    *memoEstimates        // replaced whole, never changed
	advice map[string]memoAdvice // by GPU.Key
}

// memoEstimates are a job's estimates on one set of GPU kinds, or the
// job's error there (a RequestError).
type memoEstimates struct {
	keys    []string
	answers map[string]Answer // read-only
	err     error
}

type memoAdvice struct {
	text string
	ok   bool
}

// entry returns the entry of k, decoding it with decode when it is new.
func (m *Memo) entry(k memoKey, decode func() (request.Estimate, error)) *memoEntry {
	m.mu.Lock()
	if el, ok := m.entries[k]; ok {
		m.order.MoveToFront(el)
		m.mu.Unlock()
		return el.Value.(*memoEntry)
	}
	m.mu.Unlock()
	m.decoded.Add(1)
	e := &memoEntry{key: k}
	e.req, e.err = decode()
	if len(k.text) > maxMemoText {
		return e // used for this job only
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.entries[k]; ok { // decoded meanwhile by another caller
		m.order.MoveToFront(el)
		return el.Value.(*memoEntry)
	}
	for m.order.Len() >= m.max {
		old := m.order.Back()
		delete(m.entries, old.Value.(*memoEntry).key)
		m.order.Remove(old)
	}
	m.entries[k] = m.order.PushFront(e)
	return e
}

// estimates returns job's answers on the GPU kinds of gpus (by key):
// the entry's when they are for the same set of kinds, else est's on
// kinds(), kept unless the error is not the job's (a deadline, an
// internal error).
func (m *Memo) estimates(ctx context.Context, est Estimator, job Job, gpus map[string]GPU, kindsOf func() []GPU) (map[string]Answer, error) {
	e := job.entry
	e.mu.Lock()
	cur := e.est
	e.mu.Unlock()
	if cur != nil && sameKinds(cur.keys, gpus) {
		return cur.answers, cur.err
	}
	kinds := kindsOf()
	m.estimated.Add(1)
	ctx, cancel := m.within(ctx)
	answers, err := est.Estimate(ctx, job.Request, kinds)
	cancel()
	if err != nil {
		sourced(err, job.Source)
		if !IsRequestError(err) {
			return nil, err
		}
		answers = nil
	}
	keys := make([]string, len(kinds))
	for i, g := range kinds {
		keys[i] = g.Key()
	}
	e.mu.Lock()
	e.est = &memoEstimates{keys: keys, answers: answers, err: err}
	e.advice = nil // for the kinds of the estimates before
	e.mu.Unlock()
	return answers, err
}

// sameKinds reports whether keys are the keys of gpus, in any order
// (keys has none twice).
func sameKinds(keys []string, gpus map[string]GPU) bool {
	if len(keys) != len(gpus) {
		return false
	}
	for _, k := range keys {
		if _, ok := gpus[k]; !ok {
			return false
		}
	}
	return true
}

// advice returns est.Advice of job on g, kept per GPU kind; ok is false
// when there is none (a job whose plan fails).
func (m *Memo) advice(ctx context.Context, est Estimator, job Job, g GPU) (string, bool) {
	e, k := job.entry, g.Key()
	e.mu.Lock()
	a, done := e.advice[k]
	e.mu.Unlock()
	if done {
		return a.text, a.ok
	}
	ctx, cancel := m.within(ctx)
	defer cancel()
	text, err := est.Advice(ctx, job.Request, g)
	if err != nil && ctx.Err() != nil {
		return "", false // the deadline's, not the job's: not kept
	}
	a = memoAdvice{text: text, ok: err == nil}
	e.mu.Lock()
	if e.advice == nil {
		e.advice = map[string]memoAdvice{}
	}
	e.advice[k] = a
	e.mu.Unlock()
	return a.text, a.ok
}

// within is ctx bounded by m.Timeout.
func (m *Memo) within(ctx context.Context) (context.Context, context.CancelFunc) {
	if m.Timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, m.Timeout)
}
