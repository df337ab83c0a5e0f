package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// denyCache remembers, per key, a denial of the redis store until its
// Retry-After has passed, so that a client hammering a key it has no quota
// for is denied without a Redis round trip each time: a limiter under
// attack spends most of its time denying.
//
// Until Retry-After, the store would deny the same request too: quota only
// comes back with time. The one exception is an admission given back
// (another request admitted by this zone and denied by a later zone, on any
// instance): it may free quota sooner, and the cache then denies a little
// longer than Redis would, never shorter. Zones whose denials must reach
// Redis (count_rejected), whose quota comes back at any time (concurrency),
// that wait (on_limit wait) or that never reject (dry_run) have no cache.
type denyCache struct {
	seed   maphash.Seed
	shards [denyShards]denyShard
}

const (
	denyShards = 16
	// denyShardKeys bounds the keys a shard remembers (65,536 per zone):
	// a flood of distinct keys evicts entries, it does not grow memory.
	denyShardKeys = 4096
)

type denyShard struct {
	mu sync.Mutex
	m  map[string]deniedUntil
}

type deniedUntil struct {
	at, until int64 // unix ns: when denied, and when the denial ends
	d         algorithms.Decision
}

func newDenyCache() *denyCache {
	c := &denyCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]deniedUntil)
	}
	return c
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// get returns the denial of key still in force at now, with its waits
// shortened by the time since it was made.
func (c *denyCache) get(key string, now time.Time) (algorithms.Decision, bool) {
	if c == nil {
		return algorithms.Decision{}, false
	}
	ns := now.UnixNano()
	s := c.shard(key)
	s.mu.Lock()
	e, ok := s.m[key]
	if ok && ns >= e.until {
		delete(s.m, key)
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return algorithms.Decision{}, false
	}
	d := e.d
	elapsed := time.Duration(ns - e.at)
	d.RetryAfter = time.Duration(e.until - ns)
	d.ResetAfter = max(d.ResetAfter-elapsed, d.RetryAfter)
	return d, true
}

// put remembers denial d of key, made at now.
func (c *denyCache) put(key string, now time.Time, d algorithms.Decision) {
	if c == nil || d.Allowed || d.RetryAfter <= 0 {
		return
	}
	ns := now.UnixNano()
	s := c.shard(key)
	s.mu.Lock()
	if len(s.m) >= denyShardKeys {
		for k := range s.m { // map order: an arbitrary victim
			delete(s.m, k)
			break
		}
	}
	s.m[key] = deniedUntil{at: ns, until: ns + int64(d.RetryAfter), d: d}
	s.mu.Unlock()
}
