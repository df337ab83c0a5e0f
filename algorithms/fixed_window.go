package algorithms

// fixed_window: one counter per tier for the current window, windows aligned
// to the Unix epoch. Cheap (two integers per tier) but NOT a rolling window:
// a client may use a tier's whole quota at the end of one window and again
// at the start of the next, so up to 2 x Events can pass within any span of
// one Window that straddles a boundary. Pick sliding_log or sliding_window
// when that burst matters.
//
// Model, in integer microseconds (the Lua twin must do the same; all values
// are integers, exact in doubles up to 2^53):
//
//	per tier: E = Events, W = Window.Microseconds(); state: start, count
//	t     = max(now.UnixMicro(), last); last = t     (time never goes back)
//	ws    = t - (t mod W)                            (floor modulo)
//	if ws != start: start = ws; count = 0            (a new window)
//	cost  < 0 is taken as 0
//	fits  = cost <= E and count <= E - cost
//	allowed iff fits in every tier
//	allowed:  count += cost in every tier
//	denied:   nothing, unless CountRejected: count = min(E, count + cost)
//	          in every tier (lossless: any count >= E refuses everything)
//	after the update, per tier:
//	  remaining = E - count
//	  reset     = count > 0 ? start + W - t : 0
//	  wait      = cost > E ? W : (count <= E - cost ? 0 : start + W - t)
//	decision:
//	  allowed: the tier with the smallest remaining (ties: lowest index),
//	           RetryAfter 0
//	  denied:  the tier with the largest wait (ties: lowest index),
//	           RetryAfter = wait (with CountRejected the wait is computed on
//	           the state after counting, so it covers every tier that would
//	           refuse the next request)
//	  Limit = E, Remaining = remaining, ResetAfter = reset of that tier,
//	  MoreAfter = ResetAfter (nothing comes back before the window ends)
//	  durations = µs * time.Microsecond; Delay 0; Token 0
//	Undo (of an allowed decision with cost > 0; anything else is a no-op
//	  that does not even advance last): t as above; in every tier whose start
//	  equals ws(t) (the Take's window is still current):
//	  count = max(0, count - cost)
//	Idle: every tier has count == 0 or start != ws(max(now, last))

import "time"

// FixedWindow is the name of fixed_window.
const FixedWindow = "fixed_window"

// FixedCounts is one tier of fixed_window: Events per Window (µs), and
// Count units counted in the window that starts at Start. Its methods are
// the model's arithmetic above, for an instant t in that window; the
// two-layer store (package redisstore) applies them to the counts of a
// fleet.
type FixedCounts struct {
	Events, Window int64 // E, W (µs)
	Start, Count   int64
}

// current reports whether the tier's window is the one that holds t.
func (c *FixedCounts) current(t int64) bool { return c.Start == winStart(t, c.Window) }

// Fits reports whether a request of cost fits the window's count.
func (c *FixedCounts) Fits(cost int64) bool { return cost <= c.Events && c.Count <= c.Events-cost }

// Report is what a decision on cost at t (allowed: ok) says of the tier,
// its count updated: the units remaining, when the window's count resets
// (0 while it is empty; nothing comes back before then), and for a denial
// how long until cost could fit.
func (c *FixedCounts) Report(t, cost int64, ok bool) (remaining, reset, wait int64) {
	if c.Count > 0 {
		reset = c.Start + c.Window - t
	}
	if !ok && cost > c.Events {
		wait = c.Window
	} else if !ok && c.Count > c.Events-cost {
		wait = reset
	}
	return c.Events - c.Count, reset, wait
}

type fixedWindowState struct {
	winState
	tiers []FixedCounts
	one   [1]FixedCounts // tiers' array when there is one (winTiers)
}

func init() {
	register(Algorithm{Name: FixedWindow, New: newWinAlgorithm(FixedWindow, newFixedWindowState), Summable: true, rank: 2})
}

func newFixedWindowState(l *winLimiter) State {
	s := &fixedWindowState{winState: newWinState(l)}
	s.tiers = winTiers(l.cfg, newFWTier, &s.one)
	return s
}

func newFWTier(e, w int64) FixedCounts { return FixedCounts{Events: e, Window: w} }

// Relimit keeps each tier's count; a tier whose window start changes
// with its window length starts afresh at its next Take.
func (s *fixedWindowState) Relimit(_ time.Time, l Limiter) {
	if cfg, ok := s.relimits(l); ok {
		s.tiers = relimitTiers(s.tiers, cfg, newFWTier, func(tr *FixedCounts, e, w int64) { tr.Events, tr.Window = e, w })
	}
}

func (s *fixedWindowState) Take(now time.Time, cost int64) (d Decision) {
	t, cost := s.begin(now, cost)
	ok := true
	for i := range s.tiers {
		tr := &s.tiers[i]
		if ws := winStart(t, tr.Window); ws != tr.Start {
			tr.Start, tr.Count = ws, 0
		}
		ok = ok && tr.Fits(cost)
	}
	p := TierPick{Allowed: ok}
	for i := range s.tiers {
		tr := &s.tiers[i]
		tr.Count = winCount(tr.Count, cost, tr.Events, ok, s.countRejected)
		rem, reset, wait := tr.Report(t, cost, ok)
		p.Offer(i, tr.Events, rem, reset, wait, reset)
	}
	p.fill(&d, p.reset) // nothing comes back before the window ends
	return d
}

func (s *fixedWindowState) Undo(now time.Time, cost int64, d Decision) {
	if t, ok := s.undoes(now, cost, d); ok {
		for i := range s.tiers {
			if tr := &s.tiers[i]; tr.current(t) {
				tr.Count -= min(tr.Count, cost)
			}
		}
	}
}

func (s *fixedWindowState) Idle(now time.Time) bool {
	t := s.at(now)
	for i := range s.tiers {
		if tr := &s.tiers[i]; tr.Count > 0 && tr.current(t) {
			return false
		}
	}
	return true
}
