package main

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// wellFormed fails t unless doc parses as XML.
func wellFormed(t *testing.T, name, doc string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
	}
}

func TestPlots(t *testing.T) {
	c := config{events: 100, window: time.Second, redis: "127.0.0.1:6379", syncInterval: 200 * time.Millisecond}
	l := Limit{Events: 100, Window: time.Second, Kind: Aligned}
	offered, admitted := steady(20, 40), steady(20, 10)
	admitted[12] = 30
	var rs []result
	for _, m := range []string{"memory", "sync"} {
		rs = append(rs, result{alg: "fixed_window", mode: m, factor: 4, limit: l, bin: bin,
			offered: offered, admitted: admitted, acc: Measure(l, bin, 0, offered, admitted)})
	}
	modes := c.modes()
	p := modesPlot([]float64{4}, modes, rs)
	wellFormed(t, "modes.svg", p)
	for _, want := range []string{"store has no leased mode", "n/a", "10.0"} {
		if !strings.Contains(p, want) {
			t.Errorf("modes.svg lacks %q", want)
		}
	}
	p = algorithmPlot("fixed_window", []float64{4}, modes, rs)
	wellFormed(t, "fixed_window.svg", p)
	if n := strings.Count(p, "<polyline"); n != 3 {
		t.Errorf("fixed_window.svg has %d lines, want 3 (offered, memory, sync)", n)
	}
}

func TestSVGEscapes(t *testing.T) {
	s := newSVG(10, 10)
	s.text(1, 1, "start", `a<b & "c"`)
	wellFormed(t, "text", s.String())
}

func TestTicks(t *testing.T) {
	got := ticks(-44, 44, 6)
	want := []float64{-40, -20, 0, 20, 40}
	if len(got) != len(want) {
		t.Fatalf("ticks(-44, 44) = %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("ticks(-44, 44) = %v, want %v", got, want)
		}
	}
}
