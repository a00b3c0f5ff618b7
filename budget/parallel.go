package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
)

// Parallel is the layout of a job over several GPUs, as DeepSpeed ZeRO,
// PyTorch FSDP and Megatron-LM split it. The zero value is one GPU.
// Estimate returns the memory of the most loaded rank (under pipeline
// parallelism the larger of the first and the last stage).
//
// Sharding follows Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models" (SC'20), §5: stage 1 (P_os)
// partitions the optimizer state and the fp32 master weights over the
// data-parallel ranks, stage 2 (P_os+g) the gradients too, stage 3
// (P_os+g+p) the weights too. PyTorch FSDP's NO_SHARD, SHARD_GRAD_OP and
// FULL_SHARD are stages 0, 2 and 3; HYBRID_SHARD is stage 3 within a
// shard group of ShardGroup ranks (one node), replicated across groups.
//
// Model parallelism follows Megatron-LM (Shoeybi et al. 2019; Narayanan
// et al. 2021; Korthikanti et al. 2022): tensor parallelism splits
// attention heads, the MLP and the vocabulary (embedding, head, logits)
// over TensorParallel ranks and leaves norms and per-token tensors
// whole unless SequenceParallel; pipeline parallelism gives each stage
// Layers/PipelineParallel blocks, the first stage the embedding and the
// last the final norm and head, and under the 1F1B schedule the first
// stage holds the activations of min(p, micro-batches) micro-batches
// (Korthikanti et al. §4.2.3: L layers' worth whatever p), times
// 1 + (p−1)/(p·m) with m VirtualStages (the interleaved schedule).
// The job's GradAccum is the number of micro-batches per step.
type Parallel struct {
	// DataParallel is the number of data-parallel ranks (zero: 1).
	DataParallel int
	// Stage is the ZeRO stage, 0 to 3.
	Stage int
	// ShardGroup is the number of ranks a stage shards over (FSDP
	// HYBRID_SHARD, DeepSpeed ZeRO++ hpZ); zero means DataParallel.
	ShardGroup int
	// FSDP selects PyTorch FSDP's transients for Stage 2 and 3 instead
	// of DeepSpeed's: FSDP all-gathers one wrapped unit (a transformer
	// block) at a time and prefetches the next (BACKWARD_PRE), so two
	// units are live in full, and reduce-scatters each unit's gradients
	// as it finishes. DeepSpeed ZeRO-3 gathers module by module and keeps
	// up to stage3_max_live_parameters (1e9) elements plus the prefetch
	// bucket (stage3_prefetch_bucket_size, 5e7) gathered, and keeps
	// tensors under stage3_param_persistence_threshold (1e5 elements)
	// whole on every rank (deepspeed/runtime/zero/config.py defaults).
	FSDP bool
	// TensorParallel is Megatron's tensor-parallel degree (zero: 1). It
	// must divide the attention heads; key/value heads below it are
	// replicated, one per rank.
	TensorParallel int
	// SequenceParallel splits the tensors that tensor parallelism leaves
	// whole along the sequence (Korthikanti et al. 2022); it needs
	// TensorParallel above 1.
	SequenceParallel bool
	// ContextParallel splits the sequence over ranks (ring attention;
	// needs a fused attention kernel) (zero: 1).
	ContextParallel int
	// PipelineParallel is the number of pipeline stages (zero: 1);
	// VirtualStages is the model chunks per stage of the interleaved
	// schedule (zero or 1: plain 1F1B). Interleaving needs a number of
	// micro-batches (GradAccum) that is a multiple of PipelineParallel.
	PipelineParallel, VirtualStages int
	// ExpertParallel splits the routed experts of an MoE model over
	// ranks (zero: 1); it must divide the number of experts. With
	// balanced routing a rank's experts see as many tokens as they
	// would without it, so activations are unchanged.
	ExpertParallel int
	// GPUsPerNode is the ranks per node, for host memory per node under
	// offload (zero: every rank on one node, up to 8).
	GPUsPerNode int
}

// GPUs returns the number of ranks of the layout: data × tensor ×
// pipeline × context parallel (experts are spread over data-parallel
// ranks and add none).
func (p Parallel) GPUs() int {
	return max(p.DataParallel, 1) * max(p.TensorParallel, 1) * max(p.PipelineParallel, 1) * max(p.ContextParallel, 1)
}

// shards returns the number of ranks state is partitioned over.
func (p Parallel) shards() int64 {
	g := p.ShardGroup
	if g == 0 {
		g = p.DataParallel
	}
	return int64(max(g, 1))
}

// perNode returns the ranks whose host memory one node holds.
func (p Parallel) perNode() int64 {
	if p.GPUsPerNode > 0 {
		return int64(min(p.GPUsPerNode, p.GPUs()))
	}
	return int64(min(8, p.GPUs()))
}

// modelParallel reports whether any rank holds less than the whole model.
func (p Parallel) modelParallel() bool {
	return p.TensorParallel > 1 || p.PipelineParallel > 1 || p.ExpertParallel > 1
}

