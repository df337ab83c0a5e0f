package store

import (
	"context"
	"fmt"
	"sync/atomic"
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
	return algorithms.Capacity(cfg.Tiers[0].Events, cfg.Burst, l.Name())
}

// CheckBlock returns the error of a Block for d, or nil when d is
// positive.
func CheckBlock(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("block duration must be positive, got %s", d)
	}
	return nil
}

// blockSet holds the blocks of a Memory's keys: when each ends (Unix ns).
// They are kept apart from the keys' states, so that forgetting a state (a
// sweep of an idle key, an operator's Reset) keeps its block, and are
// bounded by MaxKeys as the states are (beyond it the least recently
// blocked key is forgotten). It is allocated apart from the Memory, for
// its sweeper.
type blockSet struct {
	lru      LRU[int64]
	held     atomic.Int64  // keys in lru: a Take looks only when some are
	blockFor time.Duration // MemoryOptions.BlockFor
	limit    int64         // the Limit of a blocked decision (BlockLimit)
}

func newBlockSet(l algorithms.Limiter, maxKeys int, blockFor time.Duration) *blockSet {
	b := &blockSet{blockFor: max(blockFor, 0), limit: BlockLimit(l)}
	b.lru.init(maxKeys)
	return b
}

// refuse returns the decision of a Take of key at now when key is
// blocked. It inlines, so that a Take while no key is blocked costs one
// atomic load, not a call whose Decision is copied back.
func (b *blockSet) refuse(key string, now time.Time) (d algorithms.Decision, blocked bool) {
	if b.held.Load() != 0 {
		d, blocked = b.lookUp(key, now)
	}
	return d, blocked
}

// lookUp is refuse once some key is blocked.
func (b *blockSet) lookUp(key string, now time.Time) (algorithms.Decision, bool) {
	ns := now.UnixNano()
	until := b.until(key, ns)
	if until == 0 {
		return algorithms.Decision{}, false
	}
	return BlockedDecision(b.limit, time.Duration(until-ns)), true
}

// penalize blocks key for blockFor from now, d being its denial at now,
// and makes d wait until the block ends; nothing without blockFor.
func (b *blockSet) penalize(key string, now time.Time, d *algorithms.Decision) {
	if b.blockFor <= 0 {
		return
	}
	b.set(key, now.UnixNano()+int64(b.blockFor))
	Penalize(d, b.blockFor)
}

// until returns when key's block ends, or 0 when it is not blocked at ns.
func (b *blockSet) until(key string, ns int64) int64 {
	s := b.lock(key)
	defer s.mu.Unlock()
	e := s.Get(key)
	if e == nil {
		return 0
	}
	if e.Value <= ns {
		b.drop(s, e)
		return 0
	}
	return e.Value
}

// set blocks key until until (Unix ns), unless a longer block is in place,
// and returns when the block ends.
func (b *blockSet) set(key string, until int64) int64 {
	s := b.lock(key)
	defer s.mu.Unlock()
	e := s.Use(key)
	if e == nil {
		if len(s.entries) < s.budget {
			b.held.Add(1) // else Add forgets the least recently used block
		}
		e = s.Add(key, nil)
		e.Value = until
	}
	e.Value = max(e.Value, until)
	return e.Value
}

// remove lifts key's block.
func (b *blockSet) remove(key string) {
	s := b.lock(key)
	if e := s.Get(key); e != nil {
		b.drop(s, e)
	}
	s.mu.Unlock()
}

// lock returns key's shard, locked.
func (b *blockSet) lock(key string) *Shard[int64] {
	s := b.lru.Shard(key)
	s.mu.Lock()
	return s
}

// drop removes the block e from its shard s, locked.
func (b *blockSet) drop(s *Shard[int64], e *Entry[int64]) {
	s.Remove(e)
	b.held.Add(-1)
}

// sweep drops the blocks that have ended at now.
func (b *blockSet) sweep(now time.Time, batch int) {
	if b.held.Load() == 0 {
		return
	}
	ns := now.UnixNano()
	ended := func(e *Entry[int64]) bool { return e.Value <= ns }
	for i := range b.lru.shards {
		b.held.Add(-int64(b.lru.shards[i].Sweep(batch, ended)))
	}
}

var _ Blocker = (*Memory)(nil)

// Block refuses key from now (the store's clock when zero) until now+d and
// returns when the block ends; a longer block in place is kept. A key
// without state is blocked too.
func (m *Memory) Block(_ context.Context, key string, now time.Time, d time.Duration) (time.Time, error) {
	if err := CheckBlock(d); err != nil {
		return time.Time{}, err
	}
	if now.IsZero() {
		now = m.now()
	}
	return time.Unix(0, m.blocks.set(key, now.UnixNano()+int64(d))), nil
}

// Unblock lifts key's block, if any.
func (m *Memory) Unblock(_ context.Context, key string) error {
	m.blocks.remove(key)
	return nil
}

// BlockedUntil returns when key's block ends, or the zero time when it is
// not blocked at now (the store's clock when zero).
func (m *Memory) BlockedUntil(_ context.Context, key string, now time.Time) (time.Time, error) {
	if now.IsZero() {
		now = m.now()
	}
	if until := m.blocks.until(key, now.UnixNano()); until != 0 {
		return time.Unix(0, until), nil
	}
	return time.Time{}, nil
}
