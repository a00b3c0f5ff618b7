#!/bin/sh
# run.sh builds and runs a program that imports gpumem from a module
# outside this repository, the way a user does before the module is
# published: a temporary module whose go.mod requires
# github.com/gpumem/gpumem and replaces it with this clone.
#
#   tools/installcheck/run.sh [-work] [main.go]
#
# With -work the temporary module does not mention gpumem in its go.mod:
# a go.work beside it uses both modules (go work init ./app <clone>), the
# README's other recipe. With no main.go the program is a minimal one (an
# estimate checked on a catalog GPU); with one, that file is the program's
# main.go (the README quick start test passes its Go block). The build runs offline
# (GOPROXY=off): it needs only the modules this repository already uses,
# which building or testing the repository puts in the module cache
# (and listing its module graph, which the script does first). The
# program's standard output is this script's; the temporary module is
# removed on exit.
set -eu

mode=replace
if [ "${1:-}" = "-work" ]; then
	mode=work
	shift
fi

repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
app="$tmp/app"
mkdir "$app"

if [ "$mode" = replace ]; then
	cat >"$app/go.mod" <<MOD
module example.com/installcheck

go 1.24.0

require github.com/gpumem/gpumem v0.0.0

replace github.com/gpumem/gpumem => $repo
MOD
	# The checksums of gpumem's own requirements (gonum, ...).
	cp "$repo/go.sum" "$app/go.sum"
else
	cat >"$app/go.mod" <<MOD
module example.com/installcheck

go 1.24.0
MOD
	(cd "$tmp" && GOWORK=off go work init ./app "$repo")
fi

if [ $# -ge 1 ]; then
	cp "$1" "$app/main.go"
else
	cat >"$app/main.go" <<'GO'
package main

import (
	"fmt"
	"log"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

func main() {
	spec, ok := model.Lookup("llama-3-8b")
	if !ok {
		log.Fatal("llama-3-8b is not in the catalog")
	}
	m, err := budget.NewModel(model.Finetune{Model: spec})
	if err != nil {
		log.Fatal(err)
	}
	need, err := budget.Estimate(budget.Job{Model: m, Mode: budget.Generation, Precision: budget.BF16, Batch: 1, SeqLen: 4096, Generate: 512})
	if err != nil {
		log.Fatal(err)
	}
	h100, _ := gpumem.LookupDevice("h100")
	_, fits := budget.Fits(need, h100)
	fmt.Println("installcheck: llama-3-8b generating 512 tokens after 4096 fits an H100:", fits)
}
GO
fi

# The module graph of gpumem's requirements: building the repository
# fetches the modules it compiles, but a workspace also reads the go.mod
# of every module in the graph (the requirements of dependencies without
# graph pruning, such as svgo's). Listing the graph fetches those through
# the environment's proxy when the cache lacks them, and reads only the
# cache when it has them; the build below stays offline.
(cd "$repo" && GOWORK=off go list -m all >/dev/null)

cd "$app"
if [ "$mode" = replace ]; then
	# GOWORK=off: a go.work around the caller must not decide what is built.
	GOWORK=off GOFLAGS=-mod=mod GOPROXY=off go build -o installcheck .
else
	GOWORK="$tmp/go.work" GOPROXY=off go build -o installcheck .
fi
./installcheck
