package leak

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkReadSamples reads every log in testdata/logs (real and
// framework logs, mmdetection logs) once per iteration.
func BenchmarkReadSamples(b *testing.B) {
	files, _ := filepath.Glob("testdata/logs/*.log")
	more, _ := filepath.Glob("testdata/logs/*/*.log")
	var all []byte
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		all = append(append(all, data...), '\n')
	}
	b.SetBytes(int64(len(all)))
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = ReadSamples(bytes.NewReader(all), nil)
	}
}
