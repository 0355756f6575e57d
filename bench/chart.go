package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// writeChart draws results.svg (or a PNG, for a path ending in .png): uncontended throughput per system and
// concurrency, and handoff p50 and p99 per system and queue length.
func writeChart(path string, r *results) error {
	var row []*plot.Plot
	if len(r.Uncontended) > 0 {
		var cs []int
		for _, x := range r.Uncontended {
			if !slices.Contains(cs, x.Concurrency) {
				cs = append(cs, x.Concurrency)
			}
		}
		p, err := groupedBars("uncontended: acquire+release pairs/s (higher is better)", "pairs/s", "concurrency", cs,
			systemsOf(r.Uncontended, func(x uncontendedRow) string { return x.System }),
			func(sys string, c int) float64 {
				if x := r.unc(sys, c); x != nil {
					return x.OpsPerSec
				}
				return 0
			})
		if err != nil {
			return err
		}
		row = append(row, p)
	}
	if len(r.Handoff) > 0 {
		var ns []int
		for _, x := range r.Handoff {
			if !slices.Contains(ns, x.Waiters) {
				ns = append(ns, x.Waiters)
			}
		}
		systems := systemsOf(r.Handoff, func(x handoffRow) string { return x.System })
		for _, q := range []struct {
			name string
			f    func(*handoffRow) float64
		}{{"p50", func(h *handoffRow) float64 { return h.P50 }}, {"p99", func(h *handoffRow) float64 { return h.P99 }}} {
			p, err := groupedBars("handoff "+q.name+": release -> next waiter holds (lower is better)", "ms", "queued waiters", ns, systems,
				func(sys string, n int) float64 {
					if x := r.hand(sys, n); x != nil {
						return q.f(x)
					}
					return 0
				})
			if err != nil {
				return err
			}
			row = append(row, p)
		}
	}
	if len(row) == 0 {
		return nil
	}
	width, height := vg.Points(float64(420*len(row))), vg.Points(400)
	var img interface {
		vg.CanvasWriterTo
	}
	if strings.HasSuffix(path, ".png") {
		img = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	} else {
		img = vgsvg.New(width, height)
	}
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Points(20), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := img.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// groupedBars draws one group of bars per x value, one bar per system.
func groupedBars(title, ylabel, xlabel string, xs []int, systems []string, value func(sys string, x int) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.X.Label.Text = xlabel
	p.Y.Min = 0
	w := vg.Points(60 / float64(max(len(systems), 1)))
	top := 0.0
	for i, sys := range systems {
		vals := make(plotter.Values, len(xs))
		for j, x := range xs {
			vals[j] = value(sys, x)
			top = max(top, vals[j])
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i)
		bars.Offset = vg.Length(float64(i)-float64(len(systems)-1)/2) * w
		p.Add(bars)
		p.Legend.Add(sys, bars)
	}
	names := make([]string, len(xs))
	for i, x := range xs {
		names[i] = fmt.Sprint(x)
	}
	p.NominalX(names...)
	p.Y.Max = top * 1.35 // room for the legend above the bars
	p.Y.Tick.Marker = niceTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p, nil
}

func systemsOf[T any](rows []T, sys func(T) string) []string {
	var out []string
	for _, r := range rows {
		if s := sys(r); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// niceTicks labels about five round values (1, 2 or 5 times a power of ten).
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
	}
	return ts
}
