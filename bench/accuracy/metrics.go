package main

import (
	"math"
	"time"
)

// Kind is how an algorithm counts what its limit allows, and so what the
// harness holds its admissions to.
type Kind int

const (
	// Rolling: at most Events in any window of Window (sliding_log,
	// sliding_window).
	Rolling Kind = iota
	// Aligned: at most Events in each window aligned to the Unix epoch
	// (fixed_window), so up to twice that across a boundary.
	Aligned
	// Bucket: Burst at once, refilled at Events per Window (token_bucket,
	// leaky_bucket, gcra).
	Bucket
)

// Limit is the contract a case is held to.
type Limit struct {
	Events int
	Window time.Duration
	// Burst is a bucket's capacity (Kind Bucket); 0 means Events.
	Burst int
	Kind  Kind
}

// Admissible replays the limit on demand, the requests of each bin of
// length bin, and returns the most it admits from each bin: greedily, as
// early as the contract lets it. first is the bin's index since the Unix
// epoch (time / bin) of demand[0], which places the windows of Aligned.
// Window must be a multiple of bin. Requests of one bin are taken as
// simultaneous, which makes the replay at most a bin more lenient than the
// limit at the edges of a window, never stricter.
func Admissible(l Limit, bin time.Duration, first int64, demand []int) []int {
	out := make([]int, len(demand))
	perWindow := int(l.Window / bin)
	switch l.Kind {
	case Rolling:
		used := 0 // admitted in the perWindow-1 bins before i
		for i, d := range demand {
			if i >= perWindow {
				used -= out[i-perWindow]
			}
			out[i] = clamp(d, l.Events-used)
			used += out[i]
		}
	case Aligned:
		used := 0
		for i, d := range demand {
			if (first+int64(i))%int64(perWindow) == 0 {
				used = 0
			}
			out[i] = clamp(d, l.Events-used)
			used += out[i]
		}
	case Bucket:
		burst := float64(l.Burst)
		if l.Burst == 0 {
			burst = float64(l.Events)
		}
		refill := float64(l.Events) * float64(bin) / float64(l.Window)
		level := burst
		for i, d := range demand {
			// What a bin can use: the level at its start plus what
			// drips in during it; the level never exceeds the burst.
			avail := level + refill
			out[i] = clamp(d, int(math.Floor(avail+1e-9)))
			level = math.Min(burst, avail-float64(out[i]))
		}
	}
	return out
}

func clamp(v, most int) int {
	return max(0, min(v, most))
}

// MaxInWindow is the most admitted in any width consecutive bins (a
// sliding window); with fewer bins than width, their sum.
func MaxInWindow(bins []int, width int) int {
	sum, best := 0, 0
	for i, v := range bins {
		sum += v
		if i >= width {
			sum -= bins[i-width]
		}
		best = max(best, sum)
	}
	return best
}

// Accuracy is how one run's admissions compare with its limit.
type Accuracy struct {
	Offered, Admitted int
	// MaxWindow is the most admitted in any window of the limit's length
	// (at the bins' resolution).
	MaxWindow int
	// Allowed is what the limit admits of the offered requests.
	Allowed int
	// Over counts the admitted requests the limit did not allow: what a
	// replay of the limit on the admitted requests refuses.
	Over int
	// Under counts the requests the limit allowed but were refused: Allowed
	// less the admitted requests within the limit.
	Under int
}

// Measure compares admitted with what the limit allows of offered, both
// counts per bin from the bin whose index since the Unix epoch is first.
func Measure(l Limit, bin time.Duration, first int64, offered, admitted []int) Accuracy {
	a := Accuracy{
		Offered:   sum(offered),
		Admitted:  sum(admitted),
		MaxWindow: MaxInWindow(admitted, int(l.Window/bin)),
		Allowed:   sum(Admissible(l, bin, first, offered)),
	}
	a.Over = a.Admitted - sum(Admissible(l, bin, first, admitted))
	a.Under = max(0, a.Allowed-(a.Admitted-a.Over))
	return a
}

// OverPct and UnderPct are Over and Under in percent of Allowed.
func (a Accuracy) OverPct() float64  { return pct(a.Over, a.Allowed) }
func (a Accuracy) UnderPct() float64 { return pct(a.Under, a.Allowed) }

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}
