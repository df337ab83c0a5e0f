package redisstore

// Deciding in the leasing store: from the key's lease when it holds
// enough, else with one script call that takes the request's units and
// leases more (LEASE.md).

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// leaseEntry is what an instance holds of one key (the Value of its entry
// in the LRU). Instants are µs on the Now clock.
type leaseEntry struct {
	left    int64  // units of the lease not used yet
	size    int64  // units the lease had
	ends    int64  // when the lease ends here (its Redis end, or earlier)
	stamp   int64  // when it ends in Redis: what a give-back names
	granted int64  // when Redis granted it: a give-back names it too
	gen     uint64 // the lease's generation (Decision.Token)
	last    int64  // latest instant seen; time never goes back
	call    int64  // instant of the last script call (0: none)
	used    int64  // instant of the last unit taken from the lease

	deny     int64 // until when a request of denyCost is refused here
	denyCost int64
	base     algorithms.Decision // the last call's decision
	baseAt   int64               // instant of that call

	refill  *leaseCall // the call in flight, nil when none
	waiting int64      // units of the Takes waiting for that call
}

// leaseCall is a key's script call in flight, which the key's concurrent
// Takes wait for.
type leaseCall struct {
	done chan struct{} // closed when the call is answered
	// err is the store's failure the call met, set before done closes:
	// its waiters fail with it rather than call again each in turn, which
	// on a failing Redis would make the last of them wait for one timeout
	// per waiter ahead of it. Nil when the call succeeded, or failed only
	// because its own caller stopped waiting (the others call again).
	err error
}

// clamp returns now in µs, never before e.last, and advances e.last.
func (e *leaseEntry) clamp(now time.Time) int64 { return clampMicros(&e.last, now) }

// local is the decision of a request served here at t: the last call's,
// aged by the time since.
func (e *leaseEntry) local(t int64, allowed bool) algorithms.Decision {
	d := e.base
	age := algorithms.Micros(t - e.baseAt) // 0 if the clock went back
	since := func(v time.Duration) time.Duration { return max(v-age, 0) }
	d.ResetAfter, d.MoreAfter = since(d.ResetAfter), since(d.MoreAfter)
	if allowed {
		d.Allowed, d.RetryAfter, d.Token = true, 0, e.gen
		d.Remaining += e.left
	} else {
		d.RetryAfter = max(since(d.RetryAfter), time.Microsecond)
	}
	return d
}

// Take decides whether key may consume cost units at now (the Now clock
// when zero): from the key's lease when it holds cost units, from a
// denial seen within the lease duration, else with one script call (one
// call in flight per key: concurrent Takes wait for it and use its lease,
// or fail with its failure: a Take waits for one call at most, as it
// would for its own).
func (s *LeaseStore) Take(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	if now.IsZero() {
		now = s.now()
	}
	cost = min(max(cost, 0), s.base.maxCost)
	sh := s.keys.Shard(key)
	for {
		sh.Lock()
		ent := s.entry(sh, key)
		e := &ent.Value
		t := e.clamp(now)
		if admit, ok := e.here(t, cost); ok {
			d := e.local(t, admit)
			sh.Unlock()
			return d, nil
		}
		if e.refill != nil {
			lc := e.refill
			e.waiting += cost
			sh.Unlock()
			select {
			case <-lc.done:
				if lc.err != nil {
					return algorithms.Decision{}, lc.err
				}
				continue
			case <-ctx.Done():
				return algorithms.Decision{}, fmt.Errorf("redis lease store: %s: %w", s.alg, ctx.Err())
			}
		}
		return s.refill(ctx, sh, ent, now, t, cost)
	}
}

// here reports whether a Take of cost at t is decided from what e holds
// (ok), and how: admitted from the lease while it lasts and holds cost
// units (the units are taken), or denied while a denial seen here holds
// for that cost: the same cost only, as its Retry-After is that cost's (a
// larger one may wait longer). The shard's lock is held. Small enough to
// be inlined: it is the hot path.
func (e *leaseEntry) here(t, cost int64) (admit, ok bool) {
	if cost <= e.left && t < e.ends {
		e.left -= cost
		e.used = t
		return true, true
	}
	return false, t < e.deny && cost == e.denyCost
}

// refused returns until when the last call's denial holds in Redis (its
// Retry-After), or 0 when the last call admitted.
func (e *leaseEntry) refused() int64 {
	if e.deny == 0 {
		return 0
	}
	return e.baseAt + e.base.RetryAfter.Microseconds()
}

