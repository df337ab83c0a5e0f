package algorithms

// sliding_log: an exact rolling window. Every admitted unit is logged with
// its timestamp; a tier counts the units of the last Window.
//
// Model, in integer microseconds (the Lua twin must do the same; in Redis the
// log is a sorted set, one unique member per unit, scored by its µs):
//
//	per tier: E = Events, W = Window.Microseconds(); state: a log of unit
//	          timestamps, oldest first
//	t     = max(now.UnixMicro(), last); last = t     (time never goes back)
//	drop every unit with ts <= t - W                 (live: ts in (t-W, t])
//	count = number of live units
//	cost  < 0 is taken as 0
//	fits  = cost <= E and count + cost <= E
//	allowed iff fits in every tier
//	allowed:  log cost units stamped t in every tier
//	denied:   nothing, unless CountRejected: log cost units stamped t in
//	          every tier, then drop the oldest units until count <= E
//	          (lossless: only the newest E units ever decide anything)
//	after the update, per tier:
//	  remaining = max(0, E - count)
//	  reset     = count > 0 ? newest ts + W - t : 0
//	  wait      = cost > E          ? W
//	            : count + cost <= E ? 0
//	            : ts_k + W - t, ts_k the k-th oldest live unit,
//	              k = count + cost - E (1 <= k <= count)
//	decision:
//	  allowed: the tier with the smallest remaining (ties: lowest index),
//	           RetryAfter 0
//	  denied:  the tier with the largest wait (ties: lowest index),
//	           RetryAfter = wait (with CountRejected the wait is computed on
//	           the state after counting, so it covers every tier that would
//	           refuse the next request)
//	  Limit = E, Remaining = remaining, ResetAfter = reset of that tier
//	  MoreAfter = count > 0 ? oldest ts + W - t : 0, of that tier (when
//	            its oldest unit leaves, one more is free)
//	  durations = µs * time.Microsecond; Delay 0; Token 0
//	Undo (of an allowed decision with cost > 0; anything else is a no-op
//	  that does not even advance last): t as above; remove the
//	  cost newest units of every tier (never below zero). Exact when no
//	  other Take of the key came in between; otherwise the units removed
//	  are the newer ones.
//	Idle: no tier has a unit with ts > max(now, last) - W
//
// Storage: per tier a ring of runs (ts, n): n units logged at the same µs,
// so a Take of any cost adds at most one run and a tier holds at most E runs
// (min(E, takes in the last window)). The ring starts small and doubles up
// to E runs as a key's traffic needs it, so a key that sent one request does
// not pay for E runs; a key in steady state does not allocate.

import "time"

// SlidingLog is the name of sliding_log, the default algorithm.
const SlidingLog = "sliding_log"

func init() {
	register(Algorithm{Name: SlidingLog, New: newWinAlgorithm(SlidingLog, newSlidingLogState), rank: 0})
}

// slInitRuns is the initial ring capacity of a tier (capped at Events).
// One run: most keys a memory store holds (and all the keys of a flood of
// distinct ones) see one request per window, and a key with more traffic
// doubles its ring a few times, once.
const slInitRuns = 1

func newSlidingLogState(l *winLimiter) State {
	cfg := l.cfg
	s := &slidingLogState{winState: newWinState(l)}
	total := 0
	for _, t := range cfg.Tiers {
		total += int(min(t.Events, slInitRuns))
	}
	s.tiers = inOne(len(cfg.Tiers), &s.oneTier)
	backing := inOne(total, &s.oneRun) // one allocation for every tier's ring
	for i, t := range cfg.Tiers {
		n := int(min(t.Events, slInitRuns))
		s.tiers[i] = slTier{
			events: t.Events,
			window: t.Window.Microseconds(),
			buf:    backing[:n:n],
		}
		backing = backing[n:]
	}
	return s
}

// Relimit keeps each tier's log: its units expire under the new window,
// and count against the new events.
func (s *slidingLogState) Relimit(_ time.Time, l Limiter) {
	if cfg, ok := s.relimits(l); ok {
		s.tiers = relimitTiers(s.tiers, cfg,
			func(e, w int64) slTier { return slTier{events: e, window: w} },
			func(tr *slTier, e, w int64) { tr.events, tr.window = e, w })
	}
}

type slRun struct {
	ts int64 // µs
	n  int64 // units logged at ts, >= 1
}

type slTier struct {
	events, window int64 // E, W (µs)
	buf            []slRun
	head, size     int   // ring: oldest run at buf[head], size runs
	count          int64 // units in the ring
}

type slidingLogState struct {
	winState
	tiers []slTier

	// tiers' array and the ring's, for one tier of one run (see inOne).
	oneTier [1]slTier
	oneRun  [1]slRun
}

