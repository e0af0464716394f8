package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// chart draws p50, p90 and p99 bars of start-up latency per mode and run to
// path (SVG, by its extension).
func (r *results) chart(path string) error {
	var labels []string
	series := [3]plotter.Values{}
	for _, mode := range []string{modePlain, modeNoop, modeEphemeral, modeMiss, modeHit, modeOwnClaim} {
		for _, burst := range []bool{false, true} {
			kind := "seq"
			if burst {
				kind = "burst"
			}
			s := summary{P50: math.NaN(), P90: math.NaN(), P99: math.NaN()}
			if run := r.Startup.run(mode, burst); run != nil {
				s = run.Stats
			}
			labels = append(labels, fmt.Sprintf("%s %s\np50 %s", mode, kind, dur(s.P50)))
			for i, v := range []float64{s.P50, s.P90, s.P99} {
				if math.IsNaN(v) {
					v = 0
				}
				series[i] = append(series[i], v)
			}
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Pod start-up latency, create to Running (N=%d one at a time; burst: %d rounds of N, pooled; L=%s)",
		r.Config.N, r.Config.BurstRounds, r.Config.Delay)
	p.Y.Label.Text = "seconds"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	w := vg.Points(14)
	colors := []color.Color{
		color.RGBA{R: 0x4c, G: 0x78, B: 0xa8, A: 0xff},
		color.RGBA{R: 0xf5, G: 0x85, B: 0x18, A: 0xff},
		color.RGBA{R: 0xe4, G: 0x57, B: 0x56, A: 0xff},
	}
	for i, name := range []string{"p50", "p90", "p99"} {
		bars, err := plotter.NewBarChart(series[i], w)
		if err != nil {
			return err
		}
		bars.Color = colors[i]
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(i-1) * w
		p.Add(bars)
		p.Legend.Add(name, bars)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(labels...)
	return p.Save(26*vg.Centimeter, 13*vg.Centimeter, path)
}
