package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
)

// usable is what a plan may use of free bytes: free less budget's
// default headroom.
func usable(free gpumem.Bytes) gpumem.Bytes {
	return free - gpumem.Bytes(budget.DefaultHeadroomFraction*float64(free))
}

func deviceNeed(t *testing.T, j budget.Job) gpumem.Bytes {
	t.Helper()
	b, err := budget.Estimate(j)
	require.NoError(t, err)
	return b.Device()
}

// TestRun runs the program and checks its figures: each model counted
// once, the fit check's shortfall, and both fallback plans fit where
// one more sequence per micro-batch (or no offload) does not.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	text := out.String()
	r, err := analyze()
	require.NoError(t, err)

	// The workload: (17−1)/4+1 = 5 latent frames of 16×16 patches, and
	// 226 text tokens; the write-up's latent tensor is 4·16·32·32·17 fp16.
	require.EqualValues(t, 5*16*16+226, r.Tokens)
	require.Equal(t, gpumem.Bytes(4*16*32*32*17*2), r.Latents)

	// Each frozen model once, in fp16; the trained one once, with its
	// gradients and two fp16 moments.
	s := r.State
	copies := r.TransformerFP16 + r.EncoderFP16
	if d := s.ExtraModels - copies; d < 0 || d > gpumem.MiB {
		t.Errorf("frozen copies = %v, want the two models' fp16 weights %v (plus per-tensor rounding)", s.ExtraModels, copies)
	}
	near := func(a, b gpumem.Bytes) bool { return a-b <= gpumem.MiB && b-a <= gpumem.MiB } // per-tensor rounding
	if s.Gradients != s.Weights || !near(s.Optimizer, 2*s.Weights) || !near(s.Weights, r.TransformerFP16) {
		t.Errorf("trained model: weights %v, gradients %v, AdamW %v; transformer fp16 %v", s.Weights, s.Gradients, s.Optimizer, r.TransformerFP16)
	}
	if s.Phase != budget.Backward {
		t.Errorf("model state read at %v, want the end of backward", s.Phase)
	}

	for i, d := range r.GPUs {
		want := r.Need.Device() - d.Free()
		if r.Short[i] != want || want <= 0 {
			t.Errorf("%s: shortfall %v, want %v − %v", d.Name, r.Short[i], r.Need.Device(), d.Free())
		}
		require.Contains(t, text, "short by "+r.Short[i].String())
	}

	room := usable(r.GPUs[0].Free())
	for name, p := range map[string]budget.Plan{"offload": r.Offload, "offload+checkpointing": r.Both} {
		if p.Offload != budget.OffloadCopies|budget.OffloadOptimizer {
			t.Errorf("%s plan offloads %v, want optimizer+copies", name, p.Offload)
		}
		if need := deviceNeed(t, p.Job); need > room {
			t.Errorf("%s plan needs %v, more than the %v usable", name, need.String(), room.String())
		}
		if p.Batch*max(p.GradAccum, 1) < batch {
			t.Errorf("%s plan: %d × %d sequences per step, below the write-up's %d", name, p.Batch, p.GradAccum, batch)
		}
		if p.Batch < batch {
			next := p.Job
			next.Batch++
			if need := deviceNeed(t, next); need <= room {
				t.Errorf("%s plan: micro-batch %d + 1 needs %v, which fits the %v usable", name, p.Batch, need.String(), room.String())
			}
		}
		// Offloading the optimizer alone is not enough: the copies must go too.
		only := p.Job
		only.Offload = budget.OffloadOptimizer
		if need := deviceNeed(t, only); need <= room {
			t.Errorf("%s plan: optimizer offload alone fits (%v); the ladder says both are needed", name, need.String())
		}
		if p.Need.Host <= 0 {
			t.Errorf("%s plan keeps nothing on the host", name)
		}
		require.Contains(t, text, p.Need.Device().String())
	}
	require.Less(t, r.Offload.Batch, batch, "offload alone should have to lower the micro-batch")
	require.Equal(t, batch, r.Both.Batch, "offload with checkpointing keeps the write-up's micro-batch")
}
