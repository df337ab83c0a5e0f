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
//	  (fits is monotone in x). It is found from the closed form
//	      x0 = ceil(float64(W) - float64(a) * float64(W) / float64(P))
//	  tried first (with x0-1), after checking fits at lo: no, at W-1: yes;
//	  then a bisection of what is left of (lo, W-1] (at most log2(W)
//	  rounds, whatever the rounding): the result is exact for the model,
//	  never early.
//	decision:
//	  allowed: the tier with the smallest remaining (ties: lowest index),
//	           RetryAfter 0
//	  denied:  the tier with the largest wait (ties: lowest index),
//	           RetryAfter = wait (with CountRejected the wait is computed on
//	           the state after counting)
//	  Limit = E, Remaining = remaining, ResetAfter = reset of that tier
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

type slidingWindow struct {
	cfg Config
}

func newSlidingWindow(cfg Config) (Limiter, error) {
	cfg.Tiers = append([]Tier(nil), cfg.Tiers...)
	return &slidingWindow{cfg: cfg}, nil
}

func (l *slidingWindow) Name() string   { return SlidingWindow }
func (l *slidingWindow) Config() Config { return l.cfg }

func (l *slidingWindow) NewState() State {
	s := &slidingWindowState{
		last:          math.MinInt64,
		countRejected: l.cfg.CountRejected,
		tiers:         make([]swTier, len(l.cfg.Tiers)),
	}
	for i, t := range l.cfg.Tiers {
		s.tiers[i] = swTier{events: t.Events, window: t.Window.Microseconds()}
	}
	return s
}

type swTier struct {
	events, window   int64 // E, W (µs)
	start, prev, cur int64
}

type slidingWindowState struct {
	last          int64 // latest instant seen (µs)
	countRejected bool
	tiers         []swTier
}

// counters returns start, prev and cur as they are at t (t >= start).
func (tr *swTier) counters(t int64) (start, prev, cur int64) {
	ws := t - winMod(t, tr.window)
	switch ws {
	case tr.start:
		return tr.start, tr.prev, tr.cur
	case tr.start + tr.window:
		return ws, tr.cur, 0
	}
	return ws, 0, 0
}

// weighted is p(P, e): the part of P still inside the rolling window.
func (tr *swTier) weighted(P, e int64) float64 {
	if P == 0 {
		return 0
	}
	x := float64(float64(P) * float64(tr.window-e))
	return x / float64(tr.window)
}

// fits reports whether a request of cost fits at offset e of a window
// whose previous and current counts are P and C.
func (tr *swTier) fits(P, C, e, cost int64) bool {
	a := tr.events - cost - C
	return a >= 0 && tr.weighted(P, e) <= float64(a)
}

// first returns the smallest x in [lo, W) with fits(P, C, x), or -1.
func (tr *swTier) first(P, C, lo, cost int64) int64 {
	a := tr.events - cost - C
	if a < 0 {
		return -1
	}
	if tr.fits(P, C, lo, cost) {
		return lo
	}
	W := tr.window
	if !tr.fits(P, C, W-1, cost) {
		return -1
	}
	// Here P > 0 and lo < W-1: the answer is in (lo, W-1]. fits is
	// monotone in x (rounding is), so a bisection finds it; the closed form
	// is almost always exact, so it is tried first.
	f := math.Ceil(float64(W) - float64(a)*float64(W)/float64(P))
	bad, good := lo, W-1 // !fits(bad), fits(good)
	if f > float64(bad) && f < float64(good) {
		x := int64(f)
		if tr.fits(P, C, x, cost) {
			good = x
			if x-1 > bad && !tr.fits(P, C, x-1, cost) {
				bad = x - 1
			}
		} else {
			bad = x
		}
	}
	for good-bad > 1 { // at most log2(W) < 50 rounds
		m := bad + (good-bad)/2
		if tr.fits(P, C, m, cost) {
			good = m
		} else {
			bad = m
		}
	}
	return good
}

// wait is how long after t a request of cost fits, the tier's state being
// already rolled to t.
func (tr *swTier) wait(t, cost int64) int64 {
	if cost > tr.events {
		return tr.window
	}
	e := t - tr.start
	if x := tr.first(tr.prev, tr.cur, e, cost); x >= 0 {
		return x - e
	}
	if x := tr.first(tr.cur, 0, 0, cost); x >= 0 {
		return tr.start + tr.window + x - t
	}
	return tr.start + 2*tr.window - t
}

func (s *slidingWindowState) Take(now time.Time, cost int64) Decision {
	t := winClamp(&s.last, now)
	if cost < 0 {
		cost = 0
	}
	ok := true
	for i := range s.tiers {
		tr := &s.tiers[i]
		tr.start, tr.prev, tr.cur = tr.counters(t)
		if cost > tr.events || !tr.fits(tr.prev, tr.cur, t-tr.start, cost) {
			ok = false
		}
	}
	switch {
	case ok:
		for i := range s.tiers {
			s.tiers[i].cur += cost
		}
	case s.countRejected:
		for i := range s.tiers {
			tr := &s.tiers[i]
			if cost >= tr.events-tr.cur {
				tr.cur = tr.events
			} else {
				tr.cur += cost
			}
		}
	}
	p := TierPick{Allowed: ok}
	for i := range s.tiers {
		tr := &s.tiers[i]
		var reset, wait int64
		switch {
		case tr.cur > 0:
			reset = tr.start + 2*tr.window - t
		case tr.prev > 0:
			reset = tr.start + tr.window - t
		}
		if !ok {
			wait = tr.wait(t, cost)
		}
		var rem int64
		if c := math.Ceil(tr.weighted(tr.prev, t-tr.start)); c < float64(tr.events-tr.cur) {
			rem = tr.events - tr.cur - int64(c)
		}
		p.Offer(i, tr.events, rem, reset, wait)
	}
	return p.Decision()
}

func (s *slidingWindowState) Undo(now time.Time, cost int64, d Decision) {
	if !d.Allowed || cost <= 0 {
		return
	}
	t := winClamp(&s.last, now)
	for i := range s.tiers {
		tr := &s.tiers[i]
		if tr.start == t-winMod(t, tr.window) {
			tr.cur -= min(tr.cur, cost)
		}
	}
}

func (s *slidingWindowState) Idle(now time.Time) bool {
	t := max(now.UnixMicro(), s.last)
	for i := range s.tiers {
		if _, prev, cur := s.tiers[i].counters(t); prev != 0 || cur != 0 {
			return false
		}
	}
	return true
}
