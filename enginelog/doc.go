// Package enginelog reads the memory figures that serving engines print
// when they load a model — llama.cpp (and Ollama and KoboldCpp, which run
// it), vLLM and SGLang — into [Figure] values, so that they can be
// compared with what gpumem's runtime models predict (budget.LlamaCppBuffers,
// budget.VLLMBuffers): [Compare].
//
// [Parse] reads a log (any prefix before the engine's own text — a
// timestamp, a container name, "ollama  | " — is ignored) line by line and
// returns every figure it recognizes with its line number, the job
// parameters the log states ([Params]: n_ctx, n_ubatch, flash attention,
// cache types, layers offloaded, max_model_len, …) and the engine it
// recognized. Input with no figure at all is an error ([ErrNoFigures]), as
// is a figure whose number cannot be a size.
//
// # Formats and units
//
// llama.cpp prints its ggml backend buffers in MiB, "size / 1024.0 /
// 1024.0" (llama_model_load, llama_kv_cache, llama_context in
// src/llama-*.cpp, ggml-org/llama.cpp): "<dev> buffer size" or "<dev>
// model buffer size" (weights, per device: CUDA0, CPU, CPU_Mapped,
// CUDA_Host), "<dev> KV buffer size", "<dev> compute buffer size", "KV self
// size = X MiB, K (f16): …, V (f16): …" or "llama_kv_cache: size = X MiB
// (N cells, L layers, S seqs)"; releases of 2023 printed the same MiB
// as "MB" ("VRAM used: X MB", "kv self size = X MB", "compute buffer total
// size = X MB", "mem required = X MB"), which are read as MiB. A failed
// allocation, "ggml_backend_cuda_buffer_type_alloc_buffer: allocating X
// MiB on device N", is the size llama.cpp asked for ([AllocFailed]). A
// sliding-window model (llama_kv_cache_iswa, "creating     SWA KV cache,
// size = N cells") prints each of its two caches' buffers and size: they
// are summed into one KV buffer per device and one whole cache
// (Params.SWAKVSize holds the SWA cache's cells).
//
// Ollama's scheduler prints its own estimate before it starts the runner
// (llm/memory.go: "offload to cuda … memory.required.kv=… memory.weights.
// total=… memory.graph.full=…"), in GiB and MiB with one decimal, and its
// own engine prints "model weights", "kv cache" and "compute graph"
// buffers per device; the runner's command line gives --ctx-size,
// --parallel, --batch-size, --n-gpu-layers and --flash-attn.
//
// vLLM prints sizes in GiB, some with the label "GB": "Loading model
// weights took X GB" divides by 2^30 (vllm/worker/model_runner.py,
// float(2**30)), as do "Model loading took X GiB", the profiling summary
// (total_gpu_memory, gpu_memory_utilization, model weights, non-torch
// memory, PyTorch activation peak, the rest for the KV cache), "Available
// KV cache memory: X GiB", and the counts "# GPU blocks: N", "GPU KV cache
// size: N tokens", "Maximum concurrency for L tokens per request: Cx" and
// the refusals ("… maximum number of tokens that can be stored in KV cache
// (N)", "(X GiB KV cache is needed, which is larger than the available KV
// cache memory (Y GiB)").
//
// SGLang prints "KV Cache is allocated. #tokens: N, K size: X GB, V size: Y
// GB", where GB is 2^30 bytes (python/sglang/srt/mem_cache/memory_pool.py,
// "/ GB" with GB = 1 << 30), "max_total_num_tokens=N … available_gpu_mem=X
// GB", the CUDA graph capture's "mem usage=X GB", the request limit
// "maximum allowed length (N tokens)", and the free memory around the
// weights' load: "Load weight begin. avail mem=X GB", "Load weight end. …
// avail mem=X GB, mem usage=Y GB".
//
// # Quantization
//
// vLLM and SGLang print the weights' quantization method and the cache's
// dtype in their engine configuration ("quantization=compressed-tensors,
// … kv_cache_dtype=fp8", SGLang's ServerArgs) and arguments ("'quantization':
// 'fp8'", --kv-cache-dtype), vLLM the method it switches to ("The model is
// convertible to gptq_marlin during runtime") and the linear method of a
// compressed-tensors checkpoint ("Selected CutlassFP8ScaledMMLinearKernel
// for CompressedTensorsW8A8Fp8"); Parse reads them into Params.Quantization,
// QuantScheme and KVCacheDType. Compare quantizes the model's weights as
// the log states (fp8, compressed-tensors W8A8 fp8 or int8, gptq and
// gptq_marlin, awq and awq_marlin, in gpumem's layouts of vLLM's layers)
// and types the cache as it states; a method budget does not model
// (bitsandbytes, gguf, aqlm, …) skips the weights with the method named,
// never estimating them in 16 bits, and so does a quantized model whose
// log states no method. The model's name is read only to name the scheme
// of a compressed-tensors checkpoint whose log states the method but
// prints no kernel line ("-FP8-dynamic", "quantized.w8a8"); a name alone
// ("-AWQ" with no method in the log) is never read.
//
// # The model's shape
//
// llama.cpp prints the model's hyperparameters while it loads it:
// "print_info: n_layer = 32" (llm_load_print_meta in 2024, and
// llama_model_load_internal in 2023), and before them the GGUF's own
// metadata ("llama_model_loader: - kv 14: llama.block_count u32 = 80").
// Parse reads both into [Hparams] (Log.Hparams), applying llama.cpp's
// defaults for what a GGUF leaves out (the head size n_embd / n_head, one
// KV head per head, n_vocab the token list's length;
// llama_model::load_hparams, src/llama-model.cpp). [Hparams.Spec] builds a
// llama-style decoder from them and refuses, rather than guesses, a shape
// the printed values do not decide (a sliding window, DeepSeek's latent
// cache, a recurrent state, per-layer values).
//
// # The corpus and the comparison
//
// [ReadCorpus] reads a folder of logs (testdata/enginelogs: one verbatim
// excerpt of a public GitHub thread, or of a repository's file at a
// commit, per file, with index.jsonl naming its
// source, the job the thread states, the catalog model or the lines of
// the thread that print its shape, and misses.jsonl). [Compare] compares
// every figure whose job it can state with budget.LlamaCppBuffers and
// budget.VLLMBuffers and returns a [Row] per figure, the logs skipped by
// reason, and [Stats] by figure kind; [Result.Unlisted] is the ratchet on
// misses.jsonl. The package's TestEngineLogGate holds the runtime models to
// it, and gpumem accuracy reports it as its own source.
package enginelog
