package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// pipelineRequest is the JSON body of POST /v1/pipeline: gpumem
// estimate --pipeline's flags, each named after its flag (--lora-rank is
// lora_rank, --guidance-scale guidance_scale).
type pipelineRequest struct {
	Pipeline       string          `json:"pipeline"`
	Mode           string          `json:"mode"` // train or infer
	Batch          int             `json:"batch"`
	Resolution     int             `json:"resolution"`
	Height         int             `json:"height"`
	Width          int             `json:"width"`
	GradAccum      int             `json:"grad_accum"`
	Precision      string          `json:"precision"`
	Optimizer      string          `json:"optimizer"`
	Attention      string          `json:"attention"`
	Checkpointing  string          `json:"checkpointing"`
	LoRARank       int64           `json:"lora_rank"`
	LoRATargets    []string        `json:"lora_targets"`
	GuidanceScale  *float64        `json:"guidance_scale"`
	CPUOffload     bool            `json:"cpu_offload"`
	VAESlicing     bool            `json:"vae_slicing"`
	VAETiling      bool            `json:"vae_tiling"`
	CacheLatents   bool            `json:"cache_latents"`
	PrecomputeText bool            `json:"precompute_text"`
	FrozenDType    string          `json:"frozen_dtype"`
	VAEDType       string          `json:"vae_dtype"`
	MaxSeqLen      int             `json:"max_sequence_length"`
	GPU            string          `json:"gpu"`
	Memory         json.RawMessage `json:"memory"`
}

// The pipeline request's fields are request fields too: forRequest
// names them for the flags in the shared code's messages.
func init() {
	t := reflect.TypeOf(pipelineRequest{})
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" {
			requestFields[name] = true
		}
	}
}

// pipeline answers POST /v1/pipeline with the estimate gpumem estimate
// --pipeline --json prints.
func (s *server) pipeline(out io.Writer, r *http.Request, body []byte) error {
	req := pipelineRequest{Batch: s.defaults.batch, Optimizer: s.defaults.opt, Attention: s.defaults.attn,
		Checkpointing: s.defaults.ckpt, GradAccum: s.defaults.accum}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	if _, ok := model.LookupPipeline(req.Pipeline); !ok {
		return badField("pipeline", "pipeline %q: want a catalog pipeline (%s)", req.Pipeline, strings.Join(model.PipelineNames(), ", "))
	}
	jf := s.defaults
	switch strings.ToLower(req.Mode) {
	case "train", "training":
		jf.train = true
	case "infer", "inference", "":
		jf.infer = true
	default:
		return badField("mode", "mode %q: want train or infer", req.Mode)
	}
	jf.batch, jf.accum, jf.precision, jf.opt, jf.attn, jf.ckpt = req.Batch, req.GradAccum, req.Precision, req.Optimizer, req.Attention, req.Checkpointing
	jf.loraRank, jf.gpu = req.LoRARank, req.GPU
	jf.loraTargets = strings.Join(req.LoRATargets, ",")
	mem, err := sizeText("memory", req.Memory)
	if err != nil {
		return err
	}
	if mem != "" {
		if err := checkTarget("memory", mem); err != nil {
			return err
		}
		jf.memory = mem
	}
	pf := pipelineFlags{pipeline: req.Pipeline, resolution: req.Resolution, height: req.Height, width: req.Width,
		guidance: 7.5, cpuOffload: req.CPUOffload, vaeSlicing: req.VAESlicing, vaeTiling: req.VAETiling,
		cacheLatents: req.CacheLatents, precomputeText: req.PrecomputeText, frozenDType: req.FrozenDType, vaeDType: req.VAEDType,
		maxSeqLen: req.MaxSeqLen}
	if req.GuidanceScale != nil {
		pf.guidance = *req.GuidanceScale
	}
	d, err := pf.components()
	if err != nil {
		return pipelineRequestError(err)
	}
	pl, dev, err := pf.build(&jf, d)
	if err != nil {
		return pipelineRequestError(err)
	}
	if err := alive(r.Context()); err != nil {
		return err
	}
	s.computed.Add(1)
	e, err := estimatePipeline(pl, dev, defaultHeadroom(dev.Free()))
	if err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			return pipelineRequestError(pipelineFlagError(fe))
		}
		return pipelineRequestError(err)
	}
	return e.writeJSON(out, d, pl)
}

// pipelineRequestError names the request field of a message that names
// a flag (--vae-tiling: vae_tiling).
func pipelineRequestError(err error) error {
	status := http.StatusBadRequest
	if errors.Is(err, gpumem.ErrUnsupported) {
		status = http.StatusUnprocessableEntity
	}
	msg := err.Error()
	field := ""
	if m := cliFlag.FindStringSubmatch(msg); m != nil {
		if f := strings.ReplaceAll(m[1], "-", "_"); requestFields[f] {
			field = f
		}
	}
	switch field {
	case "train", "infer":
		field = "mode"
	}
	return &apiError{status: status, field: field, msg: forRequest(msg)}
}
