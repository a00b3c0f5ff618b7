package budget

import (
	"math"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
)

// LlamaCppOptions are llama.cpp's context and model parameters that size
// its buffers (common/arg.cpp flags in parentheses). The zero value is
// every layer offloaded, a context of the job's tokens, one sequence per
// Job.Batch, n_ubatch 512, no flash attention and an f16 cache.
type LlamaCppOptions struct {
	// GPULayers is --n-gpu-layers: how many of the n_layer + 1 slots
	// (the repeating layers and the output layer) go to the GPU. llama.cpp
	// offloads the last ones: i_gpu_start = max(n_layer + 1 − ngl, 0),
	// and slot il (n_layer for the output layer) is on the GPU when
	// il ≥ i_gpu_start (llama_model::load_tensors, src/llama-model.cpp,
	// ggml-org/llama.cpp master): -ngl 16 on a 32-layer model puts 15
	// layers and the output layer on the GPU, -ngl 33 (or more) all of
	// them. Builds before PR #18148 (December 2025) computed
	// i_gpu_start = max(n_layer − ngl, 0) instead (ngl layers, and the
	// output layer only when ngl > n_layer), and builds before December
	// 2023 had two more slots, the V and K caches; a full offload is the
	// same in all (see Version and LlamaCppVersion). Zero means all
	// (-ngl 999); a negative value is refused.
	GPULayers int
	// Version is the build's date, which selects the placement rule of
	// GPULayers (LlamaCppVersion); zero means a current build.
	Version LlamaCppVersion
	// Context is --ctx-size (n_ctx), the KV cache's cells over all
	// sequences; zero means Parallel × (Job.SeqLen + Job.Generate).
	// llama.cpp pads it to a multiple of 256 (llamaCppPad).
	Context int
	// Parallel is --parallel (n_seq_max): the sequences served at once.
	// llama-server splits the Context among them (n_ctx_seq = n_ctx /
	// n_seq, each padded to 256: llamaCppPad), so for a given Context it
	// adds at most 255 cells per sequence; zero means Job.Batch.
	Parallel int
	// UBatch is --ubatch-size (n_ubatch), the tokens of one graph
	// evaluation, which sizes the compute buffer; zero means 512, the
	// default of common_params. llama.cpp caps it at n_ctx.
	UBatch int
	// FlashAttention is --flash-attn on: no n_kv × n_ubatch × n_head
	// score matrix, and an f16 mask.
	FlashAttention bool
	// CacheK and CacheV are --cache-type-k and --cache-type-v; Invalid
	// (zero) means F16, llama.cpp's default. FP32, BF16, Q8_0, Q4_0,
	// Q4_1, Q5_0, Q5_1 and IQ4_NL are accepted (common/arg.cpp
	// kv_cache_types).
	CacheK, CacheV gpumem.DType
	// GPUs is how many GPUs like Job.Device llama.cpp sees (the devices
	// of --device, or CUDA_VISIBLE_DEVICES); zero means 1. See
	// SplitMode.
	GPUs int
	// SplitMode is --split-mode: how the offloaded layers are spread
	// over the GPUs (LlamaSplitLayer, the zero value, is llama.cpp's
	// default).
	SplitMode LlamaSplitMode
	// TensorSplit is --tensor-split: the share of each GPU (any scale);
	// all zero means by free memory, which for GPUs alike is an even
	// split. Entries past GPUs must be zero.
	TensorSplit [LlamaMaxDevices]float64
	// MainGPU is --main-gpu: the one GPU used with LlamaSplitNone.
	MainGPU int
	// NoMmap is --no-mmap: the CPU tensors are read into a "CPU model
	// buffer" of their own size instead of mapping the file, whose
	// mapping llama.cpp reports as "CPU_Mapped model buffer" (see
	// LlamaCppReport.HostMapped).
	NoMmap bool
	// SWAFull is --swa-full: a sliding-window model's SWA layers keep a
	// cache of the full context instead of n_swa + n_ubatch cells (see
	// LlamaCppSWAFrom); it changes nothing for other models and for
	// builds before the SWA cache. llama-server and llama-cli default to
	// off (common_params.swa_full, common/common.h); the C API defaults
	// to on (llama_context_default_params, src/llama-context.cpp; read at
	// upstream b7108 as ollama 0cf7794b1 vendors it), so a program that
	// uses the API without setting it has SWAFull's cache.
	SWAFull bool
}

