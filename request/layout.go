package request

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/budget"
)

// LayoutFlags are the multi-GPU flags of estimate and plan. --gpus is the
// GPUs per node (the existing flag), --nodes the nodes; the data-parallel
// degree is what tensor, pipeline and context parallelism leave of
// gpus × nodes.
type LayoutFlags struct {
	Nodes       int
	FSDP        string
	TP, PP, VPP int
	CP, EP      int
	SP          bool
	Offload     string
	Explicit    bool // a layout flag was given (plan then keeps it)
}

func (f *LayoutFlags) Register(fs *flag.FlagSet) {
	fs.IntVar(&f.Nodes, "nodes", 1, "nodes of --gpus GPUs each")
	fs.StringVar(&f.FSDP, "fsdp", "", "PyTorch FSDP sharding instead of --zero: no_shard, shard_grad_op, full_shard or hybrid_shard (full_shard within a node)")
	fs.IntVar(&f.TP, "tp", 1, "Megatron tensor-parallel size (within a node)")
	fs.BoolVar(&f.SP, "sp", false, "sequence parallelism with --tp")
	fs.IntVar(&f.PP, "pp", 1, "pipeline stages (1F1B; the first stage holds min(pp, --grad-accum) micro-batches)")
	fs.IntVar(&f.VPP, "vpp", 1, "virtual stages per pipeline rank (interleaved schedule)")
	fs.IntVar(&f.CP, "cp", 1, "context-parallel size (needs --attention flash or sdpa)")
	fs.IntVar(&f.EP, "ep", 1, "expert-parallel size (MoE models)")
	fs.StringVar(&f.Offload, "offload", "", "move to the host: optimizer (ZeRO-Offload: state, master weights and the step), params (ZeRO-Infinity / FSDP CPU offload with --zero 3 or --fsdp full_shard: weight and gradient partitions), or optimizer,params")
}

// layout returns the budget.Parallel of gpus per node and ZeRO stage zero
// with the flags f; every error names its flag.
func (f *LayoutFlags) Layout(gpus, zero int) (budget.Parallel, budget.Offload, error) {
	var off budget.Offload
	// Zero means 1: a Flags built by gpumem serve from JSON leaves them unset.
	for _, v := range []*int{&f.Nodes, &f.TP, &f.PP, &f.VPP, &f.CP, &f.EP} {
		if *v == 0 {
			*v = 1
		}
	}
	if gpus == 0 {
		gpus = 1
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"--gpus", gpus}, {"--nodes", f.Nodes}, {"--tp", f.TP}, {"--pp", f.PP}, {"--vpp", f.VPP}, {"--cp", f.CP}, {"--ep", f.EP}} {
		if c.v < 1 || c.v > MaxCount {
			return budget.Parallel{}, off, fmt.Errorf("%w: %s %d: want 1 to %d", ErrUsage, c.name, c.v, MaxCount)
		}
	}
	if zero < 0 || zero > 3 {
		return budget.Parallel{}, off, fmt.Errorf("%w: --zero %d: want a stage 0-3", ErrUsage, zero)
	}
	total := gpus * f.Nodes
	model := f.TP * f.PP * f.CP
	if total%model != 0 {
		return budget.Parallel{}, off, fmt.Errorf("%w: --tp %d × --pp %d × --cp %d = %d must divide the %d GPUs (--gpus %d × --nodes %d)",
			ErrUsage, f.TP, f.PP, f.CP, model, total, gpus, f.Nodes)
	}
	if f.TP > gpus {
		return budget.Parallel{}, off, fmt.Errorf("%w: --tp %d exceeds the %d GPUs of a node", ErrUsage, f.TP, gpus)
	}
	p := budget.Parallel{DataParallel: total / model, Stage: zero, TensorParallel: f.TP, SequenceParallel: f.SP,
		PipelineParallel: f.PP, VirtualStages: f.VPP, ContextParallel: f.CP, ExpertParallel: f.EP, GPUsPerNode: gpus}
	if f.FSDP != "" {
		if zero != 0 {
			return budget.Parallel{}, off, fmt.Errorf("%w: give one of --zero and --fsdp", ErrUsage)
		}
		p.FSDP = true
		switch strings.ToLower(f.FSDP) {
		case "no_shard":
			p.Stage = 0
		case "shard_grad_op":
			p.Stage = 2
		case "full_shard":
			p.Stage = 3
		case "hybrid_shard":
			p.Stage, p.ShardGroup = 3, min(gpus, p.DataParallel)
		default:
			return budget.Parallel{}, off, fmt.Errorf("%w: --fsdp %q: want no_shard, shard_grad_op, full_shard or hybrid_shard", ErrUsage, f.FSDP)
		}
	}
	switch f.Offload {
	case "":
	case "optimizer":
		off = budget.OffloadOptimizer
	case "params", "parameters":
		off = budget.OffloadParams
	case "optimizer,params", "params,optimizer", "all":
		off = budget.OffloadOptimizer | budget.OffloadParams
	default:
		return budget.Parallel{}, off, fmt.Errorf("%w: --offload %q: want optimizer, params or optimizer,params", ErrUsage, f.Offload)
	}
	return p, off, nil
}

// layoutFrom sets jf's layout from a request's layout fields, which are
// the layout flags' names (gpus, nodes, zero, fsdp, tp, sp, pp, vpp, cp,
// ep, offload): a field left out (0, "" or false) keeps the flag's
// default, and one given makes the layout explicit as the flag does
// (SetExplicit). An error names the field.
func layoutFrom(req Estimate, jf *Flags) error {
	for _, c := range []struct {
		v   int
		dst *int
	}{{req.GPUs, &jf.GPUs}, {req.Nodes, &jf.Layout.Nodes}, {req.TP, &jf.Layout.TP}, {req.PP, &jf.Layout.PP},
		{req.VPP, &jf.Layout.VPP}, {req.CP, &jf.Layout.CP}, {req.EP, &jf.Layout.EP}, {req.ZeRO, &jf.ZeRO}} {
		if c.v != 0 {
			*c.dst = c.v
		}
	}
	if req.FSDP != "" {
		jf.Layout.FSDP = req.FSDP
	}
	jf.Layout.SP = req.SP
	jf.Layout.Offload = req.Offload
	jf.Layout.Explicit = req.ZeRO != 0 || req.FSDP != "" || req.TP != 0 || req.PP != 0 || req.VPP != 0 ||
		req.CP != 0 || req.EP != 0 || req.SP
	probe := jf.Layout
	if _, _, err := probe.Layout(jf.GPUs, jf.ZeRO); err != nil {
		field := "gpus"
		if m := CLIFlag.FindStringSubmatch(err.Error()); m != nil {
			field = strings.ReplaceAll(m[1], "-", "_")
		}
		return BadField(field, "%s", ForRequest(err.Error()))
	}
	return nil
}

// SetExplicit records whether fs was given a layout flag.
func (f *LayoutFlags) SetExplicit(fs *flag.FlagSet) {
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "zero", "fsdp", "tp", "pp", "vpp", "cp", "ep", "sp":
			f.Explicit = true
		}
	})
}
