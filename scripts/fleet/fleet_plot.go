package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plot draws fleetsim-tasks.svg (tasks/s sent and ended by outcome, with
// the freeze, the scale-in and the kills marked), fleetsim-drain.svg (the
// drain durations against the longest task taken on before the trigger + 1 s) and
// fleetsim-drain-inflight.svg (each drain against its own agent's longest
// run in flight at the trigger).
func (res *fleetResult) plot(dir string) error {
	if err := res.plotTasks(filepath.Join(dir, "fleetsim-tasks.svg")); err != nil {
		return err
	}
	if err := res.plotDrains(filepath.Join(dir, "fleetsim-drain.svg")); err != nil {
		return err
	}
	return res.plotDrainInFlight(filepath.Join(dir, "fleetsim-drain-inflight.svg"))
}

// plotBin is the width of a point of the tasks/s plot: per-second counts
// are too jagged to read at a few tasks per second.
const plotBin = 5

// series turns per-second counts into tasks/s averaged over plotBin
// seconds, padded with zeros to n seconds.
func series(counts []int, n int) plotter.XYs {
	var xy plotter.XYs
	for b := 0; b < n; b += plotBin {
		sum := 0
		for i := b; i < min(b+plotBin, len(counts)); i++ {
			sum += counts[i]
		}
		xy = append(xy, plotter.XY{X: float64(b) + plotBin/2.0, Y: float64(sum) / plotBin})
	}
	return xy
}

var outcomeColors = map[string]color.Color{
	"sent":         color.Black,
	"succeeded":    color.RGBA{G: 150, A: 255},
	"rate_limited": color.RGBA{R: 230, G: 120, A: 255},
	"released":     color.RGBA{B: 220, A: 255},
	"duplicate":    color.RGBA{R: 150, B: 150, A: 255},
	"failed":       color.RGBA{R: 220, A: 255},
	"timed_out":    color.RGBA{R: 120, A: 255},
}

// marker is a dashed vertical line at x from 0 to top.
func marker(p *plot.Plot, name string, x, top float64, c color.Color, dashes []vg.Length) error {
	return dashed(p, name, plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}}, c, dashes)
}

// dashed adds a dashed line through xy, with its legend entry.
func dashed(p *plot.Plot, name string, xy plotter.XYs, c color.Color, dashes []vg.Length) error {
	l, err := plotter.NewLine(xy)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	l.Dashes = dashes
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func (res *fleetResult) plotTasks(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("autodiag fleet: %d agents, tasks/s sent and ended by outcome (%d s bins)", res.Params.Agents, plotBin)
	p.X.Label.Text = "seconds since the first task"
	p.Y.Label.Text = "tasks/s"
	p.Legend.Top = true
	tl := res.Timeline
	n := len(tl.Sent)
	for _, c := range tl.Ended {
		n = max(n, len(c))
	}
	top := 1.0
	add := func(name string, counts []int, i int) error {
		xy := series(counts, n)
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		l.Color = plotutil.Color(i)
		if c, ok := outcomeColors[name]; ok {
			l.Color = c
		}
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(name, l)
		for _, pt := range xy {
			top = max(top, pt.Y)
		}
		return nil
	}
	if err := add("sent", tl.Sent, 0); err != nil {
		return err
	}
	names := make([]string, 0, len(tl.Ended))
	for k := range tl.Ended {
		names = append(names, k)
	}
	sort.Strings(names)
	for i, k := range names {
		if err := add(k, tl.Ended[k], i+1); err != nil {
			return err
		}
	}
	gray := color.Gray{Y: 110}
	red := color.RGBA{R: 220, A: 255}
	dash, dot := []vg.Length{vg.Points(6), vg.Points(3)}, []vg.Length{vg.Points(1.5), vg.Points(2.5)}
	for _, m := range []struct {
		name   string
		at     float64
		c      color.Color
		dashes []vg.Length
	}{
		{"freeze (SIGSTOP)", tl.FreezeSecond, gray, dot},
		{"resume (SIGCONT)", tl.ResumeSecond, gray, dash},
		{fmt.Sprintf("scale-in (%d agents)", res.Params.ScaledIn), tl.ScaleInSecond, red, dash},
		{fmt.Sprintf("SIGKILL (%d agents)", res.Params.Killed), tl.KillSecond, color.Black, dot},
	} {
		if err := marker(p, m.name, m.at, top, m.c, m.dashes); err != nil {
			return err
		}
	}
	// Room above the lines for the legend.
	p.Y.Min, p.Y.Max = 0, top*1.45
	if err := p.Save(10*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func (res *fleetResult) plotDrains(path string) error {
	d := res.Drain
	p := plot.New()
	p.Title.Text = fmt.Sprintf("drain durations of %d scaled-in agents (trigger → completion)", d.Count)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "agents"
	p.X.Min = 0
	p.Legend.Top = true
	if len(d.DurationsSeconds) > 0 {
		h, err := plotter.NewHist(plotter.Values(d.DurationsSeconds), 20)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		p.Add(h)
	}
	if err := marker(p, "longest task taken on before a trigger + 1 s", d.LongestInFlight+1, float64(max(1, d.Count/2)), color.RGBA{R: 220, A: 255}, []vg.Length{vg.Points(6), vg.Points(3)}); err != nil {
		return err
	}
	if err := p.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func (res *fleetResult) plotDrainInFlight(path string) error {
	d := res.Drain
	p := plot.New()
	p.Title.Text = "each drain against its agent's longest run in flight at the trigger"
	p.X.Label.Text = "longest run in flight at the trigger, remaining (s)"
	p.Y.Label.Text = "drain: trigger → completion (s)"
	p.Legend.Top, p.Legend.Left = true, true
	xy := make(plotter.XYs, len(d.Agents))
	top := 1.0
	for i, a := range d.Agents {
		xy[i] = plotter.XY{X: a.LongestInFlight, Y: a.DrainSeconds}
		top = max(top, a.LongestInFlight, a.DrainSeconds)
	}
	if len(xy) > 0 {
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		sc.Color = color.RGBA{B: 200, A: 255}
		p.Add(sc)
		p.Legend.Add(fmt.Sprintf("agent (%d)", len(xy)), sc)
	}
	if err := dashed(p, "in flight + 1 s", plotter.XYs{{X: 0, Y: 1}, {X: top, Y: top + 1}}, color.RGBA{R: 220, A: 255}, []vg.Length{vg.Points(6), vg.Points(3)}); err != nil {
		return err
	}
	p.X.Min, p.Y.Min = 0, 0
	if err := p.Save(6*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}
