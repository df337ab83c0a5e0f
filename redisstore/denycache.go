package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// DenyCache is a Store in front of another (a zone's Redis Store) that
// remembers, per key, a denial until its Retry-After has passed, and
// answers the key with it meanwhile, so that a client hammering a key it has
// no quota for is denied without a Redis round trip each time: a limiter
// under attack spends most of its time denying.
//
// Until Retry-After, the store would deny the same request too: quota only
// comes back with time. The one exception is an admission given back
// (another request admitted by this zone and denied by a later zone, on any
// instance): it may free quota sooner, and the cache then denies a little
// longer than Redis would, never shorter. Zones whose denials must reach
// Redis (count_rejected), whose quota comes back at any time (concurrency),
// that wait (on_limit wait) or that never reject (dry_run) are not to be
// wrapped in one.
//
// A denial is answered from the cache for at most recheck, however long
// its Retry-After or block lasts, so that what frees quota sooner through
// another instance (an operator's reset or Unblock, an admission given
// back) reaches this one within recheck: a key hammered without quota
// costs one store call per recheck, not one per request. TakeHeld, for a
// caller that cannot reach the store, answers a denial until it ends.
//
// Undo goes to the wrapped store, and so do Block, Unblock and
// BlockedUntil. DenyCache is safe for concurrent use; a nil *DenyCache
// answers nothing from Denied.
type DenyCache struct {
	store.Store
	denials *store.LRU[deniedUntil]
	kept    atomic.Bool // a denial was kept past its recheck: admissions forget the key's
	// last is the latest end (unix ns) of a denial remembered: from then
	// on none is in force, and a key is not looked up (a zone that
	// denies nothing pays no look-up per request). ended is a last that
	// was found passed: the denials that ended by then are gone, even if
	// the clock goes back, as a denial a look-up found ended is.
	last, ended atomic.Int64
}

var (
	_ store.Store   = (*DenyCache)(nil)
	_ store.Blocker = (*DenyCache)(nil)
)

// denyKeys bounds the keys a DenyCache remembers: a flood of distinct keys
// evicts the least recently denied, it does not grow memory.
const denyKeys = 65_536

// recheck is the longest a denial is answered from the cache before Redis
// is asked again: how late a reset or an Unblock made through another
// instance may reach this one.
const recheck = time.Second

type deniedUntil struct {
	at, until int64 // unix ns: when denied, and when the denial ends
	expires   int64 // unix ns: when the cache stops answering it (<= until)
	d         algorithms.Decision
}

// NewDenyCache returns a DenyCache in front of s.
func NewDenyCache(s store.Store) *DenyCache {
	return &DenyCache{Store: s, denials: store.NewLRU[deniedUntil](denyKeys)}
}

// Take answers a denial of key still in force at now (the wall clock when
// zero) without calling the store; otherwise it asks the store and
// remembers a denial until its Retry-After.
func (c *DenyCache) Take(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	at := now
	if at.IsZero() {
		at = time.Now()
	}
	if d, ok := c.Denied(key, at); ok {
		return d, nil
	}
	return c.Ask(ctx, key, now, cost)
}

// TakeHeld answers a Take of key at now (the wall clock when zero) from
// the cache alone, for a caller that cannot call the store (Redis
// failing): the denial still in force, if any, and ok. Such a key stays
// refused until its Retry-After, since quota only comes back with time;
// a blocked key's until its block ends (not only recheck: without the
// store, no reset or Unblock made through another instance reaches this
// one).
// The cost is not looked at: a zone with a cache has one.
func (c *DenyCache) TakeHeld(key string, now time.Time, _ int64) (algorithms.Decision, bool) {
	if now.IsZero() {
		now = time.Now()
	}
	return c.denied(key, now, true)
}

// Ask asks the store and remembers a denial until its Retry-After: Take
// without its look at the cache, for a caller that asked Denied itself.
func (c *DenyCache) Ask(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	d, err := c.Store.Take(ctx, key, now, cost)
	switch {
	case err != nil: // nothing learned
	case !d.Allowed:
		at := now
		if at.IsZero() {
			// From the reply's arrival: the cached denial ends no earlier
			// than the store's.
			at = time.Now()
		}
		c.put(key, at, d)
	case c.kept.Load():
		// A denial is kept past its recheck for TakeHeld: an admission
		// says it was lifted.
		c.forget(key)
	}
	return d, err
}

