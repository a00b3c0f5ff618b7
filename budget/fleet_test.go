package budget

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

func fleetJob(t *testing.T, name string) Job {
	return Job{Model: lookupModel(t, name, nil), Mode: Training, Precision: BF16Master,
		Optimizer: optimizer.AdamW{Impl: optimizer.Fused}, Batch: 1, SeqLen: 2048, Attention: model.Flash}
}

// AllocateFleet takes the first layout, in communication order, at which
// the job as given fits, and no costlier one.
func TestAllocateFleetOrder(t *testing.T) {
	t.Parallel()
	free := 80 * gpumem.GB
	for _, c := range []struct {
		model string
		fleet Fleet
		want  string
	}{
		{"llama-3.2-1b", Fleet{Nodes: 1, GPUsPerNode: 8, Free: free}, "DP 8, no sharding"},
		// 7B: 16 bytes per parameter is 108 GB; ZeRO-1 over 8 leaves 2+2+1.75 bytes.
		{"llama-2-7b", Fleet{Nodes: 1, GPUsPerNode: 8, Free: free}, "DP 8, ZeRO-1"},
		{"llama-2-13b", Fleet{Nodes: 1, GPUsPerNode: 8, Free: 40 * gpumem.GB}, "DP 8, ZeRO-3"},
	} {
		p, err := AllocateFleet(c.fleet, fleetJob(t, c.model), nil)
		if err != nil {
			t.Errorf("%s: %v", c.model, err)
			continue
		}
		if got := p.Job.Parallel.Describe(); got != c.want {
			t.Errorf("%s on %d×%v: layout %q, want %q\n%s", c.model, c.fleet.GPUs(), c.fleet.Free, got, c.want, p)
		}
		// Every layout before the chosen one did not fit as given.
		for _, r := range p.Ladder {
			if strings.HasPrefix(r.Change, "layout ") && !r.Applied && r.Fits {
				t.Errorf("%s: layout rung %q fits but was passed over", c.model, r.Change)
			}
		}
		if p.Need.Device() > c.fleet.Free {
			t.Errorf("%s: plan needs %v of %v", c.model, p.Need.Device(), c.fleet.Free)
		}
	}
}

// Without offload, full fine-tuning of a 70B model does not fit on 8
// GPUs of 80 GB: the error carries every layout tried.
func TestAllocateFleetDoesNotFit(t *testing.T) {
	t.Parallel()
	j := fleetJob(t, "llama-2-70b")
	_, err := AllocateFleet(Fleet{Nodes: 1, GPUsPerNode: 8, Free: 80 * gpumem.GB}, j, nil)
	var ime *InsufficientMemoryError
	if !errors.As(err, &ime) || !errors.Is(err, gpumem.ErrDoesNotFit) {
		t.Fatalf("got %v, want an InsufficientMemoryError", err)
	}
	layouts := 0
	for _, r := range ime.Ladder {
		if strings.HasPrefix(r.Change, "layout ") {
			layouts++
		}
	}
	if want := len(Layouts(Fleet{Nodes: 1, GPUsPerNode: 8, Free: 1}, j)); layouts != want || want < 5 {
		t.Errorf("%d layout rungs, want %d", layouts, want)
	}
	// Two nodes add pipeline layouts; with 16 GPUs ZeRO-3 fits.
	p, err := AllocateFleet(Fleet{Nodes: 2, GPUsPerNode: 8, Free: 80 * gpumem.GB}, j, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Job.Parallel.GPUs() != 16 {
		t.Errorf("layout %s uses %d GPUs", p.Job.Parallel.Describe(), p.Job.Parallel.GPUs())
	}
}

func TestFleetErrors(t *testing.T) {
	t.Parallel()
	j := fleetJob(t, "llama-3.2-1b")
	for _, c := range []struct {
		f     Fleet
		field string
	}{
		{Fleet{Nodes: 0, GPUsPerNode: 8, Free: 1}, "Fleet.Nodes"},
		{Fleet{Nodes: 1, GPUsPerNode: 0, Free: 1}, "Fleet.GPUsPerNode"},
		{Fleet{Nodes: 1, GPUsPerNode: 8}, "Fleet.Free"},
	} {
		_, err := AllocateFleet(c.f, j, nil)
		var fe *gpumem.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", c.f, err, c.field)
		}
	}
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		p    Parallel
		want string
	}{
		{Parallel{}, "one GPU"},
		{Parallel{DataParallel: 16, Stage: 2}, "DP 16, ZeRO-2"},
		{Parallel{DataParallel: 16, Stage: 3, FSDP: true, ShardGroup: 8}, "DP 16, FSDP HYBRID_SHARD (groups of 8)"},
		{Parallel{DataParallel: 2, Stage: 1, TensorParallel: 8, SequenceParallel: true, PipelineParallel: 4, VirtualStages: 3},
			"TP 8 (SP) × PP 4 (3 virtual) × DP 2, ZeRO-1"},
	} {
		if got := c.p.Describe(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
}

// A model-parallel plan becomes Megatron flags; DeepSpeed's JSON refuses it.
func TestMegatronFlags(t *testing.T) {
	j := fleetJob(t, "llama-2-70b")
	j.Checkpointing = model.SelectiveCheckpointing
	j.GradAccum = 16
	j.Parallel = Parallel{DataParallel: 2, Stage: 1, TensorParallel: 8, SequenceParallel: true, PipelineParallel: 4, VirtualStages: 5}
	p := Plan{Job: j}
	got, err := p.Megatron()
	if err != nil {
		t.Fatal(err)
	}
	want := "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4 " +
		"--sequence-parallel --micro-batch-size 1 --global-batch-size 32 --seq-length 2048 --recompute-granularity selective " +
		"--use-distributed-optimizer --bf16 --use-flash-attn"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("flags\n%s\nwant\n%s", s, want)
	}
	if _, err := p.DeepSpeed(); !errors.Is(err, gpumem.ErrUnsupported) {
		t.Errorf("DeepSpeed of a TP/PP plan: %v, want ErrUnsupported", err)
	}
	p.Job.Parallel = Parallel{DataParallel: 8, Stage: 3}
	if _, err := p.Megatron(); !errors.Is(err, gpumem.ErrUnsupported) {
		t.Errorf("Megatron of a ZeRO-3 plan: %v, want ErrUnsupported", err)
	}
}
