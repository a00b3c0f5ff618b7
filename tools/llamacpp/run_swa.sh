#!/bin/sh
# run_swa.sh records llama.cpp's KV and compute buffers for sliding-window
# models (gemma2 and gemma3 GGUF files of known shapes) on the CPU into
# testdata/llamacpp/swa (go test ./budget -run TestLlamaCppSWARuns reads
# them), as run.sh does for llama models: node-llama-cpp 3.22.1 installed
# in a temporary directory outside the repository, the GGUF files written
# by tools/llamacpp/mkgguf -arch (zero weights), tools/llamacpp/run.mjs
# over n_ctx, n_ubatch, flash attention, --swa-full and the sequences.
# From the repository root:
#
#	sh tools/llamacpp/run_swa.sh
set -eu
out="$(pwd)/testdata/llamacpp/swa"
. ./tools/llamacpp/setup.sh
mk gemma3-tiny -arch gemma3 -swa 128 -layers 12 -embd 512 -ff 1024 -heads 4 -kv-heads 1 -head-dim 128 -vocab 2048 -ctx 8192 -type f16 -tied
mk gemma2-tiny -arch gemma2 -swa 256 -layers 8 -embd 512 -ff 1024 -heads 8 -kv-heads 2 -head-dim 64 -vocab 2048 -ctx 8192 -type f16 -tied

run() { # model, n_ctx, n_ubatch, fa, swa|swa-full, sequences[, cache type]
	ct=${7:-F16}
	log="$out/$1-c$2-ub$3-fa$4-$5-s$6.log"
	[ "$ct" = F16 ] || log="$out/$1-c$2-ub$3-fa$4-$5-s$6-$ct.log"
	{
		echo "# tool: sh tools/llamacpp/run_swa.sh (node run.mjs $1.gguf $2 $3 $4 mmap $5 $6 $ct), node-llama-cpp $nlc, $(uname -m), $(node --version)"
		echo "# model: $1: go run ./tools/llamacpp/mkgguf $(cat "$work/$1.flags")"
		echo "# job: n_ctx $2, n_ubatch $3, flash_attn $4, $5, sequences $6, cache $ct, every layer on the CPU"
		node run.mjs "$work/$1.gguf" "$2" "$3" "$4" mmap "$5" "$6" "$ct" |
			grep -v -e '^create_tensor' -e '^llama_model_loader: - ' -e '^load_tensors: layer' -e '^init_tokenizer' -e '^load: ' \
				-e '^llama_kv_cache: layer' -e '^llama_graph_n_input_tensors' -e '^llama_kv_cache: - layer'
	} >"$log"
}
run gemma3-tiny 1024 512 off swa 1
run gemma3-tiny 1024 128 off swa 1
run gemma3-tiny 4096 512 on swa 1
run gemma3-tiny 4096 512 off swa-full 1
run gemma3-tiny 2048 256 off swa 2
run gemma3-tiny 300 512 off swa 1
run gemma2-tiny 1024 512 off swa 1
run gemma2-tiny 4096 128 on swa 1
run gemma3-tiny 1024 512 on swa 1 Q8_0
