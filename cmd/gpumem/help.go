package main

// The help of each command: "gpumem COMMAND -h" prints it with the flags.

func inspectHelp() help {
	return help{
		usage: "gpumem inspect --model NAME | --config config.json | --safetensors FILE | --gguf FILE [flags]",
		about: `Read a model (the embedded catalog, a Hugging Face config.json, or the header of a
safetensors or GGUF file) and print its geometry, exact parameter count and the
memory of its weights by dtype and part; with --optimizer the state it keeps,
with --batch and --seq the activations of one training step.`,
		examples: []string{
			"gpumem inspect --model llama-2-7b",
			"gpumem inspect --config ./config.json --json",
			"gpumem inspect --safetensors model.safetensors.index.json   # a sharded checkpoint: headers only",
			"gpumem inspect --model llama-2-7b --optimizer adamw --batch 1 --seq 1024",
			"gpumem inspect --model list                                 # the catalog's names",
		},
		exit: "0 done, 2 bad flags or an unreadable model file.",
	}
}

func estimateHelp() help {
	return help{
		usage: "gpumem estimate --model NAME --train|--infer|--load [--batch B --seq S ...] [--gpu NAME | --memory SIZE] [flags]",
		about: `Estimate the peak GPU memory of one training or inference job, component by
component (weights, gradients, optimizer state, activations, logits, KV cache,
fragmentation, CUDA context), as allocated, reserved and device (nvidia-smi)
memory, and the phase that sets the peak. With --gpu or --memory, say whether it
fits and by how much. --chart draws the peak by component against the batch
or the sequence length. Over several GPUs (--gpus per node, --nodes) with
--zero or --fsdp, --tp/--sp, --pp/--vpp, --cp, --ep and --offload optimizer,
the figures are one GPU's, of the most loaded pipeline stage.

The CUDA context is sized for the GPU's generation (--gpu), the CUDA version
of the PyTorch build (--cuda, default a current CUDA 12) and module loading
(--lazy-loading, default lazy from CUDA 11.7, eager before): 426 MiB for a
current GPU, 1341 MiB for a V100 under CUDA 11.2, which loads every kernel.

A job fits when its device peak leaves 5% of the free memory unused (the
headroom plan and the chart use too; --headroom changes it, --headroom 0
for none). --quant stores the base linear weights quantized (int8, nf4, fp4,
gptq, awq, fp8; with --train only under adapters, --lora-rank), --kv-dtype and
--kv-block set a generating job's KV cache, and --load instead of --train or
--infer asks whether the model loads at all (weights, quantized kernels'
scratch, CUDA context). A flag that does nothing for the mode (--optimizer, --grad-accum,
--checkpointing with --infer; --generate with --train) is an error; more
tokens per sequence than the model's max_position_embeddings is a warning on
standard error.

--optimizer-impl chooses torch.optim's foreach, for-loop or fused step;
--momentum and --nesterov set SGD's momentum; --optimizer-in-backward steps
each parameter inside backward (torchtune's optimizer_in_bwd); --optimizer
none runs backward without a step; --frozen differentiates to the input only;
--offload-activations is torchtune's activation offloading (host memory is
reported).`,
		examples: []string{
			"gpumem estimate --model llama-3-8b --train --batch 4 --seq 4096 --attention flash \\",
			"    --checkpointing full --optimizer adamw8bit --precision bf16 --gpu h100",
			"gpumem estimate --model llama-2-7b --train --qlora --optimizer paged_adamw_8bit --gpu rtx4090",
			"gpumem estimate --model llama-3.1-8b --train --precision bf16 --optimizer paged_adamw_8bit \\",
			"    --optimizer-in-backward --checkpointing full --gpu rtx4090   # torchtune 8B_full_single_device",
			"gpumem estimate --model llama-2-7b --infer --generate 512 --batch 8 --gpu a100-80gb --json",
			"gpumem estimate --model llama-3.1-8b --infer --quant awq --generate 512 --kv-dtype fp8 --kv-block 16 --gpu l4",
			"gpumem estimate --model llama-3.1-8b --load --quant gptq --gpu t4   # does it load?",
			"gpumem estimate --model llama-3-8b --train --gpus 8 --zero 3 --gpu h100   # per GPU",
			"gpumem estimate --model llama-3-70b --train --gpus 8 --nodes 2 --tp 8 --sp --pp 2 --grad-accum 8 \\",
			"    --attention flash --checkpointing selective --gpu h100",
			"gpumem estimate --model llama-3-8b --train --gpu h100 --chart mem.png --chart-x seq",
			"gpumem estimate --model llama-3-8b --train --gpu h100 --headroom 0   # fit in the whole free memory",
			"gpumem estimate --model llama-3-8b --train --batch 8 --seq 8192 --attention flash --loss liger --gpu h100",
			"gpumem estimate --model llama-3-8b --infer --batch 16 --seq 8192 --logits-to-keep 1 --gpu h100",
			"gpumem estimate --model bert-large --train --seq 512 --gpu v100 --cuda 11.2   # an eager CUDA 11 context",
			"gpumem estimate --pipeline sdxl --train --lora-rank 4 --checkpointing full --gpu rtx4090   # diffusers DreamBooth LoRA",
			"gpumem estimate --pipeline sd-1.5 --infer --batch 4 --vae-slicing --cpu-offload --gpu t4",
		},
		exit: "0 fits with the headroom (or no GPU named), 1 does not fit, 2 bad flags or input.",
	}
}

