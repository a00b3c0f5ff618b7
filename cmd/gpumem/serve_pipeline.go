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
	req := pipelineRequest{Batch: s.defaults.Batch, Optimizer: s.defaults.Opt, Attention: s.defaults.Attn,
		Checkpointing: s.defaults.Ckpt, GradAccum: s.defaults.Accum}
	if err := DecodeStrict(body, &req); err != nil {
		return err
	}
	if _, ok := model.LookupPipeline(req.Pipeline); !ok {
		return BadField("pipeline", "pipeline %q: want a catalog pipeline (%s)", req.Pipeline, strings.Join(model.PipelineNames(), ", "))
	}
	jf := s.defaults
	switch strings.ToLower(req.Mode) {
	case "train", "training":
		jf.Train = true
	case "infer", "inference", "":
		jf.Infer = true
	default:
		return BadField("mode", "mode %q: want train or infer", req.Mode)
	}
	jf.Batch, jf.Accum, jf.Precision, jf.Opt, jf.Attn, jf.Ckpt = req.Batch, req.GradAccum, req.Precision, req.Optimizer, req.Attention, req.Checkpointing
	jf.LoRARank, jf.GPU = req.LoRARank, req.GPU
	jf.LoRATargets = strings.Join(req.LoRATargets, ",")
	mem, err := SizeText("memory", req.Memory)
	if err != nil {
		return err
	}
	if mem != "" {
		if err := CheckTarget("memory", mem); err != nil {
			return err
		}
		jf.Memory = mem
	}
	pf := pipelineFlags{pipeline: req.Pipeline, resolution: req.Resolution, height: req.Height, width: req.Width,
		guidance: 7.5, cpuOffload: req.CPUOffload, vaeSlicing: req.VAESlicing, vaeTiling: req.VAETiling,
		cacheLatents: req.CacheLatents, precomputeText: req.PrecomputeText, frozenDType: req.FrozenDType, vaeDType: req.VAEDType}
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
	e, err := estimatePipeline(pl, dev, DefaultHeadroom(dev.Free()))
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
	if m := CLIFlag.FindStringSubmatch(msg); m != nil {
		if f := strings.ReplaceAll(m[1], "-", "_"); requestFields[f] {
			field = f
		}
	}
	switch field {
	case "train", "infer":
		field = "mode"
	}
	return &Error{Status: status, Field: field, Msg: ForRequest(msg)}
}
