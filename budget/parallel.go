package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Parallel is the layout of a job over several GPUs, as DeepSpeed ZeRO
// and PyTorch FSDP shard it. The zero value is one GPU. Estimate returns
// the memory of one rank (all ranks are alike under data parallelism).
//
// Sharding follows Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models" (SC'20), §5: stage 1 (P_os)
// partitions the optimizer state and the fp32 master weights over the
// data-parallel ranks, stage 2 (P_os+g) the gradients too, stage 3
// (P_os+g+p) the weights too. PyTorch FSDP's NO_SHARD, SHARD_GRAD_OP and
// FULL_SHARD are stages 0, 2 and 3; HYBRID_SHARD is stage 3 within a
// shard group of ShardGroup ranks (one node), replicated across groups.
//
// Tensor, pipeline, sequence, context and expert parallelism are not
// modelled yet: a TensorParallel or PipelineParallel above 1 is an
// ErrUnsupported error rather than a wrong number.
type Parallel struct {
	// DataParallel is the number of data-parallel ranks (zero: 1).
	DataParallel int
	// Stage is the ZeRO stage, 0 to 3.
	Stage int
	// ShardGroup is the number of ranks a stage shards over (FSDP
	// HYBRID_SHARD, DeepSpeed ZeRO++ hpZ); zero means DataParallel.
	ShardGroup int
	// TensorParallel and PipelineParallel are the Megatron degrees
	// (zero: 1; not modelled yet).
	TensorParallel, PipelineParallel int
}

// shards returns the number of ranks state is partitioned over.
func (p Parallel) shards() int64 {
	g := p.ShardGroup
	if g == 0 {
		g = p.DataParallel
	}
	return int64(max(g, 1))
}

func (p Parallel) validate() error {
	switch {
	case p.DataParallel < 0 || p.DataParallel > 1<<20:
		return gpumem.Errorf("Job.Parallel.DataParallel", p.DataParallel, gpumem.ErrInvalid, "must be in [0, 2^20]")
	case p.Stage < 0 || p.Stage > 3:
		return gpumem.Errorf("Job.Parallel.Stage", p.Stage, gpumem.ErrInvalid, "ZeRO stages are 0 to 3")
	case p.ShardGroup < 0 || p.ShardGroup > max(p.DataParallel, 1):
		return gpumem.Errorf("Job.Parallel.ShardGroup", p.ShardGroup, gpumem.ErrInvalid, "must be in [0, DataParallel]")
	case p.ShardGroup > 0 && max(p.DataParallel, 1)%p.ShardGroup != 0:
		return gpumem.Errorf("Job.Parallel.ShardGroup", p.ShardGroup, gpumem.ErrInvalid, "must divide DataParallel %d", p.DataParallel)
	case p.TensorParallel < 0 || p.TensorParallel > 1:
		return gpumem.Errorf("Job.Parallel.TensorParallel", p.TensorParallel, gpumem.ErrUnsupported, "tensor parallelism is not modelled yet")
	case p.PipelineParallel < 0 || p.PipelineParallel > 1:
		return gpumem.Errorf("Job.Parallel.PipelineParallel", p.PipelineParallel, gpumem.ErrUnsupported, "pipeline parallelism is not modelled yet")
	}
	return nil
}

// partition returns one rank's share of b bytes split over n ranks:
// DeepSpeed and FSDP flatten the tensors and pad the flat buffer to a
// multiple of the ranks, so each holds ceil(b/n), rounded to the
// allocator's 512 bytes.
func partition(b gpumem.Bytes, n int64) gpumem.Bytes {
	if n <= 1 || b <= 0 {
		return b
	}
	q, _ := checked.CeilDiv(int64(b), n)
	return gpumem.Bytes(roundAlloc(q))
}

// ModelStates returns one rank's bytes of the model states of the ZeRO
// paper's accounting — weights, gradients and optimizer state (master
// weights included, the paper's KΨ) — under stage over n data-parallel
// ranks (§5.1–5.3): stage 1 divides the optimizer state, stage 2 the
// gradients too, stage 3 the weights too.
func ModelStates(weights, grads, optimizerState gpumem.Bytes, stage, n int) (gpumem.Bytes, error) {
	if stage < 0 || stage > 3 {
		return 0, gpumem.Errorf("stage", stage, gpumem.ErrInvalid, "ZeRO stages are 0 to 3")
	}
	if n < 1 {
		return 0, gpumem.Errorf("n", n, gpumem.ErrInvalid, "must be at least 1")
	}
	if weights < 0 || grads < 0 || optimizerState < 0 {
		return 0, gpumem.Errorf("weights", weights, gpumem.ErrInvalid, "sizes must not be negative")
	}
	k := int64(n)
	if stage >= 1 {
		optimizerState = ceilDiv(optimizerState, k)
	}
	if stage >= 2 {
		grads = ceilDiv(grads, k)
	}
	if stage >= 3 {
		weights = ceilDiv(weights, k)
	}
	s, ok := checked.Add(int64(weights), int64(grads))
	if ok {
		s, ok = checked.Add(s, int64(optimizerState))
	}
	if !ok {
		return 0, errOverflow("model states")
	}
	return gpumem.Bytes(s), nil
}

func ceilDiv(b gpumem.Bytes, n int64) gpumem.Bytes {
	q, _ := checked.CeilDiv(int64(b), n)
	return gpumem.Bytes(q)
}