func planHelp() help {
	return help{
		usage: "gpumem plan --model NAME --train|--infer --gpu NAME | --memory SIZE [--target-batch N] [--allow CHANGES] [flags]",
		about: `Choose what to change so that a job fits: the largest micro-batch (and
sequence length with --max-seq), then, cheapest first, the changes --allow
permits (attention kernel, checkpointing, optimizer, precision, offload,
LoRA/QLoRA). Print the plan and the ladder of what each change buys; when
nothing fits, the ladder and what else to allow. With --max-seq the changes
are made for the longest sequence (--maximize seq): checkpointing is taken if
it lengthens the sequence even when the job fits without it, and the ladder
gives each rung's longest sequence; --maximize batch does the same for the
micro-batch, --maximize none makes only the changes the job as given needs.

With --gpus above 1 (or --nodes) and no layout flag, choose the layout too,
least communication first: data parallel, ZeRO-1, 2, 3 (or FSDP with --fsdp),
tensor parallel within a node, pipeline stages across nodes; the --allow
changes come only after no layout fits without them. --deepspeed,
--accelerate, --megatron and --hf-args print the plan as each engine takes it.

The plan leaves 5% of the free memory unused (--headroom), the headroom
estimate's verdict and the chart use, and says so. Training-only flags and
--allow changes (optimizers, checkpointing, optimizer offload, a target batch,
--deepspeed) are errors with --infer. A plan with more tokens per sequence
than the model's max_position_embeddings is a warning on standard error,
naming the --max-seq that stays within it.`,
		examples: []string{
			"gpumem plan --model llava-1.5-7b --train --batch 4 --images 1 --attention flash --gpu \"rtx 3090\" \\",
			"    --target-batch 32 --allow adamw8bit,bf16,offload,lora",
			"gpumem plan --model qwen2.5-0.5b --infer --memory 24GiB --max-seq 131072 --json",
			"gpumem plan --model llama-3.1-8b --train --qlora --lora-rank 16 --gpu a100-40gb --max-seq 32768",
			"gpumem plan --model llama-3-8b --train --gpus 8 --zero 3 --gpu h100 --target-batch 256 \\",
			"    --deepspeed ds.json --hf-args",
			"gpumem plan --model llama-3-8b --train --gpu h100 --allow full,adamw8bit,bf16 --chart plan.png",
			"gpumem plan --model llama-3-70b --train --precision bf16-master --gpus 8 --gpu h100 --attention flash \\",
			"    --target-batch 64 --allow full,offload-optimizer --deepspeed ds.json",
			"gpumem plan --model llama-2-7b --train --gpus 8 --fsdp full_shard --gpu a100-40gb --accelerate fsdp.yaml",
		},
		exit: "0 a plan fits, 1 nothing fits (the ladder and hints are printed), 2 bad flags or input.",
	}
}

func oomHelp() help {
	return help{
		usage: "gpumem oom [--json] [FILE | -]",
		about: `Read an out-of-memory message, or a whole log that contains one (PyTorch of
every era, TensorFlow, JAX, ...), from FILE or standard input, and diagnose
it: what was requested, what was free, allocated and reserved, the cause
(fragmentation, other processes, a cap, plain exhaustion) and what to change.`,
		examples: []string{
			"gpumem oom train.log",
			"python train.py 2>&1 | tail -50 | gpumem oom",
			"gpumem oom --json < train.log",
		},
		exit: "0 diagnosed, 1 no out-of-memory message in the input, 2 bad flags or an unreadable file.",
		args: true,
	}
}

