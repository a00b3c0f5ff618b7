package main

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/budget"
	"github.com/gpumem/gpumem/request"
)

// Chart geometry: 1280 × 800 pixels at 128 dots per inch (10 × 6.25
// inches), legible on a screen and in a pull request.
const (
	chartWidth  = 1280 // pixels
	chartHeight = 800  // pixels
	chartDPI    = 128
	// chartLegend is the width of the legend column right of the plot.
	chartLegend = 3.1 * vg.Inch
	// chartPoints bounds the estimates drawn along the x axis.
	chartPoints = 64
	// chartMaxBatch and chartMaxSeq bound the x axis (and the search for
	// the largest value that fits) when the job's own value is smaller:
	// the bounds of budget.LargestBatch and budget.LongestSeqLen, so that the
	// title's largest value is theirs.
	chartMaxBatch = budget.DefaultMaxBatch
	chartMaxSeq   = budget.DefaultMaxSeqLen
)

// chartFlags are --chart and --chart-x, shared by estimate and plan.
type chartFlags struct {
	file string // --chart: the PNG to write; "" for none
	x    string // --chart-x: "batch" or "seq"
}

func (c *chartFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.file, "chart", "", "also write a `FILE.png` chart: the device peak by component against --chart-x, with the GPU's free memory as a line")
	fs.StringVar(&c.x, "chart-x", "batch", "the chart's x axis: batch (micro-batch size) or seq (sequence length)")
}

// check validates the chart flags before any work is done.
func (c *chartFlags) check(fs *flag.FlagSet) error {
	if c.x != "batch" && c.x != "seq" {
		return fmt.Errorf("%w: --chart-x %q: want batch or seq", request.ErrUsage, c.x)
	}
	if c.file == "" {
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "chart-x" })
		if given {
			return fmt.Errorf("%w: --chart-x %s: give --chart FILE.png too", request.ErrUsage, c.x)
		}
		return nil
	}
	if !strings.EqualFold(filepath.Ext(c.file), ".png") {
		return fmt.Errorf("%w: --chart %q: want a file name ending in .png", request.ErrUsage, c.file)
	}
	return nil
}

// write draws the chart of j on dev (Capacity zero: no device) to the
// --chart file, if one was given. mark labels the job's own x ("as
// given", "planned"); a value fits when its device peak leaves hr of the
// free memory unused, as estimate's and plan's answers.
func (c *chartFlags) write(j budget.Job, dev gpumem.Device, mark string, hr request.Headroom) error {
	if c.file == "" {
		return nil
	}
	s, err := sweep(j, c.x, dev, hr)
	if err != nil {
		return err
	}
	canvas, err := s.draw(j, dev, mark, hr)
	if err != nil {
		return err
	}
	return writePNG(c.file, canvas)
}

// newChart returns a plot in the charts' style: sans-serif labels and the
// title (its spaces made no-break: the title font's kerning pairs draw
// "A A", as in "NVIDIA A100", with next to no space between the words).
func newChart(title string) *plot.Plot {
	p := plot.New()
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font} {
		f.Variant = "Sans"
	}
	p.Title.Text = strings.ReplaceAll(title, " ", "\u00a0")
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Title.Padding = vg.Points(8)
	return p
}

// newLegend returns a legend in the charts' style, for the column right
// of the plot.
func newLegend(variant font.Variant) plot.Legend {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font = font.From(plot.DefaultFont, vg.Points(10))
	l.TextStyle.Font.Variant = variant
	l.ThumbnailWidth = vg.Points(18)
	return l
}

// render draws p with the legend l in a column to its right, on a
// chartWidth × chartHeight canvas.
func render(p *plot.Plot, l plot.Legend) *vgimg.Canvas {
	canvas := vgimg.NewWith(vgimg.UseWH(vg.Length(chartWidth)*vg.Inch/chartDPI, vg.Length(chartHeight)*vg.Inch/chartDPI),
		vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(canvas)
	p.Draw(draw.Crop(dc, 0, -chartLegend, 0, 0))
	area := p.DataCanvas(draw.Crop(dc, 0, -chartLegend, 0, 0))
	l.Draw(draw.Canvas{Canvas: canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: area.Max.X + vg.Points(14), Y: area.Min.Y},
		Max: vg.Point{X: dc.Max.X - vg.Points(6), Y: area.Max.Y},
	}})
	return canvas
}

