// Command video-unlearning checks whether unlearning a concept from
// CogVideoX-5b fits a 48 GB-class card, and falls back to CPU offload
// when it does not (docs/scenarios.md, "Unlearning in CogVideoX-5b").
//
// The write-up's training script keeps three models on the GPU: the
// transformer being trained (with gradients and AdamW state), a frozen
// copy of the original transformer, and the frozen T5 text encoder. Its
// memory tool estimated 63.78 GB against the 46.07 GB it saw on the card
// and switched to --use_cpu_offload. The program models the same job
// with package budget, from the catalog's exact inventories:
//
//   - the write-up's table beside the library's figures, component by
//     component (the write-up counts the trained copy twice and takes T5-XXL's
//     encoder for a 220M model);
//
//   - the fit check on an L40S and an A40 (budget.Fits);
//
//   - the automatic fallback: budget.Allocate with CPU offload of the
//     frozen models and of the optimizer allowed, keeping the global batch
//     of 4 by gradient accumulation, and with checkpointing allowed too.
//
//     go run ./examples/video-unlearning
//
// Nothing is read from the network or from files.
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
