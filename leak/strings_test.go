package leak

import (
	"strings"
	"testing"
)

// The zero OOM and Diagnosis print as what they are; a truncated message
// says so; a message prints only the numbers it stated or derived.
func TestPrintedOOM(t *testing.T) {
	t.Parallel()
	if got := (OOM{}).String(); got != "no out-of-memory message" {
		t.Errorf("zero OOM prints %q", got)
	}
	o, ok := ParseOOM("RuntimeError: CUDA error: out of memory")
	if !ok {
		t.Fatal("the numberless CUDA error is not read")
	}
	if got := o.String(); strings.Contains(got, "requested") || strings.Contains(got, "capacity") {
		t.Errorf("a message without numbers prints numbers: %q", got)
	}
	o, ok = ParseOOM("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 9.50 MiB is free.")
	if !ok {
		t.Fatal("not read")
	}
	s := o.String()
	for _, part := range []string{"requested 20.00 MiB", "capacity 7.79 GiB", "free 9.50 MiB"} {
		if !strings.Contains(s, part) {
			t.Errorf("OOM prints %q, without %q", s, part)
		}
	}
	if strings.Contains(s, "allocated") || strings.Contains(s, "reserved") {
		t.Errorf("OOM prints %q: numbers the message did not give", s)
	}
	o.Truncated = true
	if !strings.HasSuffix(o.String(), "(truncated)") {
		t.Errorf("a truncated message prints %q", o.String())
	}
	d := o.Diagnose()
	if ds := d.String(); !strings.HasPrefix(ds, d.Cause.String()+": "+d.Reason) || strings.Count(ds, "\n  - ") != len(d.Advice) {
		t.Errorf("Diagnosis prints %q: want the cause, its reason and one line per advice (%d)", ds, len(d.Advice))
	}
}
