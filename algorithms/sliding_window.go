package algorithms

// sliding_window: per tier two counters, the previous and the current
// window (aligned to the Unix epoch); the previous one is weighted by how
// much of it still overlaps the rolling window. O(1) memory per tier, an
// approximation of sliding_log that assumes the previous window's traffic
// was spread evenly.
//
// Model, in integer microseconds except the weighted part p (the Lua twin
// must do the same, with the same float64 evaluation order):
//
//	per tier: E = Events, W = Window.Microseconds(); state: start, prev, cur
//	t     = max(now.UnixMicro(), last); last = t     (time never goes back)
//	ws    = t - (t mod W)                            (floor modulo)
//	roll: if ws != start:
//	        prev = (ws == start + W) ? cur : 0; cur = 0; start = ws
//	e     = t - start                                (0 <= e < W)
//	p(P, e) = P == 0 ? 0 : (float64(P) * float64(W - e)) / float64(W)
//	        (multiply first, then divide; no fused multiply-add)
//	estimate = p(prev, e) + cur
//	cost  < 0 is taken as 0
//	fits(P, C, e) = a >= 0 and p(P, e) <= float64(a), a = E - cost - C
//	        (integer a; the estimate itself is never rounded)
//	allowed iff cost <= E and fits(prev, cur, e) in every tier
//	allowed:  cur += cost in every tier
//	denied:   nothing, unless CountRejected: cur = min(E, cur + cost)
//	          in every tier
//	after the update, per tier:
//	  remaining = max(0, E - cur - ceil(p(prev, e)))  (= floor(E - estimate))
//	  reset     = cur > 0  ? start + 2W - t          (estimate 0 once the
//	            : prev > 0 ? start + W - t            current window is
//	            : 0                                   out of reach)
//	  wait      = cost > E            ? W
//	            : fits(prev, cur, e)  ? 0
//	            : first(prev, cur, e) exists -> first(prev, cur, e) - e
//	            : first(cur, 0, 0)    exists -> start + W + first(cur, 0, 0) - t
//	            : start + 2W - t
//	  where first(P, C, lo) is the smallest x in [lo, W) with fits(P, C, x)
//	  (fits is monotone in x). While P*W < 2^53 every product is exact
//	  and p(P, x) <= a exactly when P*(W-x) <= a*W, so it is
//	      max(lo, W - floor(a*W / P))   (integers; none if not below W)
//	  Otherwise it is found from the closed form
//	      x0 = ceil(float64(W) - float64(a) * float64(W) / float64(P))
//	  tried first (with x0-1), after checking fits at lo: no, at W-1: yes;
//	  then a bisection of what is left of (lo, W-1] (at most log2(W)
//	  rounds, whatever the rounding). Either way the result is exact for
//	  the model, never early (the Lua twin always takes the second way).
//	decision:
//	  allowed: the tier with the smallest remaining (ties: lowest index),
//	           RetryAfter 0
//	  denied:  the tier with the largest wait (ties: lowest index),
//	           RetryAfter = wait (with CountRejected the wait is computed on
//	           the state after counting)
//	  Limit = E, Remaining = remaining, ResetAfter = reset of that tier
//	  MoreAfter = remaining < E ? wait of cost remaining+1 : 0, of that
//	            tier (the first instant remaining grows: the weighted
//	            previous count shrinks as the rolling window moves on)
//	  durations = µs * time.Microsecond; Delay 0; Token 0
//	Undo (of an allowed decision with cost > 0; anything else is a no-op
//	  that does not even advance last): t as above; in every tier whose start
//	  equals ws(t): cur = max(0, cur - cost)
//	Idle: for every tier at max(now, last), after a (virtual) roll,
//	  prev == 0 and cur == 0
//
// Every integer stays below 2^53 (exact in the Lua twin's doubles) within
// MaxCount and MaxWindow: start + 2W is the largest.

import (
	"math"
	"time"
)

// SlidingWindow is the name of sliding_window.
const SlidingWindow = "sliding_window"

type slidingWindowState struct {
	winState
	tiers []SlidingCounts
	one   [1]SlidingCounts // tiers' array when there is one (winTiers)
}

// SlidingCounts is one tier of sliding_window: Events per Window (µs), Cur
// units counted in the window that starts at Start and Prev in the one
// before. Its methods are the model's arithmetic above, for an instant t
// in that window (Start <= t < Start + Window, Cur and Prev >= 0); the
// two-layer store (package redisstore) applies them to the counts of a fleet.
type SlidingCounts struct {
	Events, Window   int64 // E, W (µs)
	Start, Prev, Cur int64
}

// roll moves the counts to the window that holds t (t >= Start).
func (c *SlidingCounts) roll(t int64) {
	switch ws := winStart(t, c.Window); ws {
	case c.Start:
	case c.Start + c.Window:
		c.Start, c.Prev, c.Cur = ws, c.Cur, 0
	default:
		c.Start, c.Prev, c.Cur = ws, 0, 0
	}
}