// run returns the i-th oldest run.
func (tr *slTier) run(i int) *slRun {
	j := tr.head + i
	if j >= len(tr.buf) {
		j -= len(tr.buf)
	}
	return &tr.buf[j]
}

func (tr *slTier) popOldest() {
	tr.count -= tr.buf[tr.head].n
	tr.head++
	if tr.head == len(tr.buf) {
		tr.head = 0
	}
	tr.size--
}

// expire drops the units with ts <= t - W.
func (tr *slTier) expire(t int64) {
	cut := t - tr.window
	for tr.size > 0 && tr.buf[tr.head].ts <= cut {
		tr.popOldest()
	}
}

// add logs c units at t. The caller guarantees count + c <= E.
func (tr *slTier) add(t, c int64) {
	if c <= 0 {
		return
	}
	if tr.size > 0 {
		if r := tr.run(tr.size - 1); r.ts == t {
			r.n += c
			tr.count += c
			return
		}
	}
	if tr.size == len(tr.buf) {
		tr.grow()
	}
	*tr.run(tr.size) = slRun{ts: t, n: c}
	tr.size++
	tr.count += c
}

// grow doubles the ring, up to E runs (never reached full: runs <= units <= E).
func (tr *slTier) grow() {
	n := 2 * len(tr.buf)
	if n < slInitRuns {
		n = slInitRuns
	}
	if int64(n) > tr.events {
		n = int(tr.events)
	}
	nb := make([]slRun, n)
	for i := 0; i < tr.size; i++ {
		nb[i] = *tr.run(i)
	}
	tr.buf, tr.head = nb, 0
}

// addClamped logs c units at t, keeping only the newest E units.
func (tr *slTier) addClamped(t, c int64) {
	if c <= 0 {
		return
	}
	if c >= tr.events {
		tr.head, tr.size, tr.count = 0, 0, 0
		tr.add(t, tr.events)
		return
	}
	// Drop the oldest units until count <= E - c.
	for tr.count > tr.events-c {
		r := &tr.buf[tr.head]
		if excess := tr.count - (tr.events - c); r.n > excess {
			r.n -= excess
			tr.count -= excess
			break
		}
		tr.popOldest()
	}
	tr.add(t, c)
}

// dropNewest removes the c newest units.
func (tr *slTier) dropNewest(c int64) {
	for c > 0 && tr.size > 0 {
		r := tr.run(tr.size - 1)
		if r.n > c {
			r.n -= c
			tr.count -= c
			return
		}
		c -= r.n
		tr.count -= r.n
		tr.size--
	}
}

// kth returns the timestamp of the k-th oldest unit, 1 <= k <= count.
func (tr *slTier) kth(k int64) int64 {
	for i := 0; i < tr.size; i++ {
		r := tr.run(i)
		if k <= r.n {
			return r.ts
		}
		k -= r.n
	}
	return tr.run(tr.size - 1).ts // unreachable when k <= count
}

func (s *slidingLogState) Take(now time.Time, cost int64) (d Decision) {
	t, cost := s.begin(now, cost)
	ok := true
	for i := range s.tiers {
		tr := &s.tiers[i]
		tr.expire(t)
		ok = ok && cost <= tr.events && tr.count <= tr.events-cost
	}
	for i := range s.tiers {
		if tr := &s.tiers[i]; ok {
			tr.add(t, cost)
		} else if s.countRejected {
			tr.addClamped(t, cost)
		}
	}
	p := TierPick{Allowed: ok}
	for i := range s.tiers {
		tr := &s.tiers[i]
		var reset, wait, more int64
		if tr.size > 0 {
			reset = tr.run(tr.size-1).ts + tr.window - t
			// One more unit is free when the oldest leaves the window.
			more = tr.buf[tr.head].ts + tr.window - t
		}
		if !ok && cost > tr.events {
			wait = tr.window
		} else if !ok && tr.count > tr.events-cost {
			wait = tr.kth(tr.count+cost-tr.events) + tr.window - t
		}
		p.Offer(i, tr.events, tr.events-tr.count, reset, wait, more)
	}
	p.fill(&d, p.More())
	return d
}

func (s *slidingLogState) Undo(now time.Time, cost int64, d Decision) {
	if _, ok := s.undoes(now, cost, d); ok {
		for i := range s.tiers {
			s.tiers[i].dropNewest(cost)
		}
	}
}

func (s *slidingLogState) Idle(now time.Time) bool {
	t := s.at(now)
	for i := range s.tiers {
		tr := &s.tiers[i]
		if tr.size > 0 && tr.run(tr.size-1).ts > t-tr.window {
			return false
		}
	}
	return true
}
