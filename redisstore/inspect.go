package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// What an operator can do with one key (store.Inspector): look at it
// without consuming, and reset it for the whole fleet.

var (
	_ store.Inspector = (*Store)(nil)
	_ store.Inspector = (*DenyCache)(nil)
	_ store.Inspector = (*SyncStore)(nil)
)

var modePeek any = "2"

// Inspect returns key's state at now (Redis TIME when zero) with one
// script call in peek mode: a Take of cost 0 that writes nothing.
func (s *Store) Inspect(ctx context.Context, key string, now time.Time) (store.KeyState, error) {
	// Not through the Pipeliner: a peek answers three values per tier,
	// more than a take's reply holds.
	res, err := evalOne(ctx, s.c, s.script.run, s.scriptKeys(key), s.args(modePeek, now, 0, "")).Int64Slice()
	if err != nil {
		return store.KeyState{}, fmt.Errorf("redis store: %s peek: %w", s.l.Name(), err)
	}
	return peekState(s.l.Config(), "redis store: "+s.l.Name(), res)
}

// peekState is the KeyState of a peek's answer res, every tier of cfg's
// {limit, remaining, reset_after_us}; what names the store in an error.
func peekState(cfg algorithms.Config, what string, res []int64) (store.KeyState, error) {
	if len(res) != 3*len(cfg.Tiers) {
		return store.KeyState{}, fmt.Errorf("%s peek: script answered %d values, want %d", what, len(res), 3*len(cfg.Tiers))
	}
	tiers := make([]algorithms.TierStatus, len(cfg.Tiers))
	for i := range tiers {
		tiers[i] = algorithms.TierStatus{Limit: res[3*i], Remaining: res[3*i+1], ResetAfter: algorithms.Micros(res[3*i+2])}
	}
	return store.NewKeyState(cfg, tiers), nil
}

// Reset deletes every Redis key of key (one DEL: they share a hash slot),
// for every instance of the fleet.
func (s *Store) Reset(ctx context.Context, key string) error {
	if err := s.c.Del(ctx, s.Keys(key)...).Err(); err != nil {
		return fmt.Errorf("redis store: %s reset: %w", s.l.Name(), err)
	}
	return nil
}

// Inspect asks the wrapped store.
func (c *DenyCache) Inspect(ctx context.Context, key string, now time.Time) (store.KeyState, error) {
	ins, ok := c.Store.(store.Inspector)
	if !ok {
		return store.KeyState{}, errors.ErrUnsupported
	}
	return ins.Inspect(ctx, key, now)
}

// Reset forgets a denial of key remembered here, and resets it in the
// wrapped store. Other instances' caches keep theirs until its
// Retry-After.
func (c *DenyCache) Reset(ctx context.Context, key string) error {
	c.forget(key)
	ins, ok := c.Store.(store.Inspector)
	if !ok {
		return errors.ErrUnsupported
	}
	return ins.Reset(ctx, key)
}

// Inspect returns key's state at now (the Now clock when zero) as this
// instance sees it: the fleet's counts read back at the last sync plus
// what it has counted since. Nothing is consumed.
func (s *SyncStore) Inspect(_ context.Context, key string, now time.Time) (store.KeyState, error) {
	if now.IsZero() {
		now = s.now()
	}
	tiers := make([]algorithms.TierStatus, len(s.tiers))
	sh := s.keys.Shard(key)
	sh.Lock()
	var e *syncEntry
	if ent := sh.Get(key); ent != nil {
		e = &ent.Value
	}
	t := now.UnixMicro()
	if e != nil {
		t = max(t, e.last)
	}
	for i := range s.tiers {
		p := &s.tiers[i]
		var tr syncTier // a copy: looking changes nothing
		if e != nil {
			tr = e.tiers[i]
		}
		tr.roll(algorithms.WindowIndex(t, p.window), s.sliding)
		start, C := tr.cur.idx*p.window, tr.cur.view()
		rem, reset := p.events-C, int64(0)
		if s.sliding {
			_, rem, reset, _ = slidingWindow(p.events, p.window, start, tr.prev.view(), C, t, 0, false)
		} else if C > 0 {
			reset = start + p.window - t
		}
		tiers[i] = algorithms.TierStatus{Limit: p.events, Remaining: max(rem, 0), ResetAfter: algorithms.Micros(reset)}
	}
	sh.Unlock()
	cfg := algorithms.Config{Tiers: make([]algorithms.Tier, len(s.tiers))}
	for i, p := range s.tiers {
		cfg.Tiers[i] = algorithms.Tier{Events: p.events, Window: algorithms.Micros(p.window)}
	}
	return store.NewKeyState(cfg, tiers), nil
}

// Reset forgets key here and deletes its counts in Redis: the windows
// around now in every tier (one DEL: they share a hash slot). It waits for
// a sync in flight, so that the sync does not write back what was reset.
// Other instances push what they counted since their last sync.
func (s *SyncStore) Reset(ctx context.Context, key string) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	dropKey(s.keys, key)
	t := s.now().UnixMicro()
	esc := EscapeKey(key)
	var keys []string
	for i := range s.tiers {
		p := &s.tiers[i]
		w := algorithms.WindowIndex(t, p.window)
		// The window before (sliding_window counts it) and after (another
		// instance's clock may be ahead).
		for idx := w - 1; idx <= w+1; idx++ {
			keys = append(keys, s.head+esc+p.tail+strconv.FormatInt(idx, 10))
		}
	}
	if err := s.c.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("redis sync store: %s reset: %w", s.name, err)
	}
	return nil
}

// dropKey removes key from keys, if held: the stores that keep keys
// locally forget one.
func dropKey[V any](keys *store.LRU[V], key string) {
	sh := keys.Shard(key)
	sh.Lock()
	if ent := sh.Get(key); ent != nil {
		sh.Remove(ent)
	}
	sh.Unlock()
}
