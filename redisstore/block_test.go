package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// blockStore is a Store of zone with block_for.
func blockStore(t testing.TB, c redis.UniversalClient, name string, cfg algorithms.Config, zone string, blockFor time.Duration) *Store {
	t.Helper()
	s, err := NewStore(c, mustLimiter(t, name, cfg), Options{KeyPrefix: "rltest:", Zone: zone, BlockFor: blockFor})
	if err != nil {
		t.Fatal(err)
	}
	s.setMargin(time.Hour) // the timeline's instants are not the wall clock
	return s
}

// TestBlockFor, for every algorithm on synthetic instants: the denial
// blocks the key for block_for; meanwhile every Take, through this Store or
// another Store of the zone (another instance, even with other limits), is
// refused for exactly the time left, counting nothing; then the algorithm
// decides again.
func TestBlockFor(t *testing.T) {
	perAlgorithm(t, func(t *testing.T, ctx context.Context, c *redis.Client, name string) {
		zone := "block-" + name
		a := blockStore(t, c, name, oneTier(2, time.Second), zone, time.Minute)
		b := blockStore(t, c, name, oneTier(2, time.Second), zone, time.Minute)
		other := oneTier(100, time.Hour) // another config digest
		if name == algorithms.Concurrency {
			other = oneTier(100, time.Second)
		}
		changed := blockStore(t, c, name, other, zone, 0)
		for i := range 2 {
			if d, err := a.Take(ctx, "k", t0, 1); err != nil || !d.Allowed {
				t.Fatalf("take %d: %+v, %v", i, d, err)
			}
		}
		at := t0.Add(100 * time.Millisecond)
		d, err := a.Take(ctx, "k", at, 1)
		if err != nil || d.Allowed || !d.Blocked || d.RetryAfter != time.Minute || d.MoreAfter < time.Minute || d.ResetAfter < time.Minute || d.Limit != 2 {
			t.Fatalf("the denial that blocks: %+v, %v", d, err)
		}
		end := at.Add(time.Minute)
		if pttl := c.PTTL(ctx, a.BlockKey("k")).Val(); pttl <= 0 || pttl > time.Minute {
			t.Fatalf("block key's TTL %v, want (0, 1m]", pttl)
		}
		for _, s := range []*Store{a, b, changed} {
			d, err := s.Take(ctx, "k", t0.Add(40*time.Second), 1)
			if err != nil || d.Allowed || !d.Blocked || d.RetryAfter != 20*time.Second+100*time.Millisecond ||
				d.MoreAfter != d.RetryAfter || d.ResetAfter != d.RetryAfter || d.Remaining != 0 || d.Limit != s.blockLimit {
				t.Fatalf("Take during the block: %+v, %v", d, err)
			}
			if got, err := s.BlockedUntil(ctx, "k", t0.Add(40*time.Second)); err != nil || !got.Equal(end) {
				t.Fatalf("BlockedUntil = %v, %v; want %v", got, err, end)
			}
		}
		if s := b.blockLimit; s != 2 {
			t.Fatalf("blocked Limit %d, want the tier's 2", s)
		}
		// The refusals neither counted nor moved the end.
		if d, _ := b.Take(ctx, "k", end.Add(-time.Microsecond), 1); !d.Blocked || d.RetryAfter != time.Microsecond {
			t.Fatalf("1µs before the end: %+v", d)
		}
		if got, _ := a.BlockedUntil(ctx, "k", end); !got.IsZero() {
			t.Fatalf("BlockedUntil at the end = %v, want zero", got)
		}
		for i := range 2 {
			d, err := b.Take(ctx, "k", end.Add(time.Duration(i)*time.Millisecond), 1)
			if err != nil || !d.Allowed {
				t.Fatalf("take %d after the block: %+v, %v", i, d, err)
			}
		}
	})
}

