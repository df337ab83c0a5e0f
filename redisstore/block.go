package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// blockTail ends the key of a zone key's block (block_for, an operator's
// block): "<prefix><zone>:{<escaped key>}:b", in the slot of the key's
// state. It has no config digest: a block outlives a change of the zone's
// limits. Every script takes it last (lib.lua checks it before deciding).
const blockTail = "}:b"

// blockScript is block.lua, sent on its own (EVALSHA, EVAL on NOSCRIPT).
var blockScript = newScript("block", false, nil)

// blockMicros is d in whole microseconds, rounded up (a block never ends
// early), 0 when d <= 0; an error beyond algorithms.MaxWindow, where the
// scripts' arithmetic would no longer be exact.
func blockMicros(d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, nil
	}
	if d > algorithms.MaxWindow {
		return 0, fmt.Errorf("%s is longer than %s", d, algorithms.MaxWindow)
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond), nil
}

// blocks is store.Blocker on the block keys of one zone, for the Store
// and the SyncStore.
type blocks struct {
	c    redis.UniversalClient
	head string // "<prefix><zone>:{"
}

// BlockKey returns the Redis key of key's block.
func (b blocks) BlockKey(key string) string { return b.head + EscapeKey(key) + blockTail }

// Block refuses key, on every instance, from now (Redis TIME when zero)
// until now+d, and returns when the block ends; a longer block in place is
// kept. The block's key expires with it.
func (b blocks) Block(ctx context.Context, key string, now time.Time, d time.Duration) (time.Time, error) {
	if err := store.CheckBlock(d); err != nil {
		return time.Time{}, err
	}
	us, err := blockMicros(d)
	if err != nil {
		return time.Time{}, fmt.Errorf("redis store: block: %v", err)
	}
	return b.run(ctx, key, now, "b", us)
}

// Unblock lifts key's block, if any, on every instance.
func (b blocks) Unblock(ctx context.Context, key string) error {
	if err := b.c.Del(ctx, b.BlockKey(key)).Err(); err != nil {
		return fmt.Errorf("redis store: unblock: %w", err)
	}
	return nil
}

// BlockedUntil returns when key's block ends, or the zero time when it is
// not blocked at now (Redis TIME when zero).
func (b blocks) BlockedUntil(ctx context.Context, key string, now time.Time) (time.Time, error) {
	return b.run(ctx, key, now, "r", 0)
}

// run calls block.lua in mode for key.
func (b blocks) run(ctx context.Context, key string, now time.Time, mode string, us int64) (time.Time, error) {
	ns := noNow
	if !now.IsZero() {
		ns = now.UnixMicro()
	}
	ends, err := evalOne(ctx, b.c, blockScript, []string{b.BlockKey(key)}, []any{mode, ns, us}).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("redis store: block: %w", err)
	}
	if ends <= 0 {
		return time.Time{}, nil
	}
	return time.UnixMicro(ends), nil
}

// Block refuses key from now (the store's clock when zero) until now+d, on
// every instance, and here at once; it returns when the block ends (a
// longer block in place is kept). Other instances learn of it at their
// next sync.
func (s *SyncStore) Block(ctx context.Context, key string, now time.Time, d time.Duration) (time.Time, error) {
	if now.IsZero() {
		now = s.now()
	}
	until, err := s.blk.Block(ctx, key, now, d)
	if err != nil {
		return until, err
	}
	sh := s.keys.Shard(key)
	sh.Lock()
	e := s.entry(sh, key, now)
	e.blockedUntil = max(e.blockedUntil, until.UnixMicro())
	sh.Unlock()
	return until, nil
}

// Unblock lifts key's block in Redis and here; other instances lift it at
// their next sync.
func (s *SyncStore) Unblock(ctx context.Context, key string) error {
	if err := s.blk.Unblock(ctx, key); err != nil {
		return err
	}
	sh := s.keys.Shard(key)
	sh.Lock()
	if ent := sh.Get(key); ent != nil {
		ent.Value.blockedUntil, ent.Value.blockSend = 0, 0
	}
	sh.Unlock()
	return nil
}

// BlockedUntil returns when key's block ends, or the zero time when it is
// not blocked at now (the store's clock when zero): in Redis, or here by a
// denial not pushed yet.
func (s *SyncStore) BlockedUntil(ctx context.Context, key string, now time.Time) (time.Time, error) {
	if now.IsZero() {
		now = s.now()
	}
	until, err := s.blk.BlockedUntil(ctx, key, now)
	if err != nil {
		return until, err
	}
	sh := s.keys.Shard(key)
	sh.Lock()
	var local int64
	if ent := sh.Get(key); ent != nil {
		local = ent.Value.blockSend
	}
	sh.Unlock()
	if local > now.UnixMicro() && local > until.UnixMicro() {
		return time.UnixMicro(local), nil
	}
	return until, nil
}
