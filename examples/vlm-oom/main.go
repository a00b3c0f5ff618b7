// Command vlm-oom walks through the out-of-memory chapter of a
// vision-language-model training guide (seed 001) with gpumem, printing
// the library's figures next to the chapter's own:
//
//  1. where the memory of LLaVA-1.5 goes (§9.1, exercise 9.1), with
//     budget.Estimate;
//
//  2. what to change so that a 7B full fine-tune fits a 24 GB RTX 3090
//     (exercise 9.7's budget allocator), with budget.Allocate and its
//     ladder;
//
//  3. how to read an out-of-memory message (exercise 9.2's, and the one
//     PyTorch 2.2+ would print if the plan's micro-batch were raised by
//     one, built from the estimate), with leak.ParseOOM and Diagnose;
//
//  4. how to read a leaking memory log (exercise 9.8's), with
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
