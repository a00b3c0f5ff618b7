package budget

import (
	"strconv"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/checked"
	"github.com/gpumem/gpumem/model"
)

// Runtime is the engine that runs the job: how it places the weights and
// what buffers it allocates.
type Runtime uint8

const (
	// PyTorch is a PyTorch (transformers) process: tensors through the
	// CUDA caching allocator. It is the zero value.
	PyTorch Runtime = iota
	// LlamaCpp is llama.cpp (and Ollama, which runs it) serving a GGUF
	// model: fixed ggml backend buffers per device for the weights, the
	// KV cache and the compute graph (see [LlamaCppOptions] and
	// [LlamaCppBuffers]).
	LlamaCpp
	// VLLM is vLLM serving a model: the weights, the profile run's peak,
	// and a KV cache of the memory gpu_memory_utilization leaves (see
	// [VLLMOptions] and [VLLMBuffers]).
	VLLM
	// SGLang is SGLang serving a model: the weights and a KV pool of the
	// memory mem_fraction_static leaves (see [SGLangOptions] and
	// [SGLangBuffers]).
	SGLang
)

var runtimeNames = [...]string{PyTorch: "pytorch", LlamaCpp: "llama.cpp", VLLM: "vllm", SGLang: "sglang"}

// String returns "pytorch", "llama.cpp", "vllm" or "sglang".
func (r Runtime) String() string {
	if int(r) < len(runtimeNames) {
		return runtimeNames[r]
	}
	return "Runtime(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (r Runtime) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// ParseRuntime reads "pytorch" (or "transformers", "torch"),
// "llama.cpp" (or "llamacpp", "llama-cpp", "ollama"), "vllm" and "sglang".
func ParseRuntime(s string) (Runtime, error) {
	switch s {
	case "pytorch", "torch", "transformers":
		return PyTorch, nil
	case "llama.cpp", "llamacpp", "llama-cpp", "ollama":
		return LlamaCpp, nil
	case "vllm", "vLLM":
		return VLLM, nil
	case "sglang", "SGLang":
		return SGLang, nil
	}
	return 0, gpumem.Errorf("Runtime", s, gpumem.ErrInvalid, "want pytorch, llama.cpp, vllm or sglang")
}

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
	// them. Releases of 2024 computed i_gpu_start = max(n_layer − ngl, 0)
	// instead (ngl layers, and the output layer only when ngl > n_layer);
	// a full offload is the same in both. Zero means all (-ngl 999); a
	// negative value is refused.
	GPULayers int
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
}

// LlamaCppReport is one llama.cpp job's buffers as llama.cpp prints them
// at load: "CUDA0 model buffer size" (GPUWeights), "CPU_Mapped model
// buffer size" (HostWeights), "CUDA0 KV buffer size" (KV), "CUDA0 compute
// buffer size" (Compute), and the CUDA context besides them.
type LlamaCppReport struct {
	GPUWeights  gpumem.Bytes // the offloaded layers' and (when offloaded) the output layer's tensors
	HostWeights gpumem.Bytes // token_embd and the layers left on the CPU
	KV          gpumem.Bytes // the offloaded layers' K and V caches
	HostKV      gpumem.Bytes // the CPU layers' caches
	Compute     gpumem.Bytes // the GPU compute buffer (llamaCppCompute)
	Context     gpumem.Bytes // the CUDA context (Overhead.Context)
	Layers      int          // layers on the GPU, the output layer included ("offloaded N/M layers to GPU")
	Slots       int          // n_layer + 1
	OutputOnGPU bool
	Cells       int // KV cells: n_ctx padded
	UBatch      int // n_ubatch as used
}