// llamaCppPad is the padding of n_ctx (and so of the KV cache's cells):
// llama_context's constructor rounds the context up to 256 cells,
// "cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)", and without a unified
// cache (kv_unified false, llama_context_default_params) each of the
// n_seq_max sequences' share too, n_ctx_seq = GGML_PAD(n_ctx / n_seq_max,
// 256), the cache then holding n_ctx_seq × n_seq_max cells
// (src/llama-context.cpp, ggml-org/llama.cpp after PR #17046). Before it,
// the padding was 32 cells (256 with flash attention): the logs of
// testdata/llamacpp use multiples of 256.
const llamaCppPad = 256

// llamaCppMaskPad is GGML_KQ_MASK_PAD (ggml/include/ggml.h, 64): the KQ
// mask's rows are the ubatch's tokens padded to it.
const llamaCppMaskPad = 64

// LlamaCppBuffers returns the buffers llama.cpp allocates for j, which
// must have Runtime LlamaCpp.
func LlamaCppBuffers(j Job) (LlamaCppReport, error) {
	if err := j.validate(); err != nil {
		return LlamaCppReport{}, err
	}
	if j.Runtime != LlamaCpp {
		return LlamaCppReport{}, gpumem.Errorf("Job.Runtime", j.Runtime, gpumem.ErrInvalid, "LlamaCppBuffers needs Runtime LlamaCpp")
	}
	return llamaCppBuffers(&j)
}

// validateLlamaCpp checks the llama.cpp options of j.
func (j *Job) validateLlamaCpp() error {
	o := &j.LlamaCpp
	if j.Runtime > SGLang {
		return gpumem.Errorf("Job.Runtime", j.Runtime, gpumem.ErrInvalid, "want PyTorch, LlamaCpp, VLLM or SGLang")
	}
	if j.Runtime != LlamaCpp {
		if !o.isZero() {
			return gpumem.Errorf("Job.LlamaCpp", "set", gpumem.ErrInvalid, "llama.cpp options need Runtime LlamaCpp")
		}
		return nil
	}
	if j.Mode != Prefill && j.Mode != Generation {
		return gpumem.Errorf("Job.Mode", j.Mode, gpumem.ErrInvalid, "llama.cpp runs inference: want Prefill or Generation")
	}
	if j.Parallel.GPUs() > 1 || j.Offload != 0 {
		return gpumem.Errorf("Job.Parallel", j.Parallel.Describe(), gpumem.ErrInvalid, "llama.cpp's GPUs are LlamaCpp.GPUs, split by LlamaCpp.SplitMode")
	}
	switch {
	case o.GPUs < 0 || o.GPUs > LlamaMaxDevices:
		return gpumem.Errorf("Job.LlamaCpp.GPUs", o.GPUs, gpumem.ErrInvalid, "want 1 to 16 GPUs (zero: 1)")
	case o.SplitMode > LlamaSplitNone:
		return gpumem.Errorf("Job.LlamaCpp.SplitMode", o.SplitMode, gpumem.ErrInvalid, "want layer, row or none")
	case o.MainGPU < 0 || o.MainGPU >= max(o.GPUs, 1):
		return gpumem.Errorf("Job.LlamaCpp.MainGPU", o.MainGPU, gpumem.ErrInvalid, "want a GPU index from 0 to GPUs − 1")
	}
	for i, f := range o.TensorSplit {
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0) || f < 0:
			return gpumem.Errorf("Job.LlamaCpp.TensorSplit", f, gpumem.ErrInvalid, "a GPU's share must be a finite number, at least 0")
		case f > 0 && i >= max(o.GPUs, 1):
			return gpumem.Errorf("Job.LlamaCpp.TensorSplit", f, gpumem.ErrInvalid, "a share for GPU %d of %d", i, max(o.GPUs, 1))
		}
	}
	if j.KVDType != gpumem.Invalid || j.KVBlock != 0 {
		return gpumem.Errorf("Job.KVDType", j.KVDType, gpumem.ErrInvalid, "a llama.cpp cache's type is LlamaCpp.CacheK and CacheV")
	}
	switch {
	case o.GPULayers < 0:
		return gpumem.Errorf("Job.LlamaCpp.GPULayers", o.GPULayers, gpumem.ErrInvalid, "must not be negative (zero: all layers)")
	case o.Context < 0:
		return gpumem.Errorf("Job.LlamaCpp.Context", o.Context, gpumem.ErrInvalid, "must not be negative (zero: the job's tokens)")
	case o.Parallel < 0:
		return gpumem.Errorf("Job.LlamaCpp.Parallel", o.Parallel, gpumem.ErrInvalid, "must not be negative (zero: Job.Batch)")
	case o.UBatch < 0:
		return gpumem.Errorf("Job.LlamaCpp.UBatch", o.UBatch, gpumem.ErrInvalid, "must not be negative (zero: 512)")
	case o.Version != 0:
		if _, err := ParseLlamaCppVersion("Job.LlamaCpp.Version", o.Version.String()); err != nil || o.Version < 20230101 {
			return gpumem.Errorf("Job.LlamaCpp.Version", int32(o.Version), gpumem.ErrInvalid, "want a build date as YYYYMMDD from 2023 on, outside 2025-12-17 to 2025-12-23 (zero: current)")
		}
	}
	for _, c := range [...]struct {
		field string
		dt    gpumem.DType
	}{{"Job.LlamaCpp.CacheK", o.CacheK}, {"Job.LlamaCpp.CacheV", o.CacheV}} {
		switch c.dt {
		case gpumem.Invalid, gpumem.FP32, gpumem.FP16, gpumem.BF16, gpumem.Q8_0, gpumem.Q4_0, gpumem.Q4_1,
			gpumem.Q5_0, gpumem.Q5_1, gpumem.IQ4_NL:
		default:
			return gpumem.Errorf(c.field, c.dt, gpumem.ErrInvalid, "not a llama.cpp cache type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)")
		}
	}
	return nil
}