// TestBlockRedisTime: with Redis TIME, the blocked Take waits the time left
// (at most block_for, more than nothing), and the block key expires with
// the block. The window and the block are an hour long, so that the Takes
// (on Redis's real clock) fall within them however slowly the test runs.
func TestBlockRedisTime(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const blockFor = time.Hour
	s, err := NewStore(c, mustLimiter(t, algorithms.GCRA, oneTier(1, time.Hour)), Options{KeyPrefix: "rltest:", Zone: "block-time", BlockFor: blockFor})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	s.Take(ctx, "k", time.Time{}, 1)
	if d, err := s.Take(ctx, "k", time.Time{}, 1); err != nil || d.Allowed || d.RetryAfter != blockFor {
		t.Fatalf("the denial that blocks: %+v, %v", d, err)
	}
	d, err := s.Take(ctx, "k", time.Time{}, 1)
	if err != nil || !d.Blocked || d.RetryAfter <= 0 || d.RetryAfter > blockFor {
		t.Fatalf("blocked Take: %+v, %v; want a wait in (0, %s]", d, err, blockFor)
	}
	if pttl := c.PTTL(ctx, s.BlockKey("k")).Val(); pttl <= 0 || pttl > blockFor {
		t.Fatalf("block key's TTL %v, want (0, %s]", pttl, blockFor)
	}
	until, err := s.BlockedUntil(ctx, "k", time.Time{})
	// Redis's clock and ours are the same machine's.
	if err != nil || until.Before(before.Add(blockFor-time.Second)) || until.After(time.Now().Add(blockFor+time.Second)) {
		t.Fatalf("BlockedUntil = %v, %v; want about %s from %v", until, err, blockFor, before)
	}
}

// TestOperatorBlock: Block refuses a key never seen, keeps a longer block,
// extends a shorter one; Unblock lifts it on every Store of the zone.
func TestOperatorBlock(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	a := blockStore(t, c, algorithms.SlidingWindow, oneTier(5, time.Second), "op", 0)
	b := blockStore(t, c, algorithms.SlidingWindow, oneTier(5, time.Second), "op", 0)
	until, err := a.Block(ctx, "k", t0, time.Hour)
	if err != nil || !until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Block = %v, %v", until, err)
	}
	if pttl := c.PTTL(ctx, a.BlockKey("k")).Val(); pttl <= 59*time.Minute || pttl > time.Hour {
		t.Fatalf("block key's TTL %v, want about 1h", pttl)
	}
	if d, err := b.Take(ctx, "k", t0.Add(time.Minute), 1); err != nil || !d.Blocked || d.RetryAfter != 59*time.Minute || d.Limit != 5 {
		t.Fatalf("Take of a blocked key: %+v, %v", d, err)
	}
	storetest.BlockKeepsLongest(t, b, "k", t0.Add(time.Minute), t0.Add(time.Hour))
	if n := c.Exists(ctx, a.BlockKey("k")).Val(); n != 0 {
		t.Fatal("Unblock left the block key")
	}
	if d, err := a.Take(ctx, "k", t0.Add(2*time.Minute), 1); err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatalf("Take after Unblock: %+v, %v", d, err)
	}
	if got, err := a.BlockedUntil(ctx, "k", t0); err != nil || !got.IsZero() {
		t.Fatalf("BlockedUntil after Unblock = %v, %v", got, err)
	}
	for _, d := range []time.Duration{0, -time.Second, algorithms.MaxWindow + time.Second} {
		if _, err := a.Block(ctx, "k", t0, d); err == nil {
			t.Errorf("Block for %s: no error", d)
		}
	}
	if _, err := NewStore(c, mustLimiter(t, algorithms.GCRA, oneTier(1, time.Second)), Options{Zone: "z", BlockFor: algorithms.MaxWindow + time.Second}); err == nil {
		t.Error("NewStore took a block_for beyond MaxWindow")
	}
}

// TestBlockCluster: the block key is in the slot of the key's state, and
// blocks work on a Redis Cluster, for keys in many slots.
func TestBlockCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no cluster")
	}
	_, c := newClusterClient(t, 1)
	ctx := context.Background()
	for _, name := range []string{algorithms.SlidingLog, algorithms.Concurrency} {
		s := blockStore(t, c, name, oneTier(1, time.Second), "cluster{block}\n"+name, time.Minute)
		for i := range 20 {
			key := fmt.Sprintf("key-%d{", i)
			if slot, want := c.ClusterKeySlot(ctx, s.BlockKey(key)).Val(), c.ClusterKeySlot(ctx, s.Keys(key)[0]).Val(); slot != want {
				t.Fatalf("%s: block key in slot %d, state in %d", name, slot, want)
			}
			s.Take(ctx, key, t0, 1)
			if d, err := s.Take(ctx, key, t0, 1); err != nil || d.Allowed || d.RetryAfter != time.Minute {
				t.Fatalf("%s: the denial that blocks: %+v, %v", name, d, err)
			}
			if d, err := s.Take(ctx, key, t0.Add(time.Second), 1); err != nil || !d.Blocked || d.RetryAfter != 59*time.Second {
				t.Fatalf("%s: blocked Take: %+v, %v", name, d, err)
			}
			if err := s.Unblock(ctx, key); err != nil {
				t.Fatal(err)
			}
			if until, err := s.Block(ctx, key, t0.Add(time.Second), time.Hour); err != nil || !until.Equal(t0.Add(time.Hour+time.Second)) {
				t.Fatalf("%s: Block = %v, %v", name, until, err)
			}
			if got, err := s.BlockedUntil(ctx, key, t0.Add(2*time.Second)); err != nil || !got.Equal(t0.Add(time.Hour+time.Second)) {
				t.Fatalf("%s: BlockedUntil = %v, %v", name, got, err)
			}
		}
	}
}

