# setup.sh is sourced by run.sh and run_swa.sh, from the repository root,
# with $out set to the folder the logs go to: it installs node-llama-cpp
# 3.22.1 (which bundles prebuilt llama.cpp builds) in a temporary
# directory outside the repository, removed on exit, and enters it with
# tools/llamacpp/run.mjs beside it. It sets $repo, $work and $nlc (the
# installed node-llama-cpp's version) and defines mk, which writes a GGUF
# file of a known shape with tools/llamacpp/mkgguf.
repo=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cd "$work"
npm init -y >/dev/null
npm install --no-audit --no-fund node-llama-cpp@3.22.1 >/dev/null
cp "$repo/tools/llamacpp/run.mjs" .
nlc=$(node -p 'JSON.parse(require("fs").readFileSync("node_modules/node-llama-cpp/package.json")).version')

mk() { # name, mkgguf flags...
	name=$1
	shift
	(cd "$repo" && go run ./tools/llamacpp/mkgguf -o "$work/$name.gguf" -name "$name" "$@") >/dev/null
	echo "$*" >"$work/$name.flags"
}
