// run.mjs loads a GGUF file in the llama.cpp that node-llama-cpp bundles,
// on the CPU, creates one context and prints llama.cpp's own log (its
// buffer sizes among it), then the llama.cpp release it ran.
//
//	node run.mjs MODEL.gguf N_CTX N_UBATCH on|off mmap|no-mmap [swa|swa-full [SEQUENCES [CACHE_TYPE]]]
//
// The optional sixth argument asks a sliding-window model for llama.cpp's
// full-size SWA cache (swa-full, llama.cpp's --swa-full) or not (swa, the
// default); the seventh is the sequences (llama.cpp's --parallel, 1); the
// eighth the K and V cache type (llama.cpp's -ctk and -ctv: F16 or Q8_0).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [model, ctx, ubatch, fa, mmap, swa = "swa", seqs = "1", cache = "F16"] = process.argv.slice(2);
const llama = await getLlama({
    gpu: false, build: "never", logLevel: LlamaLogLevel.debug,
    logger: (level, msg) => process.stdout.write(msg.endsWith("\n") ? msg : msg + "\n"),
});
const m = await llama.loadModel({modelPath: model, gpuLayers: 0, useMmap: mmap !== "no-mmap"});
const c = await m.createContext({
    contextSize: Number(ctx), batchSize: Number(ubatch), flashAttention: fa === "on", sequences: Number(seqs),
    swaFullCache: swa === "swa-full",
    experimentalKvCacheKeyType: cache, experimentalKvCacheValueType: cache,
});
console.log(`# engine: ggml-org/llama.cpp ${llama.llamaCppRelease.release}, CPU backend`);
await c.dispose();
await m.dispose();
await llama.dispose();
