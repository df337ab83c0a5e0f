package redisstore

// Deciding in the two-layer store: Take and Undo, on local counts only
// (TWO_LAYER.md).

import (
	"context"
	"math"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// syncShard is a shard of a SyncStore's keys.
type syncShard = store.Shard[syncEntry]

// entry returns key's entry, created at now if new (evicting one of the
// shard's least recently used when full), and marks it most recently used.
// The shard's lock is held.
func (s *SyncStore) entry(sh *syncShard, key string, now time.Time) *syncEntry {
	if e := sh.Use(key); e != nil {
		return &e.Value
	}
	v := &sh.AddKeeping(key, unpushed, notInFlight).Value
	tiers := v.tiers
	if tiers == nil {
		tiers = make([]syncTier, len(s.tiers))
	}
	*v = syncEntry{tiers: tiers, last: math.MinInt64}
	t := now.UnixMicro()
	for i := range tiers {
		w := algorithms.WindowIndex(t, s.tiers[i].window)
		tiers[i] = syncTier{cur: syncSlot{idx: w}, prev: syncSlot{idx: w - 1}}
	}
	return v
}

// unpushed reports whether ent holds what Redis has not acknowledged:
// counts or a block not sent yet, or sent by the sync in flight (which may
// fail and give them back). Evicting it would forget them, so that a flood
// of other keys between two syncs would let the key admit its limit again
// and keep its units out of the fleet's total: such an entry is evicted
// only when its shard holds twice its share of MaxKeys (Shard.AddKeeping).
func unpushed(ent *store.Entry[syncEntry]) bool {
	return ent.Value.inFlight || ent.Value.unsent()
}

// notInFlight reports whether an evicted entry may be reused: not when a
// sync in flight still refers to it.
func notInFlight(ent *store.Entry[syncEntry]) bool { return !ent.Value.inFlight }

// overBudget reports whether the per-interval budget of tier p refuses
// cost after used units.
func overBudget(p *syncParams, used, cost int64) bool {
	return used > 0 && (cost > p.budget || used > p.budget-cost)
}

// budgetWait is how long until the next sync renews the budget, as far as
// this instance knows (a whole interval when the sync is overdue).
func (s *SyncStore) budgetWait(t int64) int64 {
	if d := s.nextSync.Load() - t; d > 0 {
		return d
	}
	return s.intervalUS
}

// Take decides whether key may consume cost units at now (the Now clock
// when zero), from local state only. It never fails.
func (s *SyncStore) Take(_ context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	if now.IsZero() {
		now = s.now()
	}
	if cost < 0 {
		cost = 0
	}
	sh := s.keys.Shard(key)
	sh.Lock()
	e := s.entry(sh, key, now)
	t := e.clamp(now)
	e.touched = 2 // a blocked key too: the syncs read an Unblock back
	if e.blockedUntil > t {
		sh.Unlock()
		return store.BlockedDecision(s.blockLimit, algorithms.Micros(e.blockedUntil-t)), nil
	}
	ok := true
	for i := range e.tiers {
		p, tr := &s.tiers[i], &e.tiers[i]
		tr.roll(algorithms.WindowIndex(t, p.window), s.sliding)
		if cost > p.events || overBudget(p, e.used, cost) || !s.fits(p, tr, t, cost) {
			ok = false
		}
	}
	switch {
	case ok:
		e.used += cost
		for i := range e.tiers {
			tr := &e.tiers[i]
			tr.cur.pend += cost
			tr.cur.own += cost
		}
	case s.cr:
		for i := range e.tiers {
			tr := &e.tiers[i]
			if add := min(cost, s.tiers[i].events-tr.cur.view()); add > 0 {
				tr.cur.pend += add
				tr.cur.own += add
			}
		}
	}
	pk := algorithms.TierPick{Allowed: ok}
	for i := range e.tiers {
		p, tr := &s.tiers[i], &e.tiers[i]
		start := tr.cur.idx * p.window
		C := tr.cur.view()
		var rem, reset, wait, more int64
		if s.sliding {
			_, rem, reset, wait = slidingWindow(p.events, p.window, start, tr.prev.view(), C, t, cost, !ok)
			c := algorithms.SlidingCounts{Events: p.events, Window: p.window, Start: start, Prev: tr.prev.view(), Cur: C}
			more = c.MoreAfter(t)
		} else {
			c := algorithms.FixedCounts{Events: p.events, Window: p.window, Start: start, Count: C}
			rem, reset, wait = c.Report(t, cost, ok)
			more = reset // fixed_window: nothing comes back before the window ends
		}
		if !ok && cost <= p.events && overBudget(p, e.used, cost) {
			wait = max(wait, s.budgetWait(t))
		}
		// What this instance may still admit before the next sync is
		// its budget's rest: the headers say so (a 429 of the budget
		// says 0 remain, and when more pass again). Also when a request
		// is refused before the interval's first admission: the one
		// request of any cost that may pass then is not counted on. A
		// peek (cost 0: the admin API) with nothing admitted in the
		// interval sees the window's rest.
		if left := p.budget - e.used; (e.used > 0 || cost > 0) && left <= rem {
			if left < rem {
				more = 0 // the window has room for one more: the budget waits
			}
			rem = max(left, 0)
			more = max(more, s.budgetWait(t))
		}
		pk.Offer(i, p.events, rem, reset, wait, more)
	}
	d := pk.Decision()
	d.MoreAfter = algorithms.Micros(pk.More())
	if !ok && s.blockFor > 0 {
		e.blockedUntil = t + s.blockFor
		e.blockSend = e.blockedUntil
		store.Penalize(&d, algorithms.Micros(s.blockFor))
	}
	sh.Unlock()
	return d, nil
}

// fits reports whether cost fits tier p's window counts at t (the tier
// rolled to t).
func (s *SyncStore) fits(p *syncParams, tr *syncTier, t, cost int64) bool {
	if !s.sliding {
		c := algorithms.FixedCounts{Events: p.events, Window: p.window, Count: tr.cur.view()}
		return c.Fits(cost)
	}
	fits, _, _, _ := slidingWindow(p.events, p.window, tr.cur.idx*p.window, tr.prev.view(), tr.cur.view(), t, cost, false)
	return fits
}

// Undo gives back what an admitted Take of cost, which returned d,
// consumed, in every tier whose window is still current: locally, or with
// a negative delta at the next sync when those units were sent already.
func (s *SyncStore) Undo(_ context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error {
	if !d.Allowed || cost <= 0 {
		return nil
	}
	undoEntry(s.keys, key, now, s.now, func(e *syncEntry, now time.Time) {
		t := e.clamp(now)
		for i := range e.tiers {
			tr := &e.tiers[i]
			if tr.cur.idx == algorithms.WindowIndex(t, s.tiers[i].window) {
				amt := min(cost, tr.cur.own)
				tr.cur.own -= amt
				tr.cur.pend -= amt
			}
		}
		e.used -= min(e.used, cost)
	})
	return nil
}

// slidingWindow is sliding_window's arithmetic (algorithms.SlidingCounts)
// on the view counts of one tier of E events per W µs: P in the window
// before the one starting at start, C in that one, at t in it. It returns
// whether a request of cost fits, the units remaining, how long until the
// estimate is 0 (reset), and, with wantWait, how long until the request
// fits if nothing else arrives (wait).
func slidingWindow(E, W, start, P, C, t, cost int64, wantWait bool) (fits bool, rem, reset, wait int64) {
	c := algorithms.SlidingCounts{Events: E, Window: W, Start: start, Prev: P, Cur: C}
	fits, rem, reset = c.Fits(t, cost), c.Remaining(t), c.ResetAfter(t)
	if wantWait {
		wait = c.RetryAfter(t, cost)
	}
	return fits, rem, reset, wait
}
