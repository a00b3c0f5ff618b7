package gpumem_test

import (
	"fmt"

	"github.com/gpumem/gpumem"
)

func ExampleLookupDevice() {
	d, ok := gpumem.LookupDevice("NVIDIA A100-SXM4-80GB") // as nvidia-smi prints it
	if !ok {
		fmt.Println("unknown device")
		return
	}
	fmt.Println(d.Name)
	fmt.Println(d.Capacity.Exact()) // exact: what CUDA reports, less than nvidia-smi's 81920MiB
	fmt.Println(d.Capacity)         // as PyTorch prints "total capacity"

	// Short forms work too; a bare family name is its common cloud part.
	h, _ := gpumem.LookupDevice("h100")
	fmt.Println(h.Name, h.Capacity)
	// Output:
	// NVIDIA A100-SXM4-80GB
	// 81051MiB
	// 79.15 GiB
	// NVIDIA H100 80GB HBM3 79.21 GiB
}