// writePNG writes canvas to the --chart file.
func writePNG(file string, canvas *vgimg.Canvas) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("%w: --chart %q: %v", request.ErrUsage, file, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: canvas}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("--chart %q: %v", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--chart %q: %v", file, err)
	}
	return nil
}

// series is a job's estimate at each x of the chart.
type series struct {
	axis   string // "batch" or "seq"
	x0     int    // the job's own value
	xs     []int  // ascending
	needs  []budget.Breakdown
	fitMax int // the largest x whose device peak fits the free memory less the headroom; 0 when none does or no device was named
	limit  int // the largest x the search tried (chartMaxBatch, chartMaxSeq, or the job's own when larger)
}

// at returns j with its batch or sequence length set to x.
func at(j budget.Job, axis string, x int) budget.Job {
	if axis == "seq" {
		j.SeqLen = x
	} else {
		j.Batch = x
	}
	return j
}

// sweep estimates j along axis: from 1 to half again the larger of the
// job's own value and the largest value that fits on dev with hr left
// unused (at least 8, at most chartMaxBatch or chartMaxSeq), at no more
// than chartPoints values. Estimates never decrease as batch or sequence
// length grow (budget's property tests), so the largest value that fits
// is found by doubling and bisection; it is the answer of budget.LargestBatch
// and budget.LongestSeqLen (and plan's) for the same headroom. An estimate
// that fails beyond the job's own value (an overflow at an absurd size)
// ends the axis there, and does not fit.
func sweep(j budget.Job, axis string, dev gpumem.Device, hr request.Headroom) (series, error) {
	s := series{axis: axis, x0: j.Batch, fitMax: 0}
	limit := chartMaxBatch
	if axis == "seq" {
		s.x0, limit = j.SeqLen, chartMaxSeq
	}
	limit = max(limit, s.x0)
	s.limit = limit
	if dev.Capacity > 0 {
		usable := dev.Free() - hr.Bytes
		ok := func(x int) bool {
			n, err := budget.Estimate(at(j, axis, x))
			return err == nil && n.Required() <= usable
		}
		if ok(1) {
			a, b := 1, 2
			for b <= limit && ok(b) {
				a, b = b, 2*b
			}
			b = min(b, limit+1) // ok(limit+1) is taken as false
			for b-a > 1 {
				if m := a + (b-a)/2; ok(m) {
					a = m
				} else {
					b = m
				}
			}
			s.fitMax = a
		}
	}
	base := max(s.x0, s.fitMax)
	end := min(max(base+base/2, 8), limit)
	if dev.Capacity == 0 {
		end = min(max(2*s.x0, 8), limit)
	}
	xs := map[int]bool{s.x0: true}
	if s.fitMax > 0 && s.fitMax < end {
		xs[s.fitMax], xs[s.fitMax+1] = true, true // the crossing, exactly
	}
	for i := range chartPoints {
		xs[1+int(float64(i)*float64(end-1)/float64(chartPoints-1)+0.5)] = true
	}
	if err := s.estimate(j, xs); err != nil {
		return s, err
	}
	// Where the peak moves to another moment of the step between two
	// drawn values (from the last layer's backward with the gradients
	// of every layer to the loss with its logits, say), the components
	// at the peak jump: find the first value of the new moment by
	// bisection and draw it and its predecessor, so that the jump is
	// drawn where it happens instead of as a slope.
	added := false
	for i := 0; i+1 < len(s.xs); i++ {
		a, b := s.xs[i], s.xs[i+1]
		left := moment(s.needs[i])
		if b-a < 2 || left == moment(s.needs[i+1]) {
			continue
		}
		for b-a > 1 {
			m := a + (b-a)/2
			if n, err := budget.Estimate(at(j, axis, m)); err == nil && moment(n) == left {
				a = m
			} else {
				b = m
			}
		}
		xs[a], xs[b] = true, true
		added = true
	}
	if added {
		if err := s.estimate(j, xs); err != nil {
			return s, err
		}
	}
	if len(s.xs) < 2 {
		return s, errors.New("--chart: the job cannot be estimated at more than one point of the axis")
	}
	return s, nil
}

