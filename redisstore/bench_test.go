package redisstore

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
//	go test -run '^$' -bench RedisTake -benchmem ./redisstore/
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

// BenchmarkSlidingLogFullKey measures the Redis time of one denied Take
// (EVALSHA's usec_per_call in INFO commandstats, reported as
// redis-µs/call) on a sliding_log key holding 100,000 runs (limit 100000
// 10m, full), for costs 1, 1,000 and 100,000: a client-chosen cost must not
// make a denial walk the log.
//
//	go test -run '^$' -bench SlidingLogFullKey ./redisstore/
func BenchmarkSlidingLogFullKey(b *testing.B) {
	const n = 100000
	_, c := newClient(b)
	ctx := context.Background()
	l, err := algorithms.New(algorithms.SlidingLog, algorithms.Config{Tiers: []algorithms.Tier{{Events: n, Window: 10 * time.Minute}}})
	if err != nil {
		b.Fatal(err)
	}
	s := mustStore(b, c, l, "bench-full")
	s.setMargin(time.Hour) // the instants are not the wall clock
	const key = "full"
	// One run per Take, each at its own µs, from 16 goroutines.
	var next atomic.Int64
	inParallel(16, func(int) {
		for {
			i := next.Add(1) - 1
			if i >= n {
				return
			}
			if _, err := s.Take(ctx, key, t0.Add(time.Duration(i)*time.Microsecond), 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	keys := s.Keys(key)
	if runs := c.ZCard(ctx, keys[len(keys)-1]).Val(); runs != n {
		b.Fatalf("the key holds %d runs, want %d", runs, n)
	}
	now := t0.Add(n * time.Microsecond)
	for _, cost := range []int64{1, 1000, n} {
		b.Run("cost_"+strconv.FormatInt(cost, 10), func(b *testing.B) {
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				d, err := s.Take(ctx, key, now, cost)
				if err != nil {
					b.Fatal(err)
				}
				if d.Allowed {
					b.Fatal("admitted on a full key")
				}
			}
			usec, ok := commandStat(b, c, "usec_per_call")["evalsha"]
			if !ok {
				b.Fatal("no evalsha in INFO commandstats")
			}
			b.ReportMetric(usec, "redis-µs/call")
		})
	}
}

// BenchmarkScriptLib measures the Redis time of an admitted Take (EVALSHA's
// usec_per_call, as redis-µs/call) per algorithm with each script as sent
// (lib.lua's functions it uses) and with the whole of lib.lua in front.
//
//	go test -run '^$' -bench ScriptLib ./redisstore/
func BenchmarkScriptLib(b *testing.B) {
	_, c := newClient(b)
	ctx := context.Background()
	lib := mustRead(b, "lib.lua")
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 1 << 30, Window: time.Second}, {Events: 1 << 40, Window: time.Hour}}}
	for _, name := range algorithms.Names {
		cfg := cfg
		if name == algorithms.Concurrency {
			cfg.Tiers = cfg.Tiers[:1]
		}
		s := mustStore(b, c, mustLimiter(b, name, cfg), "lib-"+name)
		whole := *s.script
		src, err := scriptText(scriptFS, name, false, generatedFor(name))
		if err != nil {
			b.Fatal(err)
		}
		whole.run = redis.NewScript(lib + "\n" + src)
		for _, v := range []struct {
			form string
			sc   *script
		}{{"used", s.script}, {"whole", &whole}} {
			b.Run(name+"/"+v.form, func(b *testing.B) {
				s.script = v.sc
				if err := c.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				i := 0
				for b.Loop() {
					if _, err := s.Take(ctx, strconv.Itoa(i&1023), time.Time{}, 1); err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.ReportMetric(commandStat(b, c, "usec_per_call")["evalsha"], "redis-µs/call")
			})
		}
	}
}
