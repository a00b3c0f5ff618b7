package budget

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/attention"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// Model is a model prepared for estimation: its architecture and its
// tensor inventory reduced once to groups of identical tensors, so that
// [Estimate] runs in microseconds without allocating. Build it with
// [NewModel]; the zero value is invalid. A Model is immutable and safe
// for concurrent use.
type Model struct {
	spec   model.Spec
	groups []group
	// runs is the trainable inventory as runs of identical tensors, one
	// per trainable group, as the optimizer steps it in fp32, bf16 and
	// fp16 (optimizer.TransientRuns expands them for an optimizer that
	// is not an optimizer.RunTransient).
	runs [3][]optimizer.Run
	reps [3][]gpumem.Tensor // one tensor of each run (optimizer.SharedState)

	kv attention.KVCache // the language model's cache geometry, dtype unset

	// layerElems is the largest transformer block's parameter count
	// (largestLayer): what ZeRO-3 and FSDP gather at once.
	layerElems int64

	params, trainableParams   int64 // elements
	tensors, trainableTensors int64

	layers int64 // the language model's blocks (pipeline stages split them)
	tied   bool  // the head is the input embedding (the last stage holds a copy)
	// headTrained says that the LM head's weight (or the embedding it is
	// tied to) is trained: the fused losses allocate its gradient.
	headTrained bool

	quant    quantKernels // the quantized linears' kernels (none: Method "")
	adapters bool         // LoRA adapters train
	// loraModules are an MMDiT's adapted modules within a block
	// ("attn.to_q"), for its activations (loraModules in pipeline.go).
	loraModules []string
	// frozen is the frozen base the adapters train on, when every
	// trained tensor is an adapter of a Llama-style projection (zero
	// otherwise: the activations of a trained base).
	frozen model.FrozenBase
	// visionFrozen says that a multimodal model's vision tower trains no
	// tensor (LLaVA-1.5's fine-tuning freezes it; LoRA on the language
	// model leaves it frozen): with its pixels not requiring grad either,
	// autograd records no graph through the tower, which saves nothing
	// (model.Workload.FreezeVision).
	visionFrozen bool
	// untrainable is the error of the first tensor the Finetune trains
	// that cannot train (quantized or fp8 storage): a Training job is
	// refused with it; inference and load jobs keep the tensor frozen.
	untrainable error

	// memo keeps the figures computed per precision, rank and optimizer
	// (memo.go), shared by the copies of the Model.
	memo *memo
	// actErr is spec.CheckActivations(): the activation model's checks
	// of the architecture, made once (activations); act, when they
	// pass, is spec prepared for the activation model (its layout and
	// block description computed once, model.ActivationModel).
	actErr error
	act    *model.ActivationModel
	// lm is what activations reads of spec.LM() on every estimate
	// (LM returns a copy of the whole Spec), taken once.
	lm lmFacts
	// bufferBytes is spec.BufferBytes(): the registered buffers.
	bufferBytes gpumem.Bytes
}

// group is count identical tensors of one component (embeddings, layers,
// head: model.Component), so that optimizers that treat tensors by name
// (Muon keeps embeddings and the head on AdamW) see a representative
// name.
type group struct {
	name      string // the first tensor's name
	shape     []int64
	elems     int64
	count     int64
	fixed     gpumem.DType // storage that ignores the precision policy (quantized bases); Invalid otherwise
	trainable bool

	comp      uint8   // compLayer, compEmbed, compHead, compOther
	encoder   bool    // part of an encoder–decoder's encoder (model.Component part "encoder")
	decoder   bool    // part of an encoder–decoder's decoder
	tp        tpClass // how tensor parallelism splits it
	tpDim     int8    // the dimension it splits (-1: none)
	expert    bool    // a routed expert's tensor (split by expert parallelism)
	heads, kv int64   // the part's query and key/value heads (for tpKV, tpQKV)
}

// ModelOf prepares spec as it is, every parameter trainable and stored
// as the job's precision policy says, for estimation: the model of an
// inference job (Prefill, Generation, Load) or of full training. It is
// NewModel(model.Finetune{Model: spec}); use [NewModel] to fine-tune
// with adapters, quantized base weights or frozen parts.
func ModelOf(spec model.Spec) (Model, error) { return NewModel(model.Finetune{Model: spec}) }

