package model

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A GGUF file on disk, as llama.cpp and Ollama store models: open it, take
// its size from Stat, and FromGGUF reads the header only (metadata and
// tensor infos), however large the file. The Spec it returns has the
// exact inventory, quantized types included, and goes to budget.ModelOf
// like any other (a job with Runtime budget.LlamaCpp then sizes
// llama.cpp's buffers). The file here is a one-layer llama-style model
// with mixed Q4_K, Q4_0, Q8_0, Q6_K, F16 and F32 tensors, written by the
// package's tests in the layout of ggml's docs/gguf.md.
func ExampleFromGGUF() {
	dir, err := os.MkdirTemp("", "gguf-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tiny.gguf")
	if err := os.WriteFile(path, tinyGGUF(exampleTB{}), 0o644); err != nil {
		fmt.Println(err)
		return
	}

	f, err := os.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		fmt.Println(err)
		return
	}
	spec, err := FromGGUF(f, info.Size())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s (%s): %d layers, hidden %d, %d heads (%d KV), context %d\n",
		spec.Name, spec.Family, spec.Layers, spec.Hidden, spec.Heads, spec.KVHeads, spec.MaxPositions)
	weights, err := spec.WeightsBytes()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d parameters in %d tensors, %v as stored\n", spec.Params(), len(spec.Inventory), weights)
	fmt.Println(spec.Inventory[2].Name, spec.Inventory[2].Shape, spec.Inventory[2].DType)
	// Output:
	// tiny (llama): 1 layers, hidden 256, 8 heads (2 KV), context 4096
	// 609040 parameters in 13 tensors, 384.60 KiB as stored
	// blk.0.attn_q.weight [256 256] Q4_0
}

// exampleTB lets an Example use the tests' GGUF writer, whose only calls
// on its testing.TB are Helper and Fatalf.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper() {}

func (exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
