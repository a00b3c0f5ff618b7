package budget

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
)

// The differential tests compare Estimate, Allocate and AllocateFleet on
// a grid of jobs with the answers recorded in testdata/differential
// before the estimate path was restructured for speed (precomputed
// per-Model figures, the optimizer's figures kept per optimizer and
// dtype, AllocateFleet's lower bound): every Breakdown field, every plan
// and every error must be the same, byte for byte. Run with
// -update-differential to record them again (only for a change that is
// meant to move a figure, and say so in its commit).
var updateDifferential = flag.Bool("update-differential", false, "rewrite testdata/differential")

// formatValue prints v with every integer in full (gpumem.Bytes'
// String rounds) and every field named, recursively; Models and Jobs
// are left out (a Model prints addresses, and a Job's fields grow with
// every runtime; formatPlan prints the Plan's Job's knobs).
func formatValue(b *strings.Builder, v reflect.Value) {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		fmt.Fprintf(b, "%d", v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		fmt.Fprintf(b, "%d", v.Uint())
	case reflect.Bool:
		fmt.Fprintf(b, "%t", v.Bool())
	case reflect.Float32, reflect.Float64:
		fmt.Fprintf(b, "%v", v.Float())
	case reflect.String:
		fmt.Fprintf(b, "%q", v.String())
	case reflect.Array, reflect.Slice:
		b.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b.WriteByte(' ')
			}
			formatValue(b, v.Index(i))
		}
		b.WriteByte(']')
	case reflect.Struct:
		b.WriteByte('{')
		t := v.Type()
		n := 0
		for i := 0; i < v.NumField(); i++ {
			if ft := t.Field(i).Type; ft == reflect.TypeOf(Model{}) || ft == reflect.TypeOf(Job{}) {
				continue // addresses; a Plan's Job is printed by formatPlan
			}
			if n > 0 {
				b.WriteByte(' ')
			}
			n++
			b.WriteString(t.Field(i).Name)
			b.WriteByte(':')
			formatValue(b, v.Field(i))
		}
		b.WriteByte('}')
	case reflect.Interface:
		if v.IsNil() {
			b.WriteString("nil")
			return
		}
		fmt.Fprintf(b, "%T", v.Elem().Interface())
		formatValue(b, v.Elem())
	default:
		fmt.Fprintf(b, "<%s>", v.Kind())
	}
}

func formatAny(x any) string {
	var b strings.Builder
	formatValue(&b, reflect.ValueOf(x))
	return b.String()
}

// formatResult prints a Breakdown or a Plan and the error, with an
// InsufficientMemoryError's fields.
func formatResult(x any, err error) string {
	if err != nil {
		s := "error " + err.Error()
		var ime *InsufficientMemoryError
		if errors.As(err, &ime) {
			s += " " + formatAny(*ime)
		}
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			s += " field " + fe.Field
		}
		return s
	}
	return formatAny(x)
}

// formatPlan prints what a Plan decides: every field but the Job (whose
// Model prints addresses), and the Job's layout and knobs.
func formatPlan(p Plan, err error) string {
	if err != nil {
		return formatResult(nil, err)
	}
	j := p.Job
	return formatAny(p) + fmt.Sprintf(" job{%s %s %d %d %d %v %v %s} par%s", j.Mode, j.Precision, j.Batch, j.SeqLen, j.GradAccum,
		j.Checkpointing, j.Attention, formatAny(j.Optimizer), formatAny(j.Parallel))
}

type diffModel struct {
	name string
	m    Model
}

func differentialModels(t testing.TB) []diffModel {
	lora := func(f *model.Finetune) { f.LoRA = model.LoRA{Rank: 16} }
	qlora := func(f *model.Finetune) {
		f.LoRA = model.LoRA{Rank: 16}
		f.Quant, f.Blockwise = gpumem.NF4, gpumem.Blockwise{Nested: true}
	}
	return []diffModel{
		{"gpt2", lookupModel(t, "gpt2", nil)},
		{"qwen2.5-0.5b", lookupModel(t, "qwen2.5-0.5b", nil)},
		{"llama-3.2-1b lora", lookupModel(t, "llama-3.2-1b", lora)},
		{"llama-2-70b", lookupModel(t, "llama-2-70b", nil)},
		{"llama-2-70b qlora", lookupModel(t, "llama-2-70b", qlora)},
		{"t5-base", lookupModel(t, "t5-base", nil)},
		{"mixtral-8x7b", lookupModel(t, "mixtral-8x7b", nil)},
		{"bert-base", lookupModel(t, "bert-base", nil)},
	}
}