// moment identifies the moment of the step that sets a peak: its phase
// and which components are present.
func moment(n budget.Breakdown) string {
	var b strings.Builder
	b.WriteString(n.Phase.String())
	for _, c := range n.Components() {
		if c.Bytes != 0 {
			b.WriteString(" " + c.Name)
		}
	}
	return b.String()
}

// estimate sets s.xs to the values of xs in ascending order and s.needs
// to their estimates, ending the axis at the first value beyond the job's
// own whose estimate fails.
func (s *series) estimate(j budget.Job, xs map[int]bool) error {
	s.xs, s.needs = s.xs[:0], s.needs[:0]
	for x := range xs {
		s.xs = append(s.xs, x)
	}
	sort.Ints(s.xs)
	for i, x := range s.xs {
		n, err := budget.Estimate(at(j, s.axis, x))
		if err != nil {
			if x <= s.x0 {
				return err
			}
			s.xs = s.xs[:i]
			break
		}
		s.needs = append(s.needs, n)
	}
	return nil
}

// componentColors gives each component of budget.Breakdown.Components a
// fixed colour (Tableau 10 and its light variants), so that charts of
// different jobs read alike.
var componentColors = map[string]color.RGBA{
	"weights":        {0x4e, 0x79, 0xa7, 0xff},
	"gradients":      {0xf2, 0x8e, 0x2b, 0xff},
	"optimizer":      {0x59, 0xa1, 0x4f, 0xff},
	"master_weights": {0x8c, 0xd1, 0x7d, 0xff},
	"activations":    {0xe1, 0x57, 0x59, 0xff},
	"attention":      {0xff, 0x9d, 0x9a, 0xff},
	"transient":      {0xd3, 0x72, 0x95, 0xff},
	"logits":         {0xb0, 0x7a, 0xa1, 0xff},
	"kv_cache":       {0x76, 0xb7, 0xb2, 0xff},
	"buffers":        {0xed, 0xc9, 0x48, 0xff},
	"extra_models":   {0x9c, 0x75, 0x5f, 0xff},
	"workspace":      {0xa0, 0xcb, 0xe8, 0xff},
	"fragmentation":  {0xd4, 0xa6, 0xc8, 0xff},
	"context":        {0xba, 0xb0, 0xac, 0xff},
	// Paged optimizer state, a lighter shade of the optimizer's.
	"paged_optimizer": {0xb5, 0xd9, 0xa9, 0xff},
}

// fallbackColors colour components the map above does not name.
var fallbackColors = []color.RGBA{{0x79, 0x70, 0x6e, 0xff}, {0xff, 0xbe, 0x7d, 0xff}, {0xb6, 0x99, 0x2d, 0xff}}

// axisLabel names an x axis in words; short, in the legend.
func axisLabel(axis string, short bool) string {
	switch {
	case axis != "seq":
		return "batch"
	case short:
		return "seq"
	}
	return "sequence length"
}

