package budget

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// allocCase is a job and limits for the property tests.
type allocCase struct {
	name string
	job  Job
	lim  Limits
}

func allocCases(t testing.TB) []allocCase {
	small := lookupModel(t, "qwen2.5-0.5b", nil)
	llama := lookupModel(t, "llama-3.2-1b", nil)
	lora := lookupModel(t, "llama-3.2-1b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 8} })
	frozen := lookupModel(t, "qwen2.5-0.5b", func(f *model.Finetune) { f.Train = func(gpumem.Tensor) bool { return false } })
	return []allocCase{
		{"train defaults", Job{Model: small, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Batch: 4, SeqLen: 1024}, Limits{}},
		{"train target", Job{Model: llama, Mode: Training, Precision: BF16Master, Optimizer: optimizer.AdamW{}, Attention: model.Eager, Batch: 2, SeqLen: 2048},
			Limits{TargetGlobalBatch: 64, Attention: []model.Attention{model.SDPA, model.Flash},
				Optimizers: []optimizer.Optimizer{optimizer.AdamW8bit{}}, Offload: OffloadOptimizer,
				Models: []Alternative{{"LoRA r=8", lora}}}},
		{"train seq range", Job{Model: small, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Attention: model.Flash, Batch: 1, SeqLen: 4096},
			Limits{MinSeqLen: 512, MaxSeqLen: 1 << 17, MaxBatch: 8}},
		{"prefill eager chunks", Job{Model: llama, Mode: Prefill, Precision: FP16, Attention: model.Eager, Batch: 1, SeqLen: 8192},
			Limits{Attention: []model.Attention{}, HeadChunks: []int{16, 8, 4}, MaxBatch: 64}},
		{"generate", Job{Model: llama, Mode: Generation, Precision: BF16, Attention: model.SDPA, Batch: 8, SeqLen: 1024, Generate: 512}, Limits{MaxBatch: 512}},
		{"elastic buffer", Job{Model: small, Mode: Prefill, Precision: BF16, Attention: model.SDPA, Batch: 1, SeqLen: 512,
			Buffers: []Buffer{{Name: "cache", Entries: 1 << 20, EntryBytes: 64 << 10, Elastic: true}, {Name: "fixed", Bytes: 1 << 28}}},
			Limits{MaxBatch: 4, BufferMin: map[string]int64{"cache": 100}}},
		{"frozen copies", Job{Model: small, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Batch: 2, SeqLen: 512,
			Copies: []Copy{{Name: "ref", Model: frozen}, {Name: "teacher", Model: frozen}}}, Limits{Offload: OffloadCopies, MaxBatch: 256}},
	}
}

// budgetOf is the device bytes a plan may use under lim.
func budgetOf(t testing.TB, free gpumem.Bytes, j Job, lim Limits) gpumem.Bytes {
	a, err := newAllocator(free, j, &lim)
	if err != nil {
		t.Fatal(err)
	}
	return a.budget()
}

// The plan fits its budget; one more sequence (or token, or entry) with
// everything else equal does not, unless a limit stopped the search; more
// memory never gives a plan with more changes, nor fewer tokens with the
// same changes.
func TestAllocateProperties(t *testing.T) {
	t.Parallel()
	for _, c := range allocCases(t) {
		var prev Plan
		var havePrev bool
		for _, gib := range []float64{4, 6, 8, 12, 16, 24, 40, 48, 80, 141} {
			free := gpumem.Bytes(gib * (1 << 30))
			p, err := Allocate(free, c.job, &c.lim)
			if err != nil {
				var ie *InsufficientMemoryError
				if !errors.As(err, &ie) || !errors.Is(err, gpumem.ErrDoesNotFit) || len(ie.Ladder) == 0 {
					t.Fatalf("%s in %v: %v, want a plan or an *InsufficientMemoryError with a ladder", c.name, free, err)
				}
				if ie.Shortfall <= 0 || ie.Need.Device()-ie.Shortfall != budgetOf(t, free, c.job, c.lim) {
					t.Errorf("%s in %v: shortfall %v inconsistent with need %v", c.name, free, ie.Shortfall, ie.Need.Device())
				}
				if havePrev {
					t.Errorf("%s: fits in less memory than %v but not in %v", c.name, prev.Free, free)
				}
				continue
			}
			lim := budgetOf(t, free, c.job, c.lim)
			if need, err := Estimate(p.Job); err != nil || need != p.Need {
				t.Errorf("%s in %v: Need is not Estimate(Job): %v", c.name, free, err)
			}
			if p.Need.Device() > lim || p.Headroom != free-p.Need.Device() {
				t.Errorf("%s in %v: plan needs %v, budget %v, headroom %v", c.name, free, p.Need.Device(), lim, p.Headroom)
			}
			a, _ := newAllocator(free, c.job, &c.lim)
			if p.Batch < a.maxBatch {
				x := p.Job
				x.Batch++
				a.setAccum(&x)
				if b, err := Estimate(x); err == nil && b.Device() <= lim {
					t.Errorf("%s in %v: batch %d fits but the plan has %d (reason %v)", c.name, free, x.Batch, p.Batch, p.Reason)
				}
			} else if p.Reason == ReasonMemory && !a.varySeq && !hasElastic(p.Job.Buffers) {
				t.Errorf("%s in %v: batch at its limit but reason %v", c.name, free, p.Reason)
			}
			if a.varySeq && p.SeqLen < a.maxSeq && p.Batch == a.minBatch {
				x := p.Job
				x.SeqLen++
				if b, err := Estimate(x); err == nil && b.Device() <= lim {
					t.Errorf("%s in %v: sequence %d fits but the plan has %d", c.name, free, x.SeqLen, p.SeqLen)
				}
			}
			for i, buf := range p.Buffers {
				if buf.Elastic && buf.Entries < c.job.Buffers[i].Entries {
					x := p.Job
					x.Buffers = append([]Buffer(nil), p.Buffers...)
					x.Buffers[i].Entries++
					if b, err := Estimate(x); err == nil && b.Device() <= lim {
						t.Errorf("%s in %v: buffer %s holds %d entries, %d fit", c.name, free, buf.Name, buf.Entries, buf.Entries+1)
					}
				}
			}
			if c.lim.TargetGlobalBatch > 0 && p.Batch*p.GradAccum < c.lim.TargetGlobalBatch {
				t.Errorf("%s: %d × %d below the target %d", c.name, p.Batch, p.GradAccum, c.lim.TargetGlobalBatch)
			}
			if havePrev {
				// Plans are ordered by: reaching the job as given, then
				// fewer changes, then more tokens.
				pw, qw := reaches(p, c, a), reaches(prev, c, a)
				switch {
				case qw && !pw:
					t.Errorf("%s: %v reaches the job as given, %v does not", c.name, prev.Free, free)
				case qw && applied(p) > applied(prev):
					t.Errorf("%s: %v applies %d changes, %v only %d", c.name, free, applied(p), prev.Free, applied(prev))
				case (qw && applied(p) == applied(prev) || !qw && !pw) && p.Batch*p.SeqLen < prev.Batch*prev.SeqLen:
					t.Errorf("%s: %v gives %d×%d tokens, less than %d×%d in %v", c.name, free, p.Batch, p.SeqLen, prev.Batch, prev.SeqLen, prev.Free)
				}
			}
			prev, havePrev = p, true
		}
		if !havePrev {
			t.Errorf("%s fits nowhere up to 141 GiB", c.name)
		}
	}
}

// reaches reports whether p runs at least the batch and sequence of the
// job as given.
func reaches(p Plan, c allocCase, a *allocator) bool {
	want := min(max(c.job.Batch, a.minBatch), a.maxBatch)
	seq := c.job.SeqLen
	if a.varySeq {
		seq = min(max(seq, a.minSeq), a.maxSeq)
	}
	return p.Batch >= want && p.SeqLen >= seq
}

func applied(p Plan) int {
	n := 0
	for _, r := range p.Ladder[1:] {
		if r.Applied {
			n++
		}
	}
	return n
}

// Random limits and memory: never a panic, a plan that fits or a typed
// error, deterministic.
func TestAllocateRandom(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	cases := allocCases(t)
	for range 200 {
		c := cases[r.IntN(len(cases))]
		c.lim.MaxBatch = r.IntN(64)
		c.lim.MinBatch = r.IntN(max(c.lim.MaxBatch, 1) + 1)
		c.lim.HeadroomFraction = []float64{0, -1, 0.1}[r.IntN(3)]
		c.lim.Headroom = gpumem.Bytes(r.Int64N(1 << 30))
		free := gpumem.Bytes(r.Int64N(100 << 30))
		p1, err1 := Allocate(free, c.job, &c.lim)
		p2, err2 := Allocate(free, c.job, &c.lim)
		if (err1 == nil) != (err2 == nil) || (err1 == nil && (p1.Batch != p2.Batch || p1.SeqLen != p2.SeqLen || p1.Need != p2.Need)) {
			t.Fatalf("%s: not deterministic", c.name)
		}
		if err1 != nil && !errors.Is(err1, gpumem.ErrDoesNotFit) && !errors.Is(err1, gpumem.ErrInvalid) {
			t.Errorf("%s in %v: %v", c.name, free, err1)
		}
		if err1 == nil && p1.Need.Device() > budgetOf(t, free, c.job, c.lim) {
			t.Errorf("%s in %v: plan does not fit", c.name, free)
		}
	}
}

func TestAllocateBadLimits(t *testing.T) {
	t.Parallel()
	j := allocCases(t)[0].job
	tests := []struct {
		field string
		free  gpumem.Bytes
		lim   Limits
	}{
		{"free", 0, Limits{}},
		{"Limits.MinBatch", 1 << 34, Limits{MinBatch: -1}},
		{"Limits.MinBatch", 1 << 34, Limits{MinBatch: 9, MaxBatch: 8}},
		{"Limits.MaxSeqLen", 1 << 34, Limits{MaxSeqLen: -5}},
		{"Limits.MinSeqLen", 1 << 34, Limits{MinSeqLen: 900, MaxSeqLen: 800}},
		{"Limits.HeadroomFraction", 1 << 34, Limits{HeadroomFraction: 1}},
		{"Limits.HeadChunks[1]", 1 << 34, Limits{HeadChunks: []int{8, 0}}},
		{"Limits.Optimizers[0]", 1 << 34, Limits{Optimizers: []optimizer.Optimizer{nil}}},
		{"Limits.Models[0].Model", 1 << 34, Limits{Models: []Alternative{{Name: "zero"}}}},
		{"Limits.BufferMin[x]", 1 << 34, Limits{BufferMin: map[string]int64{"x": -1}}},
		{"Limits.Offload", 1 << 34, Limits{Offload: 64}},
		{"Limits.Objective", 1 << 34, Limits{Objective: 9}},
		{"Limits.Objective", 1 << 34, Limits{Objective: MaximizeSeqLen}},
	}
	for _, tt := range tests {
		_, err := Allocate(tt.free, j, &tt.lim)
		var fe *gpumem.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, gpumem.ErrInvalid) {
			t.Errorf("%+v: got %v, want a FieldError on %s", tt.lim, err, tt.field)
		}
	}
	bad := j
	bad.Batch = 0
	if _, err := Allocate(1<<34, bad, nil); !errors.Is(err, gpumem.ErrInvalid) {
		t.Errorf("Batch 0: %v", err)
	}
}

