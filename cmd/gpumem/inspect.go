package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

func runInspect(args []string, _ io.Reader, out, errOut io.Writer) error {
	fs := newFlags("inspect", errOut)
	var mf modelFlags
	mf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON (bytes as integers)")
	if err := parse(fs, args); err != nil {
		return err
	}
	s, err := mf.load()
	if err != nil {
		return err
	}
	r, err := inspectModel(s)
	if err != nil {
		return err
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
	Name         string           `json:"name"`
	Family       string           `json:"family"`
	Layers       int64            `json:"layers"`
	Hidden       int64            `json:"hidden"`
	Heads        int64            `json:"heads"`
	KVHeads      int64            `json:"kv_heads"`
	HeadDim      int64            `json:"head_dim"`
	Intermediate int64            `json:"intermediate"`
	Vocab        int64            `json:"vocab"`
	DType        string           `json:"dtype"`
	Params       int64            `json:"params"`
	WeightsBytes int64            `json:"weights_bytes"`
	ByDType      map[string]int64 `json:"bytes_by_dtype"`
	Parts        []partSummary    `json:"parts"`
}

type partSummary struct {
	Part    string `json:"part"`
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Params  int64  `json:"params"`
	Bytes   int64  `json:"bytes"`
	Experts int64  `json:"expert_params,omitempty"`
}

func inspectModel(s model.Spec) (inspection, error) {
	lm := s.LM()
	r := inspection{
		Name: s.Name, Family: s.Family, Layers: lm.Layers, Hidden: lm.Hidden, Heads: lm.Heads, KVHeads: lm.KVHeads,
		HeadDim: lm.HeadDim, Intermediate: lm.Intermediate, Vocab: lm.Vocab, DType: s.DType.String(), Params: s.Params(),
		ByDType: map[string]int64{},
	}
	by, err := s.BytesByDType()
	if err != nil {
		return r, err
	}
	for d, b := range by {
		r.ByDType[d.String()] = int64(b)
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
	name := r.Name
	if name == "" {
		name = "(unnamed)"
	}
	fmt.Fprintf(tw, "model\t%s (%s)\n", name, r.Family)
	fmt.Fprintf(tw, "geometry\t%d layers, hidden %d, %d heads (%d KV, head dim %d), intermediate %d, vocab %d\n",
		r.Layers, r.Hidden, r.Heads, r.KVHeads, r.HeadDim, r.Intermediate, r.Vocab)
	fmt.Fprintf(tw, "parameters\t%s\n", group3(r.Params))
	dts := make([]string, 0, len(r.ByDType))
	for d := range r.ByDType {
		dts = append(dts, d)
	}
	sort.Strings(dts)
	for _, d := range dts {
		fmt.Fprintf(tw, "weights\t%s in %s\n", gpumem.Bytes(r.ByDType[d]).Human(), d)
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
			extra = fmt.Sprintf("\t(%s in routed experts)", group3(p.Experts))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s%s\n", label, p.Count, group3(p.Params), gpumem.Bytes(p.Bytes).Human(), extra)
	}
	return tw.Flush()
}

// group3 prints n with thousands separators, as published parameter
// counts are written.
func group3(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
