package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// dumps returns the serialized value of each of keys ("" for a missing
// one).
func dumps(t *testing.T, c redis.UniversalClient, keys []string) []string {
	t.Helper()
	out := make([]string, len(keys))
	for i, k := range keys {
		v, err := c.Dump(context.Background(), k).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

// inspectLimiter is the limiter of name with the tiers 3 per 10s and 10
// per minute (concurrency: the first only).
func inspectLimiter(t *testing.T, name string) (algorithms.Config, algorithms.Limiter) {
	t.Helper()
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 3, Window: 10 * time.Second}, {Events: 10, Window: time.Minute}}}
	if name == algorithms.Concurrency {
		cfg.Tiers = cfg.Tiers[:1]
	}
	l, err := limiter(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, l
}

// TestStoreInspectReset: for every algorithm, the peek reports every tier
// as the Go twin's Peek does and writes nothing; a reset through one store
// (instance) makes the key whole for another on the same Redis.
func TestStoreInspectReset(t *testing.T) {
	perAlgorithm(t, func(t *testing.T, ctx context.Context, c *redis.Client, name string) {
		cfg, l := inspectLimiter(t, name)
		a, b := mustStore(t, c, l, "inspect"), mustStore(t, c, l, "inspect")
		a.setMargin(time.Hour) // real time must not expire the timeline's keys
		b.setMargin(time.Hour)
		twin := l.NewState()
		keys := a.Keys("k")

		ks, err := a.Inspect(ctx, "k", t0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ks.Tiers) != len(cfg.Tiers) || ks.Tiers[0].Used != 0 || ks.Tiers[0].Remaining != 3 || ks.Tiers[0].Window != 10*time.Second {
			t.Fatalf("unseen key: %+v", ks)
		}
		if n := c.Exists(ctx, keys...).Val(); n != 0 {
			t.Fatalf("peek of an unseen key created %d keys", n)
		}

		for k, off := range []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second} {
			at := t0.Add(off)
			d, err := a.Take(ctx, "k", at, 1)
			if err != nil {
				t.Fatal(err)
			}
			if want := twin.Take(at, 1); d.Allowed != want.Allowed {
				t.Fatalf("step %d: Redis %+v, Go %+v", k, d, want)
			}
			before := dumps(t, c, keys)
			peekAt := at.Add(500 * time.Millisecond)
			ks, err := b.Inspect(ctx, "k", peekAt)
			if err != nil {
				t.Fatal(err)
			}
			want := store.NewKeyState(cfg, twin.(algorithms.Peeker).Peek(peekAt))
			for i := range want.Tiers {
				if ks.Tiers[i] != want.Tiers[i] {
					t.Fatalf("step %d tier %d: Redis %+v, Go %+v", k, i, ks.Tiers[i], want.Tiers[i])
				}
			}
			if after := dumps(t, c, keys); len(after) != len(before) || func() bool {
				for i := range after {
					if after[i] != before[i] {
						return true
					}
				}
				return false
			}() {
				t.Fatalf("step %d: the peek changed the keys", k)
			}
		}
		if ks, _ := b.Inspect(ctx, "k", t0.Add(4*time.Second)); ks.Tiers[len(ks.Tiers)-1].Used < 3 {
			t.Fatalf("after 4 requests: %+v", ks.Tiers)
		}

		if err := a.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, keys...).Val(); n != 0 {
			t.Fatalf("%d keys left after Reset", n)
		}
		at := t0.Add(5 * time.Second)
		if d, err := b.Take(ctx, "k", at, 1); err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("the other store after Reset: %+v %v, want admitted with 2 remaining", d, err)
		}
	})
}

