package leak

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/gpumem/gpumem"
)

// Cause is why an allocation failed, as [OOM.Diagnose] reads the numbers.
type Cause uint8

// Causes, in the order Diagnose tests them.
const (
	// CauseUnknown: the message does not state enough numbers.
	CauseUnknown Cause = iota
	// CauseTooLarge: one request is larger than the whole device (or
	// than the allocator's cap); no setting of this job's other memory
	// makes it fit.
	CauseTooLarge
	// CauseLimit: a cap, quota or limit refused memory the device has:
	// the request fits in the stated free memory, or exceeds an
	// "allowed" cap (set_per_process_memory_fraction, MPS watermark).
	CauseLimit
	// CauseFragmentation: the allocator holds at least the requested
	// amount reserved but unallocated, in pieces too small for the
	// request.
	CauseFragmentation
	// CauseOtherProcesses: memory held outside this process's allocator
	// (other processes, or memory the message cannot attribute) covers
	// the shortfall.
	CauseOtherProcesses
	// CauseExhausted: this process's allocator holds the device; the job
	// needs less memory.
	CauseExhausted
	// CauseWarning: the message is an allocator warning (OOM.Warning),
	// not a failed allocation: TensorFlow's BFC allocator could not get a
	// block the caller asked for opportunistically, and the caller went on
	// without it ("this is not a failure"). Nothing failed there.
	CauseWarning
)

// String returns the cause's name ("fragmentation").
func (c Cause) String() string {
	switch c {
	case CauseTooLarge:
		return "request larger than device"
	case CauseLimit:
		return "cap or limit"
	case CauseFragmentation:
		return "fragmentation"
	case CauseOtherProcesses:
		return "other processes"
	case CauseExhausted:
		return "exhausted by this process"
	case CauseWarning:
		return "warning, not an out-of-memory error"
	}
	return "unknown"
}

// Action is one change that makes room, in gpumem's vocabulary.
type Action uint8

// Actions that [Advice] recommends.
const (
	ActionExpandableSegments Action = iota + 1 // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
	ActionMaxSplitSize                         // PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N (PyTorch 1.10–2.0)
	ActionLowerBatch                           // a smaller micro-batch, with gradient accumulation for the same global batch
	ActionCheckpointing                        // activation (gradient) checkpointing
	ActionFlashAttention                       // a fused attention kernel instead of eager attention
	ActionOptimizer8bit                        // an 8-bit optimizer (bitsandbytes) or a factored one
	ActionFreeOtherProcess                     // stop or move the other processes on the device
	ActionRaiseLimit                           // raise or remove the cap
	ActionShard                                // shard, offload or quantize: the model does not fit one device
	ActionChunk                                // split the one large operation into chunks
	ActionFrameworkSetting                     // a framework's own memory setting (JAX preallocation, TF memory growth)
)

// Advice is one ranked recommendation with its reason.
type Advice struct {
	Action Action
	Text   string // what to change and why, with the numbers
}

// Diagnosis is the verdict on an [OOM] with the numbers behind it.
//
// Sizes are those of the message (stated or derived); a zero size may mean
// "not stated": check the OOM's fields. Fragmentation is (Reserved −
// Allocated) / Reserved, as the guide of LLaVA on a 24 GB card computes it
// (docs/scenarios.md), or −1 when
// the message does not give both.
type Diagnosis struct {
	Cause Cause

	Requested           gpumem.Bytes
	Capacity            gpumem.Bytes
	Free                gpumem.Bytes
	Allocated           gpumem.Bytes
	Reserved            gpumem.Bytes
	ReservedUnallocated gpumem.Bytes
	Allowed             gpumem.Bytes
	// Shortfall is Requested − Free when positive: what had to be found.
	Shortfall gpumem.Bytes
	// OtherProcesses is memory of the processes the message lists (not
	// counting a process identified as this one).
	OtherProcesses gpumem.Bytes
	// Outside is Capacity − Free − Reserved: memory on the device that
	// this allocator does not hold (other processes, the CUDA context,
	// libraries' workspaces, the display).
	Outside gpumem.Bytes

	Fragmentation float64 // in [0, 1], or −1 when unknown
	Reason        string  // one sentence with the numbers that decide
	Advice        []Advice
}

