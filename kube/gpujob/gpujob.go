// Package gpujob is what gpumem's Kubernetes components share: the job a
// pod describes, the GPUs a node carries, and whether the one fits the
// other.
//
// A pod describes its job in the annotation gpumem.io/job, whose value is
// the body of gpumem serve's POST /v1/estimate, unchanged: one schema,
// owned by the core module's package request (request.Estimate), which
// decodes it, checks it and turns it into a budget.Job here as it does in
// gpumem serve: {"model": "llama-3-8b", "mode": "train", "batch": 4,
// "seq": 2048}. For the common fields, labels will do instead (see
// JobLabels). The components estimate in process (Local): no service to
// deploy, no network hop.
//
// A node's GPUs are read from the labels NVIDIA GPU Feature Discovery
// writes: nvidia.com/gpu.product (the product name, "NVIDIA-A100-SXM4-80GB"),
// nvidia.com/gpu.memory (memory.total of nvidia-smi, in MiB) and
// nvidia.com/gpu.count, with the allocatable nvidia.com/gpu when the count
// label is missing. A product in gpumem's device catalog takes the
// catalog's capacity (what CUDA reports, less than nvidia-smi's total); a
// product not in it (a MIG slice, a new part) takes the labelled memory.
//
// Two modes. Whole-GPU (the default): the pod asks nvidia.com/gpu: N, and
// the per-GPU estimate (per rank for a multi-GPU layout: tensor_parallel_size,
// tensor_split) must fit one GPU of the node. Shared-GPU (HAMi's
// nvidia.com/gpumem resource, in MiB, or the label gpumem.io/sharing:
// shared): the job must fit in what the pods already on the node leave
// free on one of its GPUs.
package gpujob

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/request"
)

// Annotations, labels and resources the components read and write.
const (
	// AnnotationJob holds the job: an estimate request (request.Estimate).
	AnnotationJob = "gpumem.io/job"
	// AnnotationEstimate is written by the admission webhook: the
	// per-GPU breakdown of the estimate on the cluster's GPU kinds.
	AnnotationEstimate = "gpumem.io/estimate"
	// LabelSharing set to "shared" asks for shared-GPU mode.
	LabelSharing = "gpumem.io/sharing"

	// LabelProduct, LabelMemory and LabelCount are GPU Feature
	// Discovery's node labels.
	LabelProduct = "nvidia.com/gpu.product"
	LabelMemory  = "nvidia.com/gpu.memory"
	LabelCount   = "nvidia.com/gpu.count"

	// ResourceGPU is the NVIDIA device plugin's whole-GPU resource;
	// ResourceGPUMem is HAMi's per-GPU memory resource, in MiB.
	ResourceGPU    v1.ResourceName = "nvidia.com/gpu"
	ResourceGPUMem v1.ResourceName = "nvidia.com/gpumem"
)

// JobLabels maps pod labels to estimate request fields, for jobs that
// need no more than these. Label values are strings; the numeric fields
// are sent as numbers.
var JobLabels = []struct {
	Label, Field string
	Numeric      bool
}{
	{"gpumem.io/model", "model", false},
	{"gpumem.io/mode", "mode", false},
	{"gpumem.io/batch", "batch", true},
	{"gpumem.io/seq", "seq", true},
	{"gpumem.io/generate", "generate", true},
	{"gpumem.io/precision", "precision", false},
	{"gpumem.io/optimizer", "optimizer", false},
	{"gpumem.io/checkpointing", "checkpointing", false},
	{"gpumem.io/lora-rank", "lora_rank", true},
	{"gpumem.io/quant", "quant", false},
	{"gpumem.io/runtime", "runtime", false},
}

// Job is a pod's job: the estimate request and what the pod asks of the
// node.
type Job struct {
	// Request is the estimate request, decoded strictly (request.Decode);
	// gpu and memory are set per GPU kind by ForGPU.
	Request request.Estimate
	// Source is where the request came from: the annotation or the
	// labels, for messages.
	Source string
	// GPUs is the whole GPUs the pod asks (nvidia.com/gpu), at least 1.
	GPUs int64
	// Shared is shared-GPU mode; SharedMiB is the nvidia.com/gpumem the
	// pod asks already (0: none yet).
	Shared    bool
	SharedMiB int64
	// Ranks is the GPUs the request's layout spreads the model over
	// (tensor_parallel_size, tensor_split); the pod must ask that many.
	Ranks int64

	// entry is the job's description in the Memo that read it (nil
	// without one): its estimates and advice, kept for the next pod
	// that describes the same job.
	entry *memoEntry
}

// Error is a bad pod or node description: Where names the annotation,
// label or resource (and the request field, when it is one), Value the
// value at fault.
type Error struct {
	Where string
	Value string
	Msg   string
}

func (e *Error) Error() string {
	if e.Value == "" {
		return e.Where + ": " + e.Msg
	}
	return fmt.Sprintf("%s %q: %s", e.Where, e.Value, e.Msg)
}

