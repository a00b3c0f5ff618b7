package leak

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/gpumem/gpumem"
)

// FuzzOOMFields calls every method of an OOM built by hand, as a caller
// decoding its own records would, with any NumProcesses and numbers:
// none panics, the process list is NumProcesses clamped to [0,
// MaxProcesses], and the JSON forms encode.
func FuzzOOMFields(f *testing.F) {
	f.Add(0, int64(0), int64(0), int64(0), int64(0), uint16(0))
	f.Add(-1, int64(1<<30), int64(8<<30), int64(0), int64(1<<20), uint16(0xffff))
	f.Add(MaxProcesses+1, int64(1<<30), int64(8<<30), int64(1<<29), int64(-1), uint16(FieldProcesses|FieldFree))
	f.Add(math.MaxInt, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64), uint16(0xffff))
	f.Add(math.MinInt, int64(-1), int64(-1), int64(-1), int64(-1), uint16(0xffff))
	f.Fuzz(func(t *testing.T, n int, requested, capacity, free, used int64, stated uint16) {
		o := OOM{
			Requested: gpumem.Bytes(requested), Capacity: gpumem.Bytes(capacity), Free: gpumem.Bytes(free),
			Allocated: gpumem.Bytes(used / 2), Reserved: gpumem.Bytes(used), MoreUsed: gpumem.Bytes(used % 1024),
			Stated: Field(stated), NumProcesses: n, MoreProcesses: n,
		}
		for i := range o.Processes {
			o.Processes[i] = Process{PID: int64(i), Used: gpumem.Bytes(used)}
		}
		want := min(max(n, 0), MaxProcesses)
		if got := len(o.ProcessList()); got != want {
			t.Fatalf("NumProcesses %d: ProcessList has %d entries, want %d", n, got, want)
		}
		_ = o.OtherProcesses()
		d := o.Diagnose()
		_ = d.LogValue().String()
		_ = d.Cause.String()
		if _, err := json.Marshal(o); err != nil {
			t.Fatalf("json.Marshal(OOM): %v", err)
		}
		if _, err := json.Marshal(d); err != nil {
			t.Fatalf("json.Marshal(Diagnosis): %v", err)
		}
	})
}
