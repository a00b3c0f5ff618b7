package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/model"
	"github.com/gpumem/gpumem/optimizer"
	"github.com/gpumem/gpumem/request"
)

func runInspect(args []string, _ io.Reader, out, _ io.Writer) error {
	fs := newFlags("inspect", out)
	var mf request.ModelFlags
	mf.Register(fs)
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	loraRank := fs.Int64("lora-rank", 0, "add LoRA adapters of this rank (PEFT's default targets for the family) and freeze the base")
	optName := fs.String("optimizer", "", "add the state this optimizer keeps for every parameter (adamw, adamw8bit, adafactor, sgd, ...)")
	paramDType := fs.String("param-dtype", "fp32", "with --optimizer: the dtype of the parameters it steps (fp32 for AMP or master weights, bf16 for pure bf16)")
	batch := fs.Int64("batch", 0, "with --seq: print the activations of a training step of this micro-batch")
	seq := fs.Int64("seq", 0, "with --batch: sequence length in tokens")
	attn := fs.String("attention", "sdpa", "with --batch: eager, sdpa or flash")
	ckpt := fs.String("checkpointing", "none", "with --batch: none, selective, full or offload")
	if err := parse(fs, args); err != nil {
		return err
	}
	// Flags that only qualify another are refused without it.
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	if v, ok := given["param-dtype"]; ok && *optName == "" {
		return fmt.Errorf("%w: --param-dtype %s: it is the dtype --optimizer steps (give --optimizer too, or leave --param-dtype out)", request.ErrUsage, v)
	}
	for _, name := range []string{"attention", "checkpointing"} {
		if v, ok := given[name]; ok && *batch == 0 && *seq == 0 {
			return fmt.Errorf("%w: --%s %s: it shapes the activations --batch and --seq ask for (give them too, or leave --%s out)", request.ErrUsage, name, v, name)
		}
	}
	s, err := mf.Load()
	if err != nil {
		return err
	}
	ft := model.Finetune{Model: s}
	if *loraRank < 0 {
		return fmt.Errorf("%w: --lora-rank %d: must not be negative", request.ErrUsage, *loraRank)
	}
	if *loraRank > 0 {
		ft.LoRA = model.LoRA{Rank: *loraRank}
	}
	r, err := inspectModel(ft)
	if err != nil {
		return err
	}
	if *optName != "" {
		if err := r.addOptimizer(s, *optName, *paramDType); err != nil {
			return err
		}
	}
	if *batch != 0 || *seq != 0 {
		if err := r.addActivations(s, *batch, *seq, *attn, *ckpt); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.print(out)
}

// inspection is what inspect prints.
type inspection struct {
	Name            string           `json:"name"`
	Family          string           `json:"family"`
	Layers          int64            `json:"layers"`
	Hidden          int64            `json:"hidden"`
	Heads           int64            `json:"heads"`
	KVHeads         int64            `json:"kv_heads"`
	HeadDim         int64            `json:"head_dim"`
	Intermediate    int64            `json:"intermediate"`
	Vocab           int64            `json:"vocab"`
	DType           string           `json:"dtype"`
	Params          int64            `json:"params"`
	TrainableParams int64            `json:"trainable_params"`
	WeightsBytes    int64            `json:"weights_bytes"`
	ByDType         map[string]int64 `json:"bytes_by_dtype"`
	Parts           []partSummary    `json:"parts"`
	// UNet is a diffusers UNet's or VAE's per-level architecture.
	UNet *model.UNet `json:"unet,omitempty"`

	Optimizer           string `json:"optimizer,omitempty"`
	OptimizerStateBytes *int64 `json:"optimizer_state_bytes,omitempty"`

	ActivationsBytes   *int64            `json:"activations_bytes,omitempty"`
	AttentionPeakBytes *int64            `json:"attention_peak_bytes,omitempty"`
	ActivationLayers   []activationLayer `json:"activation_layers,omitempty"`
	workload           string
	stages             string // a vision backbone's stages, for the geometry line
}

type activationLayer struct {
	Part       string `json:"part"`
	Kind       string `json:"kind"`
	Count      int64  `json:"count"`
	SavedBytes int64  `json:"saved_bytes"`
	KeptBytes  int64  `json:"kept_bytes"`
	Forward    int64  `json:"forward_transient_bytes"`
	Backward   int64  `json:"backward_transient_bytes"`
}

// addOptimizer adds the optimizer state of every parameter, stepped in
// the given dtype.
func (r *inspection) addOptimizer(s model.Spec, name, dtype string) error {
	o, ok := optimizer.Lookup(name)
	if !ok {
		return fmt.Errorf("%w: --optimizer %q is not modelled (try adamw, adamw8bit, adafactor, sgd, lion)", request.ErrUsage, name)
	}
	dt, err := gpumem.ParseDType(dtype)
	if err != nil {
		return fmt.Errorf("%w: --param-dtype: %v", request.ErrUsage, err)
	}
	ts := s.Tensors()
	for i := range ts {
		ts[i].DType = dt
	}
	b, err := optimizer.Total(o, ts)
	if err != nil {
		return err
	}
	v := int64(b)
	r.Optimizer, r.OptimizerStateBytes = o.String()+" ("+dt.String()+" parameters)", &v
	return nil
}

// addActivations adds the activations of one training step.
func (r *inspection) addActivations(s model.Spec, batch, seq int64, attn, ckpt string) error {
	w := model.Workload{Batch: batch, SeqLen: seq, Train: true}
	var err error
	if w.Attention, err = request.ParseAttention(attn); err != nil {
		return err
	}
	if w.Checkpointing, err = request.ParseCheckpointing(ckpt); err != nil {
		return err
	}
	a, err := s.Activations(w)
	if err != nil {
		return err
	}
	total, peak := int64(a.Total()), int64(max(a.Forward, a.Backward))
	r.ActivationsBytes, r.AttentionPeakBytes = &total, &peak
	for _, l := range a.Layers {
		r.ActivationLayers = append(r.ActivationLayers, activationLayer{Part: l.Part, Kind: l.Kind, Count: l.Count,
			SavedBytes: int64(l.Saved), KeptBytes: int64(l.KeptTotal), Forward: int64(l.Forward), Backward: int64(l.Backward)})
	}
	r.workload = fmt.Sprintf("batch %d × %d tokens, %s attention, %s checkpointing", batch, seq, attn, ckpt)
	if s.Backbone != nil {
		r.workload = fmt.Sprintf("batch %d × %d×%d px images, %s checkpointing", batch, s.Image.Size, s.Image.Size, ckpt)
	}
	return nil
}

type partSummary struct {
	Part    string `json:"part"`
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Params  int64  `json:"params"`
	Bytes   int64  `json:"bytes"`
	Experts int64  `json:"expert_params,omitempty"`
}

func inspectModel(ft model.Finetune) (inspection, error) {
	s := ft.Model
	lm := s.LM()
	r := inspection{
		UNet: s.UNet, Name: s.Name, Family: s.Family, Layers: lm.Layers, Hidden: lm.Hidden, Heads: lm.Heads, KVHeads: lm.KVHeads,
		HeadDim: lm.HeadDim, Intermediate: lm.Intermediate, Vocab: lm.Vocab, DType: s.DType.String(),
		ByDType: map[string]int64{},
	}
	if bb := s.Backbone; bb != nil {
		r.stages = fmt.Sprintf("%d stages of widths %v, depths %v; %d×%d px images", len(bb.Widths), bb.Widths, bb.Depths, s.Image.Size, s.Image.Size)
	}
	if err := ft.Validate(); err != nil {
		return r, err
	}
	r.Params, r.TrainableParams = ft.Params(), ft.TrainableParams()
	// Quantized (GGUF Q4_K, fp8 ...) tensors cannot train: budget.NewModel
	// keeps them frozen, and counts only the tensors that can.
	if m, err := budget.NewModel(ft); err == nil {
		_, r.TrainableParams = m.Params()
	}
	ts, err := ft.Tensors()
	if err != nil {
		return r, err
	}
	for _, t := range ts {
		b, err := t.Bytes()
		if err != nil {
			return r, err
		}
		r.ByDType[t.DType.String()] += int64(b)
		r.WeightsBytes += int64(b)
	}
	groups, err := s.Groups()
	if err != nil {
		return r, err
	}
	index := map[[2]string]int{}
	for _, g := range groups {
		k := [2]string{g.Part, g.Name}
		i, ok := index[k]
		if !ok {
			i = len(r.Parts)
			index[k] = i
			r.Parts = append(r.Parts, partSummary{Part: g.Part, Name: g.Name})
		}
		p := &r.Parts[i]
		p.Count++
		p.Params += g.Params
		p.Bytes += int64(g.Bytes)
		p.Experts += g.Experts
	}
	return r, nil
}

func (r inspection) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	name := request.Clean(r.Name)
	if name == "" {
		name = "(unnamed)"
	}
	fmt.Fprintf(tw, "model\t%s (%s)\n", name, request.Clean(r.Family))
	if u := r.UNet; u != nil {
		fmt.Fprintf(tw, "geometry\t%d levels, channels %v, layers per block %v, heads %v, transformer layers %v, cross-attention width %v\n",
			u.Levels(), u.Channels, u.LayersPerBlock, u.Heads, u.TransformerLayers, u.CrossDim)
	} else if r.stages != "" {
		fmt.Fprintf(tw, "geometry\t%s\n", r.stages)
	} else {
		fmt.Fprintf(tw, "geometry\t%d layers, hidden %d, %d heads (%d KV, head dim %d), intermediate %d, vocab %d\n",
			r.Layers, r.Hidden, r.Heads, r.KVHeads, r.HeadDim, r.Intermediate, r.Vocab)
	}
	fmt.Fprintf(tw, "parameters\t%s (%s trainable)\n", gpumem.Thousands(r.Params), gpumem.Thousands(r.TrainableParams))
	dts := make([]string, 0, len(r.ByDType))
	for d := range r.ByDType {
		dts = append(dts, d)
	}
	sort.Strings(dts)
	for _, d := range dts {
		fmt.Fprintf(tw, "weights\t%s in %s\n", gpumem.Bytes(r.ByDType[d]).String(), d)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "part\tcount\tparameters\tbytes")
	for _, p := range r.Parts {
		label := p.Name
		if p.Part != "" {
			label = p.Part + " " + p.Name
		}
		extra := ""
		if p.Experts > 0 {
			extra = fmt.Sprintf("\t(%s in routed experts)", gpumem.Thousands(p.Experts))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s%s\n", label, p.Count, gpumem.Thousands(p.Params), gpumem.Bytes(p.Bytes).String(), extra)
	}
	if r.OptimizerStateBytes != nil {
		fmt.Fprintf(tw, "\noptimizer\t%s: %s of state\n", r.Optimizer, gpumem.Bytes(*r.OptimizerStateBytes).String())
	}
	if r.ActivationsBytes != nil {
		fmt.Fprintf(tw, "\nactivations\t%s: %s saved for backward, largest block transient %s\n", r.workload,
			gpumem.Bytes(*r.ActivationsBytes).String(), gpumem.Bytes(*r.AttentionPeakBytes).String())
		fmt.Fprintln(tw, "block\tcount\tsaved per block\tkept, all blocks\tforward transient\tbackward transient")
		for _, l := range r.ActivationLayers {
			name := l.Kind
			if l.Part != "" {
				name = l.Part + " " + l.Kind
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", name, l.Count, gpumem.Bytes(l.SavedBytes).String(),
				gpumem.Bytes(l.KeptBytes).String(), gpumem.Bytes(l.Forward).String(), gpumem.Bytes(l.Backward).String())
		}
	}
	return tw.Flush()
}