// FromPod reads the job of pod. ok is false for a pod that describes
// none (no annotation, no gpumem.io/model label): the components leave
// it alone.
func FromPod(pod *v1.Pod) (j Job, ok bool, err error) { return readPod(pod, nil) }

// readPod reads the job of pod, its description decoded by m when m is
// not nil (Memo.FromPod).
func readPod(pod *v1.Pod, m *Memo) (j Job, ok bool, err error) {
	if pod == nil {
		return j, false, nil
	}
	raw, hasAnn := pod.Annotations[AnnotationJob]
	_, hasLabel := pod.Labels[JobLabels[0].Label]
	switch {
	case hasAnn:
		const source = "annotation " + AnnotationJob
		j.Source = source
		if m != nil {
			j.entry = m.entry(memoKey{text: raw}, func() (request.Estimate, error) { return decodeAnnotation(raw, source) })
			j.Request, err = j.entry.req, j.entry.err
		} else {
			j.Request, err = decodeAnnotation(raw, j.Source)
		}
		if err != nil {
			return j, true, err
		}
	case hasLabel:
		const source = "labels gpumem.io/*"
		j.Source = source
		body, err := labelsBody(pod.Labels)
		if err != nil {
			return j, true, err
		}
		decode := func() (request.Estimate, error) {
			req, err := request.Decode(body)
			if err != nil {
				return req, requestError(source, err)
			}
			return req, nil
		}
		if m != nil {
			j.entry = m.entry(memoKey{text: string(body), labels: true}, decode)
			j.Request, err = j.entry.req, j.entry.err
		} else {
			j.Request, err = decode()
		}
		if err != nil {
			return j, true, err
		}
	default:
		return j, false, nil
	}
	if err := j.readResources(pod); err != nil {
		return j, true, err
	}
	j.readRanks()
	if !j.Shared && j.Ranks > j.GPUs {
		return j, true, &Error{Where: "resource " + string(ResourceGPU), Value: strconv.FormatInt(j.GPUs, 10),
			Msg: fmt.Sprintf("the job's layout spreads the model over %d GPUs: ask nvidia.com/gpu: %d", j.Ranks, j.Ranks)}
	}
	return j, true, nil
}

// decodeAnnotation decodes the annotation's value raw, strictly: an
// error names the annotation (source) and, for a field of the request,
// the field.
func decodeAnnotation(raw, source string) (request.Estimate, error) {
	body := bytes.TrimSpace([]byte(raw))
	if len(body) == 0 || body[0] != '{' {
		return request.Estimate{}, &Error{Where: source, Value: truncate(raw, 40), Msg: "want gpumem serve's estimate request, a JSON object such as {\"model\": \"llama-3-8b\", \"mode\": \"train\"}"}
	}
	req, err := request.Decode(body)
	if err != nil {
		var e *request.Error
		if errors.As(err, &e) && e.Field == "" {
			// The annotation as a whole: not JSON, or not one object.
			return req, &Error{Where: source, Value: truncate(raw, 40), Msg: strings.Replace(e.Msg, "invalid JSON", "not JSON", 1)}
		}
		return req, requestError(source, err)
	}
	return req, nil
}

// labelsBody is the request the gpumem.io/* labels stand for, as JSON;
// an error names the label at fault.
func labelsBody(labels map[string]string) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	for _, l := range JobLabels {
		v, given := labels[l.Label]
		if !given {
			continue
		}
		if l.Numeric {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, &Error{Where: "label " + l.Label, Value: v, Msg: "want a whole number"}
			}
			fields[l.Field] = json.RawMessage(strconv.FormatInt(n, 10))
			continue
		}
		b, _ := json.Marshal(v) // a string: cannot fail
		fields[l.Field] = b
	}
	body, _ := json.Marshal(fields) // raw messages of our own: cannot fail
	return body, nil
}

// readResources reads nvidia.com/gpu and nvidia.com/gpumem from the
// containers' requests (limits when no request: extended resources have
// both equal) and the sharing label.
func (j *Job) readResources(pod *v1.Pod) error {
	sum := func(name v1.ResourceName) (int64, bool, error) {
		var total int64
		var given bool
		for _, c := range pod.Spec.Containers {
			q, ok := c.Resources.Requests[name]
			if !ok {
				q, ok = c.Resources.Limits[name]
			}
			if !ok {
				continue
			}
			n, exact := q.AsInt64()
			if !exact || n < 0 {
				return 0, true, &Error{Where: "container " + c.Name + " resource " + string(name), Value: q.String(), Msg: "want a whole, non-negative number"}
			}
			total, given = total+n, true
		}
		return total, given, nil
	}
	gpus, _, err := sum(ResourceGPU)
	if err != nil {
		return err
	}
	mem, hasMem, err := sum(ResourceGPUMem)
	if err != nil {
		return err
	}
	j.GPUs = max(gpus, 1)
	j.SharedMiB = mem
	switch s := pod.Labels[LabelSharing]; s {
	case "", "whole":
		j.Shared = hasMem
	case "shared":
		j.Shared = true
	default:
		return &Error{Where: "label " + LabelSharing, Value: s, Msg: "want shared or whole"}
	}
	return nil
}

