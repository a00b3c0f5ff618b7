package request

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
)

// DefaultCacheSize bounds the models a Cache keeps prepared, and the
// catalog models it keeps looked up, unless NewCache is told otherwise.
// A Model holds its tensor groups, not its tensors: 4.2 KB on average
// over 48 catalog models with LoRA (heap after GC), so about 1 MB when
// full.
const DefaultCacheSize = 256

// Cache turns estimate requests into jobs, keeping the models it has
// prepared (budget.NewModel, most of a request's time), the catalog
// models it has looked up and the inline config.json it has read (by
// their bytes' SHA-256), the least recently used dropped first. It is
// safe for concurrent use: budget.Model is immutable, and every request
// builds its own job. The zero Cache is not usable; call NewCache.
type Cache struct {
	models  modelCache
	specs   specCache
	configs lru[[32]byte, model.Spec] // inline config.json by SHA-256, once CheckModelSize has passed them
}

// NewCache returns a Cache of at most size prepared models, size
// catalog models and size inline configs (DefaultCacheSize when size < 1).
func NewCache(size int) *Cache {
	if size < 1 {
		size = DefaultCacheSize
	}
	c := &Cache{}
	c.models.max, c.specs.max, c.configs.max = size, size, size
	return c
}

// Limit is the most models the cache keeps (NewCache's size).
func (c *Cache) Limit() int { return c.models.limit() }

// Built counts the models the cache has built (budget.NewModel calls),
// Looked the catalog look-ups (model.Lookup calls); Models and Specs are
// the entries it holds. They are for tests and metrics.
func (c *Cache) Built() int64  { return c.models.built.Load() }
func (c *Cache) Looked() int64 { return c.specs.looked.Load() }
func (c *Cache) Models() int   { return c.models.len() }
func (c *Cache) Specs() int    { return c.specs.len() }

// Prepared is an estimate request ready to estimate: the command line's
// flags it stands for, the job and the device it names.
type Prepared struct {
	// Flags are the request as the estimate flags would hold it.
	Flags Flags
	// Job is the job, its Model taken from the cache.
	Job budget.Job
	// Device is the GPU of the request's gpu, or its memory on an
	// unnamed device; Capacity is zero when it gave neither.
	Device gpumem.Device
}

// Check checks a decoded request field by field and returns the flags
// it stands for, the model it names (looked up in the catalog, read
// from its inline config.json or checkpoint header) and where the model
// comes from, the key of the cache. Every error is an *Error naming the
// request field.
func (c *Cache) Check(req Estimate) (Flags, model.Spec, string, error) {
	f, spec, err := c.flagsFrom(req)
	if err != nil {
		return f, spec, "", err
	}
	return f, spec, modelSource(req), nil
}

// JobWith builds the job of checked flags f for spec from source (what
// Check returned), with the model from the cache. Every error is an
// *Error naming the request field.
func (c *Cache) JobWith(f *Flags, spec model.Spec, source string) (budget.Job, gpumem.Device, error) {
	j, dev, err := f.JobWith(spec, c.models.prepare(source, f))
	if err != nil {
		return j, dev, LibraryError(err, JobFields(*f))
	}
	return j, dev, nil
}

// Prepare checks req and builds its job: Check, then JobWith. A second
// request for the same model and fine-tuning setup takes the model from
// the cache, so that it costs the checks and the job's few fields.
func (c *Cache) Prepare(req Estimate) (Prepared, error) {
	f, spec, source, err := c.Check(req)
	if err != nil {
		return Prepared{Flags: f}, err
	}
	j, dev, err := c.JobWith(&f, spec, source)
	return Prepared{Flags: f, Job: j, Device: dev}, err
}

// Evaluate estimates the prepared job and checks its fit on its device
// (Evaluate); an error is an *Error naming the request field.
func (p *Prepared) Evaluate() (Result, error) {
	r, err := Evaluate(p.Job, p.Device)
	if err != nil {
		return r, LibraryError(err, JobFields(p.Flags))
	}
	return r, nil
}

