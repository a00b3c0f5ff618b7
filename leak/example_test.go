package leak_test

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/leak"
)

// LLaVA on a 24 GB RTX 3090 (docs/scenarios.md): fragmentation or exhaustion?
func ExampleOOM_Diagnose() {
	msg := `RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB 
(GPU 0; 23.69 GiB total capacity; 21.45 GiB already allocated; 
1.89 GiB free; 21.50 GiB reserved in total by PyTorch)`
	o, ok := leak.ParseOOM(msg)
	if !ok {
		return
	}
	d := o.Diagnose()
	fmt.Println(o.Era)
	fmt.Println(d.Cause)
	fmt.Printf("fragmentation %.2f%%, short by %s\n", 100*d.Fragmentation, d.Shortfall.String())
	fmt.Println(d.Advice[0].Action == leak.ActionLowerBatch)
	// Output:
	// pytorch 1.4-2.0 (reserved in total)
	// exhausted by this process
	// fragmentation 0.23%, short by 624.64 MiB
	// true
}

// LLaVA on a 24 GB card, the leaking log (docs/scenarios.md): an
// accelerating leak; when does it OOM?
func ExampleAnalyze() {
	log := `Step 100: Loss=2.34, Memory=18.2GB
Step 200: Loss=2.11, Memory=18.5GB
Step 300: Loss=1.98, Memory=18.9GB
Step 400: Loss=1.87, Memory=19.4GB
Step 500: Loss=1.76, Memory=20.1GB
Step 600: Loss=1.65, Memory=20.9GB
Step 700: Loss=1.54, Memory=21.8GB
Step 800: Loss=1.43, Memory=22.9GB
Step 900: Loss=1.32, Memory=24.2GB
Step 1000: CUDA OOM`
	samples, err := leak.ParseSamples(strings.NewReader(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	// A 24 GB card (RTX 3090/4090) reports 23.69 GiB, as in the RTX 3090 message.
	r, err := leak.Analyze(samples, &leak.Options{Capacity: gpumem.MustParseBytes("23.69 GiB")})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Shape, r.Leak)
	fmt.Printf("OOM forecast at step %.0f; the log died at step %d\n", r.OOM.Step, r.ObservedOOMStep)
	// Output:
	// accelerating leak true
	// OOM forecast at step 994; the log died at step 1000
}

func ExampleParseOOM() {
	o, _ := leak.ParseOOM(`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 546.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which 514.19 MiB is free. Process 562167 has 15.25 GiB memory in use. Of the allocated memory 13.73 GiB is allocated by PyTorch, with 46.00 MiB allocated in private pools (e.g., CUDA Graphs), and 736.86 MiB is reserved by PyTorch but unallocated.`)
	fmt.Println(o.Framework, o.Backend, o.Device, o.Requested.String(), o.Free.String())
	fmt.Println(o.Reserved.String(), o.Has(leak.FieldReserved), o.Known(leak.FieldReserved))
	fmt.Println(o.ProcessList()[0].PID, o.PrivatePools.String())
	// Output:
	// pytorch CUDA 0 546.00 MiB 514.19 MiB
	// 14.45 GiB false true
	// 562167 46.00 MiB
}

// A sidecar feeds samples as the job logs them and warns before the crash
// (the memory monitor of LLaVA on a 24 GB card, docs/scenarios.md).
func ExampleDetector() {
	d := leak.NewDetector(&leak.DetectorOptions{Capacity: gpumem.MustParseBytes("23.69 GiB"), Window: 8})
	for step, gb := range []float64{18.2, 18.5, 18.9, 19.4, 20.1, 20.9, 21.8, 22.9, 24.2} {
		s := leak.Sample{Step: int64(100 * (step + 1)), Used: gpumem.Bytes(gb * 1e9), Has: leak.ColStep | leak.ColUsed}
		if a, ok := d.Add(s); ok {
			fmt.Printf("step %d: %s alert\n", s.Step, a.Kind)
		}
	}
	// Output:
	// step 800: threshold alert
	// step 900: growth alert
}
