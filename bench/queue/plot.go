package queue

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// PlotPNG draws the consumer-scaling curve into a PNG file: acked items/s
// (median, and the range over rounds) per consumer count, one line per
// implementation, on a log scale, beside the ideal of Consumers jobs per
// Work.
func PlotPNG(file, title string, pts []Point) error {
	if len(pts) == 0 {
		return fmt.Errorf("plot: no points")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "consumers (each its own session)"
	p.Y.Label.Text = "acked items/s"
	p.X.Scale = plot.LogScale{}
	var ticks plot.ConstantTicks
	var ideal plotter.XYs
	var impls []Impl
	series := map[Impl]*struct {
		xys  plotter.XYs
		bars plotter.YErrors
	}{}
	ymax, xmin, xmax := 0.0, math.Inf(1), 0.0
	seen := map[int]bool{}
	for _, pt := range pts {
		x := float64(pt.Consumers)
		s := series[pt.Impl]
		if s == nil {
			s = &struct {
				xys  plotter.XYs
				bars plotter.YErrors
			}{}
			series[pt.Impl] = s
			impls = append(impls, pt.Impl)
		}
		s.xys = append(s.xys, plotter.XY{X: x, Y: pt.PerSec})
		s.bars = append(s.bars, struct{ Low, High float64 }{pt.PerSec - pt.Min, pt.Max - pt.PerSec})
		ymax = max(ymax, pt.Max)
		if !seen[pt.Consumers] {
			seen[pt.Consumers] = true
			ticks = append(ticks, plot.Tick{Value: x, Label: strconv.Itoa(pt.Consumers)})
			if !math.IsInf(pt.Ideal, 0) {
				ideal = append(ideal, plotter.XY{X: x, Y: pt.Ideal})
			}
		}
		xmin, xmax = min(xmin, x), max(xmax, x)
	}
	p.X.Tick.Marker = ticks
	p.Y.Tick.Marker = plainTicks{}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())

	colors := []color.Color{color.RGBA{B: 200, A: 255}, color.RGBA{R: 200, G: 100, A: 255}, color.RGBA{G: 150, A: 255}}
	for i, impl := range impls {
		s := series[impl]
		line, points, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return err
		}
		line.Color = colors[i%len(colors)]
		line.Width = vg.Points(1.5)
		points.Color = line.Color
		p.Add(line, points)
		p.Legend.Add(string(impl)+", median over rounds", line, points)
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{s.xys, s.bars})
		if err != nil {
			return err
		}
		eb.Color = line.Color
		p.Add(eb)
	}
	if len(ideal) > 0 {
		l, err := plotter.NewLine(ideal)
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 120}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("ideal: consumers / %v of work", pts[0].Work), l)
		ymax = max(ymax, ideal[len(ideal)-1].Y)
	}
	// Room around the points, and above them for the legend.
	p.X.Min, p.X.Max = xmin/1.3, xmax*1.3
	p.Y.Max = ymax * 1.25
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(12)
	p.Legend.YOffs = -vg.Points(6)
	return p.Save(7*vg.Inch, 4.5*vg.Inch, file)
}

// plainTicks are gonum's default ticks, labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}
