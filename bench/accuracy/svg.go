package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// svg is a minimal SVG writer: the shapes the plots need, in user units
// with the origin at the top left.
type svg struct {
	b strings.Builder
}

func newSVG(width, height float64) *svg {
	s := &svg{}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&s.b, `<rect width="%g" height="%g" fill="white"/>`+"\n", width, height)
	return s
}

func (s *svg) rect(x, y, w, h float64, fill string) {
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, w, h, fill)
}

// line draws a segment; dash is an SVG stroke-dasharray ("" for solid).
func (s *svg) line(x1, y1, x2, y2 float64, stroke, dash string) {
	fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"`, x1, y1, x2, y2, stroke)
	if dash != "" {
		fmt.Fprintf(&s.b, ` stroke-dasharray="%s"`, dash)
	}
	s.b.WriteString("/>\n")
}

func (s *svg) polyline(xs, ys []float64, stroke string, width float64) {
	fmt.Fprintf(&s.b, `<polyline fill="none" stroke="%s" stroke-width="%g" points="`, stroke, width)
	for i := range xs {
		fmt.Fprintf(&s.b, "%.1f,%.1f ", xs[i], ys[i])
	}
	s.b.WriteString("\"/>\n")
}

// text writes str at (x, y); anchor is start, middle or end.
func (s *svg) text(x, y float64, anchor, str string) { s.textSize(x, y, anchor, 11, str) }

func (s *svg) textSize(x, y float64, anchor string, size float64, str string) {
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%g">%s</text>`+"\n",
		x, y, anchor, size, html.EscapeString(str))
}

func (s *svg) String() string { return s.b.String() + "</svg>\n" }

// frame maps data coordinates to a rectangle of the picture: x from 0 to
// xMax left to right, y from yMin to yMax bottom to top.
type frame struct {
	left, top, width, height float64
	xMax, yMin, yMax         float64
}

func (f frame) x(v float64) float64 { return f.left + v/f.xMax*f.width }
func (f frame) y(v float64) float64 {
	return f.top + f.height - (v-f.yMin)/(f.yMax-f.yMin)*f.height
}

// axes draws the frame's box, a grid line and label at each y tick and the
// title above.
func (f frame) axes(s *svg, title string, yTicks []float64, yFormat string) {
	s.rect(f.left, f.top, f.width, f.height, "#fafafa")
	for _, t := range yTicks {
		s.line(f.left, f.y(t), f.left+f.width, f.y(t), "#ddd", "")
		s.text(f.left-4, f.y(t)+4, "end", fmt.Sprintf(yFormat, t))
	}
	s.text(f.left, f.top-5, "start", title)
}

// ticks returns about n round steps from lo to hi (1, 2 or 5 times a
// power of ten apart).
func ticks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	var out []float64
	for i := math.Ceil(lo / step); i*step <= hi+step/1e6; i++ {
		out = append(out, i*step+0) // +0: no "-0" label
	}
	return out
}
