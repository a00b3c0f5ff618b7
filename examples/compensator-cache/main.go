// Command compensator-cache sizes the caches of a continual-learning
// distribution compensator (docs/scenarios.md, "Distribution compensator cache") from the memory a GPU actually has
// left, instead of fixed caps.
//
// The write-up's compensator keeps cached_Z, 50,000 fp32 feature vectors,
// and proposes to cap it at min(2000, ⌊1 GiB / (4·feature_dim)⌋, 5000)
// entries; it stops accumulating extracted features when
// torch.cuda.memory_allocated() passes 4 GB; and it lowers the chunk of
// its covariance compensation from 128 to 32 samples. The program
// models the job the compensator runs beside (a ViT-B/16 backbone
// before and after a task, both on the GPU, extracting features under
// torch.no_grad) with package budget and prints:
//
//   - cached_Z's size and the entries the write-up's rule, a 1 GiB budget
//     (budget.CacheEntries) and the memory left beside the job
//     (budget.Allocate with an elastic buffer) allow, per feature_dim;
//
//   - what the 4 GB accumulation limit measures, and how many batches of
//     features it would hold;
//
//   - the largest compensation chunk that fits.
//
//     go run ./examples/compensator-cache
//
// The write-up names neither its backbone, its GPU nor its batch size; the
// assumptions are constants at the top of cache.go. Nothing is read
// from the network or from files.
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