// Total is the device memory of the job: the GPU buffers and the context.
func (r LlamaCppReport) Total() gpumem.Bytes {
	return gpumem.Bytes(checked.SatSum(int64(r.GPUWeights), int64(r.KV), int64(r.Compute), int64(r.Context)))
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
		if *o != (LlamaCppOptions{}) {
			return gpumem.Errorf("Job.LlamaCpp", "set", gpumem.ErrInvalid, "llama.cpp options need Runtime LlamaCpp")
		}
		return nil
	}
	if j.Mode != Prefill && j.Mode != Generation {
		return gpumem.Errorf("Job.Mode", j.Mode, gpumem.ErrInvalid, "llama.cpp runs inference: want Prefill or Generation")
	}
	if j.Parallel.GPUs() > 1 || j.Offload != 0 {
		return gpumem.Errorf("Job.Parallel", j.Parallel.Describe(), gpumem.ErrUnsupported, "llama.cpp's layer and row split over GPUs is not modelled")
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
// padded to 256. Sliding-window layers keep the full size (llama.cpp's
// non-SWA cache, --swa-full) — the SWA cache is not modelled.
//
// Compute: llamaCppCompute.
func llamaCppBuffers(j *Job) (LlamaCppReport, error) {
	m := &j.Model
	s := m.spec
	lm := s.LM()
	o := j.LlamaCpp
	var r LlamaCppReport
	nLayer := int(lm.Layers)
	r.Slots = nLayer + 1
	ngl := o.GPULayers
	if ngl == 0 || ngl > r.Slots {
		ngl = r.Slots
	}
	start := r.Slots - ngl // i_gpu_start
	onGPU := func(il int) bool { return il >= start }
	r.OutputOnGPU = onGPU(nLayer)
	r.Layers = ngl

	// Weights.
	var gpu, host int64
	add := func(dst *int64, b int64) error {
		var ok bool
		if *dst, ok = checked.Add(*dst, b); !ok {
			return errOverflow("llama.cpp weights")
		}
		return nil
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
			dst := &host
			switch {
			case comp == "layer":
				if onGPU(il) {
					dst = &gpu
				}
			case comp == "embeddings":
				embd += int64(b)
			default: // output, output_norm
				if t.Name == "output.weight" || t.Name == "lm_head.weight" {
					hasOutput = true
				}
				if r.OutputOnGPU {
					dst = &gpu
				}
			}
			if err := add(dst, int64(b)); err != nil {
				return r, err
			}
		}
	} else {
		// A folded model: its layers' bytes are spread evenly.
		for i := range m.groups {
			g := &m.groups[i]
			d := g.fixed
			if d == gpumem.Invalid {
				d = s.DType
			}
			b, err := d.Size(g.elems)
			if err != nil {
				return r, err
			}
			total, ok := checked.Mul(int64(b), g.count)
			if !ok {
				return r, errOverflow("llama.cpp weights")
			}
			switch g.comp {
			case compLayer:
				if nLayer > 0 {
					n := int64(ngl - 1) // the output slot is the last one offloaded
					on, ok := checked.Mul(total/int64(nLayer), n)
					if !ok {
						return r, errOverflow("llama.cpp weights")
					}
					if err := add(&gpu, on); err != nil {
						return r, err
					}
					if err := add(&host, total-on); err != nil {
						return r, err
					}
				}
			case compEmbed:
				embd += total
				if err := add(&host, total); err != nil {
					return r, err
				}
			default:
				hasOutput = hasOutput || g.comp == compHead && len(g.shape) == 2
				dst := &host
				if r.OutputOnGPU {
					dst = &gpu
				}
				if err := add(dst, total); err != nil {
					return r, err
				}
			}
		}
	}
	if !hasOutput && r.OutputOnGPU {
		if err := add(&gpu, embd); err != nil {
			return r, err
		}
	}
	r.GPUWeights, r.HostWeights = gpumem.Bytes(gpu), gpumem.Bytes(host)

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
	if lm.MLA.Enabled() {
		// llama.cpp's MLA cache: the compressed latent and the rope key
		// (kv_lora_rank + n_rot) as K, the latent as V.
		kDim = lm.MLA.KVLoRARank + lm.MLA.QKRopeHeadDim
		vDim = lm.MLA.KVLoRARank
	}
	kb, err := ck.Size(kDim * cells)
	if err != nil {
		return r, err
	}
	vb, err := cv.Size(vDim * cells)
	if err != nil {
		return r, err
	}
	perLayer, ok := checked.Add(int64(kb), int64(vb))
	if !ok {
		return r, errOverflow("llama.cpp KV cache")
	}
	gpuLayers := int64(min(max(ngl-1, 0), nLayer))
	kvGPU, ok1 := checked.Mul(perLayer, gpuLayers)
	kvHost, ok2 := checked.Mul(perLayer, int64(nLayer)-gpuLayers)
	if !ok1 || !ok2 {
		return r, errOverflow("llama.cpp KV cache")
	}
	r.KV, r.HostKV = gpumem.Bytes(kvGPU), gpumem.Bytes(kvHost)

	// Compute buffer.
	ub := int64(o.UBatch)
	if ub == 0 {
		ub = 512
	}
	ub = min(ub, nCtx)
	r.UBatch = int(ub)
	c, err := llamaCppCompute(lm, cells, ub, o.FlashAttention, gpuLayers > 0, r.OutputOnGPU)
	if err != nil {
		return r, err
	}
	r.Compute = c
	ov := j.Overhead.resolve(false, j.Device)
	r.Context = ov.Context
	return r, nil
}