// TestStoreResetCluster: Reset deletes every part of a key (sliding_log's
// offsets and each tier's runs) in one call on a Redis Cluster.
func TestStoreResetCluster(t *testing.T) {
	_, c := newClusterClient(t, 1)
	ctx := context.Background()
	for _, name := range []string{algorithms.SlidingLog, algorithms.Concurrency} {
		_, l := inspectLimiter(t, name)
		s := mustStore(t, c, l, "reset")
		keys := s.Keys("a/b c")
		if _, err := s.Take(ctx, "a/b c", time.Time{}, 2); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, keys...).Val(); n != int64(len(keys)) {
			t.Fatalf("%s: %d of %d keys after a Take", name, n, len(keys))
		}
		if err := s.Reset(ctx, "a/b c"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := c.Exists(ctx, keys...).Val(); n != 0 {
			t.Fatalf("%s: %d keys left after Reset", name, n)
		}
	}
}

// TestDenyCacheReset: a reset forgets the denial the cache remembers, so
// the next request reaches Redis. The Takes run on Redis's clock: a sliding
// log, whose hour starts at the first Take, denies the second whenever the
// test runs (a fixed window would admit it across the turn of an hour).
func TestDenyCacheReset(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	l, err := limiter(algorithms.SlidingLog, algorithms.Config{Tiers: []algorithms.Tier{{Events: 1, Window: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	dc := NewDenyCache(mustStore(t, c, l, "denycache-reset"))
	dc.Take(ctx, "k", time.Time{}, 1)
	if d, _ := dc.Take(ctx, "k", time.Time{}, 1); d.Allowed {
		t.Fatal("second request admitted")
	}
	if _, ok := dc.Denied("k", time.Now()); !ok {
		t.Fatal("the denial is not cached")
	}
	if ks, err := dc.Inspect(ctx, "k", time.Time{}); err != nil || ks.Tiers[0].Used != 1 {
		t.Fatalf("Inspect: %+v %v", ks, err)
	}
	if err := dc.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := dc.Take(ctx, "k", time.Time{}, 1); !d.Allowed {
		t.Fatalf("after Reset: %+v, want admitted", d)
	}
}

// TestSyncStoreInspectReset: the two-layer store shows what it knows of a
// key, and a reset through one instance reaches the other at its next sync.
func TestSyncStoreInspectReset(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	for _, name := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		t.Run(name, func(t *testing.T) {
			cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 4, Window: time.Minute}, {Events: 10, Window: time.Hour}}}
			start := alignedAfter(t0, time.Hour)
			clk := storetest.NewClock(start)
			// An interval long enough for a budget of more than 3.
			a := newTestSync(t, c, name, cfg, time.Hour, clk, "inspect-"+name)
			b := newTestSync(t, c, name, cfg, time.Hour, clk, "inspect-"+name)
			for range 3 {
				if d, _ := a.Take(ctx, "k", time.Time{}, 1); !d.Allowed {
					t.Fatalf("denied within the limit: %+v", d)
				}
			}
			if ks, _ := a.Inspect(ctx, "k", time.Time{}); ks.Tiers[0].Used != 3 || ks.Tiers[1].Used != 3 || ks.Tiers[1].Window != time.Hour {
				t.Fatalf("the instance that counted: %+v", ks)
			}
			mustSync(t, ctx, a, b)
			b.Take(ctx, "k", time.Time{}, 0) // b holds the key from now on
			mustSync(t, ctx, b)
			if ks, _ := b.Inspect(ctx, "k", time.Time{}); ks.Tiers[0].Used != 3 || ks.Tiers[0].Remaining != 1 {
				t.Fatalf("the other instance after a sync: %+v", ks.Tiers[0])
			}

			if err := a.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if ks, _ := a.Inspect(ctx, "k", time.Time{}); ks.Tiers[0].Used != 0 {
				t.Fatalf("after Reset: %+v", ks.Tiers[0])
			}
			if v := redisInt(t, c, a.counterKey("k", 0, start)); v != 0 {
				t.Fatalf("Redis still counts %d", v)
			}
			mustSync(t, ctx, b)
			if ks, _ := b.Inspect(ctx, "k", time.Time{}); ks.Tiers[0].Used != 0 {
				t.Fatalf("the other instance after Reset and a sync: %+v", ks.Tiers[0])
			}
		})
	}
}