// NewModel prepares a model set up for fine-tuning — a Spec with LoRA
// adapters, 4-bit base weights or frozen parts as f describes them
// (model.Finetune{Model: spec} trains every parameter) — for estimation.
// A model used as it is, for inference or full training, needs no
// Finetune: [ModelOf] takes the Spec. Tensors stored in a quantized or integer format keep that
// storage whatever the job's precision (NF4 base weights and their
// quantization constants); floating-point tensors are stored as the job's
// precision policy says.
//
// NewModel reads the inventory folded ([model.Finetune.Runs]): its time
// and memory follow the distinct layer kinds, not the layer or expert
// count, unless f.Train or a LoRA target tells layers apart, when every
// tensor is read.
func NewModel(f model.Finetune) (Model, error) {
	s := f.Model
	if err := s.Validate(); err != nil {
		return Model{}, err
	}
	// The inventory folded into runs (one layer of each kind, one expert
	// of each block): building a Model costs the distinct layer shapes,
	// not the layer count.
	rs, trainable, err := f.Runs()
	if err != nil {
		return Model{}, err
	}
	if len(rs) == 0 {
		return Model{}, gpumem.Errorf("Finetune.Model", s.Name, gpumem.ErrInvalid, "no tensors")
	}
	trains := make(map[string]bool, len(trainable))
	for _, r := range trainable {
		trains[r.Tensor.Name] = true
	}
	m := Model{spec: s, kv: kvGeometry(s), layers: s.LM().Layers, tied: s.LM().TiedEmbeddings, memo: new(memo)}
	m.layerElems = largestLayer(s.Runs())
	m.act, m.actErr = model.NewActivationModel(s)
	lm := s.LM()
	m.lm = lmFacts{family: lm.Family, vocab: lm.Vocab, hidden: lm.Hidden, noLogitsToKeep: noLogitsToKeep[lm.Family]}
	m.bufferBytes = s.BufferBytes()
	if m.quant, err = newQuantKernels(f, rs); err != nil {
		return Model{}, err
	}
	index := make(map[string]int, 64)
	var key strings.Builder
	frozenOK := true
	visionTrains := false
	for i, r := range rs {
		t := r.Tensor
		n, err := t.Elems()
		if err != nil {
			return Model{}, err
		}
		if _, err := t.Bytes(); err != nil {
			return Model{}, err
		}
		train := trains[t.Name]
		var fixed gpumem.DType
		if t.DType.IsQuantized() || !t.DType.IsFloat() || t.DType.Bits() < 16 || model.IsQuantConstant(t.Name) || (f.Unquantized != gpumem.Invalid && !train) {
			// Quantized (and fp8) weights and their constants are stored
			// as the library keeps them, and so are the frozen tensors a
			// quantized model loads in Finetune.Unquantized.
			fixed = t.DType
		}
		if train && fixed != gpumem.Invalid {
			// Only a job that trains asks whether a tensor trains: an
			// inference or load job of a quantized model (a GGUF file,
			// whose Finetune trains every base tensor by default) runs.
			// The tensor is kept frozen and a Training job is refused
			// (Job.validate).
			if m.untrainable == nil {
				m.untrainable = gpumem.Errorf("Finetune.Tensors["+strconv.Itoa(i)+"]", t.Name, gpumem.ErrInvalid,
					"a %s tensor cannot be trained; train an adapter on it", t.DType)
			}
			train = false
		}
		part, comp, _ := model.Component(t.Name)
		tpc, tpDim := tpClassify(t.Name, len(t.Shape))
		expert := model.IsExpert(t.Name)
		key.Reset()
		key.WriteString(part)
		key.WriteByte('/')
		key.WriteString(comp)
		key.WriteByte('/')
		key.WriteString(strconv.FormatBool(train))
		key.WriteByte('/')
		key.WriteString(strconv.Itoa(int(tpc)*4 + int(tpDim) + 1))
		key.WriteString(strconv.FormatBool(expert))
		key.WriteByte('/')
		key.WriteString(fixed.String())
		for _, d := range t.Shape {
			key.WriteByte('x')
			key.WriteString(strconv.FormatInt(d, 10))
		}
		g, ok := index[key.String()]
		if !ok {
			g = len(m.groups)
			index[key.String()] = g
			heads, kv := partHeads(s, part)
			m.groups = append(m.groups, group{name: t.Name, shape: slices.Clone(t.Shape), elems: n, fixed: fixed, trainable: train,
				comp: compOf(comp), tp: tpc, tpDim: tpDim, expert: expert, heads: heads, kv: kv,
				encoder: part == "encoder" && s.Encoder != nil, decoder: part == "decoder" && s.Encoder != nil})
		}
		total, ok1 := checked.Mul(n, r.Count)
		count, ok2 := checked.Add(m.groups[g].count, r.Count)
		params, ok3 := checked.Add(m.params, total)
		tensors, ok4 := checked.Add(m.tensors, r.Count)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return Model{}, gpumem.Errorf("Finetune.Tensors", t.Name, gpumem.ErrRange, "parameter count overflows int64")
		}
		if model.IsQuantConstant(t.Name) {
			params = m.params // quantization constants are not parameters (model.Finetune.Params)
		}
		m.groups[g].count, m.params, m.tensors = count, params, tensors
		if train && (strings.HasSuffix(t.Name, ".lora_A.weight") || strings.HasSuffix(t.Name, ".lora_B.weight")) {
			m.adapters = true
			if s.Family == model.FamilyFlux || s.Family == model.FamilySD3 {
				m.loraModules = addLoRAModule(m.loraModules, t.Name)
			}
		}
		if train {
			p, ok := model.ProjectionOf(t.Name)
			frozenOK = frozenOK && ok
			m.frozen.Adapted |= p
			if ok && strings.HasSuffix(t.Name, ".lora_A.weight") && len(t.Shape) == 2 {
				m.frozen.Rank = max(m.frozen.Rank, t.Shape[0])
			}
		}
		if train && part == "vision" {
			visionTrains = true
		}
		if train {
			m.trainableParams += total
			m.trainableTensors += r.Count
			if (comp == "head" || (m.tied && comp == "embeddings")) && isHeadShaped(s.LM(), t.Shape) {
				m.headTrained = true
			}
		}
	}
	if !frozenOK || !m.adapters {
		m.frozen = model.FrozenBase{}
	} else if f.KeepsInputs {
		// bitsandbytes before 0.43.2: the 4-bit linears keep their inputs
		// (model.FrozenBase.KeptInputs).
		m.frozen.KeptInputs = true
	}
	m.visionFrozen = s.Vision != nil && !visionTrains
	// The stepped inventory is one run per trainable group: identical
	// tensors together, so that an optimizer's transient sizes each
	// shape once. A foreach step's temporaries are a sum, which the order
	// does not change; a for-loop step's peak pairs each tensor with the
	// one before it, which is then a tensor of the same shape where the
	// model has several.
	for k, dt := range steppedDTypes {
		for i := range m.groups {
			if g := &m.groups[i]; g.trainable {
				t := gpumem.Tensor{Name: g.name, Shape: g.shape, DType: dt}
				m.runs[k] = append(m.runs[k], optimizer.Run{Tensor: t, Count: g.count})
				m.reps[k] = append(m.reps[k], t)
			}
		}
	}
	return m, nil
}