// draw renders the series: one band per non-zero component, stacked in
// budget.Breakdown.Components order from the bottom, their sum (the
// device peak, what nvidia-smi shows) as a line, the free memory of dev
// as a dashed line and the free memory less the headroom hr (what a job
// may use) as a dotted one, and the job's own x as a dotted line. The legend,
// right of the plot, lists the components top to bottom as they are
// stacked, with their bytes at the job's own x.
func (s series) draw(j budget.Job, dev gpumem.Device, mark string, hr request.Headroom) (*vgimg.Canvas, error) {
	p := newChart(chartTitle(j, s, dev, hr))
	p.X.Label.Text = "micro-batch size (sequences per forward pass)"
	if s.axis == "seq" {
		p.X.Label.Text = "sequence length (tokens)"
		if j.Generate > 0 {
			p.X.Label.Text = "prompt length (tokens)"
		}
	}
	p.Y.Label.Text = "GiB on the device (stacked by component)"
	p.X.Min, p.X.Max = float64(s.xs[0]), float64(s.xs[len(s.xs)-1])
	p.Y.Min = 0
	p.Add(plotter.NewGrid())

	// i0 is the index of the job's own x. When every integer of the axis
	// is drawn (a short batch axis), each value is a block one unit wide:
	// a batch of 3.5 does not exist, and the components at the peak change
	// from one value to the next when the peak moves to another phase.
	i0 := sort.SearchInts(s.xs, s.x0)
	discrete := s.xs[len(s.xs)-1]-s.xs[0] == len(s.xs)-1
	outline := func(y func(i int) float64, reverse bool) plotter.XYs {
		pts := make(plotter.XYs, 0, 2*len(s.xs))
		for k := range s.xs {
			i := k
			if reverse {
				i = len(s.xs) - 1 - k
			}
			x := float64(s.xs[i])
			switch {
			case !discrete:
				pts = append(pts, plotter.XY{X: x, Y: y(i)})
			case reverse:
				pts = append(pts, plotter.XY{X: x + 0.5, Y: y(i)}, plotter.XY{X: x - 0.5, Y: y(i)})
			default:
				pts = append(pts, plotter.XY{X: x - 0.5, Y: y(i)}, plotter.XY{X: x + 0.5, Y: y(i)})
			}
		}
		return pts
	}
	p.X.Min = 0
	if discrete {
		p.X.Max += 0.5
		p.X.Tick.Marker = integerTicks(s.xs[len(s.xs)-1])
	}
	comps := s.needs[0].Components()
	bottom := make([]float64, len(s.xs))
	type entry struct {
		name  string
		thumb plot.Thumbnailer
	}
	var legend []entry
	fallback := 0
	for k, c := range comps {
		nonzero := false
		for _, n := range s.needs {
			nonzero = nonzero || n.Components()[k].Bytes != 0
		}
		if !nonzero {
			continue
		}
		top := make([]float64, len(s.xs))
		for i, n := range s.needs {
			top[i] = bottom[i] + n.Components()[k].Bytes.GiB()
		}
		low := bottom
		band, err := plotter.NewPolygon(append(outline(func(i int) float64 { return top[i] }, false),
			outline(func(i int) float64 { return low[i] }, true)...))
		if err != nil {
			return nil, err
		}
		col, ok := componentColors[c.Name]
		if !ok {
			col = fallbackColors[fallback%len(fallbackColors)]
			fallback++
		}
		band.Color = col
		band.LineStyle.Width = 0
		p.Add(band)
		v := s.needs[i0].Components()[k].Bytes
		legend = append(legend, entry{fmt.Sprintf("%-14s %10s", strings.ReplaceAll(c.Name, "_", " "), v.String()), band})
		bottom = top
	}

	var peakMax float64
	for _, n := range s.needs {
		peakMax = max(peakMax, n.Device().GiB())
	}
	peak, err := plotter.NewLine(outline(func(i int) float64 { return s.needs[i].Device().GiB() }, false))
	if err != nil {
		return nil, err
	}
	peak.LineStyle.Width = vg.Points(1.5)
	peak.LineStyle.Color = color.Black
	p.Add(peak)

	yMax := peakMax
	var freeLine, usableLine *plotter.Line
	if dev.Capacity > 0 {
		free := dev.Free().GiB()
		yMax = max(yMax, free)
		if freeLine, err = hline(p, free, 2, color.RGBA{0xc0, 0x00, 0x00, 0xff}, 8, 4); err != nil {
			return nil, err
		}
		if hr.Bytes > 0 {
			// What a job may use: a value fits below this line.
			usable := (dev.Free() - hr.Bytes).GiB()
			if usableLine, err = hline(p, usable, 1.5, color.RGBA{0xe0, 0x70, 0x70, 0xff}, 2, 3); err != nil {
				return nil, err
			}
		}
	}
	p.Y.Max = yMax * 1.06

	own, err := plotter.NewLine(plotter.XYs{{X: float64(s.x0), Y: 0}, {X: float64(s.x0), Y: p.Y.Max}})
	if err != nil {
		return nil, err
	}
	own.LineStyle.Width = vg.Points(1.5)
	own.LineStyle.Color = color.RGBA{0x30, 0x30, 0x30, 0xff}
	own.LineStyle.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
	p.Add(own)

	l := newLegend("Mono")
	l.Padding = vg.Points(3)
	l.Add(fmt.Sprintf("%s: %s %d", mark, axisLabel(s.axis, true), s.x0), own)
	if freeLine != nil {
		l.Add(fmt.Sprintf("%-14s %10s", "free on GPU", dev.Free().String()), freeLine)
	}
	if usableLine != nil {
		l.Add(fmt.Sprintf("%-14s %10s", "less headroom", (dev.Free()-hr.Bytes).String()), usableLine)
	}
	l.Add(fmt.Sprintf("%-14s %10s", "device peak", s.needs[i0].Device().String()), peak)
	for i := len(legend) - 1; i >= 0; i-- {
		l.Add(legend[i].name, legend[i].thumb)
	}

	return render(p, l), nil
}

