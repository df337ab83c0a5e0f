package algorithms

import "time"

// Looking at a key's state without consuming: what an operator sees of
// every tier, from the same per-tier arithmetic as Take.

// TierStatus is one tier of a key at an instant, as a Take of cost 0 would
// see it.
type TierStatus struct {
	// Limit is the tier's Events (its burst for bucket algorithms).
	Limit int64

	// Remaining is how many units the tier would admit now.
	Remaining int64

	// ResetAfter is how long until the tier is whole again if nothing
	// more arrives.
	ResetAfter time.Duration
}

// Peeker is a State that reports every tier without changing: the
// latest instant it has seen is not advanced and nothing expires.
type Peeker interface {
	// Peek returns the status of every tier at now, in the tiers' order.
	Peek(now time.Time) []TierStatus
}

// status is a TierStatus of µs reset.
func status(limit, rem, reset int64) TierStatus {
	return TierStatus{Limit: limit, Remaining: max(rem, 0), ResetAfter: Micros(reset)}
}

func (s *fixedWindowState) Peek(now time.Time) []TierStatus {
	t := s.at(now)
	out := make([]TierStatus, len(s.tiers))
	for i, tr := range s.tiers {
		if !tr.current(t) {
			tr.Count = 0 // a window that has ended (tr is a copy)
		}
		rem, reset, _ := tr.Report(t, 0, true)
		out[i] = status(tr.Events, rem, reset)
	}
	return out
}

func (s *slidingWindowState) Peek(now time.Time) []TierStatus {
	t := s.at(now)
	out := make([]TierStatus, len(s.tiers))
	for i, c := range s.tiers {
		c.roll(t) // a copy
		out[i] = status(c.Events, c.Remaining(t), c.ResetAfter(t))
	}
	return out
}

func (s *slidingLogState) Peek(now time.Time) []TierStatus {
	t := s.at(now)
	out := make([]TierStatus, len(s.tiers))
	for i, tr := range s.tiers {
		// expire on a copy moves its head and count only: the runs are
		// read, never written.
		tr.expire(t)
		var reset int64
		if tr.size > 0 {
			reset = tr.run(tr.size-1).ts + tr.window - t
		}
		out[i] = status(tr.events, tr.events-tr.count, reset)
	}
	return out
}

func (s *bucketState) Peek(now time.Time) []TierStatus {
	dt := max(now.UnixMicro()-s.last, 0)
	out := make([]TierStatus, len(s.level))
	for i := range s.level {
		p := &s.l.tiers[i]
		lv := p.leak(s.level[i], dt)
		var rem int64
		if lv < p.cap {
			rem = (p.cap - lv) / p.scale
		}
		out[i] = status(p.burst, rem, p.drained(lv))
	}
	return out
}

func (s *concurrencyState) Peek(now time.Time) []TierStatus {
	t := max(now.UnixMicro(), s.last)
	held, reset := int64(0), int64(0)
	for _, ls := range s.leases {
		if ls.expiry > t {
			held += ls.cost
			reset = ls.expiry - t // ordered by expiry: the last one is the latest
		}
	}
	return []TierStatus{status(s.l.events, s.l.events-held, reset)}
}

// Interface guards.
var (
	_ Peeker = (*fixedWindowState)(nil)
	_ Peeker = (*slidingWindowState)(nil)
	_ Peeker = (*slidingLogState)(nil)
	_ Peeker = (*bucketState)(nil)
	_ Peeker = (*concurrencyState)(nil)
)
