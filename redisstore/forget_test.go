package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// takeWith is s's Take of cost 1 for key with the lease token token, as a
// Take whose answer was lost made it.
func takeWith(t *testing.T, s *Store, key string, token uint64) algorithms.Decision {
	t.Helper()
	c := storeCall{s: s, key: key, cost: 1, n: token}
	var r reply
	s.call(context.Background(), &c, &r)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return decisionOf(r.ints())
}

// ccState is how many units key holds in s and how many members (leases
// and tombstones) its sorted set has.
func ccState(t *testing.T, c *redis.Client, s *Store, key string) (held, members int64) {
	t.Helper()
	st, err := s.Inspect(context.Background(), key, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	members, err = c.ZCard(context.Background(), s.Keys(key)[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return st.Tiers[0].Limit - st.Tiers[0].Remaining, members
}

// A forget gives back the lease its take made; one that comes first (the
// take still unread on a connection Redis has not served yet) leaves a
// tombstone that the take consumes instead of a slot. Forgetting twice is
// harmless, and a tombstone nobody consumes holds no slot.
func TestForgetLease(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	s := mustStore(t, c, mustLimiter(t, algorithms.Concurrency, oneTier(2, time.Hour)), "forget")
	tok := func(i uint64) uint64 { return s.tokens + 1000 + i }
	expect := func(step string, held, members int64) {
		t.Helper()
		if h, m := ccState(t, c, s, "k"); h != held || m != members {
			t.Fatalf("%s: %d units held, %d members; want %d and %d", step, h, m, held, members)
		}
	}

	if d := takeWith(t, s, "k", tok(1)); !d.Allowed || d.Token != tok(1) {
		t.Fatalf("take: %+v, want admitted with token %d", d, tok(1))
	}
	expect("after a take", 1, 1)
	if err := s.forget(ctx, "k", 1, tok(1)); err != nil {
		t.Fatal(err)
	}
	expect("after its forget", 0, 0)

	if err := s.forget(ctx, "k", 1, tok(2)); err != nil {
		t.Fatal(err)
	}
	expect("after a forget that came first", 0, 1)
	if d := takeWith(t, s, "k", tok(2)); d.Allowed {
		t.Fatalf("the forgotten take: %+v, want nothing taken", d)
	}
	expect("after the forgotten take ran", 0, 0)

	for i := uint64(3); i <= 4; i++ {
		if d := takeWith(t, s, "k", tok(i)); !d.Allowed {
			t.Fatalf("take %d: %+v, want admitted", i, d)
		}
	}
	if d := takeWith(t, s, "k", tok(5)); d.Allowed {
		t.Fatalf("a third take of 2: %+v, want denied", d)
	}
	for range 2 {
		if err := s.forget(ctx, "k", 1, tok(3)); err != nil {
			t.Fatal(err)
		}
	}
	expect("after forgetting an admitted take twice", 1, 2) // tok(4)'s lease, tok(3)'s tombstone
	if d := takeWith(t, s, "k", tok(6)); !d.Allowed {
		t.Fatalf("a take beside a tombstone: %+v, want admitted", d)
	}
	expect("after a take beside a tombstone", 2, 3)
}

// A concurrency Take that times out on a hung Redis (stopped here) fails
// unsettled, through go-redis and through the direct connection: Redis
// runs it once it goes on, and its Forget then gives the lease back. A
// Take that could not reach Redis, or of another algorithm, fails
// settled: nothing to forget.
func TestTimedOutTakeUnsettled(t *testing.T) {
	srv := redistest.Start(t)
	for _, direct := range []bool{false, true} {
		name := "go-redis"
		if direct {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
			t.Cleanup(func() { c.Close() })
			o := Options{KeyPrefix: "rltest:", Zone: "unsettled-" + name}
			if direct {
				p := NewDirectPipeliner(c, 0)
				t.Cleanup(func() { p.Close() })
				o.Pipeliner = p
			}
			s, err := NewStore(c, mustLimiter(t, algorithms.Concurrency, oneTier(1, time.Hour)), o)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := s.Take(ctx, "warm", time.Time{}, 1); err != nil { // the connection and the script
				t.Fatal(err)
			}
			srv.Pause()
			_, err = s.Take(ctx, "k", time.Time{}, 1)
			srv.Resume()
			u, ok := errors.AsType[*store.Unsettled](err)
			if !ok {
				t.Fatalf("Take on a hung Redis: %v, want a store.Unsettled", err)
			}
			storetest.WaitFor(t, "the lost take to run", func() bool { h, _ := ccState(t, c, s, "k"); return h == 1 })
			if err := u.Forget(ctx); err != nil {
				t.Fatal(err)
			}
			if h, m := ccState(t, c, s, "k"); h != 0 || m != 0 {
				t.Fatalf("after the forget: %d units held, %d members, want none", h, m)
			}
		})
	}

	t.Run("settled", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		gcra := mustStore(t, c, mustLimiter(t, algorithms.GCRA, oneTier(1, time.Hour)), "settled-gcra")
		if _, err := gcra.Take(context.Background(), "warm", time.Time{}, 1); err != nil {
			t.Fatal(err)
		}
		srv.Pause()
		_, err := gcra.Take(context.Background(), "k", time.Time{}, 1)
		srv.Resume()
		if err == nil {
			t.Fatal("gcra Take on a hung Redis: no error")
		}
		if _, ok := errors.AsType[*store.Unsettled](err); ok {
			t.Fatalf("gcra Take: %v is unsettled: only a lease needs forgetting", err)
		}
		down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		t.Cleanup(func() { down.Close() })
		cc := mustStore(t, down, mustLimiter(t, algorithms.Concurrency, oneTier(1, time.Hour)), "settled-cc")
		_, err = cc.Take(context.Background(), "k", time.Time{}, 1)
		if err == nil {
			t.Fatal("Take without a Redis: no error")
		}
		if _, ok := errors.AsType[*store.Unsettled](err); ok {
			t.Fatalf("Take that could not dial: %v is unsettled", err)
		}
	})
}
