package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/request"
)

// checkJob refuses flags the model cannot take: --images for a model
// without a vision tower (it would be ignored).
func checkJob(j budget.Job) error {
	if s := j.Model.Spec(); j.Images > 0 && s.Vision == nil {
		return fmt.Errorf("%w: --images %d: %s has no vision tower (a multimodal model such as llava-1.5-7b takes images)", request.ErrUsage, j.Images, request.Describe(j))
	}
	return nil
}

// tokensPerSequence is what a sequence of j holds at its longest: the
// prompt and the generated tokens.
func tokensPerSequence(j budget.Job) int64 { return int64(j.SeqLen) + int64(j.Generate) }

// contextWarning returns a warning when j's sequences hold more tokens
// than its model's max_position_embeddings, or "". what names the flags
// that set them. The estimate stands (memory does not depend on the
// model having been trained at that length); the warning says the model
// was not configured for it, or, with a learned position table (GPT-2,
// OPT, BERT), cannot take it.
func contextWarning(j budget.Job, what string) string {
	lm := j.Model.Spec().LM()
	n := tokensPerSequence(j)
	if lm.MaxPositions <= 0 || n <= lm.MaxPositions {
		return ""
	}
	msg := fmt.Sprintf("warning: %d tokens per sequence (%s) exceed the %d positions %s was configured for (max_position_embeddings)",
		n, what, lm.MaxPositions, request.Describe(j))
	if lm.Positions > 0 {
		return msg + fmt.Sprintf("; its learned position table has %d rows, so the model cannot take them", lm.Positions)
	}
	return msg + "; the estimate is for the tokens given, but the model may not work at that length without RoPE scaling"
}

// seqFlags names the flags that set j's tokens per sequence.
func seqFlags(j budget.Job) string {
	if j.Generate > 0 {
		return fmt.Sprintf("--seq %d + --generate %d", j.SeqLen, j.Generate)
	}
	return fmt.Sprintf("--seq %d", j.SeqLen)
}