// weighted is p(P, e): the part of P still inside the rolling window.
func (c *SlidingCounts) weighted(P, e int64) float64 {
	switch {
	case P == 0:
		return 0
	case e == 0 && float64(P)*float64(c.Window) < 1<<53:
		return float64(P) // P*W is exact, so P*W/W is P (beyond, it may not be)
	}
	x := float64(float64(P) * float64(c.Window-e))
	return x / float64(c.Window)
}

// fits reports whether a request of cost fits at offset e of a window
// whose previous and current counts are P and C.
func (c *SlidingCounts) fits(P, C, e, cost int64) bool {
	a := c.Events - cost - C
	return a >= 0 && c.weighted(P, e) <= float64(a)
}

// first returns the smallest x in [lo, W) with fits(P, C, x), or -1.
func (c *SlidingCounts) first(P, C, lo, cost int64) int64 {
	a := c.Events - cost - C
	switch {
	case a < 0:
		return -1
	case c.weighted(P, lo) <= float64(a): // fits(P, C, lo, cost)
		return lo
	}
	return c.firstAfter(P, a, lo)
}

// firstAfter is first for a request that does not fit at bad, given a
// (E - cost - C >= 0): the smallest x in (bad, W) with weighted(P, x) <= a,
// or -1.
func (c *SlidingCounts) firstAfter(P, a, bad int64) int64 {
	// Here weighted(P, bad) > a >= 0, so P > 0.
	W := c.Window
	if float64(P)*float64(W) < 1<<53 {
		// Every product here is exact in a double, so the rounded
		// weighted(P, x) <= a exactly when P*(W-x) <= a*W (a quotient
		// above a by 1/W or more rounds above a while a*W < 2^53):
		// x >= W - floor(a*W/P).
		if x := max(bad+1, W-a*W/P); x < W {
			return x
		}
		return -1
	}
	return c.firstAfterRounded(P, a, bad)
}

// firstAfterRounded is firstAfter where P*W reaches 2^53, and weighted
// rounds its product.
func (c *SlidingCounts) firstAfterRounded(P, a, bad int64) int64 {
	// weighted is monotone in x (rounding is), so a bisection finds the
	// answer; the closed form is almost always exact, so it is tried
	// first, and when it is, the answer costs two more divisions.
	W, fa := c.Window, float64(a)
	good := W // weighted(P, good) <= a, or good == W: none found yet
	f := math.Ceil(float64(W) - fa*float64(W)/float64(P))
	if f > float64(bad) && f < float64(W) {
		x := int64(f)
		if c.weighted(P, x) <= fa {
			if x-1 == bad || c.weighted(P, x-1) > fa {
				return x
			}
			good = x - 1
		} else {
			bad = x
		}
	}
	if good == W {
		if bad == W-1 || c.weighted(P, W-1) > fa {
			return -1
		}
		good = W - 1
	}
	for good-bad > 1 { // at most log2(W) < 50 rounds
		m := bad + (good-bad)/2
		if c.weighted(P, m) <= fa {
			good = m
		} else {
			bad = m
		}
	}
	return good
}

// Fits reports whether a request of cost is admitted at t. (fits checks
// cost <= Events - Cur, so cost <= Events: Cur >= 0.)
func (c *SlidingCounts) Fits(t, cost int64) bool {
	return c.fits(c.Prev, c.Cur, t-c.Start, cost)
}

// Remaining is how many units are admitted at t: floor(E - estimate), at
// least 0.
func (c *SlidingCounts) Remaining(t int64) int64 {
	if w := math.Ceil(c.weighted(c.Prev, t-c.Start)); w < float64(c.Events-c.Cur) {
		return c.Events - c.Cur - int64(w)
	}
	return 0
}

// ResetAfter is how long after t (µs) the estimate is 0 if nothing more
// arrives.
func (c *SlidingCounts) ResetAfter(t int64) int64 {
	switch {
	case c.Cur > 0:
		return c.Start + 2*c.Window - t
	case c.Prev > 0:
		return c.Start + c.Window - t
	}
	return 0
}

// MoreAfter is how long after t (µs) more than Remaining(t) units are
// admitted if nothing more arrives: the wait of Remaining(t)+1 units; 0
// when the estimate is 0 (Remaining is Events).
func (c *SlidingCounts) MoreAfter(t int64) int64 {
	return c.moreAfter(t, c.Remaining(t))
}

// moreAfter is MoreAfter given r, Remaining(t).
func (c *SlidingCounts) moreAfter(t, r int64) int64 {
	if r >= c.Events {
		return 0
	}
	if c.Prev == 0 && c.Cur > 0 && float64(c.Cur)*float64(c.Window) < 1<<53 {
		return c.moreAfterQuiet(t, r)
	}
	return c.moreAfterAny(t, r)
}

