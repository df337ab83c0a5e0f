package store

import (
	"context"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// What an operator can do with one key of a zone (the admin API), beyond
// Take and Undo. Stores implement these interfaces when they can; the
// wrappers (the Redis deny cache, the two-layer store) pass them on.

// KeyState is what an operator sees of one key at an instant.
type KeyState struct {
	// Tiers holds one entry per tier of the zone, in the zone's order.
	Tiers []TierState

	// BlockedUntil is when the key's block ends (see Blocker); zero when
	// the key is not blocked.
	BlockedUntil time.Time
}

// TierState is one tier of a key, as a Take of cost 0 would see it.
type TierState struct {
	// Limit is the tier's capacity in units: its events, or the burst of
	// a bucket algorithm.
	Limit int64

	// Window is the tier's window.
	Window time.Duration

	// Used is how many units the tier counts against the key: Limit -
	// Remaining.
	Used int64

	// Remaining is how many units the tier would admit now.
	Remaining int64

	// ResetAfter is how long until the tier is whole again if nothing
	// more arrives.
	ResetAfter time.Duration
}

// Inspector is a Store whose keys can be looked at and reset.
type Inspector interface {
	// Inspect returns key's state at now without consuming anything. A
	// zero now means the store's own clock. A key the store has never
	// seen (or has forgotten) is whole.
	Inspect(ctx context.Context, key string, now time.Time) (KeyState, error)

	// Reset forgets what key has used, in every tier: its next request
	// finds it whole. A block stays (see Blocker.Unblock).
	Reset(ctx context.Context, key string) error
}

// Blocker is a Store that can refuse a key outright for a while: the
// zone's block_for penalty, and an operator's block.
type Blocker interface {
	// Block refuses key from now until now+d (a zero now means the
	// store's own clock) and returns when the block ends. A longer block
	// already in place is kept. The block expires on its own.
	Block(ctx context.Context, key string, now time.Time, d time.Duration) (time.Time, error)

	// Unblock lifts key's block, if any.
	Unblock(ctx context.Context, key string) error

	// BlockedUntil returns when key's block ends, or the zero time when
	// key is not blocked at now (a zero now means the store's own clock).
	BlockedUntil(ctx context.Context, key string, now time.Time) (time.Time, error)
}

// Peek returns every tier of st at now, when its algorithm can tell
// (algorithms.Peeker); nil otherwise.
func Peek(st algorithms.State, now time.Time) []algorithms.TierStatus {
	if p, ok := st.(algorithms.Peeker); ok {
		return p.Peek(now)
	}
	return nil
}

// NewKeyState is the KeyState of tiers, the statuses of cfg's tiers.
func NewKeyState(cfg algorithms.Config, tiers []algorithms.TierStatus) KeyState {
	ks := KeyState{Tiers: make([]TierState, len(tiers))}
	for i, ts := range tiers {
		ks.Tiers[i] = TierState{
			Limit: ts.Limit, Remaining: ts.Remaining, Used: ts.Limit - ts.Remaining,
			ResetAfter: ts.ResetAfter,
		}
		if i < len(cfg.Tiers) {
			ks.Tiers[i].Window = cfg.Tiers[i].Window
		}
	}
	return ks
}