func runEstimate(args []string, _ io.Reader, out, errOut io.Writer) error {
	fs := newFlags("estimate", out)
	var jf request.Flags
	jf.Register(fs)
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	headroomFlag := fs.String("headroom", "", "memory to leave unused when checking the fit: a fraction of the free memory (0.05) or a size (2GiB); 0 for none; default 5%, as plan")
	var cf chartFlags
	cf.register(fs)
	var pf pipelineFlags
	pf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(fs); err != nil {
		return err
	}
	if pf.given() || pf.usedWithout(fs) != "" {
		return estimatePipelineFlags(fs, &pf, &jf, &cf, *headroomFlag, *asJSON, out)
	}
	if err := jf.CheckGiven(fs); err != nil {
		return err
	}
	if jf.LoadOnly && cf.file != "" {
		return fmt.Errorf("%w: --chart %s: it draws memory against the batch or sequence, which a load-only job does not run", request.ErrUsage, cf.file)
	}
	var lim budget.Limits
	if err := parseHeadroom(*headroomFlag, &lim); err != nil {
		return err
	}
	j, dev, err := jf.Job()
	if err != nil {
		return err
	}
	if err := checkJob(j); err != nil {
		return err
	}
	if *headroomFlag != "" && dev.Capacity == 0 {
		return fmt.Errorf("%w: --headroom %s: it applies to the fit on --gpu or --memory (give one, or leave --headroom out)", request.ErrUsage, *headroomFlag)
	}
	hr := request.HeadroomOf(&lim, dev.Free())
	e, err := request.EvaluateWith(j, dev, hr)
	if err != nil {
		return err
	}
	if w := contextWarning(j, seqFlags(j)); w != "" {
		fmt.Fprintf(errOut, "gpumem estimate: %s\n", w)
	}
	if err := cf.write(j, dev, "as given", hr); err != nil {
		return err
	}
	if *asJSON {
		if err := writeEstimation(out, e); err != nil {
			return err
		}
		return e.Verdict()
	}
	need, fits, shortfall := e.Need, e.Fits, e.Shortfall
	total, trainable := j.Model.Params()
	if j.Mode == budget.Load {
		fmt.Fprintf(out, "%s%s: load only, %s precision", request.Describe(j), headNote(j.Model.Spec()), j.Precision)
	} else if j.Runtime == budget.LlamaCpp {
		fmt.Fprintf(out, "%s%s: llama.cpp inference", request.Describe(j), headNote(j.Model.Spec()))
	} else if j.Runtime == budget.VLLM {
		fmt.Fprintf(out, "%s%s: vLLM serving, %s precision", request.Describe(j), headNote(j.Model.Spec()), j.Precision)
	} else if j.Runtime == budget.SGLang {
		fmt.Fprintf(out, "%s%s: SGLang serving, %s precision", request.Describe(j), headNote(j.Model.Spec()), j.Precision)
	} else {
		fmt.Fprintf(out, "%s%s: %s, %s, %s precision", request.Describe(j), headNote(j.Model.Spec()), j.Mode, batchNote(j), j.Precision)
	}
	if j.Optimizer != nil {
		fmt.Fprintf(out, ", %s", j.Optimizer)
		if j.OptimizerInBackward {
			fmt.Fprint(out, " stepped in backward")
		}
	}
	switch {
	case j.Mode == budget.Training && j.Gradients == budget.NoStep:
		fmt.Fprint(out, ", no optimizer step")
	case j.Mode == budget.Training && j.Gradients == budget.InputGradients:
		fmt.Fprint(out, ", frozen: gradients to the input only")
	}
	if j.Loss.Kind != model.FullLoss {
		fmt.Fprintf(out, ", %s loss", j.Loss)
	}
	if j.LogitsToKeep > 0 {
		if j.LogitsToKeep == 1 {
			fmt.Fprint(out, ", logits of the last position")
		} else {
			fmt.Fprintf(out, ", logits of the last %d positions", j.LogitsToKeep)
		}
	}
	if j.KeepLogits {
		fmt.Fprint(out, ", logits held to the step")
	}
	if j.EvalLoss {
		fmt.Fprint(out, ", evaluation loss")
	}
	if j.Backend == model.CPU {
		fmt.Fprint(out, ", PyTorch's CPU kernels (only the allocated peak applies: the workspace, fragmentation, context and device levels are CUDA's)")
	}
	if j.Mode == budget.Load {
		fmt.Fprintf(out, "\nparameters %s\n", gpumem.Thousands(total))
	} else {
		fmt.Fprintf(out, "\nparameters %s, trainable %s\n", gpumem.Thousands(total), gpumem.Thousands(trainable))
	}
	if j.Parallel.GPUs() > 1 {
		fmt.Fprintf(out, "layout %s over %d GPUs; figures for one GPU", j.Parallel.Describe(), j.Parallel.GPUs())
		if j.Parallel.PipelineParallel > 1 {
			fmt.Fprintf(out, " (pipeline stage %d, the most loaded)", need.Stage)
		}
		fmt.Fprintln(out)
	}
	if need.Host > 0 {
		fmt.Fprintf(out, "host memory: %s per GPU, %s per node\n", need.Host.String(), need.HostNode.String())
	}
	fmt.Fprintln(out)
	row := func(name string, b gpumem.Bytes) { fmt.Fprintf(out, "  %-38s %12s\n", name, b.String()) }
	if l := e.LlamaCpp; l != nil {
		fmt.Fprintf(out, "llama.cpp: offloaded %d/%d layers to GPU, %d KV cells, n_ubatch %d, flash attention %v\n",
			l.Layers, l.Slots, l.Cells, l.UBatch, j.LlamaCpp.FlashAttention)
		if l.SWACells > 0 {
			fmt.Fprintf(out, "  sliding-window cache: %d of %d layers keep %d cells (--swa-full %v)\n",
				l.SWALayers, l.Slots-1, l.SWACells, j.LlamaCpp.SWAFull)
		}
		mib := func(b gpumem.Bytes) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
		lrow := func(name string, b gpumem.Bytes) { fmt.Fprintf(out, "  %-38s %14s\n", name, mib(b)) }
		lrow("GPU model buffer", l.GPUWeights)
		lrow("GPU KV buffer", l.KV)
		lrow("GPU compute buffer", l.Compute)
		lrow("CUDA context", l.Context)
		if l.GPUs > 1 {
			fmt.Fprintf(out, "  over %d GPUs, --split-mode %s (the buffers above are their sums; the estimate below is GPU %d's):\n",
				l.GPUs, j.LlamaCpp.SplitMode, l.Busiest)
			for i := range l.GPUs {
				d := l.Devices[i]
				tail := ""
				if d.Output {
					tail = " + output"
				}
				fmt.Fprintf(out, "    CUDA%d (%d layers%s): model %s, KV %s, compute %s\n", i, d.Layers, tail, mib(d.Weights), mib(d.KV), mib(d.Compute))
			}
		}
		lrow("host model buffer (token_embd ...)", l.HostWeights)
		if l.HostMapped != l.HostWeights {
			lrow("CPU_Mapped (mmap: the file span)", l.HostMapped)
		}
		if l.HostKV > 0 {
			lrow("host KV buffer", l.HostKV)
		}
		fmt.Fprintln(out)
	}
	if v := e.VLLM; v != nil {
		gib := func(b gpumem.Bytes) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
		vrow := func(name, v string) { fmt.Fprintf(out, "  %-38s %14s\n", name, v) }
		fmt.Fprintf(out, "vLLM (per GPU")
		if tp := j.VLLM.TensorParallel; tp > 1 {
			fmt.Fprintf(out, " of %d, tensor parallel", tp)
		}
		fmt.Fprintln(out, "):")
		vrow("requested (utilization × total)", gib(v.Requested))
		vrow("model weights", gib(v.Weights))
		vrow("profile run peak activation", gib(v.Activations))
		if v.NonTorch > 0 {
			vrow("non-torch memory", gib(v.NonTorch))
		}
		if v.CUDAGraphs > 0 {
			vrow("Estimated CUDA graph memory", gib(v.CUDAGraphs))
		}
		vrow("Available KV cache memory", gib(v.KVMemory))
		vrow("# GPU blocks", gpumem.Thousands(v.Blocks))
		vrow("GPU KV cache size (tokens)", gpumem.Thousands(v.Tokens))
		fmt.Fprintf(out, "  Maximum concurrency for %s tokens per request: %.2fx\n", gpumem.Thousands(int64(v.MaxModelLen)), v.Concurrency)
		fmt.Fprintf(out, "  least gpu_memory_utilization for one request of %s tokens: %.3f\n", gpumem.Thousands(int64(v.MaxModelLen)), v.MinUtilization)
		if v.CUDAGraphs > 0 {
			fmt.Fprintf(out, "  the current --gpu-memory-utilization=%.4f is equivalent to --gpu-memory-utilization=%.4f without CUDA graph memory profiling; %.4f keeps the cache of earlier releases\n",
				v.EquivalentUtilization+(v.CompensatingUtilization-v.EquivalentUtilization)/2, v.EquivalentUtilization, v.CompensatingUtilization)
		}
		if v.Refused != "" {
			fmt.Fprintf(out, "vLLM would refuse to start: ValueError: %s\n", v.Refused)
		}
		fmt.Fprintln(out)
	}
	if e.SGLang != nil {
		writeSGLang(out, j, e.SGLang)
	}
	for _, c := range need.Components() {
		if c.Bytes != 0 {
			row(c.Name, c.Bytes)
		}
	}
	fmt.Fprintln(out)
	if j.Backend == model.CPU {
		// budget.Job.Backend: the CPU's live tensors are the allocated
		// level less the cuBLAS workspace; the other levels are CUDA's.
		row("allocated peak (CPU tensors)", need.Allocated()-need.Workspace)
	} else {
		row("allocated peak (max_memory_allocated)", need.Allocated())
		row("reserved peak (max_memory_reserved)", need.Reserved())
		row("device peak (nvidia-smi)", need.Device())
	}
	if need.Paged != 0 {
		// bitsandbytes' paged optimizer state: on the device once stepped,
		// but the driver pages it to the host under pressure.
		row("required (paged state can page out)", need.Required())
	}
	fmt.Fprintf(out, "peak phase: %s\n", need.Phase)
	if j.Backend != model.CPU {
		fmt.Fprintf(out, "CUDA context for %s\n", contextNote(j))
	}
	if dev.Capacity > 0 {
		if fits {
			fmt.Fprintf(out, "fits on %s with %s: %s free, %s left (%.0f%% used)\n", request.Clean(dev.Name), e.Headroom, dev.Free().String(),
				(dev.Free() - need.Required()).String(), 100*budget.Utilization(need, dev))
		} else if e.VLLM != nil {
			fmt.Fprintf(out, "does NOT fit on %s: one request of max_model_len %s tokens needs %s of KV cache, %s more than vLLM has\n",
				request.Clean(dev.Name), gpumem.Thousands(int64(e.VLLM.MaxModelLen)), e.VLLM.Needed.String(), shortfall.String())
		} else {
			d := need.Dominant()
			fmt.Fprintf(out, "does NOT fit on %s with %s: %s free, %s short; the largest component is %s (%s)\n", request.Clean(dev.Name),
				e.Headroom, dev.Free().String(), shortfall.String(), d.Name, d.Bytes.String())
		}
	}
	return e.Verdict()
}

