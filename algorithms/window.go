package algorithms

import (
	"math"
	"time"
)

// What sliding_log, sliding_window and fixed_window share: a state that
// clamps time to the latest instant it has seen, windows in integer
// microseconds, and the choice of the tier a Decision describes.

// winLimiter is the Limiter of a window algorithm: newState builds its
// states.
type winLimiter struct {
	limiter
	newState func(*winLimiter) State
}

// newWinAlgorithm returns the constructor of the window algorithm name.
func newWinAlgorithm(name string, newState func(*winLimiter) State) func(Config) (Limiter, error) {
	return func(cfg Config) (Limiter, error) {
		return &winLimiter{limiter: newLimiter(name, cfg), newState: newState}, nil
	}
}

func (l *winLimiter) NewState() State { return l.newState(l) }

// winTiers returns the per-tier state mk makes of each tier's events and
// window (µs), in one's array when there is one tier (see inOne).
func winTiers[T any](cfg Config, mk func(events, window int64) T, one *[1]T) []T {
	ts := inOne(len(cfg.Tiers), one)
	for i, t := range cfg.Tiers {
		ts[i] = mk(t.Events, t.Window.Microseconds())
	}
	return ts
}

// inOne returns a slice of n Ts: one's array (a fresh state's, zero) when
// n is 1, the common case, so that a state holding one is allocated with
// its one tier, side by side in memory, rather than a cache miss apart.
func inOne[T any](n int, one *[1]T) []T {
	if n == 1 {
		return one[:]
	}
	return make([]T, n)
}

// relimitTiers returns the per-tier states of ts under cfg, matched by
// index: set gives a kept tier its new events and window (µs), mk makes
// the state of an added tier; a removed tier's state is dropped.
func relimitTiers[T any](ts []T, cfg Config, mk func(events, window int64) T, set func(tr *T, events, window int64)) []T {
	kept := min(len(ts), len(cfg.Tiers))
	out := ts[:kept]
	for i, t := range cfg.Tiers {
		e, w := t.Events, t.Window.Microseconds()
		if i < kept {
			set(&out[i], e, w)
		} else {
			out = append(out, mk(e, w))
		}
	}
	return out
}

// winState is the part of a window algorithm's state that is not per tier.
type winState struct {
	lim           *winLimiter // the Limiter the state decides under
	last          int64       // latest instant seen (µs)
	countRejected bool
}

func newWinState(l *winLimiter) winState {
	return winState{lim: l, last: math.MinInt64, countRejected: l.cfg.CountRejected}
}

// relimits reports whether l is another Limiter than the state's, for
// Relimit; when it is, the state decides under it from now on, and cfg is
// its Config.
func (s *winState) relimits(l Limiter) (cfg Config, ok bool) {
	wl, ok := l.(*winLimiter)
	if !ok || wl == s.lim || wl.name != s.lim.name {
		return cfg, false
	}
	s.lim, s.countRejected = wl, wl.cfg.CountRejected
	return wl.cfg, true
}

// begin returns now in µs, never earlier than the latest instant seen
// (which it advances), and cost, a negative one taken as 0.
func (s *winState) begin(now time.Time, cost int64) (int64, int64) {
	return winClamp(&s.last, now), max(cost, 0)
}

// undoes reports whether Undo of an admitted Take of cost has anything to
// give back; when it has, it advances the latest instant seen to now and
// returns it in µs.
func (s *winState) undoes(now time.Time, cost int64, d Decision) (int64, bool) {
	if !d.Allowed || cost <= 0 {
		return 0, false
	}
	return winClamp(&s.last, now), true
}

// at is max(now, the latest instant seen) in µs, for Idle.
func (s *winState) at(now time.Time) int64 {
	return max(now.UnixMicro(), s.last)
}

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

// winStart is the start of the window of length w (µs) that holds t,
// windows being aligned to the Unix epoch.
func winStart(t, w int64) int64 { return t - winMod(t, w) }

// WindowIndex is the number of the window of length w (µs, > 0) that holds
// the instant t (µs), windows being aligned to the Unix epoch: t/w rounded
// toward minus infinity, so WindowIndex(t, w)*w is winStart(t, w). The
// Redis store numbers its windows by it, so its counts roll over at the
// same instants as the algorithms'. It divides rather than going through
// winStart, which overflows near math.MinInt64 (a "never" instant).
func WindowIndex(t, w int64) int64 {
	q := t / w
	if t%w < 0 {
		q--
	}
	return q
}

// winCount is a window's count after a decision on cost: cost more when
// admitted; when denied with CountRejected, cost more but at most events
// (lossless: any count >= events refuses everything).
func winCount(count, cost, events int64, ok, countRejected bool) int64 {
	switch {
	case ok:
		return count + cost
	case !countRejected:
		return count
	case cost >= events-count:
		return events
	}
	return count + cost
}

// TierPick chooses the tier a Decision describes: when allowed the one with
// the fewest remaining and, among those, the longest MoreAfter (the tier
// that keeps refusing remaining+1 units longest: a shorter one would make
// MoreAfter early); when denied the one with the longest wait; other ties
// go to the lowest index (the first offered). The window algorithms use it,
// and so does the two-layer store (package redisstore), so that their decisions
// describe the same tier.
type TierPick struct {
	// Allowed is whether every tier admitted the request.
	Allowed bool

	set                           bool
	tier                          int
	limit, rem, reset, wait, more int64
}

// Offer considers tier i: its limit, remaining units, and the microseconds
// until it is whole again (reset), when denied until the request would be
// admitted (wait), and when allowed until it admits rem+1 units (more, 0
// when whole).
func (p *TierPick) Offer(i int, limit, rem, reset, wait, more int64) {
	if rem < 0 {
		rem = 0
	}
	if p.set {
		if p.Allowed && (rem > p.rem || rem == p.rem && more <= p.more) || !p.Allowed && wait <= p.wait {
			return
		}
	}
	p.set, p.tier, p.limit, p.rem, p.reset, p.wait, p.more = true, i, limit, rem, reset, wait, more
}

// More is the more of the tier picked, as offered.
func (p *TierPick) More() int64 { return p.more }

// Decision is the decision describing the tier picked; its MoreAfter is
// the caller's to set (each algorithm has its own), for that tier.
func (p *TierPick) Decision() Decision {
	d := Decision{
		Allowed:    p.Allowed,
		Tier:       p.tier,
		Limit:      p.limit,
		Remaining:  p.rem,
		ResetAfter: Micros(p.reset),
	}
	if !p.Allowed {
		d.RetryAfter = Micros(p.wait)
	}
	return d
}

// fill makes *d, a zero Decision, the decision describing the tier
// picked, with MoreAfter from moreAfter (µs), for callers that offer a wait
// of 0 when allowed.
// The window algorithms fill their named result: a Decision built in one
// value and then returned is copied through memory with wide moves that
// stall on the narrow stores that built it, which cost them more than
// their arithmetic.
func (p *TierPick) fill(d *Decision, moreAfter int64) {
	d.Allowed = p.Allowed
	d.Tier = p.tier
	d.Limit = p.limit
	d.Remaining = p.rem
	d.ResetAfter = Micros(p.reset)
	d.MoreAfter = Micros(moreAfter)
	d.RetryAfter = Micros(p.wait)
}