func TestCacheEntries(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		entry, budget gpumem.Bytes
		lo, hi, want  int64
	}{
		{16 << 10, 1 << 30, 0, 2000, 2000},
		{16 << 10, 1 << 30, 0, 0, 65536},
		{1 << 22, 1 << 30, 0, 2000, 256},
		{1 << 22, (1 << 30) - 1, 0, 0, 255},
		{100, -5, 0, 10, 0},
	} {
		got, err := CacheEntries(tt.entry, tt.budget, tt.lo, tt.hi)
		if err != nil || got != tt.want {
			t.Errorf("CacheEntries(%v, %v, %d, %d) = %d, %v; want %d", tt.entry, tt.budget, tt.lo, tt.hi, got, err, tt.want)
		}
	}
	if _, err := CacheEntries(1<<20, 1<<20, 2, 0); !errors.Is(err, gpumem.ErrDoesNotFit) {
		t.Errorf("2 MiB in 1 MiB: %v, want ErrDoesNotFit", err)
	}
	for _, bad := range [][4]int64{{0, 1, 0, 0}, {1, 1, -1, 0}, {1, 1, 0, -1}, {1, 1, 5, 4}} {
		if _, err := CacheEntries(gpumem.Bytes(bad[0]), gpumem.Bytes(bad[1]), bad[2], bad[3]); !errors.Is(err, gpumem.ErrInvalid) {
			t.Errorf("CacheEntries%v: %v, want ErrInvalid", bad, err)
		}
	}
}