// isHeadShaped reports whether shape is lm's vocabulary × hidden
// embedding, which a tied head reuses.
func isHeadShaped(lm model.Spec, shape []int64) bool {
	return len(shape) == 2 && shape[0] == lm.Vocab && shape[1] == lm.Hidden
}

// largestLayer returns the parameter count of the largest layer of a
// stack among runs (model.Component "layer"): what ZeRO-3 and FSDP
// gather at once. A layer holds Count/Layers of each run's tensors.
func largestLayer(rs []model.Run) int64 {
	per := map[string]int64{}
	var most int64
	for _, r := range rs {
		part, comp, layer := model.Component(r.Tensor.Name)
		if comp != "layer" || r.Layers < 1 {
			continue
		}
		n, _ := r.Tensor.Elems()
		n, _ = checked.Mul(n, r.Count/r.Layers)
		k := part + "/" + strconv.Itoa(layer)
		per[k], _ = checked.Add(per[k], n)
		most = max(most, per[k])
	}
	return most
}

// steppedDTypes are the dtypes an optimizer may step parameters in.
var steppedDTypes = [3]gpumem.DType{gpumem.FP32, gpumem.BF16, gpumem.FP16}

// stepped returns the trainable inventory in dt as runs, and one tensor
// of each run.
func (m *Model) stepped(dt gpumem.DType) ([]optimizer.Run, []gpumem.Tensor) {
	for k, d := range steppedDTypes {
		if d == dt {
			return m.runs[k], m.reps[k]
		}
	}
	return m.runs[0], m.reps[0]
}

// Spec returns the architecture the Model was prepared from.
func (m Model) Spec() model.Spec { return m.spec }

// Params returns the number of parameters (elements; quantization
// constants are not counted), and how many of them are trained.
func (m Model) Params() (total, trainable int64) { return m.params, m.trainableParams }