var differentialLayouts = []Parallel{
	{},
	{DataParallel: 8},
	{DataParallel: 8, Stage: 1},
	{DataParallel: 8, Stage: 2},
	{DataParallel: 8, Stage: 3},
	{DataParallel: 8, Stage: 3, FSDP: true},
	{DataParallel: 8, Stage: 2, FSDP: true},
	{DataParallel: 16, Stage: 3, FSDP: true, ShardGroup: 8, GPUsPerNode: 8},
	{DataParallel: 2, Stage: 1, TensorParallel: 4, SequenceParallel: true},
	{DataParallel: 2, Stage: 1, TensorParallel: 2, PipelineParallel: 2},
	{DataParallel: 2, Stage: 1, TensorParallel: 8, SequenceParallel: true, PipelineParallel: 4, GPUsPerNode: 8},
	{DataParallel: 2, Stage: 1, PipelineParallel: 4, VirtualStages: 2},
	{DataParallel: 4, Stage: 1, ContextParallel: 2, TensorParallel: 2},
	{DataParallel: 8, Stage: 1, ExpertParallel: 8},
	{DataParallel: 8, Stage: 3, ExpertParallel: 4},
}

var differentialOptimizers = []optimizer.Optimizer{
	optimizer.AdamW{}, optimizer.AdamW{Impl: optimizer.Fused}, optimizer.AdamW8bit{Paged: true},
	optimizer.Adafactor{}, optimizer.Muon{}, optimizer.SGD{}, nil,
}

// differentialJobs is the grid: every model, layout, precision and
// optimizer in training, then inference, generation and load, then the
// knobs that change the composition (accumulation, offload, steps in
// backward, held steps, checkpointing, kernels, loss, frozen copies).
func differentialJobs(t testing.TB) (names []string, jobs []Job) {
	add := func(name string, j Job) { names, jobs = append(names, name), append(jobs, j) }
	for _, dm := range differentialModels(t) {
		base := Job{Model: dm.m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.Flash,
			Batch: 2, SeqLen: 512}
		for li, par := range differentialLayouts {
			for _, prec := range []Precision{FP32, BF16Mixed, BF16Master, BF16, FP8} {
				for oi, opt := range differentialOptimizers {
					j := base
					j.Parallel, j.Precision, j.Optimizer = par, prec, opt
					add(fmt.Sprintf("%s train layout%d %s opt%d", dm.name, li, prec, oi), j)
				}
			}
			for _, mode := range []Mode{Prefill, Generation, Load} {
				j := base
				j.Parallel, j.Mode, j.Optimizer, j.Precision = par, mode, nil, BF16
				if mode == Generation {
					j.Generate = 128
				}
				add(fmt.Sprintf("%s %s layout%d", dm.name, mode, li), j)
			}
			for ki, knob := range []func(*Job){
				func(j *Job) { j.GradAccum = 8 },
				func(j *Job) { j.Offload = OffloadOptimizer },
				func(j *Job) { j.Offload = OffloadOptimizer | OffloadParams; j.Parallel.Stage = 3 },
				func(j *Job) { j.OptimizerInBackward = true },
				func(j *Job) { j.HoldsPreviousStep = true; j.KeepLogits = true },
				func(j *Job) { j.Checkpointing = model.FullCheckpointing },
				func(j *Job) { j.Checkpointing = model.SelectiveCheckpointing; j.Attention = model.Eager },
				func(j *Job) { j.Attention = model.SDPA; j.Batch, j.SeqLen = 1, 4096 },
				func(j *Job) { j.Loss = model.Loss{Kind: model.ChunkedLoss} },
				func(j *Job) { j.Gradients = InputGradients; j.Optimizer = nil },
				func(j *Job) { j.Gradients = NoStep },
				func(j *Job) { j.Copies = []Copy{{Name: "reference", Model: dm.m}}; j.Offload = OffloadCopies },
				func(j *Job) { j.OffloadActivations = true },
				func(j *Job) { j.Precision = FP16Mixed; j.Dropout = true },
			} {
				j := base
				j.Parallel = par
				knob(&j)
				add(fmt.Sprintf("%s knob%d layout%d", dm.name, ki, li), j)
			}
		}
	}
	return names, jobs
}