// LargestBatch and LongestSeqLen agree with Estimate at the edge.
func TestLargestBatchLongestSeqLen(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Attention: model.Flash, Batch: 1, SeqLen: 2048}
	free := gpumem.Bytes(24 << 30)
	lim := budgetOf(t, free, j, Limits{})
	b, err := LargestBatch(j, free)
	if err != nil {
		t.Fatal(err)
	}
	at := func(batch, seq int) gpumem.Bytes {
		x := j
		x.Batch, x.SeqLen = batch, seq
		n, err := Estimate(x)
		if err != nil {
			t.Fatal(err)
		}
		return n.Device()
	}
	if at(b, 2048) > lim || at(b+1, 2048) <= lim {
		t.Errorf("LargestBatch %d: %v at b, %v at b+1, budget %v", b, at(b, 2048), at(b+1, 2048), lim)
	}
	s, err := LongestSeqLen(j, free)
	if err != nil {
		t.Fatal(err)
	}
	if at(1, s) > lim || at(1, s+1) <= lim {
		t.Errorf("LongestSeqLen %d: %v at s, %v at s+1, budget %v", s, at(1, s), at(1, s+1), lim)
	}
	if _, err := LargestBatch(j, 1<<30); !errors.Is(err, gpumem.ErrDoesNotFit) {
		t.Errorf("1 GiB: %v, want ErrDoesNotFit", err)
	}
}