// valid reports whether m was built by NewModel.
func (m *Model) valid() bool { return m.tensors > 0 }

// weights returns the bytes of every tensor stored in dt (quantized
// groups in their own storage), each rounded up to the caching
// allocator's 512-byte granularity, and the trainable share.
func (m Model) weights(dt gpumem.DType, trainableOnly bool) (gpumem.Bytes, error) {
	return m.weightsOf(dt, trainableOnly, false, nil, 0)
}

// casts returns the bytes of dt copies of the floating-point tensors
// (autocast's casts): quantized groups are dequantized per operation by
// their kernels (bitsandbytes' matmul_4bit), not cached.
func (m Model) casts(dt gpumem.DType, v *rankView) (gpumem.Bytes, error) {
	return m.weightsOf(dt, false, true, v, 0)
}

// trainableCasts returns the bytes of dt copies of the floating-point
// tensors that require grad (autocast's weight cache in a pass without
// gradients).
func (m Model) trainableCasts(dt gpumem.DType, v *rankView) (gpumem.Bytes, error) {
	return m.weightsOf(dt, true, true, v, 0)
}

// weightsOf sums the groups' bytes in dt as the rank v holds them (nil:
// the whole model); below > 0 counts only tensors of fewer elements
// (what DeepSpeed ZeRO-3 keeps whole).
func (m Model) weightsOf(dt gpumem.DType, trainableOnly, floatOnly bool, v *rankView, below int64) (gpumem.Bytes, error) {
	var sum int64
	for i := range m.groups {
		g := &m.groups[i]
		if (trainableOnly && !g.trainable) || (floatOnly && g.fixed != gpumem.Invalid) {
			continue
		}
		d := dt
		if g.fixed != gpumem.Invalid {
			d = g.fixed
		}
		elems, count := g.elems, g.count
		if v != nil {
			elems, count = v.elems(g), v.count(g, m.layers)
		}
		if count == 0 || (below > 0 && elems >= below) {
			continue
		}
		b, err := d.Size(elems)
		if err != nil {
			return 0, err
		}
		r, ok := checked.Mul(roundAlloc(int64(b)), count)
		if !ok {
			return 0, errOverflow("weights")
		}
		if sum, ok = checked.Add(sum, r); !ok {
			return 0, errOverflow("weights")
		}
	}
	return gpumem.Bytes(sum), nil
}

// allocRound is the caching allocator's size granularity: every block is
// a multiple of 512 bytes (c10/cuda/CUDACachingAllocator.cpp,
// kMinBlockSize = 512, round_size).
const allocRound = 512

func roundAlloc(b int64) int64 {
	if b == 0 {
		return 0
	}
	return (b + allocRound - 1) / allocRound * allocRound
}

func errOverflow(what string) error {
	return gpumem.Errorf("Job", what, gpumem.ErrRange, "bytes overflow int64")
}

// reduceBucket is DeepSpeed's reduce_bucket_size default, in elements
// (deepspeed/runtime/zero/config.py: 5e8): ZeRO-2 reduces gradients in
// buckets of this many elements.
const reduceBucket = 500_000_000

// bucket returns one gradient reduce bucket in dt, for the rank v.
func (m *Model) bucket(dt gpumem.DType, v *rankView) gpumem.Bytes {
	b, _ := dt.Size(min(int64(reduceBucket), m.rankTrainable(v)))
	return b
}

// layerWeights returns the largest block's weights in dt as the rank v
// holds them (the whole model's when it has no blocks): what FSDP
// gathers per unit.
func (m *Model) layerWeights(dt gpumem.DType, v *rankView) (gpumem.Bytes, error) {
	n := m.layerElems
	if n == 0 {
		n = m.params
	}
	if v != nil && v.tp > 1 {
		n, _ = checked.CeilDiv(n, v.tp)
	}
	return dt.Size(n)
}

