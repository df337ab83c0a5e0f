package redisstore

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// leaseHeld returns the units s holds unused in its lease of key at now,
// and that lease's generation (the Token of its admissions).
func leaseHeld(s *LeaseStore, key string, now time.Time) (int64, uint64) {
	sh := s.keys.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	ent := sh.Get(key)
	if ent == nil || now.UnixMicro() >= ent.Value.ends {
		return 0, 0
	}
	return ent.Value.left, ent.Value.gen
}

// leaseAdminConfigs: every algorithm a lease takes, of 20 events per
// second, and two tiers of the window algorithms.
func leaseAdminConfigs() map[string]algorithms.Config {
	cfgs := leaseConfigs(20, time.Second)
	two := algorithms.Config{Tiers: []algorithms.Tier{{Events: 20, Window: time.Second}, {Events: 60, Window: 10 * time.Second}}}
	for _, alg := range []string{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog} {
		cfgs[alg+" two tiers"] = two
	}
	return cfgs
}

// redisState returns every Redis key of s for key with its value (the
// state's string, the instances hash's fields).
func redisState(t *testing.T, c *redis.Client, s *LeaseStore, key string) map[string]any {
	t.Helper()
	ctx := context.Background()
	ks := s.Keys(key)
	out := map[string]any{}
	if v, err := c.Get(ctx, ks[0]).Result(); err == nil {
		out[ks[0]] = v
	} else if err != redis.Nil {
		t.Fatal(err)
	}
	h, err := c.HGetAll(ctx, ks[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) > 0 {
		out[ks[1]] = h
	}
	return out
}

// TestLeaseInspectConformance: two leasing instances and one strict store
// see the same admissions. While the key is cold (no lease) the lease
// store's Inspect equals the strict store's in every field. Hot, the units
// leased out count as used: exactly so for the windows and the log; a
// bucket lends only below capacity - rate x lease, so it may show fewer
// remaining. Once every lease is given back (before it ends), the windows
// agree again in every field; the log in used and remaining (units used
// from a lease are stamped at its end, so they leave the log later); a
// bucket shows at most the strict store's remaining. Inspect writes
// nothing.
func TestLeaseInspectConformance(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const key = "k"
	for name, cfg := range leaseAdminConfigs() {
		alg, _, _ := strings.Cut(name, " ")
		bucket := alg == algorithms.TokenBucket || alg == algorithms.GCRA
		t.Run(name, func(t *testing.T) {
			l := mustLimiter(t, alg, cfg)
			zone := strings.ReplaceAll(name, " ", "-")
			strict, err := NewStore(c, l, Options{KeyPrefix: "rltest:", Zone: "conf-strict-" + zone})
			if err != nil {
				t.Fatal(err)
			}
			clk := storetest.NewClock(t0)
			ls := leaseStores(t, c, l, "conf-lease-"+zone, 2, 50*time.Millisecond, clk)
			inspect := func(now time.Time) (lease, want store.KeyState) {
				t.Helper()
				before := redisState(t, c, ls[0], key)
				// A zero now: the stores' Now clock, which is at now.
				a, err := ls[0].Inspect(ctx, key, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				b, err := ls[1].Inspect(ctx, key, now)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("the two instances see\n%+v\n%+v", a, b)
				}
				if after := redisState(t, c, ls[0], key); !reflect.DeepEqual(before, after) {
					t.Fatalf("Inspect wrote: before %v, after %v", before, after)
				}
				if want, err = strict.Inspect(ctx, key, now); err != nil {
					t.Fatal(err)
				}
				if len(a.Tiers) != len(cfg.Tiers) || !a.BlockedUntil.IsZero() {
					t.Fatalf("lease state %+v: want %d tiers, not blocked", a, len(cfg.Tiers))
				}
				return a, want
			}
			if got, _ := inspect(t0); got.Tiers[0].Used != 0 || got.Tiers[0].Remaining != got.Tiers[0].Limit {
				t.Fatalf("an unknown key: %+v, want whole", got)
			}
			if n, err := c.Exists(ctx, ls[0].Keys(key)...).Result(); err != nil || n != 0 {
				t.Fatalf("Inspect of an unknown key created %d keys (%v)", n, err)
			}

			// Cold: each instance calls at most every 120ms, a lease
			// lasts 50ms: one script call per request, no lease. The
			// run crosses window boundaries and denies.
			now := t0
			for i := range 40 {
				now = now.Add(60 * time.Millisecond)
				clk.Set(now)
				cost := int64(1 + i%3)
				d, err := ls[i%2].Take(ctx, key, now, cost)
				if err != nil {
					t.Fatal(err)
				}
				sd, err := strict.Take(ctx, key, now, cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != sd.Allowed {
					t.Fatalf("take %d: lease allowed %v, strict %v", i, d.Allowed, sd.Allowed)
				}
				if got, want := inspect(now); !reflect.DeepEqual(got, want) {
					t.Fatalf("cold, after take %d:\nlease  %+v\nstrict %+v", i, got, want)
				}
			}

			// Hot: every 100µs from both, half the limit; the strict
			// store takes what the instances admitted.
			now = now.Add(10 * time.Second) // fresh windows, full buckets
			admitted := 0
			for i := range 10 {
				now = now.Add(100 * time.Microsecond)
				clk.Set(now)
				d, err := ls[i%2].Take(ctx, key, now, 1)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					continue
				}
				admitted++
				if sd, err := strict.Take(ctx, key, now, 1); err != nil || !sd.Allowed {
					t.Fatalf("take %d admitted by a lease, refused by the strict store (%v)", i, err)
				}
			}
			h0, _ := leaseHeld(ls[0], key, now)
			h1, _ := leaseHeld(ls[1], key, now)
			held := h0 + h1
			if held == 0 || admitted == 0 {
				t.Fatalf("hot: %d admitted, %d held: no lease to look at", admitted, held)
			}
			got, want := inspect(now)
			for i := range got.Tiers {
				g, w := got.Tiers[i], want.Tiers[i]
				if bucket {
					if g.Remaining > w.Remaining-held {
						t.Fatalf("hot, tier %d: %d remaining, want at most the strict %d - %d held", i, g.Remaining, w.Remaining, held)
					}
					continue
				}
				if g.Used != w.Used+held || g.Remaining != w.Remaining-held {
					t.Fatalf("hot, tier %d: %+v, want the strict %+v with %d more used", i, g, w, held)
				}
			}

			// Every lease given back before it ends.
			for _, s := range ls {
				if err := s.Reap(ctx, true); err != nil {
					t.Fatal(err)
				}
			}
			got, want = inspect(now)
			for i := range got.Tiers {
				g, w := got.Tiers[i], want.Tiers[i]
				switch {
				case bucket:
					if g.Remaining > w.Remaining {
						t.Fatalf("given back, tier %d: %+v, want at most the strict %d remaining", i, g, w.Remaining)
					}
				case alg == algorithms.SlidingLog:
					if g.Used != w.Used || g.Remaining != w.Remaining || g.ResetAfter < w.ResetAfter {
						t.Fatalf("given back, tier %d:\nlease  %+v\nstrict %+v", i, g, w)
					}
				default:
					if g != w {
						t.Fatalf("given back, tier %d:\nlease  %+v\nstrict %+v", i, g, w)
					}
				}
			}
		})
	}
}

// TestLeaseReset: instance B holds a lease when A resets the key. A's own
// lease is dropped, the key is whole in Redis, B's units in hand are still
// admitted (a lease is not checked again), and what B gives back of them
// does not count: from the reset the two admit the limit plus the units B
// used from its old lease, no more, and no less.
func TestLeaseReset(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const key = "k"
	const events = 100
	for alg, cfg := range leaseConfigs(events, time.Second) {
		t.Run(alg, func(t *testing.T) {
			l := mustLimiter(t, alg, cfg)
			clk := storetest.NewClock(t0)
			ls := leaseStores(t, c, l, "reset-"+alg, 2, 100*time.Millisecond, clk)
			a, b := ls[0], ls[1]
			// Every step is 10µs: the whole run lasts less than a bucket
			// takes to refill one unit (10ms), within one window.
			now := t0
			take := func(s *LeaseStore) algorithms.Decision {
				t.Helper()
				now = now.Add(10 * time.Microsecond)
				clk.Set(now)
				d, err := s.Take(ctx, key, now, 1)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			for i := range 30 {
				take(ls[i%2])
			}
			heldB, genB := leaseHeld(b, key, now)
			if heldB < 4 {
				t.Fatalf("B holds %d units, want a lease to give back", heldB)
			}
			if held, _ := leaseHeld(a, key, now); held == 0 {
				t.Fatal("A holds no lease to drop")
			}

			if err := a.Reset(ctx, key); err != nil {
				t.Fatal(err)
			}
			if a.Len() != 0 {
				t.Fatalf("A still holds %d keys after the reset", a.Len())
			}
			if n, err := c.Exists(ctx, a.Keys(key)...).Result(); err != nil || n != 0 {
				t.Fatalf("%d Redis keys left after the reset (%v)", n, err)
			}
			ks, err := a.Inspect(ctx, key, now)
			if err != nil {
				t.Fatal(err)
			}
			if tr := ks.Tiers[0]; tr.Used != 0 || tr.Remaining != events {
				t.Fatalf("after the reset: %+v, want whole", tr)
			}

			// A counts anew, B uses half of what it held, then gives back
			// the rest.
			admitted, fromOld := 0, 0
			for range 5 {
				if take(a).Allowed {
					admitted++
				}
			}
			for range heldB / 2 {
				if d := take(b); !d.Allowed || d.Token != genB {
					t.Fatalf("B's lease in hand refused after the reset: %+v", d)
				}
				admitted++
				fromOld++
			}
			now = now.Add(10 * time.Microsecond)
			clk.Set(now)
			before, err := a.Inspect(ctx, key, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Reap(ctx, true); err != nil {
				t.Fatal(err)
			}
			after, err := a.Inspect(ctx, key, now)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("B's give-back of a lease from before the reset counted:\nbefore %+v\nafter  %+v", before, after)
			}
			for i := range 4 * events {
				if take(ls[i%2]).Allowed {
					admitted++
				}
			}
			// A bucket lends only below capacity - rate x lease (10
			// units here): the units above it are left to the requests
			// that call Redis, and may go unused when leases take the rest.
			want, least := events+fromOld, events+fromOld
			if alg == algorithms.TokenBucket || alg == algorithms.GCRA {
				least -= 10
			}
			if admitted > want || admitted < least {
				t.Fatalf("from the reset %d admitted, want the limit %d plus the %d B used of the %d it held (at least %d)", admitted, events, fromOld, heldB, least)
			}
		})
	}
}
