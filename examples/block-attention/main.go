// Command block-attention plans a block-attention analysis of a
// 32k-token input on A100 80 GB cards (docs/scenarios.md, "Block attention over 32k tokens").
//
// The write-up's analyzer reads every layer's attention weights, so the
// model runs eager attention (the only kernel that materializes them),
// without gradients. One layer's fp32 weights for 32 heads and 32k
// tokens are 128 GiB, more than an A100 holds. The write-up proposes three
// changes: processing 8 heads at a time, gradient checkpointing and
// 4-bit weights, and gives its own table of expected peaks.
//
// The program runs the same job through budget.Allocate with head chunks
// and a 4-bit NF4 model allowed, for a 32-head Llama-3.1-8B on one A100
// and for Llama-3.1-70B (the write-up's "70B") split over 8 A100s by
// device_map="auto" (a pipeline of 8 stages, one GPU's share), prints
// both ladders, and sets the write-up's table beside the library's figures:
//
//	go run ./examples/block-attention
//
// Models and GPUs come from the embedded catalogs; nothing is read from
// the network or from files.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