// tiedGrad returns one gradient, in dt as the rank v holds it, of the
// trained input embedding that the LM head reuses (a tied head), rounded
// to the allocator's 512 bytes; 0 when the head is untied, the
// embedding frozen, or the stages of a pipeline hold separate copies.
//
// The tied weight is one leaf that both the head and the embedding
// use, so autograd sums the two contributions in the input buffer of its
// AccumulateGrad node (torch/csrc/autograd/input_buffer.cpp,
// InputBuffer::add, which adds out of place when neither operand may be
// stolen) and runs the node only after the embedding's backward, at the
// very end: the head's V×h gradient (alive from the head's backward on),
// the embedding's dense V×h gradient (embedding_dense_backward) and
// their sum, which becomes .grad, exist at once. Measured on CPU (torch
// 1.13, tools/oracle/step.py): the backward peak of a tied model is
// every gradient plus 2·V·h·4 bytes (to 12 bytes), of the same model
// untied every gradient plus 4 KiB.
//
// The sum is made when the last use's gradient arrives: at the very end
// for an embedding the encoder also reads (T5's shared table), but
// before the encoder's backward for an encoder–decoder's decoder
// embedding (Whisper's embed_tokens, tied to proj_out), whose node runs
// first (autograd runs the most recently created ready node first); then
// decoder reports true.
func (m *Model) tiedGrad(dt gpumem.DType, v *rankView) (b gpumem.Bytes, decoder bool) {
	lm := m.spec.LM()
	if !m.tied || !lm.TiedHead() || (v != nil && v.pp > 1) {
		return 0, false
	}
	for i := range m.groups {
		g := &m.groups[i]
		if g.comp != compEmbed || !g.trainable || !isHeadShaped(lm, g.shape) {
			continue
		}
		elems := g.elems
		if v != nil {
			elems = v.elems(g)
		}
		n, err := dt.Size(elems)
		if err != nil {
			return 0, false
		}
		return gpumem.Bytes(roundAlloc(int64(n))), g.decoder
	}
	return 0, false
}

// addGroupGrads adds to sum the gradient bytes of group g, in dt (or the
// group's fixed dtype) as the rank v holds them, each tensor rounded to
// the allocator's 512 bytes; false on overflow or a size dt cannot hold.
func (m *Model) addGroupGrads(sum int64, g *group, dt gpumem.DType, v *rankView) (int64, bool) {
	elems, count := g.elems, g.count
	if v != nil {
		elems, count = v.elems(g), v.count(g, m.layers)
	}
	if g.fixed != gpumem.Invalid {
		dt = g.fixed
	}
	b, err := dt.Size(elems)
	if err != nil {
		return 0, false
	}
	r, ok := checked.Mul(roundAlloc(int64(b)), count)
	if !ok {
		return 0, false
	}
	return checked.Add(sum, r)
}

// gradsOutsideEncoder returns the gradient bytes, in dt as the rank v
// holds them, of the trainable tensors outside an encoder–decoder's
// encoder (its decoder, head and shared embedding): what backward has
// made when it reaches the encoder, which runs last (0 without an
// encoder).
func (m *Model) gradsOutsideEncoder(dt gpumem.DType, v *rankView) gpumem.Bytes {
	var sum int64
	enc := false
	for i := range m.groups {
		g := &m.groups[i]
		enc = enc || g.encoder
		if !g.trainable || g.encoder {
			continue
		}
		var ok bool
		if sum, ok = m.addGroupGrads(sum, g, dt, v); !ok {
			return 0
		}
	}
	if !enc {
		return 0
	}
	return gpumem.Bytes(sum)
}

// embedGrads returns the gradient bytes, in dt as the rank v holds them,
// of the trained embedding tensors whose backward runs after the first
// block's (the token, position and front-end embeddings), without a
// tied one, whose gradient the head's backward began long before.
func (m *Model) embedGrads(dt gpumem.DType, v *rankView) gpumem.Bytes {
	lm := m.spec.LM()
	tied := m.tied && lm.TiedHead()
	var sum int64
	for i := range m.groups {
		g := &m.groups[i]
		if !g.trainable || g.comp != compEmbed || (tied && isHeadShaped(lm, g.shape)) {
			continue
		}
		var ok bool
		if sum, ok = m.addGroupGrads(sum, g, dt, v); !ok {
			return 0
		}
	}
	return gpumem.Bytes(sum)
}

// headGrads returns the gradient bytes, in dt as the rank v holds them,
// of the trained tensors whose backward runs before any block's: the
// final norm and the head, or for a tied head its V×h contribution,
// which autograd holds until the embedding's arrives.
func (m *Model) headGrads(dt gpumem.DType, v *rankView) gpumem.Bytes {
	var sum int64
	for i := range m.groups {
		g := &m.groups[i]
		if !g.trainable || g.comp != compHead || g.encoder {
			continue
		}
		var ok bool
		if sum, ok = m.addGroupGrads(sum, g, dt, v); !ok {
			return 0
		}
	}
	tied, _ := m.tiedGrad(dt, v)
	s, ok := checked.Add(sum, int64(tied))
	if !ok {
		return 0
	}
	return gpumem.Bytes(s)
}