// contextAllowance is memory outside PyTorch's allocator that every CUDA
// process holds: the CUDA context plus cuBLAS/cuDNN workspaces, 300–500
// MiB on current GPUs (docs/architecture.md#three-levels-of-memory). Memory outside
// the allocator beyond this is attributed to other holders.
const contextAllowance = 512 * gpumem.MiB

// minFragmentation is the share of reserved memory that must be
// unallocated before an OOM is called fragmentation rather than
// exhaustion: below 5%, compacting the cache would give back less than 5%
// of what the process holds, and the job would fail again at its next
// peak (the guide's answer for its RTX 3090 message calls 0.23% "very
// low", docs/scenarios.md).
const minFragmentation = 0.05

// Diagnose decides why the allocation failed. It tests, in order:
//
//  0. an allocator warning (OOM.Warning) is CauseWarning, whatever its
//     numbers;
//  1. a request larger than the device, or than an "allowed" cap;
//  2. a cap: held + requested above "allowed";
//  3. a limit: the driver reports at least 512 MiB more free than requested;
//  4. fragmentation: reserved but unallocated ≥ requested and ≥ 5% of reserved;
//  5. other listed processes holding at least the shortfall;
//  6. a full device: free just covers the request and this process holds
//     half the device (exhaustion);
//  7. a limit: free covers the request;
//  8. cudaMallocAsync: memory neither free nor allocated by PyTorch (the
//     pool's cache) covers the shortfall (fragmentation);
//  9. memory outside the allocator covers the shortfall beyond a 512 MiB
//     context allowance and is at least a quarter of what this process
//     holds (other processes);
//  10. else exhaustion by this process.
//
// In a container NVML lists the job's own process under its host PID
// ("Process 20398 has …" without "this process"); when exactly one listed
// process holds at least the allocator's reserved memory, it is taken to
// be this process.
func (o OOM) Diagnose() Diagnosis {
	d := Diagnosis{Fragmentation: -1}
	k := o.Known
	if k(FieldRequested) {
		d.Requested = o.Requested
	}
	if k(FieldCapacity) {
		d.Capacity = o.Capacity
	}
	if k(FieldFree) {
		d.Free = o.Free
	}
	if k(FieldAllocated) {
		d.Allocated = o.Allocated
	}
	if k(FieldReserved) {
		d.Reserved = o.Reserved
	}
	if k(FieldReservedUnallocated) {
		d.ReservedUnallocated = o.ReservedUnallocated
	}
	if k(FieldAllowed) {
		d.Allowed = o.Allowed
	}
	if k(FieldReserved|FieldAllocated) && o.Reserved > 0 {
		f := float64(o.Reserved-o.Allocated) / float64(o.Reserved)
		d.Fragmentation = max(f, 0)
	}
	if k(FieldRequested|FieldFree) && o.Requested > o.Free {
		d.Shortfall = o.Requested - o.Free
	}
	selfPID := int64(-1)
	if !o.Has(FieldSelf) && k(FieldReserved) {
		n := 0
		for _, p := range o.ProcessList() {
			if p.Used >= o.Reserved {
				n++
				selfPID = p.PID
			}
		}
		if n != 1 {
			selfPID = -1
		}
	}
	d.OtherProcesses = o.MoreUsed
	for _, p := range o.ProcessList() {
		if p.PID != selfPID {
			d.OtherProcesses += p.Used
		}
	}
	if k(FieldCapacity | FieldFree | FieldReserved) {
		d.Outside = max(o.Capacity-o.Free-o.Reserved, 0)
	}
	env := allocConfName(&o)
	bigRequest := o.Requested >= gpumem.GiB
	// held is what this process holds: NVML's figure for it, else its
	// allocator's reserve, else its allocated bytes.
	held := gpumem.Bytes(0)
	switch {
	case o.Has(FieldSelf):
		held = o.Self
	case k(FieldReserved):
		held = o.Reserved
	case k(FieldAllocated):
		held = o.Allocated
	}
	if !k(FieldReserved) && k(FieldCapacity|FieldFree|FieldAllocated) {
		d.Outside = max(o.Capacity-o.Free-o.Allocated, 0)
	}
	capped := o.Has(FieldAllowed) && (!k(FieldCapacity) || o.Allowed < o.Capacity)

	switch {
	case o.Warning:
		d.Cause = CauseWarning
		d.Reason = fmt.Sprintf("a warning, not an out-of-memory error: the allocator could not get %s at once and the caller went on without it (\"this is not a failure\"); the job did not fail here",
			o.Requested.String())
	case !k(FieldRequested):
		d.Cause = CauseUnknown
		d.Reason = "the message states no request size"
	case k(FieldCapacity) && o.Requested > o.Capacity:
		d.Cause = CauseTooLarge
		d.Reason = fmt.Sprintf("one request of %s is larger than the whole device (%s)", o.Requested.String(), o.Capacity.String())
	case capped && o.Requested > o.Allowed:
		d.Cause = CauseTooLarge
		d.Reason = fmt.Sprintf("one request of %s is larger than the cap of %s", o.Requested.String(), o.Allowed.String())
	case capped && heldBy(&o)+o.Requested > o.Allowed:
		d.Cause = CauseLimit
		d.Reason = fmt.Sprintf("%s held + %s requested exceeds the cap of %s", heldBy(&o).String(), o.Requested.String(), o.Allowed.String())
	case k(FieldFree) && o.Free-o.Requested >= contextAllowance:
		d.Cause = CauseLimit
		d.Reason = fmt.Sprintf("the driver reports %s free, well above the %s requested: a limit refused it (memory fraction, MIG slice, WDDM, or the driver's own fragmentation)", o.Free.String(), o.Requested.String())
	case k(FieldReservedUnallocated) && o.ReservedUnallocated >= o.Requested && d.Fragmentation >= minFragmentation && o.Framework == PyTorch:
		d.Cause = CauseFragmentation
		d.Reason = fmt.Sprintf("%s is reserved but unallocated (%.1f%% of reserved), at least the %s requested, yet no free block is large enough",
			o.ReservedUnallocated.String(), 100*d.Fragmentation, o.Requested.String())
	case d.OtherProcesses > 0 && d.OtherProcesses >= d.Shortfall && k(FieldFree):
		d.Cause = CauseOtherProcesses
		d.Reason = fmt.Sprintf("other processes hold %s, more than the %s shortfall (%s requested, %s free)",
			d.OtherProcesses.String(), d.Shortfall.String(), o.Requested.String(), o.Free.String())
	case k(FieldFree) && o.Free >= o.Requested && k(FieldCapacity) && held >= o.Capacity/2:
		d.Cause = CauseExhausted
		d.Reason = fmt.Sprintf("%s free barely covers the %s requested while this process holds %s of %s: the device is full",
			o.Free.String(), o.Requested.String(), held.String(), o.Capacity.String())
	case k(FieldFree) && o.Free >= o.Requested:
		d.Cause = CauseLimit
		d.Reason = fmt.Sprintf("the driver reports %s free, enough for the %s requested: the driver refused a block that large (granularity, fragmentation of device memory, or a limit)", o.Free.String(), o.Requested.String())
	case o.Era == EraAsync && d.Shortfall > 0 && outsideMatters(d.Outside, d.Shortfall, held):
		d.Cause = CauseFragmentation
		d.Reason = fmt.Sprintf("%s of the device is neither free nor allocated by PyTorch: cudaMallocAsync's pool keeps freed memory, or other processes hold it; it exceeds the %s shortfall",
			d.Outside.String(), d.Shortfall.String())
	case d.Shortfall > 0 && len(o.ProcessList()) == 0 && !o.Has(FieldSelf) && outsideMatters(d.Outside, d.Shortfall, held):
		d.Cause = CauseOtherProcesses
		d.Reason = fmt.Sprintf("%s of the device is held outside this allocator (capacity %s − free %s − reserved %s), more than the %s shortfall plus a CUDA context",
			d.Outside.String(), o.Capacity.String(), o.Free.String(), o.Reserved.String(), d.Shortfall.String())
	case k(FieldFree):
		d.Cause = CauseExhausted
		d.Reason = fmt.Sprintf("%s requested but %s free; this process holds %s (%s allocated, %.2f%% fragmentation)",
			o.Requested.String(), o.Free.String(), held.String(), d.Allocated.String(), 100*max(d.Fragmentation, 0))
	case k(FieldCapacity) && held > 0 && held+o.Requested > o.Capacity:
		d.Cause = CauseExhausted
		d.Reason = fmt.Sprintf("%s in use + %s requested exceeds the allocator's limit of %s", held.String(), o.Requested.String(), o.Capacity.String())
	case k(FieldCapacity) && (k(FieldReserved) || k(FieldAllocated)):
		d.Cause = CauseLimit
		d.Reason = fmt.Sprintf("%s held + %s requested fits the %s device: a limit of the platform or driver refused it", held.String(), o.Requested.String(), o.Capacity.String())
	default:
		d.Cause = CauseUnknown
		d.Reason = fmt.Sprintf("%s requested; the message does not say what else holds the device", o.Requested.String())
	}
	d.Advice = advise(&o, &d, env, bigRequest)
	return d
}