// contextNote says what the CUDA context was sized for: the GPU's
// compute capability, the CUDA version (assumed 12 without --cuda) and
// the module loading.
func contextNote(j budget.Job) string {
	gpu := "a GPU of unknown generation"
	if c := j.Device.Compute; !c.IsZero() {
		gpu = "compute capability " + c.String()
	}
	cuda := "CUDA 12 (assumed; --cuda)"
	if v := j.Overhead.CUDA; !v.IsZero() {
		cuda = "CUDA " + v.String()
	}
	loading := "eager"
	if j.Overhead.Loading.Lazy(j.Overhead.CUDA) {
		loading = "lazy"
	}
	return fmt.Sprintf("%s, %s, %s module loading", gpu, cuda, loading)
}

// writeJSON writes the --json form of e (bytes as integers), the same
// bytes for gpumem estimate --json and gpumem serve.
func writeEstimation(out io.Writer, e request.Result) error {
	r := map[string]any{
		"allocated_peak": int64(e.Need.Allocated()), "reserved_peak": int64(e.Need.Reserved()),
		"device_peak": int64(e.Need.Device()), "phase": e.Need.Phase.String(), "components": components(e.Need),
	}
	if e.Need.Paged != 0 {
		// A paged optimizer: what the fit is checked against.
		r["required_peak"] = int64(e.Need.Required())
	}
	if e.Need.Host > 0 {
		// Offloaded state and activations, in host memory.
		r["host"], r["host_per_node"] = int64(e.Need.Host), int64(e.Need.HostNode)
	}
	if l := e.LlamaCpp; l != nil {
		r["llamacpp"] = map[string]any{
			"gpu_weights": int64(l.GPUWeights), "host_weights": int64(l.HostWeights), "kv": int64(l.KV),
			"host_kv": int64(l.HostKV), "compute": int64(l.Compute), "context": int64(l.Context),
			"layers_offloaded": l.Layers, "layers": l.Slots, "output_on_gpu": l.OutputOnGPU,
			"kv_cells": l.Cells, "n_ubatch": l.UBatch, "host_mapped": int64(l.HostMapped),
		}
		if l.SWACells > 0 {
			r["llamacpp"].(map[string]any)["swa_kv_cells"] = l.SWACells
			r["llamacpp"].(map[string]any)["swa_layers"] = l.SWALayers
		}
		if l.GPUs > 1 {
			devs := make([]map[string]any, l.GPUs)
			for i := range devs {
				d := l.Devices[i]
				devs[i] = map[string]any{"weights": int64(d.Weights), "kv": int64(d.KV), "compute": int64(d.Compute),
					"layers": d.Layers, "output": d.Output}
			}
			r["llamacpp"].(map[string]any)["devices"] = devs
			r["llamacpp"].(map[string]any)["busiest"] = l.Busiest
		}
	}
	if v := e.VLLM; v != nil {
		r["vllm"] = map[string]any{
			"requested": int64(v.Requested), "weights": int64(v.Weights), "activations": int64(v.Activations),
			"non_torch": int64(v.NonTorch), "kv_cache_memory": int64(v.KVMemory), "page_bytes": int64(v.PageBytes),
			"gpu_blocks": v.Blocks, "kv_tokens": v.Tokens, "max_model_len": v.MaxModelLen,
			"max_concurrency": v.Concurrency, "min_utilization": v.MinUtilization, "refused": v.Refused,
			"cuda_graph_memory": int64(v.CUDAGraphs), "equivalent_utilization": v.EquivalentUtilization,
			"compensating_utilization": v.CompensatingUtilization,
		}
	}
	if sg := e.SGLang; sg != nil {
		r["sglang"] = sglangJSON(sg)
	}
	return writeFitJSON(out, r, e.Device, e.Headroom, e.Fits, e.Shortfall)
}