// moreAfterQuiet is moreAfter after a quiet window (Prev 0: a key's first
// window, or one after a window without traffic), which moreAfterAny
// decides through three calls: r is then E - Cur (Cur <= E)
// or 0, so r+1 units fit nowhere in this window, and in the next one
// they fit once Cur's weight there is down to a = E - (r+1) < Cur:
// nextWindow's firstAfter(Cur, a, 0), exact while Cur*W < 2^53, whose x
// is at least 1 (a*W/Cur < W).
func (c *SlidingCounts) moreAfterQuiet(t, r int64) int64 {
	W := c.Window
	if x := W - (c.Events-r-1)*W/c.Cur; x < W {
		return c.Start + W + x - t
	}
	return c.Start + 2*W - t
}

// moreAfterAny is moreAfter for any counts.
func (c *SlidingCounts) moreAfterAny(t, r int64) int64 {
	// r+1 units do not fit at t (r is the most that does), so the search
	// starts after t.
	if a := c.Events - (r + 1) - c.Cur; a >= 0 {
		e := t - c.Start
		if x := c.firstAfter(c.Prev, a, e); x >= 0 {
			return x - e
		}
	}
	return c.nextWindow(t, r+1)
}

// RetryAfter is how long after t (µs) a request of cost is admitted if
// nothing else arrives: 0 if it is now, Window if it never is (cost above
// Events).
func (c *SlidingCounts) RetryAfter(t, cost int64) int64 {
	if cost > c.Events {
		return c.Window
	}
	e := t - c.Start
	if x := c.first(c.Prev, c.Cur, e, cost); x >= 0 {
		return x - e
	}
	return c.nextWindow(t, cost)
}

// nextWindow is RetryAfter for a request of cost that fits nowhere in the
// current window: Cur becomes the previous window's count.
func (c *SlidingCounts) nextWindow(t, cost int64) int64 {
	if x := c.first(c.Cur, 0, 0, cost); x >= 0 {
		return c.Start + c.Window + x - t
	}
	return c.Start + 2*c.Window - t
}

func (s *slidingWindowState) Take(now time.Time, cost int64) (d Decision) {
	t, cost := s.begin(now, cost)
	ok := true
	for i := range s.tiers {
		tr := &s.tiers[i]
		tr.roll(t)
		ok = tr.Fits(t, cost) && ok
	}
	p := TierPick{Allowed: ok}
	for i := range s.tiers {
		tr := &s.tiers[i]
		tr.Cur = winCount(tr.Cur, cost, tr.Events, ok, s.countRejected)
		rem := tr.Remaining(t)
		var wait, more int64
		if !ok {
			wait = tr.RetryAfter(t, cost)
		} else if len(s.tiers) > 1 {
			more = tr.moreAfter(t, rem) // a tie in rem goes to the longest
		}
		p.Offer(i, tr.Events, rem, tr.ResetAfter(t), wait, more)
	}
	// MoreAfter is the wait of p.rem+1 units in the tier picked: when
	// denied, that is usually the cost (a denied tier has none left), whose
	// wait is known (unless the cost exceeds Events: then it is Window).
	more := p.wait
	switch {
	case ok && len(s.tiers) > 1:
		more = p.More()
	case ok || p.rem+1 != cost || cost > p.limit:
		more = s.tiers[p.tier].moreAfter(t, p.rem)
	}
	p.fill(&d, more)
	return d
}

func (s *slidingWindowState) Undo(now time.Time, cost int64, d Decision) {
	if t, ok := s.undoes(now, cost, d); ok {
		for i := range s.tiers {
			if tr := &s.tiers[i]; tr.Start == winStart(t, tr.Window) {
				tr.Cur -= min(tr.Cur, cost)
			}
		}
	}
}

func (s *slidingWindowState) Idle(now time.Time) bool {
	t := s.at(now)
	for i := range s.tiers {
		c := s.tiers[i]
		if c.roll(t); c.Prev != 0 || c.Cur != 0 {
			return false
		}
	}
	return true
}

func init() {
	register(Algorithm{Name: SlidingWindow, New: newWinAlgorithm(SlidingWindow, newSlidingWindowState), Summable: true, rank: 1})
}

func newSlidingWindowState(l *winLimiter) State {
	s := &slidingWindowState{winState: newWinState(l)}
	s.tiers = winTiers(l.cfg, newSWTier, &s.one)
	return s
}

func newSWTier(e, w int64) SlidingCounts { return SlidingCounts{Events: e, Window: w} }

// Relimit keeps each tier's counts; they roll at the next Take as the
// window of the new length holding it requires.
func (s *slidingWindowState) Relimit(_ time.Time, l Limiter) {
	if cfg, ok := s.relimits(l); ok {
		s.tiers = relimitTiers(s.tiers, cfg, newSWTier, func(c *SlidingCounts, e, w int64) { c.Events, c.Window = e, w })
	}
}
