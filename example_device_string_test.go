package gpumem_test

import (
	"fmt"

	"github.com/gpumem/gpumem"
)

// Printing a Device gives its name and capacity, and what is free once
// other processes (Used) or the caller's margin (Reserved) take some.
func ExampleDevice_String() {
	l4, _ := gpumem.LookupDevice("l4")
	fmt.Println(l4)
	l4.Used = gpumem.MustParseBytes("8 GiB")
	fmt.Println(l4)
	fmt.Println(gpumem.Device{})
	// Output:
	// NVIDIA L4: 21.95 GiB
	// NVIDIA L4: 21.95 GiB, 13.95 GiB free
	// unnamed device: 0 B
}