// llamaCppCompute approximates the GPU compute buffer: ggml-alloc
// (ggml/src/ggml-alloc.c, ggml_gallocr_reserve) measures the largest set
// of intermediate tensors alive at once while it walks the worst-case
// graph that llama_context reserves (n_ubatch tokens over a full cache,
// n_kv = kv_size, every token an output), freeing a tensor after its last
// consumer and computing in place in a parent's buffer where the op
// allows it (ggml_op_can_inplace: the softmax reuses KQ). The live sets
// of a llama graph (llm_build_llama, src/models/llama.cpp; build_attn_mha
// in src/llama-graph.cpp), in fp32 unless stated, with the KQ mask (an
// input, alive throughout: n_kv × pad(n_ubatch, 64), fp32, or f16 with
// flash attention):
//   - attention without flash attention: KQ = n_kv × n_ubatch × n_head
//     (soft_max in place), the residual, Q and KQV (n_embd × n_ubatch
//     each);
//   - attention with flash attention: the residual, Q and the output;
//   - feed-forward: the residual and gate and up (n_ff × n_ubatch each);
//   - output: the final norm (n_embd × n_ubatch) and the logits
//     (n_vocab × n_ubatch).
//
// The buffer is the mask plus the largest of the stages the GPU runs
// (the layers' when any layer is offloaded, the output's when the output
// layer is). It ignores the allocator's fragmentation between stages and
// the small tensors (positions, K and V of the ubatch, norms in place),
// and the CPU layers' matmuls the CUDA scheduler runs on the GPU for
// large batches (op offload); see testdata/llamacpp for how it compares
// with llama.cpp's own figures.
func llamaCppCompute(lm model.Spec, nKV, ub int64, flash, layers, output bool) (gpumem.Bytes, error) {
	mul := func(xs ...int64) (int64, bool) {
		p := int64(1)
		for _, x := range xs {
			var ok bool
			if p, ok = checked.Mul(p, x); !ok {
				return 0, false
			}
		}
		return p, true
	}
	rows, _ := checked.CeilDiv(ub, llamaCppMaskPad)
	rows *= llamaCppMaskPad
	maskElem := int64(4)
	if flash {
		maskElem = 2
	}
	mask, ok := mul(nKV, rows, maskElem)
	if !ok {
		return 0, errOverflow("llama.cpp compute buffer")
	}
	hidden, _ := mul(lm.Hidden, ub, 4)
	var peak int64
	if layers {
		attn := 3 * hidden
		if !flash {
			kq, ok := mul(nKV, ub, lm.Heads, 4)
			if !ok {
				return 0, errOverflow("llama.cpp compute buffer")
			}
			attn, ok = checked.Add(attn, kq)
			if !ok {
				return 0, errOverflow("llama.cpp compute buffer")
			}
		}
		ffDim := lm.Intermediate
		if lm.MoE.Experts > 0 && lm.MoE.Intermediate > 0 {
			ffDim = lm.MoE.Intermediate * max(lm.MoE.Active, 1)
		}
		ff, ok := mul(ffDim, ub, 4)
		if !ok {
			return 0, errOverflow("llama.cpp compute buffer")
		}
		peak = max(attn, hidden+2*ff)
	}
	if output {
		logits, ok := mul(lm.Vocab, ub, 4)
		if !ok {
			return 0, errOverflow("llama.cpp compute buffer")
		}
		peak = max(peak, hidden+logits)
	}
	total, ok := checked.Add(mask, peak)
	if !ok {
		return 0, errOverflow("llama.cpp compute buffer")
	}
	return gpumem.Bytes(total), nil
}

// estimateLlamaCpp is Estimate for Runtime LlamaCpp: the GPU model buffer
// in Weights, the KV buffer in KVCache, the compute buffer in Workspace,
// the CUDA context in Context, and the CPU model and KV buffers in Host.
// ggml's buffers are allocated once at their full size, so there is no
// fragmentation and Allocated is the peak of every phase.
func estimateLlamaCpp(j *Job) (Breakdown, error) {
	r, err := llamaCppBuffers(j)
	if err != nil {
		return Breakdown{}, err
	}
	var b Breakdown
	b.Weights, b.KVCache, b.Workspace, b.Context = r.GPUWeights, r.KV, r.Compute, r.Context
	b.Host = gpumem.Bytes(checked.SatSum(int64(r.HostWeights), int64(r.HostKV)))
	b.HostNode = b.Host
	b.Phase = Forward
	if j.Mode == Generation {
		b.Phase = Decode
	}
	b.Phases[b.Phase] = b.Allocated()
	return b, nil
}
