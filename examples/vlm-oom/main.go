// Command vlm-oom walks through the out-of-memory chapter of a
// vision-language-model training guide (docs/scenarios.md, "LLaVA on a 24 GB card") with gpumem, printing
// the library's figures next to the chapter's own:
//
//  1. where the memory of LLaVA-1.5 goes (the chapter's footprint section and its 13B exercise), with
//     budget.Estimate;
//
//  2. what to change so that a 7B full fine-tune fits a 24 GB RTX 3090
//     (the chapter's budget-allocator exercise: LLaVA-1.5-7B on a
//     24 GB RTX 3090 with a global batch of 32), with budget.Allocate and its
//     ladder;
//
//  3. how to read an out-of-memory message (the chapter's RTX 3090 message, and the one
//     PyTorch 2.2+ would print if the plan's micro-batch were raised by
//     one, built from the estimate), with leak.ParseOOM and Diagnose;
//
//  4. how to read a leaking memory log (the chapter's leaking log), with
//     leak.ParseSamples and leak.Analyze.
//
//     go run ./examples/vlm-oom
//
// The message and the log are strings in the program; the models and
// the GPU come from the embedded catalogs. Nothing is read from the
// network or from files.
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