// BenchmarkAllocate plans a Llama-2-70B fine-tune on an 80 GB GPU over
// every knob: kernels, checkpointing, 8-bit AdamW and Adafactor, bf16,
// offload, LoRA, a target global batch.
func BenchmarkAllocate(b *testing.B) {
	m := lookupModel(b, "llama-2-70b", nil)
	lora := lookupModel(b, "llama-2-70b", func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 16} })
	qlora := lookupModel(b, "llama-2-70b", func(f *model.Finetune) {
		f.LoRA = model.LoRA{Rank: 16}
		f.Quant, f.Blockwise = gpumem.NF4, gpumem.Blockwise{Nested: true}
	})
	j := Job{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.Eager, Batch: 4, SeqLen: 4096}
	lim := &Limits{
		TargetGlobalBatch: 256,
		Attention:         []model.Attention{model.SDPA, model.Flash},
		Checkpointing:     []model.Checkpointing{model.SelectiveCheckpointing, model.FullCheckpointing},
		Optimizers:        []optimizer.Optimizer{optimizer.AdamW8bit{}, optimizer.Adafactor{}},
		Precisions:        []Precision{BF16},
		Offload:           OffloadOptimizer,
		Models:            []Alternative{{"LoRA r=16", lora}, {"QLoRA r=16", qlora}},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Allocate(80<<30, j, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// A candidate whose estimate overflows int64 does not fit: Allocate keeps
// searching below it and answers with the longest sequence that fits
// (issue 17: plan --max-seq 10000000 failed with the overflow error).
func TestAllocateOverflowDoesNotFit(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3-8b", nil)
	for _, c := range []struct {
		name string
		job  Job
		free gpumem.Bytes
	}{
		{"prefill on 1000 GiB", Job{Model: m, Mode: Prefill, Precision: BF16, Attention: model.SDPA, Batch: 1, SeqLen: 2048}, 1000 << 30},
		{"training on 1000 GiB", Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Attention: model.Flash,
			Checkpointing: model.FullCheckpointing, Batch: 1, SeqLen: 2048}, 1000 << 30},
		// So much memory that only the overflow bounds the answer.
		{"prefill on 4 EiB", Job{Model: m, Mode: Prefill, Precision: BF16, Attention: model.SDPA, Batch: 1, SeqLen: 2048}, 1 << 62},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const limit = 10_000_000
			lim := Limits{MinBatch: 1, MaxBatch: 1, MaxSeqLen: limit}
			p, err := Allocate(c.free, c.job, &lim)
			if err != nil {
				t.Fatalf("Allocate with MaxSeqLen %d: %v", limit, err)
			}
			budget := budgetOf(t, c.free, c.job, lim)
			if p.Need.Device() > budget || p.SeqLen < 1 || p.SeqLen > limit {
				t.Fatalf("seq %d needs %v, budget %v", p.SeqLen, p.Need.Device(), budget)
			}
			if p.SeqLen < limit {
				x := p.Job
				x.SeqLen++
				if n, err := Estimate(x); err == nil && n.Device() <= budget {
					t.Errorf("seq %d fits too (%v of %v)", x.SeqLen, n.Device(), budget)
				}
			}
		})
	}
}