// TakeHeld decides a Take of key and cost at now (the Now clock when
// zero) from what this instance holds alone, for a caller that cannot
// call Redis (failing, its circuit breaker open): admitted from the key's
// lease as Take does, since Redis counts its units as taken already, or
// refused while the key's last denial holds. ok is false when the Take
// would need a script call. It never calls Redis, nor waits for a call in
// flight.
func (s *LeaseStore) TakeHeld(key string, now time.Time, cost int64) (d algorithms.Decision, ok bool) {
	if now.IsZero() {
		now = s.now()
	}
	cost = min(max(cost, 0), s.base.maxCost)
	sh := s.keys.Shard(key)
	sh.Lock()
	if ent := sh.Use(key); ent != nil {
		e := &ent.Value
		t := e.clamp(now)
		admit, here := e.here(t, cost)
		// Take asks Redis again after a lease duration, in case units
		// came back; without Redis, the denial holds until its
		// Retry-After, as Redis said.
		if ok = here || cost == e.denyCost && t < e.refused(); ok {
			d = e.local(t, admit)
		}
	}
	sh.Unlock()
	return d, ok
}

// refill makes the script call of a Take of cost at t that the lease does
// not cover: it gives back what the lease has left, takes cost and leases
// a batch sized on the recent use. The shard's lock is held; refill
// releases it.
func (s *LeaseStore) refill(ctx context.Context, sh *leaseShard, ent *store.Entry[leaseEntry], now time.Time, t, cost int64) (algorithms.Decision, error) {
	e := &ent.Value
	// A key called again within a lease duration is hot: twice what the
	// last lease served, or what waits. A cold key leases nothing: one
	// call per request, decided exactly as the plain Redis store does.
	var want int64
	if e.call != 0 && t-e.call < s.dur {
		want = max(1, 2*(e.size-e.left), e.waiting)
	}
	units, stamp, granted := e.left, e.stamp, e.granted
	if s.bucket && t >= e.ends {
		units = 0 // see lease.lua: a bucket takes units back only before the end
	}
	e.left, e.size, e.waiting = 0, 0, 0
	lc := &leaseCall{done: make(chan struct{})}
	e.refill = lc
	sh.Unlock()

	r := s.call(ctx, s.Keys(ent.Key()), s.args(modeTake, now, cost, want, units, stamp, granted))
	res, err := r.ints(), r.err
	if err == nil && len(res) < 12 {
		err = fmt.Errorf("script answered %d values, want 12", len(res))
	}

	if err != nil {
		err = fmt.Errorf("redis lease store: %s: %w", s.alg, err)
		if ctx.Err() == nil {
			lc.err = err
		}
	}
	sh.Lock()
	defer sh.Unlock()
	e.refill = nil
	close(lc.done)
	if err != nil {
		return algorithms.Decision{}, err
	}
	d := decisionOf(res)
	d.Token = 0         // admitted by Redis, not from a lease: an Undo does not put it in one
	if !sh.Holds(ent) { // evicted meanwhile: its lease is lost, safely
		return d, nil
	}
	e.call, e.base, e.baseAt = t, d, t
	e.deny, e.denyCost = 0, 0
	if !d.Allowed {
		// Refused until the wait, or at most a lease duration: units
		// given back by other instances may come back sooner.
		e.deny = t + min(res[5], s.dur)
		e.denyCost = cost
		return d, nil
	}
	e.size, e.left, e.used = res[9], res[9], t
	e.ends, e.stamp, e.granted = t+res[10], res[11], res[11]-res[10]
	e.gen = s.gen.Add(1)
	// Redis counts the lease's units as taken; this instance still has them.
	d.Remaining += e.left
	// The request's own units were charged now, not at the lease's end:
	// an Undo cannot put them in the lease (Token 0).
	return d, nil
}

// leaseShard is a shard of a LeaseStore's keys.
type leaseShard = store.Shard[leaseEntry]

// entry returns key's entry, created if new (evicting the shard's least
// recently used one when full), and marks it most recently used. The
// shard's lock is held.
func (s *LeaseStore) entry(sh *leaseShard, key string) *store.Entry[leaseEntry] {
	if e := sh.Use(key); e != nil {
		return e
	}
	// An entry whose call is in flight is not reused: its caller still
	// holds it.
	ent := sh.Add(key, func(old *store.Entry[leaseEntry]) bool { return old.Value.refill == nil })
	ent.Value = leaseEntry{last: math.MinInt64}
	return ent
}

// Undo gives back to the key's lease what a Take of cost admitted from
// that same lease while it lasts; anything else stays charged (under-
// admission only): units a script call charged at an instant cannot move
// into a lease charged at its end.
func (s *LeaseStore) Undo(_ context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error {
	if !d.Allowed || d.Token == 0 || cost <= 0 {
		return nil
	}
	undoEntry(s.keys, key, now, s.now, func(e *leaseEntry, now time.Time) {
		if t := e.clamp(now); e.gen == d.Token && t < e.ends {
			e.left = min(e.left+cost, e.size)
		}
	})
	return nil
}
