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
//	  Limit = E, Remaining = remaining, ResetAfter = reset of that tier
//	  durations = µs * time.Microsecond; Delay 0; Token 0
//	Undo (of an allowed decision with cost > 0; anything else is a no-op
//	  that does not even advance last): t as above; in every tier whose start
//	  equals ws(t) (the Take's window is still current):
//	  count = max(0, count - cost)
//	Idle: every tier has count == 0 or start != ws(max(now, last))

import (
	"math"
	"time"
)

type fixedWindow struct {
	cfg Config
}

func newFixedWindow(cfg Config) (Limiter, error) {
	cfg.Tiers = append([]Tier(nil), cfg.Tiers...)
	return &fixedWindow{cfg: cfg}, nil
}

func (l *fixedWindow) Name() string   { return FixedWindow }
func (l *fixedWindow) Config() Config { return l.cfg }

func (l *fixedWindow) NewState() State {
	s := &fixedWindowState{
		last:          math.MinInt64,
		countRejected: l.cfg.CountRejected,
		tiers:         make([]fwTier, len(l.cfg.Tiers)),
	}
	for i, t := range l.cfg.Tiers {
		s.tiers[i] = fwTier{events: t.Events, window: t.Window.Microseconds()}
	}
	return s
}

type fwTier struct {
	events, window int64 // E, W (µs)
	start, count   int64
}

type fixedWindowState struct {
	last          int64 // latest instant seen (µs)
	countRejected bool
	tiers         []fwTier
}

func (s *fixedWindowState) Take(now time.Time, cost int64) Decision {
	t := winClamp(&s.last, now)
	if cost < 0 {
		cost = 0
	}
	ok := true
	for i := range s.tiers {
		tr := &s.tiers[i]
		if ws := t - winMod(t, tr.window); ws != tr.start {
			tr.start, tr.count = ws, 0
		}
		if cost > tr.events || tr.count > tr.events-cost {
			ok = false
		}
	}
	switch {
	case ok:
		for i := range s.tiers {
			s.tiers[i].count += cost
		}
	case s.countRejected:
		for i := range s.tiers {
			tr := &s.tiers[i]
			if cost >= tr.events-tr.count {
				tr.count = tr.events
			} else {
				tr.count += cost
			}
		}
	}
	p := TierPick{Allowed: ok}
	for i := range s.tiers {
		tr := &s.tiers[i]
		var reset, wait int64
		if tr.count > 0 {
			reset = tr.start + tr.window - t
		}
		if !ok {
			switch {
			case cost > tr.events:
				wait = tr.window
			case tr.count > tr.events-cost:
				wait = tr.start + tr.window - t
			}
		}
		p.Offer(i, tr.events, tr.events-tr.count, reset, wait)
	}
	return p.Decision()
}

func (s *fixedWindowState) Undo(now time.Time, cost int64, d Decision) {
	if !d.Allowed || cost <= 0 {
		return
	}
	t := winClamp(&s.last, now)
	for i := range s.tiers {
		tr := &s.tiers[i]
		if tr.start == t-winMod(t, tr.window) {
			tr.count -= min(tr.count, cost)
		}
	}
}

func (s *fixedWindowState) Idle(now time.Time) bool {
	t := max(now.UnixMicro(), s.last)
	for i := range s.tiers {
		tr := &s.tiers[i]
		if tr.count > 0 && tr.start == t-winMod(t, tr.window) {
			return false
		}
	}
	return true
}

// Helpers shared by sliding_log, sliding_window and fixed_window.

// winClamp returns now in µs, never earlier than *last, and advances *last.
func winClamp(last *int64, now time.Time) int64 {
	t := now.UnixMicro()
	if t < *last {
		return *last
	}
	*last = t
	return t
}

// winMod is a mod b rounded toward minus infinity (Lua's %), b > 0.
func winMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// winDur converts µs to a Duration, saturating instead of overflowing.
func winDur(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// TierPick chooses the tier a Decision describes: when allowed the one with
// the fewest remaining, when denied the one with the longest wait; ties go
// to the lowest index (the first offered). The window algorithms use it,
// and so does the two-layer store (package lua), so that their decisions
// describe the same tier.
type TierPick struct {
	// Allowed is whether every tier admitted the request.
	Allowed bool

	set                     bool
	tier                    int
	limit, rem, reset, wait int64
}

// Offer considers tier i: its limit, remaining units, and the microseconds
// until it is whole again (reset) and, when denied, until the request
// would be admitted (wait).
func (p *TierPick) Offer(i int, limit, rem, reset, wait int64) {
	if rem < 0 {
		rem = 0
	}
	if p.set {
		if p.Allowed && rem >= p.rem || !p.Allowed && wait <= p.wait {
			return
		}
	}
	p.set, p.tier, p.limit, p.rem, p.reset, p.wait = true, i, limit, rem, reset, wait
}

// Decision is the decision describing the tier picked.
func (p *TierPick) Decision() Decision {
	d := Decision{
		Allowed:    p.Allowed,
		Tier:       p.tier,
		Limit:      p.limit,
		Remaining:  p.rem,
		ResetAfter: winDur(p.reset),
	}
	if !p.Allowed {
		d.RetryAfter = winDur(p.wait)
	}
	return d
}