// TestDenyCacheBlocks: through the deny cache, a blocked key is answered
// from the cache with the time left of the block, for at most recheck
// before Redis is asked again, so that an Unblock made through another
// instance lifts the block here too; an Unblock through the cache lifts it
// at once.
func TestDenyCacheBlocks(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	inner := blockStore(t, c, algorithms.FixedWindow, oneTier(1, time.Second), "cached", time.Minute)
	other := blockStore(t, c, algorithms.FixedWindow, oneTier(1, time.Second), "cached", time.Minute)
	cache := NewDenyCache(inner)
	cache.Take(ctx, "k", t0, 1)
	if d, err := cache.Take(ctx, "k", t0, 1); err != nil || !d.Blocked || d.RetryAfter != time.Minute {
		t.Fatalf("the denial that blocks: %+v, %v", d, err)
	}
	at := t0.Add(recheck / 2)
	d, ok := cache.Denied("k", at)
	if !ok || !d.Blocked || d.RetryAfter != time.Minute-recheck/2 {
		t.Fatalf("cached block: %+v, %v; want the time left of the block", d, ok)
	}
	if err := other.Unblock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, ok := cache.Denied("k", t0.Add(recheck)); ok {
		t.Fatal("a blocked key's denial is answered from the cache beyond recheck")
	}
	// Another window: the key is admitted once Redis is asked.
	if d, err := cache.Take(ctx, "k", t0.Add(2*time.Second), 1); err != nil || !d.Allowed {
		t.Fatalf("after an Unblock elsewhere: %+v, %v", d, err)
	}

	cache.Take(ctx, "k", t0.Add(2*time.Second), 1) // blocked again
	if got, err := cache.BlockedUntil(ctx, "k", t0.Add(2*time.Second)); err != nil || !got.Equal(t0.Add(time.Minute+2*time.Second)) {
		t.Fatalf("BlockedUntil through the cache = %v, %v", got, err)
	}
	if err := cache.Unblock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, err := cache.Take(ctx, "k", t0.Add(3*time.Second), 1); err != nil || !d.Allowed {
		t.Fatalf("at once after an Unblock through the cache: %+v, %v", d, err)
	}
	until, err := cache.Block(ctx, "op", t0, time.Hour)
	if err != nil || !until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Block through the cache = %v, %v", until, err)
	}
	if d, err := other.Take(ctx, "op", t0, 1); err != nil || !d.Blocked {
		t.Fatalf("Block through the cache not seen: %+v, %v", d, err)
	}
	if _, err := NewDenyCache(&answerStore{}).Block(ctx, "k", t0, time.Second); err == nil {
		t.Error("Block through a cache of a store that cannot block: no error")
	}
}