// modelSource names where a checked request's model comes from: the
// catalog name as given, or the SHA-256 of the inline config.json's
// bytes (the exact bytes, spaces around them trimmed as flagsFrom trims
// them: model.FromHFConfig reads nothing else, so the same bytes give
// the same model.Spec).
func modelSource(req Estimate) string {
	if req.Model != "" {
		return "model\x00" + req.Model
	}
	if len(req.Safetensors) > 0 || len(req.GGUF) > 0 {
		h := sha256.New()
		h.Write(req.Safetensors)
		h.Write(req.GGUF)
		fmt.Fprintf(h, "\x00%d\x00%d\x00%d", len(req.Safetensors), req.SafetensorsSize, req.GGUFSize)
		return "checkpoint\x00" + string(h.Sum(nil))
	}
	sum := sha256.Sum256(bytes.TrimSpace(req.Config))
	return "config\x00" + string(sum[:])
}

// modelKey is everything a model prepared by JobFor depends on: the
// model's source (modelSource), the head and labels that change its
// Spec, and every field of the model.Finetune that JobFor fills
// (TestModelKeyCoversFinetune fails when model.Finetune or model.LoRA
// gains a field, so that the key follows).
type modelKey struct {
	source      string
	head        string
	labels      int
	imageSize   int
	rank        int64
	targets     string // LoRA.Targets joined by NUL
	loraDType   gpumem.DType
	quant       gpumem.DType
	quantHead   bool
	method      string
	groupSize   int64
	unquantized gpumem.DType
	compute     gpumem.DType
	unfused     bool
	keepsInputs bool
	quantFrom   gpumem.DType
	blockwise   gpumem.Blockwise
	fp8Block    [2]int64
	// trainNone: Finetune.Train is set, which JobFor does for one
	// function only, training nothing (--frozen with --quant). No two
	// valid requests differ in it alone today (without frozen, a
	// quantized training job needs LoRA); it keeps the key exact.
	trainNone bool
}

// modelCache keeps the models the service has prepared, the least
// recently used dropped first once it holds max of them, so that a
// second request for the same model and fine-tuning setup skips
// budget.NewModel (most of an estimate request's time). It is safe for
// concurrent use; two requests that miss on the same key at once both
// build the model, and the first one stored is kept.
type modelCache struct {
	lru[modelKey, budget.Model]
	built atomic.Int64 // budget.NewModel calls, for tests
}

// prepare returns the function JobWith calls to turn the Finetune that
// f describes into a budget.Model for a model from source.
func (c *modelCache) prepare(source string, f *Flags) func(model.Finetune) (budget.Model, error) {
	return func(ft model.Finetune) (budget.Model, error) {
		k := modelKey{source: source, head: f.Head, labels: f.Labels, imageSize: f.ImageSize,
			rank: ft.LoRA.Rank, targets: strings.Join(ft.LoRA.Targets, "\x00"), loraDType: ft.LoRA.DType,
			quant: ft.Quant, quantHead: ft.QuantizeHead, method: ft.Method, groupSize: ft.GroupSize, unquantized: ft.Unquantized,
			compute: ft.ComputeDType, unfused: ft.Unfused, keepsInputs: ft.KeepsInputs, quantFrom: ft.QuantFrom,
			blockwise: ft.Blockwise, fp8Block: ft.FP8Block,
			trainNone: ft.Train != nil}
		if m, ok := c.get(k); ok {
			return m, nil
		}
		c.built.Add(1)
		m, err := budget.NewModel(ft)
		if err != nil {
			return m, err // not kept: the error is cheap to find again
		}
		return c.put(k, m), nil
	}
}

// specCache keeps the catalog models the service has looked up, by the
// name the request gave, once CheckModelSize has passed them:
// model.Lookup parses the catalog's config.json on every call, and
// CheckModelSize builds the model's tensor runs. A model.Spec is a value
// that JobFor only copies (WithHead, WithLabels), so requests may share
// one.
type specCache struct {
	lru[string, model.Spec]
	looked atomic.Int64 // model.Lookup calls, for tests
}

// SetLimit bounds the cache at n prepared models and n catalog models
// (at least 1); a cache above the bound drops its least recently used
// entries as it stores new ones.
func (c *Cache) SetLimit(n int) {
	c.models.setMax(n)
	c.specs.setMax(n)
	c.configs.setMax(n)
}