func leakHelp() help {
	return help{
		usage: "gpumem leak [--capacity SIZE | --gpu NAME] [--unit UNIT] [--run N] [--json] FILE | -",
		about: `Read a memory log (training logs that print memory, nvidia-smi CSV, torch
memory_stats dumps, a PyTorch memory snapshot as JSON, memory figures written
in prose) and tell whether memory grows: its shape (flat, warm-up, step
change, linear or accelerating leak, sawtooth), the growth per step, and the
step at which it will run out of memory. A log of 2 to 4 samples is described
without a verdict; a snapshot names the frames holding the growth.`,
		examples: []string{
			"gpumem leak --gpu rtx4090 train.log",
			"python -c \"import json, pickle, sys; json.dump(pickle.load(open(sys.argv[1], 'rb')), sys.stdout)\" snapshot.pickle | gpumem leak -",
			"nvidia-smi --query-gpu=timestamp,memory.used --format=csv -l 10 > mem.csv; gpumem leak --capacity 24GiB mem.csv",
			"gpumem leak --capacity 80GiB --json - < train.log",
		},
		exit: "0 analysed (a leak is a finding, not an error), 1 no memory figure in the input, 2 bad flags or a log it cannot read.",
		args: true,
	}
}

func devicesHelp() help {
	return help{
		usage: "gpumem devices [--json]",
		about: `List the GPU catalog: each device's name as nvidia-smi prints it and the memory
the driver reports to a process, the capacity --gpu checks a job against.`,
		examples: []string{
			"gpumem devices",
			"gpumem devices --json | jq '.devices[] | select(.capacity > 40e9) | .name'",
		},
		exit: "0 done, 2 bad flags.",
	}
}

func accuracyHelp() help {
	return help{
		usage: "gpumem accuracy [--data DIR] [--by family|gpu|id] [--json] [--chart FILE.png]",
		about: `Compare gpumem's estimates with GPU memory that was measured: the rows
tools/calibrate recorded on our GPUs (DIR/measured/*.jsonl) and the published
figures whose job is stated (DIR/published/jobs.jsonl with peaks.jsonl). Each
is estimated at the level it measured (allocated, reserved or device); the
table gives, per group, the median and worst absolute relative error, the
median signed error and the share under-estimated. The gate: no allocated
estimate more than 5% below its measurement, each measured level's median
within 10%, every measured OOM predicted not to fit. Serving-engine load logs
(DIR/enginelogs: llama.cpp, Ollama, vLLM, SGLang) are their own source: each
figure (KV cache, buffers, weights, layers offloaded, vLLM blocks) against
the llama.cpp or vLLM runtime model, by figure kind, and the gate misses on a
figure outside its tolerance that DIR/enginelogs/misses.jsonl does not list.
Run it from the repository root (DIR defaults to testdata).`,
		examples: []string{
			"gpumem accuracy",
			"gpumem accuracy --by gpu --chart accuracy.png",
			"gpumem accuracy --by id --json | jq '.cases[] | select(.error < -0.05)'",
		},
		exit: "0 the gate is met, 1 it is missed, 2 bad flags or unreadable data.",
	}
}

func calibrateHelp() help {
	return help{
		usage: "gpumem calibrate [--out FILE] [--json] ROWS.jsonl...",
		about: `Fit the memory the estimate adds beyond live tensors to rows measured on your
own GPUs by tools/calibrate (testdata/measured/README.md has the schema): the
caching allocator's fragmentation (from the reserved peaks) and the CUDA
context with library memory outside PyTorch (from the device peaks), as
budget.Calibrate fits them. Rows whose status is not ok are skipped. The
profile is written to FILE as JSON; apply it with estimate --profile FILE or
plan --profile FILE. The report gives, per level, the number of rows n and
the median and worst relative error of the estimates before (the defaults)
and after (the profile).`,
		examples: []string{
			"gpumem calibrate --out h100.json testdata/measured/nvidia-h100-80gb-hbm3-2026-11-26.jsonl",
			"gpumem estimate --model llama-3-8b --train --batch 4 --seq 2048 --gpu h100 --profile h100.json",
		},
		exit: "0 the profile was written, 2 bad flags, unreadable rows (the file, line and field are named) or rows that cannot be fitted.",
		args: true,
	}
}

func serveHelp() help {
	return help{
		usage: "gpumem serve [--addr HOST:PORT] [--max-body SIZE] [--max-inflight N] [--json]",
		about: `Serve estimate, plan, oom and leak (POST /v1/estimate, /v1/pipeline, /v1/plan, /v1/oom,
/v1/leak) and the catalogs (GET /v1/models, /v1/devices) as an HTTP JSON
service, for schedulers not written in Go. The replies are the --json output
of the commands; the requests and status codes are in cmd/gpumem/README.md.
The service has no authentication: keep it on loopback or behind a proxy.
SIGINT or SIGTERM stops it gracefully.`,
		examples: []string{
			"gpumem serve --addr 127.0.0.1:8080",
			"gpumem serve --addr 127.0.0.1:0 --json   # prints the address it listens on as JSON",
			"curl -s localhost:8080/v1/estimate -d '{\"model\":\"llama-3-8b\",\"mode\":\"train\",\"gpu\":\"h100\"}'",
		},
		exit: "0 stopped by a signal, 2 bad flags or an address it cannot listen on.",
	}
}