// readRanks reads the GPUs the request's layout spreads the model over.
// The request's values are checked when it is estimated, which names the
// field at fault.
func (j *Job) readRanks() {
	j.Ranks = max(1, int64(j.Request.TensorParallelSize), int64(len(j.Request.TensorSplit)))
}

// ForGPU is the job's request for g: gpu set to g's catalog name, or
// memory to its labelled size, in place of any gpu or memory the pod
// gave (the scheduler decides the GPU).
func (j Job) ForGPU(g GPU) request.Estimate { return onGPU(j.Request, g) }

// onGPU is req with gpu or memory naming g.
func onGPU(req request.Estimate, g GPU) request.Estimate {
	gpu, memory := target(g)
	req.GPU, req.Memory = gpu, nil
	if memory != "" {
		req.Memory = json.RawMessage(strconv.Quote(memory))
	}
	return req
}

// GPU is a node's GPU kind and how many it has.
type GPU struct {
	// Product is the GFD product label, as given.
	Product string
	// Device is the catalog entry (Catalog true) or the labelled memory.
	Device  gpumem.Device
	Catalog bool
	Count   int64

	key string // Key, worded once by NodeGPU
}

// Key names the GPU kind: the estimate of a job is the same on every
// GPU of one key.
func (g GPU) Key() string {
	if g.key != "" {
		return g.key
	}
	if g.Catalog {
		return g.Device.Name
	}
	return strconv.FormatInt(int64(g.Device.Capacity), 10) + "B"
}

// NodeGPU reads node's GPUs from its GFD labels. ok is false for a node
// without GPUs (no product or memory label, or a count of zero).
func NodeGPU(node *v1.Node) (g GPU, ok bool, err error) {
	if node == nil {
		return g, false, nil
	}
	product, hasProduct := node.Labels[LabelProduct]
	memText, hasMem := node.Labels[LabelMemory]
	if !hasProduct && !hasMem {
		return g, false, nil
	}
	g.Product = product
	var labelled gpumem.Bytes
	if hasMem {
		mib, err := strconv.ParseInt(memText, 10, 64)
		if err != nil || mib <= 0 || mib > 1<<30 {
			return g, false, &Error{Where: "node " + node.Name + " label " + LabelMemory, Value: memText, Msg: "want the GPU's memory in MiB, a positive whole number"}
		}
		labelled = gpumem.Bytes(mib) << 20
	}
	// GFD writes the product with its spaces as dashes
	// ("NVIDIA-A100-SXM4-80GB"), and time-slicing and MPS sharing append
	// -SHARED.
	name := strings.ReplaceAll(strings.TrimSuffix(product, "-SHARED"), "-", " ")
	if d, found := gpumem.LookupDevice(name); found && hasProduct && (!hasMem || d.Capacity <= labelled) {
		// The catalog's capacity is CUDA's total, below nvidia-smi's
		// memory.total; a catalog entry larger than the label is another
		// part (a short name resolved to its largest size).
		g.Device, g.Catalog = d, true
	} else if hasMem {
		label := product
		if label == "" {
			label = "GPU"
		}
		g.Device = gpumem.Device{Name: label + " (" + memText + " MiB)", Capacity: labelled}
	} else {
		return g, false, &Error{Where: "node " + node.Name + " label " + LabelProduct, Value: product, Msg: "not in gpumem's device catalog and no " + LabelMemory + " label to fall back to"}
	}
	g.Count = 1
	if c, given := node.Labels[LabelCount]; given {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n < 0 {
			return g, false, &Error{Where: "node " + node.Name + " label " + LabelCount, Value: c, Msg: "want a whole number"}
		}
		g.Count = n
	} else if q, given := node.Status.Allocatable[ResourceGPU]; given {
		g.Count = q.Value()
	}
	g.key = g.Key()
	return g, g.Count > 0, nil
}

// Committed is the GPU memory, in bytes, that pod holds on its node in
// shared mode: its nvidia.com/gpumem request. ok is false for a pod that
// asks none.
func Committed(pod *v1.Pod) (b int64, ok bool) {
	var mib int64
	for _, c := range pod.Spec.Containers {
		q, given := c.Resources.Requests[ResourceGPUMem]
		if !given {
			q, given = c.Resources.Limits[ResourceGPUMem]
		}
		if given {
			mib += q.Value()
			ok = true
		}
	}
	return mib << 20, ok
}

// MiB is b rounded up to whole MiB, as a resource quantity.
func MiB(b int64) resource.Quantity {
	return *resource.NewQuantity((b+(1<<20)-1)>>20, resource.DecimalSI)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
