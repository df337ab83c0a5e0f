package store

import (
	"context"
	"fmt"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// Blocks: a key a zone denies is refused outright for the zone's block_for
// (a penalty), and an operator may block a key (see Blocker). While a key
// is blocked its Takes are refused without reaching the algorithm, so
// they count nothing and a denial during the block does not extend it.

// BlockedDecision is the answer of a Take refused by a block with left to
// run: every wait is the time left, so that Retry-After and the rate-limit
// headers say when the key may come back. limit is the Limit reported (see
// BlockLimit).
func BlockedDecision(limit int64, left time.Duration) algorithms.Decision {
	return algorithms.Decision{
		Limit:      limit,
		ResetAfter: left,
		MoreAfter:  left,
		RetryAfter: left,
		Blocked:    true,
	}
}

// Penalize makes d, a denial that blocks its key for blockFor, a blocked
// decision that waits at least until the block ends.
func Penalize(d *algorithms.Decision, blockFor time.Duration) {
	d.Blocked = true
	d.RetryAfter = max(d.RetryAfter, blockFor)
	d.ResetAfter = max(d.ResetAfter, blockFor)
	d.MoreAfter = max(d.MoreAfter, blockFor)
}

// BlockLimit is the Limit a blocked decision of l reports: the first
// tier's, as a denial by that tier would (its burst for the bucket
// algorithms).
func BlockLimit(l algorithms.Limiter) int64 {
	cfg := l.Config()
	if len(cfg.Tiers) == 0 {
		return 0
	}
	if cfg.Burst > 0 && algorithms.UsesBurst(l.Name()) {
		return cfg.Burst
	}
	return cfg.Tiers[0].Events
}

// CheckBlock returns the error of a Block for d, or nil when d is
// positive.
func CheckBlock(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("block duration must be positive, got %s", d)
	}
	return nil
}

var _ Blocker = (*Memory)(nil)

// Block refuses key from now (the store's clock when zero) until now+d and
// returns when the block ends; a longer block in place is kept. A key the
// store did not hold is added, within MaxKeys like any other.
func (m *Memory) Block(_ context.Context, key string, now time.Time, d time.Duration) (time.Time, error) {
	if err := CheckBlock(d); err != nil {
		return time.Time{}, err
	}
	if now.IsZero() {
		now = m.now()
	}
	s := m.keys.Shard(key)
	s.mu.Lock()
	e := m.entry(s, key)
	until := max(e.Value.blockedUntil, now.UnixNano()+int64(d))
	e.Value.blockedUntil = until
	s.mu.Unlock()
	return time.Unix(0, until), nil
}

// Unblock lifts key's block, if any.
func (m *Memory) Unblock(_ context.Context, key string) error {
	s := m.keys.Shard(key)
	s.mu.Lock()
	if e := s.Get(key); e != nil {
		e.Value.blockedUntil = 0
	}
	s.mu.Unlock()
	return nil
}

// BlockedUntil returns when key's block ends, or the zero time when it is
// not blocked at now (the store's clock when zero).
func (m *Memory) BlockedUntil(_ context.Context, key string, now time.Time) (time.Time, error) {
	if now.IsZero() {
		now = m.now()
	}
	s := m.keys.Shard(key)
	s.mu.Lock()
	var until int64
	if e := s.Get(key); e != nil {
		until = e.Value.blockedUntil
	}
	s.mu.Unlock()
	if until <= now.UnixNano() {
		return time.Time{}, nil
	}
	return time.Unix(0, until), nil
}