// Denied returns the denial of key still in force at now, with its waits
// shortened by the time since it was made: what Take answers without a
// call. A caller that accounts for the calls to the store (a circuit
// breaker, a latency metric) asks it first, so that such an answer is not
// counted as one.
func (c *DenyCache) Denied(key string, now time.Time) (algorithms.Decision, bool) {
	return c.denied(key, now, false)
}

// denied is Denied; with whole, a denial is answered until it ends (a
// block's until the block ends), not only until its recheck.
func (c *DenyCache) denied(key string, now time.Time, whole bool) (algorithms.Decision, bool) {
	if c == nil {
		return algorithms.Decision{}, false
	}
	ns := now.UnixNano()
	if last := c.last.Load(); ns >= last {
		if c.ended.Load() < last {
			c.ended.Store(last)
		}
		return algorithms.Decision{}, false // every denial ended
	}
	s := c.denials.Shard(key)
	s.Lock()
	var e deniedUntil
	entry := s.Get(key)
	if entry != nil {
		e = entry.Value
		switch {
		case ns >= e.until || e.until <= c.ended.Load():
			s.Remove(entry)
			entry = nil
		case ns >= e.expires && !whole:
			entry = nil // kept for a caller without the store
		}
	}
	s.Unlock()
	if entry == nil {
		return algorithms.Decision{}, false
	}
	d := e.d
	elapsed := time.Duration(ns - e.at)
	d.RetryAfter = time.Duration(e.until - ns)
	d.ResetAfter = max(d.ResetAfter-elapsed, d.RetryAfter)
	d.MoreAfter = max(d.MoreAfter-elapsed, 0)
	return d, true
}

// put remembers denial d of key, made at now.
func (c *DenyCache) put(key string, now time.Time, d algorithms.Decision) {
	if c == nil || d.Allowed || d.RetryAfter <= 0 {
		return
	}
	ns := now.UnixNano()
	until := ns + int64(d.RetryAfter)
	for {
		last := c.last.Load()
		if until <= last || c.last.CompareAndSwap(last, until) {
			break
		}
	}
	s := c.denials.Shard(key)
	s.Lock()
	e := s.Use(key)
	if e == nil {
		e = s.Add(key, nil)
	}
	expires := min(until, ns+int64(recheck))
	if expires < until && !c.kept.Load() {
		c.kept.Store(true)
	}
	e.Value = deniedUntil{at: ns, until: until, expires: expires, d: d}
	s.Unlock()
}

// blocker is the wrapped store as a store.Blocker.
func (c *DenyCache) blocker() (store.Blocker, error) {
	b, ok := c.Store.(store.Blocker)
	if !ok {
		return nil, errors.New("redis deny cache: the store cannot block keys")
	}
	return b, nil
}

// Block blocks key in the wrapped store.
func (c *DenyCache) Block(ctx context.Context, key string, now time.Time, d time.Duration) (time.Time, error) {
	b, err := c.blocker()
	if err != nil {
		return time.Time{}, err
	}
	return b.Block(ctx, key, now, d)
}

// Unblock lifts key's block in the wrapped store, and forgets the key's
// denial here so that this instance lets it through at once.
func (c *DenyCache) Unblock(ctx context.Context, key string) error {
	b, err := c.blocker()
	if err != nil {
		return err
	}
	if err := b.Unblock(ctx, key); err != nil {
		return err
	}
	c.forget(key)
	return nil
}

// forget drops key's denial, if any.
func (c *DenyCache) forget(key string) { dropKey(c.denials, key) }

// BlockedUntil asks the wrapped store when key's block ends.
func (c *DenyCache) BlockedUntil(ctx context.Context, key string, now time.Time) (time.Time, error) {
	b, err := c.blocker()
	if err != nil {
		return time.Time{}, err
	}
	return b.BlockedUntil(ctx, key, now)
}
