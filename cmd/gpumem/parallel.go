package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/budget"
)

// layoutFlags are the multi-GPU flags of estimate and plan. --gpus is the
// GPUs per node (the existing flag), --nodes the nodes; the data-parallel
// degree is what tensor, pipeline and context parallelism leave of
// gpus × nodes.
type layoutFlags struct {
	nodes          int
	fsdp           string
	tp, pp, vpp    int
	cp, ep         int
	sp             bool
	offload        string
	explicitLayout bool // a layout flag was given (plan then keeps it)
}

func (f *layoutFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.nodes, "nodes", 1, "nodes of --gpus GPUs each")
	fs.StringVar(&f.fsdp, "fsdp", "", "PyTorch FSDP sharding instead of --zero: no_shard, shard_grad_op, full_shard or hybrid_shard (full_shard within a node)")
	fs.IntVar(&f.tp, "tp", 1, "Megatron tensor-parallel size (within a node)")
	fs.BoolVar(&f.sp, "sp", false, "sequence parallelism with --tp")
	fs.IntVar(&f.pp, "pp", 1, "pipeline stages (1F1B; the first stage holds min(pp, --grad-accum) micro-batches)")
	fs.IntVar(&f.vpp, "vpp", 1, "virtual stages per pipeline rank (interleaved schedule)")
	fs.IntVar(&f.cp, "cp", 1, "context-parallel size (needs --attention flash or sdpa)")
	fs.IntVar(&f.ep, "ep", 1, "expert-parallel size (MoE models)")
	fs.StringVar(&f.offload, "offload", "", "move to the host: optimizer (ZeRO-Offload: state, master weights and the step), params (ZeRO-Infinity / FSDP CPU offload with --zero 3 or --fsdp full_shard: weight and gradient partitions), or optimizer,params")
}

// layout returns the budget.Parallel of gpus per node and ZeRO stage zero
// with the flags f; every error names its flag.
func (f *layoutFlags) layout(gpus, zero int) (budget.Parallel, budget.Offload, error) {
	var off budget.Offload
	// Zero means 1: a jobFlags built by gpumem serve from JSON leaves them unset.
	for _, v := range []*int{&f.nodes, &f.tp, &f.pp, &f.vpp, &f.cp, &f.ep} {
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
	}{{"--gpus", gpus}, {"--nodes", f.nodes}, {"--tp", f.tp}, {"--pp", f.pp}, {"--vpp", f.vpp}, {"--cp", f.cp}, {"--ep", f.ep}} {
		if c.v < 1 || c.v > maxCount {
			return budget.Parallel{}, off, fmt.Errorf("%w: %s %d: want 1 to %d", errUsage, c.name, c.v, maxCount)
		}
	}
	if zero < 0 || zero > 3 {
		return budget.Parallel{}, off, fmt.Errorf("%w: --zero %d: want a stage 0-3", errUsage, zero)
	}
	total := gpus * f.nodes
	model := f.tp * f.pp * f.cp
	if total%model != 0 {
		return budget.Parallel{}, off, fmt.Errorf("%w: --tp %d × --pp %d × --cp %d = %d must divide the %d GPUs (--gpus %d × --nodes %d)",
			errUsage, f.tp, f.pp, f.cp, model, total, gpus, f.nodes)
	}
	if f.tp > gpus {
		return budget.Parallel{}, off, fmt.Errorf("%w: --tp %d exceeds the %d GPUs of a node", errUsage, f.tp, gpus)
	}
	p := budget.Parallel{DataParallel: total / model, Stage: zero, TensorParallel: f.tp, SequenceParallel: f.sp,
		PipelineParallel: f.pp, VirtualStages: f.vpp, ContextParallel: f.cp, ExpertParallel: f.ep, GPUsPerNode: gpus}
	if f.fsdp != "" {
		if zero != 0 {
			return budget.Parallel{}, off, fmt.Errorf("%w: give one of --zero and --fsdp", errUsage)
		}
		p.FSDP = true
		switch strings.ToLower(f.fsdp) {
		case "no_shard":
			p.Stage = 0
		case "shard_grad_op":
			p.Stage = 2
		case "full_shard":
			p.Stage = 3
		case "hybrid_shard":
			p.Stage, p.ShardGroup = 3, min(gpus, p.DataParallel)
		default:
			return budget.Parallel{}, off, fmt.Errorf("%w: --fsdp %q: want no_shard, shard_grad_op, full_shard or hybrid_shard", errUsage, f.fsdp)
		}
	}
	switch f.offload {
	case "":
	case "optimizer":
		off = budget.OffloadOptimizer
	case "params", "parameters":
		off = budget.OffloadParams
	case "optimizer,params", "params,optimizer", "all":
		off = budget.OffloadOptimizer | budget.OffloadParams
	default:
		return budget.Parallel{}, off, fmt.Errorf("%w: --offload %q: want optimizer, params or optimizer,params", errUsage, f.offload)
	}
	return p, off, nil
}

// layoutFrom sets jf's layout from a request's layout fields, which are
// the layout flags' names (gpus, nodes, zero, fsdp, tp, sp, pp, vpp, cp,
// ep, offload): a field left out (0, "" or false) keeps the flag's
// default, and one given makes the layout explicit as the flag does
// (setExplicit). An error names the field.
func layoutFrom(req estimateRequest, jf *jobFlags) error {
	for _, c := range []struct {
		v   int
		dst *int
	}{{req.GPUs, &jf.gpus}, {req.Nodes, &jf.layout.nodes}, {req.TP, &jf.layout.tp}, {req.PP, &jf.layout.pp},
		{req.VPP, &jf.layout.vpp}, {req.CP, &jf.layout.cp}, {req.EP, &jf.layout.ep}, {req.ZeRO, &jf.zero}} {
		if c.v != 0 {
			*c.dst = c.v
		}
	}
	if req.FSDP != "" {
		jf.layout.fsdp = req.FSDP
	}
	jf.layout.sp = req.SP
	jf.layout.offload = req.Offload
	jf.layout.explicitLayout = req.ZeRO != 0 || req.FSDP != "" || req.TP != 0 || req.PP != 0 || req.VPP != 0 ||
		req.CP != 0 || req.EP != 0 || req.SP
	probe := jf.layout
	if _, _, err := probe.layout(jf.gpus, jf.zero); err != nil {
		field := "gpus"
		if m := cliFlag.FindStringSubmatch(err.Error()); m != nil {
			field = strings.ReplaceAll(m[1], "-", "_")
		}
		return badField(field, "%s", forRequest(err.Error()))
	}
	return nil
}

// setExplicit records whether fs was given a layout flag.
func (f *layoutFlags) setExplicit(fs *flag.FlagSet) {
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "zero", "fsdp", "tp", "pp", "vpp", "cp", "ep", "sp":
			f.explicitLayout = true
		}
	})
}