// outsideMatters reports whether memory outside the allocator explains
// the failure: beyond the CUDA context allowance it covers the shortfall
// and is at least a quarter of what this process holds (otherwise the
// process itself is the main holder and freeing the rest would only delay
// the next failure).
func outsideMatters(outside, shortfall, held gpumem.Bytes) bool {
	extra := outside - contextAllowance
	return extra >= shortfall && extra >= held/4
}

// heldBy returns what counts against an "allowed" cap: reserved memory
// for the caching allocators, allocated plus other allocations on MPS.
func heldBy(o *OOM) gpumem.Bytes {
	switch {
	case o.Backend == MPS:
		return o.Allocated + o.Other
	case o.Known(FieldReserved):
		return o.Reserved
	}
	return o.Allocated
}

// allocConfName returns the allocator environment variable the message's
// build reads.
func allocConfName(o *OOM) string {
	switch {
	case o.Hint&HintAllocConf != 0:
		return "PYTORCH_ALLOC_CONF"
	case o.Hint&HintHIPAllocConf != 0:
		return "PYTORCH_HIP_ALLOC_CONF"
	case o.Hint&HintCUDAAllocConf != 0:
		return "PYTORCH_CUDA_ALLOC_CONF"
	case o.Backend == HIP:
		return "PYTORCH_HIP_ALLOC_CONF"
	}
	return "PYTORCH_CUDA_ALLOC_CONF"
}