// batchNote describes a job's batch: images of a side for a vision
// backbone, else sequences of tokens.
func batchNote(j budget.Job) string {
	if s := j.Model.Spec(); s.Backbone != nil {
		return fmt.Sprintf("batch %d × %d×%d px images", j.Batch, s.Image.Size, s.Image.Size)
	}
	return fmt.Sprintf("batch %d × %d tokens", j.Batch, j.SeqLen)
}

// headNote describes a classification or question-answering head for
// the estimate's first line: " (seq-cls, 2 labels)", " (qa)".
func headNote(s model.Spec) string {
	switch s.Head {
	case model.HeadSeqCls, model.HeadTokenCls, model.HeadImageCls:
		n := s.Labels
		if n == 0 {
			n = 2
		}
		return fmt.Sprintf(" (%s, %d labels)", s.Head, n)
	case model.HeadQA:
		return " (qa)"
	}
	return ""
}

// writeFitJSON adds the fit on dev to the estimate's JSON object r, when
// a device was given (device, free, min_headroom, fits, shortfall), and
// writes r indented.
func writeFitJSON(out io.Writer, r map[string]any, dev gpumem.Device, h request.Headroom, fits bool, shortfall gpumem.Bytes) error {
	if dev.Capacity > 0 {
		r["device"] = dev.Name
		r["free"] = int64(dev.Free())
		r["min_headroom"] = int64(h.Bytes)
		r["fits"] = fits
		r["shortfall"] = int64(shortfall)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
