package leak

import (
	"fmt"
	"slices"
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

// parseAllOOMReference is ParseAllOOM as it was before the one-pass
// scan.
func parseAllOOMReference(text string) []OOM {
	var all []OOM
	for k := anchorFirst; k <= anchorLast; k++ {
		kw := k.keyword()
		for from := 0; ; {
			at, end := find(text, from, kw)
			if at < 0 {
				break
			}
			var cur OOM
			if k.parse(text, at, end, &cur) {
				all = append(all, cur)
			}
			from = at + 1
		}
	}
	slices.SortStableFunc(all, func(a, b OOM) int { return a.Start - b.Start })
	out := all[:0]
	for _, o := range all {
		if n := len(out); n > 0 && o.Start < out[n-1].End {
			if o.score() > out[n-1].score() {
				out[n-1] = o
			}
			continue
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		return nil
	}
	return out
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

// longLog is a 1 MB training log with one OOM message near its end.
func longLog(b *testing.B) string {
	return unrelatedLog(1<<20) + corpusText(b, "capacity_cobra24_rank0") + "\n" + unrelatedLog(2000)
}

func BenchmarkParseOOMLongLog(b *testing.B) { benchmarkLongLog(b, ParseOOM) }

// BenchmarkParseOOMLongLogReference measures the former per-anchor search
// on the same log, for the ratio on one machine at one time.
func BenchmarkParseOOMLongLogReference(b *testing.B) { benchmarkLongLog(b, parseOOMReference) }

func benchmarkLongLog(b *testing.B, parse func(string) (OOM, bool)) {
	text := longLog(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := parse(text); !ok {
			b.Fatal("no message")
		}
	}
}

// BenchmarkParseOOMReference is BenchmarkParseOOM of the former search.
func BenchmarkParseOOMReference(b *testing.B) { benchmarkCorpus(b, parseOOMReference) }

// TestParseOOMOnePass holds the one-pass ParseOOM and ParseAllOOM to
// the former anchor-by-anchor search (parseOOMReference,
// parseAllOOMReference): the same OOM and the same ok (the same list) on every corpus message, on each message embedded at the start, the
// middle and the end of a 1 MB log of unrelated lines, and on logs that
// hold several messages (every corpus message in one log; pairs of
// messages of different formats, in both orders, where the tie-break
// between equals decides).
func TestParseOOMOnePass(t *testing.T) {
	cases := loadCorpus(t)
	noise := unrelatedLog(1 << 20)
	small := unrelatedLog(4 << 10)
	check := func(name, text string) {
		t.Helper()
		got, gotOK := ParseOOM(text)
		want, wantOK := parseOOMReference(text)
		if got != want || gotOK != wantOK {
			t.Errorf("%s: ParseOOM = %+v, %v\nreference = %+v, %v", name, got, gotOK, want, wantOK)
		}
		gotAll, wantAll := ParseAllOOM(text), parseAllOOMReference(text)
		if !slices.Equal(gotAll, wantAll) || (gotAll == nil) != (wantAll == nil) {
			t.Errorf("%s: ParseAllOOM = %+v\nreference = %+v", name, gotAll, wantAll)
		}
	}
	check("noise", noise)
	var all strings.Builder
	for i, c := range cases {
		check(c.name, c.text)
		check(c.name+" at the start of 1 MB", c.text+"\n"+noise)
		check(c.name+" in the middle of 1 MB", noise[:len(noise)/2]+"\n"+c.text+"\n"+noise[len(noise)/2:])
		check(c.name+" at the end of 1 MB", noise+c.text)
		next := cases[(i+1)%len(cases)]
		check(c.name+" then "+next.name, small+c.text+"\n"+small+next.text+"\n"+small)
		check(next.name+" then "+c.name, next.text+"\n"+small+c.text)
		check(c.name+" twice", c.text+"\n"+c.text)
		all.WriteString(small)
		all.WriteString(c.text)
		all.WriteByte('\n')
	}
	check("every message in one log", all.String())
}

// TestAnchorScan checks the scanner against the per-keyword search it
// replaces: the same (anchor, start, end) triples, in position order and
// then anchor order, on every corpus message and a log of many.
func TestAnchorScan(t *testing.T) {
	type hit struct {
		k       anchor
		at, end int
	}
	var texts []string
	var all strings.Builder
	for _, c := range loadCorpus(t) {
		texts = append(texts, c.text)
		all.WriteString(c.text)
		all.WriteString(unrelatedLog(2 << 10))
	}
	texts = append(texts, all.String(), "", "o", "Tr", "of\nmemory  while\ttrying to allocate")
	for _, text := range texts {
		var want []hit
		for k := anchorFirst; k <= anchorLast; k++ {
			for from := 0; ; {
				at, e := find(text, from, k.keyword())
				if at < 0 {
					break
				}
				want = append(want, hit{k, at, e})
				from = at + 1
			}
		}
		slices.SortStableFunc(want, func(a, b hit) int { return a.at - b.at })
		var got []hit
		for sc := (anchorScan{s: text}); ; {
			k, at, end, ok := sc.next()
			if !ok {
				break
			}
			got = append(got, hit{k, at, end})
		}
		if len(got) != len(want) {
			t.Fatalf("%.40q: scan found %d anchors, search %d", text, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%.40q: anchor %d = %+v, want %+v", text, i, got[i], want[i])
			}
		}
	}
}

// FuzzParseOOMOnePass holds ParseOOM and ParseAllOOM to the former search
// on any text, seeded with the corpus and the anchors' near misses.
func FuzzParseOOMOnePass(f *testing.F) {
	for _, c := range loadCorpus(f) {
		f.Add(c.text)
	}
	for k := anchorFirst; k <= anchorLast; k++ {
		kw := k.keyword()
		f.Add(kw)
		f.Add(strings.ReplaceAll(kw, " ", "\n\t "))
		f.Add(kw[:len(kw)-1] + " " + kw + " 1 GiB")
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, gotOK := ParseOOM(s)
		want, wantOK := parseOOMReference(s)
		if got != want || gotOK != wantOK {
			t.Fatalf("ParseOOM(%q) = %+v, %v\nreference = %+v, %v", s, got, gotOK, want, wantOK)
		}
		if gotAll, wantAll := ParseAllOOM(s), parseAllOOMReference(s); !slices.Equal(gotAll, wantAll) {
			t.Fatalf("ParseAllOOM(%q) = %+v\nreference = %+v", s, gotAll, wantAll)
		}
	})
}
