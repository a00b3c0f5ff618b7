package main

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/request"
)

// pipeline answers POST /v1/pipeline with the estimate gpumem estimate
// --pipeline --json prints.
func (s *server) pipeline(out io.Writer, r *http.Request, body []byte) error {
	req := request.Pipeline{Batch: s.defaults.Batch, Optimizer: s.defaults.Opt, Attention: s.defaults.Attn,
		Checkpointing: s.defaults.Ckpt, GradAccum: s.defaults.Accum}
	if err := request.DecodeStrict(body, &req); err != nil {
		return err
	}
	if _, ok := model.LookupPipeline(req.Pipeline); !ok {
		return request.BadField("pipeline", "pipeline %q: want a catalog pipeline (%s)", req.Pipeline, strings.Join(model.PipelineNames(), ", "))
	}
	jf := s.defaults
	switch strings.ToLower(req.Mode) {
	case "train", "training":
		jf.Train = true
	case "infer", "inference", "":
		jf.Infer = true
	default:
		return request.BadField("mode", "mode %q: want train or infer", req.Mode)
	}
	jf.Batch, jf.Accum, jf.Precision, jf.Opt, jf.Attn, jf.Ckpt = req.Batch, req.GradAccum, req.Precision, req.Optimizer, req.Attention, req.Checkpointing
	jf.LoRARank, jf.GPU = req.LoRARank, req.GPU
	jf.LoRATargets = strings.Join(req.LoRATargets, ",")
	mem, err := request.SizeText("memory", req.Memory)
	if err != nil {
		return err
	}
	if mem != "" {
		if err := request.CheckTarget("memory", mem); err != nil {
			return err
		}
		jf.Memory = mem
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
	e, err := estimatePipeline(pl, dev, request.DefaultHeadroom(dev.Free()))
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
	if m := request.CLIFlag.FindStringSubmatch(msg); m != nil {
		if f := strings.ReplaceAll(m[1], "-", "_"); request.IsField(f) {
			field = f
		}
	}
	switch field {
	case "train", "infer":
		field = "mode"
	}
	return &request.Error{Status: status, Field: field, Msg: request.ForRequest(msg)}
}
