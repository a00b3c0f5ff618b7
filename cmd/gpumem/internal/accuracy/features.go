package accuracy

import (
	"slices"
	"strings"

	"github.com/gpumem/gpumem/model"
)

// The real-stack features a case can exercise, as [Features] names them.
// Each names the job field that selects it; a case exercises every
// feature its job sets, and one that sets none is Plain.
const (
	FeatureChunkedLoss    = "loss:chunked"     // loss chunked[:N]: torchtune's CEWithChunkedOutputLoss
	FeatureFusedLoss      = "loss:liger"       // loss liger: Liger-Kernel's fused linear cross entropy
	FeatureCCELoss        = "loss:cce"         // loss cce: Apple's cut cross-entropy
	FeatureLogitsToKeep   = "logits-to-keep"   // logits_to_keep
	FeatureOptimizerInBwd = "optimizer-in-bwd" // optimizer_in_backward
	FeatureOptimizerImpl  = "optimizer-impl:"  // optimizer_impl, followed by the implementation
	FeatureMomentum       = "sgd-momentum"     // momentum or nesterov
	FeatureNoStep         = "optimizer:none"   // optimizer none: gradients, no step
	FeatureFrozen         = "frozen"           // frozen: gradients to the input only
	FeatureOffloadAct     = "offload-act"      // offload_activations
	FeatureHead           = "head:"            // head, followed by its name
	FeatureQuant          = "quant:"           // quant, followed by its kind
	FeatureKVDType        = "kv-dtype:"        // kv_dtype or llama.cpp's cache types, followed by the dtype
	FeatureKVBlock        = "kv-block"         // kv_block
	FeatureLoad           = "load-only"        // mode load
	FeatureWithLoad       = "with-load"        // with_load: the window holds the load, then the run
	FeatureKeptInputs     = "bnb-kept-inputs"  // bnb_keeps_inputs: bitsandbytes < 0.43.2 keeps 4-bit layers' inputs
	FeatureHeldStep       = "held-step"        // holds_previous_step: the loop keeps the last step's logits and loss
	FeatureContext        = "cuda-context"     // a device-level figure: the CUDA context is in it
	FeatureLoRA           = "lora"             // lora_rank > 0
	FeatureEightBit       = "optimizer:8-bit"  // a bitsandbytes 8-bit optimizer
	FeaturePaged          = "optimizer:paged"  // a bitsandbytes paged optimizer
	FeatureCheckpointing  = "checkpointing"    // checkpointing full or selective
	FeatureGradAccum      = "grad-accum"       // grad_accum > 1
	FeatureParallel       = "parallel"         // parallel or offload
	FeatureCompile        = "compile"          // compile: torch.compile (model.Compile)
	FeatureRuntime        = "runtime:"         // runtime, followed by the engine (llama.cpp)
	FeaturePipeline       = "pipeline"         // pipeline: a diffusers pipeline (budget.EstimatePipeline)
	Plain                 = "plain"            // none of the above
)

// Features returns the features the job of a case at level label
// exercises, derived from the job's fields (never typed by hand), in a
// fixed order; a job that sets none of them gives [Plain].
func Features(j *Job, label string) []string {
	var f []string
	add := func(name string) { f = append(f, name) }
	if l, err := model.ParseLoss(j.Loss); err == nil && j.Loss != "" {
		switch l.Kind {
		case model.ChunkedLoss:
			add(FeatureChunkedLoss)
		case model.FusedLinearLoss:
			add(FeatureFusedLoss)
		case model.CutCrossEntropyLoss:
			add(FeatureCCELoss)
		}
	}
	if j.LogitsToKeep > 0 {
		add(FeatureLogitsToKeep)
	}
	if j.OptimizerInBackward {
		add(FeatureOptimizerInBwd)
	}
	if j.OptimizerImpl != "" {
		add(FeatureOptimizerImpl + j.OptimizerImpl)
	}
	if j.Momentum != 0 || j.Nesterov {
		add(FeatureMomentum)
	}
	opt := ""
	if j.Optimizer != nil {
		opt = strings.ToLower(*j.Optimizer)
	}
	switch {
	case j.Frozen:
		add(FeatureFrozen)
	case opt == "none":
		add(FeatureNoStep)
	}
	if strings.Contains(opt, "8bit") {
		add(FeatureEightBit)
	}
	if strings.Contains(opt, "paged") {
		add(FeaturePaged)
	}
	if j.OffloadActivations {
		add(FeatureOffloadAct)
	}
	if j.Head != "" {
		add(FeatureHead + j.Head)
	}
	if j.Quant != "" {
		add(FeatureQuant + j.Quant)
	}
	if j.WithLoad {
		add(FeatureWithLoad)
	}
	if j.BnbKeepsInputs {
		add(FeatureKeptInputs)
	}
	if j.HoldsPreviousStep {
		add(FeatureHeldStep)
	}
	if j.KVDType != "" {
		add(FeatureKVDType + j.KVDType)
	}
	if a := j.LlamaCpp; a != nil {
		for _, c := range []string{a.CacheK, a.CacheV} {
			if c != "" && !slices.Contains(f, FeatureKVDType+strings.ToLower(c)) {
				add(FeatureKVDType + strings.ToLower(c))
			}
		}
	}
	if j.KVBlock > 0 {
		add(FeatureKVBlock)
	}
	if j.Mode == "load" {
		add(FeatureLoad)
	}
	if j.LoRARank > 0 {
		add(FeatureLoRA)
	}
	if j.Checkpointing == "full" || j.Checkpointing == "selective" {
		add(FeatureCheckpointing)
	}
	if j.GradAccum > 1 {
		add(FeatureGradAccum)
	}
	if j.Parallel != nil || j.Offload != "" {
		add(FeatureParallel)
	}
	if j.Compile != 0 {
		add(FeatureCompile)
	}
	if j.Runtime != "" && !strings.EqualFold(j.Runtime, "pytorch") {
		add(FeatureRuntime + strings.ToLower(j.Runtime))
	}
	if j.Pipeline != nil {
		add(FeaturePipeline)
	}
	if label == Device {
		add(FeatureContext)
	}
	if len(f) == 0 {
		add(Plain)
	}
	return f
}

// SummarizeFeatures groups cases by source, feature and level, as
// Summarize does by key: a case counts once in every feature its job
// exercises (Case.Features), so the groups overlap.
func SummarizeFeatures(cases []Case) []Group {
	var expanded []Case
	var keys []string
	for _, c := range cases {
		for _, f := range c.Features {
			expanded = append(expanded, c)
			keys = append(keys, f)
		}
	}
	return summarizeKeys(expanded, keys)
}