// blockSync is a two-layer store of zone with block_for, on clk.
func blockSync(t testing.TB, c redis.UniversalClient, clk *storetest.Clock, zone string, blockFor time.Duration) *SyncStore {
	t.Helper()
	l := mustLimiter(t, algorithms.FixedWindow, oneTier(2, time.Second))
	s, err := newSyncStore(c, l, Options{KeyPrefix: "rltest:", Zone: zone, BlockFor: blockFor}, SyncOptions{Interval: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSyncBlockFor: the two-layer store blocks a denied key locally at
// once, writes the block to Redis at its next sync, and another instance
// (and the Lua store of the zone) refuses the key from its own next sync;
// an Unblock anywhere reaches every instance at its next sync.
func TestSyncBlockFor(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	clk := storetest.NewClock(t0)
	a := blockSync(t, c, clk, "sync-block", time.Minute)
	b := blockSync(t, c, clk, "sync-block", time.Minute)
	lua := blockStore(t, c, algorithms.FixedWindow, oneTier(2, time.Second), "sync-block", time.Minute)

	b.Take(ctx, "k", time.Time{}, 1) // b knows the key: its syncs read it
	a.Take(ctx, "k", time.Time{}, 1)
	a.Take(ctx, "k", time.Time{}, 1)
	if d, _ := a.Take(ctx, "k", time.Time{}, 1); d.Allowed || !d.Blocked || d.RetryAfter != time.Minute {
		t.Fatalf("the denial that blocks: %+v", d)
	}
	clk.Set(t0.Add(10 * time.Second))
	if d, _ := a.Take(ctx, "k", time.Time{}, 1); !d.Blocked || d.RetryAfter != 50*time.Second || d.Limit != 2 {
		t.Fatalf("blocked Take: %+v", d)
	}
	if got, err := a.BlockedUntil(ctx, "k", time.Time{}); err != nil || !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("BlockedUntil before the sync = %v, %v", got, err)
	}
	if d, _ := b.Take(ctx, "k", time.Time{}, 1); !d.Allowed {
		t.Fatalf("b before any sync: %+v", d)
	}
	mustSync(t, ctx, a, b) // a writes the block, b reads it back
	if pttl := c.PTTL(ctx, a.blk.BlockKey("k")).Val(); pttl <= 49*time.Second || pttl > 50*time.Second {
		t.Fatalf("block key's TTL %v, want the 50s left", pttl)
	}
	mustSync(t, ctx, b)
	for name, s := range map[string]interface {
		Take(context.Context, string, time.Time, int64) (algorithms.Decision, error)
	}{"b": b, "lua": lua} {
		if d, err := s.Take(ctx, "k", t0.Add(20*time.Second), 1); err != nil || !d.Blocked || d.RetryAfter != 40*time.Second {
			t.Fatalf("%s after the sync: %+v, %v", name, d, err)
		}
	}

	if err := lua.Unblock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(30 * time.Second))
	mustSync(t, ctx, a, b)
	for name, s := range map[string]*SyncStore{"a": a, "b": b} {
		if d, _ := s.Take(ctx, "k", time.Time{}, 1); !d.Allowed {
			t.Fatalf("%s after an Unblock and a sync: %+v", name, d)
		}
	}

	// An operator's Block through one instance refuses the key there at
	// once, at the others after their sync; Unblock lifts it here at once.
	if until, err := a.Block(ctx, "op", time.Time{}, time.Hour); err != nil || !until.Equal(t0.Add(30*time.Second+time.Hour)) {
		t.Fatalf("Block = %v, %v", until, err)
	}
	if d, _ := a.Take(ctx, "op", time.Time{}, 1); !d.Blocked {
		t.Fatalf("a after its Block: %+v", d)
	}
	b.Take(ctx, "op", time.Time{}, 1)
	mustSync(t, ctx, b)
	if d, _ := b.Take(ctx, "op", time.Time{}, 1); !d.Blocked || d.RetryAfter != time.Hour {
		t.Fatalf("b after its sync: %+v", d)
	}
	if err := a.Unblock(ctx, "op"); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.Take(ctx, "op", time.Time{}, 1); !d.Allowed {
		t.Fatalf("a after its Unblock: %+v", d)
	}
	if got, err := b.BlockedUntil(ctx, "op", time.Time{}); err != nil || !got.IsZero() {
		t.Fatalf("BlockedUntil after Unblock = %v, %v", got, err)
	}
}

// TestSyncBlockKeptWhileBlocked: a blocked key is not dropped as idle by a
// sync while its block lasts.
func TestSyncBlockKeptWhileBlocked(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	clk := storetest.NewClock(t0)
	s := blockSync(t, c, clk, "sync-kept", time.Hour)
	for range 3 {
		s.Take(ctx, "k", time.Time{}, 1)
	}
	for i := 1; i <= 5; i++ {
		clk.Set(t0.Add(time.Duration(i) * time.Minute))
		mustSync(t, ctx, s)
	}
	if s.Len() != 1 {
		t.Fatalf("holds %d keys, want the blocked one", s.Len())
	}
	if d, _ := s.Take(ctx, "k", time.Time{}, 1); !d.Blocked || d.RetryAfter != 55*time.Minute {
		t.Fatalf("after the syncs: %+v", d)
	}
}

// TestBlockKeyHashTag: every script call takes the key's block last, in the
// hash tag of the state's keys, and Keys (the state's keys) leaves it out.
func TestBlockKeyHashTag(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, name := range algorithms.Names {
		s := mustStore(t, c, mustLimiter(t, name, oneTier(3, time.Second)), "z{o}ne\n")
		for _, key := range []string{"", "a", "{", "a{b}c", "x\ny"} {
			all, state := s.scriptKeys(key), s.Keys(key)
			if len(all) != len(state)+1 || all[len(all)-1] != s.BlockKey(key) {
				t.Fatalf("%s: script keys %q, state keys %q, block %q", name, all, state, s.BlockKey(key))
			}
			if !strings.HasSuffix(s.BlockKey(key), "}:b") || hashTag(s.BlockKey(key)) != hashTag(state[0]) {
				t.Fatalf("%s: block key %q, state key %q", name, s.BlockKey(key), state[0])
			}
		}
	}
}