// integerTicks marks every integer up to last, and labels every one,
// every 2nd, 5th, 10th, ... so that at most 16 are labelled.
func integerTicks(last int) plot.ConstantTicks {
	step := 1
	for _, st := range []int{1, 2, 5, 10, 20, 50} {
		step = st
		if last/st <= 16 {
			break
		}
	}
	ticks := make(plot.ConstantTicks, 0, last+1)
	for x := 0; x <= last; x++ {
		t := plot.Tick{Value: float64(x)}
		if x%step == 0 {
			t.Label = strconv.Itoa(x)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// chartTitleWidth is the longest title line, in characters, that fits
// above the plot at the title's size (about 9 pixels a character, 880
// pixels of plot).
const chartTitleWidth = 90

// chartTitle describes the job, then the device and the largest value
// that fits with the headroom hr, saying the headroom; the job's
// description wraps at commas to stay within chartTitleWidth.
func chartTitle(j budget.Job, s series, dev gpumem.Device, hr request.Headroom) string {
	parts := []string{fmt.Sprintf("%s: %s", request.Describe(j), j.Mode), j.Precision.String()}
	if total, trainable := j.Model.Params(); j.Mode == budget.Training && trainable < total {
		parts = append(parts, gpumem.Thousands(trainable)+" trainable parameters") // adapters (LoRA, QLoRA) or frozen parts
	}
	if j.Optimizer != nil {
		parts = append(parts, j.Optimizer.String())
	}
	switch {
	case s.axis == "seq" && j.Generate > 0:
		parts = append(parts, fmt.Sprintf("batch %d", j.Batch), fmt.Sprintf("%d tokens generated", j.Generate))
	case s.axis == "seq":
		parts = append(parts, fmt.Sprintf("batch %d", j.Batch))
	case j.Generate > 0:
		parts = append(parts, fmt.Sprintf("%d-token prompt + %d generated", j.SeqLen, j.Generate))
	default:
		parts = append(parts, fmt.Sprintf("%d tokens", j.SeqLen))
	}
	parts = append(parts, j.Attention.String()+" attention", "checkpointing "+j.Checkpointing.String())
	var b strings.Builder
	line := 0
	for i, p := range parts {
		switch {
		case i == 0:
		case line+2+len(p) > chartTitleWidth:
			b.WriteString(",\n")
			line = 0
		default:
			b.WriteString(", ")
			line += 2
		}
		b.WriteString(p)
		line += len(p)
	}
	b.WriteString("\n")
	switch {
	case dev.Capacity == 0:
		b.WriteString("device peak by component (no GPU named: give --gpu or --memory for the fit line)")
	case s.fitMax == 0:
		fmt.Fprintf(&b, "%s, %s free: does not fit even at %s 1 with %s", request.Clean(dev.Name), dev.Free().String(), axisLabel(s.axis, false), hr.Name)
	case s.fitMax == s.limit:
		fmt.Fprintf(&b, "%s, %s free: fits up to %s %s (the largest searched) with %s", request.Clean(dev.Name), dev.Free().String(),
			axisLabel(s.axis, false), gpumem.Thousands(int64(s.fitMax)), hr.Name)
	default:
		fmt.Fprintf(&b, "%s, %s free: fits up to %s %s with %s", request.Clean(dev.Name), dev.Free().String(), axisLabel(s.axis, false),
			gpumem.Thousands(int64(s.fitMax)), hr.Name)
	}
	return b.String()
}

// hline adds a horizontal dashed line at y across the plot's x range:
// width in points, dashes of on and off points.
func hline(p *plot.Plot, y, width float64, c color.Color, on, off float64) (*plotter.Line, error) {
	l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: y}, {X: p.X.Max, Y: y}})
	if err != nil {
		return nil, err
	}
	l.LineStyle.Width = vg.Points(width)
	l.LineStyle.Color = c
	l.LineStyle.Dashes = []vg.Length{vg.Points(on), vg.Points(off)}
	p.Add(l)
	return l, nil
}
