package gpumem_test

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem"
)

func ExampleBytes() {
	need := 14*gpumem.GiB + 600*gpumem.MiB
	free := 24 * gpumem.GiB
	fmt.Println(need)         // for people, as time.Duration prints a duration
	fmt.Println(need.Exact()) // exact, in a unit ParseBytes reads back
	fmt.Printf("%d\n", need)  // exact, in bytes (need.Int64())
	fmt.Println(free - need)  // headroom
	fmt.Println(need - free)  // a shortfall stays negative
	fmt.Printf("%.3f GiB\n", need.GiB())
	// Output:
	// 14.59 GiB
	// 14936MiB
	// 15661531136
	// 9.41 GiB
	// -9.41 GiB
	// 14.586 GiB
}

func ExampleParseBytes() {
	for _, s := range []string{"80GiB", "80GB", "79.15 GiB", "512 bytes", "32Gb"} {
		b, err := gpumem.ParseBytes(s)
		if err != nil {
			fmt.Println(err, errors.Is(err, gpumem.ErrUnit))
			continue
		}
		fmt.Println(s, "=", b.Int64(), "bytes =", b.Exact())
	}
	// Output:
	// 80GiB = 85899345920 bytes = 80GiB
	// 80GB = 80000000000 bytes = 78125000KiB
	// 79.15 GiB = 84986665370 bytes = 84986665370B
	// 512 bytes = 512 bytes = 512B
	// gpumem.ParseBytes: parsing "32Gb": invalid unit: "Gb" is bits; gpumem counts bytes (write GB) true
}

func ExampleDType_Size() {
	// Llama-2-7B's 6,738,415,616 parameters in three formats.
	const params = 6_738_415_616
	for _, d := range []gpumem.DType{gpumem.BF16, gpumem.Q4_K, gpumem.NF4} {
		b, err := d.Size(params)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-5v %5.2f bits/param  %s\n", d, d.Bits(), b.String())
	}
	// NF4 stores its absmax constants apart (bitsandbytes, QLoRA).
	c, _ := gpumem.Blockwise{Nested: true}.Constants(params)
	fmt.Println("nf4 double-quantized constants", c.String())
	// Output:
	// bf16  16.00 bits/param  12.55 GiB
	// Q4_K   4.50 bits/param  3.53 GiB
	// nf4    4.00 bits/param  3.14 GiB
	// nf4 double-quantized constants 101.98 MiB
}

func ExampleParseDType() {
	for _, s := range []string{"torch.bfloat16", "float16", "F8_E4M3", "Q4_K", "nf4"} {
		d, err := gpumem.ParseDType(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(s, "->", d)
	}
	// Output:
	// torch.bfloat16 -> bf16
	// float16 -> fp16
	// F8_E4M3 -> fp8_e4m3
	// Q4_K -> Q4_K
	// nf4 -> nf4
}
