#!/bin/sh
# run.sh records llama.cpp's CPU buffer sizes for GGUF files of known
# shapes into testdata/llamacpp/cpu (go test ./budget -run TestLlamaCppCPURuns
# reads them). It needs Go and Node.js 20 or later; it installs
# node-llama-cpp (which bundles prebuilt llama.cpp builds, taken from the
# npm package @node-llama-cpp/linux-x64) in a temporary directory outside
# the repository, writes the GGUF files there with tools/llamacpp/mkgguf
# (valid headers and llama shapes, zero weights) and runs
# tools/llamacpp/run.mjs over a grid of n_ctx, n_ubatch, flash attention
# and mmap settings. From the repository root:
#
#	sh tools/llamacpp/run.sh
set -eu
out="$(pwd)/testdata/llamacpp/cpu"
. ./tools/llamacpp/setup.sh
mk tiny-f16 -layers 4 -embd 512 -ff 1024 -heads 8 -kv-heads 2 -vocab 2048 -ctx 8192 -type f16
mk small-q8 -layers 6 -embd 768 -ff 2048 -heads 12 -kv-heads 4 -vocab 4096 -ctx 8192 -type q8_0

run() { # model, n_ctx, n_ubatch, fa, mmap
	log="$out/$1-c$2-ub$3-fa$4-$5.log"
	{
		echo "# tool: sh tools/llamacpp/run.sh (node run.mjs $1.gguf $2 $3 $4 $5), node-llama-cpp $nlc, $(uname -m), $(node --version)"
		echo "# model: $1: go run ./tools/llamacpp/mkgguf $(cat "$work/$1.flags")"
		echo "# job: n_ctx $2, n_ubatch $3, flash_attn $4, $5, every layer on the CPU"
		node run.mjs "$work/$1.gguf" "$2" "$3" "$4" "$5" |
			grep -v -e '^create_tensor' -e '^llama_model_loader: - ' -e '^load_tensors: layer' -e '^init_tokenizer' -e '^load: '
	} >"$log"
}
for c in 1024 4096; do
	for ub in 128 512; do
		for fa in off on; do
			run tiny-f16 $c $ub $fa mmap
		done
	done
done
run tiny-f16 1024 256 off no-mmap
run small-q8 2048 512 off mmap
run small-q8 2048 512 on mmap
run small-q8 2048 512 off no-mmap
