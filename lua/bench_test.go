package lua

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// BenchmarkRedisTake measures one Take (one EVALSHA, Redis TIME) per
// algorithm against a local redis-server, over 1024 keys with a limit that
// is never reached (two tiers), serially (one request in flight: the round
// trip) and from 16 goroutines (throughput: ns/op is the wall time per Take
// with many in flight).
//
//	go test -run '^$' -bench RedisTake -benchmem ./lua/
func BenchmarkRedisTake(b *testing.B) {
	srv := newBenchServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv, PoolSize: 32, Protocol: 2})
	defer c.Close()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "10.0.0." + strconv.Itoa(i)
	}
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 1 << 30, Window: time.Second}, {Events: 1 << 40, Window: time.Hour}}}
	for _, name := range algorithms.Names {
		cfg := cfg
		if name == algorithms.Concurrency {
			cfg.Tiers = cfg.Tiers[:1]
		}
		l, err := algorithms.New(name, cfg)
		if err != nil {
			b.Fatal(err)
		}
		s := mustStore(b, c, l, "bench-"+name)
		ctx := context.Background()
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := s.Take(ctx, keys[i&1023], time.Time{}, 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8) // 8 goroutines per P: requests in flight, as under load
			var n atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := s.Take(ctx, keys[i&1023], time.Time{}, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func newBenchServer(b *testing.B) string {
	_, c := newClient(b)
	return c.Options().Addr
}