func advise(o *OOM, d *Diagnosis, env string, big bool) []Advice {
	var a []Advice
	add := func(act Action, format string, args ...any) {
		a = append(a, Advice{Action: act, Text: fmt.Sprintf(format, args...)})
	}
	// expandable_segments exists from PyTorch 2.1; older eras get max_split_size_mb.
	old := o.Era == EraCached || o.Era == EraReservedTotal
	reduce := func() {
		add(ActionLowerBatch, "lower the micro-batch (keep the global batch with gradient accumulation): activations scale with it")
		add(ActionCheckpointing, "enable activation checkpointing: keep only layer inputs and recompute the rest in backward")
		if big {
			add(ActionFlashAttention, "a single %s request often is an eager attention score matrix: use flash / memory-efficient attention (SDPA)", o.Requested.String())
		} else {
			add(ActionFlashAttention, "use flash / memory-efficient attention (SDPA) instead of eager attention")
		}
		add(ActionOptimizer8bit, "use an 8-bit optimizer (bitsandbytes AdamW8bit): Adam's two fp32 states shrink from 8 to about 2 bytes per parameter")
	}
	switch d.Cause {
	case CauseWarning:
		add(ActionFrameworkSetting, "nothing to change for this line: if the job fails later, read that failure (\"OOM when allocating tensor\", \"RESOURCE_EXHAUSTED\"); the warning only says more memory might have made an operation faster")
		return a
	case CauseFragmentation:
		if o.Era == EraAsync {
			add(ActionExpandableSegments, "switch %s from backend:cudaMallocAsync to the native allocator with expandable_segments:True; the async pool keeps %s it cannot reuse for this request",
				env, d.Outside.String())
			add(ActionFreeOtherProcess, "check nvidia-smi for other processes on GPU %d: they are part of the same %s", o.Device, d.Outside.String())
			reduce()
			break
		}
		if old {
			add(ActionMaxSplitSize, "set %s=max_split_size_mb:%d so large blocks are not split (PyTorch 1.10+); from 2.1 prefer expandable_segments:True",
				env, splitSizeMB(o.Requested))
			add(ActionExpandableSegments, "after upgrading to PyTorch 2.1+, set %s=expandable_segments:True", env)
		} else {
			add(ActionExpandableSegments, "set %s=expandable_segments:True: segments grow in place instead of leaving %s stranded in split blocks",
				env, o.ReservedUnallocated.String())
			add(ActionMaxSplitSize, "or set %s=max_split_size_mb:%d so that blocks of the request's size are not split", env, splitSizeMB(o.Requested))
		}
		add(ActionLowerBatch, "if it persists, lower the micro-batch: variable-size batches fragment the cache")
	case CauseOtherProcesses:
		if d.OtherProcesses > 0 {
			var pids []string
			for _, p := range o.ProcessList() {
				pids = append(pids, fmt.Sprintf("%d (%s)", p.PID, p.Used.String()))
			}
			add(ActionFreeOtherProcess, "free the other processes on GPU %d: %s, or move this job to an idle GPU", o.Device, strings.Join(pids, ", "))
		} else {
			add(ActionFreeOtherProcess, "find what else holds %s of GPU %d (nvidia-smi): other jobs, a notebook kernel, the display; free it or use another GPU", d.Outside.String(), o.Device)
		}
		reduce()
	case CauseTooLarge:
		add(ActionChunk, "split the operation that asks for %s into chunks (batch, heads or sequence), since it alone exceeds the device", o.Requested.String())
		add(ActionFlashAttention, "if it is an attention score matrix, flash / memory-efficient attention never materializes it")
		add(ActionShard, "otherwise shard (tensor parallel, FSDP/ZeRO-3), offload or quantize the tensor")
		add(ActionLowerBatch, "lower the micro-batch or sequence length")
	case CauseLimit:
		switch {
		case o.Backend == MPS:
			add(ActionRaiseLimit, "raise PYTORCH_MPS_HIGH_WATERMARK_RATIO (0.0 removes the %s cap, at the risk of system instability)", d.Allowed.String())
		case o.Has(FieldAllowed):
			add(ActionRaiseLimit, "raise torch.cuda.set_per_process_memory_fraction: the cap is %s of %s", d.Allowed.String(), d.Capacity.String())
		default:
			add(ActionRaiseLimit, "check for a memory cap: set_per_process_memory_fraction, a MIG slice, a container limit, or Windows WDDM")
			if o.Framework == PyTorch {
				add(ActionExpandableSegments, "set %s=expandable_segments:True to avoid large contiguous cudaMalloc calls", env)
			}
		}
		reduce()
	case CauseExhausted:
		reduce()
		if o.Has(FieldSelf) && o.Self-d.Reserved > gpumem.GiB {
			add(ActionFreeOtherProcess, "this process holds %s outside PyTorch's allocator (other libraries, a second framework)", (o.Self - d.Reserved).String())
		}
	default:
		switch o.Framework {
		case JAX:
			add(ActionFrameworkSetting, "XLA preallocates 75%% of the device: set XLA_PYTHON_CLIENT_PREALLOCATE=false or XLA_PYTHON_CLIENT_MEM_FRACTION to see real use")
		case TensorFlow:
			add(ActionFrameworkSetting, "enable tf.config.experimental.set_memory_growth so TensorFlow does not hold the whole device")
		case LlamaCpp:
			add(ActionShard, "offload fewer layers to the GPU (--n-gpu-layers) or use a smaller context (-c)")
		}
		reduce()
	}
	return a
}

// splitSizeMB suggests max_split_size_mb: the request rounded up to a
// multiple of 128 MiB and at least 128 (blocks at least this large are
// not split).
func splitSizeMB(req gpumem.Bytes) int64 {
	mb := (int64(req) + (128<<20 - 1)) / (128 << 20) * 128
	return max(mb, 128)
}

// LogValue implements [slog.LogValuer].
func (d Diagnosis) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("cause", d.Cause.String()),
		slog.Int64("requested", int64(d.Requested)),
		slog.Int64("free", int64(d.Free)),
		slog.Int64("shortfall", int64(d.Shortfall)),
		slog.Float64("fragmentation", d.Fragmentation),
	)
}
