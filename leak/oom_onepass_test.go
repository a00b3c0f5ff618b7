package leak

import (
	"fmt"
	"strings"
	"testing"
)

// parseOOMReference is ParseOOM as it was before the one-pass scan: one
// search of the whole text per anchor, candidates considered anchor by
// anchor in the order of the text. TestParseOOMOnePass holds the new
// ParseOOM to it.
func parseOOMReference(text string) (OOM, bool) {
	var best, cur OOM
	found := false
	consider := func() {
		if !found || (best.Warning && !cur.Warning) || (cur.Warning == best.Warning && cur.score() >= best.score()) {
			best = cur
			found = true
		}
	}
	for k := anchorFirst; k <= anchorLast; k++ {
		kw := k.keyword()
		for from := 0; ; {
			at, end := find(text, from, kw)
			if at < 0 {
				break
			}
			cur = OOM{}
			if k.parse(text, at, end, &cur) {
				consider()
			}
			from = at + 1
		}
	}
	return best, found && !best.Warning
}

// unrelatedLog returns about n bytes of training-log lines that hold no
// out-of-memory message but many of the anchors' first words and near
// misses ("out of", "CUDA", "error", "Allocation", "memory", "OOM",
// "Tried to"), so that the scan's candidate checks are exercised.
func unrelatedLog(n int) string {
	lines := []string{
		"2024-05-01 12:00:%02d INFO trainer.py:1423 Epoch %d step %d: loss=2.%03d lr=3.0e-4 grad_norm=0.81",
		"[rank0]: CUDA memory: allocated %d MiB, reserved %d MiB, max allocated %d MiB (out of %d)",
		"%d/%d [00:%02d<01:00, 2.%02dit/s] tokens/s=1234 of the run, cuda:0 utilization 97%%",
		"WARNING: error rate %d ran over the threshold %d; Tried to resume, Failed to reach host %d, OOM count %d",
		"Allocation stats: peak %d, current %d, HIP 0, hipMalloc calls %d, cudaMalloc calls %d, Out-of-band 0",
	}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, lines[i%len(lines)], i%60, i/1000, i, i%1000)
		b.WriteByte('\n')
	}
	return b.String()
}

func BenchmarkParseOOMLongLog(b *testing.B) {
	msg := corpusTextB(b, "capacity_cobra24_rank0")
	text := unrelatedLog(1<<20) + msg + "\n" + unrelatedLog(2000)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseOOM(text); !ok {
			b.Fatal("no message")
		}
	}
}

func corpusTextB(b testing.TB, name string) string {
	for _, c := range loadCorpus(b) {
		if c.name == name {
			return c.text
		}
	}
	b.Fatalf("no corpus file %s", name)
	return ""
}