// One definition of what fits: FitsWithHeadroom is the test Allocate,
// LargestBatch and LongestSeqLen apply by default, DefaultHeadroom the memory it
// leaves, and Plan.MinHeadroom says what was left.
func TestFitsWithHeadroomIsAllocates(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3.2-1b", nil)
	j := Job{Model: m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW{}, Attention: model.Flash, Batch: 1, SeqLen: 2048}
	dev := gpumem.Device{Name: "test", Capacity: 24 << 30, Used: 1 << 30}
	free := dev.Free()
	if h := DefaultHeadroom(free); h != gpumem.Bytes(DefaultHeadroomFraction*float64(free)) || h <= 0 {
		t.Fatalf("DefaultHeadroom(%v) = %v", free, h)
	}
	if h := DefaultHeadroom(-5); h != 0 {
		t.Errorf("DefaultHeadroom(-5) = %v, want 0", h)
	}
	if got, want := (*Limits)(nil).HeadroomFor(free), DefaultHeadroom(free); got != want {
		t.Errorf("nil Limits: headroom %v, want %v", got, want)
	}
	if got, want := (&Limits{HeadroomFraction: -1, Headroom: 1 << 30}).HeadroomFor(free), gpumem.Bytes(1<<30); got != want {
		t.Errorf("1 GiB, no fraction: headroom %v, want %v", got, want)
	}
	at := func(batch, seq int) Breakdown {
		x := j
		x.Batch, x.SeqLen = batch, seq
		n, err := Estimate(x)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	b, err := LargestBatch(j, free)
	if err != nil {
		t.Fatal(err)
	}
	s, err := LongestSeqLen(j, free)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		in, out Breakdown
	}{{"LargestBatch", at(b, 2048), at(b+1, 2048)}, {"LongestSeqLen", at(1, s), at(1, s+1)}} {
		if _, ok := FitsWithHeadroom(c.in, dev); !ok {
			t.Errorf("%s: its answer does not fit with the headroom", c.name)
		}
		short, ok := FitsWithHeadroom(c.out, dev)
		if ok || short != c.out.Device()+DefaultHeadroom(free)-free {
			t.Errorf("%s: one more fits (%v) or the shortfall %v does not count the headroom", c.name, ok, short)
		}
	}
	p, err := Allocate(free, j, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.MinHeadroom != DefaultHeadroom(free) || p.Headroom < p.MinHeadroom {
		t.Errorf("plan: MinHeadroom %v, Headroom %v, want %v and at least that", p.MinHeadroom, p.Headroom, DefaultHeadroom(free))
	}
	// Extreme sizes saturate instead of wrapping.
	if s, ok := FitsWithHeadroom(Breakdown{Weights: math.MaxInt64}, gpumem.Device{Capacity: 1, Used: 5}); ok || s != math.MaxInt64 {
		t.Errorf("a saturated need on an over-committed device: %v, %v", s, ok)
	}
	if h := (&Limits{Headroom: math.MaxInt64}).HeadroomFor(1 << 40); h != math.MaxInt64 {
		t.Errorf("8 EiB + 5%%: headroom %v, want saturated", h)
	}
	if h := (&Limits{HeadroomFraction: 2}).HeadroomFor(math.MaxInt64); h != math.MaxInt64 {
		t.Errorf("a fraction of 2 of 8 EiB: headroom %v, want saturated", h)
	}
	if DefaultMaxSeqLen != 1<<20 {
		t.Errorf("DefaultMaxSeqLen = %d", DefaultMaxSeqLen)
	}
}

// qloraJob is Llama-3.1-8B QLoRA (r=16, NF4 with double quantization)
// with AdamW under bf16 autocast, SDPA, batch 1 × 2048: it fits a 40 GB
// A100 as given, without checkpointing.
func qloraJob(t testing.TB) (Job, gpumem.Bytes) {
	m := lookupModel(t, "llama-3.1-8b", func(f *model.Finetune) {
		f.LoRA = model.LoRA{Rank: 16}
		f.Quant, f.Blockwise = gpumem.NF4, gpumem.Blockwise{Nested: true}
	})
	d, ok := gpumem.LookupDevice("a100-40gb")
	if !ok {
		t.Fatal("a100-40gb not in the catalog")
	}
	return Job{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.SDPA,
		Batch: 1, SeqLen: 2048, Device: d}, d.Free()
}

// Asked for the longest sequence (issue 18, item 10), the planner takes
// checkpointing because it lengthens the sequence, although the job as
// given fits without it; the ladder says what each rung reaches.
func TestAllocateMaximizeSeqLen(t *testing.T) {
	t.Parallel()
	j, free := qloraJob(t)
	lim := Limits{MaxSeqLen: 32768}
	p, err := Allocate(free, j, &lim)
	if err != nil {
		t.Fatal(err)
	}
	fit := lim
	fit.Objective = FitAsGiven
	q, err := Allocate(free, j, &fit)
	if err != nil {
		t.Fatal(err)
	}
	if p.Objective != MaximizeSeqLen || q.Objective != FitAsGiven {
		t.Fatalf("objectives %v and %v, want max-seq (inferred from MaxSeqLen) and fit", p.Objective, q.Objective)
	}
	if q.Checkpointing != model.NoCheckpointing {
		t.Errorf("FitAsGiven: checkpointing %v, want none (the job as given fits)", q.Checkpointing)
	}
	if p.Checkpointing != model.FullCheckpointing || p.SeqLen < 3*q.SeqLen {
		t.Errorf("MaximizeSeqLen: %d tokens with checkpointing %v; want full checkpointing and at least 3 × the %d tokens without",
			p.SeqLen, p.Checkpointing, q.SeqLen)
	}
	// The ladder: the job as given reaches FitAsGiven's answer, the
	// checkpointing rung the plan's.
	if len(p.Ladder) != 2 || p.Ladder[0].LongestSeqLen != q.SeqLen || p.Ladder[1].LongestSeqLen != p.SeqLen || !p.Ladder[1].Applied {
		t.Errorf("ladder %+v, want as given at %d and checkpointing at %d, applied", p.Ladder, q.SeqLen, p.SeqLen)
	}
	if q.Ladder[0].LongestSeqLen != 0 || q.Ladder[1].Applied {
		t.Errorf("FitAsGiven ladder %+v: no maximum searched, checkpointing not applied", q.Ladder)
	}
	// The answer is the edge: one more token does not fit.
	b := budgetOf(t, free, j, lim)
	x := p.Job
	x.SeqLen++
	if n, err := Estimate(x); err != nil || n.Device() <= b || p.Need.Device() > b {
		t.Errorf("seq %d needs %v, %d needs %v, budget %v", p.SeqLen, p.Need.Device(), x.SeqLen, n.Device(), b)
	}
	if !strings.Contains(p.String(), "longest seq") || !strings.Contains(p.String(), "objective: the longest sequence") {
		t.Errorf("Plan.String() does not show the maximum:\n%s", p)
	}
}

// A maximum that the job reaches without a change takes no change.
func TestAllocateMaximizeAtLimit(t *testing.T) {
	t.Parallel()
	j, free := qloraJob(t)
	p, err := Allocate(free, j, &Limits{MaxSeqLen: 2560})
	if err != nil {
		t.Fatal(err)
	}
	if p.SeqLen != 2560 || p.Checkpointing != model.NoCheckpointing || p.Ladder[0].LongestSeqLen != 2560 || p.Ladder[1].Applied {
		t.Errorf("plan %d tokens, checkpointing %v, ladder %+v; want 2560 as given, without checkpointing", p.SeqLen, p.Checkpointing, p.Ladder)
	}
}

// MaximizeBatch takes the rung with the largest batch.
func TestAllocateMaximizeBatch(t *testing.T) {
	t.Parallel()
	j, free := qloraJob(t)
	p, err := Allocate(free, j, &Limits{Objective: MaximizeBatch})
	if err != nil {
		t.Fatal(err)
	}
	q, err := Allocate(free, j, &Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if q.Objective != FitAsGiven || q.Checkpointing != model.NoCheckpointing {
		t.Errorf("default limits: objective %v, checkpointing %v; want fit without checkpointing", q.Objective, q.Checkpointing)
	}
	if p.Checkpointing != model.FullCheckpointing || p.Batch <= q.Batch {
		t.Errorf("MaximizeBatch: batch %d with checkpointing %v; want full checkpointing and more than %d", p.Batch, p.Checkpointing, q.Batch)
	}
	if last := p.Ladder[len(p.Ladder)-1]; last.LargestBatch != p.Batch || p.Ladder[0].LargestBatch != q.Batch {
		t.Errorf("ladder %+v: want the batch without changes %d and with them %d", p.Ladder, q.Batch, p.Batch)
	}
}

// A job that does not ask for a maximum plans as FitAsGiven does, with
// no maximum in its ladder.
func TestAllocateObjectiveDefault(t *testing.T) {
	t.Parallel()
	for _, c := range allocCases(t) {
		if c.lim.MaxSeqLen > c.lim.MinSeqLen {
			continue // asks for the longest sequence
		}
		for _, gib := range []float64{8, 24, 80} {
			free := gpumem.Bytes(gib * (1 << 30))
			fit := c.lim
			fit.Objective = FitAsGiven
			p, err1 := Allocate(free, c.job, &c.lim)
			q, err2 := Allocate(free, c.job, &fit)
			if (err1 == nil) != (err2 == nil) {
				t.Fatalf("%s in %v: %v vs %v", c.name, free, err1, err2)
			}
			if err1 != nil {
				continue
			}
			if p.Objective != FitAsGiven || p.Batch != q.Batch || p.SeqLen != q.SeqLen || p.Need != q.Need || len(p.Ladder) != len(q.Ladder) {
				t.Errorf("%s in %v: default plan %d×%d (%v) differs from FitAsGiven %d×%d", c.name, free, p.Batch, p.SeqLen, p.Objective, q.Batch, q.SeqLen)
			}
			for i := range p.Ladder {
				if p.Ladder[i] != q.Ladder[i] || p.Ladder[i].LongestSeqLen != 0 || p.Ladder[i].LargestBatch != 0 {
					t.Errorf("%s in %v: rung %d %+v vs %+v", c.name, free, i, p.Ladder[i], q.Ladder[i])
				}
			}
		}
	}
}

// AllocateFleet keeps the objective: the layout's rung carries the
// longest sequence under it, and the plan's is the last rung's.
func TestAllocateFleetMaximizeSeqLen(t *testing.T) {
	t.Parallel()
	m := lookupModel(t, "llama-3-8b", nil)
	d, _ := gpumem.LookupDevice("a100-40gb")
	j := Job{Model: m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.Flash, Batch: 1, SeqLen: 2048, Device: d}
	p, err := AllocateFleet(Fleet{Nodes: 1, GPUsPerNode: 8, Free: d.Free()}, j, &Limits{MaxSeqLen: 65536})
	if err != nil {
		t.Fatal(err)
	}
	var layout, last Rung
	for _, r := range p.Ladder {
		if r.Applied && strings.HasPrefix(r.Change, "layout ") {
			layout = r
		}
		if r.Applied {
			last = r
		}
	}
	if p.Objective != MaximizeSeqLen || layout.LongestSeqLen == 0 || last.LongestSeqLen != p.SeqLen || p.Checkpointing != model.FullCheckpointing || p.SeqLen <= layout.LongestSeqLen {
		t.Errorf("plan %d tokens (%v, checkpointing %v); layout rung %+v, last rung %+v", p.SeqLen, p.Objective, p.Checkpointing, layout, last)
	}
}
