package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// TestMemoryBlockFor: with BlockFor, the denial blocks the key; until the
// block ends every Take is refused without counting, waiting exactly the
// time left; then the key is decided by its algorithm again.
func TestMemoryBlockFor(t *testing.T) {
	ctx := context.Background()
	m := newTestMemory(t, fakeLimiter{limit: 2, window: time.Second}, MemoryOptions{BlockFor: time.Minute})
	take(t, m, "k", t0)
	take(t, m, "k", t0)
	d := take(t, m, "k", t0.Add(100*time.Millisecond))
	if d.Allowed || !d.Blocked || d.RetryAfter != time.Minute || d.ResetAfter != time.Minute || d.MoreAfter != time.Minute {
		t.Fatalf("the denial that blocks: %+v, want a wait of the whole block", d)
	}
	if got, _ := m.BlockedUntil(ctx, "k", t0); !got.Equal(t0.Add(time.Minute + 100*time.Millisecond)) {
		t.Fatalf("BlockedUntil = %v", got)
	}
	// Long after the window freed the count, the key is still refused.
	at := t0.Add(40 * time.Second)
	d = take(t, m, "k", at)
	if d.Allowed || !d.Blocked || d.RetryAfter != 20*time.Second+100*time.Millisecond || d.MoreAfter != d.RetryAfter || d.Limit != 2 || d.Remaining != 0 {
		t.Fatalf("blocked Take: %+v, want refused for the 20.1s left", d)
	}
	// The refusals counted nothing: the block does not grow, and the
	// state went idle.
	if got, _ := m.BlockedUntil(ctx, "k", at); !got.Equal(t0.Add(time.Minute + 100*time.Millisecond)) {
		t.Fatalf("a refusal during the block moved its end to %v", got)
	}
	end := t0.Add(time.Minute + 100*time.Millisecond)
	if d := take(t, m, "k", end.Add(-time.Nanosecond)); !d.Blocked || d.RetryAfter != time.Nanosecond {
		t.Fatalf("1ns before the end: %+v", d)
	}
	for i := range 2 {
		if d := take(t, m, "k", end.Add(time.Duration(i)*time.Millisecond)); !d.Allowed || d.Blocked {
			t.Fatalf("Take %d after the block: %+v", i, d)
		}
	}
	if got, _ := m.BlockedUntil(ctx, "k", end); !got.IsZero() {
		t.Fatalf("BlockedUntil after the end = %v, want zero", got)
	}
	// Other keys were never blocked.
	if d := take(t, m, "other", at); !d.Allowed {
		t.Fatalf("another key: %+v", d)
	}
}

// TestMemoryNoBlockFor: without BlockFor a denial blocks nothing.
func TestMemoryNoBlockFor(t *testing.T) {
	m := newTestMemory(t, fakeLimiter{limit: 1, window: time.Second}, MemoryOptions{})
	take(t, m, "k", t0)
	if d := take(t, m, "k", t0); d.Allowed || d.Blocked || d.RetryAfter != time.Second {
		t.Fatalf("denial: %+v", d)
	}
	if d := take(t, m, "k", t0.Add(time.Second)); !d.Allowed {
		t.Fatalf("next window: %+v", d)
	}
}

// TestMemoryOperatorBlock: Block refuses a key that was never denied (nor
// seen), keeps a longer block in place, and Unblock lifts it.
func TestMemoryOperatorBlock(t *testing.T) {
	ctx := context.Background()
	m := newTestMemory(t, fakeLimiter{limit: 5, window: time.Second}, MemoryOptions{})
	until, err := m.Block(ctx, "k", t0, time.Hour)
	if err != nil || !until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Block = %v, %v", until, err)
	}
	if d := take(t, m, "k", t0.Add(time.Minute)); d.Allowed || !d.Blocked || d.RetryAfter != 59*time.Minute || d.Limit != 5 {
		t.Fatalf("Take of a blocked key: %+v", d)
	}
	storetest.BlockKeepsLongest(t, m, "k", t0.Add(time.Minute), t0.Add(time.Hour))
	if d := take(t, m, "k", t0.Add(2*time.Minute)); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("Take after Unblock: %+v", d)
	}
	if got, _ := m.BlockedUntil(ctx, "k", t0.Add(2*time.Minute)); !got.IsZero() {
		t.Fatalf("BlockedUntil after Unblock = %v", got)
	}
	if err := m.Unblock(ctx, "never-seen"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := m.Block(ctx, "k", t0, d); err == nil {
			t.Errorf("Block for %s: no error", d)
		}
	}
}

// TestMemoryBlockSweep: the sweep keeps a block however idle the key's
// state (and drops the state, which the block does not need), and drops
// the block once it is over.
func TestMemoryBlockSweep(t *testing.T) {
	ctx := context.Background()
	m := newTestMemory(t, fakeLimiter{limit: 1, window: time.Second}, MemoryOptions{BlockFor: time.Minute})
	take(t, m, "k", t0)
	take(t, m, "k", t0) // blocked until t0+1m
	if _, err := m.Block(ctx, "op", t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := m.Sweep(t0.Add(10 * time.Second)); n != 1 || m.Len() != 0 {
		t.Fatalf("the sweep dropped %d idle states, holds %d", n, m.Len())
	}
	if m.blocks.held.Load() != 2 || m.blocks.lru.Len() != 2 {
		t.Fatalf("the sweep during the blocks left %d (%d counted)", m.blocks.lru.Len(), m.blocks.held.Load())
	}
	if d := take(t, m, "k", t0.Add(time.Minute-time.Millisecond)); !d.Blocked || d.RetryAfter != time.Millisecond {
		t.Fatalf("the block did not survive the sweep: %+v", d)
	}
	m.Sweep(t0.Add(time.Minute))
	if m.blocks.held.Load() != 1 || m.blocks.lru.Len() != 1 {
		t.Fatalf("the sweep after one block ended left %d (%d counted)", m.blocks.lru.Len(), m.blocks.held.Load())
	}
	if d := take(t, m, "k", t0.Add(time.Minute)); !d.Allowed {
		t.Fatalf("after the block: %+v", d)
	}
	if d := take(t, m, "op", t0.Add(time.Minute)); !d.Blocked {
		t.Fatalf("the operator's block: %+v", d)
	}
}

// TestMemoryBlockMaxKeys: blocks are held within MaxKeys like the states:
// a flood of blocks forgets the least recently blocked.
func TestMemoryBlockMaxKeys(t *testing.T) {
	ctx := context.Background()
	m := newTestMemory(t, fakeLimiter{limit: 5, window: time.Second}, MemoryOptions{MaxKeys: 8})
	for i := range 100 {
		if _, err := m.Block(ctx, fmt.Sprintf("k%d", i), t0, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n, held := m.blocks.lru.Len(), m.blocks.held.Load(); n > 8 || int64(n) != held {
		t.Fatalf("holds %d blocks (%d counted), bound 8", n, held)
	}
	if d := take(t, m, "k99", t0); !d.Blocked {
		t.Fatalf("the latest block was forgotten: %+v", d)
	}
	for i := range 100 {
		m.Unblock(ctx, fmt.Sprintf("k%d", i))
	}
	if n, held := m.blocks.lru.Len(), m.blocks.held.Load(); n != 0 || held != 0 {
		t.Fatalf("after unblocking all: %d blocks (%d counted)", n, held)
	}
}
