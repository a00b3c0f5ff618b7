package main

// The accuracy chart: errors per case on a log scale.

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"github.com/gpumem/gpumem/cmd/gpumem/internal/accuracy"
	"github.com/gpumem/gpumem/request"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Colours of the scatter plot's levels.
var levelColors = map[string]color.RGBA{
	accuracy.Allocated: {0x1f, 0x77, 0xb4, 0xff},
	accuracy.Reserved:  {0xff, 0x7f, 0x0e, 0xff},
	accuracy.Device:    {0x2c, 0xa0, 0x2c, 0xff},
	accuracy.KVCache:   {0x94, 0x67, 0xbd, 0xff},
	accuracy.Weights:   {0x8c, 0x56, 0x4b, 0xff},
}

// writeAccuracyChart draws estimated against measured memory, log-log,
// one point per case: colour by level, filled circles for our
// measurements, triangles for published figures, crosses for the figures
// not held to the margin; the diagonal and the ±5% and ±10% bands.
func writeAccuracyChart(file string, set accuracy.Set) error {
	if len(set.Cases) == 0 {
		return fmt.Errorf("%w: --chart: no cases to draw", request.ErrUsage)
	}
	n := map[string]int{}
	for _, c := range set.Cases {
		n[c.Source]++
	}
	title := fmt.Sprintf("gpumem's estimates against %d figures we measured and %d published ones",
		n[accuracy.Measured], n[accuracy.Published])
	if n[accuracy.Measured] == 0 {
		title = fmt.Sprintf("gpumem's estimates against %d published figures (none measured by us yet)", n[accuracy.Published])
	}
	p := newChart(title)
	p.X.Label.Text = "measured (GiB, log scale)"
	p.Y.Label.Text = "estimated (GiB, log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = logTicks{}, logTicks{}
	p.Add(plotter.NewGrid())

	lo, hi := math.Inf(1), 0.0
	for _, c := range set.Cases {
		for _, v := range []float64{c.Measured.GiB(), c.Predicted.GiB()} {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	lo, hi = lo/1.25, hi*1.25
	l := newLegend("Sans")
	for _, band := range []struct {
		f      float64
		label  string
		dashes []vg.Length
		gray   uint8
	}{{1, "estimate = measurement", nil, 0x20}, {0.05, "±5%", []vg.Length{vg.Points(6), vg.Points(3)}, 0x70},
		{0.10, "±10%", []vg.Length{vg.Points(2), vg.Points(3)}, 0x90}} {
		for i, k := range []float64{1 + band.f, 1 - band.f} {
			if band.f == 1 {
				k = 1
			}
			line, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo * k}, {X: hi, Y: hi * k}})
			if err != nil {
				return err
			}
			line.LineStyle.Width = vg.Points(1)
			line.LineStyle.Color = color.Gray{Y: band.gray}
			line.LineStyle.Dashes = band.dashes
			p.Add(line)
			if i == 0 {
				l.Add(band.label, line)
			}
			if band.f == 1 {
				break
			}
		}
	}
	for _, src := range []string{accuracy.Measured, accuracy.Published} {
		for _, lvl := range append(accuracy.Labels[:], accuracy.KVCache, accuracy.Weights) {
			for _, exempt := range []bool{false, true} {
				var pts plotter.XYs
				for _, c := range set.Cases {
					if c.Source == src && c.Label == lvl && (c.Exempt != "") == exempt {
						pts = append(pts, plotter.XY{X: c.Measured.GiB(), Y: c.Predicted.GiB()})
					}
				}
				if len(pts) == 0 {
					continue
				}
				s, err := plotter.NewScatter(pts)
				if err != nil {
					return err
				}
				s.GlyphStyle.Color = levelColors[lvl]
				s.GlyphStyle.Radius = vg.Points(4)
				s.GlyphStyle.Shape = draw.CircleGlyph{}
				name := fmt.Sprintf("%s, %s (%d)", src, lvl, len(pts))
				switch {
				case exempt:
					s.GlyphStyle.Shape = draw.CrossGlyph{}
					name = fmt.Sprintf("%s, %s, exempt (%d)", src, lvl, len(pts))
				case src == accuracy.Published:
					s.GlyphStyle.Shape = draw.TriangleGlyph{}
				}
				p.Add(s)
				l.Add(name, s)
			}
		}
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = lo, hi, lo, hi
	return writePNG(file, render(p, l))
}

// logTicks marks 1, 2 and 5 times each power of ten and labels them,
// with unlabelled minor ticks between, for a log axis in GiB.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
