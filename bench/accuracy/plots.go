package main

import (
	"fmt"
	"math"
	"time"
)

// result is one run: an algorithm in a mode at one offered rate.
type result struct {
	alg, mode string
	factor    float64 // offered rate over the limit's rate
	limit     Limit
	bin       time.Duration
	acc       Accuracy
	// offered and admitted are counts per bin.
	offered, admitted    []int
	sent, denied, errors int // requests; 429s; other statuses and failed requests
	lag                  time.Duration
}

var modeColors = map[string]string{"memory": "#1f77b4", "redis": "#d62728", "sync": "#2ca02c", "leased": "#9467bd"}

// algorithmPlot draws, for one algorithm, one panel per offered rate: the
// requests offered and admitted per bin in each mode, and the limit's rate
// per bin.
func algorithmPlot(alg string, factors []float64, modes []mode, rs []result) string {
	const width, left, panelH, gap = 760.0, 50.0, 150.0, 45.0
	s := newSVG(width, 40+float64(len(factors))*(panelH+gap))
	s.text(left, 18, "start", alg+": requests per bin, offered (grey) and admitted per mode; dashed: the limit's rate")
	x := left + 300
	for _, m := range modes {
		if ok, _ := m.supports(alg); ok {
			c := modeColors[m.name]
			s.line(x, 30, x+18, 30, c, "")
			s.text(x+22, 34, "start", m.name)
			x += 80
		}
	}
	for i, f := range factors {
		var runs []result
		for _, r := range rs {
			if r.alg == alg && r.factor == f {
				runs = append(runs, r)
			}
		}
		if len(runs) == 0 {
			continue
		}
		r0 := runs[0]
		perBin := float64(r0.limit.Events) * float64(r0.bin) / float64(r0.limit.Window)
		yMax, bins := int(perBin), 0
		for _, r := range runs {
			for j := range r.offered {
				yMax = max(yMax, r.offered[j], r.admitted[j])
			}
			bins = max(bins, len(r.offered))
		}
		fr := frame{left: left, top: 60 + float64(i)*(panelH+gap), width: width - left - 20, height: panelH,
			xMax: float64(bins) * r0.bin.Seconds(), yMax: float64(yMax) * 1.1}
		fr.axes(s, fmt.Sprintf("offered %g x the limit (%d per %s)", f, r0.limit.Events, r0.limit.Window),
			ticks(0, fr.yMax, 4), "%g")
		for _, t := range ticks(0, fr.xMax, 8) {
			s.text(fr.x(t), fr.top+panelH+13, "middle", fmt.Sprintf("%gs", t))
		}
		for k, r := range runs {
			// Each mode thinner than the one before, so that where
			// they admit the same the lines beneath still show.
			xs, ys := steps(fr, r.bin, r.admitted)
			s.polyline(xs, ys, modeColors[r.mode], 3.2-float64(k)*0.7)
		}
		xs, ys := steps(fr, r0.bin, r0.offered)
		s.polyline(xs, ys, "#888", 1)
		s.line(fr.x(0), fr.y(perBin), fr.x(fr.xMax), fr.y(perBin), "black", "4 3")
	}
	return s.String()
}

// steps are the points of a step line through counts per bin.
func steps(fr frame, bin time.Duration, counts []int) (xs, ys []float64) {
	for i, c := range counts {
		t := float64(i) * bin.Seconds()
		xs = append(xs, fr.x(t), fr.x(t+bin.Seconds()))
		ys = append(ys, fr.y(float64(c)), fr.y(float64(c)))
	}
	return xs, ys
}

var factorColors = []string{"#9ecae1", "#4292c6", "#08306b"}

// modesPlot draws one panel per mode: for each algorithm and offered rate,
// over-admission as a bar up and under-admission as a bar down, in percent
// of what the limit allowed.
func modesPlot(factors []float64, modes []mode, rs []result) string {
	const width, left, panelH, gap = 760.0, 50.0, 140.0, 50.0
	s := newSVG(width, 40+float64(len(modes))*(panelH+gap))
	s.text(left, 18, "start", "over-admission (up) and under-admission (down), % of what the limit allowed")
	x := left + 420
	for i, f := range factors {
		s.rect(x, 24, 12, 10, factorColors[i%len(factorColors)])
		s.text(x+16, 34, "start", fmt.Sprintf("%g x", f))
		x += 60
	}
	top := 0.0
	for _, r := range rs {
		top = math.Max(top, math.Max(r.acc.OverPct(), r.acc.UnderPct()))
	}
	top = math.Max(5, math.Ceil(top*1.1))
	for i, m := range modes {
		fr := frame{left: left, top: 60 + float64(i)*(panelH+gap), width: width - left - 20, height: panelH,
			xMax: float64(len(algorithms)), yMin: -top, yMax: top}
		fr.axes(s, m.name, ticks(-top, top, 6), "%g%%")
		s.line(fr.x(0), fr.y(0), fr.x(fr.xMax), fr.y(0), "#555", "")
		if m.skip != "" {
			s.text(fr.x(fr.xMax/2), fr.y(0)-8, "middle", "skipped: "+m.skip)
			continue
		}
		barW := 0.8 / float64(len(factors))
		for a, alg := range algorithms {
			s.text(fr.x(float64(a)+0.5), fr.top+panelH+13, "middle", alg.name)
			if ok, _ := m.supports(alg.name); !ok {
				s.text(fr.x(float64(a)+0.5), fr.y(0)-6, "middle", "n/a")
				continue
			}
			for k, f := range factors {
				for _, r := range rs {
					if r.alg != alg.name || r.mode != m.name || r.factor != f {
						continue
					}
					x0 := fr.x(float64(a) + 0.1 + float64(k)*barW)
					w := fr.x(barW) - fr.x(0)
					c := factorColors[k%len(factorColors)]
					over, under := r.acc.OverPct(), r.acc.UnderPct()
					s.rect(x0, fr.y(over), w, fr.y(0)-fr.y(over), c)
					s.rect(x0, fr.y(0), w, fr.y(-under)-fr.y(0), c)
					// Small figures would not show as bars.
					if over >= 0.1 {
						s.textSize(x0+w/2, fr.y(over)-3, "middle", 8, fmt.Sprintf("%.1f", over))
					}
					if under >= 0.1 {
						s.textSize(x0+w/2, fr.y(-under)+9, "middle", 8, fmt.Sprintf("%.1f", under))
					}
				}
			}
		}
	}
	return s.String()
}