// llamaCppBuffers sizes j's buffers; j is valid.
//
// Weights: each tensor's bytes in its GGUF type, on the device of its
// slot (GPULayers): token_embd stays on the CPU at any -ngl ("there is
// very little benefit to offloading the input layer, so always keep it on
// the CPU": dev_input, src/llama-model.cpp), output.weight and
// output_norm on the output layer's device, blk.N.* on layer N's. A model
// without output.weight (tied embeddings) has token_embd duplicated as
// the output layer (TENSOR_DUPLICATED, src/llama-model-loader.cpp), so
// its bytes count on the output device too. The CUDA buffer's 128-byte
// tensor alignment and the 512-column row padding of quantized tensors
// (ggml-cuda.cu MATRIX_ROW_PADDING, for rows not a multiple of 512) are
// not counted.
//
// KV cache: for each layer, K of n_embd_k_gqa × kv_size in CacheK and V
// of n_embd_v_gqa × kv_size in CacheV (llama_kv_cache's layer tensors,
// src/llama-kv-cache.cpp), on the layer's device; kv_size is n_ctx
// padded to 256. A sliding-window model's SWA layers have a cache of
// their own of n_swa + n_ubatch cells per sequence, padded, in builds
// from LlamaCppSWAFrom unless SWAFull (llamaSWACells, llamacpp_swa.go);
// its compute graph holds that cache's mask and indices too. A
// DeepSeek-V2/V3 (MLA) model's cache is the compressed latent in K alone
// (builds from LlamaCppMLAKOnlyFrom), the latent in K and V (from
// LlamaCppMLAFrom), or every head's K and V before (LlamaCppVersion).
//
// Compute: llamaCppCompute.
func llamaCppBuffers(j *Job) (LlamaCppReport, error) {
	m := &j.Model
	s := m.spec
	lm := s.LM()
	o := j.LlamaCpp
	var r LlamaCppReport
	nLayer := int(lm.Layers)
	pl := llamaPlace(o.Version, nLayer, o.GPULayers)
	r.Slots = pl.slots
	start := pl.start                  // i_gpu_start
	act := min(pl.offloaded, nLayer+1) // act_gpu_layers
	onGPU := func(il int) bool { return il >= start && il-start < act }
	r.OutputOnGPU = onGPU(nLayer)
	r.Layers = pl.offloaded
	sp := llamaSplitPoints(&o)
	r.GPUs = sp.n
	dev := func(il int) int { return sp.device(il-start, act) }
	row := o.SplitMode == LlamaSplitRow && sp.n > 1

	// Weights. place puts b bytes of a tensor of slot il (−1: the host)
	// on its device; a row-split matrix of rows rows is spread over the
	// GPUs by the split.
	var host int64
	var werr error
	place := func(il int, b, rows int64, matrix bool) {
		if werr != nil {
			return
		}
		if il < 0 || !onGPU(il) {
			var ok bool
			if host, ok = checked.Add(host, b); !ok {
				werr = errOverflow("llama.cpp weights")
			}
			return
		}
		if row && matrix && rows > 0 {
			lo := int64(0)
			for d := 0; d < sp.n; d++ {
				hi := rows
				if d < sp.n-1 {
					hi = int64(float64(rows) * float64(sp.points[d]))
				}
				share := (b / rows) * (hi - lo)
				if d == sp.n-1 {
					share = b - (b/rows)*lo
				}
				lo = hi
				w := &r.Devices[d].Weights
				*w = gpumem.Bytes(checked.SatSum(int64(*w), share))
			}
			return
		}
		w := &r.Devices[dev(il)].Weights
		*w = gpumem.Bytes(checked.SatSum(int64(*w), b))
	}
	hasOutput := false
	var embd int64
	if inv := s.Inventory; inv != nil {
		for _, t := range inv {
			b, err := t.Bytes()
			if err != nil {
				return r, err
			}
			_, comp, il := model.Component(t.Name)
			matrix := len(t.Shape) == 2
			var rows int64
			if matrix {
				rows = t.Shape[0]
			}
			switch {
			case comp == "layer":
				place(il, int64(b), rows, matrix)
			case comp == "embeddings":
				embd += int64(b)
				place(-1, int64(b), 0, false)
			default: // output, output_norm
				if t.Name == "output.weight" || t.Name == "lm_head.weight" {
					hasOutput = true
				}
				place(nLayer, int64(b), rows, matrix)
			}
		}
	} else {
		// A folded model: its layers' bytes are spread evenly.
		for i := range m.groups {
			g := &m.groups[i]
			total, err := m.storedBytes(g, "llama.cpp weights")
			if err != nil {
				return r, err
			}
			matrix := len(g.shape) == 2
			var rows int64
			if matrix {
				rows = g.shape[0]
			}
			switch g.comp {
			case compLayer:
				if nLayer > 0 {
					per := total / int64(nLayer)
					for il := range nLayer {
						place(il, per, rows, matrix)
					}
					place(-1, total-per*int64(nLayer), 0, false)
				}
			case compEmbed:
				embd += total
				place(-1, total, 0, false)
			default:
				hasOutput = hasOutput || g.comp == compHead && len(g.shape) == 2
				place(nLayer, total, rows, matrix)
			}
		}
	}
	if !hasOutput && r.OutputOnGPU {
		// The tied embedding's copy as the output layer: the vocabulary
		// rows.
		place(nLayer, embd, lm.Vocab, true)
	}
	if werr != nil {
		return r, werr
	}
	r.HostWeights = gpumem.Bytes(host)
	r.HostMapped = r.HostWeights
	if s.Inventory != nil && !o.NoMmap {
		onHost := func(t *gpumem.Tensor) bool {
			_, comp, il := model.Component(t.Name)
			switch comp {
			case "layer":
				return !onGPU(il)
			case "embeddings":
				return true
			}
			return !r.OutputOnGPU
		}
		span, err := ggufSpan(s.Inventory, ggufAlignment, onHost)
		if err != nil {
			return r, err
		}
		r.HostMapped = span
	}

	// KV cache.
	nSeq := o.Parallel
	if nSeq == 0 {
		nSeq = j.Batch
	}
	nCtx := int64(o.Context)
	if nCtx == 0 {
		per, ok := checked.Add(int64(j.SeqLen), int64(j.Generate))
		if ok {
			nCtx, ok = checked.Mul(per, int64(nSeq))
		}
		if !ok {
			return r, errOverflow("llama.cpp context")
		}
	}
	cells, ok := checked.CeilDiv(nCtx, llamaCppPad)
	if ok {
		cells, ok = checked.Mul(cells, llamaCppPad)
	}
	if !ok || cells > 1<<40 {
		return r, gpumem.Errorf("Job.LlamaCpp.Context", nCtx, gpumem.ErrRange, "too large")
	}
	if nSeq > 1 {
		// Each sequence's share, padded (a cache that is not unified).
		per, _ := checked.CeilDiv(cells/int64(nSeq), llamaCppPad)
		if cells, ok = checked.Mul(per*llamaCppPad, int64(nSeq)); !ok || cells > 1<<40 {
			return r, gpumem.Errorf("Job.LlamaCpp.Context", nCtx, gpumem.ErrRange, "too large")
		}
	}
	r.Cells = int(cells)
	ck, cv := o.CacheK, o.CacheV
	if ck == gpumem.Invalid {
		ck = gpumem.FP16
	}
	if cv == gpumem.Invalid {
		cv = gpumem.FP16
	}
	kDim := lm.KVHeads * lm.HeadDim
	vDim := kDim
	switch {
	case lm.MLA.Enabled() && o.Version.mla() == mlaKOnly:
		// llama.cpp's MLA cache since PR #19067: the compressed latent
		// and the rope key (kv_lora_rank + n_rot) as K, no V.
		kDim = lm.MLA.KVLoRARank + lm.MLA.QKRopeHeadDim
		vDim = 0
	case lm.MLA.Enabled() && o.Version.mla() == mlaLatent:
		// From PR #12801 to PR #19067: the latent and rope key as K, the
		// latent as V.
		kDim = lm.MLA.KVLoRARank + lm.MLA.QKRopeHeadDim
		vDim = lm.MLA.KVLoRARank
	case lm.MLA.Enabled():
		// Before PR #12801 (LlamaCppMLAFrom): every head's K
		// (n_embd_head_k = qk_nope + qk_rope) and V (v_head_dim),
		// n_embd_k_gqa and n_embd_v_gqa of llama-hparams.cpp with
		// n_head_kv = n_head.
		kDim = lm.Heads * (lm.MLA.QKNopeHeadDim + lm.MLA.QKRopeHeadDim)
		vDim = lm.Heads * lm.MLA.VHeadDim
	}
	// n_ubatch as used: llama.cpp caps n_batch, and n_ubatch with it, at
	// n_ctx once padded (llama_context's constructor; --ctx-size 300 runs
	// n_ctx 512 and n_ubatch 512: testdata/llamacpp/swa).
	ub := int64(o.UBatch)
	if ub == 0 {
		ub = 512
	}
	ub = min(ub, cells)
	r.UBatch = int(ub)

	layerKV := func(c int64) (int64, int64, error) {
		kb, err := ck.Size(kDim * c)
		if err != nil {
			return 0, 0, err
		}
		vb, err := cv.Size(vDim * c)
		if err != nil {
			return 0, 0, err
		}
		per, ok := checked.Add(int64(kb), int64(vb))
		if !ok {
			return 0, 0, errOverflow("llama.cpp KV cache")
		}
		return per, int64(vb), nil
	}
	perLayer, vbAll, err := layerKV(cells)
	if err != nil {
		return r, err
	}
	// The sliding-window layers' cache (llamacpp_swa.go).
	swa := llamaSWA{}
	var swaCells, perSWA int64
	if !lm.MLA.Enabled() {
		swa = llamaCppSWALayout(&lm)
		if swaCells, err = llamaSWACells(swa, &o, cells/int64(max(nSeq, 1)), int64(max(nSeq, 1)), ub); err != nil {
			return r, err
		}
		if swaCells > 0 {
			if perSWA, _, err = layerKV(swaCells); err != nil {
				return r, err
			}
			r.SWACells = int(swaCells)
			for il := range nLayer {
				if swa.slides(il) {
					r.SWALayers++
				}
			}
		}
	}
	kvOf := func(il int) int64 {
		if swaCells > 0 && swa.slides(il) {
			return perSWA
		}
		return perLayer
	}
	gpuLayers := int64(nLayer - min(start, nLayer))
	var kvHost int64
	for il := range nLayer {
		if il < nLayer-int(gpuLayers) {
			kvHost = checked.SatSum(kvHost, kvOf(il))
			continue
		}
		d := &r.Devices[dev(il)]
		d.Layers++
		d.KV = gpumem.Bytes(checked.SatSum(int64(d.KV), kvOf(il)))
	}
	if kvHost == math.MaxInt64 {
		return r, errOverflow("llama.cpp KV cache")
	}
	if r.OutputOnGPU {
		r.Devices[dev(nLayer)].Output = true
	}
	var kvSlotsGPU int64 // the KV slots' cache on the main GPU (builds before 2023-12-07)
	if pl.slots > nLayer+1 {
		// One cache for all layers, its V slot and K slot offloaded with
		// -ngl n_layer + 2 and n_layer + 3.
		all, ok1 := checked.Mul(perLayer, int64(nLayer))
		v, ok2 := checked.Mul(vbAll, int64(nLayer))
		if !ok1 || !ok2 {
			return r, errOverflow("llama.cpp KV cache")
		}
		switch pl.kvSlots {
		case 1:
			kvSlotsGPU = v
		case 2:
			kvSlotsGPU = all
		}
		kvHost = all - kvSlotsGPU
	}
	r.HostKV = gpumem.Bytes(kvHost)

	// Compute buffer.
	cg := llamaCppGraphKV{cells: cells, swaCells: swaCells, streams: int64(max(nSeq, 1))}
	var whole gpumem.Bytes // every offloaded stage: a row-split GPU's
	if row {
		if whole, err = llamaCppComputeKV(lm, cg, ub, o.FlashAttention, int(gpuLayers), r.OutputOnGPU, false, o.Version); err != nil {
			return r, err
		}
	}
	var busiest gpumem.Bytes
	for i := range r.GPUs {
		d := &r.Devices[i]
		if pl.slots > nLayer+1 {
			d.KV = 0
			if i == 0 {
				d.KV = gpumem.Bytes(kvSlotsGPU)
			}
		}
		if d.KV == math.MaxInt64 {
			return r, errOverflow("llama.cpp KV cache")
		}
		switch {
		case row:
			d.Compute = whole
		case d.Layers > 0 || d.Output:
			if d.Compute, err = llamaCppComputeKV(lm, cg, ub, o.FlashAttention, d.Layers, d.Output, false, o.Version); err != nil {
				return r, err
			}
		}
		r.GPUWeights = gpumem.Bytes(checked.SatSum(int64(r.GPUWeights), int64(d.Weights)))
		r.KV = gpumem.Bytes(checked.SatSum(int64(r.KV), int64(d.KV)))
		r.Compute = gpumem.Bytes(checked.SatSum(int64(r.Compute), int64(d.Compute)))
		if t := d.Total(); i == 0 || t > busiest {
			busiest, r.Busiest = t, i
		}
	}
	ov := j.Overhead.resolve(false, j.Device)
	r.Context = ov.Context
	return r, nil
}

// estimateLlamaCpp is Estimate for Runtime LlamaCpp: the GPU model buffer
// in Weights, the KV buffer in KVCache, the compute buffer in Workspace,
// the CUDA context in Context, and the CPU model and KV buffers in Host;
// over several GPUs, those of the most loaded one.
// ggml's buffers are allocated once at their full size, so there is no
// fragmentation and Allocated is the peak of every phase.
func estimateLlamaCpp(j *Job) (Breakdown, error) {
	r, err := llamaCppBuffers(j)
	if err != nil {
		return Breakdown{}, err
	}
	var b Breakdown
	d := &r.Devices[r.Busiest] // one GPU: the most loaded
	b.Weights, b.KVCache, b.Workspace, b.Context = d.Weights, d.KV, d.Compute, r.Context
	b.Host = gpumem.Bytes(checked.SatSum(int64(r.HostWeights), int64(r.HostKV)))
	b.HostNode = b.Host
	b.Phase = Forward
	if j.Mode == Generation {
		b.Phase = Decode
	}
	b.Phases[b.Phase] = b.Allocated()
	return b, nil
}