// checkRecorded compares got with the lines of testdata/differential/<file>.gz
// (or records them).
func checkRecorded(t *testing.T, file string, names, got []string) {
	t.Helper()
	path := "testdata/differential/" + file + ".gz"
	if *updateDifferential {
		var b bytes.Buffer
		z, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		for i := range got {
			fmt.Fprintf(z, "%s\t%s\n", names[i], got[i])
		}
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll("testdata/differential", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	sc := bufio.NewScanner(z)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, res, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			t.Fatalf("%s: line %q has no tab", path, sc.Text())
		}
		want[name] = res
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Errorf("%s records %d cases, the grid has %d", path, len(want), len(got))
	}
	bad := 0
	for i := range got {
		w, ok := want[names[i]]
		if !ok {
			t.Errorf("%s: no recorded answer", names[i])
		} else if w != got[i] {
			bad++
			if bad <= 10 {
				t.Errorf("%s:\n got %s\nwant %s", names[i], got[i], w)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d cases differ from %s", bad, len(got), path)
	}
}

// TestEstimateDifferential: every Breakdown (and error) of the grid is
// the one recorded.
func TestEstimateDifferential(t *testing.T) {
	names, jobs := differentialJobs(t)
	got := make([]string, len(jobs))
	errs := 0
	for i, j := range jobs {
		b, err := Estimate(j)
		if err != nil {
			errs++
		}
		got[i] = formatResult(b, err)
	}
	// The grid must mostly estimate: a grid of errors compares nothing.
	if errs*2 > len(jobs) {
		t.Errorf("%d of %d jobs fail", errs, len(jobs))
	}
	checkRecorded(t, "estimate.txt", names, got)
}

// differentialPlanJobs is a smaller grid for Allocate and AllocateFleet:
// a training, a LoRA and an inference job per model, with Limits that
// open every knob.
func differentialPlanJobs(t testing.TB) (names []string, jobs []Job, lims []*Limits) {
	ms := differentialModels(t)
	lora := ms[2].m
	for _, dm := range ms {
		for ji, j := range []Job{
			{Model: dm.m, Mode: Training, Precision: BF16Mixed, Optimizer: optimizer.AdamW{}, Attention: model.Eager, Batch: 4, SeqLen: 1024},
			{Model: dm.m, Mode: Training, Precision: BF16, Optimizer: optimizer.AdamW8bit{}, Attention: model.Flash, Batch: 1, SeqLen: 2048,
				Checkpointing: model.FullCheckpointing},
			{Model: dm.m, Mode: Generation, Precision: BF16, Attention: model.SDPA, Batch: 8, SeqLen: 1024, Generate: 256},
		} {
			for li, lim := range []*Limits{
				nil,
				{
					TargetGlobalBatch: 64,
					Attention:         []model.Attention{model.SDPA, model.Flash},
					Checkpointing:     []model.Checkpointing{model.SelectiveCheckpointing, model.FullCheckpointing},
					Optimizers:        []optimizer.Optimizer{optimizer.AdamW8bit{}, optimizer.Adafactor{}},
					Precisions:        []Precision{BF16},
					Offload:           OffloadOptimizer,
					Models:            []Alternative{{"LoRA r=16", lora}},
				},
			} {
				if j.Mode != Training && lim != nil {
					lim = &Limits{Attention: lim.Attention}
				}
				names = append(names, fmt.Sprintf("%s job%d lim%d", dm.name, ji, li))
				jobs, lims = append(jobs, j), append(lims, lim)
			}
		}
	}
	return names, jobs, lims
}

// TestAllocateDifferential: Allocate's plans on 24 GB and 80 GB are the
// ones recorded.
func TestAllocateDifferential(t *testing.T) {
	names, jobs, lims := differentialPlanJobs(t)
	var gotNames, got []string
	for i, j := range jobs {
		for _, free := range []gpumem.Bytes{24 << 30, 80 << 30} {
			p, err := Allocate(free, j, lims[i])
			gotNames = append(gotNames, fmt.Sprintf("%s free%d", names[i], free>>30))
			got = append(got, formatPlan(p, err))
		}
	}
	checkRecorded(t, "allocate.txt", gotNames, got)
}

// TestAllocateFleetDifferential: AllocateFleet's plans (and ladders,
// with a rung per layout) on fleets from one 24 GB GPU to 4 nodes of 8
// 80 GB GPUs are the ones recorded.
func TestAllocateFleetDifferential(t *testing.T) {
	names, jobs, lims := differentialPlanJobs(t)
	var gotNames, got []string
	for i, j := range jobs {
		for _, f := range []Fleet{{1, 1, 24 << 30}, {1, 8, 24 << 30}, {1, 8, 80 << 30}, {4, 8, 80 << 30}, {2, 4, 40 << 30}} {
			p, err := AllocateFleet(f, j, lims[i])
			gotNames = append(gotNames, fmt.Sprintf("%s fleet%dx%dx%d", names[i], f.Nodes, f.GPUsPerNode, f.Free>>30))
			got = append(got, formatPlan(p, err))
		}
	}
	checkRecorded(t, "fleet.txt", gotNames, got)
}

// TestCannotFit checks AllocateFleet's lower bound on the grid's jobs
// and every layout of its fleets: where cannotFit skips a layout,
// Allocate with the first pass's Limits fails with an
// InsufficientMemoryError whose first rung is the one cannotFit
// returns, and the bound is below the Required of every rung tried.
func TestCannotFit(t *testing.T) {
	_, jobs, lims := differentialPlanJobs(t)
	skipped, tried := 0, 0
	for i, j := range jobs {
		for _, f := range []Fleet{{1, 1, 24 << 30}, {1, 8, 24 << 30}, {1, 8, 80 << 30}, {4, 8, 80 << 30}, {2, 4, 40 << 30}, {1, 2, 16 << 30}} {
			var cheap Limits
			if lims[i] != nil {
				cheap = *lims[i]
			}
			cheap.Optimizers, cheap.Precisions, cheap.Offload, cheap.Models = nil, nil, 0, nil
			for _, par := range Layouts(f, j) {
				jl := j
				jl.Parallel = par
				tried++
				r, skip := cannotFit(f.Free, jl, &cheap)
				if !skip {
					continue
				}
				skipped++
				_, err := Allocate(f.Free, jl, &cheap)
				var ime *InsufficientMemoryError
				if !errors.As(err, &ime) {
					t.Errorf("%s on %s: cannotFit, but Allocate answers %v", j.Model.spec.Name, par.Describe(), err)
					continue
				}
				if formatAny(ime.Ladder[0]) != formatAny(r) {
					t.Errorf("%s on %s: first rung %s, cannotFit's %s", j.Model.spec.Name, par.Describe(), formatAny(ime.Ladder[0]), formatAny(r))
				}
				bound, _ := statesBound(&jl)
				for _, rung := range ime.Ladder {
					if rung.Fits || rung.Device < bound {
						t.Errorf("%s on %s: rung %q (device %d) under the bound %d", j.Model.spec.Name, par.Describe(), rung.Change, rung.Device, bound)
					}
				}
			}
		}
	}
	t.Logf("%d of %d layouts skipped", skipped, tried)
	if skipped == 0 || skipped == tried {
		t.Errorf("%d of %d layouts skipped: the grid does not test the bound", skipped, tried)
	}
}
