package redisstore

import (
	"context"
	"math"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// heldLeaseStore is a leasing store whose key "k" holds a lease that
// neither runs out nor ends, on a client never dialed: every Take of "k"
// is decided from the lease.
func heldLeaseStore(b *testing.B) *LeaseStore {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	b.Cleanup(func() { c.Close() })
	l := mustLimiter(b, algorithms.GCRA, oneTier(1_000_000, 3600e9))
	clk := storetest.NewClock(t0)
	s, err := newLeaseStore(c, l, Options{KeyPrefix: "rlbench:", Zone: "held"}, LeaseOptions{Duration: 3600e9, Now: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	sh := s.keys.Shard("k")
	sh.Lock()
	e := &s.entry(sh, "k").Value
	e.left, e.size, e.ends, e.gen = math.MaxInt64/2, math.MaxInt64/2, math.MaxInt64, 1
	sh.Unlock()
	return s
}

// BenchmarkLeaseTakeHeld is a Take decided from the key's lease: the
// leasing store's hot path.
func BenchmarkLeaseTakeHeld(b *testing.B) {
	s := heldLeaseStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Take(ctx, "k", t0, 1); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}
