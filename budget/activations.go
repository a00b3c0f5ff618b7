package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// actFigures are the activation terms Estimate composes, taken from
// model.Spec.Activations.
type actFigures struct {
	// saved is every activation resident at the end of forward
	// (Activations.Total): blocks under the policy, embedding, token
	// ids, shared tables, final norm, head, logits.
	saved gpumem.Bytes
	// blocks is the blocks' part of saved; firstBlock is one block's.
	blocks, firstBlock gpumem.Bytes
	// outside is saved minus the blocks (embedding ... logits).
	outside gpumem.Bytes
	// forward and backward are the largest block transients.
	forward, backward gpumem.Bytes
	// lossForward is the fp32 upcast of the logits; lossBackward the
	// loss gradient's transient.
	lossForward, lossBackward gpumem.Bytes
	// logits is the logits tensor, part of saved.
	logits gpumem.Bytes
}

// activations returns the activation figures of j in the compute dtype
// dt. A Generation job runs its prompt pass without gradients and keeps
// the logits of the last position only (generate() passes
// logits_to_keep=1, transformers ≥ 4.45).
func activations(j Job, dt gpumem.DType) (actFigures, error) {
	w := workload(j, dt)
	// Few kinds of block: a stack buffer keeps Estimate allocation-free
	// (AppendActivations grows it on the heap only beyond eight kinds).
	var buf [8]model.LayerActivations
	a, err := j.Model.spec.AppendActivations(buf[:0], w)
	if err != nil {
		return actFigures{}, err
	}
	f := actFigures{
		saved: a.Total(), blocks: a.LayersTotal(), forward: a.Forward, backward: a.Backward,
		lossForward: a.LogitsFP32, lossBackward: a.LossGrad, logits: a.Logits,
	}
	if len(a.Layers) > 0 && a.Layers[0].Count > 0 {
		f.firstBlock = a.Layers[0].KeptTotal / gpumem.Bytes(a.Layers[0].Count)
	}
	if j.Mode == Generation && a.Tokens > 0 {
		last := (a.Logits + gpumem.Bytes(a.Tokens) - 1) / gpumem.Bytes(a.Tokens)
		f.saved -= a.Logits - last
		f.logits = last
		f.lossForward = 0
	}
	f.outside = f.saved - f.blocks
	return f, nil
}

// workload is the activation model's view of j in the compute dtype dt.
func workload(j Job, dt gpumem.DType) model.Workload {
	return model.Workload{
		Batch: int64(j.Batch), SeqLen: int64(j.SeqLen), DType: dt, Attention: j.Attention, HeadChunk: int64(j.HeadChunk),
		Checkpointing: j.Checkpointing, CheckpointEvery: int64(j.CheckpointEvery),
		Dropout: j.Dropout, Train: j.Mode == Training, Images: int64(j.Images),
	}
}