func (p Parallel) validate() error {
	const most = 1 << 20
	// One test of the seven counts first (a negative count is a large
	// uint); the loop names the first one out of range.
	if max(uint(p.DataParallel), uint(p.TensorParallel), uint(p.PipelineParallel), uint(p.VirtualStages),
		uint(p.ContextParallel), uint(p.ExpertParallel), uint(p.GPUsPerNode)) > most {
		if err := p.validateCounts(); err != nil {
			return err
		}
	}
	switch {
	case p.Stage < 0 || p.Stage > 3:
		return gpumem.Errorf("Job.Parallel.Stage", p.Stage, gpumem.ErrInvalid, "ZeRO stages are 0 to 3")
	case p.FSDP && p.Stage == 1:
		return gpumem.Errorf("Job.Parallel.Stage", p.Stage, gpumem.ErrUnsupported, "FSDP has no stage 1 (NO_SHARD is 0, SHARD_GRAD_OP 2, FULL_SHARD 3)")
	case p.ShardGroup < 0 || p.ShardGroup > max(p.DataParallel, 1):
		return gpumem.Errorf("Job.Parallel.ShardGroup", p.ShardGroup, gpumem.ErrInvalid, "must be in [0, DataParallel]")
	case p.ShardGroup > 0 && max(p.DataParallel, 1)%p.ShardGroup != 0:
		return gpumem.Errorf("Job.Parallel.ShardGroup", p.ShardGroup, gpumem.ErrInvalid, "must divide DataParallel %d", p.DataParallel)
	case p.SequenceParallel && p.TensorParallel < 2:
		return gpumem.Errorf("Job.Parallel.SequenceParallel", true, gpumem.ErrInvalid, "needs TensorParallel above 1 (got %d)", p.TensorParallel)
	case p.VirtualStages > 1 && p.PipelineParallel < 2:
		return gpumem.Errorf("Job.Parallel.VirtualStages", p.VirtualStages, gpumem.ErrInvalid, "the interleaved schedule needs PipelineParallel above 1")
	case p.ExpertParallel > 1 && max(p.DataParallel, 1)*max(p.ContextParallel, 1)%p.ExpertParallel != 0:
		return gpumem.Errorf("Job.Parallel.ExpertParallel", p.ExpertParallel, gpumem.ErrInvalid,
			"must divide DataParallel × ContextParallel = %d (experts are spread over data-parallel ranks)", max(p.DataParallel, 1)*max(p.ContextParallel, 1))
	}
	return nil
}

// validateCounts names the first count of p out of [0, 2^20].
func (p Parallel) validateCounts() error {
	const most = 1 << 20
	for _, f := range []struct {
		name string
		v    int
	}{{"DataParallel", p.DataParallel}, {"TensorParallel", p.TensorParallel}, {"PipelineParallel", p.PipelineParallel},
		{"VirtualStages", p.VirtualStages}, {"ContextParallel", p.ContextParallel}, {"ExpertParallel", p.ExpertParallel},
		{"GPUsPerNode", p.GPUsPerNode}} {
		if f.v < 0 || f.v > most {
			return gpumem.Errorf("Job.Parallel."+f.name, f.v, gpumem.ErrInvalid, "must be in [0, 2^20]")
		}
	}
	return nil
}

// validateFor checks the layout against the model and the job.
func (p Parallel) validateFor(j *Job) error {
	if p.ExpertParallel <= 1 && p.PipelineParallel <= 1 {
		return nil
	}
	// By pointer: the Spec is 656 bytes, and LM() copies it twice.
	s := &j.Model.spec
	lm := s
	if s.Text != nil {
		lm = s.Text // Spec.LM
	}
	if p.ExpertParallel > 1 {
		if lm.MoE.Experts == 0 {
			return gpumem.Errorf("Job.Parallel.ExpertParallel", p.ExpertParallel, gpumem.ErrInvalid, "%s has no routed experts", s.Name)
		}
		if lm.MoE.Experts%int64(p.ExpertParallel) != 0 {
			return gpumem.Errorf("Job.Parallel.ExpertParallel", p.ExpertParallel, gpumem.ErrInvalid, "must divide the %d experts", lm.MoE.Experts)
		}
	}
	if pp := p.PipelineParallel; pp > 1 {
		if s.Encoder != nil || s.Vision != nil || s.Backbone != nil {
			return gpumem.Errorf("Job.Parallel.PipelineParallel", pp, gpumem.ErrUnsupported, "pipeline stages are modelled for decoder-only language models, not %s", s.Family)
		}
		if int64(pp) > lm.Layers {
			return gpumem.Errorf("Job.Parallel.PipelineParallel", pp, gpumem.ErrInvalid, "more stages than the %d layers", lm.Layers)
		}
		if m := p.VirtualStages; m > 1 {
			if lm.Layers%int64(pp*m) != 0 {
				return gpumem.Errorf("Job.Parallel.VirtualStages", m, gpumem.ErrInvalid, "stages × virtual stages = %d must divide the %d layers", pp*m, lm.Layers)
			}
			if max(j.GradAccum, 1)%pp != 0 {
				return gpumem.Errorf("Job.GradAccum", j.GradAccum, gpumem.ErrInvalid, "the interleaved schedule needs micro-batches in multiples of the %d stages", pp)
			}
		}
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
