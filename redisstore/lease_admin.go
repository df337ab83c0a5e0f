package redisstore

// What an operator can do with one key of the leasing store
// (store.Inspector): look at it as Redis holds it, and reset it for the
// fleet. Blocking is not offered: a lease in hand is used without asking
// Redis, so a block could not refuse it (lease zones refuse block_for).

import (
	"context"
	"fmt"
	"time"

	"github.com/zonelimit/caddy-ratelimit/store"
)

var _ store.Inspector = (*LeaseStore)(nil)

// Inspect returns key's state at now as Redis holds it, with one script
// call in peek mode that writes nothing. The units leased out to instances
// count as used, whether or not they are used yet: Redis charged them. A
// zero now means the Now clock when set, else Redis TIME. BlockedUntil is
// always zero.
func (s *LeaseStore) Inspect(ctx context.Context, key string, now time.Time) (store.KeyState, error) {
	if now.IsZero() && s.pinned {
		now = s.now()
	}
	args := s.args(modePeek, now, 0, 0, 0, 0, 0)
	if !now.IsZero() {
		args[1] = now.UnixMicro() // asked for, even when Takes use Redis TIME
	}
	// Not through the Pipeliner: a peek answers three values per tier,
	// more than a take's reply holds.
	res, err := evalOne(ctx, s.base.c, leaseScript, s.Keys(key), args).Int64Slice()
	if err != nil {
		return store.KeyState{}, fmt.Errorf("redis lease store: %s peek: %w", s.alg, err)
	}
	return peekState(s.base.l.Config(), "redis lease store: "+s.alg, res)
}

// Reset deletes key's state and its instances hash (one DEL: they share a
// hash slot) and drops this instance's lease of key. Other instances keep
// using what their leases hold; their give-backs no longer count (see
// lease.lua), so from the reset the fleet admits at most the limit plus
// what the other instances held unused then.
func (s *LeaseStore) Reset(ctx context.Context, key string) error {
	// Its lease and cached denial dropped before and after the DEL: a
	// lease granted in between, on the old state, is not used either; a
	// call in flight finds its entry gone and keeps nothing of its answer.
	dropKey(s.keys, key)
	err := s.base.c.Del(ctx, s.Keys(key)...).Err()
	dropKey(s.keys, key)
	if err != nil {
		return fmt.Errorf("redis lease store: %s reset: %w", s.alg, err)
	}
	return nil
}
