package leak_test

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/leak"
)

// A message pasted as a user posted it (a LoRA training script on an 8 GB
// card, recorded with its thread in testdata/oom/capacity_lora178.txt):
// ParseOOM finds the message in the text around it, printing the OOM lists every number the
// message gave, and printing its Diagnosis gives the cause, the sentence
// with the numbers that decide it and the ranked advice. Here the device
// is full (0 bytes free) and the cache holds only 127 MiB unallocated:
// exhaustion, not fragmentation.
func ExampleOOM_String() {
	pasted := `I get this message ----
( torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 90.00 MiB. GPU 0 has a total capacity of 8.00 GiB of which 0 bytes is free. Of the allocated memory 7.13 GiB is allocated by PyTorch, and 127.09 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.`
	o, ok := leak.ParseOOM(pasted)
	if !ok {
		fmt.Println("no out-of-memory message")
		return
	}
	fmt.Println(o)
	fmt.Println(o.Diagnose())
	// Output:
	// pytorch CUDA out of memory on device 0: requested 90.00 MiB, capacity 8.00 GiB, free 0 B, allocated 7.13 GiB, reserved 7.25 GiB, reserved_unallocated 127.09 MiB
	// exhausted by this process: 90.00 MiB requested but 0 B free; this process holds 7.25 GiB (7.13 GiB allocated, 1.71% fragmentation)
	//   - lower the micro-batch (keep the global batch with gradient accumulation): activations scale with it
	//   - enable activation checkpointing: keep only layer inputs and recompute the rest in backward
	//   - use flash / memory-efficient attention (SDPA) instead of eager attention
	//   - use an 8-bit optimizer (bitsandbytes AdamW8bit): Adam's two fp32 states shrink from 8 to about 2 bytes per parameter
}

// The leaking log of LLaVA on a 24 GB card (docs/scenarios.md): printing
// the Report gives its verdict with the numbers, and printing its OOM
// field (Report.Forecast at the capacity) when the trend reaches the card.
func ExampleReport_String() {
	log := `Step 100: Loss=2.34, Memory=18.2GB
Step 200: Loss=2.11, Memory=18.5GB
Step 300: Loss=1.98, Memory=18.9GB
Step 400: Loss=1.87, Memory=19.4GB
Step 500: Loss=1.76, Memory=20.1GB
Step 600: Loss=1.65, Memory=20.9GB
Step 700: Loss=1.54, Memory=21.8GB
Step 800: Loss=1.43, Memory=22.9GB
Step 900: Loss=1.32, Memory=24.2GB`
	samples, err := leak.ParseSamples(strings.NewReader(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := leak.Analyze(samples, &leak.Options{Capacity: gpumem.MustParseBytes("23.69 GiB")})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r)
	fmt.Println(r.OOM)
	// Output:
	// accelerating leak over 9 samples: 16.95 GiB → 22.54 GiB, 7.07 MiB per step (Theil–Sen), R² 0.96, confidence 1.000; slope rose from 4.48 MiB to 9.73 MiB per step; OOM at step 994 (994–1181)
	// accelerating leak reaches 23.69 GiB at step 994 (range 994–1181)
}
