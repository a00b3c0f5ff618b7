// Command whisper-attack sizes the language-identification micro-batch of
// a universal adversarial attack on Whisper-small (docs/scenarios.md, "Whisper language attack").
//
// The attack runs projected gradient descent (PGD) on a perturbation of
// the audio. Each PGD step runs Whisper's encoder on every clip of the
// batch to identify its language, and backpropagates the loss to the
// perturbation through the frozen model. Every clip's graph is therefore
// resident until backward. With 8 clips of 30 s the job failed on a
// 104 MB allocation at the softmax of the encoder's qkv_attention. The
// write-up's fix is lang_microbatch_size: run the language forward and
// backward on a few clips at a time.
//
// The program models that job with package budget: a Training job over a
// frozen whisper-small (every parameter frozen, no optimizer, so backward
// produces gradients for the input only), in fp32 and under fp16
// autocast (the write-up's lang_autocast). It prints the failed allocation,
// the size of one clip's graph, the peak of the whole batch, and the
// largest micro-batch that fits on a few catalog GPUs:
//
//	go run ./examples/whisper-attack
//
// Everything comes from the embedded catalogs; nothing is read from the
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
