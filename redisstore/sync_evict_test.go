package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// newEvictSync returns a SyncStore of E per W, synced every I, holding
// MaxKeys 256 (64 shards of 4 keys), without its goroutine.
func newEvictSync(t *testing.T, c redis.UniversalClient, name, zone string, E int64, W, I time.Duration, clk *storetest.Clock) *SyncStore {
	t.Helper()
	l := mustLimiter(t, name, oneTier(E, W))
	s, err := newSyncStore(c, l, Options{KeyPrefix: "rlsync:", Zone: zone}, SyncOptions{Interval: I, Now: clk.Now, MaxKeys: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sameShardKeys returns n distinct keys that s holds in key's shard.
func sameShardKeys(s *SyncStore, key string, n int) []string {
	sh := s.keys.Shard(key)
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := "flood-" + strconv.Itoa(i)
		if s.keys.Shard(k) == sh {
			keys = append(keys, k)
		}
	}
	return keys
}

// floodShard takes cost units at at on n distinct keys of key's shard,
// each admitted or denied as allowed says.
func floodShard(t *testing.T, s *SyncStore, key string, n int, at time.Time, cost int64, allowed bool) {
	t.Helper()
	for _, k := range sameShardKeys(s, key, n) {
		if d, _ := s.Take(context.Background(), k, at, cost); d.Allowed != allowed {
			t.Fatalf("%s, cost %d: %+v", k, cost, d)
		}
	}
}

// minuteSync returns a client of a new redis-server and a SyncStore of 10
// per minute on it (see newEvictSync), synced every I, its clock at base
// (a minute's start), which it returns too.
func minuteSync(t *testing.T, name, zone string, I time.Duration) (redis.UniversalClient, *SyncStore, time.Time) {
	t.Helper()
	_, c := newClient(t)
	clk := new(storetest.Clock)
	base := alignedAfter(t0, time.Minute)
	clk.Set(base)
	return c, newEvictSync(t, c, name, zone, 10, time.Minute, I, clk), base
}

// takeUntilDenied takes key one unit at a time at at until a Take is denied, and
// returns how many were admitted.
func takeUntilDenied(t *testing.T, s *SyncStore, key string, at time.Time) int64 {
	t.Helper()
	n := int64(0)
	for ; n < 1000; n++ {
		d, err := s.Take(context.Background(), key, at, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return n
		}
	}
	t.Fatalf("%s: more than 1000 admitted", key)
	return n
}

// TestSyncEvictionKeepsUnsentCounts: a flood of other keys between two
// syncs does not evict a key whose counts have not been pushed, so the
// instance does not admit its limit again and Redis's total holds every
// unit admitted: two instances stay within events + (N-1) * c.
func TestSyncEvictionKeepsUnsentCounts(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const E, W = 10, 10 * time.Second
	for _, name := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		t.Run(name, func(t *testing.T) {
			clk := new(storetest.Clock)
			base := alignedAfter(t0, W)
			clk.Set(base)
			zone := "evict-" + name
			a := newEvictSync(t, c, name, zone, E, W, W, clk)
			b := newEvictSync(t, c, name, zone, E, W, W, clk)
			budget := a.Budget(0) // E: one interval per window
			at := base.Add(time.Millisecond)

			admitted := int64(0)
			for range E - 1 {
				if d, _ := a.Take(ctx, "victim", at, 1); !d.Allowed {
					t.Fatalf("take %d: %+v", admitted+1, d)
				}
				admitted++
			}
			// Fewer keys than twice the shard's share, each counting.
			floodShard(t, a, "victim", 7, at, 1, true)
			admitted += takeUntilDenied(t, a, "victim", at)
			if admitted != E {
				t.Errorf("instance A admitted %d in one window, limit %d: the flood made it forget the key's counts", admitted, E)
			}
			clk.Set(at.Add(W / 2))
			mustSync(t, ctx, a)
			if got := redisInt(t, c, a.counterKey("victim", 0, at)); got != admitted {
				t.Errorf("Redis holds %d for the key, instance A admitted %d", got, admitted)
			}

			// A second instance admits its budget on a key it never
			// synced, then what the total leaves.
			admitted += takeUntilDenied(t, b, "victim", at.Add(W/2))
			mustSync(t, ctx, b)
			admitted += takeUntilDenied(t, b, "victim", at.Add(W/2))
			if bound := E + budget; admitted > bound {
				t.Fatalf("%d admitted in one window by 2 instances, bound %d", admitted, bound)
			}
		})
	}
}

// TestSyncEvictionDeniedFlood: keys that count nothing (every Take denied)
// never evict a key with unsent counts, however many.
func TestSyncEvictionDeniedFlood(t *testing.T) {
	ctx := context.Background()
	c, s, base := minuteSync(t, algorithms.FixedWindow, "evict-denied", time.Minute)
	if d, _ := s.Take(ctx, "victim", base, 3); !d.Allowed {
		t.Fatal(d)
	}
	floodShard(t, s, "victim", 100, base, 11, false) // above the limit
	mustSync(t, ctx, s)
	if got := redisInt(t, c, s.counterKey("victim", 0, base)); got != 3 {
		t.Fatalf("Redis holds %d for the key, want 3", got)
	}
}

// TestSyncEvictionBounded: a flood of distinct keys that all count between
// two syncs grows a shard to twice its share of MaxKeys, no more; after a
// sync has pushed them they are evicted as usual.
func TestSyncEvictionBounded(t *testing.T) {
	ctx := context.Background()
	_, s, base := minuteSync(t, algorithms.SlidingWindow, "evict-bound", time.Second)
	perShard := func() (most, total int) {
		shards := s.keys.Shards()
		for i := range shards {
			n := 0
			shards[i].Lock()
			shards[i].Walk(func(*store.Entry[syncEntry]) { n++ })
			shards[i].Unlock()
			most, total = max(most, n), total+n
		}
		return most, total
	}
	for i := range 10_000 {
		if d, _ := s.Take(ctx, fmt.Sprintf("k%d", i), base, 1); !d.Allowed {
			t.Fatal(d)
		}
	}
	if most, total := perShard(); most != 8 || total != 512 {
		t.Fatalf("every key counting: %d keys held, at most %d in a shard; want 512, 8 (twice 256, 4)", total, most)
	}
	mustSync(t, ctx, s)
	for i := range 10_000 {
		s.Take(ctx, fmt.Sprintf("j%d", i), base.Add(time.Millisecond), 0)
	}
	if most, total := perShard(); most > 8 || total > 512 {
		t.Fatalf("keys counting nothing: %d keys held, at most %d in a shard; want at most 512, 8", total, most)
	}
	for i := range 10_000 {
		if ent := s.keys.Shard(fmt.Sprintf("k%d", i)).Get(fmt.Sprintf("k%d", i)); ent != nil {
			t.Fatalf("k%d, pushed, is still held after a flood of 10000 keys", i)
		}
	}
}

// TestSyncEvictionKeepsInFlight: a key whose counts a sync has sent but
// Redis not acknowledged is not evicted by a flood meanwhile, so that when
// that sync fails the next one sends them again.
func TestSyncEvictionKeepsInFlight(t *testing.T) {
	ctx := context.Background()
	c, s, base := minuteSync(t, algorithms.FixedWindow, "evict-flight", time.Minute)
	if d, _ := s.Take(ctx, "victim", base, 3); !d.Allowed {
		t.Fatal(d)
	}
	// The first half of a sync: the victim's counts are in flight.
	calls := s.snapshot(base.UnixMicro())
	if len(calls) != 1 {
		t.Fatalf("%d calls, want 1", len(calls))
	}
	floodShard(t, s, "victim", 7, base, 1, true)
	// The sync fails: its counts go back to pending, and the next sends them.
	calls[0].err = errors.New("connection reset")
	s.apply(calls[0])
	mustSync(t, ctx, s)
	if got := redisInt(t, c, s.counterKey("victim", 0, base)); got != 3 {
		t.Fatalf("Redis holds %d for the key, want 3", got)
	}
}
